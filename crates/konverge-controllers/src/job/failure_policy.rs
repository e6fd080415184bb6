//! Pod failure policies: what a failed pod's exit codes or conditions mean for its Job
//! (kcm's `pod_failure_policy.go`).

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use kube::ResourceExt;

/// What the first matching rule says of a failed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// A `FailJob` rule matched: the Job fails with this message.
    pub fail_job: Option<String>,
    /// The failure counts towards `backoffLimit` (and `backoffLimitPerIndex`); an
    /// `Ignore` rule says it does not.
    pub counts: bool,
    /// The action of the rule that matched.
    pub action: Option<&'static str>,
}

impl Verdict {
    const NO_MATCH: Verdict = Verdict {
        fail_job: None,
        counts: true,
        action: None,
    };

    fn action(action: &'static str) -> Verdict {
        Verdict {
            fail_job: None,
            counts: action != "Ignore",
            action: Some(action),
        }
    }
}

/// Matches a failed pod against the Job's rules, first match wins (kcm's
/// `matchPodFailurePolicy`).
pub fn matches(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let Some(policy) = policy else {
        return Verdict::NO_MATCH;
    };
    for (n, rule) in policy.rules.iter().enumerate() {
        if let Some(requirement) = &rule.on_exit_codes {
            let Some(container) = exit_code_match(pod, requirement) else {
                continue;
            };
            let code = terminated_exit_code(container).unwrap_or_default();
            let message = || {
                format!(
                    "Container {} for pod {}/{} failed with exit code {code} matching {} rule at index {n}",
                    container.name,
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    rule.action
                )
            };
            if let Some(verdict) = verdict(&rule.action, message) {
                return verdict;
            }
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let Some(condition) = condition_match(pod, patterns) else {
                continue;
            };
            let message = || {
                format!(
                    "Pod {}/{} has condition {} matching {} rule at index {n}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    condition.type_,
                    rule.action
                )
            };
            if let Some(verdict) = verdict(&rule.action, message) {
                return verdict;
            }
        }
    }
    Verdict::NO_MATCH
}

/// The verdict of a matching rule's action (`None`: an action kcm does not know, which
/// ends nothing and lets the next rule match).
fn verdict(action: &str, message: impl FnOnce() -> String) -> Option<Verdict> {
    match action {
        "Ignore" => Some(Verdict::action("Ignore")),
        "FailIndex" => Some(Verdict::action("FailIndex")),
        "Count" => Some(Verdict::action("Count")),
        "FailJob" => Some(Verdict {
            fail_job: Some(message()),
            counts: true,
            action: Some("FailJob"),
        }),
        _ => None,
    }
}

fn terminated_exit_code(status: &ContainerStatus) -> Option<i32> {
    Some(status.state.as_ref()?.terminated.as_ref()?.exit_code)
}

/// The first terminated container (then init container) whose non-zero exit code the
/// requirement matches.
fn exit_code_match<'p>(
    pod: &'p Pod,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'p ContainerStatus> {
    let status = pod.status.as_ref()?;
    let find = |list: Option<&'p Vec<ContainerStatus>>| {
        list.into_iter().flatten().find(|c| {
            let Some(code) = terminated_exit_code(c) else {
                return false;
            };
            requirement
                .container_name
                .as_deref()
                .is_none_or(|name| name == c.name)
                && code != 0
                && match requirement.operator.as_str() {
                    "In" => requirement.values.contains(&code),
                    "NotIn" => !requirement.values.contains(&code),
                    _ => false,
                }
        })
    };
    find(status.container_statuses.as_ref())
        .or_else(|| find(status.init_container_statuses.as_ref()))
}

fn condition_match<'p>(
    pod: &'p Pod,
    patterns: &[PodFailurePolicyOnPodConditionsPattern],
) -> Option<&'p PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| {
        patterns
            .iter()
            .any(|p| p.type_ == c.type_ && p.status == c.status)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed_with(code: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": code}}}
            ], "conditions": [{"type": "DisruptionTarget", "status": "True"}]}
        }))
        .expect("a pod")
    }

    #[test]
    fn first_matching_rule_decides() {
        let policy: PodFailurePolicy = serde_json::from_value(json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]}))
        .expect("a policy");
        let verdict = matches(Some(&policy), &failed_with(42));
        assert_eq!(verdict.action, Some("Ignore"));
        assert!(!verdict.counts);
        let only_exit: PodFailurePolicy = serde_json::from_value(json!({"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]}))
        .expect("a policy");
        assert_eq!(
            matches(Some(&only_exit), &failed_with(42))
                .fail_job
                .as_deref(),
            Some(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0"
            )
        );
        assert_eq!(
            matches(Some(&only_exit), &failed_with(1)),
            Verdict::NO_MATCH
        );
    }
}
