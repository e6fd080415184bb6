//! kubectl against the simulated nodes of `konverge up --nodes N`: node shapes
//! (`--node-zones`, `--node-capacity`), StatefulSets started and scaled down in order,
//! DaemonSets with a pod per node, `kubectl drain` honouring a PodDisruptionBudget, pods'
//! nodes and IPs in `get pods -o wide`, and the scheduler's `Scheduled` event in
//! `describe pod`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufReader;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Up;
use common::poll::{apply, json, kubectl, kubectl_run, until, until_within};
use serde_json::Value;

/// The pods of `list` (a `kubectl get pods -o json`).
fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn node_of(pod: &Value) -> String {
    pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn is_ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

fn is_terminating(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_string()
}

/// Running, Ready and not being deleted.
fn serving(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && is_ready(pod) && !is_terminating(pod)
}

/// The rows of a kubectl table as column → cell. Columns start where the header has a word
/// after two spaces or more (kubectl pads with three), so `NOMINATED NODE` is one column and
/// a cell such as `1 (5s ago)` stays whole.
fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let bytes = header.as_bytes();
    let starts: Vec<usize> = (0..bytes.len())
        .filter(|&i| {
            bytes[i] != b' ' && (i == 0 || (i >= 2 && bytes[i - 1] == b' ' && bytes[i - 2] == b' '))
        })
        .collect();
    let cell = |line: &str, i: usize| {
        let from = starts[i].min(line.len());
        let to = starts.get(i + 1).map_or(line.len(), |&e| e.min(line.len()));
        line.get(from..to).unwrap_or_default().trim().to_string()
    };
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            (0..starts.len())
                .map(|i| (cell(header, i), cell(line, i)))
                .collect()
        })
        .collect()
}

/// `10.244.3.0/24` contains `10.244.3.17`: the simulated nodes' CIDRs are /24s.
fn in_cidr(ip: &str, cidr: &str) -> bool {
    let Some((network, "24")) = cidr.split_once('/') else {
        return false;
    };
    let prefix = |addr: &str| addr.rsplit_once('.').map(|(p, _)| p.to_string());
    ip.parse::<std::net::Ipv4Addr>().is_ok()
        && prefix(ip).is_some()
        && prefix(ip) == prefix(network)
}

/// `kubectl get pods --watch --output-watch-events -o json` in the background: every event
/// it prints, in order.
struct Watch {
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
}

impl Watch {
    fn start(up: &Up, selector: &str) -> Watch {
        let mut child = up
            .kubectl(&[
                "get",
                "pods",
                "-l",
                selector,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kubectl get --watch");
        let stdout = child.stdout.take().expect("stdout");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout));
            for event in stream.into_iter::<Value>().map_while(Result::ok) {
                sink.lock().expect("events").push(event);
            }
        });
        Watch { child, events }
    }

    fn events(&self) -> Vec<Value> {
        self.events.lock().expect("events").clone()
    }

    /// Waits until an event satisfies `seen`.
    async fn until(&self, what: &str, seen: impl Fn(&Value) -> bool) {
        for _ in 0..600 {
            if self.events().iter().any(&seen) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the watch never saw {what}: {:#?}", self.events());
    }

    /// The index of the first event about pod `pod` for which `holds` is true.
    fn first(&self, pod: &str, holds: impl Fn(&str, &Value) -> bool) -> Option<usize> {
        self.events().iter().position(|e| {
            let object = &e["object"];
            name(object) == pod && holds(e["type"].as_str().unwrap_or_default(), object)
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_zones_and_capacity_shape_the_simulated_nodes() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&[
        "--nodes",
        "3",
        "--node-zones",
        "zone-a,zone-b",
        "--node-capacity",
        "cpu=4,memory=16Gi,pods=110,example.com/gpu=2",
    ]));
    until(&up, &["get", "nodes"], |nodes| items(nodes).len() == 3).await;

    let out = kubectl(&up, &["get", "nodes", "-L", "topology.kubernetes.io/zone"]).await;
    let zones: Vec<(String, String)> = table(&out)
        .into_iter()
        .map(|row| (row["NAME"].clone(), row["ZONE"].clone()))
        .collect();
    assert_eq!(
        zones,
        [
            ("node-1".to_string(), "zone-a".to_string()),
            ("node-2".to_string(), "zone-b".to_string()),
            ("node-3".to_string(), "zone-a".to_string()),
        ],
        "{out}"
    );
    let out = kubectl(
        &up,
        &[
            "get",
            "nodes",
            "-l",
            "topology.kubernetes.io/zone=zone-b",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(out.trim(), "node/node-2");

    let node = json(&up, &["get", "node", "node-3"]).await;
    for field in ["allocatable", "capacity"] {
        let resources = &node["status"][field];
        assert_eq!(resources["cpu"], "4", "{field}: {resources}");
        assert_eq!(resources["memory"], "16Gi", "{field}: {resources}");
        assert_eq!(resources["pods"], "110", "{field}: {resources}");
        assert_eq!(resources["example.com/gpu"], "2", "{field}: {resources}");
        assert_eq!(
            resources["ephemeral-storage"], "100Gi",
            "the defaults not given stay: {resources}"
        );
    }
    let described = kubectl(&up, &["describe", "node", "node-1"]).await;
    assert!(
        described.contains("topology.kubernetes.io/zone=zone-a"),
        "{described}"
    );

    // The scheduler fits pods into that capacity: 5 CPUs fit on no node.
    apply(
        &up,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  containers:
  - name: app
    image: nginx
    resources:
      requests: {cpu: "5"}
"#,
    )
    .await;
    let pod = until(&up, &["get", "pod", "big"], |p| {
        condition(p, "PodScheduled").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let scheduled = condition(&pod, "PodScheduled").cloned().unwrap_or_default();
    assert_eq!(scheduled["reason"], "Unschedulable");
    let message = scheduled["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("0/3 nodes are available: 3 Insufficient cpu."),
        "{message}"
    );
    // 3 CPUs do fit, and the GPUs are there to be requested.
    apply(
        &up,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: fits}
spec:
  containers:
  - name: app
    image: nginx
    resources:
      requests: {cpu: "3", example.com/gpu: "2"}
      limits: {example.com/gpu: "2"}
"#,
    )
    .await;
    let pod = until(&up, &["get", "pod", "fits"], serving).await;
    assert!(node_of(&pod).starts_with("node-"), "{pod}");
    Ok(())
}

#[test]
fn bad_node_shapes_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let up = |flag: &str, value: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_konverge"))
            .args(["up", "--store", "memory", "--port", "0", "--data-dir"])
            .arg(dir.path())
            .args([flag, value])
            .stdin(Stdio::null())
            .output()
            .expect("run konverge up");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{flag} {value}: a usage error"
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let err = up("--node-capacity", "cpu");
    assert!(
        err.contains("invalid value 'cpu' for '--node-capacity <RESOURCE=QUANTITY>'")
            && err.contains("\"cpu\" is not RESOURCE=QUANTITY (e.g. cpu=4 or memory=16Gi)"),
        "{err}"
    );
    let err = up("--node-capacity", "cpu=4,memory=16GB");
    assert!(
        err.contains("\"memory=16GB\": \"16GB\" is not a quantity: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        "{err}"
    );
    let err = up("--node-capacity", "memory=2K");
    assert!(
        err.contains("\"memory=2K\": \"2K\" is not a quantity: unable to parse quantity's suffix"),
        "{err}"
    );
    let err = up("--node-capacity", "cores=4");
    assert!(err.contains("unknown resource \"cores\""), "{err}");
    let err = up("--node-zones", "a,,b");
    assert!(err.contains("a zone name must not be empty"), "{err}");
    let err = up("--node-zones", "eu west");
    assert!(
        err.contains("\"eu west\" is not a zone label value"),
        "{err}"
    );
}

const STATEFULSET: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres:16
        readinessProbe:
          tcpSocket: {port: 5432}
          initialDelaySeconds: 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_starts_in_order_and_scales_down_from_the_highest_ordinal()
-> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    // A pod the watch lists first, so it is known to be watching before the StatefulSet
    // exists and sees every change of its pods.
    kubectl(
        &up,
        &["run", "marker", "--image=busybox", "--labels=app=marker"],
    )
    .await;
    let watch = Watch::start(&up, "app in (db,marker)");
    watch
        .until("the marker pod", |e| name(&e["object"]) == "marker")
        .await;

    apply(&up, STATEFULSET).await;
    let out = kubectl(
        &up,
        &["rollout", "status", "statefulset/db", "--timeout=60s"],
    )
    .await;
    assert!(
        out.contains("partitioned roll out complete: 3 new pods have been updated..."),
        "{out}"
    );
    let pods = json(&up, &["get", "pods", "-l", "app=db"]).await;
    let names: BTreeSet<String> = items(&pods).iter().map(name).collect();
    assert_eq!(
        names,
        BTreeSet::from(["db-0".into(), "db-1".into(), "db-2".into()])
    );
    assert!(items(&pods).iter().all(serving), "{pods:#}");
    let sts = json(&up, &["get", "statefulset", "db"]).await;
    assert_eq!(sts["status"]["readyReplicas"], 3, "{sts}");
    assert_eq!(
        sts["status"]["currentRevision"],
        sts["status"]["updateRevision"]
    );

    // OrderedReady: each pod is created only once the one before it is Ready.
    watch
        .until("db-2 ready", |e| {
            name(&e["object"]) == "db-2" && is_ready(&e["object"])
        })
        .await;
    for (before, after) in [("db-0", "db-1"), ("db-1", "db-2")] {
        let ready = watch.first(before, |_, pod| is_ready(pod));
        let created = watch.first(after, |_, _| true);
        assert!(
            ready.is_some() && created.is_some() && ready < created,
            "{before} Ready (event {ready:?}) before {after} exists (event {created:?})"
        );
        let by_name = |n: &str| {
            items(&pods)
                .into_iter()
                .find(|p| name(p) == n)
                .unwrap_or_default()
        };
        let ready_at = condition(&by_name(before), "Ready")
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or_default()
            .to_string();
        let created_at = by_name(after)["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            !ready_at.is_empty() && ready_at <= created_at,
            "{before} Ready at {ready_at}, {after} created at {created_at}"
        );
    }
    // Ordinals are stable identities: each pod's hostname is its name.
    for pod in items(&pods) {
        assert_eq!(pod["spec"]["hostname"], name(&pod).as_str());
        assert_eq!(pod["spec"]["subdomain"], "db");
        assert_eq!(
            pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            name(&pod).as_str()
        );
    }

    // Scaling down removes the highest ordinal first, one at a time.
    kubectl(&up, &["scale", "statefulset", "db", "--replicas=1"]).await;
    let pods = until_within(
        &up,
        Duration::from_secs(60),
        &["get", "pods", "-l", "app=db"],
        |pods| items(pods).len() == 1,
    )
    .await;
    assert_eq!(name(&items(&pods)[0]), "db-0");
    watch
        .until("db-1 deleted", |e| {
            e["type"] == "DELETED" && name(&e["object"]) == "db-1"
        })
        .await;
    let going = |pod: &str| watch.first(pod, |kind, p| kind == "DELETED" || is_terminating(p));
    let gone = |pod: &str| watch.first(pod, |kind, _| kind == "DELETED");
    assert!(
        going("db-2").is_some() && going("db-2") < going("db-1"),
        "db-2 goes first: {:?} < {:?}",
        going("db-2"),
        going("db-1")
    );
    assert!(
        gone("db-2").is_some() && gone("db-2") < going("db-1"),
        "db-1 is deleted only once db-2 is gone: {:?} < {:?}",
        gone("db-2"),
        going("db-1")
    );
    assert_eq!(going("db-0"), None, "db-0 stays");
    let sts = until(&up, &["get", "statefulset", "db"], |s| {
        s["status"]["replicas"] == 1 && s["status"]["readyReplicas"] == 1
    })
    .await;
    assert_eq!(sts["spec"]["replicas"], 1);
    Ok(())
}

const DAEMONSET: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: fluent/fluent-bit:3.0
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_runs_one_pod_on_each_node() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    until(&up, &["get", "nodes"], |nodes| items(nodes).len() == 3).await;
    // The kubelets and the scheduler run under kube-scheduler's Lease, the controllers under
    // kube-controller-manager's, both held by this server.
    for lease in ["kube-scheduler", "kube-controller-manager"] {
        until(
            &up,
            &["get", "lease", "-n", "kube-system", lease],
            |lease| {
                lease["spec"]["holderIdentity"]
                    .as_str()
                    .is_some_and(|holder| holder.ends_with(&up.dir.path().display().to_string()))
            },
        )
        .await;
    }
    apply(&up, DAEMONSET).await;
    let out = kubectl(
        &up,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    )
    .await;
    assert!(
        out.contains("daemon set \"agent\" successfully rolled out"),
        "{out}"
    );
    let ds = json(&up, &["get", "daemonset", "agent"]).await;
    for field in [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberReady",
        "numberAvailable",
        "updatedNumberScheduled",
    ] {
        assert_eq!(ds["status"][field], 3, "{field}: {ds}");
    }
    assert_eq!(ds["status"]["numberMisscheduled"], 0);

    let pods = json(&up, &["get", "pods", "-l", "app=agent"]).await;
    let nodes: BTreeSet<String> = items(&pods).iter().map(node_of).collect();
    assert_eq!(
        nodes,
        BTreeSet::from(["node-1".into(), "node-2".into(), "node-3".into()]),
        "one pod on each node: {pods:#}"
    );
    // The DaemonSet controller pins each pod to its node with node affinity, as kcm does.
    for pod in items(&pods) {
        let term = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0];
        assert_eq!(term["key"], "metadata.name", "{pod}");
        assert_eq!(term["values"][0], node_of(&pod).as_str(), "{pod}");
    }

    let out = kubectl(&up, &["get", "pods", "-l", "app=agent", "-o", "wide"]).await;
    let rows = table(&out);
    assert_eq!(rows.len(), 3, "{out}");
    let mut seen = BTreeSet::new();
    for row in &rows {
        assert!(row["NAME"].starts_with("agent-"), "{out}");
        assert_eq!(row["READY"], "1/1", "{out}");
        assert_eq!(row["STATUS"], "Running", "{out}");
        assert!(row["IP"].starts_with("10.24"), "an IP: {out}");
        assert!(seen.insert(row["NODE"].clone()), "distinct nodes: {out}");
    }
    assert_eq!(seen, nodes, "{out}");
    Ok(())
}

const GUARDED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        volumeMounts:
        - {name: cache, mountPath: /cache}
      volumes:
      - name: cache
        emptyDir: {}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: web}
"#;

/// `konverge up --nodes 3` with the guarded Deployment's 3 pods all on node-1 (the other
/// nodes cordoned until they run, then uncordoned), the DaemonSet on every node, and the
/// budget allowing one disruption. Returns the Deployment's pods.
async fn guarded_pods_on_node_1(up: &Arc<Up>) -> Value {
    until(up, &["get", "nodes"], |nodes| items(nodes).len() == 3).await;
    kubectl(up, &["cordon", "node-2", "node-3"]).await;
    apply(up, GUARDED).await;
    apply(up, DAEMONSET).await;
    kubectl(
        up,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    )
    .await;
    let pods = json(up, &["get", "pods", "-l", "app=web"]).await;
    assert!(
        items(&pods).iter().all(|p| node_of(p) == "node-1"),
        "{pods:#}"
    );
    kubectl(up, &["uncordon", "node-2", "node-3"]).await;
    kubectl(
        up,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    )
    .await;
    until(up, &["get", "pdb", "web"], |pdb| {
        pdb["status"]["currentHealthy"] == 3 && pdb["status"]["disruptionsAllowed"] == 1
    })
    .await;
    pods
}

/// `kubectl drain node-1 --ignore-daemonsets --delete-emptydir-data`: exit code, stdout,
/// stderr.
async fn drain_node_1(up: &Arc<Up>) -> (Option<i32>, String, String) {
    kubectl_run(
        up,
        &[
            "drain",
            "node-1",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
        ],
        None,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_moves_the_pods_off_a_node_and_uncordon_reopens_it() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    let pods = guarded_pods_on_node_1(&up).await;

    let (code, out, err) = drain_node_1(&up).await;
    assert_eq!(code, Some(0), "drain failed:\n{err}\n{out}");
    assert!(out.contains("node/node-1 cordoned"), "{out}");
    assert!(out.contains("node/node-1 drained"), "{out}");
    for pod in items(&pods) {
        let pod = name(&pod);
        assert!(
            out.contains(&format!("evicting pod default/{pod}")),
            "{out}"
        );
        assert!(out.contains(&format!("pod/{pod} evicted")), "{out}");
    }
    assert!(
        err.contains("Warning: ignoring DaemonSet-managed Pods: default/agent-"),
        "{err}"
    );

    let node = json(&up, &["get", "node", "node-1"]).await;
    assert_eq!(node["spec"]["unschedulable"], true);
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unschedulable" && t["effect"] == "NoSchedule"),
        "{node}"
    );
    let out = kubectl(&up, &["get", "node", "node-1"]).await;
    assert_eq!(
        table(&out)[0]["STATUS"],
        "Ready,SchedulingDisabled",
        "{out}"
    );

    let pods = until(&up, &["get", "pods", "-l", "app=web"], |pods| {
        let pods = items(pods);
        pods.len() == 3 && pods.iter().all(|p| serving(p) && node_of(p) != "node-1")
    })
    .await;
    assert!(
        items(&pods)
            .iter()
            .all(|p| ["node-2", "node-3"].contains(&node_of(p).as_str())),
        "{pods:#}"
    );
    // The DaemonSet's pod stays on the drained node.
    let agents = json(&up, &["get", "pods", "-l", "app=agent"]).await;
    assert!(
        items(&agents)
            .iter()
            .any(|p| node_of(p) == "node-1" && serving(p)),
        "{agents:#}"
    );

    let out = kubectl(&up, &["uncordon", "node-1"]).await;
    assert_eq!(out.trim(), "node/node-1 uncordoned");
    let node = until(&up, &["get", "node", "node-1"], |n| {
        n["spec"]["unschedulable"].is_null()
            && !n["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["key"] == "node.kubernetes.io/unschedulable")
    })
    .await;
    assert_eq!(name(&node), "node-1");
    let out = kubectl(&up, &["get", "node", "node-1"]).await;
    assert_eq!(table(&out)[0]["STATUS"], "Ready", "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_wide_shows_nodes_and_ips_from_their_cidrs() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    kubectl(
        &up,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=6",
        ],
    )
    .await;
    kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    )
    .await;
    let nodes = json(&up, &["get", "nodes"]).await;
    let cidrs: BTreeMap<String, String> = items(&nodes)
        .iter()
        .map(|n| {
            (
                name(n),
                n["spec"]["podCIDR"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(cidrs.len(), 3, "{nodes}");
    let distinct: BTreeSet<&String> = cidrs.values().collect();
    assert_eq!(distinct.len(), 3, "each node has its own CIDR: {cidrs:?}");

    let out = kubectl(&up, &["get", "pods", "-l", "app=web", "-o", "wide"]).await;
    let rows = table(&out);
    assert_eq!(rows.len(), 6, "{out}");
    let mut nodes_used = BTreeSet::new();
    for row in &rows {
        let node = &row["NODE"];
        let cidr = cidrs.get(node).cloned().unwrap_or_default();
        assert!(
            in_cidr(&row["IP"], &cidr),
            "{} not in {node}'s {cidr}:\n{out}",
            row["IP"]
        );
        nodes_used.insert(node.clone());
        assert_eq!(row["NOMINATED NODE"], "<none>", "{out}");
        assert_eq!(row["READINESS GATES"], "<none>", "{out}");
    }
    assert_eq!(
        nodes_used.len(),
        3,
        "the pods spread over the nodes:\n{out}"
    );
    // The same in the pods' status, with hostIP the node's InternalIP.
    let pods = json(&up, &["get", "pods", "-l", "app=web"]).await;
    for pod in items(&pods) {
        let node = items(&nodes)
            .into_iter()
            .find(|n| name(n) == node_of(&pod))
            .unwrap_or_default();
        let internal = node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == "InternalIP")
            .map(|a| a["address"].clone())
            .unwrap_or_default();
        assert_eq!(pod["status"]["hostIP"], internal, "{pod}");
        assert_eq!(
            pod["status"]["podIPs"][0]["ip"], pod["status"]["podIP"],
            "{pod}"
        );
        let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
        assert!(in_cidr(ip, &cidrs[&node_of(&pod)]), "{pod}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_pod_shows_the_scheduler_event() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    kubectl(&up, &["run", "solo", "--image=nginx"]).await;
    let pod = until(&up, &["get", "pod", "solo"], serving).await;
    let node = node_of(&pod);
    assert!(node.starts_with("node-"), "{pod}");
    let expected = format!("Successfully assigned default/solo to {node}");
    // Events are recorded asynchronously: wait for the Scheduled one.
    until(
        &up,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=solo",
        ],
        |events| items(events).iter().any(|e| e["reason"] == "Scheduled"),
    )
    .await;
    let out = kubectl(&up, &["describe", "pod", "solo"]).await;
    let host_ip = pod["status"]["hostIP"].as_str().unwrap_or_default();
    let shown_node = out
        .lines()
        .find_map(|l| l.strip_prefix("Node:"))
        .map(str::trim)
        .unwrap_or_default();
    assert_eq!(shown_node, format!("{node}/{host_ip}"), "{out}");
    // Type, Reason, Age, From, Message.
    let line = out
        .lines()
        .find(|l| l.contains(" Scheduled ") && l.contains("default-scheduler"))
        .unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.first().copied(), Some("Normal"), "{out}");
    assert_eq!(words.get(1).copied(), Some("Scheduled"), "{out}");
    assert_eq!(words.get(3).copied(), Some("default-scheduler"), "{out}");
    assert!(line.ends_with(&expected), "{out}");
    let events = json(
        &up,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=solo",
        ],
    )
    .await;
    let scheduled: Vec<Value> = items(&events)
        .into_iter()
        .filter(|e| e["reason"] == "Scheduled")
        .collect();
    assert_eq!(scheduled.len(), 1, "{events:#}");
    assert_eq!(scheduled[0]["type"], "Normal");
    assert_eq!(scheduled[0]["message"], expected.as_str());
    assert_eq!(scheduled[0]["involvedObject"]["kind"], "Pod");
    Ok(())
}

/// How many of the watched pods are serving after each event, from the first event on.
fn serving_counts(events: &[Value]) -> Vec<usize> {
    let mut serving_now: BTreeMap<String, bool> = BTreeMap::new();
    events
        .iter()
        .map(|event| {
            let pod = &event["object"];
            if event["type"] == "DELETED" {
                serving_now.remove(&name(pod));
            } else {
                serving_now.insert(name(pod), serving(pod));
            }
            serving_now.values().filter(|s| **s).count()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_never_takes_a_deployment_below_its_disruption_budget() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    let pods = guarded_pods_on_node_1(&up).await;
    let watch = Watch::start(&up, "app=web");
    watch
        .until("the three pods", |_| {
            serving_counts(&watch.events()).last() == Some(&3)
        })
        .await;

    let (code, out, err) = drain_node_1(&up).await;
    assert_eq!(code, Some(0), "drain failed:\n{err}\n{out}");
    for pod in items(&pods) {
        assert!(
            out.contains(&format!("pod/{} evicted", name(&pod))),
            "{out}"
        );
    }
    // kubectl evicts the three pods at once; the budget lets one go at a time and refuses
    // the others with 429 until the replacement is Ready, and kubectl retries them.
    assert!(
        err.contains("(will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    until(&up, &["get", "pods", "-l", "app=web"], |pods| {
        let pods = items(pods);
        pods.len() == 3 && pods.iter().all(|p| serving(p) && node_of(p) != "node-1")
    })
    .await;
    let counts = serving_counts(&watch.events());
    let first_full = counts.iter().position(|c| *c == 3).unwrap_or_default();
    let least = counts[first_full..]
        .iter()
        .min()
        .copied()
        .unwrap_or_default();
    assert!(
        least >= 2,
        "minAvailable 2, yet only {least} pods served at one point: {counts:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_ips_are_unique_when_many_pods_start_at_once() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "3"]));
    kubectl(
        &up,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=24",
        ],
    )
    .await;
    kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    )
    .await;
    let pods = json(&up, &["get", "pods", "-l", "app=web"]).await;
    let mut by_ip: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in items(&pods) {
        let ip = pod["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        by_ip.entry(ip).or_default().push(name(&pod));
    }
    let shared: Vec<_> = by_ip.iter().filter(|(_, pods)| pods.len() > 1).collect();
    assert!(shared.is_empty(), "pod IPs given twice: {shared:?}");
    assert_eq!(by_ip.len(), 24);
    Ok(())
}

const LOGGING: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  containers:
  - {name: app, image: busybox, command: ["sh", "-c"], args: ["echo hi"]}
  - {name: side, image: "envoyproxy/envoy:v1.30"}
---
apiVersion: v1
kind: Pod
metadata:
  name: talker
  annotations:
    konverge.dev/log: |
      listening on :8080
      ready
spec:
  containers:
  - {name: app, image: busybox}
---
apiVersion: v1
kind: Pod
metadata:
  name: slow
  annotations: {konverge.dev/start-seconds: "600"}
spec:
  containers:
  - {name: app, image: busybox}
---
apiVersion: v1
kind: Pod
metadata:
  name: unpulled
  annotations: {konverge.dev/image-pull: fail}
spec:
  containers:
  - {name: app, image: "example.com/missing:1"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: crash}
spec:
  replicas: 1
  selector:
    matchLabels: {app: crash}
  template:
    metadata:
      labels: {app: crash}
      annotations: {konverge.dev/exit-code: "1"}
    spec:
      containers:
      - {name: app, image: busybox}
"#;

/// The one container status of the first pod of `list`, or of the pod `object`.
fn container_status(object: &Value, container: &str) -> Value {
    let pod = if object["items"].is_array() {
        &object["items"][0]
    } else {
        object
    };
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == container)
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_show_what_the_simulated_containers_printed() -> anyhow::Result<()> {
    let up = Arc::new(Up::start_with(&["--nodes", "2"]));
    kubectl(&up, &["create", "deployment", "web", "--image=nginx"]).await;
    apply(&up, LOGGING).await;
    kubectl(
        &up,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    )
    .await;

    // A Deployment's logs are its pod's.
    let out = kubectl(&up, &["logs", "deploy/web"]).await;
    assert_eq!(
        out,
        "simulated container \"nginx\" started from image \"nginx\"\n"
    );
    let pod = json(&up, &["get", "pods", "-l", "app=web"]).await;
    let started = container_status(&pod, "nginx")["state"]["running"]["startedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let out = kubectl(&up, &["logs", "deploy/web", "--timestamps"]).await;
    assert_eq!(
        out,
        format!("{started} simulated container \"nginx\" started from image \"nginx\"\n")
    );

    // One container of several with -c; without it, kubectl picks the first and says so.
    until(&up, &["get", "pod", "two"], serving).await;
    let out = kubectl(&up, &["logs", "two", "-c", "side"]).await;
    assert_eq!(
        out,
        "simulated container \"side\" started from image \"envoyproxy/envoy:v1.30\"\n"
    );
    let app = "simulated container \"app\" started from image \"busybox\"\n\
               command: [\"sh\", \"-c\"]\n\
               args: [\"echo hi\"]\n";
    assert_eq!(kubectl(&up, &["logs", "two", "-c", "app"]).await, app);
    let (code, out, err) = kubectl_run(&up, &["logs", "two"], None).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, app);
    assert!(
        err.contains("Defaulted container \"app\" out of: app, side"),
        "{err}"
    );
    until(&up, &["get", "pod", "talker"], serving).await;
    assert_eq!(
        kubectl(&up, &["logs", "talker"]).await,
        "listening on :8080\nready\n"
    );
    let out = kubectl(&up, &["logs", "talker", "--tail=1"]).await;
    assert_eq!(out, "ready\n");

    // A crash-looping container: --previous reads the instance that exited. The first
    // restart comes at once; while the container waits in CrashLoopBackOff (10 s, then
    // longer) the previous instance stays the same as the test reads it.
    let crashed = until(&up, &["get", "pods", "-l", "app=crash"], |pods| {
        let status = container_status(pods, "app");
        status["lastState"]["terminated"]["exitCode"] == 1
            && status["restartCount"].as_i64().is_some_and(|n| n >= 1)
            && status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    let pod_name = name(&crashed["items"][0]);
    let out = kubectl(&up, &["logs", "deploy/crash", "--previous"]).await;
    assert_eq!(
        out,
        "simulated container \"app\" started from image \"busybox\"\n\
         simulated container \"app\" exited with code 1 (Error)\n"
    );
    let out = kubectl(&up, &["logs", &pod_name, "-p", "--timestamps"]).await;
    let finished = container_status(&crashed, "app")["lastState"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        out.ends_with(&format!(
            "{finished} simulated container \"app\" exited with code 1 (Error)\n"
        )),
        "{out}"
    );
    // A container that never exited has no previous instance.
    let (code, _, err) = kubectl_run(&up, &["logs", "deploy/web", "--previous"], None).await;
    assert_eq!(code, Some(1));
    let web = name(&pod["items"][0]);
    assert!(
        err.contains(&format!(
            "Error from server (BadRequest): previous terminated container \"nginx\" in pod \"{web}\" not found"
        )),
        "{err}"
    );

    // Containers still waiting have no logs: the kubelet says why.
    let (code, _, err) = kubectl_run(&up, &["logs", "slow"], None).await;
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): container \"app\" in pod \"slow\" is waiting to start: ContainerCreating"
    );
    until(&up, &["get", "pod", "unpulled"], |pod| {
        container_status(pod, "app")["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
    let (code, _, err) = kubectl_run(&up, &["logs", "unpulled"], None).await;
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): container \"app\" in pod \"unpulled\" is waiting to start: trying and failing to pull image"
    );
    Ok(())
}
