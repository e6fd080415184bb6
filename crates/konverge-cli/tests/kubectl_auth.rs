//! Who may do what, with real kubectl against `konverge up` (RBAC on, as by default):
//! ServiceAccount tokens, impersonation, client certificates, `konverge kubeconfig`, and
//! tokens that outlive a restart.

mod common;

use common::Up;

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

    let up = up.restart();
    assert_eq!(
        whoami_with_token(&up, token).as_deref(),
        Ok("system:serviceaccount:team:builder"),
        "a token issued before the restart"
    );
    // Still checked against the ServiceAccount: deleting it ends the token.
    up.ok(&["delete", "serviceaccount", "builder", "-n", "team"]);
    let refused = whoami_with_token(&up, token).unwrap_err();
    assert!(
        refused.contains("error: You must be logged in to the server (Unauthorized)"),
        "{refused}"
    );
}
