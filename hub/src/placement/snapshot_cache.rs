//! The placement controller's view of its ResourceSnapshots: a cache of them without their
//! manifests (the plan reads only their index, part, hash and names), trusted for a placement
//! once it shows every snapshot this controller created or deleted for it. Until then the
//! snapshots are listed from the API server, as every reconcile once did: a cache that missed
//! the controller's own cut would have it cut the same index again, and one that missed a prune
//! would keep a deleted snapshot as the latest.

use std::collections::HashMap;
use std::sync::Mutex;

use fleethub_crds::ResourceSnapshot;
use kube::ResourceExt;

/// Drops what the plan never reads from a cached snapshot: its manifests and managed fields.
pub fn slim(snapshot: &mut ResourceSnapshot) {
    snapshot.spec.resources = Vec::new();
    fleethub_runtime::strip_managed_fields(snapshot);
}

/// Snapshot writes of one placement the cache has not shown yet.
#[derive(Debug, Default)]
struct Unseen {
    /// Created: (name, uid).
    created: Vec<(String, String)>,
    /// Deleted: (name, uid), or no uid when the delete's answer had none.
    deleted: Vec<(String, Option<String>)>,
}

/// This controller's snapshot writes, by placement, until the cache shows them.
#[derive(Debug, Default)]
pub struct OwnSnapshotWrites {
    unseen: Mutex<HashMap<String, Unseen>>,
}

impl OwnSnapshotWrites {
    /// Records snapshot `created` of `placement`, as its create returned it.
    pub fn created(&self, placement: &str, created: &ResourceSnapshot) {
        let entry = (created.name_any(), created.uid().unwrap_or_default());
        self.lock()
            .entry(placement.to_string())
            .or_default()
            .created
            .push(entry);
    }

    /// Records snapshot `name` of `placement` deleted (`uid`: the deleted object's, if known).
    pub fn deleted(&self, placement: &str, name: &str, uid: Option<String>) {
        self.lock()
            .entry(placement.to_string())
            .or_default()
            .deleted
            .push((name.to_string(), uid));
    }

    /// `placement`'s snapshots from `cached` (the cache's snapshots of that placement), or
    /// `None` while the cache does not show one of this controller's writes yet.
    pub fn view(
        &self,
        placement: &str,
        cached: Vec<ResourceSnapshot>,
    ) -> Option<Vec<ResourceSnapshot>> {
        let mut unseen = self.lock();
        if let Some(writes) = unseen.get(placement) {
            let uid_of = |name: &str| {
                cached
                    .iter()
                    .find(|s| s.name_any() == name)
                    .map(|s| s.uid().unwrap_or_default())
            };
            let created_seen = writes
                .created
                .iter()
                .all(|(name, uid)| uid_of(name).as_ref() == Some(uid));
            // A deleted name may be back: this controller re-creates a part it deleted (the
            // leftovers of an interrupted cut) under the same name.
            let deleted_seen = writes.deleted.iter().all(|(name, uid)| match uid_of(name) {
                None => true,
                Some(now) => {
                    uid.as_ref().is_some_and(|gone| gone != &now)
                        || writes.created.iter().any(|(n, u)| n == name && u == &now)
                }
            });
            if !(created_seen && deleted_seen) {
                return None;
            }
            unseen.remove(placement);
        }
        Some(cached)
    }

    /// Forgets the writes of placements `keep` says are gone.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|placement, _| keep(placement));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Unseen>> {
        self.unseen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::resource_snapshot::ResourceSnapshotSpec;

    fn snapshot(name: &str, uid: &str) -> ResourceSnapshot {
        let mut s = ResourceSnapshot::new(
            name,
            ResourceSnapshotSpec {
                placement_name: "web".into(),
                resources: vec![serde_json::json!({"kind": "ConfigMap"})],
                ..Default::default()
            },
        );
        s.metadata.uid = Some(uid.into());
        s
    }

    #[test]
    fn the_cache_is_trusted_once_it_shows_the_controllers_own_writes() {
        let writes = OwnSnapshotWrites::default();
        let old = snapshot("web-0", "u0");
        assert!(writes.view("web", vec![old.clone()]).is_some());

        writes.created("web", &snapshot("web-1", "u1"));
        writes.deleted("web", "web-0", Some("u0".into()));
        // Neither write shows yet; then only the create; then both.
        assert!(writes.view("web", vec![old.clone()]).is_none());
        assert!(
            writes
                .view("web", vec![old.clone(), snapshot("web-1", "u1")])
                .is_none()
        );
        // Another placement's view is not held back.
        assert!(writes.view("api", vec![]).is_some());
        let seen = writes.view("web", vec![snapshot("web-1", "u1")]).unwrap();
        assert_eq!(seen.len(), 1);
        // Once seen, the record is gone: the cache is trusted as it is.
        assert!(writes.view("web", vec![]).is_some());
    }

    #[test]
    fn a_part_deleted_and_created_again_under_its_name_is_seen_by_its_new_uid() {
        let writes = OwnSnapshotWrites::default();
        writes.deleted("web", "web-2-part-1", Some("old".into()));
        writes.created("web", &snapshot("web-2-part-1", "new"));
        assert!(
            writes
                .view("web", vec![snapshot("web-2-part-1", "old")])
                .is_none()
        );
        assert!(
            writes
                .view("web", vec![snapshot("web-2-part-1", "new")])
                .is_some()
        );
        // A delete without a uid is seen once the name is gone.
        writes.deleted("web", "web-3", None);
        assert!(writes.view("web", vec![snapshot("web-3", "x")]).is_none());
        assert!(writes.view("web", vec![]).is_some());
    }

    #[test]
    fn slim_drops_manifests_and_managed_fields() {
        let mut s = snapshot("web-0", "u0");
        s.metadata.managed_fields = Some(vec![Default::default()]);
        slim(&mut s);
        assert!(s.spec.resources.is_empty());
        assert!(s.metadata.managed_fields.is_none());
    }
}
