//! A run with a stage of over 100 clusters keeps their order in an UpdateRunPlan written once at
//! initialization, not in every status write; the hub killed again and again during the run
//! still updates every cluster once, in that order. A run whose plan is deleted fails at once,
//! saying so, instead of guessing an order.

mod common;

use std::time::Duration;

use common::{Scenario, TIMEOUT, clusters_in_order, simulate_members};
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::{PROGRESSING, SUCCEEDED, reason};
use fleethub_crds::update_run_plan::{self, UpdateRunPlan};
use fleethub_crds::{UpdateRun, Work, names};
use fleethub_testkit::{Fleet, wait_for};
use futures::StreamExt;
use kube::{Api, ResourceExt};
use serde_json::json;

/// Over [`fleethub_crds::stored_stage::DETAILED_STAGE_CLUSTERS`].
const CLUSTERS: usize = 110;
/// Clusters updated at once: enough waves for the crashes to land mid-stage.
const CONCURRENCY: usize = 5;

#[tokio::test]
async fn a_large_stage_keeps_its_order_in_a_plan_across_hub_crashes() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "lr").await;
    let hub = s.hub.clone();
    // The sorting label orders the clusters differently from their names.
    let order = |i: usize| (i * 37) % CLUSTERS;
    let members: Vec<String> = futures::stream::iter(0..CLUSTERS)
        .map(|i| {
            let s = &s;
            async move {
                s.member(
                    &format!("c{i:03}"),
                    json!({"env": s.env("edge"), "order": order(i).to_string()}),
                )
                .await
            }
        })
        .buffered(10)
        .collect()
        .await;
    let all: Vec<&String> = members.iter().collect();
    s.placement(&all, false).await;
    s.strategy(json!([
        {"name": "edge", "labelSelector": {"matchLabels": {"env": s.env("edge")}},
         "sortingLabelKey": "order", "maxConcurrency": CONCURRENCY}]))
        .await;
    s.cleanup.track::<UpdateRunPlan>("hub", None, &s.run);
    let (updates, members_task) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;

    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let plans: Api<UpdateRunPlan> = Api::all(hub.clone());
    let plan = wait_for(
        &plans,
        &s.run,
        "the run's UpdateRunPlan",
        TIMEOUT,
        |p: Option<&UpdateRunPlan>| p.is_some(),
    )
    .await
    .unwrap();
    let mut expected = members.clone();
    expected.sort_by_key(|m| {
        let i: usize = m[1..4].parse().unwrap();
        order(i)
    });
    assert_eq!(plan.spec.stages.len(), 1);
    assert_eq!(plan.spec.stages[0].stage_name, "edge");
    assert_eq!(plan.spec.stages[0].cluster_name_list, expected.join(","));
    assert_eq!(plan.spec.cluster_count as usize, CLUSTERS);
    let owner = &plan.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("UpdateRun", s.run.as_str())
    );

    // Crash the hub every 0.3–1 s until the run is done.
    let mut kills = 0;
    let mut pace = 0x2545F4914F6CDD1Du64;
    let deadline = tokio::time::Instant::now() + 3 * TIMEOUT;
    loop {
        pace ^= pace << 13;
        pace ^= pace >> 7;
        pace ^= pace << 17;
        // Fault injection pacing, not a wait for state: the run's completion is watched below.
        tokio::time::sleep(Duration::from_millis(300 + pace % 700)).await;
        if common::succeeded(runs.get_opt(&s.run).await.unwrap().as_ref()) {
            break;
        }
        fleet.kill("hub").unwrap();
        kills += 1;
        common::start_hub(fleet).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not finish within {:?} ({kills} kills)",
            3 * TIMEOUT
        );
    }
    let done = wait_for(
        &runs,
        &s.run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    members_task.abort();
    assert!(kills >= 1, "the run finished before the first crash");

    // Every cluster updated once (its Work written once), in the plan's order: at most
    // CONCURRENCY at a time, so a cluster starts once all but CONCURRENCY - 1 of those before it
    // in the plan did, and before any CONCURRENCY places after it (the Works of clusters started
    // together are written together, in any order).
    let seen = clusters_in_order(&updates);
    assert_eq!(seen.len(), CLUSTERS, "after {kills} crashes");
    for (at, cluster) in seen.iter().enumerate() {
        let planned = expected.iter().position(|c| c == cluster).unwrap();
        assert!(
            at.abs_diff(planned) < CONCURRENCY,
            "cluster {cluster}, {planned} in the plan, started {at} (after {kills} crashes): {seen:?}"
        );
    }
    for c in &expected {
        let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace(c));
        let w = works.get(&names::work_name(&s.placement)).await.unwrap();
        assert_eq!(
            w.metadata.generation,
            Some(1),
            "cluster {c}'s Work was rewritten"
        );
    }

    // The status has the stage's progress, not its names; with its plan, every cluster.
    let stored = common::kubectl(fleet, &["get", "updaterun", &s.run, "-o", "json"]);
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    let stage = &stored["status"]["stagesStatus"][0];
    assert_eq!(stage["clustersInPlan"], true, "{stage}");
    assert!(stage.get("clusterNameList").is_none(), "{stage}");
    assert_eq!(stage["succeededClusters"], format!("0-{}", CLUSTERS - 1));
    assert_eq!(stored["status"]["planRef"]["uid"], plan.uid().unwrap());
    let read = update_run_plan::read_run(&hub, done).await.unwrap();
    let clusters = &read.status.as_ref().unwrap().stages_status[0].clusters;
    let names: Vec<&str> = clusters.iter().map(|c| c.cluster_name.as_str()).collect();
    assert_eq!(
        names,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(
        clusters
            .iter()
            .all(|c| fleethub_crds::conditions::is_true(&c.conditions, SUCCEEDED))
    );

    // A run whose plan is deleted cannot go on, and says why.
    let second = format!("{}-again", s.run);
    s.cleanup.track::<UpdateRunPlan>("hub", None, &second);
    s.create(
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": second},
        "spec": {"placementName": s.placement, "resourceSnapshotIndex": "0",
                 "stagedRolloutStrategyName": s.strategy, "state": "Initialize"}}),
    )
    .await;
    let planned = |r: Option<&UpdateRun>| {
        r.and_then(|r| r.status.as_ref())
            .and_then(|s| find(&s.conditions, PROGRESSING))
            .is_some_and(|c| c.reason == reason::NOT_STARTED)
    };
    wait_for(
        &runs,
        &second,
        "the second run to be planned",
        TIMEOUT,
        planned,
    )
    .await
    .unwrap();
    plans.delete(&second, &Default::default()).await.unwrap();
    let failed = wait_for(
        &runs,
        &second,
        "the second run to fail",
        TIMEOUT,
        common::ended,
    )
    .await
    .unwrap();
    let c = find(&failed.status.as_ref().unwrap().conditions, SUCCEEDED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reason::PLAN_LOST)
    );
    assert!(
        c.message.contains(&format!("UpdateRunPlan {second}")) && c.message.contains("deleted"),
        "{}",
        c.message
    );
}
