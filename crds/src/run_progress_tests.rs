//! The shared reading of a run, tested once for the dashboard and `kubectl fleet`.

use super::*;
use crate::approval::{ApprovalRequestSpec, ApprovalRequestStatus};
use crate::strategy::StagedUpdateStrategySpec;
use crate::update_run::{CLUSTER_STARTED, UpdateRunSpec, UpdateRunStatus};

fn at(s: &str) -> Time {
    Time(format!("2026-11-22T08:{s}Z").parse().unwrap())
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, when: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: at(when),
        observed_generation: None,
    }
}

fn cluster(name: &str, conditions: Vec<Condition>) -> ClusterUpdatingStatus {
    ClusterUpdatingStatus {
        cluster_name: name.into(),
        conditions,
        ..Default::default()
    }
}

/// staging (TimedWait 1m, elapsed) → canary (Approval + TimedWait 30s, waiting for approval;
/// one cluster failed) → production (not started); one cluster to remove.
fn waiting_run() -> UpdateRun {
    let strategy: StagedUpdateStrategySpec = serde_json::from_value(serde_json::json!({"stages": [
        {"name": "staging", "afterStageTasks": [{"type": "TimedWait", "waitTime": "1m"}]},
        {"name": "canary", "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "30s"}]},
        {"name": "production"},
    ]}))
    .unwrap();
    let mut run = UpdateRun::new(
        "r1",
        UpdateRunSpec {
            placement_name: "web".into(),
            resource_snapshot_index: Some("2".into()),
            staged_rollout_strategy_name: "three".into(),
            ..Default::default()
        },
    );
    let started = cond(
        CLUSTER_STARTED,
        TRUE,
        reason::CLUSTER_STARTED,
        "updating",
        "00:00",
    );
    run.status = Some(UpdateRunStatus {
        conditions: vec![
            cond(
                INITIALIZED,
                TRUE,
                reason::INITIALIZED,
                "initialized",
                "00:00",
            ),
            cond(
                PROGRESSING,
                FALSE,
                reason::WAITING,
                "stage canary: all clusters updated; waits for approval of ApprovalRequest r1-canary",
                "03:00",
            ),
        ],
        current_stage: Some("canary".into()),
        staged_update_strategy_snapshot: Some(strategy),
        start_time: Some(at("00:00")),
        stages_status: vec![
            StageUpdatingStatus {
                stage_name: "staging".into(),
                before_stage_task_status: vec![],
                clusters: vec![cluster(
                    "stage-a",
                    vec![
                        started.clone(),
                        cond(SUCCEEDED, TRUE, reason::CLUSTER_SUCCEEDED, "ok", "00:30"),
                    ],
                )],
                after_stage_task_status: vec![StageTaskStatus {
                    type_: StageTaskType::TimedWait,
                    approval_request_name: None,
                    metric_check: None,
                    paused_seconds: None,
                    paused_since: None,
                    conditions: vec![cond(
                        WAIT_TIME_ELAPSED,
                        TRUE,
                        reason::WAIT_ELAPSED,
                        "waited 1m",
                        "01:30",
                    )],
                }],
                conditions: vec![cond(
                    SUCCEEDED,
                    TRUE,
                    reason::STAGE_SUCCEEDED,
                    "stage staging succeeded",
                    "01:30",
                )],
                start_time: Some(at("00:00")),
                clusters_completed_time: Some(at("00:30")),
                end_time: Some(at("01:30")),
                ..Default::default()
            },
            StageUpdatingStatus {
                stage_name: "canary".into(),
                before_stage_task_status: vec![],
                clusters: vec![
                    cluster(
                        "canary-a",
                        vec![
                            started.clone(),
                            cond(SUCCEEDED, TRUE, reason::CLUSTER_SUCCEEDED, "ok", "02:00"),
                        ],
                    ),
                    cluster(
                        "canary-b",
                        vec![
                            started.clone(),
                            cond(
                                SUCCEEDED,
                                FALSE,
                                reason::CLUSTER_HEALTH_TIMEOUT,
                                "cluster canary-b did not become available within 5m",
                                "02:30",
                            ),
                        ],
                    ),
                ],
                // Listed by type, as hubs before the shared model wrote them.
                after_stage_task_status: vec![
                    StageTaskStatus {
                        type_: StageTaskType::TimedWait,
                        approval_request_name: None,
                        metric_check: None,
                        paused_seconds: None,
                        paused_since: None,
                        conditions: vec![],
                    },
                    StageTaskStatus {
                        type_: StageTaskType::Approval,
                        approval_request_name: Some("r1-canary".into()),
                        metric_check: None,
                        paused_seconds: None,
                        paused_since: None,
                        conditions: vec![cond(
                            APPROVAL_REQUEST_CREATED,
                            TRUE,
                            reason::APPROVAL_CREATED,
                            "created",
                            "03:00",
                        )],
                    },
                ],
                conditions: vec![cond(
                    PROGRESSING,
                    FALSE,
                    reason::STAGE_WAITING,
                    "waits",
                    "03:00",
                )],
                start_time: Some(at("01:30")),
                clusters_completed_time: Some(at("03:00")),
                end_time: None,
                ..Default::default()
            },
            StageUpdatingStatus {
                stage_name: "production".into(),
                before_stage_task_status: vec![],
                clusters: vec![cluster("prod-a", vec![])],
                ..Default::default()
            },
        ],
        deletion_stage_status: Some(StageUpdatingStatus {
            stage_name: crate::update_run::DELETION_STAGE.into(),
            before_stage_task_status: vec![],
            clusters: vec![cluster("gone", vec![])],
            ..Default::default()
        }),
        ..Default::default()
    });
    run
}

fn request(approved_message: Option<&str>) -> ApprovalRequest {
    let mut r = ApprovalRequest::new(
        "r1-canary",
        ApprovalRequestSpec {
            parent_stage_rollout: "r1".into(),
            target_stage: "canary".into(),
            ..Default::default()
        },
    );
    r.status = approved_message.map(|m| ApprovalRequestStatus {
        conditions: vec![cond(approval::APPROVED, TRUE, "Approved", m, "04:00")],
        ..Default::default()
    });
    r
}

#[test]
fn stages_clusters_and_tasks_in_order_with_states_and_times() {
    let p = RunProgress::new(&waiting_run(), &[request(None)]);
    assert_eq!(p.phase, RunPhase::Waiting);
    assert_eq!(p.current_stage.as_deref(), Some("canary"));
    let names: Vec<&str> = p.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["staging", "canary", "production"]);
    let phases: Vec<StagePhase> = p.stages.iter().map(|s| s.phase).collect();
    assert_eq!(
        phases,
        [
            StagePhase::Succeeded,
            StagePhase::Waiting,
            StagePhase::NotStarted
        ]
    );
    let canary = &p.stages[1];
    assert_eq!(canary.clusters[0].phase, ClusterPhase::Succeeded);
    assert_eq!(canary.clusters[1].phase, ClusterPhase::Failed);
    assert_eq!(canary.clusters[1].reason, reason::CLUSTER_HEALTH_TIMEOUT);
    assert_eq!(p.stages[2].clusters[0].phase, ClusterPhase::Pending);
    // Tasks in the strategy's order, whatever order the status lists them in.
    match &canary.tasks[..] {
        [
            TaskProgress::Approval {
                request,
                requested_at,
                request_exists: true,
                approval: None,
                recorded: false,
            },
            TaskProgress::TimedWait {
                wait_time,
                until,
                elapsed_at: None,
                ..
            },
        ] => {
            assert_eq!(request.as_deref(), Some("r1-canary"));
            assert_eq!(*requested_at, Some(at("03:00").0));
            assert_eq!(wait_time, "30s");
            assert_eq!(*until, Some(at("03:30").0));
        }
        other => panic!("unexpected tasks {other:?}"),
    }
    assert!(canary.tasks[0].waiting());
    match &p.stages[0].tasks[..] {
        [TaskProgress::TimedWait { elapsed_at, .. }] => {
            assert_eq!(*elapsed_at, Some(at("01:30").0))
        }
        other => panic!("unexpected tasks {other:?}"),
    }
    assert!(!p.stages[0].tasks[0].waiting());
    // Clusters of every stage and of the deletion stage.
    assert_eq!(p.counts(), (2, 5));
    assert_eq!(p.deletion.as_ref().unwrap().clusters[0].name, "gone");
    assert_eq!(
        p.problems(),
        ["cluster canary-b did not become available within 5m"]
    );
}

#[test]
fn an_approval_names_who_and_when_and_no_longer_waits() {
    let p = RunProgress::new(&waiting_run(), &[request(Some("approved by alice: lgtm"))]);
    let task = &p.stages[1].tasks[0];
    assert!(!task.waiting());
    match task {
        TaskProgress::Approval {
            approval: Some(a), ..
        } => {
            assert_eq!(a.by.as_deref(), Some("alice"));
            assert_eq!(a.note.as_deref(), Some("lgtm"));
            assert_eq!(a.at, at("04:00").0);
        }
        other => panic!("unexpected task {other:?}"),
    }
    // A request that is gone does not wait for anyone.
    let p = RunProgress::new(&waiting_run(), &[]);
    assert!(!p.stages[1].tasks[0].waiting());
}

#[test]
fn approvers_are_read_from_the_condition_message() {
    let read = |m: &str| {
        let a = Approval::of(&request(Some(m))).unwrap();
        (a.by, a.note)
    };
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        read("approved by alice: lgtm: ship it"),
        (some("alice"), some("lgtm: ship it"))
    );
    assert_eq!(
        read("approved by system:serviceaccount:fleethub-system:admin"),
        (some("system:serviceaccount:fleethub-system:admin"), None)
    );
    assert_eq!(read("canary looks good"), (None, some("canary looks good")));
    assert_eq!(read(""), (None, None));
    assert!(Approval::of(&request(None)).is_none());
}

#[test]
fn run_phases_follow_the_conditions_and_spec() {
    let with = |conditions: Vec<Condition>, state: Option<UpdateRunState>| {
        let mut run = waiting_run();
        run.spec.state = state;
        run.status.as_mut().unwrap().conditions = conditions;
        RunPhase::of(&run)
    };
    let init = || cond(INITIALIZED, TRUE, reason::INITIALIZED, "", "00:00");
    let progressing = |status: &str, why: &str| cond(PROGRESSING, status, why, "", "00:00");
    let cases = [
        (vec![], None, RunPhase::Initializing),
        (
            vec![cond(
                INITIALIZED,
                FALSE,
                reason::WAITING_FOR_PREVIOUS_RUN,
                "",
                "00:00",
            )],
            None,
            RunPhase::Queued,
        ),
        (
            vec![init(), progressing(TRUE, reason::STARTED)],
            None,
            RunPhase::Progressing,
        ),
        (
            vec![init(), progressing(TRUE, reason::STARTED)],
            Some(UpdateRunState::Stop),
            RunPhase::Stopping,
        ),
        (
            vec![init(), progressing(FALSE, reason::STOPPED)],
            None,
            RunPhase::Stopped,
        ),
        (
            vec![init(), progressing(FALSE, reason::WAITING)],
            None,
            RunPhase::Waiting,
        ),
        (
            vec![init(), progressing(FALSE, reason::CLUSTER_FAILED)],
            None,
            RunPhase::Blocked,
        ),
        (
            vec![init(), progressing(FALSE, reason::WAITING_FOR_MEMBER)],
            None,
            RunPhase::Blocked,
        ),
        (
            vec![init(), progressing(TRUE, reason::STOPPING)],
            Some(UpdateRunState::Stop),
            RunPhase::Stopping,
        ),
        (
            vec![init(), progressing(FALSE, reason::NOT_STARTED)],
            Some(UpdateRunState::Initialize),
            RunPhase::Planned,
        ),
        (
            vec![init(), progressing(FALSE, reason::WAITING_FOR_PREVIOUS_RUN)],
            None,
            RunPhase::Queued,
        ),
        (
            vec![
                init(),
                cond(SUCCEEDED, TRUE, reason::SUCCEEDED, "", "00:00"),
            ],
            None,
            RunPhase::Succeeded,
        ),
        (
            vec![cond(SUCCEEDED, FALSE, reason::SUPERSEDED, "", "00:00")],
            None,
            RunPhase::Failed,
        ),
    ];
    for (conditions, state, want) in cases {
        assert_eq!(
            with(conditions.clone(), state),
            want,
            "{conditions:?} {state:?}"
        );
    }
    let mut fresh = waiting_run();
    fresh.status = None;
    assert_eq!(RunPhase::of(&fresh), RunPhase::Pending);
    assert!(RunPhase::Failed.finished() && RunPhase::Succeeded.finished());
    assert!(!RunPhase::Blocked.finished());
    // A finished run has no current stage.
    let mut done = waiting_run();
    done.status.as_mut().unwrap().conditions = vec![cond(
        SUCCEEDED,
        TRUE,
        reason::SUCCEEDED,
        "all done",
        "09:00",
    )];
    let p = RunProgress::new(&done, &[]);
    assert_eq!(p.current_stage, None);
    assert_eq!(p.message, "all done");
}

#[test]
fn skipped_clusters_the_index_in_use_and_clusters_not_in_the_run_are_read() {
    let mut run = waiting_run();
    run.spec.resource_snapshot_index = None;
    let status = run.status.as_mut().unwrap();
    status.resource_snapshot_index_used = Some("7".into());
    status.clusters_not_in_run = Some(crate::update_run::ClustersNotInRun {
        count: 3,
        names: vec!["new-1".into(), "new-2".into()],
    });
    status.stages_status[2].clusters.push(cluster(
        "gone",
        vec![cond(
            crate::update_run::CLUSTER_SKIPPED,
            TRUE,
            reason::CLUSTER_UNSELECTED,
            "cluster gone left Placement web before its turn",
            "04:00",
        )],
    ));
    let p = RunProgress::new(&run, &[]);
    assert_eq!(p.index, "7");
    let gone = p.clusters().find(|c| c.name == "gone").unwrap();
    assert_eq!(gone.phase, ClusterPhase::Skipped);
    assert_eq!(gone.reason, "ClusterUnselected");
    assert!(gone.message.contains("before its turn"));
    assert_eq!(
        p.not_in_run_notice().as_deref(),
        Some(
            "3 clusters joined Placement web after this run started (new-1, new-2 and 1 more): start a new run to include them"
        )
    );
    // Not said of a finished run.
    run.status.as_mut().unwrap().conditions =
        vec![cond(SUCCEEDED, TRUE, reason::SUCCEEDED, "done", "09:00")];
    assert_eq!(RunProgress::new(&run, &[]).not_in_run_notice(), None);
}

#[test]
fn a_stage_whose_plan_was_not_read_counts_its_clusters_from_the_status() {
    let mut run = waiting_run();
    let status = run.status.as_mut().unwrap();
    let mut production = status.stages_status[2].clone();
    production.clusters = (0..150)
        .map(|i| {
            let mut c = cluster(&format!("prod-{i}"), vec![]);
            if i < 40 {
                c.conditions = vec![cond(
                    SUCCEEDED,
                    TRUE,
                    reason::CLUSTER_SUCCEEDED,
                    "ok",
                    "04:00",
                )];
            }
            c
        })
        .collect();
    production.cluster_list = ClusterList::InPlan;
    // As a reader that did not read the run's UpdateRunPlan has it.
    let stored: StageUpdatingStatus =
        serde_json::from_value(serde_json::to_value(&production).unwrap()).unwrap();
    assert!(stored.clusters.is_empty());
    let (done_before, all_before) = RunProgress::new(&run, &[]).counts();
    run.status.as_mut().unwrap().stages_status[2] = stored;
    let progress = RunProgress::new(&run, &[]);
    let stage = &progress.stages[2];
    assert!(stage.clusters.is_empty());
    let counts = stage.counts();
    assert_eq!(
        (counts.total, counts.succeeded, counts.pending),
        (150, 40, 110)
    );
    let old = RunProgress::new(&waiting_run(), &[]).stages[2].counts();
    assert_eq!(
        progress.counts(),
        (
            done_before - old.succeeded as usize + 40,
            all_before - old.total as usize + 150
        )
    );
}
