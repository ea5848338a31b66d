//! What the placement controller remembers about the content it gathered: a view, not a
//! decision (after a restart everything is gathered once).

use std::collections::BTreeMap;
use std::time::Instant;

use fleethub_crds::Placement;
use kube::ResourceExt;

use super::plan::RESYNC;

/// Which placements' selected content is known to be unchanged since it was last gathered.
/// Gathering lists every namespaced kind in a selected namespace (about 40 requests), and a
/// placement reconciles on every change of its Bindings (a member's report changes one several
/// times): without this, a 1,000-cluster rollout re-read its namespace thousands of times. A
/// view, not a decision: after a restart everything is gathered once.
#[derive(Default)]
pub struct ContentMarks {
    inner: std::sync::Mutex<ContentMarksInner>,
}

#[derive(Default)]
struct ContentMarksInner {
    /// Content changes seen per placement (by the content watches).
    changes: BTreeMap<String, u64>,
    /// Per placement: its UID and generation, the change count and time of the last gather,
    /// and the content hash it found.
    gathered: BTreeMap<String, Gathered>,
}

#[derive(Clone, PartialEq)]
struct Gathered {
    uid: Option<String>,
    generation: Option<i64>,
    changes: u64,
    at: Instant,
    hash: String,
}

impl ContentMarks {
    fn lock(&self) -> std::sync::MutexGuard<'_, ContentMarksInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A selected object of `placement` changed.
    pub fn changed(&self, placement: &str) {
        *self
            .lock()
            .changes
            .entry(placement.to_string())
            .or_default() += 1;
    }

    /// The change count to record with a gather that starts now.
    pub fn changes(&self, placement: &str) -> u64 {
        self.lock()
            .changes
            .get(placement)
            .copied()
            .unwrap_or_default()
    }

    /// Whether `placement`'s content is known to hash to `latest_hash` (its latest snapshot):
    /// gathered for this placement object and generation, with no content change since, less
    /// than [`RESYNC`] ago (kinds the hub does not watch are re-read that often).
    pub fn unchanged(&self, placement: &Placement, latest_hash: Option<&str>) -> bool {
        let inner = self.lock();
        let name = placement.name_any();
        let changes = inner.changes.get(&name).copied().unwrap_or_default();
        inner.gathered.get(&name).is_some_and(|g| {
            g.uid == placement.metadata.uid
                && g.generation == placement.metadata.generation
                && g.changes == changes
                && g.at.elapsed() < RESYNC
                && Some(g.hash.as_str()) == latest_hash
        })
    }

    /// `placement`'s content, gathered from change count `changes` on at `at`, hashes to `hash`.
    pub fn gathered(&self, placement: &Placement, changes: u64, at: Instant, hash: String) {
        let g = Gathered {
            uid: placement.metadata.uid.clone(),
            generation: placement.metadata.generation,
            changes,
            at,
            hash,
        };
        self.lock().gathered.insert(placement.name_any(), g);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn placement(generation: i64) -> Placement {
        let mut p: Placement = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "web", "uid": "u1", "generation": generation},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": "app"}],
                     "policy": {"placementType": "PickAll"}},
        }))
        .unwrap();
        p.metadata.generation = Some(generation);
        p
    }

    #[test]
    fn content_is_gathered_again_after_a_change_a_new_generation_or_another_snapshot() {
        let marks = ContentMarks::default();
        let p = placement(1);
        assert!(!marks.unchanged(&p, Some("h1")), "never gathered");

        let start = marks.changes("web");
        marks.gathered(&p, start, Instant::now(), "h1".into());
        assert!(marks.unchanged(&p, Some("h1")));
        assert!(
            !marks.unchanged(&p, Some("h0")),
            "the latest snapshot holds other content"
        );
        assert!(
            !marks.unchanged(&placement(2), Some("h1")),
            "the spec changed"
        );

        marks.changed("web");
        assert!(
            !marks.unchanged(&p, Some("h1")),
            "a selected object changed"
        );

        // A change during a gather is not lost: the gather counts from where it started.
        let start = marks.changes("web");
        marks.changed("web");
        marks.gathered(&p, start, Instant::now(), "h1".into());
        assert!(!marks.unchanged(&p, Some("h1")));
    }
}
