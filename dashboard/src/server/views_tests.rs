//! How the pages word the shared run model (`fleethub_crds::run_progress`, which is
//! tested where it is defined).
use super::*;
use fleethub_crds::approval;
use fleethub_crds::strategy::StageTaskType;
use fleethub_crds::update_run::{
    APPROVAL_REQUEST_CREATED, CLUSTER_STARTED, ClusterUpdatingStatus, INITIALIZED, PROGRESSING,
    SUCCEEDED, StageTaskStatus, StageUpdatingStatus, UpdateRunSpec, UpdateRunStatus, reason,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time("2026-11-22T08:00:00Z".parse().unwrap()),
        observed_generation: None,
    }
}

fn waiting_run() -> UpdateRun {
    let mut run = UpdateRun::new(
        "r1",
        UpdateRunSpec {
            placement_name: "web".into(),
            resource_snapshot_index: Some("1".into()),
            staged_rollout_strategy_name: "three".into(),
            ..Default::default()
        },
    );
    run.status = Some(UpdateRunStatus {
        conditions: vec![
            cond(INITIALIZED, TRUE, reason::INITIALIZED, "initialized"),
            cond(
                PROGRESSING,
                FALSE,
                reason::WAITING,
                "waiting for approval of stage canary",
            ),
        ],
        current_stage: Some("canary".into()),
        stages_status: vec![StageUpdatingStatus {
            stage_name: "canary".into(),
            before_stage_task_status: vec![],
            clusters: vec![
                ClusterUpdatingStatus {
                    cluster_name: "member-2".into(),
                    conditions: vec![cond(SUCCEEDED, TRUE, reason::CLUSTER_SUCCEEDED, "ok")],
                    ..Default::default()
                },
                ClusterUpdatingStatus {
                    cluster_name: "member-3".into(),
                    conditions: vec![cond(
                        SUCCEEDED,
                        FALSE,
                        reason::CLUSTER_HEALTH_TIMEOUT,
                        "cluster member-3 did not become available within 5m",
                    )],
                    ..Default::default()
                },
            ],
            after_stage_task_status: vec![StageTaskStatus {
                type_: StageTaskType::Approval,
                approval_request_name: Some("r1-canary".into()),
                metric_check: None,
                paused_seconds: None,
                paused_since: None,
                conditions: vec![cond(
                    APPROVAL_REQUEST_CREATED,
                    TRUE,
                    reason::APPROVAL_CREATED,
                    "",
                )],
            }],
            conditions: vec![cond(PROGRESSING, FALSE, reason::STAGE_WAITING, "waiting")],
            ..Default::default()
        }],
        ..Default::default()
    });
    run
}

#[test]
fn a_large_stage_shows_its_counts_and_one_page_of_clusters_found_by_name() {
    let mut run = waiting_run();
    let status = run.status.as_mut().unwrap();
    let stage = &mut status.stages_status[0];
    stage.clusters = (1..=120)
        .map(|i| ClusterUpdatingStatus {
            cluster_name: format!("edge-{i:03}"),
            conditions: if i <= 30 {
                vec![cond(SUCCEEDED, TRUE, reason::CLUSTER_SUCCEEDED, "ok")]
            } else {
                vec![]
            },
            ..Default::default()
        })
        .collect();
    status.current_stage = Some("production".into());
    // Stored and read back as the API server returns it (compact above 100 clusters).
    let run: UpdateRun = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();

    let first = super::run(&run, &[], &RunQuery::default());
    let s = &first.stages[0];
    assert_eq!(
        s.counts.sentence(),
        "120 clusters: 30 succeeded · 90 pending"
    );
    assert!(
        !s.open,
        "a large stage that is not in progress is collapsed"
    );
    assert_eq!(
        (s.matching, s.page, s.clusters.len()),
        (120, 0, RUN_PAGE_ROWS)
    );

    let query = RunQuery {
        stage: "canary".into(),
        page: 9,
        ..Default::default()
    };
    let last = super::run(&run, &[], &query);
    let s = &last.stages[0];
    assert!(s.open);
    assert_eq!(s.page, 2, "a page past the end shows the last one");
    let shown: Vec<(usize, &str)> = s
        .clusters
        .iter()
        .map(|c| (c.order, c.name.as_str()))
        .collect();
    assert_eq!(shown.first(), Some(&(101, "edge-101")));
    assert_eq!(shown.last(), Some(&(120, "edge-120")));
    assert_eq!(shown.len(), 20);

    let found = super::run(
        &run,
        &[],
        &RunQuery {
            search: "-11".into(),
            ..Default::default()
        },
    );
    let s = &found.stages[0];
    assert_eq!(s.matching, 10);
    assert_eq!(s.clusters[0].order, 110);
    assert_eq!(s.clusters[0].state.label, "Pending");
    assert_eq!(
        query.link("r1", "canary", 1),
        "/runs/r1?stage=canary&page=1"
    );
    let search = RunQuery {
        search: "a b&c".into(),
        ..Default::default()
    };
    assert_eq!(
        search.link("r1", "canary", 0),
        "/runs/r1?stage=canary&page=0&q=a%20b%26c"
    );
}

fn run_with_bindings(run: &UpdateRun, bindings: &[Binding]) -> RunView {
    let mut view = super::run(run, &[], &RunQuery::default());
    super::mark_bindings(&mut view, &run.spec.placement_name, bindings);
    view
}

fn binding(cluster: &str, drifted: Condition) -> Binding {
    let mut b = Binding::new(
        &format!("web-{cluster}"),
        fleethub_crds::binding::BindingSpec {
            placement_name: "web".into(),
            target_cluster: cluster.into(),
            state: fleethub_crds::binding::BindingState::Bound,
            resource_snapshot_index: Some(1),
            ..Default::default()
        },
    );
    b.status = Some(fleethub_crds::binding::BindingStatus {
        conditions: vec![drifted],
        ..Default::default()
    });
    b
}

#[test]
fn clusters_whose_objects_differ_are_marked_on_the_run_and_the_placement() {
    let message =
        "1 object differs from the hub: ConfigMap app/c (Drifted: data.v: member \"x\", hub \"1\")";
    let bindings = [
        binding(
            "member-2",
            cond(DRIFTED, FALSE, drift::reason::IN_SYNC, "fine"),
        ),
        binding("member-3", cond(DRIFTED, TRUE, "Drifted", message)),
    ];
    let view = run_with_bindings(&waiting_run(), &bindings);
    let clusters = &view.stages[0].clusters;
    assert_eq!(clusters[0].drift, None, "an in-sync cluster is not marked");
    let marked = clusters[1].drift.clone().unwrap();
    assert_eq!(
        (marked.label.as_str(), marked.tone),
        ("Drifted", Tone::Wait)
    );
    assert_eq!(marked.message, message);

    let placement = Placement::new("web", Default::default());
    let page = placements(vec![placement], vec![], bindings.to_vec(), &[], vec![]);
    let rows = &page.placements[0].clusters;
    assert_eq!(rows[0].drift.label, "In sync");
    assert_eq!(rows[1].drift.label, "Drifted");
    let refused = cond(DRIFTED, TRUE, "TakeoverRefused", "m");
    assert_eq!(drift_state(&[refused]).label, "Takeover refused");
    assert_eq!(drift_state(&[]).label, "Unknown");
}

#[test]
fn each_clusters_overrides_are_named_and_link_to_what_it_gets() {
    use fleethub_crds::binding::reason as binding_reason;
    let with = |cluster: &str, c: Condition| {
        let mut b = binding(
            cluster,
            cond(DRIFTED, FALSE, drift::reason::IN_SYNC, "fine"),
        );
        b.status.as_mut().unwrap().conditions.push(c);
        b
    };
    let bindings = [
        with(
            "member-2",
            cond(
                OVERRIDDEN,
                TRUE,
                binding_reason::NO_OVERRIDE_SPECIFIED,
                "no override changes what cluster member-2 gets",
            ),
        ),
        with(
            "member-3",
            cond(
                OVERRIDDEN,
                TRUE,
                binding_reason::OVERRIDDEN_SUCCEEDED,
                "applied override snapshots: region-0, image-3",
            ),
        ),
    ];
    let view = run_with_bindings(&waiting_run(), &bindings);
    let clusters = &view.stages[0].clusters;
    let none = clusters[0].overrides.clone().unwrap();
    assert_eq!(
        (none.state.label.as_str(), none.state.tone),
        ("None", Tone::Idle)
    );
    assert!(none.snapshots.is_empty());
    let applied = clusters[1].overrides.clone().unwrap();
    assert_eq!(applied.state.label, "Overridden");
    assert_eq!(applied.snapshots, ["region-0", "image-3"]);
    assert_eq!(applied.render, "/placements/web/clusters/member-3/render");

    let failed = with(
        "member-3",
        cond(
            OVERRIDDEN,
            FALSE,
            binding_reason::OVERRIDDEN_FAILED,
            "ResourceOverride app/bad rule 0 on Deployment app/web: replace /x: the object has no such path; nothing was written to cluster member-3's Work",
        ),
    );
    let placement = Placement::new("web", Default::default());
    let page = placements(vec![placement], vec![], vec![failed], &[], vec![]);
    let row = &page.placements[0].clusters[0].overrides;
    assert_eq!(
        (row.state.label.as_str(), row.state.tone),
        ("Override failed", Tone::Bad)
    );
    assert!(
        row.state
            .message
            .starts_with("ResourceOverride app/bad rule 0")
    );
    // A cluster without a Binding, or one the hub has not reported on yet.
    let unknown = overrides_view("web", "member-9", None);
    assert_eq!(unknown.state.label, "Unknown");
    assert_eq!(unknown.render, "/placements/web/clusters/member-9/render");
}

#[test]
fn rows_are_marked_without_bindings_only_when_no_override_applies_and_no_cluster_drifted() {
    use fleethub_crds::binding::{NamespacedName, OverrideSnapshots};
    use fleethub_crds::placement::PlacementStatus;
    let mut run = waiting_run();
    assert!(
        run_may_override(&run),
        "a run that has not fixed its overrides may apply some"
    );
    run.status.as_mut().unwrap().applied_override_snapshots = Some(OverrideSnapshots::default());
    assert!(!run_may_override(&run));
    run.status.as_mut().unwrap().applied_override_snapshots = Some(OverrideSnapshots {
        resource_override_snapshots: vec![NamespacedName {
            namespace: "app".into(),
            name: "image-3".into(),
        }],
        ..Default::default()
    });
    assert!(run_may_override(&run));

    let with_drifted = |n: Option<i32>| {
        let mut p = Placement::new("web", Default::default());
        p.status = Some(PlacementStatus {
            drifted_cluster_count: n,
            ..Default::default()
        });
        p
    };
    assert!(placement_may_drift(None), "an unreadable placement");
    assert!(placement_may_drift(Some(&Placement::new(
        "web",
        Default::default()
    ))));
    assert!(placement_may_drift(Some(&with_drifted(None))));
    assert!(placement_may_drift(Some(&with_drifted(Some(2)))));
    assert!(!placement_may_drift(Some(&with_drifted(Some(0)))));

    let mut view = super::run(&waiting_run(), &[], &RunQuery::default());
    mark_without_bindings(&mut view, "web");
    let rows = &view.stages[0].clusters;
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row.drift, None);
        let o = row.overrides.clone().unwrap();
        assert_eq!((o.state.label.as_str(), o.state.tone), ("None", Tone::Idle));
        assert!(o.snapshots.is_empty());
        assert_eq!(
            o.render,
            format!("/placements/web/clusters/{}/render", row.name)
        );
    }
}

#[test]
fn an_updating_clusters_row_says_what_it_waits_for() {
    let mut run = waiting_run();
    let status = run.status.as_mut().unwrap();
    let cluster = &mut status.stages_status[0].clusters[1];
    cluster.conditions = vec![cond(
        CLUSTER_STARTED,
        TRUE,
        reason::CLUSTER_STARTED,
        "started",
    )];
    cluster.progress = Some("not available yet: phasedrollout app/db: 2/5 pods rolled".into());
    let view = super::run(&run, &[], &RunQuery::default());
    let row = &view.stages[0].clusters[1].state;
    assert_eq!(row.label, "Updating");
    assert_eq!(
        row.message,
        "not available yet: phasedrollout app/db: 2/5 pods rolled"
    );
}

#[test]
fn a_run_waiting_for_approval_shows_the_gate_as_pending_and_names_failures() {
    let run = waiting_run();
    let ar = ApprovalRequest::new(
        "r1-canary",
        fleethub_crds::approval::ApprovalRequestSpec {
            parent_stage_rollout: "r1".into(),
            target_stage: "canary".into(),
            ..Default::default()
        },
    );
    let view = super::run(&run, std::slice::from_ref(&ar), &RunQuery::default());
    assert_eq!(view.row.state.label, "Waiting");
    assert_eq!(view.row.done, 1);
    assert_eq!(view.row.total, 2);
    assert_eq!(view.stages[0].state.label, "Waiting");
    assert_eq!(view.stages[0].clusters[1].state.label, "Failed");
    assert_eq!(
        view.problems,
        vec!["cluster member-3 did not become available within 5m"]
    );
    match &view.stages[0].tasks[0] {
        TaskView::Approval {
            pending, request, ..
        } => {
            assert!(*pending);
            assert_eq!(request.as_deref(), Some("r1-canary"));
        }
        other => panic!("expected an approval task, got {other:?}"),
    }

    // Approved (by kubectl or the dashboard: the same condition) → no longer pending,
    // and the approver is named.
    let mut approved = ar.clone();
    approved.status = Some(fleethub_crds::approval::ApprovalRequestStatus {
        conditions: vec![cond(
            approval::APPROVED,
            TRUE,
            "Approved",
            "approved by alice: lgtm",
        )],
        ..Default::default()
    });
    let view = super::run(&run, &[approved.clone()], &RunQuery::default());
    match &view.stages[0].tasks[0] {
        TaskView::Approval {
            pending,
            approved,
            approved_by,
            note,
            ..
        } => {
            assert!(!*pending);
            assert!(*approved);
            assert_eq!(approved_by.as_deref(), Some("alice"));
            assert_eq!(note.as_deref(), Some("lgtm"));
        }
        other => panic!("expected an approval task, got {other:?}"),
    }
    let runs = std::slice::from_ref(&run);
    assert!(super::approvals(vec![approved], runs).pending.is_empty());
    assert_eq!(super::approvals(vec![ar.clone()], runs).pending.len(), 1);
    // The gate of a run that is gone or has ended waits for no one.
    assert!(super::approvals(vec![ar.clone()], &[]).pending.is_empty());
    let mut ended = run.clone();
    ended.status.as_mut().unwrap().conditions = vec![cond(
        SUCCEEDED,
        FALSE,
        reason::SUPERSEDED,
        "superseded by r2",
    )];
    assert!(super::approvals(vec![ar], &[ended]).pending.is_empty());
}

#[test]
fn every_run_phase_has_its_words_and_tone() {
    let mut run = waiting_run();
    let conditions = &mut run.status.as_mut().unwrap().conditions;
    conditions[1] = cond(PROGRESSING, FALSE, reason::STOPPED, "stopped by a person");
    assert_eq!(run_row(&run).state.label, "Stopped");
    run.status.as_mut().unwrap().conditions = vec![cond(
        SUCCEEDED,
        FALSE,
        reason::FAILED,
        "cluster member-3 failed",
    )];
    assert_eq!(run_row(&run).state.label, "Failed");
    assert_eq!(run_row(&run).state.tone, Tone::Bad);
    run.status.as_mut().unwrap().conditions = vec![cond(
        INITIALIZED,
        FALSE,
        reason::WAITING_FOR_PREVIOUS_RUN,
        "waiting for UpdateRun r0",
    )];
    assert_eq!(run_row(&run).state.label, "Queued");
    run.status = None;
    assert_eq!(run_row(&run).state.label, "Pending");
    assert_eq!(
        run_row(&run).state.message,
        "the hub has not picked this run up yet"
    );
}

#[test]
fn the_approvals_page_counts_the_approvals_of_a_gate_with_a_policy() {
    let run = waiting_run();
    let mut ar = ApprovalRequest::new(
        "r1-canary",
        fleethub_crds::approval::ApprovalRequestSpec {
            parent_stage_rollout: "r1".into(),
            target_stage: "canary".into(),
            policy: Some(fleethub_crds::approval::ApprovalPolicy {
                min_approvals: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    ar.status = Some(fleethub_crds::approval::ApprovalRequestStatus {
        approvals: vec![fleethub_crds::approval::ApprovalRecord {
            user: "alice".into(),
            time: Time(jiff::Timestamp::UNIX_EPOCH),
            comment: None,
            resource_snapshot_index: None,
        }],
        ..Default::default()
    });
    let view = super::approvals(vec![ar.clone()], std::slice::from_ref(&run));
    assert_eq!(view.pending.len(), 1, "one of two approvals: still pending");
    assert_eq!(
        view.pending[0].progress().as_deref(),
        Some("1 of 2 approvals: alice")
    );
    // Without a policy there is no count.
    let plain = super::approval_row(&ApprovalRequest::new("r1-prod", Default::default()), None);
    assert_eq!(plain.progress(), None);
}
