//! A run facing a fleet that changes under it, on the real hub: its placement deleted, clusters
//! leaving and joining, a member down at its turn, an approval request deleted after it counted;
//! and runs written the KubeFleet way (a plan first, no index, the reference approval patch
//! without observedGeneration). Members are stand-ins (`simulate_members`): this checks the hub.

mod common;

use common::{Scenario, TIMEOUT, approve, kubectl, simulate_members, succeeded};
use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::run_progress::{ClusterPhase, RunProgress};
use fleethub_crds::update_run::{CLUSTER_SKIPPED, PROGRESSING, SUCCEEDED};
use fleethub_crds::{ApprovalRequest, Binding, MemberCluster, UpdateRun, names};
use fleethub_testkit::{Fleet, wait_deleted, wait_for};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

fn progressing_reason(run: Option<&UpdateRun>, reason: &str) -> bool {
    run.and_then(|r| r.status.as_ref())
        .and_then(|s| find(&s.conditions, PROGRESSING))
        .is_some_and(|c| c.reason == reason)
}

fn skipped_reason(run: &UpdateRun, cluster: &str) -> Option<String> {
    run.status
        .as_ref()?
        .stages_status
        .iter()
        .flat_map(|s| &s.clusters)
        .find(|c| c.cluster_name == cluster)
        .and_then(|c| find(&c.conditions, CLUSTER_SKIPPED))
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

/// Sets `member`'s last heartbeat `age_secs` ago (with a ten-minute period when fresh), so the
/// hub judges it healthy or down as a silent agent would make it.
async fn heartbeat(s: &Scenario, member: &str, age_secs: i64, period_secs: i64) {
    let members: Api<MemberCluster> = Api::all(s.hub.clone());
    members
        .patch(
            member,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"heartbeatPeriodSeconds": period_secs}})),
        )
        .await
        .unwrap();
    let at = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(age_secs);
    members
        .patch_status(
            member,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"lastHeartbeatTime": at.to_string()}})),
        )
        .await
        .unwrap();
}

/// Sets the run's `spec.state` with the real kubectl, as a person does.
fn set_state(fleet: &Fleet, run: &str, state: &str) {
    let patch = format!(r#"{{"spec":{{"state":"{state}"}}}}"#);
    kubectl(
        fleet,
        &["patch", "updaterun", run, "--type=merge", "-p", &patch],
    );
}

/// The state of `cluster`'s Binding of the scenario's placement.
async fn binding_state(s: &Scenario, cluster: &str) -> BindingState {
    Api::<Binding>::all(s.hub.clone())
        .get(&names::binding_name(&s.placement, cluster))
        .await
        .unwrap()
        .spec
        .state
}

fn healthy_is(status: &'static str) -> impl Fn(Option<&MemberCluster>) -> bool {
    move |m: Option<&MemberCluster>| {
        m.and_then(|m| m.status.as_ref())
            .and_then(|s| find(&s.conditions, "Healthy"))
            .is_some_and(|c| c.status == status)
    }
}

#[tokio::test]
async fn a_deleted_placement_ends_its_run_and_its_bindings_stay_gone() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "pd").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    s.placement(&[&stg, &prod], false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
    let (_, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    wait_for(
        &runs,
        &s.run,
        "the run to wait for the staging approval",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing_reason(r, "UpdateRunWaiting"),
    )
    .await
    .unwrap();

    kubectl(
        fleet,
        &["delete", "placement", &s.placement, "--wait=false"],
    );
    let ended = wait_for(
        &runs,
        &s.run,
        "the run to end with PlacementDeleted",
        TIMEOUT,
        common::ended,
    )
    .await
    .unwrap();
    let done = find(&ended.status.as_ref().unwrap().conditions, SUCCEEDED).unwrap();
    assert_eq!(
        (done.status.as_str(), done.reason.as_str()),
        ("False", "PlacementDeleted"),
        "{}",
        done.message
    );
    assert!(done.message.contains("was deleted"), "{}", done.message);
    // The bindings go with the placement, and the ended run writes none again.
    let bindings: Api<Binding> = Api::all(s.hub.clone());
    for c in [&stg, &prod] {
        wait_deleted(&bindings, &names::binding_name(&s.placement, c), TIMEOUT)
            .await
            .unwrap();
    }
    let approvals: Api<ApprovalRequest> = Api::all(s.hub.clone());
    // Approving now moves nothing: the run is over.
    let _ = approve(&approvals, &format!("{}-staging", s.run)).await;
    let again = runs.get(&s.run).await.unwrap();
    assert_eq!(again.status, ended.status);
    for c in [&stg, &prod] {
        assert!(
            bindings
                .get_opt(&names::binding_name(&s.placement, c))
                .await
                .unwrap()
                .is_none(),
            "{c}'s binding came back"
        );
    }
    members.abort();
}

#[tokio::test]
async fn clusters_that_leave_are_skipped_and_clusters_that_join_wait_for_the_next_run() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "lj").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let can = s.member("can", json!({"env": s.env("canary")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    let late = s.member("late", json!({"env": s.env("production")})).await;
    s.placement(&[&stg, &can, &prod], false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": s.env("canary")}}},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    wait_for(
        &runs,
        &s.run,
        "the run to wait for the staging approval",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing_reason(r, "UpdateRunWaiting"),
    )
    .await
    .unwrap();

    // While staging waits: canary leaves the placement, late joins it.
    s.pick(&[&stg, &prod, &late]).await;
    let bindings: Api<Binding> = Api::all(s.hub.clone());
    wait_for(
        &bindings,
        &names::binding_name(&s.placement, &can),
        "canary's binding to be Unscheduled",
        TIMEOUT,
        |b: Option<&Binding>| b.is_some_and(|b| b.spec.state == BindingState::Unscheduled),
    )
    .await
    .unwrap();
    let counted = wait_for(
        &runs,
        &s.run,
        "the run to count the cluster that joined and skip the one that left",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.is_some_and(|r| {
                skipped_reason(r, &can).is_some()
                    && r.status
                        .as_ref()
                        .and_then(|s| s.clusters_not_in_run.as_ref())
                        .is_some_and(|n| n.count == 1)
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(
        skipped_reason(&counted, &can).as_deref(),
        Some("ClusterUnselected")
    );
    let notice = RunProgress::new(&counted, &[]).not_in_run_notice().unwrap();
    assert!(
        notice.contains(&format!(
            "1 cluster joined Placement {} after this run started ({late})",
            s.placement
        )),
        "{notice}"
    );
    let shown = kubectl(fleet, &["get", "updaterun", &s.run, "-o", "wide"]);
    assert!(shown.contains("NOT-IN-RUN"), "{shown}");

    let approvals: Api<ApprovalRequest> = Api::all(s.hub.clone());
    approve(&approvals, &format!("{}-staging", s.run))
        .await
        .unwrap();
    let done = wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    assert_eq!(
        common::clusters_in_order(&updates),
        [stg.clone(), prod.clone()]
    );
    assert_ne!(
        binding_state(&s, &can).await,
        BindingState::Bound,
        "canary was bound after it left"
    );
    assert_eq!(
        binding_state(&s, &late).await,
        BindingState::Scheduled,
        "late is not this run's"
    );
    let message = &find(&done.status.as_ref().unwrap().conditions, SUCCEEDED)
        .unwrap()
        .message;
    assert!(
        message.contains(&format!("skipped {can} (ClusterUnselected)")),
        "{message}"
    );
    members.abort();
}

#[tokio::test]
async fn a_member_down_at_its_turn_holds_the_stage_or_is_passed_over_within_the_budget() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "uh").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let prod1 = s
        .member("prod1", json!({"env": s.env("production"), "order": "1"}))
        .await;
    let prod2 = s
        .member("prod2", json!({"env": s.env("production"), "order": "2"}))
        .await;
    s.placement(&[&stg, &prod1, &prod2], false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}}},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}},
         "sortingLabelKey": "order", "maxFailedClusters": 1}]))
        .await;
    let members_api: Api<MemberCluster> = Api::all(s.hub.clone());
    // staging's member and prod1's are down (their agents stopped heartbeating).
    for m in [&stg, &prod1] {
        heartbeat(&s, m, 600, 5).await;
        wait_for(
            &members_api,
            m,
            "the member to be down",
            TIMEOUT,
            healthy_is("False"),
        )
        .await
        .unwrap();
    }
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    let held = wait_for(
        &runs,
        &s.run,
        "the run to wait for staging's member",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing_reason(r, "WaitingForHealthyMember"),
    )
    .await
    .unwrap();
    let message = &find(&held.status.as_ref().unwrap().conditions, PROGRESSING)
        .unwrap()
        .message;
    assert!(
        message.contains(&format!(
            "waiting for MemberCluster {stg} to become healthy before updating it"
        )),
        "{message}"
    );
    assert!(common::clusters_in_order(&updates).is_empty());

    // staging's agent comes back: the run goes on by itself. In production, prod1 is still
    // down and passed over (maxFailedClusters 1); prod2 is updated.
    heartbeat(&s, &stg, 0, 600).await;
    let done = wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    assert_eq!(
        common::clusters_in_order(&updates),
        [stg.clone(), prod2.clone()]
    );
    assert_eq!(
        skipped_reason(&done, &prod1).as_deref(),
        Some("MemberClusterUnhealthy")
    );
    let progress = RunProgress::new(&done, &[]);
    let skipped = progress.clusters().find(|c| c.name == prod1).unwrap();
    assert_eq!(skipped.phase, ClusterPhase::Skipped);
    members.abort();
}

#[tokio::test]
async fn a_recorded_approval_stands_when_its_request_is_deleted() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "ad").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "8s"}]}]))
        .await;
    let (_, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let request = format!("{}-staging", s.run);
    let approvals: Api<ApprovalRequest> = Api::all(s.hub.clone());
    wait_for(
        &approvals,
        &request,
        "the staging ApprovalRequest",
        TIMEOUT,
        |a: Option<&ApprovalRequest>| a.is_some(),
    )
    .await
    .unwrap();
    // The reference design's approval patch without observedGeneration, with the real kubectl.
    let patch = format!(
        r#"{{"status":{{"conditions":[{{"type":"Approved","status":"True","reason":"lgtm","message":"lgtm","lastTransitionTime":"{}"}}]}}}}"#,
        jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")
    );
    kubectl(
        fleet,
        &[
            "patch",
            "approvalrequests",
            &request,
            "--type=merge",
            "-p",
            &patch,
            "--subresource=status",
        ],
    );
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    wait_for(
        &runs,
        &s.run,
        "the run to record the approval",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| s.stages_status.first())
                .and_then(|s| s.after_stage_task_status.first())
                .is_some_and(|t| is_true(&t.conditions, "ApprovalRequestApproved"))
        },
    )
    .await
    .unwrap();
    // Deleted while the soak still runs: the approval counts, nobody is asked again.
    kubectl(fleet, &["delete", "approvalrequest", &request]);
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    assert!(
        approvals.get_opt(&request).await.unwrap().is_none(),
        "the request was created again"
    );
    members.abort();
}

#[tokio::test]
async fn a_run_planned_first_without_an_index_rolls_out_the_latest_snapshot_when_set_to_run() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "pl").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    s.placement(&[&stg, &prod], false).await;
    s.set_version("2").await;
    s.wait_snapshot(1).await;
    // KubeFleet's way: a gate-only stage without labelSelector, Go durations.
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1.5s"}]},
        {"name": "sign-off"},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 1);
    s.create(
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": s.run},
        "spec": {"placementName": s.placement, "stagedRolloutStrategyName": s.strategy,
                 "state": "Initialize"}}),
    )
    .await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    let planned = wait_for(
        &runs,
        &s.run,
        "the run to be planned",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing_reason(r, "UpdateRunNotStarted"),
    )
    .await
    .unwrap();
    let status = planned.status.clone().unwrap();
    assert_eq!(status.resource_snapshot_index_used.as_deref(), Some("1"));
    let plan: Vec<(String, Vec<String>)> = status
        .stages_status
        .iter()
        .map(|st| {
            (
                st.stage_name.clone(),
                st.clusters.iter().map(|c| c.cluster_name.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        plan,
        [
            ("staging".to_string(), vec![stg.clone()]),
            ("sign-off".to_string(), vec![]),
            ("production".to_string(), vec![prod.clone()]),
        ]
    );
    let shown = kubectl(fleet, &["get", "updaterun", &s.run]);
    assert!(
        shown.lines().nth(1).is_some_and(|l| l.contains(" 1 ")),
        "{shown}"
    );
    // A newer snapshot appears before the run is started: the run keeps the one it recorded.
    s.set_version("3").await;
    s.wait_snapshot(2).await;
    let bindings: Api<Binding> = Api::all(s.hub.clone());
    for c in [&stg, &prod] {
        assert_eq!(
            binding_state(&s, c).await,
            BindingState::Scheduled,
            "{c} bound by a plan"
        );
    }
    set_state(fleet, &s.run, "Run");
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    assert_eq!(
        common::clusters_in_order(&updates),
        [stg.clone(), prod.clone()]
    );
    for c in [&stg, &prod] {
        let b = bindings
            .get(&names::binding_name(&s.placement, c))
            .await
            .unwrap();
        assert_eq!(b.spec.resource_snapshot_index, Some(1), "{c}");
    }
    members.abort();
}

#[tokio::test]
async fn a_cluster_that_leaves_while_updating_is_not_started_again_and_a_stop_waits_for_the_rest() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "ls").await;
    let a = s.member("a", json!({"env": s.env("first")})).await;
    let b = s.member("b", json!({"env": s.env("first")})).await;
    let c = s.member("c", json!({"env": s.env("second")})).await;
    s.placement(&[&a, &b, &c], false).await;
    s.strategy(json!([
        {"name": "first", "labelSelector": {"matchLabels": {"env": s.env("first")}}, "maxConcurrency": 2},
        {"name": "second", "labelSelector": {"matchLabels": {"env": s.env("second")}}}]))
        .await;
    // No member reports yet: a and b stay in flight.
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    let bindings: Api<Binding> = Api::all(s.hub.clone());
    for m in [&a, &b] {
        wait_for(
            &bindings,
            &names::binding_name(&s.placement, m),
            "the cluster to be bound",
            TIMEOUT,
            |b: Option<&Binding>| b.is_some_and(|b| b.spec.state == BindingState::Bound),
        )
        .await
        .unwrap();
    }
    // b leaves while it updates: the run records it and does not start it again.
    s.pick(&[&a, &c]).await;
    wait_for(
        &runs,
        &s.run,
        "the run to skip b",
        TIMEOUT,
        |r: Option<&UpdateRun>| r.is_some_and(|r| skipped_reason(r, &b).is_some()),
    )
    .await
    .unwrap();
    // Stopped while a still updates: Stopping, naming it.
    set_state(fleet, &s.run, "Stop");
    let stopping = wait_for(
        &runs,
        &s.run,
        "the run to be stopping",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing_reason(r, "UpdateRunStopping"),
    )
    .await
    .unwrap();
    let message = &find(&stopping.status.as_ref().unwrap().conditions, PROGRESSING)
        .unwrap()
        .message;
    assert!(
        message.contains(&format!("already updating to finish ({a})")),
        "{message}"
    );
    // The members report: a finishes, the run is Stopped, c has not started.
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    wait_for(
        &runs,
        &s.run,
        "the run to be stopped",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing_reason(r, "UpdateRunStopped"),
    )
    .await
    .unwrap();
    assert_eq!(binding_state(&s, &c).await, BindingState::Scheduled);
    set_state(fleet, &s.run, "Run");
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    let seen = common::clusters_in_order(&updates);
    assert!(seen.contains(&a) && seen.contains(&c), "{seen:?}");
    assert_ne!(
        binding_state(&s, &b).await,
        BindingState::Bound,
        "b was bound again after it left"
    );
    members.abort();
}
