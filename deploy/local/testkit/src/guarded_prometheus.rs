//! A Prometheus of a test's own that answers only with basic auth (`--web.config.file`), for the
//! metric checks' `secretRef` (a stage's MetricCheck on the hub, a PhasedRollout's check on a
//! member): Debian's `prometheus`, as the fleet runs it, on a free port of 127.0.0.1, where the
//! fleet's hub and member agents run too. Stopped, and its files removed, when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Error, free_port, http_get, poll_until, unique_name};

/// bcrypt of [`GuardedPrometheus::PASSWORD`] (cost 4: Prometheus checks it at every request),
/// made with `python3 -c "import crypt; print(crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH)))"`.
const PASSWORD_BCRYPT: &str = "$2b$04$m49pTzeYfbr1G6klrW2U3.Q67mjsmoY19Wnn4/7TR1Ku.jk3Q11lG";

/// A running Prometheus that wants [`Self::USER`] and [`Self::PASSWORD`].
#[derive(Debug)]
pub struct GuardedPrometheus {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl GuardedPrometheus {
    /// The one user it accepts.
    pub const USER: &'static str = "fleet";
    /// That user's password.
    pub const PASSWORD: &'static str = "fleethub-test-password";

    /// Starts it and waits (up to `timeout`) until it serves: answering 401 without credentials.
    pub async fn start(timeout: Duration) -> Result<Self, Error> {
        let dir = std::env::temp_dir().join(unique_name("fleethub-auth-prometheus"));
        let port = free_port().map_err(|e| Error::Fleet(format!("finding a free port: {e}")))?;
        let child = match spawn(&dir, port) {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Error::Fleet(format!(
                    "starting a Prometheus in {}: {e}",
                    dir.display()
                )));
            }
        };
        // From here the guard stops it, also when it never serves.
        let p = GuardedPrometheus { child, dir, port };
        let addr = ([127, 0, 0, 1], port).into();
        poll_until("the test's Prometheus to serve", timeout, || async {
            let (code, _) = http_get(addr, "/api/v1/query?query=vector(1)").await.ok()?;
            (code == 401).then_some(())
        })
        .await
        .map_err(|e| Error::Fleet(format!("{e}; its log:\n{}", p.log())))?;
        Ok(p)
    }

    /// Its base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address())
    }

    /// `127.0.0.1:<port>`: its URL without a scheme.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What it logged so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for GuardedPrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes its configuration into `dir` and starts it on `port`.
fn spawn(dir: &Path, port: u16) -> std::io::Result<Child> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("prometheus.yml"),
        "global: {scrape_interval: 15s}\n",
    )?;
    let users = format!(
        "basic_auth_users:\n  {}: '{PASSWORD_BCRYPT}'\n",
        GuardedPrometheus::USER
    );
    std::fs::write(dir.join("web.yml"), users)?;
    let log = std::fs::File::create(dir.join("prometheus.log"))?;
    // Debian's package, on PATH as deploy/local/fleet needs it.
    Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--web.config.file={}",
            dir.join("web.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
}
