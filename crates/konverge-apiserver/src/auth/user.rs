//! Who a request is from: a user name, uid, groups and extra values, as kube-apiserver's
//! authenticators produce them, and the well-known names.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The group whose members may do anything, whatever RBAC says.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Added to every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of requests without credentials.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of requests without credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of every ServiceAccount.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// What the authenticators say about a request's sender.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// The user name (`system:serviceaccount:ns:name` for a ServiceAccount).
    pub name: String,
    /// A unique id, if the authenticator knows one (a ServiceAccount's uid).
    pub uid: String,
    /// The groups.
    pub groups: Vec<String>,
    /// Extra values (`authentication.kubernetes.io/credential-id`, ...).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with these groups.
    pub fn new(name: impl Into<String>, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        }
    }

    /// The admin the server's bearer token stands for (`kubernetes-admin`, in
    /// `system:masters`).
    pub fn admin() -> UserInfo {
        UserInfo::new(crate::ADMIN_USER, &crate::ADMIN_GROUPS)
    }

    /// A request without credentials.
    pub fn anonymous() -> UserInfo {
        UserInfo::new(ANONYMOUS, &[UNAUTHENTICATED])
    }

    /// The ServiceAccount `namespace/name` with uid `uid`, and its groups.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> UserInfo {
        UserInfo {
            name: service_account_username(namespace, name),
            uid: uid.to_string(),
            groups: vec![
                SERVICE_ACCOUNTS.to_string(),
                format!("{SERVICE_ACCOUNTS}:{namespace}"),
                AUTHENTICATED.to_string(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// `userInfo` as the authentication API writes it (`TokenReview`, `SelfSubjectReview`):
    /// empty fields left out.
    pub fn to_json(&self) -> Value {
        let mut info = json!({"username": self.name});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            info["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            info["extra"] = json!(self.extra);
        }
        info
    }
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The namespace and name of a ServiceAccount user name, if it is one.
pub fn split_service_account_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_names_round_trip() {
        let user = UserInfo::service_account("d", "builder", "u-1");
        assert_eq!(user.name, "system:serviceaccount:d:builder");
        assert_eq!(
            split_service_account_username(&user.name),
            Some(("d", "builder"))
        );
        assert_eq!(
            split_service_account_username("system:serviceaccount:d"),
            None
        );
        assert_eq!(
            split_service_account_username("system:serviceaccount:d:a:b"),
            None
        );
        assert_eq!(split_service_account_username("alice"), None);
        assert_eq!(
            user.to_json(),
            json!({"username": "system:serviceaccount:d:builder", "uid": "u-1", "groups": ["system:serviceaccounts", "system:serviceaccounts:d", "system:authenticated"]})
        );
    }
}
