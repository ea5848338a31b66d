//! A PhasedRollout placed like any resource: a StatefulSet and its PhasedRollout in a namespace
//! a Placement selects, rolled by an UpdateRun over the fleet's real members (each its own API
//! server, controller manager and kwok nodes, with the real member agent). While the phased
//! rollout's metric fails on the staging member, the run holds there and its cluster row says
//! how far the pods rolled; when the metric recovers, the run goes on stage by stage.

mod common;

use common::TIMEOUT;
use common::real::{Rollout, kubectl_apply};
use fleethub_crds::{Placement, ResourceSnapshot, UpdateRun, names};
use fleethub_testkit::{Fleet, TestGauge, poll_until, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use serde_json::json;

/// StatefulSet `db` (3 replicas, `image`) and PhasedRollout `db` (one passing check of `query`
/// before each pod) in namespace `ns` on the hub.
fn apply_db(fleet: &Fleet, ns: &str, image: &str, query: &str) {
    kubectl_apply(
        fleet,
        &json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "db", "image": image}]}}}}),
    );
    kubectl_apply(
        fleet,
        &json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "PhasedRollout",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {"targetRef": "db",
                     "check": {"url": fleet.prometheus_url().unwrap(), "query": query,
                               "interval": "1s", "successThreshold": 1}}}),
    );
}

/// The index of the placement's newest snapshot once it holds the PhasedRollout and the
/// StatefulSet with `image`.
async fn snapshot_with(r: &Rollout, image: &str) -> i64 {
    let placements: Api<Placement> = Api::all(r.hub.clone());
    let snapshots: Api<ResourceSnapshot> = Api::all(r.hub.clone());
    let what = format!("a snapshot of {} with db {image}", r.placement);
    poll_until(&what, TIMEOUT, || {
        let (placements, snapshots) = (placements.clone(), snapshots.clone());
        async move {
            let p = placements.get(&r.placement).await.ok()?;
            let index = p.status?.latest_resource_snapshot_index?;
            let name = names::resource_snapshot_name(&r.placement, index as u64);
            let s = snapshots.get(&name).await.ok()?;
            let has = |kind: &str, image: Option<&str>| {
                s.spec.resources.iter().any(|o| {
                    o["kind"] == kind
                        && image.is_none_or(|i| {
                            o["spec"]["template"]["spec"]["containers"][0]["image"] == i
                        })
                })
            };
            (has("PhasedRollout", None) && has("StatefulSet", Some(image))).then_some(index)
        }
    })
    .await
    .unwrap()
}

fn partition_of(s: &StatefulSet) -> Option<i32> {
    s.spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()?
        .partition
}

/// Waits until the fleet's Prometheus answers `query` with no series.
async fn prometheus_sees_nothing(fleet: &Fleet, query: &str) {
    let url = fleet.prometheus_url().unwrap();
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let path = format!("/api/v1/query?query={encoded}");
    poll_until("Prometheus to see the metric fail", TIMEOUT, || {
        let path = path.clone();
        async move {
            let (code, body) = fleethub_testkit::http_get(addr, &path).await.ok()?;
            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
            (code == 200 && v["data"]["result"].as_array().is_some_and(Vec::is_empty)).then_some(())
        }
    })
    .await
    .unwrap();
}

/// The staging cluster's row of `run`: its progress, and whether it succeeded.
fn staging_row(run: Option<&UpdateRun>) -> Option<(Option<String>, Option<String>)> {
    let c = run?
        .status
        .as_ref()?
        .stages_status
        .first()?
        .clusters
        .first()?;
    let succeeded =
        fleethub_crds::conditions::find(&c.conditions, "Succeeded").map(|s| s.status.clone());
    Some((c.progress.clone(), succeeded))
}

#[tokio::test]
async fn a_placed_phased_rollout_holds_the_run_and_shows_its_pods_on_the_cluster_row() {
    let fleet = Fleet::get().unwrap();
    let r = Rollout::new(
        fleet,
        "phasedrun",
        "registry.invalid/web:1",
        [json!([]), json!([]), json!([])],
    )
    .await;
    let healthy = TestGauge::new(fleet, "fleethub_test_healthy", &[("test", &r.id)], 1.0)
        .await
        .unwrap();
    let query = format!("{} > 0.5", healthy.selector());
    apply_db(fleet, &r.ns, "registry.invalid/db:1", &query);
    let first = snapshot_with(&r, "registry.invalid/db:1").await;
    r.run_to_success("v1", first).await;

    // Every member's phased rollout settled (partition held at 3) before anything changes.
    for i in 1..=3 {
        let sets: Api<StatefulSet> = Api::namespaced(fleet.member(i).await.unwrap(), &r.ns);
        wait_for(
            &sets,
            "db",
            "the partition held at 3",
            TIMEOUT,
            |s: Option<&StatefulSet>| {
                s.is_some_and(|s| {
                    partition_of(s) == Some(3)
                        && s.status.as_ref().is_some_and(|st| {
                            st.current_revision == st.update_revision
                                && st.available_replicas == Some(3)
                        })
                })
            },
        )
        .await
        .unwrap();
    }

    // A new revision while the metric fails (as Prometheus sees it): the staging member's agent
    // holds every pod, the run holds at staging and says how far the pods rolled.
    healthy.set(0.0).await.unwrap();
    prometheus_sees_nothing(fleet, &query).await;
    apply_db(fleet, &r.ns, "registry.invalid/db:2", &query);
    let second = snapshot_with(&r, "registry.invalid/db:2").await;
    let run = r.start_run("v2", second, Some("10m")).await;
    let runs: Api<UpdateRun> = Api::all(r.hub.clone());
    let held = wait_for(
        &runs,
        &run,
        "the staging row to show the phased rollout held",
        TIMEOUT,
        |u: Option<&UpdateRun>| {
            staging_row(u).is_some_and(|(progress, _)| {
                progress
                    .is_some_and(|p| p.contains("phasedrollout") && p.contains("0/3 pods rolled"))
            })
        },
    )
    .await
    .unwrap();
    let status = held.status.as_ref().unwrap();
    assert!(
        status.stages_status[1].clusters[0].start_time.is_none(),
        "canary started while staging was held: {status:?}"
    );
    let staging: Api<StatefulSet> = Api::namespaced(fleet.member(1).await.unwrap(), &r.ns);
    let set = staging.get("db").await.unwrap();
    assert_eq!(
        partition_of(&set),
        Some(3),
        "a pod rolled while the metric failed"
    );

    // The metric recovers: the pods roll one by one, the row is cleared, the run goes on.
    healthy.set(1.0).await.unwrap();
    let done = wait_for(
        &runs,
        &run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    let rows = &done.status.as_ref().unwrap().stages_status;
    assert!(
        rows.iter()
            .flat_map(|s| &s.clusters)
            .all(|c| c.progress.is_none()),
        "finished clusters keep no progress: {rows:?}"
    );
    assert_eq!(staging_row(Some(&done)).unwrap().1.as_deref(), Some("True"));
    for i in 1..=3 {
        let sets: Api<StatefulSet> = Api::namespaced(fleet.member(i).await.unwrap(), &r.ns);
        let s = sets.get("db").await.unwrap().status.unwrap_or_default();
        assert_eq!(
            (s.updated_replicas, s.current_revision == s.update_revision),
            (Some(3), true),
            "member-{i} did not roll every pod: {s:?}"
        );
    }
}
