//! Test support for fleethub's integration tests: clients for the hub and the member clusters of
//! a running local fleet (`deploy/local/fleet`), unique names so tests do not collide, and waits
//! that watch with a deadline instead of sleeping.
//!
//! The fleet is found in `$FLEET_DIR` (default `<repo>/.fleet`). When no fleet runs there, the
//! kit starts a private one for this test process in `<repo>/.fleet-test-<pid>` on free ports,
//! with a watchdog that takes it down when the process exits, so no process is left behind.
//! `deploy/local/fleet test` brings one fleet up for the whole suite instead.
//!
//! The fleet's real Prometheus and test exporter ([`TestGauge`]) and its real OCI registry
//! ([`Fleet::registry_repo`], [`Fleet::simulate_unready`] for an image whose pods never get
//! Ready) are reached through the kit as well.
//!
//! A test runs on a fleet someone else may be using (the README's demo runs on the same one), so
//! it records what it creates in a [`Cleanup`] guard, which deletes it all when dropped, also
//! when the test fails or panics.
#![forbid(unsafe_code)]

mod cleanup;

pub use cleanup::Cleanup;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

mod exporter;
pub use exporter::{Sample, TestGauge};

mod registry;
pub use registry::{RegistryRepo, Unready};

mod incluster;
pub use incluster::demo_deployment;

mod guarded_prometheus;
pub use guarded_prometheus::GuardedPrometheus;

/// Errors of the test kit.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The fleet could not be found or started.
    #[error("local fleet unavailable: {0}")]
    Fleet(String),
    /// A kubeconfig could not be loaded.
    #[error("kubeconfig {0}: {1}")]
    Kubeconfig(PathBuf, String),
    /// Objects a [`Cleanup`] guard could not delete in time.
    #[error("clean-up left objects behind: {0}")]
    Cleanup(String),
    /// A wait ran past its deadline.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
    /// The Kubernetes client failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// A running local fleet.
#[derive(Debug)]
pub struct Fleet {
    dir: PathBuf,
    members: usize,
    port_base: u16,
}

static FLEET: OnceLock<Result<Fleet, String>> = OnceLock::new();

/// The repository root: the clone whose tests or benchmark run now.
///
/// Found at run time, from the package cargo runs (`CARGO_MANIFEST_DIR`, which `cargo test` and
/// `cargo run` set) or the working directory, upwards to the folder holding
/// `deploy/local/fleet`. The path this crate was compiled in is only the last resort: two clones
/// sharing one target directory (CI's cache, a worktree) reuse one build of this crate, and its
/// compile-time path names whichever clone built it, possibly one that no longer exists.
pub fn repo_root() -> PathBuf {
    let starts = [
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
        std::env::current_dir().ok(),
    ];
    starts
        .into_iter()
        .flatten()
        .find_map(|start| find_repo_root(&start))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.."))
}

/// The nearest folder at or above `start` that holds `deploy/local/fleet`.
fn find_repo_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join("deploy/local/fleet").is_file())
        .map(Path::to_path_buf)
}

fn fleet_script() -> PathBuf {
    repo_root().join("deploy/local/fleet")
}

impl Fleet {
    /// The fleet every test of this process shares: the one running in `$FLEET_DIR`, or a
    /// private one started on first use.
    pub fn get() -> Result<&'static Fleet, Error> {
        FLEET
            .get_or_init(|| Self::find_or_start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Fleet(e.clone()))
    }

    fn find_or_start() -> Result<Fleet, Error> {
        let dir = std::env::var_os("FLEET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(".fleet"));
        if status_ok(&dir) {
            return Fleet::at(dir);
        }
        // A fleet set up there whose status check failed (a component a fault test killed and
        // is restarting, or an API server slow to answer on a loaded machine) is still the
        // fleet to test: starting a second, private one would hide it and double the load.
        if dir.join("fleet.env").exists() && dir.join("run").is_dir() {
            eprintln!(
                "fleethub-testkit: the fleet in {} reports a problem (deploy/local/fleet status); using it anyway",
                dir.display()
            );
            return Fleet::at(dir);
        }
        let dir = repo_root().join(format!(".fleet-test-{}", std::process::id()));
        let base = free_port_base()
            .ok_or_else(|| Error::Fleet("no free port range for a private fleet".into()))?;
        eprintln!(
            "fleethub-testkit: no fleet running; starting a private one in {}",
            dir.display()
        );
        let out = Command::new(fleet_script())
            .args(["up", "--owner-pid", &std::process::id().to_string()])
            .env("FLEET_DIR", &dir)
            .env("FLEET_PORT_BASE", base.to_string())
            // A private fleet has no in-cluster fleet (real nodes, base+400..): its ports would
            // meet the next private fleet's (bases 200 apart), and it is heavy. Its tests skip.
            .env(
                "FLEET_REAL_MEMBERS",
                std::env::var("FLEET_REAL_MEMBERS").unwrap_or_else(|_| "0".into()),
            )
            .output()
            .map_err(|e| Error::Fleet(format!("cannot run deploy/local/fleet: {e}")))?;
        if !out.status.success() {
            return Err(Error::Fleet(format!(
                "deploy/local/fleet up failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Fleet::at(dir)
    }

    fn at(dir: PathBuf) -> Result<Fleet, Error> {
        let env = std::fs::read_to_string(dir.join("fleet.env"))
            .map_err(|e| Error::Fleet(format!("{}: {e}", dir.join("fleet.env").display())))?;
        let setting = |key: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().to_string())
                .ok_or_else(|| {
                    Error::Fleet(format!(
                        "{} names no {key}",
                        dir.join("fleet.env").display()
                    ))
                })
        };
        let number = |key: &str| -> Result<u16, Error> {
            setting(key)?
                .parse()
                .map_err(|_| Error::Fleet(format!("{key} in fleet.env is not a number")))
        };
        let members = number("FLEET_MEMBERS")? as usize;
        let port_base = number("FLEET_PORT_BASE")?;
        Ok(Fleet {
            dir,
            members,
            port_base,
        })
    }

    /// The fleet's state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many member clusters the fleet has (`member-1` … `member-N`).
    pub fn member_count(&self) -> usize {
        self.members
    }

    /// Where the fleet's hub serves `/healthz`, `/readyz` and `/metrics`.
    pub fn hub_health_addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port_base + 100).into()
    }

    /// Where member `i`'s agent serves `/healthz`, `/readyz` and `/metrics`.
    pub fn agent_health_addr(&self, i: usize) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port_base + 100 + i as u16).into()
    }

    /// The admin kubeconfig of cluster `name` (`hub` or `member-<i>`).
    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.kubeconfig"))
    }

    /// An admin client for the hub. Create clients inside each test: a client is bound to the
    /// runtime it was made in.
    pub async fn hub(&self) -> Result<Client, Error> {
        client(&self.kubeconfig("hub")).await
    }

    /// A hub client that acts as `user` in `groups` (admin impersonation), so the hub's RBAC
    /// decides what it may do.
    pub async fn hub_as(&self, user: &str, groups: &[&str]) -> Result<Client, Error> {
        let path = self.kubeconfig("hub");
        let err = |e: &dyn std::fmt::Display| Error::Kubeconfig(path.clone(), e.to_string());
        let kc = Kubeconfig::read_from(&path).map_err(|e| err(&e))?;
        let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| err(&e))?;
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
        Client::try_from(config).map_err(|e| err(&e))
    }

    /// An admin client for member `i` (1-based).
    pub async fn member(&self, i: usize) -> Result<Client, Error> {
        client(&self.kubeconfig(&format!("member-{i}"))).await
    }
}

impl Fleet {
    pub(crate) fn script(&self, args: &[&str]) -> Result<(), Error> {
        self.script_with(args, &[])
    }

    fn script_with(&self, args: &[&str], env: &[(&str, &Path)]) -> Result<(), Error> {
        let out = Command::new(fleet_script())
            .args(args)
            .env("FLEET_DIR", &self.dir)
            .envs(env.iter().copied())
            .output()
            .map_err(|e| Error::Fleet(format!("cannot run deploy/local/fleet: {e}")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::Fleet(format!(
                "deploy/local/fleet {args:?} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )))
        }
    }

    /// SIGKILLs fleet component `name` (e.g. `hub`): a crash, for fault tests.
    pub fn kill(&self, name: &str) -> Result<(), Error> {
        self.script(&["kill", name])
    }

    /// Starts the control-plane parts (etcd, API servers, controllers) that are not running.
    pub fn start_control_plane(&self) -> Result<(), Error> {
        self.script(&["start-control-plane"])
    }

    /// Starts the fleethub parts (hub, agents) that are not running, and waits until ready.
    pub fn start_fleethub(&self) -> Result<(), Error> {
        self.script(&["start-fleethub"])
    }

    /// Like [`Fleet::start_fleethub`], with the binaries in `bins` (the script's `FLEET_BINS`;
    /// without it, the debug build).
    pub fn start_fleethub_from(&self, bins: &Path) -> Result<(), Error> {
        self.script_with(&["start-fleethub"], &[("FLEET_BINS", bins)])
    }
}

fn status_ok(dir: &Path) -> bool {
    dir.join("hub.kubeconfig").exists()
        && Command::new(fleet_script())
            .arg("status")
            .env("FLEET_DIR", dir)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
}

/// A port base whose fleet ports (base..base+120, the registry, Prometheus and the test
/// exporter at base+300, base+310 and base+311) are all free.
fn free_port_base() -> Option<u16> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let start = 20000 + (std::process::id() % 40) as u16 * 200;
    (0..40u16)
        .map(|k| 20000 + (start - 20000 + k * 200) % 8000)
        .find(|&base| {
            (base..base + 120)
                .chain([base + 300, base + 310, base + 311])
                .all(free)
        })
}

pub(crate) async fn client(path: &Path) -> Result<Client, Error> {
    let err = |e: &dyn std::fmt::Display| Error::Kubeconfig(path.to_path_buf(), e.to_string());
    let kc = Kubeconfig::read_from(path).map_err(|e| err(&e))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(&e))?;
    Client::try_from(config).map_err(|e| err(&e))
}

/// `prefix-` followed by 8 random hex digits: a name no other test run uses.
pub fn unique_name(prefix: &str) -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!("{prefix}-{:08x}", h.finish() as u32)
}

/// Watches object `name` until `condition` holds, failing after `timeout`. Returns the object.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    condition: impl Condition<K>,
) -> Result<K, Error>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(Some(obj))) => Ok(obj),
        Ok(Ok(None)) => Err(Error::Timeout(
            timeout,
            format!("{what} (object {name} is gone)"),
        )),
        Ok(Err(e)) => Err(Error::Fleet(format!("watch for {what} failed: {e}"))),
        Err(_) => Err(Error::Timeout(timeout, format!("{what} ({name})"))),
    }
}

/// Watches object `name` until it no longer exists, failing after `timeout`.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, timeout: Duration) -> Result<(), Error>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    let gone = |o: Option<&K>| o.is_none();
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, gone)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Fleet(format!(
            "watch for deletion of {name} failed: {e}"
        ))),
        Err(_) => Err(Error::Timeout(timeout, format!("deletion of {name}"))),
    }
}

/// A plain HTTP/1.1 GET of `path` on `addr` (e.g. a health endpoint): the status code and body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Polls `check` every 100 ms until it returns `Some`, failing after `timeout`. For state that
/// cannot be watched (a process's HTTP endpoint); use [`wait_for`] for Kubernetes objects.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout(timeout, what.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repo_root_is_the_nearest_folder_holding_the_fleet_script() {
        let root = std::env::temp_dir().join(format!("testkit-root-{}", std::process::id()));
        let inside = root.join("hub/tests");
        std::fs::create_dir_all(root.join("deploy/local")).unwrap();
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::write(root.join("deploy/local/fleet"), "").unwrap();
        let found = find_repo_root(&inside);
        let outside = find_repo_root(&std::env::temp_dir());
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, Some(root));
        assert_eq!(outside, None);
        // This clone's own root is found from the package cargo runs.
        assert!(repo_root().join("deploy/local/fleet").is_file());
    }
}
