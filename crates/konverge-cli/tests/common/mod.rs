//! What the CLI's integration tests share: `konverge up` on a free port in a temporary
//! directory, and kubectl pointed at it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

pub(crate) mod poll;

pub(crate) struct Up {
    pub(crate) child: Child,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) port: u16,
}

impl Up {
    pub(crate) fn start() -> Up {
        Up::start_with(&[])
    }

    /// `konverge up` with `args` added (`--controllers ""`, `--nodes 0`, ...).
    pub(crate) fn start_with(args: &[&str]) -> Up {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        Up::start_in(dir, port, args)
    }

    /// `konverge up` on `port` (on whichever address `args` binds) with `args` added.
    pub(crate) fn start_on(port: u16, args: &[&str]) -> Up {
        Up::start_in(tempfile::tempdir().expect("temp dir"), port, args)
    }

    /// Stops the server (SIGTERM, as Ctrl-C would) and starts it again on the same data
    /// directory and port.
    pub(crate) fn restart(self) -> Up {
        let port = self.port;
        Up::start_in(self.stop(), port, &[])
    }

    /// Stops the server (SIGTERM, as Ctrl-C would) and hands back its data directory.
    pub(crate) fn stop(mut self) -> tempfile::TempDir {
        let stopped = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        self.child.wait().expect("konverge up exits");
        let placeholder = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.dir, placeholder)
    }

    fn start_in(dir: tempfile::TempDir, port: u16, args: &[&str]) -> Up {
        let mut child = Command::new(env!("CARGO_BIN_EXE_konverge"))
            .args(["up", "--port", &port.to_string(), "--data-dir"])
            .arg(dir.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start konverge up");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().expect("a readiness line").expect("read");
        assert!(first.starts_with("konverge is ready in "), "{first}");
        let export = lines.next().expect("export line").expect("read");
        assert_eq!(
            export,
            format!(
                "export KUBECONFIG={}",
                dir.path().join("kubeconfig").display()
            )
        );
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Up { child, dir, port }
    }

    pub(crate) fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.env("KUBECONFIG", self.kubeconfig()).args(args);
        cmd
    }

    /// Runs kubectl and returns stdout; panics with stderr on failure.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        self.ok_stdin(args, None)
    }

    pub(crate) fn ok_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (code, out, err) = self.run(args, stdin);
        assert!(
            code == Some(0),
            "kubectl {args:?} failed ({code:?}):\n{err}\n{out}"
        );
        out
    }

    /// Runs kubectl expecting failure; returns stderr.
    pub(crate) fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (code, out, err) = self.run(args, stdin);
        assert!(code != Some(0), "kubectl {args:?} should fail:\n{out}");
        err
    }

    pub(crate) fn run(&self, args: &[&str], stdin: Option<&str>) -> (Option<i32>, String, String) {
        let mut child = self
            .kubectl(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        let output = child.wait_with_output().expect("kubectl output");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut full = args.to_vec();
        full.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&full)).expect("kubectl -o json")
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn write(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write manifest");
    path.display().to_string()
}
