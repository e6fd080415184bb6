//! `--allow-privileged=false`: kube-apiserver's container validation (`ValidateSecurityContext`)
//! refuses `securityContext.privileged: true` when the cluster does not allow privileged
//! containers. It is part of pod spec validation, so every kind whose validation checks a pod
//! spec refuses it: pods (and their ephemeral containers), pod templates, and the templates of
//! ReplicationControllers, Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and
//! CronJobs.
//!
//! kube-apiserver reads the policy from a process-wide setting; here it is the server's own:
//! a server that refuses privileged containers serves these kinds with validators that add the
//! check to their usual ones ([`refuse_privileged`]).

use serde_json::Value;

use super::cron::cron_job;
use super::pod::pod;
use super::workloads::{
    daemon_set, deployment, job, pod_template, replica_set, replication_controller, stateful_set,
};
use crate::error::Cause;
use crate::resources::{Catalog, Validator};

/// What kube-apiserver says of a privileged container when they are not allowed.
const DISALLOWED: &str = "disallowed by cluster policy";

/// The containers of the pod spec at `path` that ask to be privileged, each refused at its
/// `securityContext.privileged`, in kube-apiserver's order: containers, init containers,
/// ephemeral containers.
fn privileged(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for (i, container) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if container.pointer("/securityContext/privileged") == Some(&Value::Bool(true)) {
                causes.push(Cause::forbidden(
                    format!("{path}.{list}[{i}].securityContext.privileged"),
                    DISALLOWED,
                ));
            }
        }
    }
}

/// A validator that runs the kind's own, then refuses privileged containers in the pod spec
/// at `$pointer` (reported at `$path`).
macro_rules! refusing {
    ($name:ident, $validate:path, $pointer:literal, $path:literal) => {
        fn $name(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
            let mut causes = $validate(obj, old);
            if let Some(spec) = obj.pointer($pointer) {
                privileged(spec, $path, &mut causes);
            }
            causes
        }
    };
}

refusing!(pod_refusing, pod, "/spec", "spec");
refusing!(
    pod_template_refusing,
    pod_template,
    "/template/spec",
    "template.spec"
);
refusing!(
    replication_controller_refusing,
    replication_controller,
    "/spec/template/spec",
    "spec.template.spec"
);
refusing!(
    deployment_refusing,
    deployment,
    "/spec/template/spec",
    "spec.template.spec"
);
refusing!(
    replica_set_refusing,
    replica_set,
    "/spec/template/spec",
    "spec.template.spec"
);
refusing!(
    stateful_set_refusing,
    stateful_set,
    "/spec/template/spec",
    "spec.template.spec"
);
refusing!(
    daemon_set_refusing,
    daemon_set,
    "/spec/template/spec",
    "spec.template.spec"
);
refusing!(
    job_refusing,
    job,
    "/spec/template/spec",
    "spec.template.spec"
);
refusing!(
    cron_job_refusing,
    cron_job,
    "/spec/jobTemplate/spec/template/spec",
    "spec.jobTemplate.spec.template.spec"
);

/// The kinds whose validation checks a pod spec, by group and kind, with the validator that
/// also refuses privileged containers.
const REFUSING: [(&str, &str, Validator); 9] = [
    ("", "Pod", pod_refusing),
    ("", "PodTemplate", pod_template_refusing),
    ("", "ReplicationController", replication_controller_refusing),
    ("apps", "Deployment", deployment_refusing),
    ("apps", "ReplicaSet", replica_set_refusing),
    ("apps", "StatefulSet", stateful_set_refusing),
    ("apps", "DaemonSet", daemon_set_refusing),
    ("batch", "Job", job_refusing),
    ("batch", "CronJob", cron_job_refusing),
];

/// Makes `catalog` (one server's) refuse privileged containers, as kube-apiserver does with
/// `--allow-privileged=false`.
pub(crate) fn refuse_privileged(catalog: &Catalog) {
    for rt in catalog.all() {
        let Some((_, _, validate)) = REFUSING
            .iter()
            .find(|(group, kind, _)| rt.group == *group && rt.kind == *kind)
        else {
            continue;
        };
        let mut refusing = (*rt).clone();
        refusing.validate = Some(*validate);
        catalog.insert(refusing);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn causes_of(validate: Validator, obj: &Value) -> Vec<String> {
        validate(obj, None)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn container(name: &str, privileged: bool) -> Value {
        json!({"name": name, "image": "busybox", "securityContext": {"privileged": privileged}})
    }

    #[test]
    fn privileged_containers_of_every_list_are_refused_where_they_are() {
        let pod = json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [container("a", false), container("b", true)],
                "initContainers": [container("i", true)],
                "ephemeralContainers": [
                    {"name": "e", "image": "busybox", "securityContext": {"privileged": true}},
                ],
            },
        });
        let mut causes = Vec::new();
        privileged(&pod["spec"], "spec", &mut causes);
        let shown: Vec<String> = causes
            .iter()
            .map(|c| format!("{} {}: {}", c.reason, c.field, c.message))
            .collect();
        assert_eq!(
            shown,
            [
                "FieldValueForbidden spec.containers[1].securityContext.privileged: Forbidden: disallowed by cluster policy",
                "FieldValueForbidden spec.initContainers[0].securityContext.privileged: Forbidden: disallowed by cluster policy",
                "FieldValueForbidden spec.ephemeralContainers[0].securityContext.privileged: Forbidden: disallowed by cluster policy",
            ]
        );
    }

    #[test]
    fn the_refusing_validators_keep_the_kinds_own_checks() {
        // A CronJob's template, refused at its full path.
        let cron = json!({
            "metadata": {"name": "c"},
            "spec": {
                "schedule": "*/5 * * * *",
                "jobTemplate": {"spec": {"template": {"spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [container("a", true)],
                }}}},
            },
        });
        assert_eq!(
            causes_of(cron_job_refusing, &cron),
            [
                "spec.jobTemplate.spec.template.spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy"
            ]
        );
        // The kind's own problems are still found, and an unprivileged spec passes.
        let mut broken = cron.clone();
        broken["spec"]["schedule"] = json!("never");
        let causes = causes_of(cron_job_refusing, &broken);
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert!(causes[0].starts_with("spec.schedule: "), "{causes:?}");
        let mut fine = cron;
        fine["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["securityContext"]
            ["privileged"] = json!(false);
        assert_eq!(causes_of(cron_job_refusing, &fine), Vec::<String>::new());
    }

    #[test]
    fn only_the_pod_spec_kinds_of_one_catalog_change() {
        let catalog = Catalog::builtin();
        let untouched = Catalog::builtin();
        refuse_privileged(&catalog);
        let validator = |catalog: &Catalog, group: &str, plural: &str| {
            catalog
                .get(group, "v1", plural)
                .and_then(|rt| rt.validate)
                .expect("validated")
        };
        for (group, plural) in [
            ("", "pods"),
            ("", "podtemplates"),
            ("", "replicationcontrollers"),
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("apps", "statefulsets"),
            ("apps", "daemonsets"),
            ("batch", "jobs"),
            ("batch", "cronjobs"),
        ] {
            assert!(
                !std::ptr::fn_addr_eq(
                    validator(&catalog, group, plural),
                    validator(&untouched, group, plural)
                ),
                "{plural}"
            );
        }
        assert!(std::ptr::fn_addr_eq(
            validator(&catalog, "", "configmaps"),
            validator(&untouched, "", "configmaps")
        ));
        // The pods of this catalog refuse a privileged container; the other's accept it.
        let pod =
            json!({"metadata": {"name": "p"}, "spec": {"containers": [container("a", true)]}});
        let refused = validator(&catalog, "", "pods")(&pod, None);
        let accepted = validator(&untouched, "", "pods")(&pod, None);
        assert_eq!(refused.len(), accepted.len() + 1);
        assert_eq!(
            refused.last().map(|c| c.field.as_str()),
            Some("spec.containers[0].securityContext.privileged")
        );
    }
}
