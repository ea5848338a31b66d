//! Auto-update on the real fleet: the fleet's real OCI registry, the real hub, and the real
//! member agents of member-1..3. Tags pushed to the registry are rolled out stage by stage; a
//! version whose pods never become ready is rolled back everywhere it reached, marked failed
//! and never retried; with `maxRollbacks: 1` that opens the circuit, so a newer good version is
//! reported but not applied until a person resets it (the annotation `kubectl fleet autoupdate
//! reset` and the dashboard set). A version that turns available everywhere and regresses
//! during its run's bake is rolled back the same way: healthy only once the bake is over.

mod common;

use std::time::Duration;

use common::auto_update::{ONE_AT_A_TIME, ask, policy, status, track_policy};
use common::real::{Rollout, assert_stage_order, image_of, wait_running};
use common::{TIMEOUT, kubectl};
use fleethub_crds::UpdateRun;
use fleethub_crds::auto_update::{
    AutoUpdatePolicy, CHECK_REQUESTED_ANNOTATION, CIRCUIT_OPEN, READY, RESET_REQUESTED_ANNOTATION,
    RETRY_REQUESTED_ANNOTATION, VersionOutcome, reason,
};
use fleethub_crds::conditions::{find, is_true};
use fleethub_testkit::{Fleet, free_port, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test]
async fn registry_versions_roll_out_roll_back_and_open_the_circuit() {
    let _one = ONE_AT_A_TIME.lock().await;
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
    // The failed run rolled itself back (`onFailure: Rollback`): one mechanism, whatever started
    // the run; the policy followed the rollback run the failed run named.
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let failed = runs.get(&format!("{name}-1-2-0")).await.unwrap();
    let rollback = format!("{name}-1-2-0-rollback");
    assert_eq!(
        failed
            .status
            .as_ref()
            .and_then(|s| s.rollback_run.as_deref()),
        Some(rollback.as_str())
    );
    let rollback = runs.get(&rollback).await.unwrap();
    assert_eq!(
        rollback.spec.rollback.as_ref().map(|r| r.of.as_str()),
        Some(format!("{name}-1-2-0").as_str())
    );
    assert!(
        rollback
            .labels()
            .contains_key(fleethub_crds::auto_update::POLICY_LABEL)
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

    // A person forgets the failed 1.2.0 (what `kubectl fleet autoupdate retry` asks): it leaves
    // failedVersions, the history records it, and, older than 1.3.0, it is not picked.
    let value = format!(
        "{RETRY_REQUESTED_ANNOTATION}=1.2.0@{}",
        jiff::Timestamp::now().as_nanosecond()
    );
    kubectl(
        fleet,
        &["annotate", "autoupdatepolicy", &name, &value, "--overwrite"],
    );
    let p = wait_for(
        &policies,
        &name,
        "1.2.0 to be forgotten",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| status(p).failed_versions.is_empty(),
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    assert!(
        s.history
            .iter()
            .any(|h| h.version == "1.2.0" && h.outcome == VersionOutcome::RetryAllowed),
        "{:?}",
        s.history
    );
    assert_eq!(s.current_version.as_deref(), Some("1.3.0"));
    assert!(s.in_flight.is_none());
}

#[tokio::test]
async fn an_unreachable_registry_and_a_pinned_image_change_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
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

#[tokio::test]
async fn a_version_that_regresses_during_its_bake_is_rolled_back_and_never_picked_again() {
    let _one = ONE_AT_A_TIME.lock().await;
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("au-bake").unwrap();
    let image = |tag: &str| repo.image(tag);
    let empty = || json!([]);
    let r = Rollout::new(fleet, "aub", &image("1.0.0"), [empty(), empty(), empty()]).await;
    repo.push(&["1.0.0"]).unwrap();
    r.run_to_success("v1", 0).await;
    // From now on the strategy's runs bake an hour after their last stage.
    kubectl(
        fleet,
        &[
            "patch",
            "stagedupdatestrategy",
            &r.strategy,
            "--type=merge",
            "-p",
            r#"{"spec":{"bake":"1h"}}"#,
        ],
    );
    let name = format!("{}-p", r.id);
    track_policy(&r, &name, &["1.1.0"]);
    let policies: Api<AutoUpdatePolicy> = Api::all(r.hub.clone());
    policies
        .create(&PostParams::default(), &policy(&name, &r, json!({})))
        .await
        .unwrap();
    repo.push(&["1.1.0"]).unwrap();

    // 1.1.0 reaches every member and bakes: not healthy yet.
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let run = format!("{name}-1-1-0");
    wait_for(
        &runs,
        &run,
        "the run to bake",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, "Progressing"))
                .is_some_and(|c| c.reason == fleethub_crds::update_run::reason::BAKING)
        },
    )
    .await
    .unwrap();
    let baking = status(policies.get_opt(&name).await.unwrap().as_ref());
    assert_eq!(
        baking.current_version.as_deref(),
        Some("1.0.0"),
        "{baking:?}"
    );

    // member-1 loses its 1.1.0 pods for good (their replacements never turn ready): past the
    // policy's 15 s health timeout the run fails, and the version is rolled back and failed.
    let _unready = fleet.simulate_unready(&image("1.1.0")).unwrap();
    common::kubectl_on(
        fleet,
        "member-1",
        &["-n", &r.ns, "delete", "pods", "--all", "--wait=false"],
    );
    let p = wait_for(
        &policies,
        &name,
        "1.1.0 to be rolled back",
        Duration::from_secs(240),
        |p: Option<&AutoUpdatePolicy>| {
            let s = status(p);
            s.failed_versions == ["1.1.0"] && s.in_flight.is_none()
        },
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    assert_eq!(s.current_version.as_deref(), Some("1.0.0"));
    assert!(
        s.history
            .iter()
            .any(|h| h.version == "1.1.0" && h.outcome == VersionOutcome::RolledBack),
        "{:?}",
        s.history
    );
    assert!(
        !s.history
            .iter()
            .any(|h| h.version == "1.1.0" && h.outcome == VersionOutcome::Healthy)
    );
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.0.0")).await;
    }
}

#[tokio::test]
async fn a_freeze_holds_a_new_version_until_it_is_lifted() {
    let _one = ONE_AT_A_TIME.lock().await;
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("au-freeze").unwrap();
    let image = |tag: &str| repo.image(tag);
    let empty = || json!([]);
    let r = Rollout::new(fleet, "auf", &image("1.0.0"), [empty(), empty(), empty()]).await;
    repo.push(&["1.0.0"]).unwrap();
    r.run_to_success("v1", 0).await;
    // A freeze of this placement (as `kubectl fleet freeze --placement` makes it).
    let freeze = format!("{}-freeze", r.id);
    r.cleanup
        .track::<fleethub_crds::Freeze>("hub", None, &freeze);
    let freezes: Api<fleethub_crds::Freeze> = Api::all(r.hub.clone());
    freezes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "fleethub.dev/v1alpha1", "kind": "Freeze",
                "metadata": {"name": freeze},
                "spec": {"reason": "release freeze", "placements": [r.placement]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let name = format!("{}-p", r.id);
    track_policy(&r, &name, &["1.1.0"]);
    let policies: Api<AutoUpdatePolicy> = Api::all(r.hub.clone());
    policies
        .create(&PostParams::default(), &policy(&name, &r, json!({})))
        .await
        .unwrap();
    repo.push(&["1.1.0"]).unwrap();

    // 1.1.0 is found and held: the condition names the freeze, nothing is applied.
    let p = wait_for(
        &policies,
        &name,
        "1.1.0 to be held by the freeze",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| {
            find(&status(p).conditions, "Updating").is_some_and(|c| c.reason == reason::FROZEN)
        },
    )
    .await
    .unwrap();
    let s = p.status.unwrap();
    assert!(s.in_flight.is_none(), "{s:?}");
    assert_eq!(s.available_version.as_deref(), Some("1.1.0"));
    let message = &find(&s.conditions, "Updating").unwrap().message;
    assert!(
        message.contains(&format!("(freeze {freeze}): release freeze")),
        "{message}"
    );
    let hub_web: Api<Deployment> = Api::namespaced(r.hub.clone(), &r.ns);
    assert_eq!(
        image_of(&hub_web.get("web").await.unwrap()).as_deref(),
        Some(image("1.0.0").as_str()),
        "nothing applied while frozen"
    );

    // Lifted: 1.1.0 rolls out.
    freezes.delete(&freeze, &Default::default()).await.unwrap();
    wait_for(
        &policies,
        &name,
        "1.1.0 to roll out once the freeze is lifted",
        TIMEOUT,
        |p: Option<&AutoUpdatePolicy>| {
            let s = status(p);
            s.current_version.as_deref() == Some("1.1.0") && s.in_flight.is_none()
        },
    )
    .await
    .unwrap();
    for i in 1..=3 {
        r.wait_running(fleet, i, &image("1.1.0")).await;
    }
}
