//! Real kubectl against `konverge up` (HTTPS, token, generated kubeconfig) on a free port in
//! a temporary directory: the commands people type every day.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{Up, write};

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
        env:
        - {name: MODE, value: "one"}
"#;

#[test]
fn everyday_kubectl_commands() {
    let up = Up::start();
    let dir = up.dir.path();

    // Basics: version, namespaces, api-resources.
    let version = up.ok(&["get", "--raw", "/version"]);
    assert!(version.contains("\"gitVersion\""), "{version}");
    let namespaces = up.ok(&["get", "namespaces"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(namespaces.contains(ns), "{namespaces}");
    }
    let resources = up.ok(&["api-resources"]);
    assert!(
        resources.contains("deployments") && resources.contains("deploy"),
        "{resources}"
    );

    // Generators: kubectl 1.32+ sends these bodies as protobuf.
    up.ok(&["create", "namespace", "team"]);
    up.ok(&[
        "create",
        "configmap",
        "gen",
        "-n",
        "team",
        "--from-literal=a=1",
    ]);
    up.ok(&[
        "create",
        "secret",
        "generic",
        "gen",
        "-n",
        "team",
        "--from-literal=k=v",
    ]);
    up.ok(&[
        "create",
        "deployment",
        "gen",
        "-n",
        "team",
        "--image=nginx:1.27",
        "--replicas=2",
    ]);
    up.ok(&[
        "create",
        "service",
        "clusterip",
        "gen",
        "-n",
        "team",
        "--tcp=80:8080",
    ]);
    // kubectl's typed clients prefer protobuf answers too: objects, and errors as a
    // protobuf Status that kubectl decodes into its message.
    let (code, out, err) = up.run(
        &["create", "configmap", "proto", "-n", "team", "-v=8"],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("configmap/proto created"), "{out}");
    assert!(
        err.contains("Accept: application/vnd.kubernetes.protobuf")
            && err.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{err}"
    );
    let (code, _, err) = up.run(&["create", "configmap", "proto", "-n", "team"], None);
    assert_ne!(code, Some(0));
    assert!(
        err.contains(r#"configmaps "proto" already exists"#),
        "{err}"
    );
    assert_eq!(
        up.ok(&["get", "cm", "gen", "-n", "team", "-o", "jsonpath={.data.a}"]),
        "1"
    );
    assert_eq!(
        up.ok(&[
            "get",
            "secret",
            "gen",
            "-n",
            "team",
            "-o",
            "jsonpath={.data.k}"
        ]),
        "dg=="
    );
    assert_eq!(
        up.ok(&[
            "get",
            "deploy",
            "gen",
            "-n",
            "team",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "2"
    );
    assert_eq!(
        up.ok(&[
            "get",
            "svc",
            "gen",
            "-n",
            "team",
            "-o",
            "jsonpath={.spec.ports[0].targetPort}"
        ]),
        "8080"
    );
    up.ok(&["delete", "namespace", "team", "--wait"]);

    // create -f, get in every output format.
    let manifest = write(dir, "deploy.yaml", DEPLOYMENT);
    up.ok(&["create", "-f", &manifest]);
    let d = up.json(&["get", "deployment", "web"]);
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["metadata"]["generation"], 1);
    let yaml = up.ok(&["get", "deploy", "web", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: Deployment") && yaml.contains("image: nginx:1.27"),
        "{yaml}"
    );
    let name = up.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.name}"]);
    assert_eq!(name, "web");
    let wide = up.ok(&["get", "deploy", "-o", "wide"]);
    assert!(
        wide.contains("READY") && wide.contains("IMAGES") && wide.contains("nginx:1.27"),
        "{wide}"
    );

    // apply twice with a change: the second apply patches.
    up.ok(&["apply", "-f", &manifest]);
    let changed = write(
        dir,
        "deploy2.yaml",
        &DEPLOYMENT
            .replace("replicas: 2", "replicas: 3")
            .replace("value: \"one\"", "value: \"two\""),
    );
    let out = up.ok(&["apply", "-f", &changed]);
    assert!(out.contains("configured"), "{out}");
    let d = up.json(&["get", "deployment", "web"]);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
        "two"
    );
    assert_eq!(d["metadata"]["generation"], 2);
    let out = up.ok(&["apply", "-f", &changed]);
    assert!(out.contains("unchanged"), "{out}");

    // label, annotate, patch (merge, json, strategic), replace.
    up.ok(&["label", "deployment", "web", "tier=frontend"]);
    up.ok(&["annotate", "deployment", "web", "owner=team-a"]);
    let d = up.json(&["get", "deployment", "web"]);
    assert_eq!(d["metadata"]["labels"]["tier"], "frontend");
    assert_eq!(d["metadata"]["annotations"]["owner"], "team-a");
    up.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":4}}"#,
    ]);
    up.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/minReadySeconds","value":5}]"#,
    ]);
    up.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox"}]}}}}"#,
    ]);
    let d = up.json(&["get", "deployment", "web"]);
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["spec"]["minReadySeconds"], 5);
    let containers: Vec<&str> = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    // Kubernetes' strategic merge keeps nginx and puts the element the patch adds first.
    assert_eq!(containers, ["sidecar", "nginx"]);
    let mut replaced = d.clone();
    replaced["spec"]["replicas"] = 1.into();
    // Without a resourceVersion in the file, kubectl reads the object's current version and
    // sends that; the deployment controller writes the status meanwhile, so even that version
    // may be stale by the time the update arrives, as on a cluster. A user tries again.
    let mut unconditional = replaced.clone();
    unconditional["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    let unconditional_path = write(dir, "replace.json", &unconditional.to_string());
    let mut attempts = 0;
    loop {
        let (code, out, err) = up.run(&["replace", "-f", &unconditional_path], None);
        if code == Some(0) {
            break;
        }
        attempts += 1;
        assert!(
            attempts < 20 && err.contains("the object has been modified"),
            "kubectl replace failed ({code:?}) after {attempts} attempts:\n{err}\n{out}"
        );
    }
    assert_eq!(
        up.json(&["get", "deployment", "web"])["spec"]["replicas"],
        1
    );
    // The object as read before that replace, with its version: a conflict.
    let replaced_path = write(dir, "stale.json", &replaced.to_string());
    let err = up.fails(&["replace", "-f", &replaced_path], None);
    assert!(err.contains("the object has been modified"), "{err}");

    // explain and diff read the server's OpenAPI.
    let explained = up.ok(&["explain", "deployment.spec.replicas"]);
    assert!(
        explained.contains("replicas") && explained.contains("integer"),
        "{explained}"
    );
    let diff_manifest = write(
        dir,
        "diff.yaml",
        &DEPLOYMENT.replace("replicas: 2", "replicas: 7"),
    );
    let (code, out, err) = up.run(&["diff", "-f", &diff_manifest], None);
    assert_eq!(
        code,
        Some(1),
        "kubectl diff exits 1 when there are differences: {err}"
    );
    assert!(
        out.contains("-  replicas: 1") && out.contains("+  replicas: 7"),
        "{out}"
    );

    // scale.
    up.ok(&["scale", "deployment", "web", "--replicas", "6"]);
    assert_eq!(
        up.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]),
        "6"
    );

    // --dry-run=server writes nothing.
    let dry = write(
        dir,
        "dry.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dry}\ndata: {a: \"1\"}\n",
    );
    up.ok(&["create", "-f", &dry, "--dry-run=server"]);
    let err = up.fails(&["get", "cm", "dry"], None);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );

    // A key removed with a merge patch null, read back with jsonpath.
    let cm = write(
        dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {keep: \"1\", drop: \"2\"}\n",
    );
    up.ok(&["apply", "-f", &cm]);
    assert_eq!(
        up.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.drop}"]),
        "2"
    );
    up.ok(&[
        "patch",
        "cm",
        "settings",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"drop":null}}"#,
    ]);
    assert_eq!(
        up.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.drop}"]),
        ""
    );
    assert_eq!(
        up.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.keep}"]),
        "1"
    );

    // Bad input is refused with Kubernetes' wording.
    let bad = write(
        dir,
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n",
    );
    let err = up.fails(&["create", "-f", &bad], None);
    assert!(
        err.contains("is invalid") && err.contains("metadata.name"),
        "{err}"
    );

    // delete --wait, and wait --for=delete.
    up.ok(&["delete", "cm", "settings", "--wait"]);
    up.ok(&["wait", "--for=delete", "cm/settings", "--timeout=10s"]);
}

#[test]
fn watch_and_cascading_deletes() {
    let up = Up::start();
    let dir = up.dir.path();

    // get -w sees a change made by another command.
    let mut watch = up
        .kubectl(&["get", "configmaps", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let cm = write(
        dir,
        "w.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: watched}\n",
    );
    up.ok(&["create", "-f", &cm]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push(line.clone());
            if line.contains("ADDED") && line.contains("watched") {
                break;
            }
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("ADDED") && l.contains("watched")),
        "kubectl get -w did not show the new object: {seen:?}"
    );

    // Cascading deletes: foreground removes the dependent first, orphan keeps it.
    let owner = up.json(&[
        "create",
        "-f",
        &write(
            dir,
            "o.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owner}\n",
        ),
    ]);
    let uid = owner["metadata"]["uid"].as_str().expect("uid").to_string();
    let dependent = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dependent\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}, blockOwnerDeletion: true}}\n"
    );
    up.ok(&["create", "-f", &write(dir, "d.yaml", &dependent)]);
    up.ok(&["delete", "cm", "owner", "--cascade=foreground", "--wait"]);
    up.fails(&["get", "cm", "dependent"], None);

    let owner = up.json(&[
        "create",
        "-f",
        &write(
            dir,
            "o2.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owner2}\n",
        ),
    ]);
    let uid = owner["metadata"]["uid"].as_str().expect("uid").to_string();
    let dependent = dependent
        .replace("name: owner,", "name: owner2,")
        .replace("name: dependent", "name: dependent2");
    let dependent = dependent.replace(
        &dependent[dependent.find("uid: ").expect("uid") + 5
            ..dependent.find(", blockOwnerDeletion").expect("block")],
        &uid,
    );
    up.ok(&["create", "-f", &write(dir, "d2.yaml", &dependent)]);
    up.ok(&["delete", "cm", "owner2", "--cascade=orphan", "--wait"]);
    let kept = up.json(&["get", "cm", "dependent2"]);
    assert!(kept["metadata"].get("ownerReferences").is_none(), "{kept}");
}

/// `--runtime-config` and `--feature-gates` with kube-apiserver's syntax: a group-version
/// off by default is served when asked; a gate away from its default stops `konverge up`.
#[test]
fn runtime_config_and_feature_gates() {
    let up = Up::start_with(&[
        "--controllers",
        "",
        "--nodes",
        "0",
        "--runtime-config",
        "admissionregistration.k8s.io/v1beta1=true,api/ga=true",
        "--feature-gates",
        "MultiCIDRServiceAllocator=true",
    ]);
    let served: serde_json::Value = serde_json::from_str(&up.ok(&[
        "get",
        "--raw",
        "/apis/admissionregistration.k8s.io/v1beta1",
    ]))
    .expect("a resource list");
    let names: Vec<&str> = served["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"validatingadmissionpolicies"), "{names:?}");
    assert!(
        names.contains(&"validatingadmissionpolicybindings"),
        "{names:?}"
    );
    drop(up);

    let refused = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args(["up", "--data-dir"])
        .arg(tempfile::tempdir().expect("temp dir").path())
        .args(["--port", "0", "--feature-gates", "WatchList=true"])
        .output()
        .expect("konverge up");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(
            "--feature-gates WatchList=true: konverge runs every feature gate at its Kubernetes \
             1.33 default and cannot set WatchList"
        ),
        "{said}"
    );
}
