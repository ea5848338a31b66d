use jiff::Timestamp;

use super::*;
use crate::conditions::{FALSE, TRUE};

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + seconds).unwrap())
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, seconds: i64) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: at(seconds),
        observed_generation: None,
    }
}

/// Cluster `i` in state `i % 5`: pending, updating, succeeded, failed, skipped.
fn cluster(i: usize) -> ClusterUpdatingStatus {
    let name = format!("edge-{i:05}");
    let started = cond(
        CLUSTER_STARTED,
        TRUE,
        reason::CLUSTER_STARTED,
        &started_message(&name),
        i as i64,
    );
    let mut c = ClusterUpdatingStatus {
        cluster_name: name.clone(),
        ..Default::default()
    };
    match i % 5 {
        0 => {}
        1 => {
            c.conditions = vec![started];
            c.start_time = Some(at(i as i64));
            c.progress = Some(format!("not available yet: 0/1 replicas of {name}"));
        }
        2 => {
            c.conditions = vec![
                started,
                cond(
                    SUCCEEDED,
                    TRUE,
                    reason::CLUSTER_SUCCEEDED,
                    "done",
                    i as i64 + 1,
                ),
            ];
            c.start_time = Some(at(i as i64));
            c.end_time = Some(at(i as i64 + 1));
        }
        3 => {
            c.conditions = vec![
                started,
                cond(
                    SUCCEEDED,
                    FALSE,
                    reason::CLUSTER_HEALTH_TIMEOUT,
                    "late",
                    i as i64 + 9,
                ),
            ];
            c.start_time = Some(at(i as i64));
        }
        _ => {
            c.conditions = vec![cond(
                CLUSTER_SKIPPED,
                TRUE,
                reason::CLUSTER_UNSELECTED,
                "left",
                i as i64,
            )];
            c.end_time = Some(at(i as i64));
        }
    }
    c
}

fn stage(clusters: usize) -> StageUpdatingStatus {
    StageUpdatingStatus {
        stage_name: "production".into(),
        clusters: (0..clusters).map(cluster).collect(),
        start_time: Some(at(0)),
        ..Default::default()
    }
}

fn round_trip(stage: &StageUpdatingStatus) -> (serde_json::Value, StageUpdatingStatus) {
    let json = serde_json::to_value(stage).unwrap();
    let back = serde_json::from_value(json.clone()).unwrap();
    (json, back)
}

#[test]
fn a_small_stage_is_stored_cluster_by_cluster_with_its_counts() {
    let stage = stage(DETAILED_STAGE_CLUSTERS);
    let (json, back) = round_trip(&stage);
    assert_eq!(back, stage);
    assert_eq!(json["clusters"].as_array().unwrap().len(), 100);
    assert!(json.get("clusterNameList").is_none());
    assert!(json.get("clusterNames").is_none());
    assert_eq!(
        json["clusterCounts"],
        serde_json::json!({"total": 100, "pending": 20, "updating": 20, "succeeded": 20, "failed": 20, "skipped": 20})
    );
}

#[test]
fn a_large_stage_keeps_the_plan_and_every_cluster_the_planner_decides_on() {
    let stage = stage(1_000);
    let (json, back) = round_trip(&stage);
    let names: Vec<&str> = json["clusterNameList"]
        .as_str()
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(names.len(), 1_000);
    assert!(
        json.get("clusterNames").is_none(),
        "the list form is only read"
    );
    // Updating clusters keeping their progress, failed and skipped ones are items; the other
    // updating clusters are index ranges with their start times.
    // Of the 200 updating (every fifth from 1), the first PROGRESS_KEPT keep their progress.
    assert_eq!(
        json["clusters"].as_array().unwrap().len(),
        400 + PROGRESS_KEPT
    );
    let updating = json["updatingClusters"].as_str().unwrap();
    assert_eq!(updating.split(',').count(), 200 - PROGRESS_KEPT);
    let first = 1 + 5 * PROGRESS_KEPT;
    let fragments: Vec<&str> = updating.split(',').take(2).collect();
    assert!(
        fragments[0].starts_with(&format!("{first}@2027-01-15T"))
            && fragments[1].starts_with(&format!("{}@", first + 5)),
        "{updating}"
    );
    assert_eq!(back.clusters.len(), 1_000);
    let mut progress_kept = 0;
    for (i, (was, is)) in stage.clusters.iter().zip(&back.clusters).enumerate() {
        assert_eq!(is.cluster_name, was.cluster_name, "cluster {i}: order");
        assert_eq!(phase(is), phase(was), "cluster {i}: state");
        match i % 5 {
            // Updating: its Started condition comes back from its start time.
            1 => {
                assert_eq!(is.conditions, was.conditions, "cluster {i}");
                assert_eq!(is.start_time, was.start_time, "cluster {i}");
                progress_kept += usize::from(is.progress.is_some());
            }
            // Succeeded: the state, not the times.
            2 => assert_eq!(is.end_time, None),
            _ => assert_eq!(is, was, "cluster {i}"),
        }
    }
    assert_eq!(progress_kept, PROGRESS_KEPT);
    // Read back and stored again, it is stored the same.
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
}

#[test]
fn a_large_stage_keeps_regressed_and_recovered_clusters_in_detail() {
    let mut stage = stage(200);
    for c in &mut stage.clusters {
        c.conditions.retain(|c| c.type_ != CLUSTER_SKIPPED);
    }
    // Cluster 2 succeeded and is regressed now; cluster 7 succeeded, regressed and recovered.
    let regressed = cond(
        REGRESSED,
        TRUE,
        reason::CLUSTER_REGRESSED,
        "regressed after its update: deployment app/web: 0/2 available",
        50,
    );
    stage.clusters[2].conditions.push(regressed.clone());
    let mut recovered = regressed;
    recovered.status = FALSE.into();
    recovered.reason = reason::CLUSTER_RECOVERED.into();
    stage.clusters[7].conditions.push(recovered);
    let (json, back) = round_trip(&stage);
    assert_eq!(back.clusters[2], stage.clusters[2]);
    assert_eq!(back.clusters[7], stage.clusters[7]);
    assert_eq!(phase(&back.clusters[2]), ClusterPhase::Regressed);
    assert_eq!(phase(&back.clusters[7]), ClusterPhase::Succeeded);
    let succeeded = json["succeededClusters"].as_str().unwrap();
    assert!(
        !succeeded.split(',').any(|r| r == "2" || r == "7"),
        "{succeeded}"
    );
    assert_eq!(json["clusterCounts"]["regressed"], 1);
}

#[test]
fn succeeded_clusters_are_stored_as_index_ranges() {
    let mut stage = stage(200);
    for c in &mut stage.clusters[..150] {
        *c = cluster(2);
    }
    for (i, c) in stage.clusters.iter_mut().enumerate() {
        c.cluster_name = format!("edge-{i:05}");
    }
    let (json, back) = round_trip(&stage);
    assert_eq!(
        json["succeededClusters"],
        "0-149,152,157,162,167,172,177,182,187,192,197"
    );
    assert_eq!(ClusterCounts::of(&back.clusters).succeeded, 160);
}

#[test]
fn updating_clusters_started_together_are_one_range() {
    let mut stage = stage(300);
    for (i, c) in stage.clusters.iter_mut().enumerate() {
        *c = if (10..250).contains(&i) && i != 120 {
            cluster(1)
        } else {
            cluster(0)
        };
        c.cluster_name = format!("edge-{i:05}");
        c.progress = None;
        if i >= 200 && c.start_time.is_some() {
            c.start_time = Some(at(7));
        }
        for cond in &mut c.conditions {
            cond.message = started_message(&c.cluster_name);
            cond.last_transition_time = c.start_time.clone().unwrap();
        }
    }
    let (json, back) = round_trip(&stage);
    assert_eq!(
        json["updatingClusters"],
        "10-119@2027-01-15T08:00:01Z,121-199@2027-01-15T08:00:01Z,200-249@2027-01-15T08:00:07Z"
    );
    assert_eq!(json["clusters"].as_array().unwrap().len(), 0);
    assert_eq!(back, stage);
    assert_eq!(ClusterCounts::of(&back.clusters).updating, 239);
}

#[test]
fn updating_ranges_that_do_not_read_name_nothing() {
    let times = parse_timed_ranges(
        "0-1@2027-01-15T08:00:01Z,x@2027-01-15T08:00:01Z,2@never,3,4-9@2027-01-15T08:00:02Z",
        6,
    );
    let seconds: Vec<Option<i64>> = times
        .iter()
        .map(|t| t.as_ref().map(|t| t.0.as_second()))
        .collect();
    let base = at(0).0.as_second();
    assert_eq!(
        seconds,
        [
            Some(base + 1),
            Some(base + 1),
            None,
            None,
            Some(base + 2),
            Some(base + 2)
        ]
    );
}

#[test]
fn ranges_that_do_not_read_name_nothing() {
    assert_eq!(
        parse_ranges("0-1,x,3-,5-99", 6),
        [true, true, false, false, false, true]
    );
    assert_eq!(parse_ranges("", 2), [false, false]);
    let mut r = Ranges::default();
    for i in [0, 1, 2, 4, 6, 7] {
        r.push(i, ());
    }
    assert_eq!(r.text(|_| String::new()), "0-2,4,6-7");
}

#[test]
fn a_stored_stage_from_before_the_compact_form_reads() {
    let json = serde_json::json!({
        "stageName": "canary",
        "clusters": [{"clusterName": "a"}, {"clusterName": "b"}],
    });
    let stage: StageUpdatingStatus = serde_json::from_value(json).unwrap();
    assert_eq!(stage.clusters.len(), 2);
    assert_eq!(stage.clusters[1].cluster_name, "b");
}

#[test]
fn a_large_stage_stored_with_its_names_as_a_list_reads_as_with_the_name_list() {
    let stage = stage(1_000);
    let (mut json, back) = round_trip(&stage);
    let list = json["clusterNameList"].as_str().unwrap().to_string();
    let object = json.as_object_mut().unwrap();
    object.remove("clusterNameList");
    object.insert(
        "clusterNames".into(),
        list.split(',').collect::<Vec<_>>().into(),
    );
    let old: StageUpdatingStatus = serde_json::from_value(json).unwrap();
    assert_eq!(old, back);
    // Written again, it takes the name list.
    let again = serde_json::to_value(&old).unwrap();
    assert_eq!(again["clusterNameList"].as_str(), Some(list.as_str()));
    assert!(again.get("clusterNames").is_none());
}

#[test]
fn a_stage_planned_in_an_update_run_plan_is_stored_without_its_names_and_reads_back_with_them() {
    let mut stage = stage(1_000);
    let (inline, _) = round_trip(&stage);
    stage.cluster_list = ClusterList::InPlan;
    let (json, mut back) = round_trip(&stage);
    assert_eq!(json["clustersInPlan"], true);
    assert!(json.get("clusterNameList").is_none());
    // The same progress as a stage that keeps its names, less the names.
    for field in [
        "succeededClusters",
        "updatingClusters",
        "clusters",
        "clusterCounts",
    ] {
        assert_eq!(json[field], inline[field], "{field}");
    }
    // Until its plan is read, it has its counts and no clusters.
    assert!(back.clusters.is_empty());
    assert!(matches!(back.cluster_list, ClusterList::Unread(_)));
    assert_eq!(back.counts(), ClusterCounts::of(&stage.clusters));
    // Written back unread, it is stored the same.
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
    let names: Vec<&str> = stage
        .clusters
        .iter()
        .map(|c| c.cluster_name.as_str())
        .collect();
    back.read_plan(&names.join(","));
    assert_eq!(back.cluster_list, ClusterList::InPlan);
    let (_, through_names) = round_trip(&StageUpdatingStatus {
        cluster_list: ClusterList::InStatus,
        ..stage.clone()
    });
    assert_eq!(back.clusters, through_names.clusters);
    // Read, and stored again, it is stored the same.
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
}
