//! Pod state as kcm's controllers read it (kcm's `podutil` and `controller_utils.go`), and
//! pods made from a controller's template.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodTemplateSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// A pod still counted by its controller: neither Succeeded nor Failed, and not being
/// deleted (kcm's `IsPodActive`).
pub fn is_active(pod: &Pod) -> bool {
    let phase = phase(pod);
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's `status.phase` (`""` when unset).
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The pod's condition of `type_`, if it has one.
pub fn condition<'p>(pod: &'p Pod, type_: &str) -> Option<&'p PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The pod's Ready condition is True (kcm's `IsPodReady`).
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// The pod has been Ready for at least `min_ready_seconds` at `now` (kcm's
/// `IsPodAvailable`: with a zero `minReadySeconds`, Ready is available).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(ready) = condition(pod, "Ready").filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    let Some(since) = &ready.last_transition_time else {
        return false;
    };
    since
        .0
        .checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds)))
        .is_ok_and(|available_at| available_at < now)
}

/// The pod is being deleted or has finished (kcm's `IsPodTerminal` or a deletion timestamp).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The `generateName` of the pods a controller named `owner` makes (kcm's `getPodsPrefix`):
/// `owner-`, or the name itself where the dash would make it too long for a pod name.
pub fn generate_name(owner: &str) -> String {
    if owner.len() < 253 {
        format!("{owner}-")
    } else {
        owner.to_string()
    }
}

/// A pod from `template` for the controller `owner` (kcm's `GetPodFromTemplate`): the
/// template's labels, annotations, finalizers and spec, `generateName` from the owner's
/// name, in the owner's namespace, controlled by `owner_ref`.
pub fn from_template(
    template: &PodTemplateSpec,
    owner: &ObjectMeta,
    owner_ref: Option<OwnerReference>,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name(owner.name.as_deref().unwrap_or_default())),
            namespace: owner.namespace.clone(),
            labels: meta.labels.filter(|l| !l.is_empty()),
            annotations: meta.annotations.filter(|a| !a.is_empty()),
            finalizers: meta.finalizers.filter(|f| !f.is_empty()),
            owner_references: owner_ref.map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Whether `toleration` tolerates `taint` (kube's `Toleration.ToleratesTaint`, which the
/// scheduler, the DaemonSet controller and taint eviction all use): the same effect (or any,
/// when empty), the same key (or any, when empty), and for `Equal` (the default) the same
/// value; `Exists` ignores the value.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

/// The labels of `pod` (empty when it has none).
pub fn labels(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ready_since(seconds: i64) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(
                        Timestamp::from_second(seconds).expect("a time"),
                    )),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn availability_waits_min_ready_seconds_past_the_ready_transition() {
        let pod = ready_since(1_000);
        let at = |s| Timestamp::from_second(s).expect("a time");
        assert!(is_available(&pod, 0, at(1_000)));
        assert!(!is_available(&pod, 10, at(1_010)), "not strictly after");
        assert!(is_available(&pod, 10, at(1_011)));
        assert!(!is_available(&Pod::default(), 0, at(1_011)));
    }

    #[test]
    fn finished_and_deleted_pods_are_not_active() {
        let mut pod = ready_since(0);
        assert!(is_active(&pod));
        pod.status.as_mut().expect("status").phase = Some("Succeeded".into());
        assert!(!is_active(&pod));
        let mut deleted = ready_since(0);
        deleted.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(!is_active(&deleted));
    }

    #[test]
    fn pods_from_a_template_carry_its_metadata_and_the_owner() {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}
        }))
        .expect("a template");
        let owner = ObjectMeta {
            name: Some("web-7d4b9c".into()),
            namespace: Some("shop".into()),
            ..ObjectMeta::default()
        };
        let pod = from_template(&template, &owner, None);
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-7d4b9c-"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(labels(&pod).get("app").map(String::as_str), Some("web"));
        assert_eq!(pod.spec, template.spec);
    }
}
