//! The member agent binary against the real hub and member API servers: ready once its
//! MemberCluster exists, metrics, and a clean stop on SIGTERM.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{TIMEOUT, TestMember};
use fleethub_testkit::{Fleet, free_port, http_get, poll_until};

/// The agent process; killed when dropped, so a failing test leaves nothing running.
struct AgentProcess(Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn agent_binary_joins_serves_metrics_and_stops_on_sigterm() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::create(fleet, Some(1)).await;
    let port = free_port().unwrap();
    let mut agent = AgentProcess(
        Command::new(env!("CARGO_BIN_EXE_fleethub-member-agent"))
            .args(["--member-name", &m.name, "--hub-kubeconfig"])
            .arg(fleet.kubeconfig("hub"))
            .arg("--member-kubeconfig")
            .arg(fleet.kubeconfig("member-1"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr = ([127, 0, 0, 1], port).into();
    poll_until("the agent's /readyz to answer 200", TIMEOUT, || async {
        http_get(addr, "/readyz")
            .await
            .ok()
            .filter(|(code, _)| *code == 200)
    })
    .await
    .unwrap();
    let (_, metrics) = http_get(addr, "/metrics").await.unwrap();
    for want in [
        format!("member=\"{}\"", m.name),
        "fleethub_member_agent_heartbeats_total{result=\"success\"}".to_string(),
        "fleethub_member_agent_works 0".to_string(),
    ] {
        assert!(metrics.contains(&want), "missing {want:?} in\n{metrics}");
    }

    assert!(
        Command::new("kill")
            .args(["-TERM", &agent.0.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = poll_until(
        "the agent to exit after SIGTERM",
        Duration::from_secs(20),
        || {
            let exited = agent.0.try_wait().unwrap();
            async move { exited }
        },
    )
    .await
    .unwrap();
    assert!(status.success(), "{status:?}");
    m.delete().await;
}

#[test]
fn agent_refuses_an_invalid_member_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_fleethub-member-agent"))
        .args([
            "--member-name",
            "Member_1",
            "--hub-kubeconfig",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--member-name \"Member_1\" is not a valid MemberCluster name"),
        "{err}"
    );
}
