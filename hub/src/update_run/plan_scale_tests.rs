//! A 10,000-cluster run on the fake timeline of `plan_tests`: its status stays small, and a
//! status read back from the API server's JSON (with writes lost at random) never reorders or
//! repeats a cluster.

use std::collections::BTreeSet;

use fleethub_crds::update_run::{PlanRef, UpdateRunStatus};
use fleethub_crds::update_run_plan::UpdateRunPlanSpec;

use super::*;

const CLUSTERS: usize = 10_000;
/// The bound for an UpdateRun at 10,000 clusters is 256 KiB; its status stays far below,
/// since the names of its clusters are in its UpdateRunPlan (110 KB of them, written once).
const STATUS_BYTES: usize = 64 * 1024;
/// An UpdateRunPlan of 10,000 clusters, far below etcd's 1.5 MiB per object.
const PLAN_BYTES: usize = 256 * 1024;

fn edge(i: usize) -> String {
    format!("edge-{i:05}")
}

/// staging, canary and production, a third of the fleet each, 25 % at a time, no gates.
fn edge_world() -> World {
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}}, "maxConcurrency": "25%"},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": "canary"}}, "maxConcurrency": "25%"},
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}}, "maxConcurrency": "25%"}
    ]}));
    w.labels.clear();
    w.bindings.clear();
    for i in 0..CLUSTERS {
        let env = ["staging", "canary", "production"][i % 3];
        w.cluster(&edge(i), &[("env", env)]);
    }
    w
}

#[test]
fn a_10000_cluster_run_stays_small_and_resumes_from_its_stored_status() {
    let mut w = edge_world();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut started: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut largest = 0;
    // The run's UpdateRunPlan, as the controller writes it before the first status using it.
    let mut written_plan: Option<UpdateRunPlanSpec> = None;
    for step in 0.. {
        assert!(step < 2_000, "the run did not finish");
        w.settle();
        let p = plan(&w.observed());
        w.perform(&p.actions);
        for c in binds(&p) {
            if seen.insert(c.to_string()) {
                started.push(c.to_string());
            }
        }
        // A third of the status writes are lost (the hub crashed before writing); the others
        // are read back as the API server returns them.
        if next() % 3 != 0 {
            let mut status = p.status.clone();
            if status.uses_plan() && status.plan_ref.is_none() {
                let spec = UpdateRunPlanSpec::of(&status);
                let bytes = serde_json::to_vec(&spec).unwrap().len();
                assert!(bytes < PLAN_BYTES, "the plan takes {bytes} bytes");
                assert_eq!(spec.cluster_count as usize, CLUSTERS);
                written_plan = Some(spec);
                status.plan_ref = Some(PlanRef {
                    name: "run".into(),
                    uid: "1".into(),
                });
            }
            let stored = serde_json::to_vec(&status).unwrap();
            largest = largest.max(stored.len());
            assert!(
                stored.len() < STATUS_BYTES,
                "step {step}: the status takes {} bytes",
                stored.len()
            );
            let mut read: UpdateRunStatus = serde_json::from_slice(&stored).unwrap();
            assert!(read.plan_unread(), "the names are not in the status");
            read.read_plan(written_plan.as_ref().expect("the plan was written"))
                .unwrap();
            w.run.status = Some(read);
        }
        if find(&w.status_or_default().conditions, SUCCEEDED).is_some() {
            break;
        }
        let bound: Vec<String> = w.works.keys().cloned().collect();
        for c in bound {
            if next() % 2 == 0 {
                w.member_ready(&c);
            }
        }
        w.now = w.now.checked_add(Duration::from_secs(5)).unwrap();
    }
    let status = w.status();
    assert!(is_true(&status.conditions, SUCCEEDED));
    // Every cluster started once, stage after stage, each stage in name order.
    let mut expected: Vec<String> = Vec::new();
    for stage in 0..3 {
        expected.extend((0..CLUSTERS).filter(|i| i % 3 == stage).map(edge));
    }
    assert_eq!(started.len(), CLUSTERS);
    assert!(started == expected, "clusters started out of order");
    let counts = fleethub_crds::stored_stage::ClusterCounts::of(&status.stages_status[2].clusters);
    assert_eq!((counts.total, counts.succeeded), (3_333, 3_333));
    println!("largest stored status: {largest} bytes");
}

impl World {
    fn status_or_default(&self) -> fleethub_crds::update_run::UpdateRunStatus {
        self.run.status.clone().unwrap_or_default()
    }
}
