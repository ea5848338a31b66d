//! The staged-update engine on the real hub: the three-stage rollout of the reference design,
//! with one gate approved through real `kubectl patch --subresource=status` and one through the
//! API, clusters updated in the strategy's order, and the deletion stage.
//!
//! The hub under test is the fleet's running `fleethub-hub` (`deploy/local/fleet up` restarts it
//! from the current build). The members' reports come from a stand-in for the member agents on
//! MemberClusters of the test's own: this checks the hub's side of the contract.

mod common;

use common::{Scenario, TIMEOUT, clusters_in_order, kubectl, simulate_members};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::{ApprovalRequest, Binding, UpdateRun, Work};
use fleethub_testkit::{Fleet, wait_deleted, wait_for};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test]
async fn three_stage_rollout_with_gates_in_order() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "su").await;
    let hub = s.hub.clone();
    let (run, placement) = (s.run.clone(), s.placement.clone());
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let can = s.member("can", json!({"env": s.env("canary")})).await;
    let prod1 = s
        .member("prod1", json!({"env": s.env("production"), "order": "2"}))
        .await;
    let prod2 = s
        .member("prod2", json!({"env": s.env("production"), "order": "1"}))
        .await;
    let old = s.member("old", json!({})).await;
    s.placement(&[&stg, &can, &prod1, &prod2, &old], false)
        .await;
    // A cluster the placement no longer selects: its binding becomes Unscheduled, and the run's
    // deletion stage removes it.
    s.pick(&[&stg, &can, &prod1, &prod2]).await;
    let bindings: Api<Binding> = Api::all(hub.clone());
    wait_for(
        &bindings,
        &format!("{placement}-{old}"),
        "the old cluster's binding to be Unscheduled",
        TIMEOUT,
        |b: Option<&Binding>| {
            b.is_some_and(|b| b.spec.state == fleethub_crds::binding::BindingState::Unscheduled)
        },
    )
    .await
    .unwrap();
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "2s"}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": s.env("canary")}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}},
         "sortingLabelKey": "order",
         "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1s"}]}]))
        .await;
    let (updates, members_task) = simulate_members(hub.clone(), placement.clone(), 0);
    s.start_run(0).await;

    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    let exists = |o: Option<&ApprovalRequest>| o.is_some();

    // staging runs, waits 2s, then canary runs and waits for approval.
    wait_for(
        &approvals,
        &format!("{run}-canary"),
        "the canary ApprovalRequest",
        TIMEOUT,
        exists,
    )
    .await
    .unwrap();
    // The request is created just before the run records that it waits for it.
    let waiting = wait_for(
        &runs,
        &run,
        "the run to wait for the canary approval",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, "Progressing"))
                .is_some_and(|c| c.reason == "UpdateRunWaiting")
        },
    )
    .await
    .unwrap();
    assert_eq!(
        clusters_in_order(&updates),
        [stg.clone(), can.clone()],
        "only staging and canary before the canary gate"
    );
    let progressing = find(&waiting.status.as_ref().unwrap().conditions, "Progressing").unwrap();
    assert_eq!(progressing.status, "False");
    assert!(
        progressing.message.contains(&format!(
            "waits for approval of ApprovalRequest {run}-canary"
        )),
        "{}",
        progressing.message
    );
    let request = approvals.get(&format!("{run}-canary")).await.unwrap();
    assert_eq!(request.labels().get("fleethub.dev/update-run"), Some(&run));
    assert_eq!(request.spec.target_stage, "canary");

    // Approve the canary gate the way the reference design documents, with kubectl.
    let patch = format!(
        r#"{{"status":{{"conditions":[{{"type":"Approved","status":"True","reason":"lgtm","message":"lgtm","lastTransitionTime":"{}","observedGeneration":1}}]}}}}"#,
        jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")
    );
    kubectl(
        fleet,
        &[
            "patch",
            "approvalrequests",
            &format!("{run}-canary"),
            "--type=merge",
            "-p",
            &patch,
            "--subresource=status",
        ],
    );

    // production runs in `order` (prod2 has order 1), then waits for its own approval.
    wait_for(
        &approvals,
        &format!("{run}-production"),
        "the production ApprovalRequest",
        TIMEOUT,
        exists,
    )
    .await
    .unwrap();
    let accepted = approvals.get(&format!("{run}-canary")).await.unwrap();
    let conds = accepted.status.unwrap().conditions;
    assert!(
        is_true(&conds, "Approved") && is_true(&conds, "ApprovalAccepted"),
        "{conds:?}"
    );
    assert_eq!(
        clusters_in_order(&updates),
        [stg.clone(), can.clone(), prod2.clone(), prod1.clone()]
    );

    // Approve production through the API (the dashboard's path).
    common::approve(&approvals, &format!("{run}-production"))
        .await
        .unwrap();

    let done = wait_for(
        &runs,
        &run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    members_task.abort();

    let status = done.status.unwrap();
    assert_eq!(status.current_stage, None);
    assert!(status.end_time.is_some());
    let stages: Vec<_> = status
        .stages_status
        .iter()
        .map(|s| s.stage_name.as_str())
        .collect();
    assert_eq!(stages, ["staging", "canary", "production"]);
    for stage in &status.stages_status {
        assert!(is_true(&stage.conditions, "Succeeded"), "{stage:?}");
        for c in &stage.clusters {
            assert!(
                is_true(&c.conditions, "Succeeded")
                    && c.start_time.is_some()
                    && c.end_time.is_some(),
                "{c:?}"
            );
        }
    }
    // Stage order in time, and staging's TimedWait lasted its 2s from the stage's completion.
    for pair in status.stages_status.windows(2) {
        assert!(pair[1].start_time.as_ref().unwrap().0 >= pair[0].end_time.as_ref().unwrap().0);
    }
    let staging = &status.stages_status[0];
    let waited = staging.end_time.as_ref().unwrap().0.as_second()
        - staging
            .clusters_completed_time
            .as_ref()
            .unwrap()
            .0
            .as_second();
    assert!(waited >= 2, "staging waited {waited}s");
    let prod: Vec<_> = status.stages_status[2]
        .clusters
        .iter()
        .map(|c| c.cluster_name.clone())
        .collect();
    assert_eq!(prod, [prod2.clone(), prod1.clone()]);

    // Every cluster's Binding points at index 0 via this run; the removed cluster's is gone.
    for name in [&stg, &can, &prod1, &prod2] {
        let b = bindings.get(&format!("{placement}-{name}")).await.unwrap();
        assert_eq!(
            (
                b.spec.resource_snapshot_index,
                b.spec.update_run_name.as_deref()
            ),
            (Some(0), Some(run.as_str()))
        );
        let available =
            find(&b.status.as_ref().unwrap().conditions, "Available").map(|c| c.status.clone());
        assert_eq!(
            available.as_deref(),
            Some("True"),
            "binding of {name} rolls up the member's report"
        );
    }
    wait_deleted(&bindings, &format!("{placement}-{old}"), TIMEOUT)
        .await
        .unwrap();
    assert!(is_true(
        &status.deletion_stage_status.unwrap().conditions,
        "Succeeded"
    ));

    // The run's story is told in events.
    let events = kubectl(
        fleet,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name={run}"),
            "-o",
            "jsonpath={.items[*].reason}",
        ],
    );
    for reason in [
        "UpdateRunInitializedSuccessfully",
        "ClusterUpdatingStarted",
        "AfterStageTaskApprovalRequestCreated",
        "UpdateRunSucceeded",
    ] {
        assert!(events.contains(reason), "no {reason} event in {events}");
    }

    // The hub's metrics saw the run through.
    let (_, metrics) = fleethub_testkit::http_get(fleet.hub_health_addr(), "/metrics")
        .await
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    assert!(value("fleethub_hub_update_runs{state=\"Succeeded\"}") >= 1.0);
    assert!(value("fleethub_hub_cluster_update_seconds_count") >= 4.0);
    assert!(value("fleethub_hub_stage_seconds_count") >= 3.0);
    assert!(value("fleethub_hub_approval_wait_seconds_count") >= 2.0);
    assert!(value("fleethub_hub_reconciles_total{controller=\"update-run\"}") >= 1.0);

    // The version metrics: every cluster the placement selects runs snapshot 0, each got there
    // from none and became available, and the cluster no longer selected has no series. (The
    // placement controller writes them on the reconcile that follows the Bindings' reports.)
    let snapshot = |cluster: &str| {
        format!("fleethub_hub_cluster_snapshot{{placement=\"{placement}\",cluster=\"{cluster}\"}}")
    };
    let first = format!(
        "fleethub_hub_cluster_transitions_total{{placement=\"{placement}\",from=\"none\",to=\"0\",outcome=\"available\"}}"
    );
    let versions = fleethub_testkit::poll_until(
        "the version metrics to show every cluster at snapshot 0",
        TIMEOUT,
        || async {
            let (_, text) = fleethub_testkit::http_get(fleet.hub_health_addr(), "/metrics")
                .await
                .ok()?;
            let has = |line: String| text.lines().any(|l| l == line);
            let all = [&stg, &can, &prod1, &prod2]
                .iter()
                .all(|c| has(format!("{} 0", snapshot(c))));
            (all && has(format!("{first} 4"))).then_some(text)
        },
    )
    .await
    .unwrap();
    assert!(!versions.contains(&snapshot(&old)), "{versions}");
    assert!(
        versions.lines().any(|l| l
            == format!("fleethub_hub_placement_latest_snapshot{{placement=\"{placement}\"}} 0")),
        "{versions}"
    );

    // Deleting the run deletes its approval requests (owner references, real garbage collector);
    // the clusters keep running what they have.
    runs.delete(&run, &Default::default()).await.unwrap();
    wait_deleted(&approvals, &format!("{run}-canary"), TIMEOUT)
        .await
        .unwrap();
    let works: Api<Work> = Api::all(hub.clone());
    let left = works
        .list(&ListParams::default().labels(&format!("fleethub.dev/placement={placement}")))
        .await
        .unwrap();
    assert_eq!(left.items.len(), 4, "one Work per selected cluster stays");
}
