//! A `fleethub-hub` process started by a test: its health port, its log (a file, so a chatty hub
//! never blocks on a full pipe), metric scraping, SIGKILL and SIGTERM.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use fleethub_testkit::{free_port, http_get, unique_name};

/// A running hub process; killed when dropped.
pub struct HubProcess {
    child: Child,
    /// Port of its `/healthz`, `/readyz` and `/metrics`.
    pub port: u16,
    /// Its leader-election identity.
    pub identity: String,
    log: PathBuf,
}

impl HubProcess {
    /// Starts the hub binary against `kubeconfig` as `identity`, with `args` added.
    pub fn start(kubeconfig: &Path, identity: &str, args: &[&str]) -> Self {
        let port = free_port().unwrap();
        let log = std::env::temp_dir().join(format!("{}.log", unique_name("fleethub-hub-test")));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fleethub-hub"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--leader-election-identity", identity])
            .args(args)
            .env("FLEETHUB_LOG_FORMAT", "text")
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        Self {
            child,
            port,
            identity: identity.to_string(),
            log,
        }
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` on its health port, if it answers.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(([127, 0, 0, 1], self.port).into(), path)
            .await
            .ok()
    }

    /// The value of the first sample of metric `name` (with any labels), if exported.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics").await?;
        sample(&text, name)
    }

    /// SIGKILL: a crash.
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits (at most `timeout`) for the exit.
    pub fn sigterm_and_wait(&mut self, timeout: Duration) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() >= deadline {
                self.sigkill();
                panic!(
                    "hub {} did not exit within {timeout:?} of SIGTERM; its log:\n{}",
                    self.identity,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The value of the first sample of metric `name` in a Prometheus text exposition.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let value = if rest.starts_with('{') {
            rest.split_once("} ")?.1
        } else {
            rest.strip_prefix(' ')?
        };
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Sum of every sample of metric `name` whose labels contain `label` (e.g. `controller="x"`).
pub fn sum_with(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
