//! Faults during a staged update with the fleet's real member agents (member-1..3): a bad
//! rollout, a member agent killed mid-apply and silent long enough to turn its member
//! unhealthy, and the hub's API server restarted mid-run. Each test checks that nothing was
//! lost: clusters updated in the strategy's order, nothing touched after a failure, and the
//! run (or its rollback) ends with every member on the expected version.
//!
//! The tests share member-1..3 and stop their agents, so they run one at a time.

mod common;

use std::time::Instant;

use common::TIMEOUT;
use common::real::{Rollout, image_of, wait_healthy};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::update_run::{PROGRESSING, SUCCEEDED};
use fleethub_crds::{MemberCluster, UpdateRun, Work, names};
use fleethub_testkit::{Fleet, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::json;

/// The fault tests take member-1..3 (and their agents) for themselves.
static MEMBERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const V1: &str = "registry.invalid/web:1";
const V2: &str = "registry.invalid/web:2";

fn progressing_reason(run: &UpdateRun) -> Option<String> {
    let s = run.status.as_ref()?;
    find(&s.conditions, PROGRESSING).map(|c| c.reason.clone())
}

/// The snapshot index of the Work member `cluster` holds for the placement, and its generation.
async fn work_of(r: &Rollout, cluster: &str) -> (i64, Option<i64>) {
    let works: Api<Work> = Api::namespaced(r.hub.clone(), &names::member_namespace(cluster));
    let w = works.get(&names::work_name(&r.placement)).await.unwrap();
    (w.spec.resource_snapshot_index, w.metadata.generation)
}

async fn member_image(fleet: &Fleet, i: usize, ns: &str) -> Option<String> {
    let d: Api<Deployment> = Api::namespaced(fleet.member(i).await.unwrap(), ns);
    image_of(&d.get("web").await.unwrap())
}

/// Starts the member agent this test killed again when it ends, however it ends, before the
/// rollout (declared earlier) is cleaned up: the agent removes its Work's finalizer.
struct FleetHubBack(&'static Fleet);

impl Drop for FleetHubBack {
    fn drop(&mut self) {
        if let Err(e) = self.0.start_fleethub() {
            eprintln!("could not restart the fleet's member agents: {e}");
        }
    }
}

async fn clean_up(r: &Rollout, runs: &[&str]) {
    let placements: Api<fleethub_crds::Placement> = Api::all(r.hub.clone());
    let _ = placements.delete(&r.placement, &Default::default()).await;
    let api: Api<UpdateRun> = Api::all(r.hub.clone());
    for run in runs {
        let _ = api.delete(run, &Default::default()).await;
    }
}

#[tokio::test]
async fn a_bad_rollout_stops_at_its_first_cluster_and_a_rollback_restores_it() {
    let _members = MEMBERS.lock().await;
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(fleet, "bad", V1, [json!([]), json!([]), json!([])]).await;
    let good = r.run_to_success("v1", 0).await;
    for i in 1..=3 {
        r.wait_running(fleet, i, V1).await;
    }
    let before = [work_of(&r, "member-2").await, work_of(&r, "member-3").await];

    // Version 2 never becomes ready (kwok keeps its pods unready).
    r.set_image(V2, true).await;
    r.wait_snapshot(1).await;
    let started = Instant::now();
    let bad = r.start_run("v2", 1, Some("20s")).await;
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let stopped = wait_for(
        &runs,
        &bad,
        "the run to stop at the failing cluster",
        TIMEOUT,
        |run: Option<&UpdateRun>| {
            run.and_then(progressing_reason).as_deref() == Some("ClusterUpdateFailed")
        },
    )
    .await
    .unwrap();
    println!(
        "the bad rollout stopped {:.1}s after its run was created (health timeout 20s)",
        started.elapsed().as_secs_f64()
    );
    let status = stopped.status.unwrap();
    let message = &find(&status.conditions, PROGRESSING).unwrap().message;
    assert!(
        message.contains("stage staging")
            && message.contains("cluster member-1")
            && message.contains("deployment")
            && message.contains("/web"),
        "the reason names the stage, the cluster and the Deployment: {message}"
    );
    let staging = &status.stages_status[0].clusters[0];
    assert_eq!(staging.cluster_name, "member-1");
    let failed = find(&staging.conditions, SUCCEEDED).unwrap();
    assert_eq!(failed.status, "False", "{failed:?}");
    // No later cluster was touched: not started, Works and Deployments still at version 1.
    for stage in &status.stages_status[1..] {
        for c in &stage.clusters {
            assert!(
                c.start_time.is_none(),
                "{} started after a failure",
                c.cluster_name
            );
        }
    }
    assert_eq!(
        [work_of(&r, "member-2").await, work_of(&r, "member-3").await],
        before
    );
    for i in 2..=3 {
        assert_eq!(member_image(fleet, i, &r.ns).await.as_deref(), Some(V1));
    }
    // The run stays stopped: still nothing further starts.
    let again = runs.get(&bad).await.unwrap();
    assert!(
        again.status.unwrap().stages_status[1].clusters[0]
            .start_time
            .is_none()
    );

    // A rollback run to snapshot 0 supersedes the stuck run and restores version 1.
    let rollback = r.run_to_success("rollback", 0).await;
    for i in 1..=3 {
        r.wait_running(fleet, i, V1).await;
    }
    let superseded = runs.get(&bad).await.unwrap().status.unwrap();
    let ended = find(&superseded.conditions, SUCCEEDED).unwrap();
    assert_eq!(
        (ended.status.as_str(), ended.reason.as_str()),
        ("False", "UpdateRunSuperseded")
    );
    assert!(
        ended
            .message
            .contains(rollback.metadata.name.as_deref().unwrap())
    );
    clean_up(
        &r,
        &[
            good.metadata.name.as_deref().unwrap(),
            &bad,
            rollback.metadata.name.as_deref().unwrap(),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_agent_killed_mid_apply_turns_its_member_unhealthy_and_the_run_resumes_when_it_returns()
{
    let _members = MEMBERS.lock().await;
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(fleet, "agent", V1, [json!([]), json!([]), json!([])]).await;
    let good = r.run_to_success("v1", 0).await;
    r.set_image(V2, false).await;
    r.wait_snapshot(1).await;

    // Kill canary's agent once its version-2 Work is written: it never applies it.
    let run = r.start_run("v2", 1, Some("30s")).await;
    let works: Api<Work> = Api::namespaced(r.hub.clone(), &names::member_namespace("member-2"));
    let work = names::work_name(&r.placement);
    wait_for(
        &works,
        &work,
        "canary's version-2 Work",
        TIMEOUT,
        |w: Option<&Work>| w.is_some_and(|w| w.spec.resource_snapshot_index == 1),
    )
    .await
    .unwrap();
    let _agent_back = FleetHubBack(fleet);
    fleet.kill("member-2-agent").unwrap();
    let killed = Instant::now();

    // Without heartbeats the member turns unhealthy, saying since when.
    let members: Api<MemberCluster> = Api::all(r.hub.clone());
    let unhealthy = wait_for(
        &members,
        "member-2",
        "member-2 to become unhealthy",
        TIMEOUT,
        |m: Option<&MemberCluster>| {
            m.and_then(|m| m.status.as_ref())
                .and_then(|s| find(&s.conditions, "Healthy"))
                .is_some_and(|c| c.status == "False")
        },
    )
    .await
    .unwrap();
    println!(
        "member-2 Healthy=False {:.1}s after its agent was killed (heartbeat every 5s)",
        killed.elapsed().as_secs_f64()
    );
    let status = unhealthy.status.unwrap();
    let healthy = find(&status.conditions, "Healthy").unwrap();
    assert!(!healthy.message.is_empty(), "{healthy:?}");

    // The run holds at canary: after the health timeout it stops, naming the silent member.
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let stopped = wait_for(
        &runs,
        &run,
        "the run to stop at canary",
        TIMEOUT,
        |run: Option<&UpdateRun>| {
            run.and_then(progressing_reason).as_deref() == Some("ClusterUpdateFailed")
        },
    )
    .await
    .unwrap();
    let message = find(&stopped.status.as_ref().unwrap().conditions, PROGRESSING)
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("cluster member-2")
            && message.contains("MemberCluster member-2 is not healthy"),
        "{message}"
    );
    assert_eq!(member_image(fleet, 3, &r.ns).await.as_deref(), Some(V1));
    assert_eq!(work_of(&r, "member-3").await.0, 0, "production was touched");

    // The agent comes back: it applies the Work, the member is healthy, the run resumes by
    // itself and finishes, in order.
    fleet.start_fleethub().unwrap();
    wait_healthy(&r.hub, "member-2").await;
    let done = wait_for(
        &runs,
        &run,
        "the run to resume and succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    common::real::assert_stage_order(&done);
    for i in 1..=3 {
        r.wait_running(fleet, i, V2).await;
    }
    assert!(is_true(
        &done.status.unwrap().stages_status[1].clusters[0].conditions,
        SUCCEEDED
    ));
    clean_up(&r, &[good.metadata.name.as_deref().unwrap(), &run]).await;
}

#[tokio::test]
async fn a_run_converges_across_a_hub_api_server_restart() {
    let _members = MEMBERS.lock().await;
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(
        fleet,
        "apisrv",
        V1,
        [json!([]), json!([{"type": "Approval"}]), json!([])],
    )
    .await;
    let run = r.start_run("v1", 0, None).await;
    // Restart the hub's API server while the run waits at the canary gate.
    let approvals: Api<fleethub_crds::ApprovalRequest> = Api::all(r.hub.clone());
    let gate = names::approval_request_name(&run, "canary");
    wait_for(
        &approvals,
        &gate,
        "the canary gate",
        TIMEOUT,
        |a: Option<&fleethub_crds::ApprovalRequest>| a.is_some(),
    )
    .await
    .unwrap();
    fleet.kill("hub-apiserver").unwrap();
    fleet.start_control_plane().unwrap();
    let back = Instant::now();

    // Approving right after the restart must not be lost; the run finishes on every member.
    let api: Api<fleethub_crds::ApprovalRequest> = Api::all(fleet.hub().await.unwrap());
    common::approve(&api, &gate).await.unwrap();
    let runs: Api<UpdateRun> = Api::all(fleet.hub().await.unwrap());
    // Generous: after a restart every watcher of the hub and the agents re-lists (their resource
    // versions predate the new server's watch cache), which takes long on a loaded machine.
    let done = wait_for(
        &runs,
        &run,
        "the run to succeed",
        3 * TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    println!(
        "the run finished {:.1}s after the hub API server was back",
        back.elapsed().as_secs_f64()
    );
    common::real::assert_stage_order(&done);
    for i in 1..=3 {
        r.wait_running(fleet, i, V1).await;
    }
    clean_up(&r, &[&run]).await;
}
