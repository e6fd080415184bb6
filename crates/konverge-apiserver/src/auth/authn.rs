//! Authentication: who sent a request, from its credentials, as kube-apiserver's
//! authenticators decide it — then who it acts as, through the impersonation headers.
//!
//! - `Authorization: Bearer <token>`: the server's own token is the admin (`kubernetes-admin`
//!   in `system:masters`); a ServiceAccount token the server signed is its ServiceAccount,
//!   while the token is unexpired, is for the API's audience, and the ServiceAccount (and the
//!   pod the token is bound to) still exists with the uid it was issued for. Any other token
//!   is 401 Unauthorized, never anonymous.
//! - A client certificate the server's CA signed (verified by the TLS layer, which hands what
//!   its subject says to [`Authenticator::authenticate`]): the user is its CN, the groups its
//!   Os (see [`super::x509`]). It comes before any token; one without a CN falls through to it.
//! - No credentials: `system:anonymous` in `system:unauthenticated` — or, on a server that
//!   requires no token at all (an in-process test server), the admin.
//!
//! Impersonation (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>`) then replaces the
//! user, each part authorized with the `impersonate` verb on `users`, `groups`,
//! `serviceaccounts`, `uids` or `userextras/<key>`.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::HeaderMap;
use serde_json::Value;

use super::authz::{Attributes, Authorization};
use super::tokens::ServiceAccountTokens;
use super::user::{ANONYMOUS, AUTHENTICATED, SERVICE_ACCOUNTS, UNAUTHENTICATED, UserInfo};
use crate::error::ApiError;
use crate::lister::Lister;

/// What a client certificate verified by the TLS layer says about its holder (put in each
/// request's extensions; read with [`ClientCertificate::from_der`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The subject's common name: the user (empty: the certificate authenticates nobody).
    pub common_name: String,
    /// The subject's organizations: the groups.
    pub organizations: Vec<String>,
    /// The subject's kube UID attributes: the user's uid (more than one, or an empty one, is
    /// an error).
    pub uids: Vec<String>,
    /// `X509SHA256=<hex SHA-256 of the certificate>`: the user's
    /// `authentication.kubernetes.io/credential-id`.
    pub credential_id: String,
}

/// How long after a bound pod is deleted its tokens still authenticate (kube's grace).
const POD_DELETION_GRACE_SECONDS: i64 = 60;

/// Turns credentials into a user.
#[derive(Debug, Clone)]
pub struct Authenticator {
    admin_token: Option<String>,
    tokens: Arc<ServiceAccountTokens>,
}

impl Authenticator {
    /// Accepts `admin_token` (if any) and the tokens `tokens` signs.
    pub fn new(admin_token: Option<String>, tokens: Arc<ServiceAccountTokens>) -> Authenticator {
        Authenticator {
            admin_token,
            tokens,
        }
    }

    /// Whether requests without credentials are the admin (no token is required).
    pub fn unsecured(&self) -> bool {
        self.admin_token.is_none()
    }

    /// Who sent a request with these headers (and client certificate, over TLS).
    pub async fn authenticate(
        &self,
        registry: &dyn Lister,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificate>,
    ) -> Result<UserInfo, ApiError> {
        // As kube-apiserver's authenticators are chained: the certificate first; a certificate
        // that names nobody falls through to the token, one that is wrong (several uids) too,
        // but is then no anonymous request.
        let mut failed = false;
        if let Some(certificate) = certificate.filter(|c| !c.common_name.is_empty()) {
            match certificate_user(certificate) {
                Some(user) => return Ok(user),
                None => failed = true,
            }
        }
        let Some(token) = bearer(headers) else {
            return if failed {
                Err(ApiError::unauthorized())
            } else if self.unsecured() {
                Ok(UserInfo::admin())
            } else {
                Ok(UserInfo::anonymous())
            };
        };
        // kube-apiserver's `--api-audiences` defaults to the issuer.
        let audiences = [self.tokens.issuer().to_string()];
        match self.token(registry, token, &audiences).await {
            Some((user, _)) => Ok(user),
            None => Err(ApiError::unauthorized()),
        }
    }

    /// The user a bearer token stands for, and the audiences (of `audiences`) it is for; what
    /// a `TokenReview` answers.
    pub async fn token(
        &self,
        registry: &dyn Lister,
        token: &str,
        audiences: &[String],
    ) -> Option<(UserInfo, Vec<String>)> {
        if token.is_empty() {
            return None;
        }
        if let Some(admin) = &self.admin_token
            && constant_time_eq(token.as_bytes(), admin.as_bytes())
        {
            return Some((UserInfo::admin(), audiences.to_vec()));
        }
        let now = jiff::Timestamp::now().as_second();
        let claims = self.tokens.verify(token, audiences, now)?;
        // The token dies with its ServiceAccount, and with the pod it is bound to.
        let account = read(
            registry,
            "serviceaccounts",
            Some(claims.namespace.as_str()),
            &claims.name,
        )
        .await?;
        if account.pointer("/metadata/uid").and_then(Value::as_str) != Some(claims.uid.as_str())
            || account.pointer("/metadata/deletionTimestamp").is_some()
        {
            return None;
        }
        let mut extra = BTreeMap::from([(
            CREDENTIAL_ID.to_string(),
            vec![format!("JTI={}", claims.id)],
        )]);
        if let Some(bound) = &claims.bound {
            use super::tokens::BoundKind;
            let (plural, namespace) = match bound.kind {
                BoundKind::Pod => ("pods", Some(claims.namespace.as_str())),
                BoundKind::Secret => ("secrets", Some(claims.namespace.as_str())),
                BoundKind::Node => ("nodes", None),
            };
            let object = read(registry, plural, namespace, &bound.name).await?;
            if object.pointer("/metadata/uid").and_then(Value::as_str) != Some(bound.uid.as_str()) {
                return None;
            }
            let deleted = object
                .pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            // A pod's tokens outlive the start of its deletion by a grace period; other
            // objects' die with it.
            let gone = match (bound.kind, deleted) {
                (_, None) => false,
                (BoundKind::Pod, Some(d)) => d.as_second() + POD_DELETION_GRACE_SECONDS < now,
                (_, Some(_)) => true,
            };
            if gone {
                return None;
            }
            let key = match bound.kind {
                BoundKind::Pod => "pod",
                BoundKind::Secret => "secret",
                BoundKind::Node => "node",
            };
            extra.insert(
                format!("authentication.kubernetes.io/{key}-name"),
                vec![bound.name.clone()],
            );
            extra.insert(
                format!("authentication.kubernetes.io/{key}-uid"),
                vec![bound.uid.clone()],
            );
        }
        let mut user = UserInfo::service_account(&claims.namespace, &claims.name, &claims.uid);
        user.extra = extra;
        Some((user, claims.audiences))
    }
}

/// The user a client certificate names (see [`super::x509`]); `None` when its uid is
/// unusable.
fn certificate_user(certificate: &ClientCertificate) -> Option<UserInfo> {
    let uid = match certificate.uids.as_slice() {
        [] => String::new(),
        [uid] if !uid.is_empty() => uid.clone(),
        _ => return None,
    };
    let mut user = UserInfo {
        name: certificate.common_name.clone(),
        uid,
        groups: certificate.organizations.clone(),
        extra: BTreeMap::from([(
            CREDENTIAL_ID.to_string(),
            vec![certificate.credential_id.clone()],
        )]),
    };
    // kube's authenticated-group adder: not for the anonymous user, nor twice.
    if user.name != ANONYMOUS
        && !user
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
    {
        user.groups.push(AUTHENTICATED.into());
    }
    Some(user)
}

/// The extra key naming the credential a user authenticated with.
const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// The bearer token of `Authorization: Bearer <token>` (the scheme in any case), if the
/// header is one; `Some("")` for a bearer header without a token (refused as invalid).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let mut parts = value.trim().splitn(2, ' ');
    let scheme = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    Some(parts.next().unwrap_or("").trim())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn read(
    registry: &dyn Lister,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    let rt = registry.catalog().get("", "v1", plural)?;
    registry.get(&rt, namespace, name).await.ok()
}

const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_GROUP: &str = "impersonate-group";
const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_EXTRA: &str = "impersonate-extra-";

/// One thing a request asks to act as.
#[derive(Debug)]
enum Acting {
    ServiceAccount { namespace: String, name: String },
    User(String),
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

/// The user `requester` acts as, after the impersonation headers (each part authorized);
/// `requester` itself when there are none.
pub async fn impersonate(
    authorization: &Authorization,
    requester: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let acting = impersonation_requests(headers)?;
    if acting.is_empty() {
        return Ok(requester);
    }
    let groups_given = headers.contains_key(IMPERSONATE_GROUP);
    let mut user = UserInfo::default();
    for act in acting {
        let mut check = Attributes {
            user: requester.clone(),
            verb: "impersonate".into(),
            resource_request: true,
            api_version: "v1".into(),
            ..Attributes::default()
        };
        match act {
            Acting::ServiceAccount { namespace, name } => {
                check.resource = "serviceaccounts".into();
                check.namespace = namespace.clone();
                check.name = name.clone();
                user.name = super::user::service_account_username(&namespace, &name);
                if !groups_given {
                    user.groups = vec![
                        SERVICE_ACCOUNTS.to_string(),
                        format!("{SERVICE_ACCOUNTS}:{namespace}"),
                    ];
                }
            }
            Acting::User(name) => {
                check.resource = "users".into();
                check.name = name.clone();
                user.name = name;
            }
            Acting::Group(name) => {
                check.resource = "groups".into();
                check.name = name.clone();
                user.groups.push(name);
            }
            Acting::Extra { key, value } => {
                check.api_group = "authentication.k8s.io".into();
                check.resource = "userextras".into();
                check.subresource = key.clone();
                check.name = value.clone();
                user.extra.entry(key).or_default().push(value);
            }
            Acting::Uid(uid) => {
                check.api_group = "authentication.k8s.io".into();
                check.resource = "uids".into();
                check.name = uid.clone();
                user.uid = uid;
            }
        }
        authorization.check(&check).await?;
    }
    if user.name != ANONYMOUS {
        if !user
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            user.groups.push(AUTHENTICATED.into());
        }
    } else if !user.in_group(UNAUTHENTICATED) {
        user.groups.push(UNAUTHENTICATED.into());
    }
    Ok(user)
}

/// What the impersonation headers ask for, in kube's order: the user, the groups, the
/// extras, the uid.
fn impersonation_requests(headers: &HeaderMap) -> Result<Vec<Acting>, ApiError> {
    let text = |value: &http::HeaderValue| value.to_str().unwrap_or("").to_string();
    let mut acting = Vec::new();
    let user = headers.get(IMPERSONATE_USER).map(text).unwrap_or_default();
    let has_user = !user.is_empty();
    if has_user {
        acting.push(match super::user::split_service_account_username(&user) {
            Some((namespace, name)) => Acting::ServiceAccount {
                namespace: namespace.into(),
                name: name.into(),
            },
            None => Acting::User(user),
        });
    }
    let groups: Vec<String> = headers
        .get_all(IMPERSONATE_GROUP)
        .iter()
        .map(text)
        .collect();
    let mut extras: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(IMPERSONATE_EXTRA) {
            // Header names are lower case already; the key is percent-decoded.
            extras.push((
                konverge_apimachinery::escape::percent_decode_or_keep(key),
                text(value),
            ));
        }
    }
    let uid = headers.get(IMPERSONATE_UID).map(text).unwrap_or_default();
    let others = !groups.is_empty() || !extras.is_empty() || !uid.is_empty();
    acting.extend(groups.into_iter().map(Acting::Group));
    acting.extend(
        extras
            .into_iter()
            .map(|(key, value)| Acting::Extra { key, value }),
    );
    if !uid.is_empty() {
        acting.push(Acting::Uid(uid));
    }
    if others && !has_user {
        return Err(ApiError::bad_request(format!(
            "requested {} without impersonating a user",
            describe(&acting)
        )));
    }
    Ok(acting)
}

/// The requests as kube prints them in its error (Go's `%v` of object references).
fn describe(acting: &[Acting]) -> String {
    let refs: Vec<String> = acting
        .iter()
        .map(|a| match a {
            Acting::Group(name) => format!("{{Group  {name}    }}"),
            Acting::Extra { key, value } => {
                format!("{{UserExtra  {value}  authentication.k8s.io/v1  {key}}}")
            }
            Acting::Uid(uid) => format!("{{UID  {uid}  authentication.k8s.io/v1  }}"),
            Acting::User(name) => format!("{{User  {name}    }}"),
            Acting::ServiceAccount { namespace, name } => {
                format!("{{ServiceAccount {namespace} {name}    }}")
            }
        })
        .collect();
    format!("[{}]", refs.join(" "))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn bearer_tokens_are_read_in_any_case() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert("authorization", HeaderValue::from_static("bearer abc"));
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert("authorization", HeaderValue::from_static("Bearer"));
        assert_eq!(bearer(&headers), Some(""));
        headers.insert("authorization", HeaderValue::from_static("Basic YTpi"));
        assert_eq!(bearer(&headers), None);
    }

    #[test]
    fn certificates_name_users_as_kube_apiserver_names_them() {
        let mut certificate = ClientCertificate {
            common_name: "alice".into(),
            organizations: vec!["devs".into(), "ops".into()],
            uids: vec![],
            credential_id: "X509SHA256=ab".into(),
        };
        let user = certificate_user(&certificate).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "");
        assert_eq!(user.groups, ["devs", "ops", AUTHENTICATED]);
        assert_eq!(user.extra[CREDENTIAL_ID], ["X509SHA256=ab"]);

        // Already authenticated (or explicitly not): no second group.
        certificate.organizations = vec![AUTHENTICATED.into()];
        assert_eq!(
            certificate_user(&certificate).unwrap().groups,
            [AUTHENTICATED]
        );
        certificate.organizations = vec![UNAUTHENTICATED.into()];
        assert_eq!(
            certificate_user(&certificate).unwrap().groups,
            [UNAUTHENTICATED]
        );

        // One uid is the user's; several, or an empty one, authenticate nobody.
        certificate.uids = vec!["u-1".into()];
        assert_eq!(certificate_user(&certificate).unwrap().uid, "u-1");
        certificate.uids = vec!["u-1".into(), "u-2".into()];
        assert!(certificate_user(&certificate).is_none());
        certificate.uids = vec![String::new()];
        assert!(certificate_user(&certificate).is_none());
    }

    #[test]
    fn impersonation_needs_a_user_and_reads_every_header() {
        let mut headers = HeaderMap::new();
        headers.append(IMPERSONATE_GROUP, HeaderValue::from_static("devs"));
        let e = impersonation_requests(&headers).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message.ends_with("without impersonating a user"),
            "{}",
            e.message
        );
        headers.insert(
            IMPERSONATE_USER,
            HeaderValue::from_static("system:serviceaccount:d:builder"),
        );
        headers.insert(
            "impersonate-extra-scopes%2fv1",
            HeaderValue::from_static("view"),
        );
        let acting = impersonation_requests(&headers).unwrap();
        assert!(
            matches!(&acting[0], Acting::ServiceAccount { namespace, name } if namespace == "d" && name == "builder")
        );
        assert!(matches!(&acting[1], Acting::Group(g) if g == "devs"));
        assert!(
            matches!(&acting[2], Acting::Extra { key, value } if key == "scopes/v1" && value == "view")
        );
    }
}
