//! The `PodSecurity` plugin: which writes it looks at, and what it answers for pods, for
//! the workloads that embed a pod template, and for namespaces whose labels change.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::checks::{self, PodView, Violation};
use super::policy::{Level, LevelVersion, PREFIX, Policy, aggregate};
use crate::admission::{Attributes, Decision, Operation, Plugin};
use crate::error::{ApiError, Cause, Result};
use crate::lister::Lister;
use crate::resources::ResourceType;

const NAME: &str = "PodSecurity";

/// At most this many existing pods are checked when a namespace's enforce level tightens.
const MAX_PODS_TO_CHECK: usize = 3000;
/// And for at most this long.
const POD_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Pod subresources whose writes cannot change what a pod runs.
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// `PodSecurity`: holds pods to the Pod Security Standards level their namespace's
/// `pod-security.kubernetes.io/{enforce,audit,warn}` labels (and `-version` labels) ask for,
/// with kube-apiserver's default configuration: `privileged:latest` for every mode where a
/// label does not say otherwise, and no exemptions.
///
/// - A pod that violates the `enforce` level is refused (403); one that violates `warn` is
///   admitted with a `Warning`; one that violates `audit` gets an audit annotation. An update
///   is only checked when it changes a container's image or the containers (kube's
///   "significant" updates); status and other subresources a pod's spec cannot change
///   through are not checked.
/// - Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
///   ReplicationControllers and PodTemplates have their pod template checked against the
///   `warn` and `audit` levels only: they are never refused.
/// - A namespace whose labels are not valid is refused (422) on create, and on an update that
///   changes the errors; when an update tightens the enforce level, the answer warns about
///   the existing pods that would violate it.
///
/// A write in a namespace without Pod Security labels costs one read of the namespace and
/// nothing else.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodSecurity;

/// Where a resource keeps the pod template that is checked.
#[derive(Debug, Clone, Copy)]
enum Template {
    /// `template` (PodTemplate).
    Top,
    /// `spec.template`, always there (Go's value type).
    Spec,
    /// `spec.template`, optional (ReplicationController).
    OptionalSpec,
    /// `spec.jobTemplate.spec.template` (CronJob).
    JobSpec,
}

impl Template {
    /// The template, `Null` standing in for one the object leaves out; `None` when the
    /// resource may have no template and this object has none.
    fn of(self, object: &Value) -> Option<&Value> {
        const EMPTY: &Value = &Value::Null;
        match self {
            Template::Top => Some(object.get("template").unwrap_or(EMPTY)),
            Template::Spec => Some(object.pointer("/spec/template").unwrap_or(EMPTY)),
            Template::OptionalSpec => object.pointer("/spec/template").filter(|t| !t.is_null()),
            Template::JobSpec => Some(
                object
                    .pointer("/spec/jobTemplate/spec/template")
                    .unwrap_or(EMPTY),
            ),
        }
    }
}

/// What a write is to the plugin.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Pod,
    Namespace,
    Workload(Template),
}

fn kind(rt: &ResourceType) -> Option<Kind> {
    Some(match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => Kind::Pod,
        ("", "namespaces") => Kind::Namespace,
        ("", "podtemplates") => Kind::Workload(Template::Top),
        ("", "replicationcontrollers") => Kind::Workload(Template::OptionalSpec),
        ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Kind::Workload(Template::Spec),
        ("batch", "cronjobs") => Kind::Workload(Template::JobSpec),
        _ => return None,
    })
}

/// The audit annotation `pod-security.kubernetes.io/<key>`.
fn annotate(attributes: &Attributes<'_>, key: &str, value: String) {
    attributes.trace.annotate(format!("{PREFIX}{key}"), value);
}

fn labels(object: &Value) -> Option<&Map<String, Value>> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
}

/// The policy of namespace `name` (the defaults if the server serves no namespaces).
async fn namespace_policy(registry: &dyn Lister, name: &str) -> Result<(Policy, Vec<Cause>)> {
    let Some(namespaces) = registry.catalog().get("", "v1", "namespaces") else {
        return Ok((Policy::DEFAULT, Vec::new()));
    };
    let namespace = registry.get(&namespaces, None, name).await?;
    Ok(Policy::from_labels(labels(&namespace)))
}

#[async_trait::async_trait]
impl Plugin for PodSecurity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        kind(rt).is_some()
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        match kind(attributes.rt) {
            Some(Kind::Pod) => validate_pod(attributes, object, registry).await,
            Some(Kind::Namespace) => validate_namespace(attributes, object, registry).await,
            Some(Kind::Workload(template)) => {
                validate_workload(attributes, object, template, registry).await;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

async fn validate_pod(
    attributes: &Attributes<'_>,
    pod: &Value,
    registry: &dyn Lister,
) -> Result<()> {
    if attributes
        .subresource
        .is_some_and(|s| IGNORED_POD_SUBRESOURCES.contains(&s))
    {
        return Ok(());
    }
    let (policy, errors) = namespace_policy(registry, attributes.namespace)
        .await
        .map_err(|_| {
            ApiError::internal(format!(
                "failed to lookup namespace {:?}",
                attributes.namespace
            ))
        })?;
    if errors.is_empty() && policy.fully_privileged() {
        annotate(
            attributes,
            "enforce-policy",
            LevelVersion::PRIVILEGED_LATEST.to_string(),
        );
        return Ok(());
    }
    if attributes.operation == Operation::Update
        && let Some(old) = attributes.old
        && !significant_update(pod, old)
    {
        return Ok(());
    }
    let view = PodView {
        metadata: &pod["metadata"],
        spec: &pod["spec"],
    };
    evaluate(attributes, &policy, &errors, &view, true)
}

async fn validate_workload(
    attributes: &Attributes<'_>,
    object: &Value,
    template: Template,
    registry: &dyn Lister,
) {
    if attributes.subresource.is_some() {
        return;
    }
    let (policy, errors) = match namespace_policy(registry, attributes.namespace).await {
        Ok(found) => found,
        Err(e) => {
            // A workload is never refused: the failure is only recorded.
            annotate(
                attributes,
                "error",
                format!(
                    "failed to lookup namespace {:?}: {}",
                    attributes.namespace, e.message
                ),
            );
            return;
        }
    };
    if errors.is_empty()
        && policy.warn.level == Level::Privileged
        && policy.audit.level == Level::Privileged
    {
        return;
    }
    let Some(template) = template.of(object) else {
        return;
    };
    let view = PodView {
        metadata: &template["metadata"],
        spec: &template["spec"],
    };
    // Without enforcement nothing is refused.
    let _ = evaluate(attributes, &policy, &errors, &view, false);
}

/// Checks a pod (or template) against the namespace's policy: refuses it if it violates
/// `enforce` (when `enforce`), records `audit` violations, warns about `warn` violations
/// unless it is refused. Levels that coincide are evaluated once.
fn evaluate(
    attributes: &Attributes<'_>,
    policy: &Policy,
    errors: &[Cause],
    pod: &PodView<'_>,
    enforce: bool,
) -> Result<()> {
    if !errors.is_empty() {
        annotate(
            attributes,
            "error",
            format!("Failed to parse policy: {}", aggregate(errors)),
        );
    }
    let mut evaluated: Vec<(LevelVersion, Vec<Violation>)> = Vec::new();
    let mut violations = |lv: LevelVersion| -> Vec<Violation> {
        if let Some((_, found)) = evaluated.iter().find(|(seen, _)| *seen == lv) {
            return found.clone();
        }
        let found = checks::evaluate(lv, pod);
        evaluated.push((lv, found.clone()));
        found
    };
    let mut refusal = None;
    if enforce {
        annotate(attributes, "enforce-policy", policy.enforce.to_string());
        let found = violations(policy.enforce);
        if !found.is_empty() {
            refusal = Some(crate::admission::plugins::forbidden(
                attributes,
                format!(
                    "violates PodSecurity \"{}\": {}",
                    policy.enforce,
                    checks::details(&found)
                ),
            ));
        }
    }
    let found = violations(policy.audit);
    if !found.is_empty() {
        annotate(
            attributes,
            "audit-violations",
            format!(
                "would violate PodSecurity \"{}\": {}",
                policy.audit,
                checks::details(&found)
            ),
        );
    }
    if let Some(refusal) = refusal {
        // A refused request gets no warnings on top.
        return Err(refusal);
    }
    let found = violations(policy.warn);
    if !found.is_empty() {
        attributes.trace.warn(format!(
            "would violate PodSecurity \"{}\": {}",
            policy.warn,
            checks::details(&found)
        ));
        attributes.trace.ran(NAME, Decision::Warned);
    }
    Ok(())
}

/// Whether a pod update changes anything the checks look at that a pod update may change:
/// the number of containers or init containers, an image, or an ephemeral container added or
/// with a new image.
fn significant_update(pod: &Value, old: &Value) -> bool {
    fn list<'a>(pod: &'a Value, field: &str) -> &'a [Value] {
        pod.get("spec")
            .and_then(|spec| spec.get(field))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
    fn image(c: &Value) -> &str {
        c.get("image").and_then(Value::as_str).unwrap_or("")
    }
    for field in ["containers", "initContainers"] {
        let (new, old) = (list(pod, field), list(old, field));
        if new.len() != old.len() || new.iter().zip(old).any(|(n, o)| image(n) != image(o)) {
            return true;
        }
    }
    let old_ephemeral = list(old, "ephemeralContainers");
    list(pod, "ephemeralContainers").iter().any(|c| {
        match old_ephemeral
            .iter()
            .find(|o| o.get("name") == c.get("name"))
        {
            Some(o) => image(o) != image(c),
            None => true,
        }
    })
}

async fn validate_namespace(
    attributes: &Attributes<'_>,
    namespace: &Value,
    registry: &dyn Lister,
) -> Result<()> {
    if attributes.subresource.is_some() {
        return Ok(());
    }
    let (new, new_errors) = Policy::from_labels(labels(namespace));
    let invalid = |errors: Vec<Cause>| ApiError::invalid("Namespace", "", attributes.name, errors);
    match attributes.operation {
        Operation::Create if !new_errors.is_empty() => Err(invalid(new_errors)),
        Operation::Update => {
            let (old, old_errors) = Policy::from_labels(attributes.old.and_then(labels));
            // Labels that were already wrong the same way do not block other changes.
            if !new_errors.is_empty() && (old_errors.is_empty() || new_errors != old_errors) {
                return Err(invalid(new_errors));
            }
            let tightened = new.enforce != old.enforce
                && new.enforce.level != Level::Privileged
                && !(new.enforce.version == old.enforce.version
                    && new.enforce.level.strictness(old.enforce.level) != Ordering::Greater);
            if !tightened {
                return Ok(());
            }
            let warnings = existing_pod_warnings(registry, attributes.name, new.enforce).await;
            if !warnings.is_empty() {
                for warning in warnings {
                    attributes.trace.warn(warning);
                }
                attributes.trace.ran(NAME, Decision::Warned);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The warnings about the pods of `namespace` that violate `enforce`: which pods violate it
/// for which reasons, grouped by reasons, checking one pod per controller first and at most
/// [`MAX_PODS_TO_CHECK`] pods within [`POD_CHECK_TIMEOUT`].
async fn existing_pod_warnings(
    registry: &dyn Lister,
    namespace: &str,
    enforce: LevelVersion,
) -> Vec<String> {
    let deadline = Instant::now() + POD_CHECK_TIMEOUT;
    let listed = match registry.catalog().get("", "v1", "pods") {
        Some(pods) => registry.list(&pods, Some(namespace), None).await,
        None => Ok(Vec::new()),
    };
    let Ok(pods) = listed else {
        return vec!["failed to list pods while checking new PodSecurity enforce level".into()];
    };
    let prioritized = prioritize(pods.iter().map(|p| p.as_ref()).collect());
    let total = prioritized.len();
    let mut checked = total.min(MAX_PODS_TO_CHECK);

    // Reasons in the order first seen, each with its lexically first pod and its pod count.
    let mut by_reasons: Vec<String> = Vec::new();
    let mut counts: HashMap<String, (String, usize)> = HashMap::new();
    for (i, pod) in prioritized.iter().take(MAX_PODS_TO_CHECK).enumerate() {
        let view = PodView {
            metadata: &pod["metadata"],
            spec: &pod["spec"],
        };
        let found = checks::evaluate(enforce, &view);
        if !found.is_empty() {
            let reasons = checks::reasons(&found);
            let name = pod
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            match counts.get_mut(&reasons) {
                Some((first, count)) => {
                    if name < first.as_str() {
                        *first = name.to_string();
                    }
                    *count += 1;
                }
                None => {
                    counts.insert(reasons.clone(), (name.to_string(), 1));
                    by_reasons.push(reasons);
                }
            }
        }
        if Instant::now() >= deadline {
            checked = i + 1;
            break;
        }
    }

    let mut warnings = Vec::new();
    if checked < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !by_reasons.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level \"{enforce}\""
        ));
    }
    let mut per_pod: Vec<String> = by_reasons
        .into_iter()
        .map(|reasons| match counts.get(&reasons) {
            Some((first, 1)) => format!("{first}: {reasons}"),
            Some((first, 2)) => format!("{first} (and 1 other pod): {reasons}"),
            Some((first, n)) => format!("{first} (and {} other pods): {reasons}", n - 1),
            None => reasons,
        })
        .collect();
    per_pod.sort();
    warnings.extend(per_pod);
    warnings
}

/// Pods in the order they are checked: pods without a controller and the first pod of each
/// controller, in list order, then the other pods of controllers already seen.
fn prioritize(pods: Vec<&Value>) -> Vec<&Value> {
    let mut first = Vec::with_capacity(pods.len());
    let mut replicas = Vec::new();
    let mut controllers = HashSet::new();
    for pod in pods {
        let controller = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
            .map(|r| r["uid"].as_str().unwrap_or(""));
        match controller {
            Some(uid) if !controllers.insert(uid) => replicas.push(pod),
            _ => first.push(pod),
        }
    }
    first.extend(replicas);
    first
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::admission::{Chain, Trace};
    use crate::registry::{Registry, WriteOptions};
    use crate::resources::Catalog;

    /// A registry (admitting everything) with a namespace `ns` labelled `labels`.
    async fn registry_with(labels: Value) -> Registry {
        let store: Arc<dyn konverge_store::KvStore> = Arc::new(konverge_store::MemStore::new());
        let registry =
            Registry::new(store, Arc::new(Catalog::builtin())).with_admission(Chain::empty());
        let namespaces = registry.catalog().get("", "v1", "namespaces");
        let created = match namespaces {
            Some(rt) => {
                registry
                    .create(
                        &rt,
                        None,
                        json!({"metadata": {"name": "ns", "labels": labels}}),
                        &WriteOptions::default(),
                    )
                    .await
            }
            None => Err(ApiError::internal("no namespaces")),
        };
        assert!(created.is_ok(), "{created:?}");
        registry
    }

    /// Runs the plugin on a create of `group/plural` in `ns`: its answer, then the trace's
    /// audit annotations (sorted) and warnings.
    async fn admit(
        registry: &dyn Lister,
        group: &str,
        plural: &str,
        subresource: Option<&str>,
        object: Value,
    ) -> (Result<()>, Vec<(String, String)>, Vec<String>) {
        let Some(rt) = registry.catalog().get(group, "v1", plural) else {
            return (
                Err(ApiError::internal("not served")),
                Vec::new(),
                Vec::new(),
            );
        };
        let trace = Trace::default();
        let attributes = Attributes {
            operation: Operation::Create,
            rt: &rt,
            namespace: "ns",
            name: "x",
            subresource,
            old: None,
            user: None,
            dry_run: false,
            trace: &trace,
        };
        let answer = PodSecurity.validate(&attributes, &object, registry).await;
        let mut annotations = trace.annotations();
        annotations.sort();
        (answer, annotations, trace.warnings())
    }

    fn plain_pod() -> Value {
        json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    }

    fn annotation(key: &str, value: &str) -> (String, String) {
        (
            format!("pod-security.kubernetes.io/{key}"),
            value.to_string(),
        )
    }

    #[tokio::test]
    async fn an_unlabelled_namespace_only_records_the_privileged_policy() {
        let registry = registry_with(json!({})).await;
        let (answer, annotations, warnings) = admit(&registry, "", "pods", None, plain_pod()).await;
        assert!(answer.is_ok());
        assert_eq!(
            annotations,
            [annotation("enforce-policy", "privileged:latest")]
        );
        assert!(warnings.is_empty());
        // Workloads there are not looked at at all.
        let deployment = json!({"spec": {"template": plain_pod()}});
        let (answer, annotations, _) =
            admit(&registry, "apps", "deployments", None, deployment).await;
        assert!(answer.is_ok());
        assert!(annotations.is_empty());
    }

    #[tokio::test]
    async fn audit_violations_are_recorded_as_an_audit_annotation() {
        let registry = registry_with(json!({
            "pod-security.kubernetes.io/audit": "baseline",
            "pod-security.kubernetes.io/audit-version": "v1.30",
        }))
        .await;
        let mut pod = plain_pod();
        pod["spec"]["hostPID"] = json!(true);
        let (answer, annotations, warnings) = admit(&registry, "", "pods", None, pod.clone()).await;
        assert!(answer.is_ok());
        assert_eq!(
            annotations,
            [
                annotation(
                    "audit-violations",
                    r#"would violate PodSecurity "baseline:v1.30": host namespaces (hostPID=true)"#
                ),
                annotation("enforce-policy", "privileged:latest"),
            ]
        );
        assert!(warnings.is_empty());

        // A workload's template is audited too, with no enforce policy to record.
        let job = json!({"spec": {"template": pod}});
        let (answer, annotations, _) = admit(&registry, "batch", "jobs", None, job).await;
        assert!(answer.is_ok());
        assert_eq!(
            annotations,
            [annotation(
                "audit-violations",
                r#"would violate PodSecurity "baseline:v1.30": host namespaces (hostPID=true)"#
            )]
        );
    }

    #[tokio::test]
    async fn labels_that_do_not_parse_are_recorded_and_enforce_restricted() {
        let registry = registry_with(json!({"pod-security.kubernetes.io/enforce": "strict"})).await;
        let (answer, annotations, warnings) = admit(&registry, "", "pods", None, plain_pod()).await;
        let Err(e) = answer else {
            panic!("expected a refusal")
        };
        assert_eq!(e.code, http::StatusCode::FORBIDDEN);
        assert!(
            e.message
                .starts_with(r#"pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false"#),
            "{}",
            e.message
        );
        assert_eq!(
            annotations,
            [
                annotation("enforce-policy", "restricted:latest"),
                annotation(
                    "error",
                    r#"Failed to parse policy: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
                ),
            ]
        );
        assert!(warnings.is_empty());
    }

    #[tokio::test]
    async fn subresources_that_cannot_change_the_pod_are_not_checked() {
        let registry =
            registry_with(json!({"pod-security.kubernetes.io/enforce": "restricted"})).await;
        for subresource in ["status", "binding", "eviction"] {
            let (answer, annotations, _) =
                admit(&registry, "", "pods", Some(subresource), plain_pod()).await;
            assert!(answer.is_ok(), "{subresource}");
            assert!(annotations.is_empty(), "{subresource}");
        }
        let (answer, _, _) = admit(
            &registry,
            "",
            "pods",
            Some("ephemeralcontainers"),
            plain_pod(),
        )
        .await;
        assert!(answer.is_err(), "ephemeral containers are checked");
    }

    #[test]
    fn updates_are_significant_when_what_runs_changes() {
        let pod = json!({"spec": {
            "containers": [{"name": "c", "image": "a"}],
            "initContainers": [{"name": "i", "image": "b"}],
            "ephemeralContainers": [{"name": "e", "image": "c"}],
        }});
        let mut relabeled = pod.clone();
        relabeled["metadata"] = json!({"labels": {"x": "y"}});
        relabeled["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        assert!(!significant_update(&relabeled, &pod));

        let mut new_image = pod.clone();
        new_image["spec"]["initContainers"][0]["image"] = json!("b2");
        assert!(significant_update(&new_image, &pod));

        let mut more = pod.clone();
        more["spec"]["containers"] =
            json!([{"name": "c", "image": "a"}, {"name": "d", "image": "a"}]);
        assert!(significant_update(&more, &pod));

        let mut debug = pod.clone();
        debug["spec"]["ephemeralContainers"] =
            json!([{"name": "e", "image": "c"}, {"name": "debug", "image": "busybox"}]);
        assert!(significant_update(&debug, &pod));
    }

    #[test]
    fn one_pod_per_controller_is_checked_first() {
        let pod = |name: &str, controller: Option<&str>| {
            let refs = controller
                .map(|uid| json!([{"uid": "other"}, {"uid": uid, "controller": true}]))
                .unwrap_or(json!([]));
            json!({"metadata": {"name": name, "ownerReferences": refs}})
        };
        let pods = [
            pod("a1", Some("rs-a")),
            pod("a2", Some("rs-a")),
            pod("solo", None),
            pod("b1", Some("rs-b")),
            pod("a3", Some("rs-a")),
        ];
        let order: Vec<&str> = prioritize(pods.iter().collect())
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(order, ["a1", "solo", "b1", "a2", "a3"]);
    }

    #[test]
    fn templates_are_found_where_each_workload_keeps_them() {
        let deployment = json!({"spec": {"template": {"spec": {"hostPID": true}}}});
        assert_eq!(
            Template::Spec.of(&deployment),
            Some(&json!({"spec": {"hostPID": true}}))
        );
        assert_eq!(Template::Spec.of(&json!({})), Some(&Value::Null));
        assert_eq!(Template::OptionalSpec.of(&json!({"spec": {}})), None);
        let cronjob = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        assert_eq!(Template::JobSpec.of(&cronjob), Some(&json!({"spec": {}})));
        let template = json!({"template": {"metadata": {}}});
        assert_eq!(Template::Top.of(&template), Some(&json!({"metadata": {}})));
    }
}
