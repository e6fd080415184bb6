//! The Endpoints, EndpointSlice and EndpointSlice mirroring controllers against an
//! in-process API server, in paused time.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use konverge_testkit::{FaultPlan, TestEnv, World};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const ALL: &str =
    "endpoints-controller,endpointslice-controller,endpointslice-mirroring-controller";
const WAIT: Duration = Duration::from_secs(30);

async fn create<K>(client: &Client, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    let api: Api<K> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &object)
        .await
        .expect("created")
}

async fn node(client: &Client, name: &str, zone: &str) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
    }))
    .expect("a node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("the node is created");
}

fn service(name: &str, spec: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"team": "shop"}},
        "spec": spec,
    })
}

/// A pod labelled `app`, on `node-a`, whose container serves `http` on `port`.
fn pod(name: &str, app: &str, port: i32) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "c", "image": "nginx", "ports": [
                {"name": "http", "containerPort": port},
            ]}],
        },
    })
}

/// Plays the kubelet: the pod runs, Ready or not, at `ip`.
async fn run(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) {
    support::set_pod_running(pods, name, ready).await;
    let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the pod's IP is written");
}

/// Plays the kubelet in one write: the pod runs, Ready, at `ip`.
async fn run_ready(pods: &Api<Pod>, name: &str, ip: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the pod's status is written");
}

fn slices_api(client: &Client) -> Api<EndpointSlice> {
    Api::namespaced(client.clone(), "default")
}

fn ips(addresses: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>) -> Vec<String> {
    addresses.iter().flatten().map(|a| a.ip.clone()).collect()
}

fn endpoint_count(slices: &[EndpointSlice]) -> usize {
    slices.iter().map(|s| s.endpoints.len()).sum()
}

fn conditions(endpoint: &Endpoint) -> (Option<bool>, Option<bool>, Option<bool>) {
    let c = endpoint.conditions.clone().unwrap_or_default();
    (c.ready, c.serving, c.terminating)
}

fn by_pod<'s>(slices: &'s [EndpointSlice], pod: &str) -> Option<&'s Endpoint> {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .find(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(pod))
}

#[tokio::test(start_paused = true)]
async fn a_service_gets_endpoints_and_a_slice_of_its_pods() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    let svc: Service = create(
        &client,
        service(
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (i, ready) in [true, true, false].into_iter().enumerate() {
        let name = format!("web-{i}");
        create::<Pod>(&client, pod(&name, "web", 8080)).await;
        run(&pods, &name, &format!("10.244.1.{}", i + 1), ready).await;
    }

    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = support::wait_for(&endpoints, "web", WAIT, |ep| {
        ep.subsets.as_ref().is_some_and(|s| {
            s.len() == 1
                && ips(&s[0].addresses).len() == 2
                && ips(&s[0].not_ready_addresses).len() == 1
        })
    })
    .await;
    let subset = &ep.subsets.as_ref().expect("subsets")[0];
    assert_eq!(ips(&subset.addresses), ["10.244.1.1", "10.244.1.2"]);
    assert_eq!(ips(&subset.not_ready_addresses), ["10.244.1.3"]);
    let port = &subset.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), 8080, Some("TCP"))
    );
    let address = &subset.addresses.as_ref().expect("addresses")[0];
    assert_eq!(address.node_name.as_deref(), Some("node-a"));
    let target = address.target_ref.as_ref().expect("a target");
    assert_eq!(
        (target.kind.as_deref(), target.name.as_deref()),
        (Some("Pod"), Some("web-0"))
    );
    assert_eq!(ep.labels().get("team").map(String::as_str), Some("shop"));
    assert!(!ep.labels().contains_key("service.kubernetes.io/headless"));

    assert!(ep.metadata.owner_references.is_none());

    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=web",
        WAIT,
        |s| {
            s.len() == 1
                && endpoint_count(s) == 3
                && by_pod(s, "web-2").is_some_and(|e| e.conditions.is_some())
        },
    )
    .await;
    let slice = &slices[0];
    assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
    assert!(slice.name_any().starts_with("web-"));
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(
        slice
            .labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpointslice-controller.k8s.io")
    );
    assert_eq!(slice.labels().get("team").map(String::as_str), Some("shop"));
    let owner = &slice.owner_references()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.clone(),
            owner.controller
        ),
        ("Service", "web", svc.uid().expect("a uid"), Some(true))
    );
    let port = &slice.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.port),
        (Some("http"), Some(8080))
    );
    let ready = by_pod(&slices, "web-0").expect("web-0");
    assert_eq!(conditions(ready), (Some(true), Some(true), Some(false)));
    assert_eq!(ready.addresses, ["10.244.1.1"]);
    assert_eq!(ready.node_name.as_deref(), Some("node-a"));
    assert_eq!(ready.zone.as_deref(), Some("zone-1"));
    let unready = by_pod(&slices, "web-2").expect("web-2");
    assert_eq!(conditions(unready), (Some(false), Some(false), Some(false)));

    // web-2 turns Ready: the Endpoints record when, as the trigger time.
    let ready = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2099-01-01T00:00:00Z"},
    ]}});
    pods.patch_status("web-2", &PatchParams::default(), &Patch::Merge(ready))
        .await
        .expect("ready");
    let ep = support::wait_for(&endpoints, "web", WAIT, |ep| {
        ep.subsets
            .as_ref()
            .is_some_and(|s| ips(&s[0].addresses).len() == 3)
    })
    .await;
    assert_eq!(
        ep.annotations()
            .get("endpoints.kubernetes.io/last-change-trigger-time")
            .map(String::as_str),
        Some("2099-01-01T00:00:00Z")
    );
    support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=web",
        WAIT,
        |s| {
            by_pod(s, "web-2")
                .is_some_and(|e| conditions(e) == (Some(true), Some(true), Some(false)))
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn named_target_ports_resolve_per_pod() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service("api", json!({"selector": {"app": "api"}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, port, ip) in [
        ("api-old", 8080, "10.244.2.1"),
        ("api-new", 9090, "10.244.2.2"),
    ] {
        create::<Pod>(&client, pod(name, "api", port)).await;
        run(&pods, name, ip, true).await;
    }
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = support::wait_for(&endpoints, "api", WAIT, |ep| {
        ep.subsets.as_ref().is_some_and(|s| s.len() == 2)
    })
    .await;
    let mut by_port: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for subset in ep.subsets.iter().flatten() {
        let port = subset.ports.as_ref().expect("ports")[0].clone();
        assert_eq!(port.name.as_deref(), Some("web"));
        by_port.insert(port.port, ips(&subset.addresses));
    }
    assert_eq!(
        by_port.get(&8080).cloned(),
        Some(vec!["10.244.2.1".to_string()])
    );
    assert_eq!(
        by_port.get(&9090).cloned(),
        Some(vec!["10.244.2.2".to_string()])
    );

    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=api",
        WAIT,
        |s| s.len() == 2 && endpoint_count(s) == 2,
    )
    .await;
    let mut ports: Vec<Option<i32>> = slices
        .iter()
        .map(|s| {
            s.ports
                .as_ref()
                .and_then(|p| p.first())
                .and_then(|p| p.port)
        })
        .collect();
    ports.sort();
    assert_eq!(ports, [Some(8080), Some(9090)]);
}

#[tokio::test(start_paused = true)]
async fn publish_not_ready_addresses_lists_unready_pods_as_ready() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service(
            "peers",
            json!({"selector": {"app": "peers"}, "publishNotReadyAddresses": true, "ports": [{"port": 7000, "targetPort": 7000}]}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (i, name) in ["peers-0", "peers-1"].into_iter().enumerate() {
        create::<Pod>(&client, pod(name, "peers", 7000)).await;
        run(&pods, name, &format!("10.244.3.{}", i + 1), false).await;
    }
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = support::wait_for(&endpoints, "peers", WAIT, |ep| {
        ep.subsets
            .as_ref()
            .is_some_and(|s| s.len() == 1 && ips(&s[0].addresses).len() == 2)
    })
    .await;
    let subset = &ep.subsets.as_ref().expect("subsets")[0];
    assert!(ips(&subset.not_ready_addresses).is_empty());
    assert_eq!(subset.ports.as_ref().expect("ports")[0].port, 7000);

    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=peers",
        WAIT,
        |s| endpoint_count(s) == 2,
    )
    .await;
    for pod in ["peers-0", "peers-1"] {
        let endpoint = by_pod(&slices, pod).expect("the pod's endpoint");
        assert_eq!(conditions(endpoint), (Some(true), Some(false), Some(false)));
    }
}

#[tokio::test(start_paused = true)]
async fn a_terminating_pod_is_serving_and_terminating_but_not_ready() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service("shop", json!({"selector": {"app": "shop"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut leaving = pod("shop-0", "shop", 8080);
    // A finalizer keeps the pod terminating once deleted, as a kubelet still stopping it.
    leaving["metadata"]["finalizers"] = json!(["example.com/hold"]);
    create::<Pod>(&client, leaving).await;
    run(&pods, "shop-0", "10.244.4.1", true).await;
    create::<Pod>(&client, pod("shop-1", "shop", 8080)).await;
    run(&pods, "shop-1", "10.244.4.2", true).await;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    support::wait_for(&endpoints, "shop", WAIT, |ep| {
        ep.subsets
            .as_ref()
            .is_some_and(|s| s.len() == 1 && ips(&s[0].addresses).len() == 2)
    })
    .await;

    pods.delete("shop-0", &DeleteParams::default())
        .await
        .expect("deleted");
    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=shop",
        WAIT,
        |s| by_pod(s, "shop-0").is_some_and(|e| conditions(e).2 == Some(true)),
    )
    .await;
    let endpoint = by_pod(&slices, "shop-0").expect("shop-0");
    assert_eq!(conditions(endpoint), (Some(false), Some(true), Some(true)));
    assert_eq!(
        conditions(by_pod(&slices, "shop-1").expect("shop-1")),
        (Some(true), Some(true), Some(false))
    );
    // Endpoints leave terminating pods out.
    let ep = support::wait_for(&endpoints, "shop", WAIT, |ep| {
        ep.subsets
            .as_ref()
            .is_some_and(|s| ips(&s[0].addresses) == ["10.244.4.2"])
    })
    .await;
    assert!(ips(&ep.subsets.as_ref().expect("subsets")[0].not_ready_addresses).is_empty());

    // Let the pod go: its finalizer released, then deleted for good (no kubelet runs its
    // node to end its grace period).
    pods.patch(
        "shop-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("released");
    pods.delete("shop-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleted for good");
    support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=shop",
        WAIT,
        |s| endpoint_count(s) == 1 && by_pod(s, "shop-0").is_none(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn two_hundred_fifty_pods_fill_three_slices_of_at_most_a_hundred() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service("big", json!({"selector": {"app": "big"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..250 {
        let name = format!("big-{i}");
        create::<Pod>(&client, pod(&name, "big", 8080)).await;
        run_ready(&pods, &name, &format!("10.245.{}.{}", i / 200, i % 200 + 1)).await;
    }
    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=big",
        Duration::from_secs(120),
        |s| {
            endpoint_count(s) == 250
                && s.iter()
                    .all(|s| s.endpoints.iter().all(|e| conditions(e).0 == Some(true)))
        },
    )
    .await;
    assert_eq!(
        slices.len(),
        3,
        "slices: {:?}",
        slices.iter().map(|s| s.endpoints.len()).collect::<Vec<_>>()
    );
    assert!(slices.iter().all(|s| s.endpoints.len() <= 100));
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = support::wait_for(&endpoints, "big", WAIT, |ep| {
        ep.subsets
            .as_ref()
            .is_some_and(|s| ips(&s[0].addresses).len() == 250)
    })
    .await;
    assert!(
        !ep.annotations()
            .contains_key("endpoints.kubernetes.io/over-capacity")
    );
}

#[tokio::test(start_paused = true)]
async fn deleting_a_service_deletes_its_endpoints() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service("gone", json!({"selector": {"app": "gone"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create::<Pod>(&client, pod("gone-0", "gone", 8080)).await;
    run(&pods, "gone-0", "10.244.5.1", true).await;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    support::wait_for(&endpoints, "gone", WAIT, |ep| ep.subsets.is_some()).await;

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .delete("gone", &DeleteParams::default())
        .await
        .expect("deleted");
    let deadline = tokio::time::Instant::now() + WAIT;
    while endpoints.get_opt("gone").await.expect("a read").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Endpoints outlived their Service"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The slices go with their owner (the garbage collector).
    support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=gone",
        WAIT,
        |s| s.is_empty(),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn endpoints_of_a_selectorless_service_are_mirrored() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    create::<Service>(
        &client,
        service("db", json!({"ports": [{"name": "pg", "port": 5432}]})),
    )
    .await;
    create::<Service>(
        &client,
        service("hidden", json!({"ports": [{"name": "pg", "port": 5432}]})),
    )
    .await;
    let subsets = json!([{
        "addresses": [{"ip": "10.0.0.5", "nodeName": "db-host"}],
        "notReadyAddresses": [{"ip": "10.0.0.6"}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
    }]);
    let written: Endpoints = create(
        &client,
        json!({"metadata": {"name": "db", "labels": {"tier": "data"}, "annotations": {"note": "manual"}}, "subsets": subsets}),
    )
    .await;
    create::<Endpoints>(
        &client,
        json!({"metadata": {"name": "hidden", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}, "subsets": subsets}),
    )
    .await;

    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=db",
        WAIT,
        |s| s.len() == 1 && endpoint_count(s) == 2,
    )
    .await;
    let slice = &slices[0];
    assert_eq!(
        slice
            .labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpointslicemirroring-controller.k8s.io")
    );
    assert_eq!(slice.labels().get("tier").map(String::as_str), Some("data"));
    assert_eq!(
        slice.annotations().get("note").map(String::as_str),
        Some("manual")
    );
    assert_eq!(slice.metadata.generate_name.as_deref(), Some("db-"));
    let owner = &slice.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Endpoints", "db")
    );
    let ready = |ip: &str| {
        slice
            .endpoints
            .iter()
            .find(|e| e.addresses == [ip])
            .and_then(|e| e.conditions.as_ref()?.ready)
    };
    assert_eq!(
        (ready("10.0.0.5"), ready("10.0.0.6")),
        (Some(true), Some(false))
    );
    let port = &slice.ports.as_ref().expect("ports")[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("pg"), Some(5432)));
    assert!(
        slices_api(&client)
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=hidden"))
            .await
            .expect("listed")
            .items
            .is_empty(),
        "skip-mirror Endpoints are not mirrored"
    );
    // The endpoints controller leaves the users' Endpoints alone.
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let now = endpoints.get("db").await.expect("still there");
    assert_eq!(now.subsets, written.subsets);

    // A new address is mirrored into the same slice.
    let more = json!({"subsets": [{
        "addresses": [{"ip": "10.0.0.5", "nodeName": "db-host"}, {"ip": "10.0.0.7"}],
        "notReadyAddresses": [{"ip": "10.0.0.6"}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
    }]});
    endpoints
        .patch("db", &PatchParams::default(), &Patch::Merge(more))
        .await
        .expect("patched");
    let after = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=db",
        WAIT,
        |s| s.len() == 1 && endpoint_count(s) == 3,
    )
    .await;
    assert_eq!(after[0].name_any(), slice.name_any());
}

#[tokio::test(start_paused = true)]
async fn a_headless_service_is_labelled_and_carries_hostnames() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service("db", json!({"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]})),
    )
    .await;
    let mut member = pod("db-0", "db", 8080);
    member["spec"]["hostname"] = json!("db-0");
    member["spec"]["subdomain"] = json!("db");
    create::<Pod>(&client, member).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    run(&pods, "db-0", "10.244.6.1", true).await;

    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = support::wait_for(&endpoints, "db", WAIT, |ep| ep.subsets.is_some()).await;
    assert_eq!(
        ep.labels()
            .get("service.kubernetes.io/headless")
            .map(String::as_str),
        Some("")
    );
    assert_eq!(ep.labels().get("team").map(String::as_str), Some("shop"));
    let address = &ep.subsets.as_ref().expect("subsets")[0]
        .addresses
        .as_ref()
        .expect("addresses")[0];
    assert_eq!(address.hostname.as_deref(), Some("db-0"));

    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=db",
        WAIT,
        |s| endpoint_count(s) == 1,
    )
    .await;
    assert!(slices.iter().all(|s| {
        s.labels()
            .get("service.kubernetes.io/headless")
            .map(String::as_str)
            == Some("")
    }));
    let endpoint = by_pod(&slices, "db-0").expect("db-0");
    assert_eq!(endpoint.hostname.as_deref(), Some("db-0"));
}

#[tokio::test(start_paused = true)]
async fn a_pod_on_a_node_not_yet_known_joins_its_slice_with_the_nodes_zone() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    node(&client, "node-a", "zone-1").await;
    create::<Service>(
        &client,
        service("zoned", json!({"selector": {"app": "zoned"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create::<Pod>(&client, pod("zoned-a", "zoned", 8080)).await;
    run(&pods, "zoned-a", "10.244.8.1", true).await;
    let mut elsewhere = pod("zoned-b", "zoned", 8080);
    elsewhere["spec"]["nodeName"] = json!("node-b");
    create::<Pod>(&client, elsewhere).await;
    run(&pods, "zoned-b", "10.244.8.2", true).await;
    // The Endpoints list both; the slice leaves out the pod whose Node is unknown.
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    support::wait_for(&endpoints, "zoned", WAIT, |ep| {
        ep.subsets
            .as_ref()
            .is_some_and(|s| ips(&s[0].addresses).len() == 2)
    })
    .await;
    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=zoned",
        WAIT,
        |s| endpoint_count(s) == 1,
    )
    .await;
    assert!(by_pod(&slices, "zoned-b").is_none());

    node(&client, "node-b", "zone-2").await;
    let slices = support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=zoned",
        WAIT,
        |s| endpoint_count(s) == 2,
    )
    .await;
    let zone = |pod: &str| by_pod(&slices, pod).and_then(|e| e.zone.clone());
    assert_eq!(
        (zone("zoned-a").as_deref(), zone("zoned-b").as_deref()),
        (Some("zone-1"), Some("zone-2"))
    );

    // A Node's zone changing is reflected too.
    Api::<Node>::all(client.clone())
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "zone-3"}}}),
            ),
        )
        .await
        .expect("relabelled");
    support::wait_for_list(
        &slices_api(&client),
        "kubernetes.io/service-name=zoned",
        WAIT,
        |s| by_pod(s, "zoned-b").and_then(|e| e.zone.as_deref()) == Some("zone-3"),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn endpoints_left_without_a_service_are_deleted_but_leader_records_are_kept() {
    let (env, _running) = support::cluster(ALL).await;
    let client = env.client();
    let subsets = json!([{"addresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 80}]}]);
    create::<Endpoints>(
        &client,
        json!({"metadata": {"name": "orphan"}, "subsets": subsets}),
    )
    .await;
    create::<Endpoints>(
        &client,
        json!({"metadata": {"name": "lock", "annotations": {"control-plane.alpha.kubernetes.io/leader": "{}"}}}),
    )
    .await;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    // Not at once: a Service applied just after its Endpoints must find them.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(endpoints.get_opt("orphan").await.expect("a read").is_some());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while endpoints.get_opt("orphan").await.expect("a read").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leftover Endpoints stayed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(endpoints.get_opt("lock").await.expect("a read").is_some());
}

/// Every Service's Endpoints and slices list its five running pods as ready.
fn converged(world: &World) -> Result<(), String> {
    let ep: Endpoints = world.get_as("default", "web").ok_or("no Endpoints yet")?;
    let ready = ep
        .subsets
        .iter()
        .flatten()
        .map(|s| ips(&s.addresses).len())
        .sum::<usize>();
    if ready != 5 {
        return Err(format!("Endpoints list {ready} ready addresses"));
    }
    let slices: Vec<EndpointSlice> = world
        .list("endpointslices.discovery.k8s.io")
        .filter_map(|(_, v)| serde_json::from_value::<EndpointSlice>(v.clone()).ok())
        .filter(|s| {
            s.labels()
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some("endpointslice-controller.k8s.io")
        })
        .collect();
    let ready = slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| conditions(e).0 == Some(true))
        .count();
    if slices.len() != 1 || ready != 5 {
        return Err(format!(
            "{} slices with {ready} ready endpoints",
            slices.len()
        ));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=4 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env
            .invariants()
            .watch::<Endpoints>()
            .watch::<EndpointSlice>()
            .start()
            .await;
        let running = support::controllers(&env, ALL).await;
        let direct = env.direct_client();
        node(&direct, "node-a", "zone-1").await;
        let faults = plan.spawn(&env.faults());
        create::<Service>(
            &direct,
            service("web", json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]})),
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(direct.clone(), "default");
        for i in 0..5 {
            let name = format!("web-{i}");
            create::<Pod>(&direct, pod(&name, "web", 8080)).await;
            run(&pods, &name, &format!("10.244.7.{}", i + 1), true).await;
        }
        faults.await.expect("the plan ran");

        check
            .converges(Duration::from_secs(60), converged)
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(15)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .idempotent(Duration::from_secs(30), async {
                running.stop().await.expect("stopped");
                support::controllers(&env, ALL).await
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
