//! The shared loops acting on what changed: every case here would wait for the periodic
//! pass over everything (an hour in these tests) if a change were missed.

use std::sync::Arc;
use std::time::Duration;

use konverge_store::MemStore;
use serde_json::{Value, json};

use super::*;
use crate::registry::{DeleteOptions, Propagation, WriteOptions};

/// The periodic pass never comes: only the first pass looks at everything.
const NO_RESYNC: Timing = Timing {
    settle: SETTLE,
    resync: Duration::from_secs(3600),
};

/// Long enough for a few passes over what changed, far from the periodic one.
const A_MOMENT: Duration = Duration::from_millis(300);

struct Cluster {
    registry: Registry,
    _server: Arc<crate::ApiServer>,
    _loops: tokio::task::JoinHandle<()>,
}

/// A server over a new memory store, without kube-controller-manager's loops (its own
/// run), and its registry.
pub(crate) async fn server_without_loops() -> (Arc<crate::ApiServer>, Registry) {
    let server = crate::ApiServer::builder(Arc::new(MemStore::new()))
        .control_loops(false)
        .build()
        .await
        .expect("server");
    let registry = server.registry().clone();
    (server, registry)
}

impl Cluster {
    async fn start(settings: Settings) -> Cluster {
        let (server, registry) = server_without_loops().await;
        let loops = tokio::spawn(run_shared(registry.clone(), settings, NO_RESYNC, None));
        // The first pass (over everything) is done, and some time passes.
        tokio::time::sleep(Duration::from_secs(10)).await;
        Cluster {
            registry,
            _server: server,
            _loops: loops,
        }
    }

    fn rt(&self, group: &str, version: &str, plural: &str) -> Arc<ResourceType> {
        self.registry
            .catalog()
            .get(group, version, plural)
            .expect("served")
    }

    fn config_maps(&self) -> Arc<ResourceType> {
        self.rt("", "v1", "configmaps")
    }

    async fn create(&self, rt: &ResourceType, ns: Option<&str>, body: Value) -> Value {
        self.registry
            .create(rt, ns, body, &WriteOptions::default())
            .await
            .expect("create")
            .object
    }

    async fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<Value> {
        match self.registry.get(rt, ns, name, None).await {
            Ok(obj) => Some(obj),
            Err(e) if e.reason == crate::error::Reason::NotFound => None,
            Err(e) => panic!("get {name}: {e}"),
        }
    }

    async fn delete(&self, rt: &ResourceType, ns: Option<&str>, name: &str, how: Propagation) {
        let opts = DeleteOptions {
            propagation: Some(how),
            ..DeleteOptions::default()
        };
        self.registry
            .delete(rt, ns, name, &opts)
            .await
            .expect("delete");
    }

    /// Drops every finalizer of an object.
    async fn release(&self, rt: &ResourceType, ns: Option<&str>, name: &str) {
        let apply = |current: &Value| {
            let mut next = current.clone();
            next["metadata"]["finalizers"] = json!([]);
            Ok(next)
        };
        self.registry
            .patch(rt, ns, name, None, &WriteOptions::default(), &apply)
            .await
            .expect("release");
    }
}

fn owned(name: &str, owner: &Value, finalizers: &[&str]) -> Value {
    json!({
        "metadata": {
            "name": name,
            "finalizers": finalizers,
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": true,
            }],
        },
    })
}

fn named(name: &str) -> Value {
    json!({"metadata": {"name": name}})
}

#[tokio::test(start_paused = true)]
async fn an_owner_deleted_long_after_its_dependents_has_them_collected_at_once() {
    let c = Cluster::start(Settings::default()).await;
    let cms = c.config_maps();
    let owner = c.create(&cms, Some("default"), named("owner")).await;
    for name in ["dep-a", "dep-b"] {
        c.create(&cms, Some("default"), owned(name, &owner, &[]))
            .await;
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(c.get(&cms, Some("default"), "dep-a").await.is_some());

    c.delete(&cms, Some("default"), "owner", Propagation::Background)
        .await;
    tokio::time::sleep(A_MOMENT).await;
    for name in ["dep-a", "dep-b"] {
        assert!(
            c.get(&cms, Some("default"), name).await.is_none(),
            "{name} is collected"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_dependent_naming_an_owner_that_is_gone_is_collected_when_written() {
    let c = Cluster::start(Settings::default()).await;
    let cms = c.config_maps();
    let owner = c.create(&cms, Some("default"), named("gone")).await;
    c.delete(&cms, Some("default"), "gone", Propagation::Background)
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    c.create(&cms, Some("default"), owned("late", &owner, &[]))
        .await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&cms, Some("default"), "late").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_foreground_deletion_ends_when_its_last_blocking_dependent_goes() {
    let c = Cluster::start(Settings::default()).await;
    let cms = c.config_maps();
    let owner = c.create(&cms, Some("default"), named("fg")).await;
    c.create(
        &cms,
        Some("default"),
        owned("held", &owner, &["example.com/hold"]),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    c.delete(&cms, Some("default"), "fg", Propagation::Foreground)
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = c
        .get(&cms, Some("default"), "held")
        .await
        .expect("held by its finalizer");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    let waiting = c
        .get(&cms, Some("default"), "fg")
        .await
        .expect("the owner waits");
    assert_eq!(
        waiting["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );

    c.release(&cms, Some("default"), "held").await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&cms, Some("default"), "held").await.is_none());
    assert!(c.get(&cms, Some("default"), "fg").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn an_orphaning_owner_lets_go_of_its_dependents() {
    let c = Cluster::start(Settings::default()).await;
    let cms = c.config_maps();
    let owner = c.create(&cms, Some("default"), named("parent")).await;
    c.create(&cms, Some("default"), owned("child", &owner, &[]))
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    c.delete(&cms, Some("default"), "parent", Propagation::Orphan)
        .await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&cms, Some("default"), "parent").await.is_none());
    let child = c
        .get(&cms, Some("default"), "child")
        .await
        .expect("orphaned, not deleted");
    assert!(child["metadata"].get("ownerReferences").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_namespace_is_finalized_once_its_last_held_object_goes() {
    let c = Cluster::start(Settings::default()).await;
    let namespaces = c.rt("", "v1", "namespaces");
    let cms = c.config_maps();
    c.create(&namespaces, None, named("scratch")).await;
    c.create(
        &cms,
        Some("scratch"),
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .await;
    c.create(&cms, Some("scratch"), named("plain")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    c.delete(&namespaces, None, "scratch", Propagation::Background)
        .await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&cms, Some("scratch"), "plain").await.is_none());
    let held = c
        .get(&cms, Some("scratch"), "held")
        .await
        .expect("held by its finalizer");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(c.get(&namespaces, None, "scratch").await.is_some());

    c.release(&cms, Some("scratch"), "held").await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&namespaces, None, "scratch").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn namespaces_get_their_defaults_back_when_they_are_deleted() {
    let c = Cluster::start(Settings {
        root_ca: Some("-----BEGIN CERTIFICATE-----\n".into()),
    })
    .await;
    let namespaces = c.rt("", "v1", "namespaces");
    let accounts = c.rt("", "v1", "serviceaccounts");
    let cms = c.config_maps();
    c.create(&namespaces, None, named("fresh")).await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&accounts, Some("fresh"), "default").await.is_some());
    let ca = c
        .get(&cms, Some("fresh"), namespace_defaults::ROOT_CA_CONFIG_MAP)
        .await
        .expect("the CA is published");
    assert_eq!(ca["data"]["ca.crt"], "-----BEGIN CERTIFICATE-----\n");

    tokio::time::sleep(Duration::from_secs(5)).await;
    c.delete(&accounts, Some("fresh"), "default", Propagation::Background)
        .await;
    c.delete(
        &cms,
        Some("fresh"),
        namespace_defaults::ROOT_CA_CONFIG_MAP,
        Propagation::Background,
    )
    .await;
    tokio::time::sleep(A_MOMENT).await;
    assert!(c.get(&accounts, Some("fresh"), "default").await.is_some());
    assert!(
        c.get(&cms, Some("fresh"), namespace_defaults::ROOT_CA_CONFIG_MAP)
            .await
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn the_published_ca_is_put_back_when_edited() {
    const CA: &str = "-----BEGIN CERTIFICATE-----\n";
    let c = Cluster::start(Settings {
        root_ca: Some(CA.into()),
    })
    .await;
    let namespaces = c.rt("", "v1", "namespaces");
    let cms = c.config_maps();
    c.create(&namespaces, None, named("edited")).await;
    tokio::time::sleep(A_MOMENT).await;
    let name = namespace_defaults::ROOT_CA_CONFIG_MAP;
    let published = c.get(&cms, Some("edited"), name).await.expect("published");

    // Emptied, with a key of its own added and the description gone; a label is kept.
    let mut edited = published.clone();
    edited["data"] = json!({"ca.crt": "", "extra": "x"});
    edited["metadata"]["annotations"] = json!({});
    edited["metadata"]["labels"] = json!({"mine": "yes"});
    c.registry
        .update(
            &cms,
            Some("edited"),
            name,
            edited,
            None,
            &WriteOptions::default(),
        )
        .await
        .expect("edit");
    tokio::time::sleep(A_MOMENT).await;
    let restored = c.get(&cms, Some("edited"), name).await.expect("restored");
    assert_eq!(restored["data"], json!({"ca.crt": CA}));
    assert!(
        restored["metadata"]["annotations"]["kubernetes.io/description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Contains a CA bundle")),
        "{restored}"
    );
    assert_eq!(restored["metadata"]["labels"], json!({"mine": "yes"}));

    // As published: left alone.
    let version = restored["metadata"]["resourceVersion"].clone();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = c
        .get(&cms, Some("edited"), name)
        .await
        .expect("still there");
    assert_eq!(still["metadata"]["resourceVersion"], version);
}

#[tokio::test(start_paused = true)]
async fn aggregated_roles_follow_the_roles_they_select() {
    let c = Cluster::start(Settings::default()).await;
    let roles = c.rt("rbac.authorization.k8s.io", "v1", "clusterroles");
    let rule =
        |resource: &str| json!({"apiGroups": [""], "resources": [resource], "verbs": ["get"]});
    c.create(
        &roles,
        None,
        json!({"metadata": {"name": "agg-target"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}}),
    )
    .await;
    c.create(
        &roles,
        None,
        json!({"metadata": {"name": "agg-source", "labels": {"agg": "yes"}},
            "rules": [rule("pods")]}),
    )
    .await;
    tokio::time::sleep(A_MOMENT).await;
    let target = c.get(&roles, None, "agg-target").await.expect("target");
    assert_eq!(target["rules"], json!([rule("pods")]));

    tokio::time::sleep(Duration::from_secs(5)).await;
    let apply = |current: &Value| {
        let mut next = current.clone();
        next["rules"] = json!([rule("secrets")]);
        Ok(next)
    };
    c.registry
        .patch(
            &roles,
            None,
            "agg-source",
            None,
            &WriteOptions::default(),
            &apply,
        )
        .await
        .expect("patch");
    tokio::time::sleep(A_MOMENT).await;
    let target = c.get(&roles, None, "agg-target").await.expect("target");
    assert_eq!(target["rules"], json!([rule("secrets")]));
}

#[tokio::test(start_paused = true)]
async fn policies_get_their_status_when_their_spec_changes() {
    let c = Cluster::start(Settings::default()).await;
    let policies = c.rt(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
    );
    let spec = |expression: &str| {
        json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": expression}],
        })
    };
    c.create(
        &policies,
        None,
        json!({"metadata": {"name": "p"}, "spec": spec("true")}),
    )
    .await;
    tokio::time::sleep(A_MOMENT).await;
    let observed = c.get(&policies, None, "p").await.expect("policy");
    assert_eq!(observed["status"]["observedGeneration"], 1);

    tokio::time::sleep(Duration::from_secs(5)).await;
    let apply = |current: &Value| {
        let mut next = current.clone();
        next["spec"]["validations"] = json!([{"expression": "object.data.size() < 3"}]);
        Ok(next)
    };
    c.registry
        .patch(&policies, None, "p", None, &WriteOptions::default(), &apply)
        .await
        .expect("patch");
    tokio::time::sleep(A_MOMENT).await;
    let observed = c.get(&policies, None, "p").await.expect("policy");
    assert_eq!(observed["metadata"]["generation"], 2);
    assert_eq!(observed["status"]["observedGeneration"], 2);
}

fn node(rt: &Arc<ResourceType>, name: &str, uid: &str, owners: &[&str]) -> Node {
    Node {
        rt: rt.clone(),
        namespace: Some("ns".into()),
        name: name.into(),
        uid: uid.into(),
        owners: owners
            .iter()
            .map(|o| OwnerRef {
                uid: (*o).into(),
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                block_owner_deletion: true,
            })
            .collect(),
        deleting: false,
        finalizers: Vec::new(),
    }
}

fn config_map_type() -> Arc<ResourceType> {
    crate::resources::Catalog::builtin()
        .get("", "v1", "configmaps")
        .expect("configmaps")
}

#[test]
fn writes_of_what_the_loops_do_not_read_change_nothing() {
    let rt = config_map_type();
    let mut index = ClusterIndex::default();
    index.upsert("/registry/configmaps/ns/a", node(&rt, "a", "ua", &[]));
    assert!(index.has_changes());
    index.take_changes();
    index.upsert("/registry/configmaps/ns/a", node(&rt, "a", "ua", &[]));
    assert!(!index.has_changes());

    let mut deleting = node(&rt, "a", "ua", &[]);
    deleting.deleting = true;
    index.upsert("/registry/configmaps/ns/a", deleting);
    let changes = index.take_changes();
    assert_eq!(changes.touched, BTreeSet::from(["ua".to_string()]));
    assert_eq!(changes.namespaces, BTreeSet::from(["ns".to_string()]));
    assert_eq!(index.count_in_namespace("ns"), 1);
    index.remove("/registry/configmaps/ns/a");
    assert_eq!(index.count_in_namespace("ns"), 0);
    assert!(index.has_changes());
}

#[test]
fn a_pass_over_changes_looks_at_their_owners_and_dependents_only() {
    let rt = config_map_type();
    let mut index = ClusterIndex::default();
    // grand <- parent <- child; other <- unrelated.
    index.upsert(
        "/registry/configmaps/ns/grand",
        node(&rt, "grand", "u-grand", &[]),
    );
    index.upsert(
        "/registry/configmaps/ns/parent",
        node(&rt, "parent", "u-parent", &["u-grand"]),
    );
    index.upsert(
        "/registry/configmaps/ns/child",
        node(&rt, "child", "u-child", &["u-parent"]),
    );
    index.upsert(
        "/registry/configmaps/ns/other",
        node(&rt, "other", "u-other", &[]),
    );
    index.upsert(
        "/registry/configmaps/ns/unrelated",
        node(&rt, "unrelated", "u-unrelated", &["u-other"]),
    );
    index.take_changes();

    let mut parent = node(&rt, "parent", "u-parent", &["u-grand"]);
    parent.deleting = true;
    index.upsert("/registry/configmaps/ns/parent", parent);
    let scope = Scope::Changed(index.take_changes());
    let uids: Vec<&str> = scope
        .gc_candidates(&index)
        .into_iter()
        .map(|n| n.uid.as_str())
        .collect();
    assert_eq!(uids, ["u-child", "u-grand", "u-parent"]);

    // A removed owner: its dependents are looked at although it is gone.
    index.remove("/registry/configmaps/ns/other");
    let scope = Scope::Changed(index.take_changes());
    let uids: Vec<&str> = scope
        .gc_candidates(&index)
        .into_iter()
        .map(|n| n.uid.as_str())
        .collect();
    assert_eq!(uids, ["u-unrelated"]);
    assert_eq!(Scope::Everything.gc_candidates(&index).len(), 4);
}

#[test]
fn keys_resolve_as_the_catalog_resolves_them() {
    let catalog = crate::resources::Catalog::builtin();
    let mut resolver = Resolver::default();
    let keys = [
        "/registry/pods/default/web-1",
        "/registry/pods/kube-system/dns",
        "/registry/namespaces/default",
        "/registry/apps/deployments/default/web",
        "/registry/rbac.authorization.k8s.io/clusterroles/admin",
        "/registry/configmaps/default/with/slash",
        "/registry/pods/nameless",
        "/registry/unknown/thing",
        "/elsewhere/pods/default/x",
    ];
    for _ in 0..2 {
        for key in keys {
            let ours = resolver
                .resolve(&catalog, key)
                .map(|(rt, ns, name)| (rt.group.clone(), rt.plural.clone(), ns, name));
            let theirs = catalog
                .resolve_key(key)
                .map(|(rt, ns, name)| (rt.group.clone(), rt.plural.clone(), ns, name));
            assert_eq!(ours, theirs, "{key}");
        }
    }
    assert_eq!(
        key_dir("/registry/pods/ns/name"),
        Some("/registry/pods/ns/")
    );
    assert_eq!(key_dir("/registry/nodes/n1"), Some("/registry/nodes/"));
    assert_eq!(key_dir("/registry/nodes"), None);
}

/// kube-apiserver's API Priority and Fairness controllers: a new server stores the bootstrap
/// objects as kube ships them, every FlowSchema gets its `Dangling` condition, and each
/// minute the producer puts back what the server keeps (and only that), recreates what is
/// missing and deletes what it no longer ships; then, with nothing changed, writes nothing.
#[tokio::test(start_paused = true)]
async fn flow_control_bootstrap_objects_are_kept_as_kube_keeps_them() {
    use crate::flowcontrol::{AUTO_UPDATE_ANNOTATION, CONSUMER, GROUP, PRODUCER, bootstrap};
    let c = Cluster::start(Settings::default()).await;
    let schemas = c.rt(GROUP, "v1", "flowschemas");
    let levels = c.rt(GROUP, "v1", "prioritylevelconfigurations");
    let boot = bootstrap();
    let shipped = |list: &[Value]| -> Vec<(String, Value)> {
        list.iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                    o.clone(),
                )
            })
            .collect()
    };
    let all_schemas = shipped(
        &[
            boot.suggested_flow_schemas.clone(),
            boot.mandatory_flow_schemas.clone(),
        ]
        .concat(),
    );
    let all_levels = shipped(
        &[
            boot.suggested_priority_levels.clone(),
            boot.mandatory_priority_levels.clone(),
        ]
        .concat(),
    );
    // Stored as shipped (the create path changes nothing in them), by the producer.
    for (rt, list) in [(&levels, &all_levels), (&schemas, &all_schemas)] {
        for (name, wanted) in list {
            let stored = c.get(rt, None, name).await.expect("bootstrapped");
            assert_eq!(stored["spec"], wanted["spec"], "{name}");
            let producer = stored["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["manager"] == PRODUCER)
                .expect("created by the producer");
            assert_eq!(producer["operation"], "Update");
        }
    }
    // Every FlowSchema's level exists: `Dangling` is `False`, written by the consumer.
    for (name, _) in &all_schemas {
        let stored = c.get(&schemas, None, name).await.expect("stored");
        let condition = &stored["status"]["conditions"][0];
        assert_eq!(condition["type"], "Dangling", "{name}: {stored}");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Found");
        let managers: Vec<&Value> = stored["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["manager"])
            .collect();
        assert!(managers.contains(&&json!(CONSUMER)), "{managers:?}");
    }

    // What clients do meanwhile.
    let update = |rt: Arc<ResourceType>, name: &'static str, edit: fn(&mut Value)| {
        let registry = c.registry.clone();
        async move {
            let apply = move |current: &Value| {
                let mut next = current.clone();
                edit(&mut next);
                Ok(next)
            };
            registry
                .patch(&rt, None, name, None, &WriteOptions::default(), &apply)
                .await
                .expect("patched");
        }
    };
    update(levels.clone(), "catch-all", |o| {
        o["spec"]["limited"]["nominalConcurrencyShares"] = json!(50);
        o["metadata"]["annotations"][AUTO_UPDATE_ANNOTATION] = json!("false");
    })
    .await;
    update(levels.clone(), "system", |o| {
        o["spec"]["limited"]["nominalConcurrencyShares"] = json!(2);
    })
    .await;
    update(levels.clone(), "workload-low", |o| {
        o["spec"]["limited"]["nominalConcurrencyShares"] = json!(1);
        o["metadata"]["annotations"][AUTO_UPDATE_ANNOTATION] = json!("false");
    })
    .await;
    update(levels.clone(), "exempt", |o| {
        o["spec"]["exempt"]["nominalConcurrencyShares"] = json!(7);
    })
    .await;
    c.delete(&schemas, None, "global-default", Propagation::Background)
        .await;
    let schema = |name: &str, annotation: &str| {
        json!({"metadata": {"name": name, "annotations": {AUTO_UPDATE_ANNOTATION: annotation}},
            "spec": {"priorityLevelConfiguration": {"name": "missing"}, "matchingPrecedence": 500,
                "rules": []}})
    };
    c.create(&schemas, None, schema("retired", "true")).await;
    c.create(&schemas, None, schema("mine", "false")).await;
    tokio::time::sleep(A_MOMENT).await;
    // A level that does not exist: its FlowSchemas dangle at once.
    let mine = c.get(&schemas, None, "mine").await.expect("kept");
    assert_eq!(mine["status"]["conditions"][0]["status"], "True");
    assert_eq!(mine["status"]["conditions"][0]["reason"], "NotFound");
    assert_eq!(
        mine["status"]["conditions"][0]["message"],
        "This FlowSchema references the PriorityLevelConfiguration object named \"missing\" but there is no such object"
    );

    // The producer's next pass, within a minute.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let spec_of = |list: &[(String, Value)], name: &str| {
        list.iter().find(|(n, _)| n == name).unwrap().1["spec"].clone()
    };
    let catch_all = c.get(&levels, None, "catch-all").await.unwrap();
    assert_eq!(catch_all["spec"], spec_of(&all_levels, "catch-all"));
    assert_eq!(
        catch_all["metadata"]["annotations"][AUTO_UPDATE_ANNOTATION],
        "true"
    );
    let system = c.get(&levels, None, "system").await.unwrap();
    assert_eq!(system["spec"], spec_of(&all_levels, "system"));
    let workload_low = c.get(&levels, None, "workload-low").await.unwrap();
    assert_eq!(
        workload_low["spec"]["limited"]["nominalConcurrencyShares"],
        1
    );
    let exempt = c.get(&levels, None, "exempt").await.unwrap();
    assert_eq!(exempt["spec"]["exempt"]["nominalConcurrencyShares"], 7);
    let global = c.get(&schemas, None, "global-default").await;
    assert_eq!(
        global.expect("recreated")["spec"],
        spec_of(&all_schemas, "global-default")
    );
    assert!(c.get(&schemas, None, "retired").await.is_none());
    assert!(c.get(&schemas, None, "mine").await.is_some());

    // Settled: more passes, and neither the producer nor the conditions write anything
    // (other loops, the server's lease renewals, still move the store's revision).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let versions = |c: &Cluster| {
        let (levels, schemas) = (levels.clone(), schemas.clone());
        let registry = c.registry.clone();
        async move {
            let mut versions = Vec::new();
            for rt in [levels, schemas] {
                let listed = registry
                    .list(&rt, None, &crate::registry::ListOptions::default())
                    .await
                    .expect("listed");
                versions.extend(listed.items.iter().map(|o| {
                    let name = o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    (name, o["metadata"]["resourceVersion"].clone())
                }));
            }
            versions
        }
    };
    let before = versions(&c).await;
    tokio::time::sleep(Duration::from_secs(125)).await;
    assert_eq!(versions(&c).await, before);
}
