use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::json;

use super::cached_work::writes_spec;
use super::first_reports::REPORT_GRACE;
use super::*;

fn entry(manager: &str, subresource: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        subresource: (!subresource.is_empty()).then(|| subresource.into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    }
}

fn work(index: i64, timeout: Option<&str>, entries: Vec<ManagedFieldsEntry>) -> Work {
    let mut w: Work = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "web", "namespace": "fleet-member-a"},
        "spec": {"placementName": "web", "resourceSnapshotIndex": index,
                 "healthTimeout": timeout, "workload": {"manifests": []}},
    }))
    .unwrap();
    w.metadata.managed_fields = Some(entries);
    w
}

#[test]
fn a_work_is_up_to_date_only_when_this_controller_alone_wrote_its_spec_at_the_index() {
    let ours = entry(
        field_manager::WORK_GENERATOR,
        "",
        json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
    );
    let agent_finalizer = entry(
        field_manager::MEMBER_AGENT,
        "",
        json!({"f:metadata": {"f:finalizers": {}}}),
    );
    let agent_status = entry(
        field_manager::MEMBER_AGENT,
        "status",
        json!({"f:status": {"f:conditions": {}}}),
    );
    let edit = entry("kubectl-edit", "", json!({"f:spec": {"f:workload": {}}}));
    let timeout = Some("30s".to_string());
    let all = |extra: Vec<ManagedFieldsEntry>| {
        let mut v = vec![ours.clone(), agent_finalizer.clone(), agent_status.clone()];
        v.extend(extra);
        v
    };

    assert!(up_to_date(
        &work(3, Some("30s"), all(vec![])),
        3,
        &timeout,
        &None
    ));
    // Another index or health timeout: apply.
    assert!(!up_to_date(
        &work(2, Some("30s"), all(vec![])),
        3,
        &timeout,
        &None
    ));
    assert!(!up_to_date(&work(3, None, all(vec![])), 3, &timeout, &None));
    // Someone else edited the spec: apply, which takes it back.
    assert!(!up_to_date(
        &work(3, Some("30s"), all(vec![edit])),
        3,
        &timeout,
        &None
    ));
    // Not written by this controller at all (e.g. created by hand): apply.
    let theirs = vec![
        agent_finalizer.clone(),
        entry("kubectl", "", json!({"f:spec": {}})),
    ];
    assert!(!up_to_date(
        &work(3, Some("30s"), theirs),
        3,
        &timeout,
        &None
    ));
}

#[test]
fn the_cache_keeps_of_the_managed_fields_only_who_writes_the_spec() {
    let ours = entry(
        field_manager::WORK_GENERATOR,
        "",
        json!({"f:spec": {"f:resourceSnapshotIndex": {}, "f:workload": {"f:manifests": {}}}}),
    );
    let agent_finalizer = entry(
        field_manager::MEMBER_AGENT,
        "",
        json!({"f:metadata": {"f:finalizers": {"v:\"fleethub.dev/applied\"": {}}}}),
    );
    let agent_status = entry(
        field_manager::MEMBER_AGENT,
        "status",
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Applied\"}": {}}}}),
    );
    let edit = entry(
        "kubectl-edit",
        "",
        json!({"f:spec": {"f:healthTimeout": {}}}),
    );
    let timeout = Some("30s".to_string());
    for entries in [
        vec![ours.clone(), agent_finalizer.clone(), agent_status.clone()],
        vec![ours.clone(), agent_status.clone(), edit.clone()],
        vec![agent_finalizer.clone(), edit.clone()],
        vec![agent_status.clone()],
        vec![],
    ] {
        let full = work(3, Some("30s"), entries);
        let mut cached = full.clone();
        slim_work(&mut cached);
        assert_eq!(
            up_to_date(&cached, 3, &timeout, &None),
            up_to_date(&full, 3, &timeout, &None),
            "{:?}",
            full.metadata.managed_fields
        );
        let kept = cached.metadata.managed_fields.unwrap();
        assert_eq!(
            kept.len(),
            full.metadata
                .managed_fields
                .unwrap()
                .iter()
                .filter(|e| writes_spec(e))
                .count()
        );
        assert!(
            kept.iter()
                .all(|e| e.fields_v1 == Some(FieldsV1(json!({"f:spec": {}}))))
        );
    }
}

fn binding(state: BindingState, index: Option<i64>) -> Binding {
    let mut b = Binding::new(
        "web-a",
        fleethub_crds::binding::BindingSpec {
            placement_name: "web".into(),
            target_cluster: "a".into(),
            state,
            resource_snapshot_index: index,
            update_run_name: None,
            health_timeout: Some("30s".into()),
            ..Default::default()
        },
    );
    b.metadata.uid = Some("uid-b".into());
    b.metadata.generation = Some(2);
    b
}

#[test]
fn the_cache_keeps_everything_a_reconcile_reads_but_the_manifests() {
    let ours = entry(
        field_manager::WORK_GENERATOR,
        "",
        json!({"f:spec": {"f:resourceSnapshotIndex": {}, "f:workload": {}}}),
    );
    let bound = binding(BindingState::Bound, Some(3));
    let manifests: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("c{i}"), "namespace": "app"},
                        "data": {"k": "v".repeat(1000)}})
        })
        .collect();
    let mut full = desired_work(&bound, 3, manifests, None);
    full.metadata.managed_fields = Some(vec![ours]);
    full.metadata.generation = Some(4);
    full.annotations_mut().insert(
        OVERRIDES_ANNOTATION.to_string(),
        "app/web-override-0".to_string(),
    );
    full.status = Some(WorkStatus {
        applied_resource_snapshot_index: Some(3),
        ..Default::default()
    });
    let mut cached = full.clone();
    slim_work(&mut cached);

    assert!(cached.spec.workload.manifests.is_empty());
    assert!(
        serde_json::to_vec(&cached).unwrap().len() * 10 < serde_json::to_vec(&full).unwrap().len()
    );
    // What a reconcile reads from the cache is all there: the plan, the overrides the Work
    // was written with, and the member's report.
    assert_eq!(plan(&bound, Some(&cached), &None), Step::Keep(3));
    assert_eq!(
        plan(&bound, Some(&cached), &None),
        plan(&bound, Some(&full), &None)
    );
    assert_eq!(cached.metadata.annotations, full.metadata.annotations);
    let sync = Sync {
        status: TRUE,
        reason: reason::WORK_SYNCHRONIZED,
        message: "carried".into(),
    };
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    assert_eq!(
        binding_status(&bound, &sync, Some(&cached), now),
        binding_status(&bound, &sync, Some(&full), now)
    );
}

#[test]
fn a_changed_apply_strategy_rewrites_the_work() {
    let ours = entry(
        field_manager::WORK_GENERATOR,
        "",
        json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
    );
    let current = work(3, Some("30s"), vec![ours]);
    let bound = binding(BindingState::Bound, Some(3));
    let never = Some(ApplyStrategy {
        when_to_take_over: Some(fleethub_crds::apply_strategy::WhenToTakeOver::Never),
        ..Default::default()
    });
    assert_eq!(plan(&bound, Some(&current), &never), Step::Apply(3));
    let w = desired_work(&bound, 3, vec![], never.clone());
    assert_eq!(
        serde_json::to_value(&w).unwrap()["spec"]["applyStrategy"],
        json!({"whenToTakeOver": "Never"})
    );
}

#[test]
fn the_plan_follows_the_binding_state_and_the_work() {
    let ours = entry(
        field_manager::WORK_GENERATOR,
        "",
        json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
    );
    let current = work(3, Some("30s"), vec![ours]);
    let bound = binding(BindingState::Bound, Some(3));
    assert_eq!(plan(&bound, Some(&current), &None), Step::Keep(3));
    assert_eq!(plan(&bound, None, &None), Step::Apply(3));
    let moved = binding(BindingState::Bound, Some(4));
    assert_eq!(plan(&moved, Some(&current), &None), Step::Apply(4));
    let scheduled = binding(BindingState::Scheduled, None);
    assert_eq!(plan(&scheduled, Some(&current), &None), Step::Wait);
    let unscheduled = binding(BindingState::Unscheduled, Some(3));
    assert_eq!(plan(&unscheduled, Some(&current), &None), Step::Remove);
}

#[test]
fn the_work_is_typed_owned_by_its_binding_and_carries_no_nulls() {
    let mut b = binding(BindingState::Bound, Some(3));
    b.spec.health_timeout = None;
    let manifest = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}});
    let w = desired_work(&b, 3, vec![manifest.clone()], None);
    let v = serde_json::to_value(&w).unwrap();
    assert_eq!(
        v,
        json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Work",
            "metadata": {
                "name": "web", "namespace": "fleet-member-a",
                "labels": {"fleethub.dev/placement": "web", "fleethub.dev/cluster": "a"},
                "ownerReferences": [{"apiVersion": "fleethub.dev/v1alpha1", "kind": "Binding",
                                     "name": "web-a", "uid": "uid-b", "controller": true}],
            },
            "spec": {"placementName": "web", "resourceSnapshotIndex": 3,
                     "workload": {"manifests": [manifest]}},
        })
    );
}

#[test]
fn the_binding_reports_only_what_the_member_said_about_the_current_work() {
    let b = binding(BindingState::Bound, Some(3));
    let sync = Sync {
        status: TRUE,
        reason: reason::WORK_SYNCHRONIZED,
        message: "carried".into(),
    };
    let mut w = work(3, Some("30s"), vec![]);
    w.metadata.generation = Some(5);
    let condition =
        |type_: &str, status: &str, generation: i64| fleethub_crds::conditions::Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: format!("{type_} {status}"),
            observed_generation: Some(generation),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
        };
    w.status = Some(WorkStatus {
        // Applied describes the current generation; Available an older one.
        conditions: vec![condition(APPLIED, FALSE, 5), condition(AVAILABLE, TRUE, 4)],
        applied_resource_snapshot_index: Some(2),
        ..Default::default()
    });
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let status = binding_status(&b, &sync, Some(&w), now);
    let of = |t: &str| {
        let c = find(&status.conditions, t).unwrap();
        (
            c.status.as_str(),
            c.reason.as_str(),
            c.message.as_str(),
            c.observed_generation,
        )
    };
    assert_eq!(
        of(WORK_SYNCHRONIZED),
        (TRUE, reason::WORK_SYNCHRONIZED, "carried", Some(2))
    );
    assert_eq!(
        of(APPLIED),
        (
            FALSE,
            reason::MEMBER_REPORTED_NOT_READY,
            "Applied False",
            Some(2)
        )
    );
    assert_eq!(
        of(AVAILABLE),
        (
            FALSE,
            reason::NOT_REPORTED,
            "the member has not reported on its Work yet",
            Some(2)
        )
    );
    assert_eq!(status.applied_resource_snapshot_index, Some(2));

    w.status.as_mut().unwrap().conditions = vec![condition(AVAILABLE, TRUE, 5)];
    let status = binding_status(&b, &sync, Some(&w), now);
    let available = find(&status.conditions, AVAILABLE).unwrap();
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        (TRUE, reason::MEMBER_REPORTED)
    );
    let gone = binding_status(&b, &sync, None, now);
    assert_eq!(gone.applied_resource_snapshot_index, None);
}

#[test]
fn the_binding_lists_what_differs_on_the_member_and_its_last_correction() {
    use fleethub_crds::apply_strategy::{DriftCorrection, DriftType, FieldDiff, ManifestDrift};
    use fleethub_crds::work::{ManifestCondition, ManifestIdentifier};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let b = binding(BindingState::Bound, Some(3));
    let sync = Sync {
        status: TRUE,
        reason: reason::WORK_SYNCHRONIZED,
        message: "carried".into(),
    };
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let field = FieldDiff {
        path: "data.v".into(),
        member_value: Some("\"edited\"".into()),
        hub_value: Some("\"1\"".into()),
    };
    let id = |name: &str| ManifestIdentifier {
        kind: "ConfigMap".into(),
        version: "v1".into(),
        namespace: Some("app".into()),
        name: name.into(),
        ..Default::default()
    };
    let mut w = work(3, None, vec![]);
    w.status = Some(WorkStatus {
        conditions: vec![fleethub_crds::conditions::Condition {
            type_: APPLIED.into(),
            status: FALSE.into(),
            reason: "Drifted".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(now),
        }],
        manifest_conditions: vec![
            ManifestCondition {
                identifier: id("a"),
                drift: Some(ManifestDrift {
                    type_: DriftType::Drifted,
                    first_seen_time: Time(now),
                    field_count: 1,
                    fields: vec![field.clone()],
                }),
                ..Default::default()
            },
            ManifestCondition {
                identifier: id("b"),
                last_correction: Some(DriftCorrection {
                    time: Time(now),
                    fields: vec![field],
                }),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    let status = binding_status(&b, &sync, Some(&w), now);
    let drifted = find(&status.conditions, DRIFTED).unwrap();
    assert_eq!(
        (drifted.status.as_str(), drifted.reason.as_str()),
        (TRUE, "Drifted")
    );
    assert_eq!(
        drifted.message,
        "1 object differs from the hub: ConfigMap app/a (Drifted: data.v: member \"edited\", hub \"1\")"
    );
    assert_eq!(status.drifted_object_count, Some(1));
    assert_eq!(status.drifted_objects[0].object, "ConfigMap app/a");
    let correction = status.last_drift_correction.clone().unwrap();
    assert_eq!(correction.object, "ConfigMap app/b");
    // A correction is announced once: not again when the binding already records it.
    assert!(new_correction(None, Some(&correction)).is_some());
    assert!(new_correction(Some(&correction), Some(&correction)).is_none());

    w.status.as_mut().unwrap().manifest_conditions.clear();
    let synced = binding_status(&b, &sync, Some(&w), now);
    let drifted = find(&synced.conditions, DRIFTED).unwrap();
    assert_eq!(
        (drifted.status.as_str(), drifted.reason.as_str()),
        (FALSE, drift::reason::IN_SYNC)
    );
    assert!(synced.drifted_objects.is_empty());
    assert_eq!(synced.drifted_object_count, None);
    let unreported = binding_status(&b, &sync, None, now);
    let drifted = find(&unreported.conditions, DRIFTED).unwrap();
    assert_eq!(drifted.reason, reason::NOT_REPORTED);
}

#[test]
fn a_work_triggers_its_binding_by_the_bindings_own_key() {
    let b = binding(BindingState::Bound, Some(1));
    let work = desired_work(&b, 1, Vec::new(), None);
    assert!(work.metadata.namespace.is_some());
    let key = binding_of(&work).expect("the Work names its Binding");
    // The same key as the Binding's own watch gives: no namespace.
    assert_eq!(key, ObjectRef::from_obj(&b));
    assert_eq!(key.namespace, None);
    let mut orphan = work.clone();
    orphan.metadata.owner_references = None;
    assert_eq!(binding_of(&orphan), None);
}

/// A Work just written waits (at most REPORT_GRACE) for its member's settled report (applied
/// and available, or failed) before its Binding's status is written; such a report, a failure
/// or a Work gone end the wait at once.
#[test]
fn the_binding_status_waits_briefly_for_the_members_settled_report_on_a_new_work() {
    let condition =
        |type_: &str, status: &str, reason: &str, g: i64| fleethub_crds::conditions::Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: Some(g),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
        };
    // What the member reported at generation g: applied and available (`TRUE`), applied with
    // workloads not ready (`NOT_READY`), or not applied (`FALSE`).
    const NOT_READY: &str = "not ready";
    let report = |g: i64, how: &str| WorkStatus {
        conditions: match how {
            TRUE => vec![
                condition(APPLIED, TRUE, "Applied", g),
                condition(AVAILABLE, TRUE, "WorkloadsAvailable", g),
            ],
            NOT_READY => vec![
                condition(APPLIED, TRUE, "Applied", g),
                condition(AVAILABLE, FALSE, "WorkloadsNotReady", g),
            ],
            _ => vec![condition(APPLIED, FALSE, "ApplyFailed", g)],
        },
        ..Default::default()
    };
    let outcome_with = |generation: i64, reported: Option<(i64, &str)>, status: &'static str| {
        let mut w = work(3, None, vec![]);
        w.metadata.generation = Some(generation);
        w.status = reported.map(|(g, how)| report(g, how));
        Outcome {
            work: Some(Arc::new(w)),
            sync: Sync {
                status,
                reason: reason::WORK_SYNCHRONIZED,
                message: String::new(),
            },
            requeue: Requeue::await_change(),
            overridden: None,
        }
    };
    let outcome = |generation: i64, reported: Option<i64>, status: &'static str| {
        outcome_with(generation, reported.map(|g| (g, TRUE)), status)
    };
    let key = || "fleet-member-a/web".to_string();
    let reports = FirstReports::default();
    // A new generation written: wait the whole grace.
    assert_eq!(
        reports.wait(key(), Step::Apply(3), Some(1), &outcome(2, Some(1), TRUE)),
        Some(REPORT_GRACE)
    );
    // The Work's own event, before the member reported: keep waiting, for what is left.
    let left = reports.wait(key(), Step::Keep(3), Some(2), &outcome(2, Some(1), TRUE));
    assert!(
        left.is_some_and(|l| l <= REPORT_GRACE && !l.is_zero()),
        "{left:?}"
    );
    // The member applied it and its workloads are not ready yet: the next report follows
    // when they are; keep waiting.
    assert!(
        reports
            .wait(
                key(),
                Step::Keep(3),
                Some(2),
                &outcome_with(2, Some((2, NOT_READY)), TRUE)
            )
            .is_some()
    );
    // The member's report of availability: write now, and forget the Work.
    assert_eq!(
        reports.wait(key(), Step::Keep(3), Some(2), &outcome(2, Some(2), TRUE)),
        None
    );
    assert_eq!(
        reports.wait(key(), Step::Keep(3), Some(2), &outcome(2, Some(1), TRUE)),
        None,
        "a Work no longer waiting is reported on at once"
    );
    // A Work written again without a change (same generation), or not in sync: no wait.
    assert_eq!(
        reports.wait(key(), Step::Apply(3), Some(2), &outcome(2, None, TRUE)),
        None
    );
    assert_eq!(
        reports.wait(key(), Step::Apply(3), Some(1), &outcome(2, None, FALSE)),
        None
    );
    // A Work removed while waiting ends its wait.
    assert!(
        reports
            .wait(key(), Step::Apply(3), Some(1), &outcome(2, None, TRUE))
            .is_some()
    );
    let gone = Outcome {
        work: None,
        ..outcome(2, None, FALSE)
    };
    assert_eq!(reports.wait(key(), Step::Remove, Some(2), &gone), None);
    assert!(reports.0.lock().unwrap().is_empty());
    // A failure to apply is settled: no wait.
    assert!(
        reports
            .wait(key(), Step::Apply(3), Some(1), &outcome(2, None, TRUE))
            .is_some()
    );
    assert_eq!(
        reports.wait(
            key(),
            Step::Keep(3),
            Some(2),
            &outcome_with(2, Some((2, FALSE)), TRUE)
        ),
        None
    );
}

#[test]
fn a_placement_re_queues_its_bindings_only_when_its_apply_strategy_or_uid_changes() {
    let placement = |uid: &str, apply_strategy: serde_json::Value, status: serde_json::Value| {
        let p: Placement = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "web", "uid": uid},
            "spec": {"resourceSelectors": [], "strategy": {"applyStrategy": apply_strategy}},
            "status": status,
        }))
        .unwrap();
        apply_strategy_version(&p)
    };
    let none = json!(null);
    let if_not_drifted = json!({"whenToApply": "IfNotDrifted"});
    let first = placement("1", none.clone(), json!({}));
    assert!(first.is_some(), "every placement has a value to compare");
    // Its status, rewritten as its clusters report, is not what its Works carry.
    assert_eq!(
        placement("1", none.clone(), json!({"selectedClusterCount": 3})),
        first
    );
    assert_ne!(placement("1", if_not_drifted.clone(), json!({})), first);
    assert_ne!(
        placement("1", if_not_drifted.clone(), json!({})),
        placement("1", json!({"whenToApply": "Always"}), json!({}))
    );
    // The same name and strategy, made again.
    assert_ne!(placement("2", none, json!({})), first);
    // Without a strategy at all.
    let bare: Placement = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "uid": "1"}, "spec": {"resourceSelectors": []},
    }))
    .unwrap();
    assert_eq!(apply_strategy_version(&bare), first);
}
