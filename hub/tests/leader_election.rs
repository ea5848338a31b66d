//! Leader election with two real hub processes against the real hub API server: exactly one
//! leads and reconciles; when the leader is SIGKILLed the standby takes over once the lease
//! runs out; when the leader gets SIGTERM it releases the lease and the standby takes over at
//! once. The fleet's own hub is stopped for the test (it would reconcile the same objects) and
//! started again afterwards, also when the test fails.

mod hub_process;

use std::time::{Duration, Instant};

use fleethub_crds::{MemberCluster, names};
use fleethub_testkit::{Cleanup, Fleet, poll_until, unique_name, wait_for};
use hub_process::{HubProcess, sum_with};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NAMESPACE: &str = "fleethub-system";
/// The test pair's lease duration; the SIGTERM handover must beat it by far.
const LEASE_SECONDS: u64 = 20;
const TIMEOUT: Duration = Duration::from_secs(120);

/// Starts the fleet's hub again when the test ends, however it ends.
struct FleetHubBack(&'static Fleet);

impl Drop for FleetHubBack {
    fn drop(&mut self) {
        if let Err(e) = self.0.start_fleethub() {
            eprintln!("could not restart the fleet's hub: {e}");
        }
    }
}

fn start(fleet: &Fleet, identity: &str, lease: &str) -> HubProcess {
    HubProcess::start(
        &fleet.kubeconfig("hub"),
        identity,
        &[
            "--leader-election-namespace",
            NAMESPACE,
            "--leader-election-lease",
            lease,
            "--leader-election-lease-duration",
            &LEASE_SECONDS.to_string(),
            "--leader-election-renew-deadline",
            "14",
            "--leader-election-retry-period",
            "2",
        ],
    )
}

async fn holder(leases: &Api<Lease>, lease: &str) -> Option<String> {
    leases
        .get_opt(lease)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// A new MemberCluster (deleted by `cleanup`, its namespace with it), and the wait until some
/// hub provisioned its namespace.
async fn provisioned_member(hub: &Client, cleanup: &Cleanup, prefix: &str) -> String {
    let name = unique_name(prefix);
    cleanup.track::<Namespace>("hub", None, &names::member_namespace(&name));
    cleanup.track::<MemberCluster>("hub", None, &name);
    let members: Api<MemberCluster> = Api::all(hub.clone());
    let member: MemberCluster = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": name}, "spec": {}}))
    .unwrap();
    members
        .create(&PostParams::default(), &member)
        .await
        .unwrap();
    wait_for(
        &Api::<Namespace>::all(hub.clone()),
        &names::member_namespace(&name),
        "the new member's namespace, provisioned by the leader",
        TIMEOUT,
        |n: Option<&Namespace>| n.is_some(),
    )
    .await
    .unwrap();
    name
}

async fn membership_reconciles(hub: &HubProcess) -> f64 {
    let (_, text) = hub.get("/metrics").await.unwrap_or_default();
    sum_with(
        &text,
        "fleethub_hub_reconciles_total",
        "controller=\"membership\"",
    )
}

#[tokio::test]
async fn one_hub_leads_and_a_standby_takes_over() {
    let fleet = Fleet::get().unwrap();
    let client = fleet.hub().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let members: Api<MemberCluster> = Api::all(client.clone());
    let lease = unique_name("leader-test");
    // Declared before the fleet's hub is stopped, so it runs after the hub is back.
    let cleanup = Cleanup::new(fleet);
    cleanup.track::<Lease>("hub", Some(NAMESPACE), &lease);

    let _restore = FleetHubBack(fleet);
    fleet.kill("hub").unwrap();

    let mut a = start(fleet, "test-hub-a", &lease);
    let mut b = start(fleet, "test-hub-b", &lease);

    // Exactly one leads; both are ready (a standby is healthy, just not leading).
    let first = poll_until("one of the two hubs to hold the lease", TIMEOUT, || {
        holder(&leases, &lease)
    })
    .await
    .unwrap();
    let (leader, standby) = if first == a.identity {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_eq!(leader.identity, first);
    for hub in [&*leader, &*standby] {
        poll_until("both hubs' /readyz to answer 200", TIMEOUT, || async {
            hub.get("/readyz").await.filter(|(code, _)| *code == 200)
        })
        .await
        .unwrap();
    }
    poll_until(
        "the leader to report fleethub_hub_leader 1",
        TIMEOUT,
        || async { (leader.metric("fleethub_hub_leader").await == Some(1.0)).then_some(()) },
    )
    .await
    .unwrap();
    assert_eq!(standby.metric("fleethub_hub_leader").await, Some(0.0));

    // Only the leader reconciles: a new member is provisioned (the fleet's hub is down, so by
    // the leader) and the standby's controllers never ran.
    let m1 = provisioned_member(&client, &cleanup, "leader-m1").await;
    poll_until("the leader to count its reconciles", TIMEOUT, || async {
        (membership_reconciles(leader).await > 0.0).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        membership_reconciles(standby).await,
        0.0,
        "the standby reconciled; its log:\n{}",
        standby.log()
    );
    // It says so once it has seen the leader's lease (its first attempt may have lost the race
    // to create the lease, which it logs nothing for).
    let says = poll_until("the standby to log that it stands by", TIMEOUT, || async {
        standby.log().contains("standing by").then_some(())
    })
    .await;
    assert!(says.is_ok(), "{}", standby.log());

    // SIGKILL the leader: the standby takes over once the lease runs out.
    let killed_identity = leader.identity.clone();
    leader.sigkill();
    let killed = Instant::now();
    let standby_identity = standby.identity.clone();
    poll_until(
        "the standby to take the lease after the leader was killed",
        Duration::from_secs(LEASE_SECONDS * 3),
        || async {
            (holder(&leases, &lease).await.as_deref() == Some(standby_identity.as_str()))
                .then_some(())
        },
    )
    .await
    .unwrap();
    let takeover = killed.elapsed();
    println!(
        "takeover after SIGKILL of the leader: {:.1}s (lease duration {LEASE_SECONDS}s)",
        takeover.as_secs_f64()
    );
    let m2 = provisioned_member(&client, &cleanup, "leader-m2").await;
    assert_eq!(standby.metric("fleethub_hub_leader").await, Some(1.0));
    poll_until(
        "the new leader to count its reconciles",
        TIMEOUT,
        || async { (membership_reconciles(standby).await > 0.0).then_some(()) },
    )
    .await
    .unwrap();

    // The killed replica comes back (same identity): it stands by, as the lease is not its own.
    let mut back = start(fleet, &killed_identity, &lease);
    poll_until("the restarted hub to stand by", TIMEOUT, || async {
        back.log().contains("standing by").then_some(())
    })
    .await
    .unwrap();
    assert_eq!(back.metric("fleethub_hub_leader").await, Some(0.0));

    // SIGTERM the leader: it releases the lease and the standby takes over without waiting for
    // the lease to run out.
    let status = standby.sigterm_and_wait(Duration::from_secs(30));
    let terminated = Instant::now();
    assert!(status.success(), "exit {status:?}; log:\n{}", standby.log());
    assert!(
        standby.log().contains("released the leader-election lease"),
        "{}",
        standby.log()
    );
    poll_until(
        "the restarted hub to take the released lease",
        Duration::from_secs(LEASE_SECONDS),
        || async {
            (holder(&leases, &lease).await.as_deref() == Some(killed_identity.as_str()))
                .then_some(())
        },
    )
    .await
    .unwrap();
    let handover = terminated.elapsed();
    println!(
        "handover after SIGTERM of the leader: {:.1}s (lease duration {LEASE_SECONDS}s)",
        handover.as_secs_f64()
    );
    let spec = leases.get(&lease).await.unwrap().spec.unwrap();
    assert!(
        spec.lease_transitions.unwrap_or(0) >= 2,
        "two changes of holder: {spec:?}"
    );
    let m3 = provisioned_member(&client, &cleanup, "leader-m3").await;

    let status = back.sigterm_and_wait(Duration::from_secs(30));
    assert!(status.success(), "{}", back.log());
    for m in [m1, m2, m3] {
        let _ = members.delete(&m, &DeleteParams::default()).await;
    }
    let _ = leases.delete(&lease, &DeleteParams::default()).await;
}

#[test]
fn inconsistent_timing_flags_are_refused_before_connecting() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fleethub-hub"))
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .args(["--leader-election-lease-duration", "5"])
        .args(["--leader-election-renew-deadline", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "leader election: the lease duration (5s) must be longer than the renew deadline (10s)"
        ),
        "{err}"
    );
}
