//! kubectl's workload workflows against `konverge up`, answered by kube-controller-manager's
//! controllers, the scheduler and the simulated node running in it: deployments created,
//! scaled, rolled, paused, undone and restarted; jobs run to completion (also from a
//! CronJob); a Deployment exposed as a Service gets EndpointSlices with its pods' IPs.

mod common;

use std::sync::Arc;

use common::poll::{json, kubectl, until};
use serde_json::Value;

fn images(rs: &Value) -> Vec<String> {
    rs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rs| rs["spec"]["replicas"].as_i64() > Some(0))
        .map(|rs| {
            rs["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_roll_scale_pause_undo_and_restart_with_kubectl() -> anyhow::Result<()> {
    let up = Arc::new(common::Up::start());

    kubectl(
        &up,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    )
    .await;
    let out = kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=20s"],
    )
    .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let rs = json(&up, &["get", "rs", "-l", "app=web"]).await;
    let first = rs["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let hash = rs["items"][0]["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(first, format!("web-{hash}"));
    assert_eq!(
        rs["items"][0]["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let deploy = json(&up, &["get", "deployment", "web"]).await;
    assert_eq!(deploy["status"]["availableReplicas"], 3);
    let available = deploy["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .cloned()
        .unwrap_or_default();
    assert_eq!(available["status"], "True");
    assert_eq!(available["reason"], "MinimumReplicasAvailable");

    kubectl(&up, &["scale", "deployment", "web", "--replicas=5"]).await;
    until(&up, &["get", "deployment", "web"], |d| {
        d["status"]["readyReplicas"] == 5
    })
    .await;

    kubectl(&up, &["set", "image", "deployment/web", "nginx=nginx:1.27"]).await;
    let out = kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=20s"],
    )
    .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let rs = json(&up, &["get", "rs", "-l", "app=web"]).await;
    assert_eq!(images(&rs), ["nginx:1.27"]);
    let history = kubectl(&up, &["rollout", "history", "deployment/web"]).await;
    assert!(history.contains('1') && history.contains('2'), "{history}");

    kubectl(&up, &["rollout", "undo", "deployment/web"]).await;
    let out = kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=20s"],
    )
    .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let rs = json(&up, &["get", "rs", "-l", "app=web"]).await;
    assert_eq!(
        images(&rs),
        ["nginx"],
        "the undo went back to the first template"
    );
    let reused = rs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|rs| rs["metadata"]["name"] == first.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        reused["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );

    kubectl(&up, &["rollout", "pause", "deployment/web"]).await;
    kubectl(&up, &["set", "image", "deployment/web", "nginx=nginx:1.28"]).await;
    until(&up, &["get", "deployment", "web"], |d| {
        d["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Progressing" && c["reason"] == "DeploymentPaused")
    })
    .await;
    let rs = json(&up, &["get", "rs", "-l", "app=web"]).await;
    assert_eq!(images(&rs), ["nginx"], "a paused deployment does not roll");
    kubectl(&up, &["rollout", "resume", "deployment/web"]).await;
    let out = kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=20s"],
    )
    .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    kubectl(&up, &["rollout", "restart", "deployment/web"]).await;
    let out = kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=20s"],
    )
    .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let wide = kubectl(&up, &["get", "rs,pods", "-o", "wide"]).await;
    assert!(
        wide.contains("replicaset.apps/web-") && wide.contains("pod/web-"),
        "{wide}"
    );

    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_and_services_get_endpoint_slices_with_kubectl() -> anyhow::Result<()> {
    let up = Arc::new(common::Up::start());

    kubectl(&up, &["create", "job", "pi", "--image=busybox"]).await;
    let out = kubectl(
        &up,
        &[
            "wait",
            "--for=condition=complete",
            "job/pi",
            "--timeout=20s",
        ],
    )
    .await;
    assert!(out.contains("condition met"), "{out}");
    let job = json(&up, &["get", "job", "pi"]).await;
    assert_eq!(job["status"]["succeeded"], 1);
    assert!(job["status"]["completionTime"].is_string(), "{job}");

    kubectl(
        &up,
        &[
            "create",
            "cronjob",
            "nightly",
            "--image=busybox",
            "--schedule=0 3 * * *",
        ],
    )
    .await;
    kubectl(
        &up,
        &["create", "job", "nightly-now", "--from=cronjob/nightly"],
    )
    .await;
    let out = kubectl(
        &up,
        &[
            "wait",
            "--for=condition=complete",
            "job/nightly-now",
            "--timeout=20s",
        ],
    )
    .await;
    assert!(out.contains("condition met"), "{out}");

    kubectl(
        &up,
        &[
            "create",
            "deployment",
            "api",
            "--image=nginx",
            "--replicas=2",
        ],
    )
    .await;
    kubectl(
        &up,
        &["rollout", "status", "deployment/api", "--timeout=20s"],
    )
    .await;
    kubectl(&up, &["expose", "deployment", "api", "--port=80"]).await;
    let slices = until(
        &up,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=api",
        ],
        |s| {
            s["items"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
                .filter(|e| e["conditions"]["ready"] == true)
                .count()
                == 2
        },
    )
    .await;
    assert_eq!(
        slices["items"][0]["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    let endpoints = json(&up, &["get", "endpoints", "api"]).await;
    let addresses = endpoints["subsets"][0]["addresses"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(addresses, 2, "{endpoints}");

    Ok(())
}
