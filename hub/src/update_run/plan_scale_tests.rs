//! A 10,000-cluster run on the fake timeline of `plan_tests`: its status stays small, and a
//! status read back from the API server's JSON (with writes lost at random) never reorders or
//! repeats a cluster.

use std::collections::BTreeSet;

use super::*;

const CLUSTERS: usize = 10_000;
/// The bound for an UpdateRun at 10,000 clusters; the spec and metadata take ~1 KiB.
const STATUS_BYTES: usize = 255 * 1024;

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
            let stored = serde_json::to_vec(&p.status).unwrap();
            largest = largest.max(stored.len());
            assert!(
                stored.len() < STATUS_BYTES,
                "step {step}: the status takes {} bytes",
                stored.len()
            );
            w.run.status = Some(serde_json::from_slice(&stored).unwrap());
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
