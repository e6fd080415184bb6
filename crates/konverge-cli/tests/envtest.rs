//! controller-runtime's envtest, played step by step against `konverge envtest assets` (by
//! konverge-testkit's `envtest`, which restates what each release from v0.15 to v0.22 and main
//! does): `--help` probes, the argv it builds, certificates made as its tinyca makes them
//! (ECDSA P-256, a serving CA and a separate client CA), `/health` and `/healthz` polled every
//! 100 ms without credentials, users as client certificates, CRDs installed and discovery
//! polled until every plural is served, then SIGTERM. Nothing of controller-runtime is used.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use konverge_testkit::envtest::{Assets, ControlPlane, RELEASES, User, sample_crds};
use serde_json::{Value, json};

/// `konverge envtest assets` in a temporary folder.
struct Folder {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Folder {
    fn write() -> Folder {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new(env!("CARGO_BIN_EXE_konverge"))
            .args(["envtest", "assets"])
            .arg(dir.path())
            .output()
            .expect("konverge envtest assets");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Folder { _dir: dir, path }
    }

    fn assets(&self) -> Assets {
        Assets::in_dir(&self.path)
    }

    /// Runs one of the folder's binaries; its exit code, stdout and stderr.
    fn run(&self, name: &str, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(self.path.join(name))
            .args(args)
            .output()
            .expect("run a stand-in");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A request without a body.
fn bare(method: http::Method, path: &str) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .body(vec![])
        .expect("a request")
}

fn admin_user() -> User {
    User::new("admin", &["system:masters"])
}

async fn send(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
) -> Result<Value, kube::Error> {
    client.request::<Value>(request).await
}

async fn get(client: &kube::Client, path: &str) -> Value {
    send(
        client,
        http::Request::get(path).body(vec![]).expect("request"),
    )
    .await
    .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

async fn create(client: &kube::Client, path: &str, body: Value) -> Value {
    send(
        client,
        http::Request::post(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("json"))
            .expect("request"),
    )
    .await
    .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

async fn absent(client: &kube::Client, path: &str) {
    match send(
        client,
        http::Request::get(path).body(vec![]).expect("request"),
    )
    .await
    {
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        other => panic!("GET {path} should be 404 NotFound: {other:?}"),
    }
}

async fn who_am_i(client: &kube::Client) -> Value {
    create(
        client,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await
}

/// The claims of a JWT (not verified).
fn claims(token: &str) -> Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_controller_runtime_release_starts_uses_and_stops_the_stand_ins() {
    let folder = Folder::write();
    let crds = sample_crds(20);
    for release in RELEASES {
        let plane = ControlPlane::start(&folder.assets(), release, &[])
            .await
            .unwrap_or_else(|e| panic!("{}: start: {e}", release.name));
        assert!(
            !plane
                .apiserver_args()
                .iter()
                .any(|a| a.starts_with("--insecure-port")),
            "{}: the help lists no --insecure-port, so envtest passes none",
            release.name
        );
        // The legacy `default` user envtest provisions first, and the admin.
        for name in ["default", "admin"] {
            let client = plane
                .client(&User::new(name, &["system:masters"]))
                .expect("a client");
            let me = who_am_i(&client).await;
            assert_eq!(
                me["status"]["userInfo"]["username"], name,
                "{}",
                release.name
            );
        }
        let admin = plane.client(&admin_user()).expect("a client");
        let default = get(&admin, "/api/v1/namespaces/default").await;
        assert_eq!(default["metadata"]["name"], "default", "{}", release.name);
        plane
            .install_crds(&admin, &crds)
            .await
            .unwrap_or_else(|e| panic!("{}: CRDs: {e}", release.name));
        let widgets = get(
            &admin,
            "/apis/g3.envtest.konverge.dev/v1/namespaces/default/widgets19",
        )
        .await;
        assert_eq!(widgets["kind"], "Widget19List", "{}", release.name);
        // SIGTERM stops both, each waited for (how fast: `konverge bench envtest`).
        plane
            .stop()
            .await
            .unwrap_or_else(|e| panic!("{}: stop: {e}", release.name));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_alone_enforces_rbac_and_runs_no_controllers() {
    let folder = Folder::write();
    let release = RELEASES[RELEASES.len() - 1];
    let mut plane = ControlPlane::start(&folder.assets(), release, &[])
        .await
        .expect("start");
    let admin = plane.client(&admin_user()).expect("a client");
    let me = who_am_i(&admin).await;
    assert_eq!(me["status"]["userInfo"]["username"], "admin");
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        json!(["system:masters", "system:authenticated"])
    );

    // RBAC as kube-apiserver enforces it: a user whose certificate has no bindings is
    // forbidden; a RoleBinding for its group lets it in.
    let alice = plane
        .client(&User::new("alice", &["team"]))
        .expect("a client");
    let forbidden = send(
        &alice,
        bare(http::Method::GET, "/api/v1/namespaces/default/configmaps"),
    )
    .await
    .expect_err("alice may not list configmaps");
    assert!(
        forbidden.to_string().contains(
            "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in \
             API group \"\" in the namespace \"default\""
        ),
        "{forbidden}"
    );
    // The aggregated ClusterRoles (view, edit, admin) get their rules from
    // kube-controller-manager's aggregation controller: under kube-apiserver alone, none.
    let view = get(
        &admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/view",
    )
    .await;
    assert!(view["aggregationRule"].is_object());
    assert!(
        view["rules"].as_array().is_none_or(Vec::is_empty),
        "nothing aggregates: {view}"
    );
    create(
        &admin,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        }),
    )
    .await;
    create(
        &admin,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "team-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team"}],
        }),
    )
    .await;
    get(&alice, "/api/v1/namespaces/default/configmaps").await;

    // What kube-apiserver does alone: the `kubernetes` Service in the range envtest gives
    // (10.0.0.0/24), its endpoints the server's address.
    let service = get(&admin, "/api/v1/namespaces/default/services/kubernetes").await;
    assert_eq!(service["spec"]["clusterIP"], "10.0.0.1");
    let endpoints = get(&admin, "/api/v1/namespaces/default/endpoints/kubernetes").await;
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(endpoints["subsets"][0]["ports"][0]["port"], plane.port);
    let web = create(
        &admin,
        "/api/v1/namespaces/default/services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    let ip = web["spec"]["clusterIP"].as_str().expect("a cluster IP");
    assert!(ip.starts_with("10.0.0."), "{ip} is in 10.0.0.0/24");

    // What kube-controller-manager would do does not happen: no `default` ServiceAccount,
    // no kube-root-ca.crt, and a deleted namespace stays Terminating with its objects.
    create(
        &admin,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "quiet"}}),
    )
    .await;
    create(
        &admin,
        "/api/v1/namespaces/quiet/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "marker"}}),
    )
    .await;
    let deleted = send(
        &admin,
        bare(http::Method::DELETE, "/api/v1/namespaces/quiet"),
    )
    .await
    .expect("delete the namespace");
    assert_eq!(deleted["status"]["phase"], "Terminating");
    // Long enough for konverge up's loops to have acted several times over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    absent(&admin, "/api/v1/namespaces/quiet/serviceaccounts/default").await;
    absent(
        &admin,
        "/api/v1/namespaces/quiet/configmaps/kube-root-ca.crt",
    )
    .await;
    absent(&admin, "/api/v1/namespaces/default/serviceaccounts/default").await;
    let quiet = get(&admin, "/api/v1/namespaces/quiet").await;
    assert_eq!(
        quiet["status"]["phase"], "Terminating",
        "no namespace controller"
    );
    get(&admin, "/api/v1/namespaces/quiet/configmaps/marker").await;

    // ServiceAccount tokens are signed with envtest's key, for its issuer.
    create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
    )
    .await;
    let request = create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts/robot/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
    )
    .await;
    let token = request["status"]["token"].as_str().expect("a token");
    let issuer = format!("https://127.0.0.1:{}/", plane.port);
    let said = claims(token);
    assert_eq!(said["iss"], issuer);
    assert_eq!(said["aud"], json!([issuer]));
    let robot = plane.token_client(token).expect("a client");
    let me = who_am_i(&robot).await;
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:default:robot"
    );

    // The store lives in etcd's data directory: a restarted API server has it all.
    plane.restart_apiserver().await.expect("restart");
    let admin = plane.client(&admin_user()).expect("a client");
    get(&admin, "/api/v1/namespaces/default/services/web").await;
    plane.stop().await.expect("stop");
}

#[test]
fn the_stand_ins_answer_help_and_refuse_what_they_cannot_do() {
    let assets = Folder::write();
    let help = assets.run("etcd", &["--help"]);
    assert_eq!(help.0, Some(0));
    assert!(
        help.1
            .lines()
            .any(|l| l.trim_start().starts_with("--unsafe-no-fsync")),
        "{}",
        help.1
    );
    let help = assets.run("kube-apiserver", &["--help"]);
    assert_eq!(help.0, Some(0));
    for flag in [
        "--secure-port",
        "--bind-address",
        "--cert-dir",
        "--client-ca-file",
        "--service-account-issuer",
        "--service-account-key-file",
        "--service-account-signing-key-file",
        "--service-cluster-ip-range",
        "--authorization-mode",
        "--allow-privileged",
        "--disable-admission-plugins",
        "--enable-admission-plugins",
        "--runtime-config",
        "--feature-gates",
        "--advertise-address",
        "--etcd-servers",
        "--etcd-prefix",
        "--audit-policy-file",
        "--audit-log-path",
        "--audit-log-maxsize",
    ] {
        assert!(
            help.1.lines().any(|l| l.trim_start().starts_with(flag)),
            "{flag} in {}",
            help.1
        );
    }
    // envtest passes --insecure-port only to releases whose help lists it (before 1.24).
    assert!(
        !help
            .1
            .lines()
            .any(|l| l.trim_start().starts_with("--insecure-port"))
    );

    let refused = assets.run("kube-apiserver", &["--insecure-port=0"]);
    assert_eq!(refused.0, Some(1));
    assert_eq!(refused.2.trim(), "Error: unknown flag: --insecure-port");
    let refused = assets.run("etcd", &["--quota-backend-bytes=1"]);
    assert_eq!(refused.0, Some(1));
    assert_eq!(
        refused.2.trim(),
        "flag provided but not defined: -quota-backend-bytes"
    );
    let refused = assets.run("kube-apiserver", &[]);
    assert_eq!(refused.0, Some(1));
    assert_eq!(
        refused.2.trim(),
        "Error: [--etcd-servers must be specified, service-account-issuer is a required flag, \
         --service-account-signing-key-file and --service-account-issuer are required flags]"
    );
    let refused = assets.run(
        "kube-apiserver",
        &[
            "--etcd-servers=http://127.0.0.1:1",
            "--service-account-issuer=https://example.com",
            "--service-account-signing-key-file=/nonexistent",
            "--authorization-mode=Node,RBAC",
            "--feature-gates=InPlacePodVerticalScaling=true,WatchList=true",
            "--service-cluster-ip-range=10.0.0.0/40",
        ],
    );
    assert_eq!(refused.0, Some(1));
    let said = refused.2.trim();
    assert!(said.starts_with("Error: [authorization-mode \"Node\": konverge authorizes with RBAC or AlwaysAllow only, --service-cluster-ip-range: "), "{said}");
    // A gate at its 1.33 default is taken; one that would change is refused.
    assert!(
        said.contains(
            "--feature-gates WatchList=true: konverge runs every feature gate at its Kubernetes \
             1.33 default and cannot set WatchList"
        ),
        "{said}"
    );
    assert!(!said.contains("InPlacePodVerticalScaling"), "{said}");
}

#[test]
fn assets_are_links_to_konverge_and_the_system_kubectl() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args(["envtest", "assets"])
        .arg(dir.path().join("bin"))
        .output()
        .expect("konverge envtest assets");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let folder = dir.path().join("bin").canonicalize().expect("the folder");
    assert_eq!(
        printed,
        folder.display().to_string(),
        "the path alone, for $(...)"
    );
    let konverge = std::path::Path::new(env!("CARGO_BIN_EXE_konverge"))
        .canonicalize()
        .expect("konverge");
    for name in ["kube-apiserver", "etcd"] {
        assert_eq!(
            std::fs::read_link(folder.join(name)).expect("a link"),
            konverge,
            "{name}"
        );
    }
    let system = which("kubectl");
    match system {
        Some(kubectl) => assert_eq!(
            folder.join("kubectl").canonicalize().expect("kubectl link"),
            kubectl
        ),
        None => assert!(!folder.join("kubectl").exists()),
    }
    // Without kubectl on PATH, the folder has the other two, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args(["envtest", "assets"])
        .arg(&folder)
        .env("PATH", "/nonexistent")
        .output()
        .expect("konverge envtest assets");
    assert!(out.status.success());
    assert!(!folder.join("kubectl").exists());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no kubectl on PATH"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .and_then(|found| found.canonicalize().ok())
}

/// `TEST_ASSET_KUBE_APISERVER`, `TEST_ASSET_ETCD` and `TEST_ASSET_KUBECTL` name the binaries one
/// by one, under any name that starts as the program's; envtest's `KubeCtl` runs the kubectl
/// with the user's kubeconfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_named_one_by_one_work_and_kubectl_reaches_the_server() {
    let folder = Folder::write();
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let konverge = folder
        .path
        .join("kube-apiserver")
        .canonicalize()
        .expect("konverge");
    let apiserver = elsewhere.path().join("kube-apiserver-v1.33.0");
    let etcd = elsewhere.path().join("etcd-v3.5.21");
    std::os::unix::fs::symlink(&konverge, &apiserver).expect("link");
    std::os::unix::fs::symlink(&konverge, &etcd).expect("link");
    let assets = Assets {
        etcd,
        kube_apiserver: apiserver,
    };
    let release = RELEASES[RELEASES.len() - 1];
    let plane = ControlPlane::start(&assets, release, &[])
        .await
        .expect("start");
    let kubectl = folder.path.join("kubectl");
    if kubectl.exists() {
        let config = elsewhere.path().join("admin.kubecfg");
        std::fs::write(
            &config,
            plane.kubeconfig(&admin_user()).expect("kubeconfig"),
        )
        .expect("write the kubeconfig");
        let out = Command::new(&kubectl)
            .arg(format!("--kubeconfig={}", config.display()))
            .args(["get", "namespace", "default", "-o", "name"])
            .output()
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "namespace/default"
        );
    }
    plane.stop().await.expect("stop");
}

/// `--audit-policy-file` and `--audit-log-path`: the requests the policy picks are in the log,
/// at the policy's level, as kube-apiserver writes `audit.k8s.io/v1` events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_flags_log_what_the_policy_picks() {
    let folder = Folder::write();
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
"#,
    )
    .expect("write the policy");
    let log = dir.path().join("audit").join("audit.log");
    let (policy_arg, log_arg) = (policy.display().to_string(), log.display().to_string());
    let release = RELEASES[RELEASES.len() - 1];
    let plane = ControlPlane::start(
        &folder.assets(),
        release,
        &[
            ("audit-policy-file", &policy_arg),
            ("audit-log-path", &log_arg),
        ],
    )
    .await
    .expect("start");
    let admin = plane.client(&admin_user()).expect("a client");
    create(
        &admin,
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
               "data": {"color": "blue"}}),
    )
    .await;
    let alice = plane
        .client(&User::new("alice", &["team"]))
        .expect("a client");
    send(
        &alice,
        bare(
            http::Method::GET,
            "/api/v1/namespaces/default/configmaps/settings",
        ),
    )
    .await
    .expect_err("forbidden");
    plane.stop().await.expect("stop");

    let events: Vec<Value> = std::fs::read_to_string(&log)
        .expect("the audit log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON event a line"))
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["kind"] == "Event" && e["apiVersion"] == "audit.k8s.io/v1")
    );
    assert!(
        events.iter().all(|e| e["stage"] != "RequestReceived"),
        "omitted stage"
    );
    assert!(
        !events.iter().any(|e| e["requestURI"]
            .as_str()
            .is_some_and(|u| u.starts_with("/healthz"))),
        "level None for /healthz"
    );
    let created = events
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps")
        .expect("the create is logged");
    assert_eq!(created["level"], "RequestResponse");
    assert_eq!(created["stage"], "ResponseComplete");
    assert_eq!(created["user"]["username"], "admin");
    assert_eq!(
        created["objectRef"],
        json!({"resource": "configmaps", "namespace": "default", "apiVersion": "v1"})
    );
    assert_eq!(created["requestObject"]["data"]["color"], "blue");
    assert_eq!(created["responseObject"]["metadata"]["name"], "settings");
    assert_eq!(created["responseStatus"]["code"], 201);
    assert_eq!(
        created["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert_eq!(created["sourceIPs"], json!(["127.0.0.1"]));
    let refused = events
        .iter()
        .find(|e| e["user"]["username"] == "alice")
        .expect("alice's request is logged");
    assert_eq!(refused["verb"], "get");
    assert_eq!(refused["objectRef"]["name"], "settings");
    assert_eq!(refused["responseStatus"]["code"], 403);
    assert_eq!(refused["responseStatus"]["reason"], "Forbidden");
    assert_eq!(
        refused["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    let namespace = events
        .iter()
        .find(|e| e["objectRef"]["resource"] == "namespaces")
        .expect("the default namespace check is logged");
    assert_eq!(namespace["level"], "Metadata");
    assert!(namespace.get("responseObject").is_none());
}

/// A configuration operators use, `--disable-admission-plugins=NamespaceLifecycle,
/// ServiceAccount`: objects may then be created in namespaces that do not exist, as with
/// kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_lifecycle_can_be_turned_off() {
    let folder = Folder::write();
    let release = RELEASES[RELEASES.len() - 1];
    let plane = ControlPlane::start(
        &folder.assets(),
        release,
        &[(
            "disable-admission-plugins",
            "NamespaceLifecycle,ServiceAccount",
        )],
    )
    .await
    .expect("start");
    let admin = plane.client(&admin_user()).expect("a client");
    create(
        &admin,
        "/api/v1/namespaces/nowhere/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orphan"}}),
    )
    .await;
    absent(&admin, "/api/v1/namespaces/nowhere").await;
    get(&admin, "/api/v1/namespaces/nowhere/configmaps/orphan").await;
    plane.stop().await.expect("stop");
}
