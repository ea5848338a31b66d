//! The manifests of resource snapshots, read once for all the Works that carry them: a run over
//! 1,000 clusters writes 1,000 Works of the same snapshot, and each read the snapshot (every
//! part) from the API server, 165 ms apiece on a busy one at that scale.
//!
//! An entry is trusted only while a metadata watch of ResourceSnapshots shows every part of it
//! with the uid and resourceVersion it was read at: a snapshot deleted and created again (its
//! placement re-created), or changed by hand, is read again. A snapshot the watch has not shown
//! yet is read from the API server, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fleethub_crds::{ResourceSnapshot, names};
use futures::StreamExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::Error;

/// At most this many bytes of manifests (as JSON) are kept; the least recently used snapshot
/// goes first.
const MAX_BYTES: usize = 64 << 20;

/// A part as it was read: its uid and resourceVersion.
type Version = (Option<String>, Option<String>);

struct Entry {
    /// Every part's name and version, in order.
    parts: Vec<(String, Version)>,
    manifests: Arc<Vec<serde_json::Value>>,
    bytes: usize,
    /// When it was last used (a counter, for eviction).
    used: u64,
}

#[derive(Default)]
struct Entries {
    by_name: HashMap<String, Entry>,
    bytes: usize,
    clock: u64,
}

/// Manifests of snapshots read before, checked against a metadata watch.
pub struct Snapshots {
    client: Client,
    cache: Cache,
}

/// The entries, and the watch's view of the snapshots they were read from.
struct Cache {
    meta: Store<PartialObjectMeta<ResourceSnapshot>>,
    entries: Mutex<Entries>,
    max_bytes: usize,
}

impl Snapshots {
    /// A cache fed by a metadata watch of ResourceSnapshots that runs until `shutdown`.
    pub fn start(client: Client, shutdown: CancellationToken) -> Arc<Snapshots> {
        let (meta, writer) = reflector::store();
        let watch = fleethub_runtime::reflected_events(
            Api::<PartialObjectMeta<ResourceSnapshot>>::all(client.clone()),
            fleethub_runtime::watcher_config(),
            writer,
        )
        .for_each(|_| std::future::ready(()));
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = watch => {}
            }
        });
        Arc::new(Snapshots {
            client,
            cache: Cache::new(meta, MAX_BYTES),
        })
    }

    /// The manifests of snapshot `index` of `placement`, all parts in order; `None` when it
    /// does not exist.
    pub async fn manifests(
        &self,
        placement: &str,
        index: u64,
    ) -> Result<Option<Arc<Vec<serde_json::Value>>>, Error> {
        let name = names::resource_snapshot_name(placement, index);
        if let Some(manifests) = self.cache.get(&name) {
            return Ok(Some(manifests));
        }
        let Some(parts) = read(&self.client, placement, index).await? else {
            return Ok(None);
        };
        let versions = parts
            .iter()
            .map(|p| (p.name_any(), version_of(&p.metadata)))
            .collect();
        let manifests: Vec<serde_json::Value> =
            parts.into_iter().flat_map(|p| p.spec.resources).collect();
        let manifests = Arc::new(manifests);
        self.cache.keep(name, versions, manifests.clone());
        Ok(Some(manifests))
    }
}

impl Cache {
    fn new(meta: Store<PartialObjectMeta<ResourceSnapshot>>, max_bytes: usize) -> Cache {
        Cache {
            meta,
            entries: Mutex::default(),
            max_bytes,
        }
    }

    /// The entry of `name`, when the watch shows every part as it was read.
    fn get(&self, name: &str) -> Option<Arc<Vec<serde_json::Value>>> {
        let mut entries = self.lock();
        let entries = &mut *entries;
        let entry = entries.by_name.get_mut(name)?;
        let current = entry.parts.iter().all(|(part, read)| {
            self.meta
                .get(&ObjectRef::new(part))
                .is_some_and(|m| version_of(&m.metadata) == *read)
        });
        if !current {
            return None;
        }
        entries.clock += 1;
        entry.used = entries.clock;
        Some(entry.manifests.clone())
    }

    fn keep(
        &self,
        name: String,
        parts: Vec<(String, Version)>,
        manifests: Arc<Vec<serde_json::Value>>,
    ) {
        let bytes = manifests
            .iter()
            .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
            .sum::<usize>();
        if bytes > self.max_bytes {
            return;
        }
        let mut entries = self.lock();
        entries.clock += 1;
        let entry = Entry {
            parts,
            manifests,
            bytes,
            used: entries.clock,
        };
        if let Some(old) = entries.by_name.insert(name, entry) {
            entries.bytes -= old.bytes;
        }
        entries.bytes += bytes;
        while entries.bytes > self.max_bytes {
            let Some(oldest) = entries
                .by_name
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            if let Some(gone) = entries.by_name.remove(&oldest) {
                entries.bytes -= gone.bytes;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn version_of(meta: &kube::api::ObjectMeta) -> Version {
    (meta.uid.clone(), meta.resource_version.clone())
}

/// Every part of snapshot `index` of `placement`, read from the API server, in order.
async fn read(
    client: &Client,
    placement: &str,
    index: u64,
) -> Result<Option<Vec<ResourceSnapshot>>, Error> {
    let api: Api<ResourceSnapshot> = Api::all(client.clone());
    let Some(first) = api
        .get_opt(&names::resource_snapshot_name(placement, index))
        .await?
    else {
        return Ok(None);
    };
    let count = first.spec.parts.max(1);
    let mut parts = vec![first];
    for part in 1..count as u32 {
        let name = names::resource_snapshot_part_name(placement, index, part);
        let Some(s) = api.get_opt(&name).await? else {
            return Err(Error::Invalid(format!(
                "ResourceSnapshot {name} (part {part} of {count} of snapshot {index}) is missing"
            )));
        };
        parts.push(s);
    }
    Ok(Some(parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn meta(name: &str, uid: &str, version: &str) -> PartialObjectMeta<ResourceSnapshot> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            _phantom: Default::default(),
        }
    }

    fn read_at(name: &str, uid: &str, version: &str) -> (String, Version) {
        (name.into(), (Some(uid.into()), Some(version.into())))
    }

    fn manifests(n: usize) -> Arc<Vec<serde_json::Value>> {
        Arc::new(vec![
            json!({"kind": "ConfigMap", "data": {"v": "x".repeat(n)}}),
        ])
    }

    #[test]
    fn an_entry_is_used_only_while_the_watch_shows_every_part_as_it_was_read() {
        let (store, mut writer) = reflector::store();
        let cache = Cache::new(store, MAX_BYTES);
        let parts = vec![read_at("p-0", "u0", "5"), read_at("p-0-part-1", "u1", "6")];
        cache.keep("p-0".into(), parts, manifests(10));
        // The watch has not shown the snapshot yet: read it.
        assert!(cache.get("p-0").is_none());
        writer.apply_watcher_event(&Event::Apply(meta("p-0", "u0", "5")));
        // One part still unseen.
        assert!(cache.get("p-0").is_none());
        writer.apply_watcher_event(&Event::Apply(meta("p-0-part-1", "u1", "6")));
        assert_eq!(cache.get("p-0"), Some(manifests(10)));
        // Deleted and created again under the same name: another uid.
        writer.apply_watcher_event(&Event::Apply(meta("p-0-part-1", "u9", "8")));
        assert!(cache.get("p-0").is_none());
        // Changed in place: another version.
        writer.apply_watcher_event(&Event::Apply(meta("p-0-part-1", "u1", "7")));
        assert!(cache.get("p-0").is_none());
        writer.apply_watcher_event(&Event::Delete(meta("p-0-part-1", "u1", "7")));
        assert!(cache.get("p-0").is_none());
        assert!(cache.get("unknown").is_none());
    }

    #[test]
    fn the_least_recently_used_snapshot_goes_when_the_bytes_run_out() {
        let (store, mut writer) = reflector::store();
        for n in ["a", "b", "c"] {
            writer.apply_watcher_event(&Event::Apply(meta(n, n, "1")));
        }
        // Room for two entries of about 1,040 bytes each.
        let cache = Cache::new(store, 2_500);
        cache.keep("a".into(), vec![read_at("a", "a", "1")], manifests(1000));
        cache.keep("b".into(), vec![read_at("b", "b", "1")], manifests(1000));
        assert!(cache.get("a").is_some()); // a is now used after b
        cache.keep("c".into(), vec![read_at("c", "c", "1")], manifests(1000));
        assert!(cache.get("a").is_some());
        assert!(cache.get("b").is_none(), "b was the least recently used");
        assert!(cache.get("c").is_some());
        // A snapshot larger than the whole cache is not kept.
        cache.keep("big".into(), vec![read_at("a", "a", "1")], manifests(5000));
        assert!(cache.get("big").is_none());
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert!(cache.lock().bytes <= 2_500);
    }
}
