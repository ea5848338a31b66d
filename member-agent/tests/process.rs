//! The member agent binary against the real hub and member API servers.

use std::process::{Command, Stdio};
use std::time::Duration;

use fleethub_testkit::{Fleet, free_port, http_get, poll_until};

#[tokio::test]
async fn agent_connects_to_hub_and_member_and_stops_on_sigterm() {
    let fleet = Fleet::get().unwrap();
    let port = free_port().unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_fleethub-member-agent"))
        .args(["--member-name", "member-1", "--hub-kubeconfig"])
        .arg(fleet.kubeconfig("hub"))
        .arg("--member-kubeconfig")
        .arg(fleet.kubeconfig("member-1"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = ([127, 0, 0, 1], port).into();
    poll_until(
        "the agent's /readyz to answer 200",
        Duration::from_secs(60),
        || async {
            http_get(addr, "/readyz")
                .await
                .ok()
                .filter(|(code, _)| *code == 200)
        },
    )
    .await
    .unwrap();
    let (_, metrics) = http_get(addr, "/metrics").await.unwrap();
    assert!(metrics.contains("member=\"member-1\""), "{metrics}");

    assert!(
        Command::new("kill")
            .args(["-TERM", &agent.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = poll_until(
        "the agent to exit after SIGTERM",
        Duration::from_secs(20),
        || {
            let exited = agent.try_wait().unwrap();
            async move { exited }
        },
    )
    .await
    .unwrap();
    assert!(status.success(), "{status:?}");
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
