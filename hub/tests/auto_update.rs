//! Auto-update on the real fleet: the fleet's real OCI registry, the real hub, and the real
//! member agents of member-1..3. Tags pushed to the registry are rolled out stage by stage; a
//! version whose pods never become ready is rolled back everywhere it reached, marked failed
//! and never retried; with `maxRollbacks: 1` that opens the circuit, so a newer good version is
//! reported but not applied until a person resets it with `kubectl fleet autoupdate reset`.

mod common;

use std::time::Duration;

use common::real::{Rollout, assert_stage_order, image_of, wait_running};
use common::{TIMEOUT, kubectl};
use fleethub_crds::auto_update::{
    AutoUpdatePolicy, AutoUpdatePolicyStatus, CHECK_REQUESTED_ANNOTATION, CIRCUIT_OPEN, READY,
    RESET_REQUESTED_ANNOTATION, VersionOutcome, reason,
};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::{StagedUpdateStrategy, UpdateRun};
use fleethub_testkit::{Fleet, free_port, http_get, poll_until, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// Asks the policy's controller for a check or a reset the way a person does with kubectl
/// (what `kubectl fleet autoupdate check|reset` sets).
fn ask(fleet: &Fleet, name: &str, annotation: &str) {
    let value = format!("{annotation}={}", jiff::Timestamp::now().as_nanosecond());
    kubectl(
        fleet,
        &["annotate", "autoupdatepolicy", name, &value, "--overwrite"],
    );
}

fn policy(name: &str, r: &Rollout, extra: serde_json::Value) -> AutoUpdatePolicy {
    let mut spec = json!({
        "placementName": r.placement,
        "target": {"kind": "Deployment", "namespace": r.ns, "name": "web", "container": "web"},
        "schedule": "*/2 * * * * *",
        "versionConstraint": ">=1.0.0, <2",
        "stagedRolloutStrategyName": r.strategy,
        "healthTimeout": "15s",
        "maxRollbacks": 1,
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "AutoUpdatePolicy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

fn status(p: Option<&AutoUpdatePolicy>) -> AutoUpdatePolicyStatus {
    p.and_then(|p| p.status.clone()).unwrap_or_default()
}

/// Tracks what a policy creates (its runs are also owned by it).
fn track_policy(r: &Rollout, name: &str, versions: &[&str]) {
    r.cleanup.track::<AutoUpdatePolicy>("hub", None, name);
    r.cleanup
        .track::<StagedUpdateStrategy>("hub", None, &format!("{name}-rollback"));
    for v in versions {
        let v = v.replace('.', "-");
        r.cleanup
            .track::<UpdateRun>("hub", None, &format!("{name}-{v}"));
        r.cleanup
            .track::<UpdateRun>("hub", None, &format!("{name}-rollback-{v}"));
    }
}

#[tokio::test]
async fn registry_versions_roll_out_roll_back_and_open_the_circuit() {
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("au-web").unwrap();
    let image = |tag: &str| repo.image(tag);
    let empty = || json!([]);
    let r = Rollout::new(fleet, "au", &image("1.0.0"), [empty(), empty(), empty()]).await;
    repo.push(&["1.0.0", "1.1.0", "2.0.0", "latest"]).unwrap();
    r.run_to_success("v1", 0).await;
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.0.0")).await;
    }

    let name = format!("{}-p", r.id);
    track_policy(&r, &name, &["1.1.0", "1.2.0", "1.3.0"]);
    let policies: Api<AutoUpdatePolicy> = Api::all(r.hub.clone());
    policies
        .create(&PostParams::default(), &policy(&name, &r, json!({})))
        .await
        .unwrap();

    // 1.1.0 is the highest allowed (2.0.0 is outside the constraint, `latest` is no version).
    let p = wait_for(
        &policies,
        &name,
        "1.1.0 to roll out",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| {
            let s = status(p);
            s.current_version.as_deref() == Some("1.1.0") && s.in_flight.is_none()
        },
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    let healthy = s.history.last().unwrap();
    assert_eq!(healthy.outcome, VersionOutcome::Healthy);
    let run_name = healthy.update_run.clone().unwrap();
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    assert_stage_order(&runs.get(&run_name).await.unwrap());
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.1.0")).await;
    }

    // 1.2.0 never becomes ready: the run fails in staging, the version is rolled back on the
    // cluster it reached, marked failed, and the circuit opens (maxRollbacks 1).
    let _unready = fleet.simulate_unready(&image("1.2.0")).unwrap();
    repo.push(&["1.2.0"]).unwrap();
    let p = wait_for(
        &policies,
        &name,
        "1.2.0 to be rolled back",
        Duration::from_secs(240),
        |p: Option<&AutoUpdatePolicy>| {
            let s = status(p);
            s.failed_versions == ["1.2.0"] && s.in_flight.is_none()
        },
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    assert!(s.circuit_open, "{s:?}");
    assert_eq!(s.rollback_count, 1);
    assert_eq!(s.current_version.as_deref(), Some("1.1.0"));
    let c = find(&s.conditions, CIRCUIT_OPEN).unwrap();
    assert_eq!(c.reason, reason::TOO_MANY_ROLLBACKS, "{c:?}");
    let rolled_back = s
        .history
        .iter()
        .find(|h| h.version == "1.2.0")
        .expect("1.2.0 in the history");
    assert_eq!(rolled_back.outcome, VersionOutcome::RolledBack);
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.1.0")).await;
    }
    let hub_web: Api<Deployment> = Api::namespaced(r.hub.clone(), &r.ns);
    assert_eq!(
        image_of(&hub_web.get("web").await.unwrap()).as_deref(),
        Some(image("1.1.0").as_str()),
        "the previous image is back on the hub"
    );

    // A newer good version is found and reported, not applied, while the circuit is open.
    repo.push(&["1.3.0"]).unwrap();
    ask(fleet, &name, CHECK_REQUESTED_ANNOTATION);
    let p = wait_for(
        &policies,
        &name,
        "1.3.0 to be reported",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| status(p).available_version.as_deref() == Some("1.3.0"),
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    assert!(s.in_flight.is_none() && s.circuit_open);
    assert_eq!(s.current_version.as_deref(), Some("1.1.0"));
    assert!(
        find(&s.conditions, CIRCUIT_OPEN)
            .unwrap()
            .message
            .contains("1.3.0 available"),
        "{:?}",
        s.conditions
    );

    // A person resets the circuit: 1.3.0 rolls out; 1.2.0 is never retried.
    ask(fleet, &name, RESET_REQUESTED_ANNOTATION);
    let p = wait_for(
        &policies,
        &name,
        "1.3.0 to roll out after the reset",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| {
            let s = status(p);
            s.current_version.as_deref() == Some("1.3.0") && s.in_flight.is_none()
        },
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    assert!(!s.circuit_open);
    assert_eq!(s.rollback_count, 0);
    assert!(
        !s.history
            .iter()
            .any(|h| h.version == "1.2.0" && h.outcome == VersionOutcome::Healthy)
    );
    for i in 1..=3 {
        wait_running(fleet, i, &r.ns, &image("1.3.0")).await;
    }
    // The printer columns say it too.
    let listed = kubectl(fleet, &["get", "aup", &name]);
    assert!(listed.contains("1.3.0"), "{listed}");
}

#[tokio::test]
async fn an_unreachable_registry_and_a_pinned_image_change_nothing() {
    let fleet = Fleet::get().unwrap();
    let registry = fleet.registry().unwrap();
    let empty = || json!([]);
    let pinned = format!("{registry}/pinned@sha256:{}", "0".repeat(64));
    let r = Rollout::new(fleet, "aun", &pinned, [empty(), empty(), empty()]).await;
    let policies: Api<AutoUpdatePolicy> = Api::all(r.hub.clone());

    // Digest-pinned: never touched, and the condition says so.
    let name = format!("{}-pin", r.id);
    track_policy(&r, &name, &[]);
    policies
        .create(&PostParams::default(), &policy(&name, &r, json!({})))
        .await
        .unwrap();
    wait_for(
        &policies,
        &name,
        "the pinned image to be refused",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| {
            find(&status(p).conditions, READY).is_some_and(|c| c.reason == reason::DIGEST_PINNED)
        },
    )
    .await
    .unwrap();
    policies.delete(&name, &Default::default()).await.unwrap();

    // A registry nobody listens on: a condition naming it, no update; then the real one.
    let repo = fleet.registry_repo("au-unreach").unwrap();
    r.set_image(&repo.image("1.0.0"), false).await;
    let nowhere = format!("127.0.0.1:{}/{}", free_port().unwrap(), repo.name());
    let name = format!("{}-down", r.id);
    track_policy(&r, &name, &["1.1.0"]);
    policies
        .create(
            &PostParams::default(),
            &policy(&name, &r, json!({"repository": nowhere})),
        )
        .await
        .unwrap();
    let p = wait_for(
        &policies,
        &name,
        "a registry error",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| {
            find(&status(p).conditions, READY).is_some_and(|c| c.reason == reason::REGISTRY_ERROR)
        },
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    let message = &find(&s.conditions, READY).unwrap().message;
    assert!(message.contains(&nowhere), "{message}");
    assert!(s.in_flight.is_none() && s.available_version.is_none());

    // The registry is reachable again (the spec points at the real one): it recovers.
    repo.push(&["1.0.0"]).unwrap();
    let patch = json!({"spec": {"repository": repo.reference()}});
    policies
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    wait_for(
        &policies,
        &name,
        "the policy to recover",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| is_true(&status(p).conditions, READY),
    )
    .await
    .unwrap();
}

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
        fleet.start_fleethub().unwrap();
        poll_until("the restarted hub to lead", TIMEOUT, || async {
            let (_, metrics) = http_get(fleet.hub_health_addr(), "/metrics").await.ok()?;
            metrics
                .lines()
                .any(|l| l == "fleethub_hub_leader 1")
                .then_some(())
        })
        .await
        .unwrap();
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
            format!("{name}-rollback-1-2-0")
        ]
    );
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.1.0")).await;
    }
}
