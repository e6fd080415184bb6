//! Who may do what, with real kubectl against `konverge up` (RBAC on, as by default):
//! ServiceAccount tokens under a Role, impersonation, client-certificate users,
//! `konverge kubeconfig`, and tokens that outlive a restart. Errors are compared with
//! kube-apiserver's words.

use std::path::Path;
use std::process::Command;

mod common;

use common::Up;

/// Runs the built `konverge`: exit code, stdout, stderr.
fn konverge(args: &[&str], data_dir: &Path) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("run konverge");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `konverge kubeconfig ARGS -o FILE` in the server's data directory; returns FILE.
fn kubeconfig_for(up: &Up, file: &str, args: &[&str]) -> String {
    let path = up.dir.path().join(file).display().to_string();
    let mut full = vec!["kubeconfig"];
    full.extend(args);
    full.extend(["-o", &path]);
    let (code, out, err) = konverge(&full, up.dir.path());
    assert_eq!(code, Some(0), "konverge {full:?}:\n{err}\n{out}");
    path
}

/// `kubectl auth whoami` with `--token`: the user name, or the error kubectl prints.
fn whoami_with_token(up: &Up, token: &str) -> Result<String, String> {
    let (code, out, err) = up.run(
        &[
            "auth",
            "whoami",
            "--token",
            token,
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    if code == Some(0) { Ok(out) } else { Err(err) }
}

/// The `configmaps` row of `kubectl auth can-i --list`, with runs of spaces made one.
fn configmaps_rule(list: &str) -> Option<String> {
    list.lines()
        .find(|line| line.starts_with("configmaps "))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// ServiceAccount `team/builder`, bound to a Role that may get and list ConfigMaps in `team`;
/// namespace `other` exists too. Returns a token for it.
fn builder_with_configmap_reader(up: &Up) -> String {
    for ns in ["team", "other"] {
        up.ok(&["create", "namespace", ns]);
    }
    up.ok(&["create", "serviceaccount", "builder", "-n", "team"]);
    up.ok(&[
        "create",
        "role",
        "configmap-reader",
        "--verb=get,list",
        "--resource=configmaps",
        "-n",
        "team",
    ]);
    up.ok(&[
        "create",
        "rolebinding",
        "builder-reads-configmaps",
        "--role=configmap-reader",
        "--serviceaccount=team:builder",
        "-n",
        "team",
    ]);
    up.ok(&["create", "token", "builder", "-n", "team"])
        .trim()
        .to_string()
}

#[test]
fn a_service_account_may_do_what_its_role_allows_and_nothing_else() {
    let up = Up::start();
    let token = builder_with_configmap_reader(&up);
    let as_builder = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend(["--token", &token]);
        up.run(&full, None)
    };

    // Allowed: ConfigMaps in its namespace (kube-root-ca.crt is there in every namespace).
    let (code, out, err) = as_builder(&["get", "configmaps", "-n", "team"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("kube-root-ca.crt"), "{out}");
    let (code, _, err) = as_builder(&["get", "configmap", "kube-root-ca.crt", "-n", "team"]);
    assert_eq!(code, Some(0), "{err}");

    // Not elsewhere, not other resources, not other verbs.
    let (code, _, err) = as_builder(&["get", "configmaps", "-n", "other"]);
    assert_ne!(code, Some(0));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): configmaps is forbidden: User "system:serviceaccount:team:builder" cannot list resource "configmaps" in API group "" in the namespace "other""#
    );
    let (code, _, err) = as_builder(&["get", "secrets", "-n", "team"]);
    assert_ne!(code, Some(0));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:team:builder" cannot list resource "secrets" in API group "" in the namespace "team""#
    );
    let (code, _, err) = as_builder(&[
        "create",
        "configmap",
        "x",
        "-n",
        "team",
        "--from-literal=a=b",
    ]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains(r#"configmaps is forbidden: User "system:serviceaccount:team:builder" cannot create resource "configmaps" in API group "" in the namespace "team""#),
        "{err}"
    );

    // What it may do, asked with its token and by the admin acting as it: the same rules.
    let (code, own, err) = as_builder(&["auth", "can-i", "--list", "-n", "team"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        configmaps_rule(&own).as_deref(),
        Some("configmaps [] [] [get list]"),
        "{own}"
    );
    let impersonated = up.ok(&[
        "auth",
        "can-i",
        "--list",
        "-n",
        "team",
        "--as=system:serviceaccount:team:builder",
    ]);
    assert_eq!(impersonated, own);
    let (_, elsewhere, _) = as_builder(&["auth", "can-i", "--list", "-n", "other"]);
    assert_eq!(configmaps_rule(&elsewhere), None, "{elsewhere}");
    let (code, answer, _) = up.run(
        &[
            "auth",
            "can-i",
            "list",
            "secrets",
            "-n",
            "team",
            "--as=system:serviceaccount:team:builder",
        ],
        None,
    );
    assert_eq!((code, answer.trim()), (Some(1), "no"));
}

#[test]
fn impersonation_needs_the_impersonate_verb() {
    let up = Up::start();
    let token = builder_with_configmap_reader(&up);
    let (code, _, err) = up.run(
        &[
            "get",
            "configmaps",
            "-n",
            "team",
            "--as=x",
            "--token",
            &token,
        ],
        None,
    );
    assert_ne!(code, Some(0));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): users "x" is forbidden: User "system:serviceaccount:team:builder" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );

    // Granted the verb on that one user, it may.
    up.ok(&[
        "create",
        "clusterrole",
        "impersonate-x",
        "--verb=impersonate",
        "--resource=users",
        "--resource-name=x",
    ]);
    up.ok(&[
        "create",
        "clusterrolebinding",
        "builder-impersonates-x",
        "--clusterrole=impersonate-x",
        "--serviceaccount=team:builder",
    ]);
    let (code, out, err) = up.run(
        &[
            "auth",
            "whoami",
            "--as=x",
            "--token",
            &token,
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "x");
    // Only that one.
    let (code, _, err) = up.run(
        &[
            "get",
            "configmaps",
            "-n",
            "team",
            "--as=y",
            "--token",
            &token,
        ],
        None,
    );
    assert_ne!(code, Some(0));
    assert!(err.contains(r#"users "y" is forbidden"#), "{err}");
}

#[test]
fn a_client_certificate_user_is_its_cn_in_its_os_groups() {
    let up = Up::start();
    let alice = kubeconfig_for(
        &up,
        "alice.kubeconfig",
        &["--user", "alice", "--group", "devs"],
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&alice).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let as_alice = |args: &[&str]| {
        let mut full = vec!["--kubeconfig", alice.as_str()];
        full.extend(args);
        up.run(&full, None)
    };

    let (code, whoami, err) = as_alice(&["auth", "whoami"]);
    assert_eq!(code, Some(0), "{err}");
    let row = |name: &str| {
        whoami
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l[name.len()..].trim().to_string())
    };
    assert_eq!(row("Username").as_deref(), Some("alice"), "{whoami}");
    assert_eq!(
        row("Groups").as_deref(),
        Some("[devs system:authenticated]"),
        "{whoami}"
    );
    assert!(
        row("Extra: authentication.kubernetes.io/credential-id")
            .is_some_and(|v| v.starts_with("[X509SHA256=")),
        "{whoami}"
    );

    // Forbidden until the group is bound to a Role, then allowed.
    let (code, _, err) = as_alice(&["get", "configmaps"]);
    assert_ne!(code, Some(0));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "default""#
    );
    up.ok(&[
        "create",
        "role",
        "configmap-reader",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    up.ok(&[
        "create",
        "rolebinding",
        "devs-read-configmaps",
        "--role=configmap-reader",
        "--group=devs",
    ]);
    let (code, out, err) = as_alice(&["get", "configmaps"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("kube-root-ca.crt"), "{out}");

    // Without -o the kubeconfig goes to stdout; a user in no group is only authenticated.
    let (code, yaml, err) = konverge(&["kubeconfig", "--user", "bob"], up.dir.path());
    assert_eq!(code, Some(0), "{err}");
    assert!(yaml.contains("client-certificate-data: "), "{yaml}");
    assert!(yaml.contains("current-context: bob@konverge"), "{yaml}");
    let bob = common::write(up.dir.path(), "bob.kubeconfig", &yaml);
    let groups = up.ok(&[
        "--kubeconfig",
        &bob,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.groups}",
    ]);
    assert_eq!(groups, r#"["system:authenticated"]"#);
}

#[test]
fn konverge_kubeconfig_as_a_service_account() {
    let up = Up::start();
    builder_with_configmap_reader(&up);
    let builder = kubeconfig_for(
        &up,
        "builder.kubeconfig",
        &["--as-serviceaccount", "team/builder", "--duration", "20m"],
    );
    let as_builder = |args: &[&str]| {
        let mut full = vec!["--kubeconfig", builder.as_str()];
        full.extend(args);
        up.run(&full, None)
    };
    let (code, out, err) = as_builder(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "system:serviceaccount:team:builder");
    // The context works in the ServiceAccount's namespace.
    let (code, out, err) = as_builder(&["get", "configmaps"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("kube-root-ca.crt"), "{out}");
    let (code, _, err) = as_builder(&["get", "secrets"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("secrets is forbidden"), "{err}");

    // A token the server did not sign.
    let (code, _, err) = as_builder(&["get", "configmaps", "--token", "bogus"]);
    assert_ne!(code, Some(0));
    assert_eq!(
        err.trim(),
        "error: You must be logged in to the server (Unauthorized)"
    );

    // Clear errors: no such ServiceAccount, a duration the server refuses, no data directory,
    // no server.
    let (code, _, err) = konverge(
        &["kubeconfig", "--as-serviceaccount", "team/nobody"],
        up.dir.path(),
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("ServiceAccount team/nobody does not exist"),
        "{err}"
    );
    let (code, _, err) = konverge(
        &[
            "kubeconfig",
            "--as-serviceaccount",
            "team/builder",
            "--duration",
            "5m",
        ],
        up.dir.path(),
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let missing = up.dir.path().join("missing");
    let (code, _, err) = konverge(&["kubeconfig", "--user", "alice"], &missing);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("no data directory {}", missing.display())),
        "{err}"
    );

    let port = up.port;
    let dir = up.stop();
    let (code, _, err) = konverge(
        &["kubeconfig", "--as-serviceaccount", "team/builder"],
        dir.path(),
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!(
            "cannot reach the server at https://127.0.0.1:{port}"
        )) && err.contains("is `konverge up --data-dir"),
        "{err}"
    );
    // A certificate needs only the CA.
    let (code, yaml, err) = konverge(&["kubeconfig", "--user", "alice"], dir.path());
    assert_eq!(code, Some(0), "{err}");
    assert!(yaml.contains("client-key-data: "), "{yaml}");
}

#[test]
fn service_account_tokens_survive_a_restart() {
    let up = Up::start();
    up.ok(&["create", "namespace", "team"]);
    up.ok(&["create", "serviceaccount", "builder", "-n", "team"]);
    let token = up.ok(&["create", "token", "builder", "-n", "team"]);
    let token = token.trim();
    assert_eq!(
        whoami_with_token(&up, token).as_deref(),
        Ok("system:serviceaccount:team:builder")
    );
    let generated = kubeconfig_for(
        &up,
        "builder.kubeconfig",
        &["--as-serviceaccount", "team/builder"],
    );

    let up = up.restart();
    assert_eq!(
        whoami_with_token(&up, token).as_deref(),
        Ok("system:serviceaccount:team:builder"),
        "a token issued before the restart"
    );
    let whoami = up.ok(&[
        "--kubeconfig",
        &generated,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(whoami, "system:serviceaccount:team:builder");
    // Still checked against the ServiceAccount: deleting it ends the token.
    up.ok(&["delete", "serviceaccount", "builder", "-n", "team"]);
    let refused = whoami_with_token(&up, token).unwrap_err();
    assert!(
        refused.contains("error: You must be logged in to the server (Unauthorized)"),
        "{refused}"
    );
}
