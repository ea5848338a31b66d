//! Unit tests of the placement planner: observed objects in, writes out.

use std::collections::BTreeMap;
use std::sync::Arc;

use fleethub_crds::binding::{BindingSpec, BindingState, BindingStatus};
use fleethub_crds::conditions::{Condition, FALSE, TRUE, find};
use fleethub_crds::placement::{
    APPLIED, AVAILABLE, PlacementSpec, RESOURCES_SNAPSHOTTED, ROLLOUT_STARTED, RolloutStrategy,
    RolloutStrategyType, SCHEDULED, reason,
};
use fleethub_crds::resource_snapshot::ResourceSnapshotSpec;
use fleethub_crds::update_run::{SUCCEEDED, UpdateRunSpec, UpdateRunStatus};
use fleethub_crds::{Binding, Placement, ResourceSnapshot, UpdateRun, names};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action as Requeue;
use serde_json::{Value, json};

use super::clusters::{BindingChange, Member};
use super::content;
use super::plan::*;
use super::status::roll_up;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn placement(strategy: RolloutStrategyType, policy: Value) -> Placement {
    let mut p = Placement::new(
        "web",
        PlacementSpec {
            resource_selectors: serde_json::from_value(
                json!([{"group": "", "version": "v1", "kind": "Namespace", "name": "app"}]),
            )
            .unwrap(),
            policy: serde_json::from_value(policy).unwrap(),
            strategy: Some(RolloutStrategy {
                type_: strategy,
                apply_strategy: None,
            }),
            revision_history_limit: None,
        },
    );
    p.metadata.uid = Some("uid-web".into());
    p.metadata.generation = Some(3);
    p
}

fn rolling() -> Placement {
    placement(RolloutStrategyType::RollingUpdate, json!(null))
}

fn objects() -> Vec<Value> {
    let mut o = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "app"}, "data": {"v": "1"}}),
    ];
    content::sort(&mut o);
    o
}

fn snapshot(index: i64, part: i32, parts: i32, hash: &str) -> ResourceSnapshot {
    ResourceSnapshot::new(
        &names::resource_snapshot_part_name("web", index as u64, part as u32),
        ResourceSnapshotSpec {
            placement_name: "web".into(),
            resource_index: index,
            part,
            parts,
            content_hash: hash.into(),
            object_count: 2,
            resources: vec![],
        },
    )
}

fn member(name: &str, eligible: bool) -> Member {
    Member {
        name: name.into(),
        labels: BTreeMap::new(),
        eligible,
    }
}

fn report(type_: &str, ok: bool, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { TRUE } else { FALSE }.into(),
        reason: "Whatever".into(),
        message: message.into(),
        observed_generation: Some(1),
        last_transition_time: Time(t(0)),
    }
}

fn binding(
    cluster: &str,
    state: BindingState,
    index: Option<i64>,
    run: Option<&str>,
    reports: Vec<Condition>,
) -> Arc<Binding> {
    let mut b = Binding::new(
        &names::binding_name("web", cluster),
        BindingSpec {
            placement_name: "web".into(),
            target_cluster: cluster.into(),
            state,
            resource_snapshot_index: index,
            update_run_name: run.map(Into::into),
            health_timeout: None,
            ..Default::default()
        },
    );
    b.status = Some(BindingStatus {
        conditions: reports,
        ..Default::default()
    });
    Arc::new(b)
}

/// A Binding of `cluster` bound to snapshot 2 by run `r1`, its member reporting it applied and
/// available (`available` true) or not yet ready.
fn bound_at_2(cluster: &str, available: bool) -> Arc<Binding> {
    let ready = if available {
        "ready"
    } else {
        "0/3 replicas ready"
    };
    binding(
        cluster,
        BindingState::Bound,
        Some(2),
        Some("r1"),
        vec![
            report(APPLIED, true, "applied"),
            report(AVAILABLE, available, ready),
        ],
    )
}

fn cond<'a>(conditions: &'a [Condition], type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = find(conditions, type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// No field is serialized as null: server-side apply would take ownership of it.
fn assert_no_nulls(v: &Value) {
    match v {
        Value::Null => panic!("a null field was serialized"),
        Value::Array(a) => a.iter().for_each(assert_no_nulls),
        Value::Object(o) => o.values().for_each(assert_no_nulls),
        _ => {}
    }
}

#[test]
fn a_first_gather_cuts_snapshot_0_and_binds_every_selected_cluster() {
    let p = rolling();
    let observed = Observed {
        content: Some(Ok(objects())),
        members: vec![member("b", true), member("a", true), member("gone", false)],
        ..Default::default()
    };
    let plan = plan(&p, observed, t(10));

    let hash = content::content_hash(&objects());
    assert_eq!(plan.content_hash.as_deref(), Some(hash.as_str()));
    let new = plan.snapshot.expect("a snapshot is cut");
    assert_eq!((new.index, new.leftovers.len(), new.parts.len()), (0, 0, 1));
    let part = &new.parts[0];
    assert_eq!(part.metadata.name.as_deref(), Some("web-0-snapshot"));
    let labels = part.metadata.labels.clone().unwrap();
    assert_eq!(labels[names::PLACEMENT_LABEL], "web");
    assert_eq!(labels[names::SNAPSHOT_INDEX_LABEL], "0");
    let owner = &part.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("uid-web", Some(true))
    );
    assert_eq!(
        (part.spec.part, part.spec.parts, part.spec.object_count),
        (0, 1, 2)
    );
    assert_eq!(part.spec.content_hash, hash);
    assert_eq!(part.spec.resources, objects());
    let json = serde_json::to_value(part).unwrap();
    assert_eq!(
        (&json["apiVersion"], &json["kind"]),
        (&json!("fleethub.dev/v1alpha1"), &json!("ResourceSnapshot"))
    );
    assert_no_nulls(&json);

    let bound = |c: &str| BindingChange::Create {
        cluster: c.into(),
        state: BindingState::Bound,
        index: Some(0),
    };
    assert_eq!(plan.bindings, vec![bound("a"), bound("b")]);
    assert!(plan.prune.is_empty());
    assert_eq!(plan.next, Requeue::requeue(RESYNC));

    let s = &plan.status;
    assert_eq!(
        (
            s.observed_generation,
            s.latest_resource_snapshot_index,
            s.selected_cluster_count
        ),
        (Some(3), Some(0), Some(2))
    );
    assert_eq!(
        cond(&s.conditions, RESOURCES_SNAPSHOTTED),
        (
            TRUE,
            reason::SNAPSHOTTED,
            "resource snapshot 0 holds the selected objects"
        )
    );
    assert_eq!(
        cond(&s.conditions, SCHEDULED),
        (
            TRUE,
            reason::SCHEDULING_POLICY_FULFILLED,
            "2 clusters selected"
        )
    );
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(3))
    );
}

#[test]
fn unchanged_or_ungathered_content_cuts_nothing() {
    let hash = content::content_hash(&objects());
    let snapshots = vec![snapshot(0, 0, 1, "old"), snapshot(1, 0, 1, &hash)];
    let gathered = plan(
        &rolling(),
        Observed {
            snapshots: snapshots.clone(),
            content: Some(Ok(objects())),
            ..Default::default()
        },
        t(0),
    );
    assert_eq!(gathered.snapshot, None);
    assert_eq!(gathered.content_hash, Some(hash));
    assert_eq!(gathered.status.latest_resource_snapshot_index, Some(1));

    let not_gathered = plan(
        &rolling(),
        Observed {
            snapshots,
            content: None,
            ..Default::default()
        },
        t(0),
    );
    assert_eq!(
        (not_gathered.snapshot, not_gathered.content_hash),
        (None, None)
    );
    assert_eq!(not_gathered.status.latest_resource_snapshot_index, Some(1));
    assert_eq!(
        cond(&not_gathered.status.conditions, RESOURCES_SNAPSHOTTED).0,
        TRUE
    );
}

#[test]
fn changed_content_cuts_the_next_index_and_removes_leftovers_of_a_failed_cut_first() {
    // Index 1 was being cut when the hub stopped: part 1 exists, part 0 (the mark of a
    // complete snapshot) does not.
    let snapshots = vec![snapshot(0, 0, 1, "old"), snapshot(1, 1, 2, "new")];
    let plan = plan(
        &rolling(),
        Observed {
            snapshots,
            content: Some(Ok(objects())),
            members: vec![member("a", true)],
            ..Default::default()
        },
        t(0),
    );
    let new = plan.snapshot.unwrap();
    assert_eq!(new.index, 1);
    assert_eq!(new.leftovers, ["web-1-snapshot-1"]);
    assert_eq!(plan.status.latest_resource_snapshot_index, Some(1));
    assert_eq!(
        plan.bindings,
        vec![BindingChange::Create {
            cluster: "a".into(),
            state: BindingState::Bound,
            index: Some(1)
        }]
    );
}

#[test]
fn large_content_is_cut_into_parts_written_with_part_0_last() {
    let big = |i: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("c{i}"), "namespace": "app"},
               "data": {"x": "y".repeat(300 * 1024)}})
    };
    let objects: Vec<Value> = (0..3).map(big).collect();
    let plan = plan(
        &rolling(),
        Observed {
            content: Some(Ok(objects)),
            ..Default::default()
        },
        t(0),
    );
    let parts = plan.snapshot.unwrap().parts;
    let described: Vec<(String, i32, i32, i64, usize)> = parts
        .iter()
        .map(|s| {
            let spec = &s.spec;
            let name = s.metadata.name.clone().unwrap();
            (
                name,
                spec.part,
                spec.parts,
                spec.object_count,
                spec.resources.len(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            ("web-0-snapshot-1".to_string(), 1, 2, 3, 1),
            ("web-0-snapshot".to_string(), 0, 2, 3, 2)
        ]
    );
}

#[test]
fn content_that_cannot_be_snapshotted_only_says_why() {
    let invalid = plan(
        &rolling(),
        Observed {
            content: Some(Err("spec.resourceSelectors[0]: no".into())),
            members: vec![member("a", true)],
            ..Default::default()
        },
        t(0),
    );
    assert_eq!(
        cond(&invalid.status.conditions, SCHEDULED),
        (
            FALSE,
            reason::INVALID_RESOURCE_SELECTOR,
            "spec.resourceSelectors[0]: no"
        )
    );
    assert!(invalid.snapshot.is_none() && invalid.bindings.is_empty() && invalid.prune.is_empty());
    assert_eq!(invalid.next, Requeue::await_change());
    assert_eq!(invalid.status.observed_generation, None);

    let huge = json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "huge", "namespace": "app"},
                      "data": {"x": "y".repeat(content::MAX_PART_BYTES)}});
    let too_large = plan(
        &rolling(),
        Observed {
            content: Some(Ok(vec![huge])),
            members: vec![member("a", true)],
            ..Default::default()
        },
        t(0),
    );
    let (status, why, message) = cond(&too_large.status.conditions, RESOURCES_SNAPSHOTTED);
    assert_eq!((status, why), (FALSE, reason::OBJECT_TOO_LARGE));
    assert!(message.starts_with("ConfigMap app/huge is"), "{message}");
    assert!(too_large.snapshot.is_none() && too_large.bindings.is_empty());
    assert_eq!(too_large.content_hash, None, "gathered again next time");
    assert_eq!(too_large.next, Requeue::requeue(RESYNC));
}

#[test]
fn an_unusable_policy_still_snapshots_but_binds_nothing() {
    let p = placement(
        RolloutStrategyType::RollingUpdate,
        json!({"clusterSelector": {"matchExpressions": [{"key": "env", "operator": "Bogus"}]}}),
    );
    let plan = plan(
        &p,
        Observed {
            content: Some(Ok(objects())),
            members: vec![member("a", true)],
            ..Default::default()
        },
        t(0),
    );
    assert!(plan.snapshot.is_some());
    assert!(plan.bindings.is_empty());
    let (status, why, _) = cond(&plan.status.conditions, SCHEDULED);
    assert_eq!((status, why), (FALSE, reason::INVALID_POLICY));
    assert_eq!(plan.next, Requeue::await_change());
}

#[test]
fn named_clusters_that_are_missing_are_reported() {
    let p = placement(
        RolloutStrategyType::External,
        json!({"placementType": "PickFixed", "clusterNames": ["a", "x", "down"]}),
    );
    let plan = plan(
        &p,
        Observed {
            snapshots: vec![snapshot(0, 0, 1, "h")],
            members: vec![member("a", true), member("down", false)],
            ..Default::default()
        },
        t(0),
    );
    assert_eq!(
        cond(&plan.status.conditions, SCHEDULED),
        (
            FALSE,
            reason::CLUSTERS_UNAVAILABLE,
            "1 clusters selected; not joined or not found: x, down"
        )
    );
    assert_eq!(
        plan.bindings,
        vec![BindingChange::Create {
            cluster: "a".into(),
            state: BindingState::Scheduled,
            index: None
        }]
    );
}

#[test]
fn history_beyond_the_limit_is_pruned_oldest_first_except_what_unfinished_runs_use() {
    let mut p = rolling();
    p.spec.revision_history_limit = Some(2);
    let snapshots = vec![
        snapshot(3, 0, 1, "d"),
        snapshot(0, 1, 2, "a"),
        snapshot(0, 0, 2, "a"),
        snapshot(2, 0, 1, "c"),
        snapshot(1, 0, 1, "b"),
    ];
    assert_eq!(
        excess_snapshots(&p, &snapshots),
        [
            (0, "web-0-snapshot".to_string()),
            (0, "web-0-snapshot-1".to_string()),
            (1, "web-1-snapshot".to_string())
        ]
    );
    p.spec.revision_history_limit = None;
    assert!(excess_snapshots(&p, &snapshots).is_empty(), "default 10");

    let run = |placement: &str, index: &str, succeeded: bool| {
        let mut r = UpdateRun::new(
            "r",
            UpdateRunSpec {
                placement_name: placement.into(),
                resource_snapshot_index: Some(index.into()),
                ..Default::default()
            },
        );
        if succeeded {
            r.status = Some(UpdateRunStatus {
                conditions: vec![report(SUCCEEDED, true, "done")],
                ..Default::default()
            });
        }
        r
    };
    let runs = [
        run("web", "1", false),
        run("web", "0", true),
        run("other", "2", false),
        run("web", "not-a-number", false),
    ];
    assert_eq!(
        indices_in_use(&runs, "web").into_iter().collect::<Vec<_>>(),
        [1]
    );
}

#[test]
fn a_binding_is_created_labelled_owned_and_without_nulls() {
    let b = new_binding(&rolling(), "m1", BindingState::Bound, Some(4));
    assert_eq!(b.metadata.name.as_deref(), Some("web-m1"));
    let labels = b.metadata.labels.clone().unwrap();
    assert_eq!(
        (
            labels[names::PLACEMENT_LABEL].as_str(),
            labels[names::CLUSTER_LABEL].as_str()
        ),
        ("web", "m1")
    );
    assert_eq!(
        b.metadata.owner_references.as_ref().unwrap()[0].uid,
        "uid-web"
    );
    let json = serde_json::to_value(&b).unwrap();
    assert_eq!(
        json["spec"],
        json!({"placementName": "web", "targetCluster": "m1", "state": "Bound", "resourceSnapshotIndex": 4})
    );
    assert_eq!(json["kind"], "Binding");
    assert!(json.get("status").is_none());
    assert_no_nulls(&json);
}

#[test]
fn roll_up_reports_each_cluster_and_counts_only_the_latest_snapshot_as_available() {
    let mut status = fleethub_crds::placement::PlacementStatus::default();
    let bindings = vec![
        binding(
            "a",
            BindingState::Bound,
            Some(2),
            Some("r1"),
            vec![
                report(APPLIED, true, "applied"),
                report(AVAILABLE, true, "ready"),
            ],
        ),
        binding(
            "b",
            BindingState::Bound,
            Some(1),
            None,
            vec![
                report(APPLIED, true, "applied"),
                report(AVAILABLE, true, "ready on 1"),
            ],
        ),
        binding("c", BindingState::Scheduled, None, None, vec![]),
        binding("unselected", BindingState::Bound, Some(2), None, vec![]),
    ];
    let selected: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    roll_up(
        &mut status,
        &bindings,
        &selected,
        Some(2),
        RolloutStrategyType::External,
        t(5),
        Some(3),
    );

    let clusters: Vec<(&str, Option<i64>)> = status
        .placement_statuses
        .iter()
        .map(|c| (c.cluster_name.as_str(), c.resource_snapshot_index))
        .collect();
    assert_eq!(clusters, [("a", Some(2)), ("b", Some(1)), ("c", None)]);
    let of = |i: usize| status.placement_statuses[i].conditions.clone();
    assert_eq!(
        cond(&of(0), SCHEDULED),
        (TRUE, reason::CLUSTER_SCHEDULED, "cluster a is selected")
    );
    assert_eq!(
        cond(&of(0), ROLLOUT_STARTED),
        (
            TRUE,
            reason::ROLLOUT_STARTED,
            "resource snapshot 2, rolled out by UpdateRun r1"
        )
    );
    assert_eq!(
        cond(&of(0), AVAILABLE),
        (TRUE, reason::MEMBER_REPORTED, "ready")
    );
    assert_eq!(cond(&of(1), ROLLOUT_STARTED).2, "resource snapshot 1");
    assert_eq!(
        cond(&of(2), ROLLOUT_STARTED),
        (
            FALSE,
            reason::ROLLOUT_NOT_STARTED,
            "waiting for an UpdateRun to roll out a snapshot"
        )
    );
    assert_eq!(
        cond(&of(2), APPLIED),
        (FALSE, reason::NOT_YET, "no report yet")
    );
    assert_eq!(
        cond(&status.conditions, APPLIED),
        (
            FALSE,
            reason::NOT_ALL_APPLIED,
            "2/3 clusters applied their Work"
        )
    );
    assert_eq!(
        cond(&status.conditions, AVAILABLE),
        (
            FALSE,
            reason::NOT_ALL_AVAILABLE,
            "1/3 clusters run the latest resource snapshot (2) and are available"
        )
    );

    // Later, c is deselected and b catches up: everything is available, and a's unchanged
    // conditions keep their transition times.
    let b_caught_up = binding(
        "b",
        BindingState::Bound,
        Some(2),
        None,
        vec![
            report(APPLIED, true, "applied"),
            report(AVAILABLE, true, "ready"),
        ],
    );
    let selected: Vec<String> = ["a", "b"].map(String::from).to_vec();
    roll_up(
        &mut status,
        &[bindings[0].clone(), b_caught_up],
        &selected,
        Some(2),
        RolloutStrategyType::External,
        t(60),
        Some(3),
    );
    assert_eq!(status.placement_statuses.len(), 2);
    let a_available = find(&status.placement_statuses[0].conditions, AVAILABLE).unwrap();
    assert_eq!(a_available.last_transition_time, Time(t(5)));
    assert_eq!(
        cond(&status.conditions, AVAILABLE),
        (
            TRUE,
            reason::ALL_AVAILABLE,
            "2/2 clusters run the latest resource snapshot (2) and are available"
        )
    );
    assert_eq!(
        find(&status.conditions, AVAILABLE)
            .unwrap()
            .last_transition_time,
        Time(t(60))
    );
    assert_eq!(cond(&status.conditions, APPLIED).1, reason::ALL_APPLIED);
}

#[test]
fn roll_up_without_a_snapshot_waits_for_one() {
    let mut status = fleethub_crds::placement::PlacementStatus::default();
    roll_up(
        &mut status,
        &[],
        &["a".to_string()],
        None,
        RolloutStrategyType::RollingUpdate,
        t(0),
        None,
    );
    assert_eq!(
        cond(&status.placement_statuses[0].conditions, ROLLOUT_STARTED).2,
        "waiting for a snapshot"
    );
    assert_eq!(
        cond(&status.conditions, AVAILABLE).2,
        "0/1 clusters run the latest resource snapshot (-) and are available"
    );
}

#[test]
fn roll_up_names_the_clusters_that_differ_from_the_hub() {
    use fleethub_crds::apply_strategy::{DriftType, FieldDiff};
    use fleethub_crds::drift::{DRIFTED, DriftedObject};
    let object = |name: &str| DriftedObject {
        object: format!("ConfigMap app/{name}"),
        type_: DriftType::Drifted,
        first_seen_time: Time(t(1)),
        field_count: 4,
        fields: (0..4)
            .map(|i| FieldDiff {
                path: format!("data.k{i}"),
                member_value: Some("1".into()),
                hub_value: Some("2".into()),
            })
            .collect(),
    };
    let mut drifted = binding(
        "a",
        BindingState::Bound,
        Some(1),
        None,
        vec![Condition {
            reason: "Drifted".into(),
            ..report(DRIFTED, true, "7 objects differ from the hub: …")
        }],
    );
    let status = Arc::make_mut(&mut drifted).status.get_or_insert_default();
    status.drifted_objects = (0..7).map(|i| object(&format!("c{i}"))).collect();
    status.drifted_object_count = Some(7);
    let in_sync = binding(
        "b",
        BindingState::Bound,
        Some(1),
        None,
        vec![Condition {
            reason: "InSync".into(),
            ..report(DRIFTED, false, "every object on the member matches the hub")
        }],
    );
    let mut status = fleethub_crds::placement::PlacementStatus::default();
    let selected: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    roll_up(
        &mut status,
        &[drifted, in_sync],
        &selected,
        Some(1),
        RolloutStrategyType::External,
        t(5),
        Some(1),
    );
    assert_eq!(status.drifted_cluster_count, Some(1));
    let a = &status.placement_statuses[0];
    assert_eq!(
        cond(&a.conditions, DRIFTED),
        (TRUE, "Drifted", "7 objects differ from the hub: …")
    );
    assert_eq!(a.drifted_objects.len(), 5);
    assert_eq!(a.drifted_objects[0].fields.len(), 3);
    assert_eq!(a.drifted_object_count, Some(7));
    let b = &status.placement_statuses[1];
    assert_eq!(cond(&b.conditions, DRIFTED).1, "InSync");
    assert_eq!(
        cond(&status.placement_statuses[2].conditions, DRIFTED),
        (FALSE, reason::NOT_YET, "no report yet")
    );
    let (s, r, m) = cond(&status.conditions, DRIFTED);
    assert_eq!((s, r), (TRUE, "ClustersDiffer"));
    assert!(
        m.starts_with("1/3 clusters have objects that differ from the hub: a (7 objects)"),
        "{m}"
    );

    let mut status = fleethub_crds::placement::PlacementStatus::default();
    roll_up(
        &mut status,
        &[],
        &selected,
        None,
        RolloutStrategyType::External,
        t(5),
        Some(1),
    );
    assert_eq!(status.drifted_cluster_count, Some(0));
    assert_eq!(cond(&status.conditions, DRIFTED).1, "InSync");
}

#[test]
fn a_large_placement_lists_only_the_clusters_that_need_attention() {
    let mut selected: Vec<String> = (0..150).map(|i| format!("m{i:03}")).collect();
    let mut bindings: Vec<Arc<Binding>> = selected.iter().map(|c| bound_at_2(c, true)).collect();
    // One behind, one not available.
    bindings[7] = binding("m007", BindingState::Bound, Some(1), None, vec![]);
    bindings[90] = bound_at_2("m090", false);
    let mut status = fleethub_crds::placement::PlacementStatus::default();
    let roll = |status: &mut fleethub_crds::placement::PlacementStatus, selected: &[String]| {
        roll_up(
            status,
            &bindings,
            selected,
            Some(2),
            RolloutStrategyType::External,
            t(5),
            Some(1),
        )
    };
    roll(&mut status, &selected);
    let listed: Vec<&str> = status
        .placement_statuses
        .iter()
        .map(|c| c.cluster_name.as_str())
        .collect();
    assert_eq!(listed, ["m007", "m090"]);
    assert_eq!(status.omitted_placement_status_count, Some(148));
    assert_eq!(
        cond(&status.conditions, AVAILABLE).2,
        "148/150 clusters run the latest resource snapshot (2) and are available"
    );
    // At most 100 clusters: every one is listed.
    selected.truncate(100);
    roll(&mut status, &selected);
    assert_eq!(status.placement_statuses.len(), 100);
    assert_eq!(status.omitted_placement_status_count, None);
}

#[test]
fn a_placement_of_10_000_clusters_finds_each_clusters_binding_and_earlier_status_by_name() {
    // Bindings in no particular order (the cache's), one for a cluster no longer selected.
    let n = 10_000;
    let selected: Vec<String> = (0..n).map(|i| format!("m{i:05}")).collect();
    let mut bindings: Vec<Arc<Binding>> =
        selected.iter().rev().map(|c| bound_at_2(c, true)).collect();
    bindings[10] = bound_at_2(&selected[n - 11], false);
    bindings.push(bound_at_2("left", true));

    let mut external = placement(
        RolloutStrategyType::External,
        json!({"placementType": "PickAll"}),
    );
    external.status = None;
    let observed = Observed {
        snapshots: vec![snapshot(2, 0, 1, "h")],
        members: selected.iter().rev().map(|c| member(c, true)).collect(),
        bindings: bindings.clone(),
        ..Default::default()
    };
    let first = plan(&external, observed, t(5));
    assert_eq!(
        first.bindings,
        vec![BindingChange::Set {
            cluster: "left".into(),
            state: BindingState::Unscheduled,
            index: Some(2),
        }]
    );
    let s = &first.status;
    assert_eq!(s.selected_cluster_count, Some(n as i32));
    let listed: Vec<&str> = s
        .placement_statuses
        .iter()
        .map(|c| c.cluster_name.as_str())
        .collect();
    assert_eq!(listed, [selected[n - 11].as_str()]);
    let (_, _, message) = cond(&s.placement_statuses[0].conditions, AVAILABLE);
    assert_eq!(message, "0/3 replicas ready");

    // Planned again later, the listed cluster keeps its conditions' transition times.
    external.status = Some(first.status.clone());
    let observed = Observed {
        snapshots: vec![snapshot(2, 0, 1, "h")],
        members: selected.iter().map(|c| member(c, true)).collect(),
        bindings,
        ..Default::default()
    };
    let again = plan(&external, observed, t(50));
    let kept = &again.status.placement_statuses[0];
    assert_eq!(kept.cluster_name, selected[n - 11]);
    let available = find(&kept.conditions, AVAILABLE).unwrap();
    assert_eq!(available.last_transition_time, Time(t(5)));
}
