//! End to end against a real client: `kubectl create …` (1.33, which sends protobuf) against
//! a tiny HTTP listener that records the request body and answers 415. The decoded body must
//! equal what the same command prints with `--dry-run=client -o json` (Go's JSON of the same
//! object), exactly.
//!
//! Needs kubectl 1.32 or later: `$KONVERGE_KUBECTL`, else `kubectl.1.33` next to the
//! `kubectl` found on `PATH` (as some SDK installs have), else `kubectl` itself if it is
//! recent enough. Without one, the test prints why and passes.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// A request the listener received.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    content_type: String,
    body: Vec<u8>,
}

fn find_kubectl() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KONVERGE_KUBECTL") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|p| p.is_file())
    })?;
    let real = std::fs::canonicalize(&on_path).ok()?;
    let sibling = real.parent()?.join("kubectl.1.33");
    if sibling.is_file() {
        return Some(sibling);
    }
    // kubectl itself, if it is 1.32 or later.
    let out = Command::new(&on_path)
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()?;
    let version: Value = serde_json::from_slice(&out.stdout).ok()?;
    let minor: u32 = version["clientVersion"]["minor"]
        .as_str()?
        .trim_end_matches('+')
        .parse()
        .ok()?;
    (minor >= 32).then_some(on_path)
}

fn handle(stream: TcpStream, seen: &Mutex<Vec<Request>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut content_length = 0usize;
    let mut content_type = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => content_length = value.trim().parse().unwrap_or(0),
                "content-type" => content_type = value.trim().to_owned(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    seen.lock().unwrap().push(Request {
        method,
        path,
        content_type,
        body,
    });
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"recorded","reason":"UnsupportedMediaType","code":415}"#;
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 415 Unsupported Media Type\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{status}",
        status.len()
    )?;
    stream.flush()
}

/// Starts the recording listener; returns its URL and the requests it has seen.
fn listen() -> (String, Arc<Mutex<Vec<Request>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let recorded = Arc::clone(&recorded);
            std::thread::spawn(move || {
                let _ = handle(stream, &recorded);
            });
        }
    });
    (url, seen)
}

struct Kubectl {
    binary: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> std::process::Output {
        let kubeconfig = self.home.join("kubeconfig");
        Command::new(&self.binary)
            .args(args)
            .env("HOME", &self.home)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap()
    }
}

#[test]
fn kubectl_create_bodies_decode_to_the_dry_run_json() {
    let Some(binary) = find_kubectl() else {
        eprintln!("SKIPPED: no kubectl 1.32+ (set KONVERGE_KUBECTL)");
        return;
    };
    let home =
        std::env::temp_dir().join(format!("konverge-protobuf-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("kubeconfig"), "apiVersion: v1\nkind: Config\n").unwrap();
    let kubectl = Kubectl { binary, home };
    let (url, seen) = listen();

    let commands: &[&[&str]] = &[
        &[
            "create",
            "configmap",
            "cm",
            "--from-literal=a=1",
            "--from-literal=b=two",
        ],
        &[
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=user=admin",
            "--type=Opaque",
        ],
        &[
            "create",
            "secret",
            "docker-registry",
            "reg",
            "--docker-server=r.example.com",
            "--docker-username=u",
            "--docker-password=p\u{e9}",
        ],
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=3",
            "--port=80",
        ],
        &[
            "create",
            "deployment",
            "none",
            "--image=busybox",
            "--replicas=0",
        ],
        &["create", "namespace", "team-a"],
        &["create", "serviceaccount", "robot"],
        &[
            "create",
            "service",
            "clusterip",
            "svc",
            "--tcp=80:8080",
            "--tcp=443:https",
        ],
        &[
            "create",
            "service",
            "nodeport",
            "np",
            "--tcp=80:80",
            "--node-port=30080",
        ],
        &[
            "create",
            "job",
            "once",
            "--image=busybox",
            "--",
            "echo",
            "hi",
        ],
        &[
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=*/5 * * * *",
            "--",
            "date",
        ],
        &[
            "create",
            "rolebinding",
            "rb",
            "--clusterrole=view",
            "--user=alice",
            "--group=devs",
        ],
        &[
            "create",
            "clusterrolebinding",
            "crb",
            "--clusterrole=view",
            "--serviceaccount=default:robot",
        ],
        &["create", "quota", "q", "--hard=pods=2,requests.cpu=1"],
        &[
            "create",
            "poddisruptionbudget",
            "pdb",
            "--selector=app=web",
            "--min-available=50%",
        ],
        &[
            "create",
            "priorityclass",
            "high",
            "--value=1000",
            "--description=important",
            "--preemption-policy=Never",
        ],
        &[
            "create",
            "ingress",
            "ing",
            "--class=nginx",
            "--rule=a.example.com/api*=api:8080,tls=cert",
        ],
    ];
    let mut checked = 0;
    for args in commands {
        // Flags go right after `create` (before any `-- command`).
        let with = |flags: &[&'static str]| -> Vec<&str> {
            let (create, rest) = args.split_at(1);
            [create, flags, rest].concat()
        };
        let dry_run = kubectl.run(&with(&["--dry-run=client", "-o", "json"]));
        assert!(
            dry_run.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&dry_run.stderr)
        );
        let expected: Value = serde_json::from_slice(&dry_run.stdout).unwrap();

        seen.lock().unwrap().clear();
        let out = kubectl.run(
            &[
                &["--server", url.as_str()][..],
                &with(&["--validate=false"]),
            ]
            .concat(),
        );
        let requests = seen.lock().unwrap().clone();
        let Some(post) = requests.iter().find(|r| r.method == "POST") else {
            panic!(
                "{args:?}: no POST (requests: {:?}, stderr: {})",
                requests
                    .iter()
                    .map(|r| (&r.method, &r.path))
                    .collect::<Vec<_>>(),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        assert_eq!(
            post.content_type,
            konverge_protobuf::CONTENT_TYPE,
            "{args:?} ({}) was not sent as protobuf",
            post.path
        );
        let (type_meta, decoded) =
            konverge_protobuf::decode(&post.body).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(type_meta.api_version, expected["apiVersion"], "{args:?}");
        assert_eq!(type_meta.kind, expected["kind"], "{args:?}");
        assert_eq!(
            decoded,
            expected,
            "{args:?}:\ndecoded:  {}\nexpected: {}",
            serde_json::to_string_pretty(&decoded).unwrap(),
            serde_json::to_string_pretty(&expected).unwrap()
        );
        // And back: the encoder writes the very bytes client-go wrote.
        let encoded =
            konverge_protobuf::encode(&decoded).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(
            encoded == post.body,
            "{args:?}: encoded bytes differ from client-go's\nencoded:  {:02x?}\nclient-go: {:02x?}",
            encoded,
            post.body
        );
        checked += 1;
    }
    assert_eq!(checked, commands.len());

    let _ = std::fs::remove_dir_all(&kubectl.home);
}
