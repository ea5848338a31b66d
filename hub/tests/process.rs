//! The hub binary against the real hub API server: ready once the fleethub API is served (also
//! as a leader-election standby, next to the fleet's leading hub), not ready (with a reason)
//! where it is not, metrics exposed, clean exit on SIGTERM.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fleethub_testkit::{Fleet, free_port, http_get, poll_until};

/// A hub process started by a test; killed if the test ends without stopping it (a failed
/// assertion), so no stray hub keeps working on the fleet.
struct HubChild(Child);

impl Drop for HubChild {
    fn drop(&mut self) {
        // Harmless once the process has exited.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_hub(kubeconfig: &std::path::Path, port: u16) -> HubChild {
    let child = Command::new(env!("CARGO_BIN_EXE_fleethub-hub"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        // The fleet's own hub holds the default lease: this one stands by (see leader_election.rs).
        .args(["--leader-election-identity", "process-test-hub"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    HubChild(child)
}

async fn readyz(port: u16) -> Option<(u16, String)> {
    http_get(([127, 0, 0, 1], port).into(), "/readyz")
        .await
        .ok()
}

fn sigterm_and_wait(mut hub: HubChild) -> (std::process::ExitStatus, String) {
    let child = &mut hub.0;
    // Drain the log while waiting: a full pipe would block the hub.
    let mut stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        err
    });
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, log.join().unwrap());
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the hub did not exit within 20s of SIGTERM; its log:\n{}",
                log.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn hub_becomes_ready_serves_metrics_and_stops_on_sigterm() {
    let fleet = Fleet::get().unwrap();
    let port = free_port().unwrap();
    let hub = start_hub(&fleet.kubeconfig("hub"), port);

    poll_until(
        "the hub's /readyz to answer 200",
        Duration::from_secs(60),
        || async { readyz(port).await.filter(|(code, _)| *code == 200) },
    )
    .await
    .unwrap();
    let (code, metrics) = http_get(([127, 0, 0, 1], port).into(), "/metrics")
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains("fleethub_hub_build_info{version=\"0.1.0\"} 1"),
        "{metrics}"
    );
    // Ready while standing by: the fleet's hub leads.
    assert!(metrics.contains("fleethub_hub_leader 0"), "{metrics}");
    assert_eq!(
        http_get(([127, 0, 0, 1], port).into(), "/healthz")
            .await
            .unwrap()
            .0,
        200
    );

    let (status, log) = sigterm_and_wait(hub);
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    assert!(
        log.contains("shutting down") && log.contains("stopped"),
        "{log}"
    );
}

#[tokio::test]
async fn hub_is_not_ready_where_the_fleethub_api_is_missing() {
    let fleet = Fleet::get().unwrap();
    let port = free_port().unwrap();
    // A member cluster has no fleethub CRDs installed.
    let hub = start_hub(&fleet.kubeconfig("member-1"), port);
    let (code, body) = poll_until(
        "the hub's /readyz to answer",
        Duration::from_secs(60),
        || async {
            readyz(port)
                .await
                .filter(|(_, body)| body.contains("hub-api: fleethub.dev"))
        },
    )
    .await
    .unwrap();
    assert_eq!(code, 503);
    assert!(
        body.contains("fleethub.dev/v1alpha1 kinds not installed: MemberCluster"),
        "{body}"
    );
    assert!(body.contains("apply the CRDs in crds/generated/"), "{body}");
    let (status, _) = sigterm_and_wait(hub);
    assert!(status.success());
}
