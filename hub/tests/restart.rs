//! Restart safety: the hub is killed (SIGKILL) again and again during a run and restarted; the
//! run still completes with every cluster updated once, in the strategy's order, and no gate
//! passed early. Everything the engine decides on lives in the run's status.

mod common;

use std::time::Duration;

use common::{Scenario, TIMEOUT, clusters_in_order, simulate_members};
use fleethub_crds::{ApprovalRequest, UpdateRun, Work, names};
use fleethub_testkit::{Fleet, wait_for};
use kube::Api;
use serde_json::json;

#[tokio::test]
async fn a_run_survives_repeated_hub_crashes() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "rs").await;
    let hub = s.hub.clone();
    let stg = [
        s.member("stg1", json!({"env": s.env("staging")})).await,
        s.member("stg2", json!({"env": s.env("staging")})).await,
    ];
    let can = s.member("can", json!({"env": s.env("canary")})).await;
    let mut prod = Vec::new();
    for (i, order) in ["3", "1", "2"].iter().enumerate() {
        prod.push(
            s.member(
                &format!("prod{i}"),
                json!({"env": s.env("production"), "order": order}),
            )
            .await,
        );
    }
    let all: Vec<&String> = stg.iter().chain([&can]).chain(&prod).collect();
    s.placement(&all, false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "10s"}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": s.env("canary")}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}},
         "sortingLabelKey": "order", "maxConcurrency": 1,
         "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "6s"}]}]))
        .await;
    let (updates, members_task) = simulate_members(hub.clone(), s.placement.clone(), 0);

    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let succeeded = common::succeeded;

    // Crash the hub every 0.3–1 s until the run is done. The gates make sure the run spans at
    // least 10 crashes: a person approves canary after the 5th and production after the 10th.
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    let mut approved_at: Vec<(String, jiff::Timestamp)> = Vec::new();
    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + 3 * TIMEOUT;
    let mut pace = 0x2545F4914F6CDD1Du64;
    loop {
        pace ^= pace << 13;
        pace ^= pace >> 7;
        pace ^= pace << 17;
        // Fault injection pacing, not a wait for state: the run's completion is watched below.
        tokio::time::sleep(Duration::from_millis(300 + pace % 700)).await;
        if succeeded(runs.get_opt(&s.run).await.unwrap().as_ref()) {
            break;
        }
        for (stage, after) in [("canary", 5), ("production", 10)] {
            let name = format!("{}-{stage}", s.run);
            let pending = !approved_at.iter().any(|(n, _)| *n == name);
            if kills >= after && pending && approvals.get_opt(&name).await.unwrap().is_some() {
                common::approve(&approvals, &name).await.unwrap();
                approved_at.push((name, jiff::Timestamp::now()));
            }
        }
        fleet.kill("hub").unwrap();
        kills += 1;
        // The next crash comes 0.3–1 s after the new hub leads (it takes its own lease back at
        // once), so every life has a chance to move the run, however loaded the machine.
        common::start_hub(fleet).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not finish within {:?} ({kills} kills)",
            3 * TIMEOUT
        );
    }
    let done = wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    members_task.abort();

    // Every cluster updated once (its Work written once: generation 1), in order.
    let expected: Vec<String> = [&stg[0], &stg[1], &can, &prod[1], &prod[2], &prod[0]]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(
        clusters_in_order(&updates),
        expected,
        "after {kills} crashes"
    );
    for c in &expected {
        let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace(c));
        let w = works.get(&names::work_name(&s.placement)).await.unwrap();
        assert_eq!(
            w.metadata.generation,
            Some(1),
            "cluster {c}'s Work was rewritten"
        );
    }
    // No gate passed early: canary after staging's 6s wait; production after the approval.
    let status = done.status.unwrap();
    let when = |c: &str| {
        updates
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _, _)| n == c)
            .unwrap()
            .1
    };
    let staging_done = status.stages_status[0]
        .clusters_completed_time
        .as_ref()
        .unwrap()
        .0;
    assert!(
        when(&can).as_second() - staging_done.as_second() >= 10,
        "canary started before the 10s soak ended"
    );
    assert!(
        when(&prod[1]) >= approved_at[0].1,
        "production started before the canary approval"
    );
    let production = &status.stages_status[2];
    let soak = production.end_time.as_ref().unwrap().0.as_second()
        - production
            .clusters_completed_time
            .as_ref()
            .unwrap()
            .0
            .as_second();
    assert!(soak >= 6, "production's 6s soak lasted {soak}s");
    // Status times have whole seconds; the approval time is this process's, taken after the
    // patch returned.
    assert!(
        production.end_time.as_ref().unwrap().0.as_second() >= approved_at[1].1.as_second(),
        "production ended before its approval"
    );
    assert!(kills >= 10, "only {kills} crashes happened during the run");
    runs.delete(&s.run, &Default::default()).await.unwrap();
}
