//! What the work generator's Work cache keeps of a Work, and whether a kept Work is already
//! what this controller would apply.

use fleethub_crds::apply_strategy::ApplyStrategy;
use fleethub_crds::{Work, field_manager};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

/// Whether `work` already is what this controller would apply for `index` and `timeout`, so
/// that a reconcile after a member's report (most of them, and every Binding after a hub
/// restart) makes no request to read the snapshot or write the Work. The Work's managed fields
/// say who wrote its spec: only this controller may have (the agent writes the status and a
/// finalizer); anyone else's edit of the spec makes it stale, and the apply takes it back.
pub(super) fn up_to_date(
    work: &Work,
    index: i64,
    timeout: &Option<String>,
    strategy: &Option<ApplyStrategy>,
) -> bool {
    let entries = work.metadata.managed_fields.as_deref().unwrap_or_default();
    let (ours, others): (Vec<_>, Vec<_>) = entries
        .iter()
        .filter(|e| writes_spec(e))
        .partition(|e| e.manager.as_deref() == Some(field_manager::WORK_GENERATOR));
    work.spec.resource_snapshot_index == index
        && work.spec.health_timeout == *timeout
        && work.spec.apply_strategy == *strategy
        && work.metadata.deletion_timestamp.is_none()
        && !ours.is_empty()
        && others.is_empty()
}

/// Whether managed-fields `entry` writes the spec (of the object itself, not a subresource).
pub(super) fn writes_spec(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref().unwrap_or_default().is_empty()
        && entry
            .fields_v1
            .as_ref()
            .is_some_and(|f| f.0.get("f:spec").is_some())
}

/// `work` as this controller's cache keeps it: without its manifests, which nothing here reads
/// from the cache ([`up_to_date`] goes by the index, the settings and the managed fields; an
/// apply sends the manifests anew). They are most of a Work, and parsed into JSON values they
/// take many times their size in memory: 1,000 Works of 40 KB each held 535 MiB.
///
/// Of its managed fields only who writes the spec is kept, as `{"f:spec": {}}` for each such
/// manager: all [`up_to_date`] reads. In full they are most of what is left of a slim Work, and
/// the cache holds one Work per placement and cluster (20,000 at 10,000 members and 100 runs).
pub(crate) fn slim_work(work: &mut Work) {
    work.spec.workload.manifests = Vec::new();
    if let Some(entries) = work.metadata.managed_fields.as_mut() {
        entries.retain(writes_spec);
        for entry in entries.iter_mut() {
            entry.fields_v1 = Some(FieldsV1(serde_json::json!({"f:spec": {}})));
            entry.time = None;
        }
    }
}
