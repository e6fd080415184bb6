//! A throwaway etcd server for tests and benchmarks: [`EtcdServer::start`]; and a cluster of
//! several members for failover tests: [`EtcdCluster::start`].
//!
//! It runs the `etcd` binary (`/usr/bin/etcd`, or `etcd` on `PATH`) as a child process on free
//! loopback ports with its data in a temporary directory, waits until it answers, and stops
//! it (and removes the data) when dropped.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use konverge_store_etcd::{EtcdStore, testing::EtcdServer};
//!
//! let server = EtcdServer::start().await?;
//! let store = EtcdStore::connect(&[server.endpoint()]).await?;
//! // ... use `store`; keep `server` alive as long as the store is used.
//! # Ok(())
//! # }
//! ```

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::process::{Child, Command};

/// How long [`EtcdServer::start`] waits for etcd to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How often [`EtcdServer::start`] asks whether etcd answers yet.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How many times [`EtcdServer::start`] tries fresh ports when etcd exits right away (another
/// process took a port between picking and binding it).
const START_ATTEMPTS: usize = 3;

/// Why an [`EtcdServer`] could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No etcd binary was found.
    #[error("etcd binary not found: looked for /usr/bin/etcd and `etcd` on PATH")]
    NotFound,

    /// Something local failed: the temporary directory, picking a port, spawning the process.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// etcd exited before it answered.
    #[error("etcd exited during startup ({status}); its log:\n{log}")]
    Exited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// The end of what it wrote to stderr.
        log: String,
    },

    /// etcd did not answer within the startup timeout.
    #[error("etcd did not answer within {timeout:?}: {last_error}; its log:\n{log}")]
    Timeout {
        /// How long was waited.
        timeout: Duration,
        /// The last error of the readiness probe.
        last_error: String,
        /// The end of what it wrote to stderr.
        log: String,
    },
}

/// A running etcd child process with its own data directory. Stops etcd when dropped.
#[derive(Debug)]
pub struct EtcdServer {
    endpoint: String,
    /// How it was started (name, peer URL, initial cluster), to start it again.
    member: (String, String, String),
    child: Child,
    // Declared after `child`: the process is killed before its data directory is removed.
    dir: TempDir,
}

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits (at most about 10 s) until it answers.
    pub async fn start() -> Result<Self, Error> {
        let binary = find_etcd().ok_or(Error::NotFound)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(&binary).await {
                Err(Error::Exited { .. }) if attempt < START_ATTEMPTS => continue,
                result => return result,
            }
        }
    }

    async fn start_once(binary: &Path) -> Result<Self, Error> {
        let dir = data_dir()?;
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");

        let child = spawn_member(
            binary,
            dir.path(),
            "default",
            &client_url,
            &peer_url,
            &format!("default={peer_url}"),
        )?;

        let mut server = EtcdServer {
            endpoint: client_url,
            member: (
                "default".into(),
                peer_url.clone(),
                format!("default={peer_url}"),
            ),
            child,
            dir,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// Kills etcd (SIGKILL, as a crash) and starts it again on its data directory and ports,
    /// waiting (polling every 50 ms) until it answers with what it held.
    pub async fn restart(&mut self) -> Result<(), Error> {
        let binary = find_etcd().ok_or(Error::NotFound)?;
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let (name, peer_url, initial_cluster) = &self.member;
        self.child = spawn_member(
            &binary,
            self.dir.path(),
            name,
            &self.endpoint,
            peer_url,
            initial_cluster,
        )?;
        self.wait_ready().await
    }

    /// Polls etcd until a read succeeds, it exits, or the timeout passes.
    async fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + START_TIMEOUT;
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(1));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Error::Exited {
                    status,
                    log: self.log_tail(),
                });
            }
            let last_error =
                match etcd_client::Client::connect([&self.endpoint], Some(options.clone())).await {
                    Ok(mut client) => match client.get("konverge-probe", None).await {
                        Ok(_) => return Ok(()),
                        Err(err) => err.to_string(),
                    },
                    Err(err) => err.to_string(),
                };
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    timeout: START_TIMEOUT,
                    last_error,
                    log: self.log_tail(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The etcd process id (for measuring its memory), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The client URL, e.g. `http://127.0.0.1:40123`, to pass to
    /// [`EtcdStore::connect`](crate::EtcdStore::connect).
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// The temporary directory holding etcd's data and its log (`etcd.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines etcd wrote to its log.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // `kill_on_drop` would do it too; killing here (and reaping if it is quick) makes sure
        // the process is gone before the data directory is removed.
        let _ = self.child.start_kill();
        let _ = self.child.try_wait();
    }
}

/// A new temporary directory for one member's data and log.
fn data_dir() -> Result<TempDir, Error> {
    tempfile::Builder::new()
        .prefix("konverge-etcd-")
        .tempdir()
        .map_err(|source| Error::Io {
            what: "creating etcd's data directory",
            source,
        })
}

/// Spawns one etcd member with its data and log in `dir`.
fn spawn_member(
    binary: &Path,
    dir: &Path,
    name: &str,
    client_url: &str,
    peer_url: &str,
    initial_cluster: &str,
) -> Result<Child, Error> {
    let log = std::fs::File::create(dir.join("etcd.log")).map_err(|source| Error::Io {
        what: "creating etcd's log file",
        source,
    })?;
    Command::new(binary)
        .arg("--name")
        .arg(name)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--listen-client-urls")
        .arg(client_url)
        .arg("--advertise-client-urls")
        .arg(client_url)
        .arg("--listen-peer-urls")
        .arg(peer_url)
        .arg("--initial-advertise-peer-urls")
        .arg(peer_url)
        .arg("--initial-cluster")
        .arg(initial_cluster)
        .arg("--initial-cluster-state")
        .arg("new")
        .arg("--logger")
        .arg("zap")
        .arg("--log-level")
        .arg("error")
        .arg("--log-outputs")
        .arg("stderr")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| Error::Io {
            what: "spawning etcd",
            source,
        })
}

/// A throwaway etcd cluster of several members on loopback, for failover tests: each member
/// an [`EtcdServer`] of its own (own ports, data and log), started together. Stops them all
/// when dropped.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Option<EtcdServer>>,
}

impl EtcdCluster {
    /// Starts `size` members and waits (at most about 10 s each) until every one answers.
    pub async fn start(size: usize) -> Result<Self, Error> {
        let binary = find_etcd().ok_or(Error::NotFound)?;
        let mut planned = Vec::with_capacity(size);
        for i in 0..size {
            let dir = data_dir()?;
            let client_url = format!("http://127.0.0.1:{}", free_port()?);
            let peer_url = format!("http://127.0.0.1:{}", free_port()?);
            planned.push((format!("member-{i}"), dir, client_url, peer_url));
        }
        let initial_cluster = planned
            .iter()
            .map(|(name, _, _, peer)| format!("{name}={peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::with_capacity(size);
        for (name, dir, client_url, peer_url) in planned {
            let child = spawn_member(
                &binary,
                dir.path(),
                &name,
                &client_url,
                &peer_url,
                &initial_cluster,
            )?;
            members.push(EtcdServer {
                endpoint: client_url,
                member: (name, peer_url, initial_cluster.clone()),
                child,
                dir,
            });
        }
        for member in &mut members {
            member.wait_ready().await?;
        }
        Ok(EtcdCluster {
            members: members.into_iter().map(Some).collect(),
        })
    }

    /// The client URLs of the members still running.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .flatten()
            .map(EtcdServer::endpoint)
            .collect()
    }

    /// Kills member `index` (SIGKILL, as a crash), if it still runs.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut member) = self.members.get_mut(index).and_then(Option::take) {
            let _ = member.child.start_kill();
            let _ = member.child.wait().await;
        }
    }
}

/// `/usr/bin/etcd`, else the first `etcd` on `PATH`.
fn find_etcd() -> Option<PathBuf> {
    let standard = PathBuf::from("/usr/bin/etcd");
    if standard.is_file() {
        return Some(standard);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// A loopback port that was free a moment ago.
fn free_port() -> Result<u16, Error> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| Error::Io {
            what: "picking a free loopback port",
            source,
        })
}
