//! A frozen run facing a changed fleet: its placement deleted, clusters leaving, joining or
//! unhealthy at their turn, an approval request deleted; and the run states KubeFleet users
//! bring (Initialize, an omitted index, Stopping).

use super::*;
use fleethub_crds::update_run::{CLUSTER_SKIPPED, reason};

fn cluster_status<'a>(
    p: &'a Plan,
    stage: usize,
    name: &str,
) -> &'a fleethub_crds::update_run::ClusterUpdatingStatus {
    p.status.stages_status[stage]
        .clusters
        .iter()
        .find(|c| c.cluster_name == name)
        .unwrap()
}

fn skip_reason(p: &Plan, stage: usize, name: &str) -> Option<String> {
    find(&cluster_status(p, stage, name).conditions, CLUSTER_SKIPPED)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

fn binding_mut<'a>(w: &'a mut World, cluster: &str) -> &'a mut BindingView {
    w.bindings
        .iter_mut()
        .find(|b| b.cluster == cluster)
        .unwrap()
}

/// Staging done and its soak over: the run is in canary.
fn to_canary(w: &mut World) {
    w.step();
    w.member_ready("stage-a");
    w.step();
    w.now = t(60);
}

#[test]
fn a_deleted_placement_ends_the_run_and_binds_nothing_more() {
    let mut w = World::new();
    w.step();
    w.placement_deleted = true;
    w.member_ready("stage-a");
    w.now = t(100);
    let p = w.step();
    let (status, why, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", "PlacementDeleted")
    );
    assert!(message.contains("Placement web was deleted"), "{message}");
    assert!(binds(&p).is_empty());
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.reason == "PlacementDeleted")
    );
    // Over: nothing more is planned.
    let p = w.step();
    assert!(p.actions.is_empty() && p.events.is_empty());
}

#[test]
fn a_cluster_that_leaves_before_its_turn_is_skipped_and_never_bound() {
    let mut w = World::new();
    w.step();
    binding_mut(&mut w, "canary-a").state = BindingState::Unscheduled;
    let p = w.step();
    assert_eq!(
        skip_reason(&p, 1, "canary-a").as_deref(),
        Some("ClusterUnselected")
    );
    let message = &find(
        &cluster_status(&p, 1, "canary-a").conditions,
        CLUSTER_SKIPPED,
    )
    .unwrap()
    .message;
    assert!(
        message.contains("left Placement web before its turn"),
        "{message}"
    );
    assert!(p.events.iter().any(|e| e.reason == "ClusterUnselected"));
    // Canary has nothing left to update: its approval gate is next, and canary-a is never bound.
    w.member_ready("stage-a");
    w.step();
    w.now = t(60);
    let p = w.step();
    assert!(binds(&p).is_empty());
    assert!(p.actions.contains(&Action::CreateApproval {
        name: "rollout-canary".into(),
        stage: "canary".into(),
        policy: None,
        index: Some("2".into()),
    }));
    assert!(!w.works.contains_key("canary-a"));
}

#[test]
fn a_cluster_that_leaves_while_updating_keeps_its_outcome_and_is_not_started_again() {
    let mut w = World::new();
    w.step();
    // stage-a's binding is deleted (its MemberCluster left) while it updates.
    w.bindings.retain(|b| b.cluster != "stage-a");
    let p = w.step();
    assert_eq!(
        skip_reason(&p, 0, "stage-a").as_deref(),
        Some("ClusterUnselected")
    );
    assert!(
        binds(&p).is_empty(),
        "a deleted binding is never written again"
    );
    // The stage's clusters are done: its soak runs, then canary starts.
    w.now = t(100);
    let p = w.step();
    assert_eq!(binds(&p), ["canary-a"]);
}

#[test]
fn a_failed_cluster_that_leaves_no_longer_blocks_the_run() {
    let mut w = World::new();
    w.step();
    w.member_apply_failed("stage-a", "denied");
    assert_eq!(
        run_condition(&w.step(), PROGRESSING).1,
        "ClusterUpdateFailed"
    );
    binding_mut(&mut w, "stage-a").state = BindingState::Unscheduled;
    let p = w.step();
    assert_eq!(
        skip_reason(&p, 0, "stage-a").as_deref(),
        Some("ClusterUnselected")
    );
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunWaiting");
}

#[test]
fn clusters_that_join_mid_run_are_counted_and_left_to_the_next_run() {
    let mut w = World::new();
    w.step();
    w.cluster("stage-new", &[("env", "staging")]);
    w.cluster("prod-new", &[("env", "production")]);
    let p = w.step();
    let outside = p.status.clusters_not_in_run.clone().unwrap();
    assert_eq!(outside.count, 2);
    assert_eq!(outside.names, ["prod-new", "stage-new"]);
    assert_eq!(w.stage_clusters(0), ["stage-a"], "the plan stays frozen");
    // The run finishes without them.
    let mut seen = Vec::new();
    for step in 0..100 {
        let p = w.step();
        seen.extend(binds(&p).iter().map(|s| s.to_string()));
        for c in w.works.keys().cloned().collect::<Vec<_>>() {
            w.member_ready(&c);
        }
        for a in w.approvals.values_mut() {
            a.approved = true;
        }
        w.now = t(60 * (step + 1));
        if find(&p.status.conditions, SUCCEEDED).is_some() {
            break;
        }
    }
    assert!(is_true(&w.status().conditions, SUCCEEDED));
    assert!(!seen.iter().any(|c| c.ends_with("-new")), "{seen:?}");
}

#[test]
fn a_deleted_approval_request_keeps_a_recorded_approval() {
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}},
         "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "10m"}]}
    ]}));
    w.bindings.retain(|b| b.cluster == "stage-a");
    w.step();
    w.member_ready("stage-a");
    w.step();
    w.approve("rollout-staging");
    let p = w.step();
    let task = &p.status.stages_status[0].after_stage_task_status[0];
    assert!(is_true(&task.conditions, "ApprovalRequestApproved"));
    // Someone deletes the request while the soak still runs.
    w.approvals.clear();
    w.now = t(300);
    let p = w.step();
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::CreateApproval { .. })),
        "not asked again: {:?}",
        p.actions
    );
    assert!(is_true(
        &p.status.stages_status[0].after_stage_task_status[0].conditions,
        "ApprovalRequestApproved"
    ));
    w.now = t(601);
    w.step();
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "True");
}

#[test]
fn an_unhealthy_member_at_its_turn_holds_the_stage_until_it_recovers() {
    let mut w = World::new();
    w.unhealthy
        .insert("canary-a".into(), "no heartbeat for 40s".into());
    to_canary(&mut w);
    let p = w.step();
    assert!(binds(&p).is_empty());
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", "WaitingForHealthyMember")
    );
    assert!(
        message.contains("waiting for MemberCluster canary-a to become healthy before updating it (no heartbeat for 40s)"),
        "{message}"
    );
    w.now = t(10_000);
    assert!(
        binds(&w.step()).is_empty(),
        "no health timeout for a cluster not started"
    );
    w.unhealthy.clear();
    assert_eq!(binds(&w.step()), ["canary-a"]);
}

#[test]
fn max_failed_clusters_passes_over_an_unhealthy_member_and_tolerates_failures_up_to_the_budget() {
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "sortingLabelKey": "order", "maxFailedClusters": 2}
    ]}));
    w.bindings.retain(|b| b.cluster.starts_with("prod"));
    w.unhealthy.insert("prod-c".into(), "no heartbeat".into());
    // prod-c (order 1) is passed over; prod-a starts.
    let p = w.step();
    assert_eq!(
        skip_reason(&p, 0, "prod-c").as_deref(),
        Some("MemberClusterUnhealthy")
    );
    assert_eq!(binds(&p), ["prod-a"]);
    // prod-a fails: the second of two allowed; prod-b goes on.
    w.member_apply_failed("prod-a", "denied");
    let p = w.step();
    assert_eq!(binds(&p), ["prod-b"]);
    assert_eq!(run_condition(&p, PROGRESSING).0, "True");
    // prod-b fails too: past the budget, the run stops and says so.
    w.member_apply_failed("prod-b", "denied");
    let p = w.step();
    let (_, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(why, "ClusterUpdateFailed");
    assert!(
        message.contains(
            "3 clusters failed or were passed over, more than the stage's maxFailedClusters 2"
        ),
        "{message}"
    );
    assert!(binds(&p).is_empty());
    // prod-b recovers: within the budget again, the last cluster starts and the run ends
    // saying what it passed over.
    w.member_ready("prod-b");
    assert_eq!(binds(&w.step()), ["prod-z"]);
    w.member_ready("prod-z");
    w.step();
    let p = w.step();
    let (status, _, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(status, "True");
    assert!(
        message.contains("except: skipped prod-c (MemberClusterUnhealthy); failed within maxFailedClusters: prod-a"),
        "{message}"
    );
}

#[test]
fn state_initialize_plans_without_starting_and_supersedes_no_one_until_run() {
    let mut w = World::new();
    w.run = run(Some(UpdateRunState::Initialize));
    w.earlier_runs = vec!["older".into()];
    let p = w.step();
    assert_eq!(run_condition(&p, INITIALIZED).0, "True");
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", "UpdateRunNotStarted")
    );
    assert!(message.contains("6 clusters in 3 stages"), "{message}");
    assert!(binds(&p).is_empty());
    assert_eq!(
        w.stage_clusters(2),
        ["prod-c", "prod-a", "prod-b", "prod-z"]
    );
    assert!(p.status.start_time.is_none(), "not started");
    // Only planned, it does not count as a run that supersedes the older one.
    assert!(!SiblingRun::of(&w.run).validated);
    // Set to Run: it waits for the older run to stop, then starts.
    w.run.spec.state = Some(UpdateRunState::Run);
    w.run.metadata.generation = Some(2);
    assert!(SiblingRun::of(&w.run).validated);
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).1, "WaitingForPreviousRun");
    assert!(binds(&p).is_empty());
    w.earlier_runs.clear();
    let p = w.step();
    assert_eq!(binds(&p), ["stage-a"]);
    assert!(p.status.start_time.is_some());
}

#[test]
fn an_omitted_index_is_the_latest_snapshot_when_first_seen_and_stays() {
    let mut w = World::new();
    w.run.spec.resource_snapshot_index = None;
    w.latest = Some(5);
    let p = w.step();
    assert_eq!(p.status.resource_snapshot_index_used.as_deref(), Some("5"));
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::Bind { index: 5, .. }))
    );
    w.latest = Some(6);
    w.member_ready("stage-a");
    w.step();
    w.now = t(60);
    assert!(
        w.step()
            .actions
            .iter()
            .any(|a| matches!(a, Action::Bind { index: 5, .. }))
    );
    // No snapshot at all: a final failure that says why.
    let mut w = World::new();
    w.run.spec.resource_snapshot_index = None;
    w.latest = None;
    let (_, why, message) = run_condition(&w.step(), INITIALIZED);
    assert_eq!(why, "ResourceSnapshotNotFound");
    assert!(
        message.contains("spec.resourceSnapshotIndex is omitted"),
        "{message}"
    );
}

#[test]
fn a_stopped_run_is_stopping_while_its_clusters_finish_then_stopped() {
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "sortingLabelKey": "order", "maxConcurrency": 2}
    ]}));
    w.bindings.retain(|b| b.cluster.starts_with("prod"));
    w.step();
    w.run.spec.state = Some(UpdateRunState::Stop);
    let p = w.step();
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("True", "UpdateRunStopping")
    );
    assert!(
        message.contains("waiting for 2 already updating to finish (prod-c, prod-a)"),
        "{message}"
    );
    w.member_ready("prod-c");
    assert_eq!(run_condition(&w.step(), PROGRESSING).1, "UpdateRunStopping");
    w.member_ready("prod-a");
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunStopped");
    assert!(binds(&p).is_empty());
}

#[test]
fn a_stage_without_a_label_selector_selects_no_cluster() {
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "everything", "labelSelector": {}},
        {"name": "sign-off", "afterStageTasks": [{"type": "Approval"}]}
    ]}));
    let p = w.step();
    assert_eq!(run_condition(&p, INITIALIZED).0, "True");
    assert_eq!(w.stage_clusters(0).len(), 6);
    assert!(w.stage_clusters(1).is_empty());
    // Without any selector, a cluster matches no stage.
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [{"name": "gates-only"}]}));
    let (_, why, _) = run_condition(&w.step(), INITIALIZED);
    assert_eq!(why, reason::CLUSTER_MATCHES_NO_STAGE);
}

#[test]
fn the_deletion_stage_keeps_a_cluster_selected_again() {
    let mut w = World::new();
    w.strategy =
        strategy(json!({"stages": [{"name": "all", "afterStageTasks": [{"type": "Approval"}]}]}));
    w.labels.clear();
    w.bindings = vec![BindingView {
        cluster: "back".into(),
        state: BindingState::Unscheduled,
        ..Default::default()
    }];
    w.step();
    // Before the deletion stage is reached, the placement selects the cluster again.
    w.bindings[0].state = BindingState::Scheduled;
    w.approve("rollout-all");
    let p = w.step();
    assert!(!p.actions.iter().any(|a| matches!(a, Action::Unbind { .. })));
    let deletion = p.status.deletion_stage_status.clone().unwrap();
    let skipped = find(&deletion.clusters[0].conditions, CLUSTER_SKIPPED).unwrap();
    assert_eq!(skipped.reason, "ClusterSelectedAgain");
    assert_eq!(run_condition(&p, SUCCEEDED).0, "True");
}

#[test]
fn a_run_waits_for_its_placements_scheduling_before_freezing_its_clusters() {
    let mut w = World::new();
    w.unsettled_scheduling = true;
    let waiting = |p: &Plan| {
        let (status, why, message) = run_condition(p, INITIALIZED);
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", reason::WAITING_FOR_SCHEDULING)
        );
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        assert!(p.status.stages_status.is_empty());
        assert!(p.status.conditions.iter().all(|c| c.type_ != SUCCEEDED));
        message
    };
    // A placement just created: its first snapshot exists, it has not scheduled yet.
    let message = waiting(&w.step());
    assert!(
        message.contains("Placement web to schedule its generation"),
        "{message}"
    );
    // It selected six clusters; the hub's bindings cache shows two of them.
    w.unsettled_scheduling = false;
    w.settle();
    w.unsettled_scheduling = true;
    let all = std::mem::take(&mut w.bindings);
    w.bindings = all[..2].to_vec();
    let message = waiting(&w.step());
    assert!(
        message.contains("selects 6 clusters; the hub's Bindings show 2"),
        "{message}"
    );
    // A later spec (generation 2) is not scheduled yet, though the counts agree.
    w.bindings = all;
    w.placement.as_mut().unwrap().metadata.generation = Some(2);
    waiting(&w.step());
    // Scheduled: the run freezes all six clusters and starts.
    w.unsettled_scheduling = false;
    let p = w.step();
    assert!(is_true(&p.status.conditions, INITIALIZED));
    assert_eq!(p.status.policy_observed_cluster_count, Some(6));
    assert_eq!(binds(&p), ["stage-a"]);
    // The run waited as a validated run: it supersedes an older one meanwhile.
    assert!(
        SiblingRun::of(&UpdateRun {
            status: Some(waiting_status()),
            ..w.run.clone()
        })
        .validated
    );
}

/// A run's status while it waits for its placement's scheduling.
fn waiting_status() -> fleethub_crds::update_run::UpdateRunStatus {
    let mut w = World::new();
    w.unsettled_scheduling = true;
    w.step().status
}
