//! Auto-update survives a hub killed (SIGKILL) again and again: through a good version's rollout
//! and a broken version's rollback, every step happens once — one run per version, one
//! rollback run, one rollback counted, one history entry each. (Its own test binary: the crashes
//! would disturb tests running beside it.)

mod common;

use std::time::Duration;

use common::TIMEOUT;
use common::auto_update::{policy, status, track_policy};
use common::real::Rollout;
use fleethub_crds::UpdateRun;
use fleethub_crds::auto_update::{AutoUpdatePolicy, AutoUpdatePolicyStatus, VersionOutcome};
use fleethub_testkit::Fleet;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// Crashes the hub (SIGKILL) every 0.3–1 s, restarting it each time, until `done` holds for
/// the policy; returns how many crashes there were.
async fn crash_until(
    fleet: &Fleet,
    policies: &Api<AutoUpdatePolicy>,
    name: &str,
    done: impl Fn(&AutoUpdatePolicyStatus) -> bool,
) -> usize {
    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + 3 * TIMEOUT;
    let mut pace = 0x9E3779B97F4A7C15u64;
    loop {
        pace ^= pace << 13;
        pace ^= pace >> 7;
        pace ^= pace << 17;
        // Fault injection pacing, not a wait for state: the policy's status is read below.
        tokio::time::sleep(Duration::from_millis(300 + pace % 700)).await;
        if done(&status(policies.get_opt(name).await.unwrap().as_ref())) {
            return kills;
        }
        fleet.kill("hub").unwrap();
        kills += 1;
        common::start_hub(fleet).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "not done within {:?} ({kills} crashes)",
            3 * TIMEOUT
        );
    }
}

#[tokio::test]
async fn a_hub_crashing_again_and_again_neither_repeats_nor_loses_an_update_or_a_rollback() {
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("au-crash").unwrap();
    let image = |tag: &str| repo.image(tag);
    let empty = || json!([]);
    let r = Rollout::new(fleet, "auk", &image("1.0.0"), [empty(), empty(), empty()]).await;
    repo.push(&["1.0.0", "1.1.0"]).unwrap();
    r.run_to_success("v1", 0).await;
    let name = format!("{}-p", r.id);
    track_policy(&r, &name, &["1.1.0", "1.2.0"]);
    let policies: Api<AutoUpdatePolicy> = Api::all(r.hub.clone());
    policies
        .create(
            &PostParams::default(),
            &policy(&name, &r, json!({"maxRollbacks": 3})),
        )
        .await
        .unwrap();

    // A good version, with the hub crashing throughout.
    let kills = crash_until(fleet, &policies, &name, |s| {
        s.current_version.as_deref() == Some("1.1.0") && s.in_flight.is_none()
    })
    .await;
    // A broken one, rolled back with the hub crashing throughout.
    let _unready = fleet.simulate_unready(&image("1.2.0")).unwrap();
    repo.push(&["1.2.0"]).unwrap();
    let more = crash_until(fleet, &policies, &name, |s| {
        s.failed_versions == ["1.2.0"] && s.in_flight.is_none()
    })
    .await;
    assert!(kills + more >= 5, "only {} crashes", kills + more);

    // Exactly one run per step, one history entry per version, one rollback counted.
    let s = status(Some(&policies.get(&name).await.unwrap()));
    assert_eq!(s.rollback_count, 1, "{s:?}");
    assert!(!s.circuit_open);
    let outcomes: Vec<(String, VersionOutcome)> = s
        .history
        .iter()
        .map(|h| (h.version.clone(), h.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("1.1.0".to_string(), VersionOutcome::Healthy),
            ("1.2.0".to_string(), VersionOutcome::RolledBack)
        ]
    );
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let mut ours: Vec<String> = runs
        .list(&kube::api::ListParams::default().labels(&format!(
            "{}={name}",
            fleethub_crds::auto_update::POLICY_LABEL
        )))
        .await
        .unwrap()
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .collect();
    ours.sort();
    assert_eq!(
        ours,
        [
            format!("{name}-1-1-0"),
            format!("{name}-1-2-0"),
            format!("{name}-1-2-0-rollback")
        ]
    );
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.1.0")).await;
    }
}
