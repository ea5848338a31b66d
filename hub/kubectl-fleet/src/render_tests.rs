use super::*;
use fleethub_crds::approval::ApprovalRequestSpec;
use fleethub_crds::update_run::{DELETION_STAGE, UpdateRunState, reason};
use fleethub_crds::update_run::{UpdateRunSpec, UpdateRunStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, at: &str) -> serde_json::Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at})
}

/// A run of three stages: staging done and soaked, canary done and waiting for approval,
/// production pending; one cluster to remove afterwards.
fn waiting_run() -> UpdateRun {
    let status = json!({
        "conditions": [
            cond("Initialized", "True", reason::INITIALIZED, "UpdateRun initialized", "2026-11-22T08:00:00Z"),
            cond("Progressing", "False", reason::WAITING, "stage canary: all clusters updated; waits for approval of ApprovalRequest r1-canary", "2026-11-22T08:01:00Z"),
        ],
        "currentStage": "canary",
        "startTime": "2026-11-22T08:00:00Z",
        "stagedUpdateStrategySnapshot": {"stages": [
            {"name": "staging", "afterStageTasks": [{"type": "TimedWait", "waitTime": "15s"}]},
            {"name": "canary", "afterStageTasks": [{"type": "Approval"}]},
            {"name": "production", "afterStageTasks": [{"type": "Approval"}]},
        ]},
        "stagesStatus": [
            {"stageName": "staging",
             "clusters": [{"clusterName": "member-1", "startTime": "2026-11-22T08:00:00Z", "endTime": "2026-11-22T08:00:04Z",
                           "conditions": [cond("Started", "True", "x", "", "2026-11-22T08:00:00Z"), cond("Succeeded", "True", "x", "", "2026-11-22T08:00:04Z")]}],
             "afterStageTaskStatus": [{"type": "TimedWait", "conditions": [cond("WaitTimeElapsed", "True", "x", "waited 15s", "2026-11-22T08:00:19Z")]}],
             "conditions": [cond("Succeeded", "True", reason::STAGE_SUCCEEDED, "", "2026-11-22T08:00:19Z")],
             "startTime": "2026-11-22T08:00:00Z", "clustersCompletedTime": "2026-11-22T08:00:04Z", "endTime": "2026-11-22T08:00:19Z"},
            {"stageName": "canary",
             "clusters": [{"clusterName": "member-2", "startTime": "2026-11-22T08:00:19Z", "endTime": "2026-11-22T08:00:30Z",
                           "conditions": [cond("Started", "True", "x", "", "2026-11-22T08:00:19Z"), cond("Succeeded", "True", "x", "", "2026-11-22T08:00:30Z")]}],
             "afterStageTaskStatus": [{"type": "Approval", "approvalRequestName": "r1-canary",
                                       "conditions": [cond("ApprovalRequestCreated", "True", "x", "", "2026-11-22T08:00:30Z")]}],
             "conditions": [cond("Progressing", "False", reason::STAGE_WAITING, "waits", "2026-11-22T08:00:30Z")],
             "startTime": "2026-11-22T08:00:19Z", "clustersCompletedTime": "2026-11-22T08:00:30Z"},
            {"stageName": "production",
             "clusters": [{"clusterName": "member-3"}],
             "afterStageTaskStatus": [{"type": "Approval", "approvalRequestName": "r1-production"}]},
        ],
        "deletionStageStatus": {"stageName": DELETION_STAGE, "clusters": [{"clusterName": "member-9"}]},
    });
    UpdateRun {
        metadata: kube::api::ObjectMeta {
            name: Some("r1".into()),
            creation_timestamp: Some(Time(t("2026-11-22T08:00:00Z"))),
            ..Default::default()
        },
        spec: UpdateRunSpec {
            placement_name: "web".into(),
            resource_snapshot_index: Some("2".into()),
            staged_rollout_strategy_name: "three".into(),
            ..Default::default()
        },
        status: Some(serde_json::from_value::<UpdateRunStatus>(status).unwrap()),
    }
}

fn plain() -> Style {
    Style { color: false }
}

const NOW: &str = "2026-11-22T08:02:30Z";

#[test]
fn states_follow_the_conditions() {
    let mut run = waiting_run();
    assert_eq!(run_state(&run), RunState::Waiting);
    run.spec.state = Some(UpdateRunState::Stop);
    assert_eq!(
        run_state(&run),
        RunState::Waiting,
        "a gate still says why it waits"
    );
    let status = run.status.as_mut().unwrap();
    status.conditions[1].reason = reason::STARTED.into();
    assert_eq!(run_state(&run), RunState::Stopping);
    let status = run.status.as_mut().unwrap();
    status.conditions[1].reason = reason::STOPPED.into();
    assert_eq!(run_state(&run), RunState::Stopped);
    let status = run.status.as_mut().unwrap();
    status.conditions[1].reason = reason::CLUSTER_FAILED.into();
    assert_eq!(run_state(&run), RunState::Blocked);
    let status = run.status.as_mut().unwrap();
    status.conditions.push(
        serde_json::from_value(cond("Succeeded", "False", reason::FAILED, "x", NOW)).unwrap(),
    );
    assert_eq!(run_state(&run), RunState::Failed);
    assert!(run_state(&run).finished());
    run.status = None;
    assert_eq!(run_state(&run), RunState::Pending);
}

#[test]
fn runs_table_has_one_row_per_run_with_progress() {
    let text = runs_table(&[waiting_run()], t(NOW));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for h in [
        "NAME",
        "PLACEMENT",
        "SNAPSHOT",
        "STATE",
        "STAGE",
        "PROGRESS",
        "AGE",
    ] {
        assert!(lines[0].contains(h), "{text}");
    }
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "r1", "web", "2", "Waiting", "canary", "2/4", "clusters", "2m30s"
        ]
    );
    assert_eq!(runs_table(&[], t(NOW)), "No UpdateRuns found on the hub.\n");
}

#[test]
fn run_detail_shows_stages_clusters_and_gates_in_order() {
    let text = run_detail(&waiting_run(), &[], t(NOW), plain());
    assert!(
        !text.contains('\x1b'),
        "no colour codes when not a terminal:\n{text}"
    );
    let at = |s: &str| {
        text.find(s)
            .unwrap_or_else(|| panic!("{s:?} missing from:\n{text}"))
    };
    assert!(at("UpdateRun r1   Waiting") < at("stage 1/3 staging"));
    assert!(at("stage 1/3 staging") < at("member-1") && at("member-1") < at("stage 2/3 canary"));
    assert!(at("stage 2/3 canary") < at("member-2") && at("member-2") < at("stage 3/3 production"));
    assert!(at("stage 3/3 production") < at("member-3"));
    assert!(
        text.contains("member-1                 Succeeded  08:00:00Z → 08:00:04Z (4s)"),
        "{text}"
    );
    assert!(
        text.contains("after: TimedWait 15s: elapsed at 08:00:19Z"),
        "{text}"
    );
    assert!(
        text.contains("after: Approval r1-canary: waiting for approval since 08:00:30Z (2m0s)"),
        "{text}"
    );
    assert!(
        text.contains("approve with: kubectl fleet approve r1-canary"),
        "{text}"
    );
    assert!(
        text.contains("after: Approval r1-production: not reached yet"),
        "{text}"
    );
    assert!(
        text.contains("▶ stage 2/3 canary   Waiting"),
        "the current stage is marked:\n{text}"
    );
    assert!(text.contains("member-3                 Pending"), "{text}");
    assert!(text.contains("deletion stage"), "{text}");
    assert!(text.contains("member-9                 Pending"), "{text}");
    assert!(text.contains("2/4 clusters done"), "{text}");
}

#[test]
fn an_approved_gate_names_who_approved_and_when() {
    let mut run = waiting_run();
    let mut approvals = Vec::new();
    let mut request = ApprovalRequest::new(
        "r1-canary",
        ApprovalRequestSpec {
            parent_stage_rollout: "r1".into(),
            target_stage: "canary".into(),
            ..Default::default()
        },
    );
    let patch = fleethub_crds::approval::approve_patch(
        "alice",
        "canary is fine",
        t("2026-11-22T08:02:00Z"),
    );
    request.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    approvals.push(request);
    let text = run_detail(&run, &approvals, t(NOW), plain());
    assert!(
        text.contains("Approval r1-canary: approved by alice: canary is fine at 08:02:00Z (the run has not taken it into account yet)"),
        "{text}"
    );
    run.status.as_mut().unwrap().stages_status[1].after_stage_task_status[0]
        .conditions
        .push(
            serde_json::from_value(cond("ApprovalRequestApproved", "True", "x", "", NOW)).unwrap(),
        );
    let text = run_detail(&run, &approvals, t(NOW), plain());
    assert!(
        text.contains("approved by alice: canary is fine at 08:02:00Z\n"),
        "{text}"
    );
    assert!(
        !text.contains("approve with: kubectl fleet approve r1-canary"),
        "{text}"
    );
}

#[test]
fn a_soak_in_progress_shows_the_time_left() {
    let mut run = waiting_run();
    let stage = &mut run.status.as_mut().unwrap().stages_status[0];
    stage.after_stage_task_status[0].conditions.clear();
    stage.conditions.clear();
    stage.end_time = None;
    let text = run_detail(&run, &[], t("2026-11-22T08:00:10Z"), plain());
    assert!(
        text.contains("after: TimedWait 15s: soaking, 9s left (until 08:00:19Z)"),
        "{text}"
    );
}

#[test]
fn a_failed_cluster_says_why() {
    let mut run = waiting_run();
    let status = run.status.as_mut().unwrap();
    let cluster = &mut status.stages_status[2].clusters[0];
    cluster.start_time = Some(Time(t("2026-11-22T08:01:00Z")));
    cluster.conditions = vec![
        serde_json::from_value(cond("Started", "True", "x", "", "2026-11-22T08:01:00Z")).unwrap(),
        serde_json::from_value(cond(
            "Succeeded",
            "False",
            reason::CLUSTER_HEALTH_TIMEOUT,
            "cluster member-3 did not become available within 5m: deployment app/web: 1/3 replicas ready",
            "2026-11-22T08:06:00Z",
        ))
        .unwrap(),
    ];
    let text = run_detail(&run, &[], t(NOW), plain());
    assert!(
        text.contains("member-3                 Failed     since 08:01:00Z"),
        "{text}"
    );
    assert!(
        text.contains("why: cluster member-3 did not become available within 5m: deployment app/web: 1/3 replicas ready (ClusterHealthTimeout)"),
        "{text}"
    );
}

#[test]
fn an_updating_cluster_says_what_it_waits_for() {
    let mut run = waiting_run();
    let status = run.status.as_mut().unwrap();
    let cluster = &mut status.stages_status[2].clusters[0];
    cluster.start_time = Some(Time(t("2026-11-22T08:01:00Z")));
    cluster.conditions = vec![
        serde_json::from_value(cond("Started", "True", "x", "", "2026-11-22T08:01:00Z")).unwrap(),
    ];
    cluster.progress = Some(
        "not available yet: phasedrollout app/db: 2/5 pods rolled: before pod 2: check 1/3".into(),
    );
    let text = run_detail(&run, &[], t(NOW), plain());
    assert!(
        text.contains("member-3                 Updating   since 08:01:00Z\n      now: not available yet: phasedrollout app/db: 2/5 pods rolled: before pod 2: check 1/3"),
        "{text}"
    );
}

#[test]
fn colours_only_when_asked() {
    let text = run_detail(&waiting_run(), &[], t(NOW), Style { color: true });
    assert!(text.contains("\x1b[33mWaiting\x1b[0m"), "{text}");
}

#[test]
fn ages_read_like_kubectl() {
    let now = t(NOW);
    let ago = |s: i64| {
        age(
            now.checked_sub(jiff::SignedDuration::from_secs(s)).unwrap(),
            now,
        )
    };
    assert_eq!(ago(5), "5s");
    assert_eq!(ago(150), "2m30s");
    assert_eq!(ago(1800), "30m");
    assert_eq!(ago(5 * 3600), "5h");
    assert_eq!(ago(3 * 86400), "3d");
}

#[test]
fn approvals_table_lists_pending_first_with_the_command() {
    let pending = ApprovalRequest::new(
        "r1-canary",
        ApprovalRequestSpec {
            parent_stage_rollout: "r1".into(),
            target_stage: "canary".into(),
            ..Default::default()
        },
    );
    let mut done = ApprovalRequest::new(
        "r0-canary",
        ApprovalRequestSpec {
            parent_stage_rollout: "r0".into(),
            target_stage: "canary".into(),
            ..Default::default()
        },
    );
    let patch = fleethub_crds::approval::approve_patch("bob", "", t(NOW));
    done.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    let text = approvals_table(&[done, pending], t(NOW));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].starts_with("r1-canary")
            && lines[1].ends_with("pending: kubectl fleet approve r1-canary"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("r0-canary") && lines[2].ends_with("approved by bob"),
        "{text}"
    );
}

#[test]
fn skipped_clusters_joined_clusters_and_a_plan_are_worded() {
    let mut run = waiting_run();
    let status = run.status.as_mut().unwrap();
    status.stages_status[2].clusters.push(
        serde_json::from_value(json!({"clusterName": "member-4", "conditions": [
            cond("Skipped", "True", reason::CLUSTER_UNSELECTED,
                 "cluster member-4 left Placement web before its turn; this run skips it", "2026-11-22T08:01:00Z")]}))
        .unwrap(),
    );
    status.clusters_not_in_run = Some(fleethub_crds::update_run::ClustersNotInRun {
        count: 1,
        names: vec!["member-5".into()],
    });
    let text = run_detail(&run, &[], t(NOW), plain());
    assert!(
        text.contains("member-4                 Skipped")
            && text.contains("why: cluster member-4 left Placement web before its turn"),
        "{text}"
    );
    assert!(
        text.contains("1 cluster joined Placement web after this run started (member-5): start a new run to include them"),
        "{text}"
    );
    // Planned: says how to start it.
    run.spec.state = Some(UpdateRunState::Initialize);
    run.status.as_mut().unwrap().conditions = vec![
        serde_json::from_value(cond(
            "Initialized",
            "True",
            reason::INITIALIZED,
            "",
            "2026-11-22T08:00:00Z",
        ))
        .unwrap(),
        serde_json::from_value(cond(
            "Progressing",
            "False",
            reason::NOT_STARTED,
            "planned",
            "2026-11-22T08:00:00Z",
        ))
        .unwrap(),
    ];
    let text = run_detail(&run, &[], t(NOW), plain());
    assert!(text.contains("UpdateRun r1   Planned"), "{text}");
    assert!(
        text.contains("start it with: kubectl fleet resume r1"),
        "{text}"
    );
}

#[test]
fn a_large_stage_shows_its_counts_and_the_clusters_that_are_not_done() {
    let mut run = waiting_run();
    let production = &mut run.status.as_mut().unwrap().stages_status[2];
    production.clusters = (1..=200)
        .map(|i| {
            let mut c = fleethub_crds::update_run::ClusterUpdatingStatus {
                cluster_name: format!("edge-{i:03}"),
                ..Default::default()
            };
            if i <= 3 {
                let started: Condition = serde_json::from_value(cond(
                    "Started",
                    "True",
                    "x",
                    "",
                    "2026-11-22T08:00:19Z",
                ))
                .unwrap();
                c.conditions = vec![started];
                c.start_time = Some(Time(t("2026-11-22T08:00:19Z")));
            }
            c
        })
        .collect();
    let text = run_detail(&run, &[], t(NOW), plain());
    assert!(
        text.contains(
            "    200 clusters: 0 succeeded, 3 updating, 0 failed, 0 skipped, 197 pending"
        ),
        "{text}"
    );
    assert!(
        text.contains("edge-003") && !text.contains("edge-004"),
        "{text}"
    );
    assert!(
        text.contains("(197 more not listed: kubectl fleet run r1 --all-clusters lists every one)"),
        "{text}"
    );
    let all = run_detail_listing(&run, &[], t(NOW), plain(), true);
    assert!(all.contains("edge-200"), "{all}");
}
