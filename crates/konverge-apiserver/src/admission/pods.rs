//! The plugins that shape a new pod as kube-apiserver's do: `ServiceAccount` (the pod runs
//! as an existing ServiceAccount, `default` unless it names one, with its API token mounted)
//! and `DefaultTolerationSeconds` (five minutes on a not-ready or unreachable node).

use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;
use crate::lister::Lister;
use crate::resources::ResourceType;

/// Where the token volume is mounted in every container.
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the token volume's generated name.
const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
/// Mirror pods (from a kubelet's static manifests) are left as they are.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn is_pod_create(attributes: &Attributes<'_>) -> bool {
    attributes.creates("", "pods")
}

fn is_pods(rt: &ResourceType) -> bool {
    rt.is(crate::resources::PODS)
}

/// `ServiceAccount`: a new pod without `serviceAccountName` runs as `default`; the account
/// must exist (403 otherwise); unless the pod or the account opts out, a projected volume
/// `kube-api-access-xxxxx` (a token for the account, the cluster CA, the namespace) is
/// mounted read-only in every container at `/var/run/secrets/kubernetes.io/serviceaccount`;
/// the account's image pull secrets are the pod's if it names none.
#[derive(Debug, Clone, Copy)]
pub struct ServiceAccount;

#[async_trait::async_trait]
impl Plugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        is_pods(rt)
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        if !is_pod_create(attributes)
            || object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(MIRROR_ANNOTATION))
                .is_some()
        {
            return Ok(false);
        }
        if !object.get("spec").is_some_and(Value::is_object) {
            object["spec"] = json!({});
        }
        let account_name = match object["spec"]["serviceAccountName"].as_str() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => {
                object["spec"]["serviceAccountName"] = json!("default");
                "default".to_string()
            }
        };
        let Some(account) = find_account(registry, attributes.namespace, &account_name).await?
        else {
            return Err(super::plugins::forbidden(
                attributes,
                format!(
                    "error looking up service account {}/{account_name}: serviceaccount {account_name:?} not found",
                    attributes.namespace
                ),
            ));
        };
        let automount = object["spec"]["automountServiceAccountToken"]
            .as_bool()
            .or_else(|| account["automountServiceAccountToken"].as_bool())
            .unwrap_or(true);
        if automount {
            mount_token(&mut object["spec"]);
        }
        let names_secrets = object["spec"]["imagePullSecrets"]
            .as_array()
            .is_some_and(|s| !s.is_empty());
        if !names_secrets
            && let Some(secrets) = account["imagePullSecrets"]
                .as_array()
                .filter(|s| !s.is_empty())
        {
            object["spec"]["imagePullSecrets"] = Value::Array(
                secrets
                    .iter()
                    .map(|s| json!({"name": s["name"].as_str().unwrap_or("")}))
                    .collect(),
            );
        }
        Ok(true)
    }
}

/// How many times the `default` ServiceAccount is looked up before a pod is refused: the
/// namespace's controller creates it just after the namespace, and a pod created at once
/// must not lose that race (kube's plugin looks ten times).
const DEFAULT_ACCOUNT_ATTEMPTS: u32 = 10;

/// The ServiceAccount a new pod runs as, if it exists. `default` is looked up again, after
/// one random pause of 100-200 ms between attempts, while it is missing; another name once.
async fn find_account(registry: &dyn Lister, namespace: &str, name: &str) -> Result<Option<Value>> {
    let Some(rt) = registry.catalog().get("", "v1", "serviceaccounts") else {
        return Ok(None);
    };
    let attempts = if name == "default" {
        DEFAULT_ACCOUNT_ATTEMPTS
    } else {
        1
    };
    let pause = std::time::Duration::from_millis(100 + rand::random_range(0..100));
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(pause).await;
        }
        match registry.get(&rt, Some(namespace), name).await {
            Ok(account) => return Ok(Some(account)),
            Err(e) if e.reason == crate::error::Reason::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Mounts the token volume in every container that has nothing mounted at the token path,
/// and adds the projected volume (unless the pod has one) if any container mounts it.
fn mount_token(spec: &mut Value) {
    let existing = spec["volumes"].as_array().and_then(|volumes| {
        volumes.iter().find_map(|v| {
            let name = v["name"].as_str()?;
            (name.starts_with(TOKEN_VOLUME_PREFIX) && v.get("projected").is_some())
                .then(|| name.to_string())
        })
    });
    let volume = existing
        .clone()
        .unwrap_or_else(|| crate::resources::meta::generate_name(TOKEN_VOLUME_PREFIX));
    let mut needed = false;
    for field in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(field).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let mounted = container["volumeMounts"]
                .as_array()
                .is_some_and(|mounts| mounts.iter().any(|m| m["mountPath"] == TOKEN_PATH));
            if mounted {
                continue;
            }
            if !container["volumeMounts"].is_array() {
                container["volumeMounts"] = json!([]);
            }
            if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                mounts.push(json!({"name": volume, "readOnly": true, "mountPath": TOKEN_PATH}));
                needed = true;
            }
        }
    }
    if !needed || existing.is_some() {
        return;
    }
    if !spec["volumes"].is_array() {
        spec["volumes"] = json!([]);
    }
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        volumes.push(json!({
            "name": volume,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
                "defaultMode": 420,
            },
        }));
    }
}

/// `DefaultTolerationSeconds`: a new pod that does not tolerate `NoExecute` taints of
/// not-ready or unreachable nodes tolerates each for 300 seconds.
#[derive(Debug, Clone, Copy)]
pub struct DefaultTolerationSeconds;

#[async_trait::async_trait]
impl Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        is_pods(rt)
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        _registry: &dyn Lister,
    ) -> Result<bool> {
        if attributes.operation != Operation::Create || !is_pod_create(attributes) {
            return Ok(false);
        }
        if !object.get("spec").is_some_and(Value::is_object) {
            object["spec"] = json!({});
        }
        let tolerations = object["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let tolerates = |taint: &str| {
            tolerations.iter().any(|t| {
                let key = t["key"].as_str().unwrap_or("");
                let effect = t["effect"].as_str().unwrap_or("");
                (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
            })
        };
        let mut added = Vec::new();
        for taint in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !tolerates(taint) {
                added.push(json!({
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }));
            }
        }
        if added.is_empty() {
            return Ok(false);
        }
        let mut all = tolerations;
        all.extend(added);
        object["spec"]["tolerations"] = Value::Array(all);
        Ok(true)
    }
}
