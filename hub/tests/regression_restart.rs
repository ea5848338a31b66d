//! A hub killed (SIGKILL) while a run is held by a regressed cluster: the restarted hub keeps
//! it held (the next stage not bound, the soak not elapsed although its time passed while the
//! hub was down) and, once the cluster recovers, finishes it, each cluster updated once.
//!
//! A test binary of its own: it kills the fleet's hub, which other tests running beside it in
//! one binary would feel.

mod common;

use std::time::Duration;

use common::TIMEOUT;
use common::regressions::{HeldRun, progressing, report, reported_work};
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::reason;
use fleethub_crds::{Binding, UpdateRun, names};
use fleethub_testkit::{Fleet, wait_for};
use kube::Api;

#[tokio::test]
async fn a_hub_killed_while_a_run_is_held_keeps_it_held_and_skips_no_gate() {
    let fleet = Fleet::get().unwrap();
    let h = HeldRun::new(fleet, "rk", "3s").await;
    let (hub, run, placement, prod) = (
        h.s.hub.clone(),
        h.s.run.clone(),
        h.s.placement.clone(),
        h.prod.clone(),
    );
    let runs: Api<UpdateRun> = Api::all(hub.clone());

    // SIGKILL the hub; the soak's 3 s pass while it is down; it comes back.
    fleet.kill("hub").unwrap();
    let bindings: Api<Binding> = Api::all(hub.clone());
    let prod_binding = names::binding_name(&placement, &prod);
    let bound = |b: Option<&Binding>| {
        b.is_some_and(|b| b.spec.update_run_name.as_deref() == Some(run.as_str()))
    };
    let early = wait_for(
        &bindings,
        &prod_binding,
        "production bound",
        Duration::from_secs(5),
        bound,
    )
    .await;
    assert!(
        early.is_err(),
        "production was bound while the hub was down"
    );
    common::start_hub(fleet).await;
    // The restarted hub keeps the run held: production is not bound, the soak not elapsed.
    let early = wait_for(
        &bindings,
        &prod_binding,
        "production bound",
        Duration::from_secs(8),
        bound,
    )
    .await;
    assert!(
        early.is_err(),
        "the restarted hub bound production while staging was regressed"
    );
    let still = runs.get(&run).await.unwrap();
    assert_eq!(
        progressing(Some(&still)).map(|(why, _)| why).as_deref(),
        Some(reason::CLUSTER_REGRESSED)
    );
    let soak = &still.status.as_ref().unwrap().stages_status[0].after_stage_task_status[0];
    assert_eq!(
        find(&soak.conditions, "WaitTimeElapsed").map(|c| c.reason.as_str()),
        Some(reason::SOAK_PAUSED)
    );

    // Recovered: the run finishes; production was updated once.
    report(&hub, &h.work, true, "available again").await;
    wait_for(
        &runs,
        &run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    let prod_work = reported_work(&hub, &placement, &prod, 0).await;
    assert_eq!(
        prod_work.metadata.generation,
        Some(1),
        "production's Work written once"
    );
    h.members.abort();
}
