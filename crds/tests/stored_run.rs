//! A large stage's compact form on a real hub API server: the status the hub writes for a stage
//! of over 100 clusters (the plan as one string, the succeeded and the updating clusters as
//! index ranges) passes admission and reads back as written, and a malformed range is refused
//! naming the field. The writes are dry runs: the hub's own run controller may write the run's
//! status meanwhile, and nothing here competes with it.

use std::time::{Duration, Instant};

use fleethub_crds::UpdateRun;
use fleethub_crds::cluster_phase::{ClusterPhase, phase};
use fleethub_crds::conditions::TRUE;
use fleethub_crds::stored_stage::{PROGRESS_KEPT, started};
use fleethub_crds::update_run::{
    ClusterUpdatingStatus, SUCCEEDED, StageUpdatingStatus, UpdateRunStatus, reason,
};
use fleethub_testkit::{Cleanup, Fleet, unique_name};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ApiResource, DynamicObject, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use serde_json::json;

const CLUSTERS: usize = 300;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + second).unwrap())
}

/// Clusters 0–99 succeeded, 100–249 updating (started in three batches, the first 20 with a
/// progress text), 250–299 not started.
fn stage() -> StageUpdatingStatus {
    let clusters = (0..CLUSTERS)
        .map(|i| {
            let name = format!("edge-{i:03}");
            let start = at(i as i64 / 50);
            let mut c = ClusterUpdatingStatus {
                cluster_name: name.clone(),
                ..Default::default()
            };
            if i < 250 {
                c.conditions = vec![started(&name, start.clone())];
                c.start_time = Some(start.clone());
            }
            if i < 100 {
                c.conditions.push(Condition {
                    type_: SUCCEEDED.into(),
                    status: TRUE.into(),
                    reason: reason::CLUSTER_SUCCEEDED.into(),
                    message: format!("cluster {name} succeeded"),
                    last_transition_time: start,
                    observed_generation: None,
                });
                c.start_time = None;
            } else if i < 120 {
                c.progress = Some(format!("not available yet: 0/1 replicas of {name}"));
            }
            c
        })
        .collect();
    StageUpdatingStatus {
        stage_name: "production".into(),
        clusters,
        start_time: Some(at(0)),
        ..Default::default()
    }
}

/// Writes `status` to run `name` as a dry run, from its current version (again after a
/// conflict with the hub's own write), and returns the API server's answer.
async fn dry_run_status(
    api: &Api<DynamicObject>,
    name: &str,
    status: &serde_json::Value,
) -> Result<serde_json::Value, kube::Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    loop {
        let mut body = api.get(name).await?;
        body.data["status"] = status.clone();
        match api.replace_status(name, &params, &body).await {
            Ok(stored) => return Ok(stored.data),
            Err(kube::Error::Api(s)) if s.code == 409 && Instant::now() < deadline => continue,
            Err(e) => return Err(e),
        }
    }
}

#[tokio::test]
async fn a_large_stage_stored_compact_passes_admission_and_reads_back_as_written() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let api: Api<UpdateRun> = Api::all(hub.clone());
    let dynamic: Api<DynamicObject> = Api::all_with(hub, &ApiResource::erase::<UpdateRun>(&()));
    let name = unique_name("compact-run");
    let cleanup = Cleanup::new(fleet);
    cleanup.track::<UpdateRun>("hub", None, &name);
    let run: UpdateRun = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": name},
        "spec": {"placementName": format!("{name}-absent"), "resourceSnapshotIndex": "1",
                 "stagedRolloutStrategyName": format!("{name}-absent")}
    }))
    .unwrap();
    api.create(&PostParams::default(), &run).await.unwrap();

    let status = UpdateRunStatus {
        stages_status: vec![stage()],
        ..Default::default()
    };
    let written = serde_json::to_value(&status).unwrap();
    let stored_stage = &written["stagesStatus"][0];
    assert_eq!(stored_stage["succeededClusters"], "0-99");
    // Of the 20 with a progress text, the first PROGRESS_KEPT keep it and stay items.
    let kept = PROGRESS_KEPT.min(20);
    assert_eq!(
        stored_stage["updatingClusters"],
        format!(
            "{}-149@2027-01-15T08:00:02Z,150-199@2027-01-15T08:00:03Z,200-249@2027-01-15T08:00:04Z",
            100 + kept
        )
    );
    assert_eq!(stored_stage["clusters"].as_array().unwrap().len(), kept);

    let answer = dry_run_status(&dynamic, &name, &written)
        .await
        .expect("the compact status as the hub writes it is accepted");
    assert_eq!(
        answer["status"]["stagesStatus"][0], *stored_stage,
        "the API server kept every field (nothing pruned)"
    );
    // Read back, every cluster is where it was (a succeeded one without its own times).
    let back: UpdateRunStatus = serde_json::from_value(answer["status"].clone()).unwrap();
    let sent = &status.stages_status[0].clusters;
    let got = &back.stages_status[0].clusters;
    assert_eq!(got.len(), CLUSTERS);
    for (i, (sent, got)) in sent.iter().zip(got).enumerate() {
        if i < 100 {
            assert_eq!(phase(got), ClusterPhase::Succeeded, "cluster {i}");
        } else if i < 100 + kept || i >= 120 {
            assert_eq!(got, sent, "cluster {i}");
        } else {
            // Beyond the kept ones, an updating cluster is its start time: no progress text.
            let without = ClusterUpdatingStatus {
                progress: None,
                ..sent.clone()
            };
            assert_eq!(*got, without, "cluster {i}");
        }
    }

    // A range whose time does not read is refused, naming the field.
    let mut malformed = written.clone();
    malformed["stagesStatus"][0]["updatingClusters"] = json!("120-149@yesterday");
    match dry_run_status(&dynamic, &name, &malformed).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains("updatingClusters"), "{}", s.message);
        }
        other => panic!("a malformed updatingClusters was not refused: {other:?}"),
    }

    api.delete(
        &run.name_any(),
        &kube::api::DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}
