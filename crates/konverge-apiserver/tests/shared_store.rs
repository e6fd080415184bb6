//! Two servers over one store, as two `konverge up` over one etcd: what one server writes
//! of the configuration the other judges requests by (RBAC, admission policies) reaches the
//! other through its watch caches, not only through its own writes.

#[path = "common/eventually.rs"]
mod eventually;
#[path = "common/router.rs"]
mod router;

use std::sync::Arc;

use eventually::eventually;
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_store::{KvStore, MemStore};
use serde_json::{Value, json};

async fn servers() -> (Arc<ApiServer>, Arc<ApiServer>) {
    let store: Arc<dyn KvStore> = Arc::new(MemStore::new());
    let first = ApiServer::builder(store.clone())
        .authorization(AuthorizationMode::Rbac)
        .build()
        .await
        .expect("first server");
    // The second runs no control loops: the first's act for both.
    let second = ApiServer::builder(store)
        .authorization(AuthorizationMode::Rbac)
        .control_loops(false)
        .build()
        .await
        .expect("second server");
    (first, second)
}

/// A request to `server`'s router, as `user` when given: status and body (`null` sends none).
async fn send(
    server: &Arc<ApiServer>,
    method: &str,
    path: &str,
    user: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let body = (!body.is_null()).then_some(body);
    let (code, _, answer) = router::send(server, method, path, user, body).await;
    (code, answer)
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn a_role_bound_through_one_server_is_honoured_by_the_other() {
    let (first, second) = servers().await;
    // The second server has judged alice already, so its view of the policy is built.
    let (code, body) = send(&second, "GET", CONFIGMAPS, Some("alice"), Value::Null).await;
    assert_eq!(code, 403, "{body}");

    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    let role = json!({"metadata": {"name": "reader"}, "rules": [{"apiGroups": [""],
        "resources": ["configmaps"], "verbs": ["list"]}]});
    let (code, body) = send(&first, "POST", &format!("{rbac}/roles"), None, role).await;
    assert_eq!(code, 201, "{body}");
    let binding = json!({"metadata": {"name": "alice-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]});
    let (code, body) = send(
        &first,
        "POST",
        &format!("{rbac}/rolebindings"),
        None,
        binding,
    )
    .await;
    assert_eq!(code, 201, "{body}");

    eventually("the second server lets alice list", || async {
        send(&second, "GET", CONFIGMAPS, Some("alice"), Value::Null)
            .await
            .0
            == 200
    })
    .await;

    // And takes it back the same way.
    let (code, body) = send(
        &first,
        "DELETE",
        &format!("{rbac}/rolebindings/alice-reads"),
        None,
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    eventually("the second server refuses alice again", || async {
        send(&second, "GET", CONFIGMAPS, Some("alice"), Value::Null)
            .await
            .0
            == 403
    })
    .await;
}

#[tokio::test]
async fn an_admission_policy_written_through_one_server_is_enforced_by_the_other() {
    let (first, second) = servers().await;
    let configmap = |name: &str| json!({"metadata": {"name": name}, "data": {"x": "no"}});
    // The second server has admitted a write already, so its view of the policies is built.
    let (code, body) = send(&second, "POST", CONFIGMAPS, None, configmap("before")).await;
    assert_eq!(code, 201, "{body}");

    let admission = "/apis/admissionregistration.k8s.io/v1";
    let policy = json!({"metadata": {"name": "x-is-ok"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "validations": [{"expression": "object.data.x == 'ok'", "message": "x must be ok"}]}});
    let (code, body) = send(
        &first,
        "POST",
        &format!("{admission}/validatingadmissionpolicies"),
        None,
        policy,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let binding = json!({"metadata": {"name": "x-is-ok"},
        "spec": {"policyName": "x-is-ok", "validationActions": ["Deny"]}});
    let (code, body) = send(
        &first,
        "POST",
        &format!("{admission}/validatingadmissionpolicybindings"),
        None,
        binding,
    )
    .await;
    assert_eq!(code, 201, "{body}");

    let mut tries = 0;
    eventually("the second server enforces the policy", || {
        tries += 1;
        let second = second.clone();
        let name = format!("after-{tries}");
        async move {
            let (code, body) = send(&second, "POST", CONFIGMAPS, None, configmap(&name)).await;
            code == 422
                && body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("x must be ok"))
        }
    })
    .await;
}

/// The `kubernetes` Endpoints of every server list every server over the store, and a
/// server withdrawing takes itself out (on tokio's paused clock: the renewals every 10 s
/// pass at once).
#[tokio::test(start_paused = true)]
async fn the_kubernetes_endpoints_list_every_server_over_the_store() {
    let store: Arc<dyn KvStore> = Arc::new(MemStore::new());
    let server = |ip: [u8; 4]| {
        ApiServer::builder(store.clone())
            .control_loops(false)
            .advertise(std::net::IpAddr::from(ip), 6443)
            .build()
    };
    let first = server([10, 0, 0, 2]).await.expect("first server");
    let second = server([10, 0, 0, 3]).await.expect("second server");
    let listed = |server: Arc<ApiServer>| async move {
        let (_, endpoints) = send(
            &server,
            "GET",
            "/api/v1/namespaces/default/endpoints/kubernetes",
            None,
            Value::Null,
        )
        .await;
        let (_, slice) = send(
            &server,
            "GET",
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
            None,
            Value::Null,
        )
        .await;
        let ips: Vec<String> = endpoints["subsets"][0]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a["ip"].as_str().unwrap_or_default().to_string())
            .collect();
        let sliced: Vec<String> = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["addresses"][0].as_str().unwrap_or_default().to_string())
            .collect();
        (ips == sliced).then_some(ips)
    };
    for server in [&first, &second] {
        eventually("both servers are listed", || {
            let server = (*server).clone();
            async move { listed(server).await == Some(vec!["10.0.0.2".into(), "10.0.0.3".into()]) }
        })
        .await;
    }
    second.withdraw().await;
    assert_eq!(listed(first.clone()).await, Some(vec!["10.0.0.2".into()]));
    // And it stays out: nothing renews its lease any more.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert_eq!(listed(first.clone()).await, Some(vec!["10.0.0.2".into()]));
}
