//! Running the real `kubectl-fleet` binary and a real member agent process against the fleet.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use fleethub_testkit::{Fleet, free_port, poll_until};

/// Runs `kubectl-fleet ARGS` with the fleet's hub kubeconfig.
pub fn plugin(fleet: &Fleet, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-fleet"))
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("hub"))
        .args(args)
        .output()
        .expect("running kubectl-fleet")
}

/// Runs `kubectl-fleet ARGS` and asserts it succeeded; returns stdout.
pub fn plugin_ok(fleet: &Fleet, args: &[&str]) -> String {
    let out = plugin(fleet, args);
    assert!(
        out.status.success(),
        "kubectl-fleet {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `kubectl-fleet ARGS`, asserts it failed with exit code 1; returns stderr.
pub fn plugin_err(fleet: &Fleet, args: &[&str]) -> String {
    let out = plugin(fleet, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "kubectl-fleet {args:?} should fail:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Starts `kubectl-fleet ARGS` in the background, its output piped.
pub fn plugin_spawn(fleet: &Fleet, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kubectl-fleet"))
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("hub"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kubectl-fleet")
}

/// Waits (bounded) for `child` to exit; returns its output.
pub async fn wait_exit(mut child: Child, what: &str, timeout: Duration) -> Output {
    let done = poll_until(what, timeout, || {
        let exited = child.try_wait().ok().flatten().is_some();
        async move { exited.then_some(()) }
    })
    .await;
    if done.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    done.unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    out
}

/// The fleethub-member-agent binary next to this test's build (the fleet builds it).
fn agent_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/<test> -> target/debug/fleethub-member-agent
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("fleethub-member-agent");
    assert!(
        bin.exists(),
        "{} is missing: build it (cargo build --bin fleethub-member-agent)",
        bin.display()
    );
    bin
}

/// A real member agent process, killed when dropped.
pub struct AgentProcess(Child);

impl AgentProcess {
    /// Starts `fleethub-member-agent` for `member` with the given kubeconfigs.
    pub fn start(
        member: &str,
        hub_kubeconfig: &Path,
        member_kubeconfig: &Path,
        log: &Path,
    ) -> Self {
        let port = free_port().unwrap();
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(agent_binary())
            .args(["--member-name", member, "--heartbeat-period-seconds", "2"])
            .arg("--hub-kubeconfig")
            .arg(hub_kubeconfig)
            .arg("--member-kubeconfig")
            .arg(member_kubeconfig)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting fleethub-member-agent");
        AgentProcess(child)
    }

    /// Stops the agent (SIGKILL: as if it were gone).
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A scratch directory for one test, under the fleet's directory.
pub fn scratch(fleet: &Fleet, name: &str) -> PathBuf {
    let dir = fleet.dir().join("test-scratch").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kubectl ARGS`: its output.
pub fn kubectl(args: &[&str]) -> Output {
    Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .args(args)
        .output()
        .expect("running kubectl")
}
