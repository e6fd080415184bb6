//! The built-in admission plugins, through a `kube::Client` on the in-process server:
//! Priority, DefaultStorageClass, DefaultIngressClass, RuntimeClass and LimitRanger, with
//! kube-apiserver's refusals.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use konverge_apiserver::ApiServer;
use konverge_store::MemStore;
use kube::api::{Api, PostParams};
use serde_json::json;

async fn client() -> kube::Client {
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .build()
        .await
        .expect("server");
    kube::Client::new(server.router(), "default")
}

fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).expect("an object")
}

fn pod(name: &str, spec_extra: serde_json::Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    for (k, v) in spec_extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    object(json!({"metadata": {"name": name}, "spec": spec}))
}

fn forbidden(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 && s.reason == "Forbidden" => s.message,
        other => panic!("expected 403, got {other:?}"),
    }
}

#[tokio::test]
async fn pods_get_their_priority_from_their_class() -> anyhow::Result<()> {
    let client = client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let plain = pods
        .create(&PostParams::default(), &pod("plain", json!({})))
        .await?;
    let spec = plain.spec.unwrap();
    assert_eq!(spec.priority, Some(0));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    let critical = pods
        .create(
            &PostParams::default(),
            &pod(
                "critical",
                json!({"priorityClassName": "system-cluster-critical"}),
            ),
        )
        .await?;
    assert_eq!(critical.spec.unwrap().priority, Some(2_000_000_000));
    let e = pods
        .create(
            &PostParams::default(),
            &pod("lost", json!({"priorityClassName": "gold"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "lost" is forbidden: no PriorityClass with name gold was found"#
    );
    let e = pods
        .create(
            &PostParams::default(),
            &pod("sneaky", json!({"priority": 7})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "sneaky" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"#
    );
    // A global default class applies to pods that name none, and there is only one.
    let classes: Api<PriorityClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "normal"}, "value": 100, "globalDefault": true, "preemptionPolicy": "Never"})),
        )
        .await?;
    let defaulted = pods
        .create(&PostParams::default(), &pod("defaulted", json!({})))
        .await?;
    let spec = defaulted.spec.unwrap();
    assert_eq!(
        (
            spec.priority_class_name.as_deref(),
            spec.priority,
            spec.preemption_policy.as_deref()
        ),
        (Some("normal"), Some(100), Some("Never"))
    );
    let e = classes
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "other"}, "value": 5, "globalDefault": true})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass normal is already marked as default. Only one default can exist"#
    );
    // Updates keep what admission set, even when the client leaves it out.
    let mut update = pods.get("plain").await?;
    update.spec.as_mut().unwrap().priority = None;
    update.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    let updated = pods
        .replace("plain", &PostParams::default(), &update)
        .await?;
    assert_eq!(updated.spec.unwrap().priority, Some(0));
    Ok(())
}

#[tokio::test]
async fn claims_and_ingresses_get_the_default_class() -> anyhow::Result<()> {
    let client = client().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = |name: &str, class: Option<&str>| -> PersistentVolumeClaim {
        let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        if let Some(class) = class {
            spec["storageClassName"] = json!(class);
        }
        object(json!({"metadata": {"name": name}, "spec": spec}))
    };
    let before = claims
        .create(&PostParams::default(), &claim("early", None))
        .await?;
    assert_eq!(
        before.spec.unwrap().storage_class_name,
        None,
        "no default class yet"
    );
    let storage: Api<StorageClass> = Api::all(client.clone());
    for (name, default) in [("slow", false), ("fast", true)] {
        storage
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": name, "annotations": {"storageclass.kubernetes.io/is-default-class": default.to_string()}}, "provisioner": "example.com/disk"})),
            )
            .await?;
    }
    let defaulted = claims
        .create(&PostParams::default(), &claim("late", None))
        .await?;
    assert_eq!(
        defaulted.spec.unwrap().storage_class_name.as_deref(),
        Some("fast")
    );
    let chosen = claims
        .create(&PostParams::default(), &claim("chosen", Some("")))
        .await?;
    assert_eq!(
        chosen.spec.unwrap().storage_class_name.as_deref(),
        Some(""),
        "an empty class is a choice"
    );

    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), "default");
    let classes: Api<k8s_openapi::api::networking::v1::IngressClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "nginx", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}, "spec": {"controller": "example.com/ingress"}})),
        )
        .await?;
    let ingress = ingresses
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "web"}, "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}})),
        )
        .await?;
    assert_eq!(
        ingress.spec.unwrap().ingress_class_name.as_deref(),
        Some("nginx")
    );
    Ok(())
}

#[tokio::test]
async fn limit_ranges_default_and_bound_container_resources() -> anyhow::Result<()> {
    let client = client().await;
    let ranges: Api<k8s_openapi::api::core::v1::LimitRange> =
        Api::namespaced(client.clone(), "default");
    ranges
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "limits"}, "spec": {"limits": [{
                "type": "Container",
                "default": {"cpu": "500m", "memory": "256Mi"},
                "defaultRequest": {"cpu": "100m"},
                "min": {"cpu": "50m"},
                "max": {"memory": "1Gi"},
            }]}})),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let made = pods
        .create(
            &PostParams::default(),
            &pod("web", json!({"containers": [{"name": "app", "image": "nginx", "resources": {"limits": {"memory": "512Mi"}}}]})),
        )
        .await?;
    let resources = made.spec.unwrap().containers[0].resources.clone().unwrap();
    let text = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                k: &str| { m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone()) };
    assert_eq!(text(&resources.limits, "cpu").as_deref(), Some("500m"));
    assert_eq!(
        text(&resources.limits, "memory").as_deref(),
        Some("512Mi"),
        "its own limit kept"
    );
    assert_eq!(text(&resources.requests, "cpu").as_deref(), Some("100m"));
    // A container's own limit is its request (pod defaulting, before admission).
    assert_eq!(
        text(&resources.requests, "memory").as_deref(),
        Some("512Mi")
    );
    let stored = ranges.get("limits").await?;
    let item = &stored.spec.unwrap().limits[0];
    assert_eq!(
        item.default_request.as_ref().unwrap()["memory"].0,
        "256Mi",
        "defaulted from default"
    );
    assert_eq!(
        made.metadata.annotations.unwrap()["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu request for container app; cpu limit for container app"
    );
    let e = pods
        .create(
            &PostParams::default(),
            &pod("greedy", json!({"containers": [{"name": "app", "image": "nginx", "resources": {"limits": {"memory": "2Gi"}, "requests": {"cpu": "10m"}}}]})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "greedy" is forbidden: [minimum cpu usage per Container is 50m, but request is 10m, maximum memory usage per Container is 1Gi, but limit is 2Gi]"#
    );
    Ok(())
}

#[tokio::test]
async fn pods_run_as_a_service_account_with_its_token_and_default_tolerations() -> anyhow::Result<()>
{
    let client = client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let made = pods
        .create(&PostParams::default(), &pod("web", json!({})))
        .await?;
    let made = serde_json::to_value(&made)?;
    let spec = &made["spec"];
    assert_eq!(spec["serviceAccountName"], "default");
    let volume = &spec["volumes"][0];
    let name = volume["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5,
        "{name}"
    );
    assert_eq!(
        volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        3607
    );
    assert_eq!(
        volume["projected"]["sources"][1]["configMap"]["name"],
        "kube-root-ca.crt"
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"][0],
        json!({"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    );
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ])
    );
    // Opting out of the token, and tolerating everything already.
    let quiet = pods
        .create(
            &PostParams::default(),
            &pod("quiet", json!({"automountServiceAccountToken": false, "tolerations": [{"operator": "Exists"}]})),
        )
        .await?;
    let quiet = serde_json::to_value(&quiet)?;
    assert!(quiet["spec"]["volumes"].is_null(), "{}", quiet["spec"]);
    assert_eq!(
        quiet["spec"]["tolerations"],
        json!([{"operator": "Exists"}])
    );
    // A ServiceAccount that does not exist.
    let e = pods
        .create(
            &PostParams::default(),
            &pod("lost", json!({"serviceAccountName": "builder"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"pods "lost" is forbidden: error looking up service account default/builder: serviceaccount "builder" not found"#
    );
    Ok(())
}

#[test]
fn runtime_class_and_resource_quota_run_where_kube_runs_them() {
    let names = konverge_apiserver::admission::Chain::builtin().names();
    let at = |name: &str| names.iter().position(|n| *n == name);
    assert!(at("DefaultStorageClass") < at("RuntimeClass"), "{names:?}");
    assert!(at("RuntimeClass") < at("DefaultIngressClass"), "{names:?}");
    assert_eq!(names.last(), Some(&"ResourceQuota"), "{names:?}");
}

#[tokio::test]
async fn pods_run_as_their_runtime_class_says() -> anyhow::Result<()> {
    let client = client().await;
    let classes: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "kata"},
                "handler": "kata",
                "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                "scheduling": {
                    "nodeSelector": {"runtime": "kata"},
                    "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}],
                },
            })),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let made = pods
        .create(
            &PostParams::default(),
            &pod(
                "sandboxed",
                json!({"runtimeClassName": "kata", "nodeSelector": {"disk": "ssd"}}),
            ),
        )
        .await?;
    let spec = serde_json::to_value(made.spec.unwrap())?;
    assert_eq!(spec["overhead"], json!({"cpu": "250m", "memory": "120Mi"}));
    assert_eq!(
        spec["nodeSelector"],
        json!({"disk": "ssd", "runtime": "kata"})
    );
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "kata", "operator": "Exists", "effect": "NoSchedule"},
        ])
    );
    // The overhead the class defines may be stated, in any form of the same amounts.
    pods.create(
        &PostParams::default(),
        &pod(
            "stated",
            json!({"runtimeClassName": "kata", "overhead": {"cpu": "0.25", "memory": "120Mi"}}),
        ),
    )
    .await?;
    for (name, extra, message) in [
        (
            "lost",
            json!({"runtimeClassName": "gvisor"}),
            r#"pods "lost" is forbidden: pod rejected: RuntimeClass "gvisor" not found"#,
        ),
        (
            "clash",
            json!({"runtimeClassName": "kata", "nodeSelector": {"runtime": "runc"}}),
            r#"pods "clash" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; pod.spec.nodeSelector[runtime] = runc"#,
        ),
        (
            "heavy",
            json!({"runtimeClassName": "kata", "overhead": {"cpu": "1"}}),
            r#"pods "heavy" is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"#,
        ),
        (
            "classless",
            json!({"overhead": {"cpu": "1"}}),
            r#"pods "classless" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"#,
        ),
    ] {
        let e = pods
            .create(&PostParams::default(), &pod(name, extra))
            .await
            .unwrap_err();
        assert_eq!(forbidden(e), message);
    }
    Ok(())
}

#[tokio::test]
async fn limit_ranges_bound_pods_ratios_and_claims() -> anyhow::Result<()> {
    let client = client().await;
    let ranges: Api<k8s_openapi::api::core::v1::LimitRange> =
        Api::namespaced(client.clone(), "default");
    ranges
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "bounds"}, "spec": {"limits": [
                {"type": "Pod", "max": {"cpu": "1"}, "min": {"memory": "100Mi"}},
                {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
                {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "5Gi"}},
            ]}})),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let container = |name: &str, cpu: &str| json!({"name": name, "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}}});
    pods.create(
        &PostParams::default(),
        &pod(
            "fits",
            json!({"containers": [container("a", "400m"), container("b", "400m")]}),
        ),
    )
    .await?;
    for (name, extra, message) in [
        (
            "wide",
            json!({"containers": [container("a", "600m"), container("b", "600m")]}),
            r#"pods "wide" is forbidden: maximum cpu usage per Pod is 1, but limit is 1200m"#,
        ),
        // An init container counts at its peak, when it is bigger than the app containers.
        (
            "slow-start",
            json!({"initContainers": [container("init", "2")], "containers": [container("a", "400m"), container("b", "400m")]}),
            r#"pods "slow-start" is forbidden: maximum cpu usage per Pod is 1, but limit is 2"#,
        ),
        (
            "bursty",
            json!({"containers": [{"name": "a", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}}]}),
            r#"pods "bursty" is forbidden: cpu max limit to request ratio per Container is 2, but provided ratio is 5.000000"#,
        ),
        (
            "unbounded",
            json!({"containers": [{"name": "a", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}),
            r#"pods "unbounded" is forbidden: [maximum cpu usage per Pod is 1.  No limit is specified, cpu max limit to request ratio per Container is 2, but no limit is specified or limit is 0]"#,
        ),
    ] {
        let e = pods
            .create(&PostParams::default(), &pod(name, extra))
            .await
            .unwrap_err();
        assert_eq!(forbidden(e), message);
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = |name: &str, size: &str| -> PersistentVolumeClaim {
        object(
            json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}),
        )
    };
    claims
        .create(&PostParams::default(), &claim("right", "2Gi"))
        .await?;
    for (name, size, message) in [
        (
            "small",
            "500Mi",
            r#"persistentvolumeclaims "small" is forbidden: minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"#,
        ),
        (
            "big",
            "10Gi",
            r#"persistentvolumeclaims "big" is forbidden: maximum storage usage per PersistentVolumeClaim is 5Gi, but request is 10Gi"#,
        ),
    ] {
        let e = claims
            .create(&PostParams::default(), &claim(name, size))
            .await
            .unwrap_err();
        assert_eq!(forbidden(e), message);
    }
    // Growing a bound claim is held to the same bounds.
    let mut bound = serde_json::to_value(claims.get_status("right").await?)?;
    bound["status"]["phase"] = json!("Bound");
    claims
        .replace_status(
            "right",
            &PostParams::default(),
            &object::<PersistentVolumeClaim>(bound),
        )
        .await?;
    let e = claims
        .patch(
            "right",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"resources": {"requests": {"storage": "6Gi"}}}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(e),
        r#"persistentvolumeclaims "right" is forbidden: maximum storage usage per PersistentVolumeClaim is 5Gi, but request is 6Gi"#
    );
    Ok(())
}
