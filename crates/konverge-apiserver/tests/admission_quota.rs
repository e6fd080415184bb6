//! ResourceQuota through a `kube::Client` on the in-process server: the controller fills in
//! `status.hard` and `status.used`, admission refuses what would exceed a quota with
//! kube-apiserver's words and charges the rest, deletes and ended pods give usage back, and
//! dry runs are judged but not charged.

#[path = "common/eventually.rs"]
mod eventually;

use std::collections::BTreeMap;
use std::sync::Arc;

use eventually::{eventually, eventually_some};

use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konverge_apiserver::ApiServer;
use konverge_store::MemStore;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn client() -> kube::Client {
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .build()
        .await
        .expect("server");
    kube::Client::new(server.router(), "default")
}

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("an object")
}

fn forbidden(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 && s.reason == "Forbidden" => s.message,
        other => panic!("expected 403, got {other:?}"),
    }
}

/// A pod with one container `c` stating `resources`, and `spec_extra` in its spec.
fn pod(name: &str, resources: Value, spec_extra: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx", "resources": resources}]});
    for (k, v) in spec_extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    object(json!({"metadata": {"name": name}, "spec": spec}))
}

fn used_of(quota: &ResourceQuota) -> BTreeMap<String, String> {
    quota
        .status
        .as_ref()
        .and_then(|s| s.used.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Polls the quota until its `status.used` is `wanted` (the controller acts within
/// milliseconds).
async fn used_becomes(
    quotas: &Api<ResourceQuota>,
    name: &str,
    wanted: &[(&str, &str)],
) -> anyhow::Result<ResourceQuota> {
    let wanted = expect(wanted);
    let what = format!("quota {name}'s status.used is {wanted:?}");
    Ok(eventually_some(&what, || async {
        let quota = quotas.get(name).await.ok()?;
        (used_of(&quota) == wanted).then_some(quota)
    })
    .await)
}

/// Creates a quota and waits until the controller has given it its status.
async fn quota(
    quotas: &Api<ResourceQuota>,
    name: &str,
    spec: Value,
    used: &[(&str, &str)],
) -> anyhow::Result<ResourceQuota> {
    quotas
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await?;
    used_becomes(quotas, name, used).await
}

#[tokio::test]
async fn object_counts_are_enforced_with_kubes_words() -> anyhow::Result<()> {
    let client = client().await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    let made = quota(
        &quotas,
        "counts",
        json!({"hard": {
            "configmaps": "2",
            "count/secrets": "1",
            "services": "3",
            "services.nodeports": "1",
            "services.loadbalancers": "0",
        }}),
        // The `kubernetes` Service is in `default` from the start.
        &[
            ("configmaps", "0"),
            ("count/secrets", "0"),
            ("services", "1"),
            ("services.loadbalancers", "0"),
            ("services.nodeports", "0"),
        ],
    )
    .await?;
    let hard: BTreeMap<String, String> = made
        .status
        .and_then(|s| s.hard)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    assert_eq!(hard.len(), 5, "status.hard follows spec.hard: {hard:?}");

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b"] {
        maps.create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": name}})),
        )
        .await?;
    }
    // Admission charged both before answering.
    assert_eq!(used_of(&quotas.get("counts").await?)["configmaps"], "2");
    let e = maps
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "c"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"configmaps "c" is forbidden: exceeded quota: counts, requested: configmaps=1, used: configmaps=2, limited: configmaps=2"#
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "s1"}})),
        )
        .await?;
    let e = secrets
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "s2"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"secrets "s2" is forbidden: exceeded quota: counts, requested: count/secrets=1, used: count/secrets=1, limited: count/secrets=1"#
    );

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let e = services
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"services "np" is forbidden: exceeded quota: counts, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"#
    );
    services
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})),
        )
        .await?;
    // Changing a service's type is charged as the difference it makes.
    let e = services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "LoadBalancer"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"services "web" is forbidden: exceeded quota: counts, requested: services.loadbalancers=1, used: services.loadbalancers=0, limited: services.loadbalancers=0"#
    );
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "NodePort"}})),
        )
        .await?;
    assert_eq!(
        used_of(&quotas.get("counts").await?),
        expect(&[
            ("configmaps", "2"),
            ("count/secrets", "1"),
            ("services", "2"),
            ("services.loadbalancers", "0"),
            ("services.nodeports", "1"),
        ])
    );
    // A ResourceQuota's own hard names are validated.
    let e = quotas
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "bad"}, "spec": {"hard": {"cpus": "1", "pods": "1.5"}}})),
        )
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) if s.code == 422 => assert_eq!(
            s.message,
            r#"ResourceQuota "bad" is invalid: [spec.hard[cpus]: Invalid value: "cpus": must be a standard resource type or fully qualified, spec.hard[cpus]: Invalid value: "cpus": must be a standard resource for quota, spec.hard[pods]: Invalid value: resource.Quantity{i:resource.int64Amount{value:15, scale:-1}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"", Format:"DecimalSI"}: must be an integer]"#
        ),
        other => panic!("expected 422, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn compute_resources_are_charged_and_required() -> anyhow::Result<()> {
    let client = client().await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    quota(
        &quotas,
        "compute",
        json!({"hard": {"requests.cpu": "1", "limits.cpu": "2", "requests.memory": "1Gi", "pods": "3"}}),
        &[
            ("limits.cpu", "0"),
            ("pods", "0"),
            ("requests.cpu", "0"),
            ("requests.memory", "0"),
        ],
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let e = pods
        .create(&PostParams::default(), &pod("bare", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "bare" is forbidden: failed quota: compute: must specify limits.cpu for: c; requests.cpu for: c; requests.memory for: c"#
    );
    pods.create(
        &PostParams::default(),
        &pod(
            "p1",
            json!({"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1"}}),
            json!({}),
        ),
    )
    .await?;
    assert_eq!(
        used_of(&quotas.get("compute").await?),
        expect(&[
            ("limits.cpu", "1"),
            ("pods", "1"),
            ("requests.cpu", "500m"),
            ("requests.memory", "512Mi"),
        ])
    );
    let e = pods
        .create(
            &PostParams::default(),
            &pod(
                "p2",
                json!({"requests": {"cpu": "750m", "memory": "100Mi"}, "limits": {"cpu": "1"}}),
                json!({}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "p2" is forbidden: exceeded quota: compute, requested: requests.cpu=750m, used: requests.cpu=500m, limited: requests.cpu=1"#
    );
    // Several resources over at once are listed in name order.
    let e = pods
        .create(
            &PostParams::default(),
            &pod(
                "p3",
                json!({"requests": {"cpu": "600m", "memory": "600Mi"}, "limits": {"cpu": "1500m"}}),
                json!({}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "p3" is forbidden: exceeded quota: compute, requested: limits.cpu=1500m,requests.cpu=600m,requests.memory=600Mi, used: limits.cpu=1,requests.cpu=500m,requests.memory=512Mi, limited: limits.cpu=2,requests.cpu=1,requests.memory=1Gi"#
    );
    // A pod that ended gives its compute resources back.
    let mut ended = serde_json::to_value(pods.get_status("p1").await?)?;
    ended["status"]["phase"] = json!("Succeeded");
    pods.replace_status("p1", &PostParams::default(), &object::<Pod>(ended))
        .await?;
    used_becomes(
        &quotas,
        "compute",
        &[
            ("limits.cpu", "0"),
            ("pods", "0"),
            ("requests.cpu", "0"),
            ("requests.memory", "0"),
        ],
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &pod(
            "p2",
            json!({"requests": {"cpu": "750m", "memory": "100Mi"}, "limits": {"cpu": "1"}}),
            json!({}),
        ),
    )
    .await?;
    assert_eq!(
        used_of(&quotas.get("compute").await?)["requests.cpu"],
        "750m"
    );
    Ok(())
}

#[tokio::test]
async fn deletes_release_usage_and_dry_runs_consume_none() -> anyhow::Result<()> {
    let client = client().await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    quota(
        &quotas,
        "one",
        json!({"hard": {"pods": "1", "count/pods": "1"}}),
        &[("count/pods", "0"), ("pods", "0")],
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    pods.create(&dry, &pod("a", json!({}), json!({}))).await?;
    assert_eq!(
        used_of(&quotas.get("one").await?),
        expect(&[("count/pods", "0"), ("pods", "0")]),
        "a dry run is not charged"
    );
    pods.create(&PostParams::default(), &pod("a", json!({}), json!({})))
        .await?;
    let refused = r#"pods "b" is forbidden: exceeded quota: one, requested: count/pods=1,pods=1, used: count/pods=1,pods=1, limited: count/pods=1,pods=1"#;
    let e = pods
        .create(&dry, &pod("b", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(forbidden(e), refused, "a dry run is judged");
    let e = pods
        .create(&PostParams::default(), &pod("b", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(forbidden(e), refused);
    pods.delete("a", &DeleteParams::default()).await?;
    used_becomes(&quotas, "one", &[("count/pods", "0"), ("pods", "0")]).await?;
    pods.create(&PostParams::default(), &pod("b", json!({}), json!({})))
        .await?;
    assert_eq!(
        used_of(&quotas.get("one").await?),
        expect(&[("count/pods", "1"), ("pods", "1")])
    );
    Ok(())
}

#[tokio::test]
async fn scopes_choose_the_pods_a_quota_counts() -> anyhow::Result<()> {
    let client = client().await;
    let classes: Api<PriorityClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "high"}, "value": 1000})),
        )
        .await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    for (name, spec) in [
        (
            "besteffort",
            json!({"hard": {"pods": "1"}, "scopes": ["BestEffort"]}),
        ),
        (
            "high",
            json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
        ),
        (
            "long",
            json!({"hard": {"pods": "5", "requests.cpu": "10"}, "scopes": ["NotTerminating", "NotBestEffort"]}),
        ),
        (
            "terminating",
            json!({"hard": {"pods": "1"}, "scopes": ["Terminating"]}),
        ),
    ] {
        let used: &[(&str, &str)] = if name == "long" {
            &[("pods", "0"), ("requests.cpu", "0")]
        } else {
            &[("pods", "0")]
        };
        quota(&quotas, name, spec, used).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cpu = json!({"requests": {"cpu": "100m"}});
    pods.create(&PostParams::default(), &pod("be1", json!({}), json!({})))
        .await?;
    let e = pods
        .create(&PostParams::default(), &pod("be2", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "be2" is forbidden: exceeded quota: besteffort, requested: pods=1, used: pods=1, limited: pods=1"#
    );
    pods.create(
        &PostParams::default(),
        &pod("burst", cpu.clone(), json!({})),
    )
    .await?;
    pods.create(
        &PostParams::default(),
        &pod("job1", cpu.clone(), json!({"activeDeadlineSeconds": 60})),
    )
    .await?;
    let e = pods
        .create(
            &PostParams::default(),
            &pod("job2", cpu.clone(), json!({"activeDeadlineSeconds": 60})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "job2" is forbidden: exceeded quota: terminating, requested: pods=1, used: pods=1, limited: pods=1"#
    );
    pods.create(
        &PostParams::default(),
        &pod("vip1", cpu.clone(), json!({"priorityClassName": "high"})),
    )
    .await?;
    let e = pods
        .create(
            &PostParams::default(),
            &pod("vip2", cpu.clone(), json!({"priorityClassName": "high"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "vip2" is forbidden: exceeded quota: high, requested: pods=1, used: pods=1, limited: pods=1"#
    );
    for (name, used) in [
        ("besteffort", &[("pods", "1")][..]),
        ("high", &[("pods", "1")][..]),
        ("long", &[("pods", "2"), ("requests.cpu", "200m")][..]),
        ("terminating", &[("pods", "1")][..]),
    ] {
        assert_eq!(used_of(&quotas.get(name).await?), expect(used), "{name}");
    }
    // The controller counts the same pods from scratch when a quota's hard limits change.
    quotas
        .patch(
            "long",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"requests.cpu": "20"}}})),
        )
        .await?;
    let long = eventually_some("status.hard follows spec.hard", || async {
        let long = quotas.get("long").await.ok()?;
        let hard = long
            .status
            .as_ref()
            .and_then(|s| s.hard.clone())
            .unwrap_or_default();
        (hard.get("requests.cpu").map(|q| q.0.as_str()) == Some("20")).then_some(long)
    })
    .await;
    assert_eq!(
        used_of(&long),
        expect(&[("pods", "2"), ("requests.cpu", "200m")])
    );
    Ok(())
}

#[tokio::test]
async fn claims_are_charged_their_storage_overall_and_by_class() -> anyhow::Result<()> {
    let client = client().await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    quota(
        &quotas,
        "storage",
        json!({"hard": {
            "requests.storage": "10Gi",
            "persistentvolumeclaims": "5",
            "gold.storageclass.storage.k8s.io/requests.storage": "3Gi",
            "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "2",
        }}),
        &[
            (
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                "0",
            ),
            ("gold.storageclass.storage.k8s.io/requests.storage", "0"),
            ("persistentvolumeclaims", "0"),
            ("requests.storage", "0"),
        ],
    )
    .await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = |name: &str, class: Option<&str>, size: &str| -> PersistentVolumeClaim {
        let mut spec =
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
        if let Some(class) = class {
            spec["storageClassName"] = json!(class);
        }
        object(json!({"metadata": {"name": name}, "spec": spec}))
    };
    claims
        .create(&PostParams::default(), &claim("g1", Some("gold"), "2Gi"))
        .await?;
    let e = claims
        .create(&PostParams::default(), &claim("g2", Some("gold"), "2Gi"))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"persistentvolumeclaims "g2" is forbidden: exceeded quota: storage, requested: gold.storageclass.storage.k8s.io/requests.storage=2Gi, used: gold.storageclass.storage.k8s.io/requests.storage=2Gi, limited: gold.storageclass.storage.k8s.io/requests.storage=3Gi"#
    );
    claims
        .create(&PostParams::default(), &claim("plain", None, "4Gi"))
        .await?;
    // A bound claim that grows is charged the growth.
    let mut bound = serde_json::to_value(claims.get_status("plain").await?)?;
    bound["status"]["phase"] = json!("Bound");
    claims
        .replace_status(
            "plain",
            &PostParams::default(),
            &object::<PersistentVolumeClaim>(bound),
        )
        .await?;
    let e = claims
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "9Gi"}}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"persistentvolumeclaims "plain" is forbidden: exceeded quota: storage, requested: requests.storage=5Gi, used: requests.storage=6Gi, limited: requests.storage=10Gi"#
    );
    claims
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "8Gi"}}}})),
        )
        .await?;
    assert_eq!(
        used_of(&quotas.get("storage").await?),
        expect(&[
            (
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                "1"
            ),
            ("gold.storageclass.storage.k8s.io/requests.storage", "2Gi"),
            ("persistentvolumeclaims", "2"),
            ("requests.storage", "10Gi"),
        ])
    );
    claims.delete("g1", &DeleteParams::default()).await?;
    used_becomes(
        &quotas,
        "storage",
        &[
            (
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                "0",
            ),
            ("gold.storageclass.storage.k8s.io/requests.storage", "0"),
            ("persistentvolumeclaims", "1"),
            ("requests.storage", "8Gi"),
        ],
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn custom_resources_are_counted_as_count_resource_group() -> anyhow::Result<()> {
    let client = client().await;
    let definitions: Api<CustomResourceDefinition> = Api::all(client.clone());
    definitions
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "widgets.example.com"},
                "spec": {
                    "group": "example.com",
                    "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
                },
            })),
        )
        .await?;
    let resource = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let widget = |name: &str| -> DynamicObject {
        object(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}}),
        )
    };
    // The definition is established within milliseconds; until then its objects are not served.
    eventually("the definition's objects are served", || async {
        widgets.list(&Default::default()).await.is_ok()
    })
    .await;
    widgets
        .create(&PostParams::default(), &widget("w1"))
        .await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    quota(
        &quotas,
        "crd",
        json!({"hard": {"count/widgets.example.com": "2", "count/deployments.apps": "0"}}),
        &[
            ("count/deployments.apps", "0"),
            ("count/widgets.example.com", "1"),
        ],
    )
    .await?;
    widgets
        .create(&PostParams::default(), &widget("w2"))
        .await?;
    let e = widgets
        .create(&PostParams::default(), &widget("w3"))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"widgets.example.com "w3" is forbidden: exceeded quota: crd, requested: count/widgets.example.com=1, used: count/widgets.example.com=2, limited: count/widgets.example.com=2"#
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let e = deployments
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "d"}, "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            }})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"deployments.apps "d" is forbidden: exceeded quota: crd, requested: count/deployments.apps=1, used: count/deployments.apps=0, limited: count/deployments.apps=0"#
    );
    widgets.delete("w1", &DeleteParams::default()).await?;
    used_becomes(
        &quotas,
        "crd",
        &[
            ("count/deployments.apps", "0"),
            ("count/widgets.example.com", "1"),
        ],
    )
    .await?;
    widgets
        .create(&PostParams::default(), &widget("w3"))
        .await?;
    Ok(())
}

#[tokio::test]
async fn overhead_and_extended_resources_are_charged() -> anyhow::Result<()> {
    let client = client().await;
    let classes: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "kata"}, "handler": "kata", "overhead": {"podFixed": {"cpu": "250m"}}})),
        )
        .await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
    quota(
        &quotas,
        "cpu",
        json!({"hard": {"requests.cpu": "1"}}),
        &[("requests.cpu", "0")],
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(
            "sandboxed",
            json!({"requests": {"cpu": "500m"}}),
            json!({"runtimeClassName": "kata"}),
        ),
    )
    .await?;
    assert_eq!(
        used_of(&quotas.get("cpu").await?),
        expect(&[("requests.cpu", "750m")])
    );
    // Extended resources are limited as `requests.<name>`.
    quota(
        &quotas,
        "gpu",
        json!({"hard": {"requests.example.com/gpu": "1"}}),
        &[("requests.example.com/gpu", "0")],
    )
    .await?;
    // (The `cpu` quota still wants every container to state its cpu request.)
    let gpu = json!({"requests": {"example.com/gpu": "1", "cpu": "100m"}, "limits": {"example.com/gpu": "1"}});
    pods.create(
        &PostParams::default(),
        &pod("trainer", gpu.clone(), json!({})),
    )
    .await?;
    let e = pods
        .create(&PostParams::default(), &pod("second", gpu, json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "second" is forbidden: exceeded quota: gpu, requested: requests.example.com/gpu=1, used: requests.example.com/gpu=1, limited: requests.example.com/gpu=1"#
    );
    Ok(())
}
