//! The newest copy of an object a controller writes itself (the member agent: its Works on the
//! hub and their AppliedWorks on the member; the hub's work generator: Works and Bindings): the
//! watch cache's, or the one the controller's own last write of it returned, whichever is newer.
//!
//! A reconcile reads these from the caches instead of asking the API server each time. A cache
//! may lag behind the controller's own last write (the write's answer comes back before the
//! watch delivers it), and a reconcile that planned from that older copy would write an older
//! status back (drift first-seen times, applied hashes, the list of applied objects), or write
//! again what it just wrote. So the controller keeps the object each of its writes returned
//! until the cache shows that version or a newer one, and uses the newer of the two.
//!
//! Nothing is decided from memory alone: what is kept is the API server's own answer, and after
//! a restart nothing is kept, while the caches start from a consistent list (from etcd, or from
//! an API server's watch cache once it has caught up with etcd: newer than anything the previous
//! process wrote). Versions are compared as the numbers Kubernetes' etcd storage makes
//! them; when one is not a number, the reconcile reads the object from the API server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Resource;

/// Which copy of an object is the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The cache's copy (it has caught up with the controller's last write, or there was none).
    Cached,
    /// The copy the controller's last write returned.
    Written,
    /// Cannot tell: read it from the API server.
    Unknown,
}

/// Chooses between the cache's copy (its resourceVersion, `None` when the cache does not hold
/// the object) and the controller's last write (its resourceVersion, `None` when there was none).
pub fn choose(cached: Option<Option<&str>>, written: Option<Option<&str>>) -> Choice {
    let version = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
    match (cached, written) {
        (_, None) => Choice::Cached,
        // Not in the cache, yet written: the cache has not seen it created, or it was deleted
        // since. Only the API server knows.
        (None, Some(_)) => Choice::Unknown,
        (Some(c), Some(w)) => match (version(c), version(w)) {
            (Some(c), Some(w)) if c >= w => Choice::Cached,
            (Some(_), Some(_)) => Choice::Written,
            _ => Choice::Unknown,
        },
    }
}

/// The newest copy of one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Newest<K> {
    /// This copy.
    Object(Arc<K>),
    /// The cache does not hold it, and the controller did not write it since it started.
    Absent,
    /// Read it from the API server.
    Unknown,
}

/// The objects a controller's last writes returned, by name, until the cache catches up.
#[derive(Debug)]
pub struct LastWritten<K> {
    objects: Mutex<HashMap<String, Arc<K>>>,
    /// Applied to every object kept, as the cache it bridges slims its copies.
    slim: fn(&mut K),
}

impl<K> Default for LastWritten<K> {
    /// Keeps objects whole.
    fn default() -> Self {
        LastWritten {
            objects: Mutex::new(HashMap::new()),
            slim: |_| {},
        }
    }
}

impl<K: Resource> LastWritten<K> {
    /// Keeps objects as `slim` leaves them: what the cache it bridges keeps (a write's answer
    /// carries the managed fields, and a Work its manifests).
    pub fn slimmed_by(slim: fn(&mut K)) -> Self {
        LastWritten {
            objects: Mutex::new(HashMap::new()),
            slim,
        }
    }

    /// Records `object`, as a write of `key` returned it.
    pub fn record(&self, key: &str, mut object: K) {
        (self.slim)(&mut object);
        self.lock().insert(key.to_string(), Arc::new(object));
    }

    /// Forgets `key` (the object is gone).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Keeps only the writes `keep` keeps (by key and object; the others are gone, or the
    /// caches caught up with them).
    pub fn retain(&self, mut keep: impl FnMut(&str, &K) -> bool) {
        self.lock().retain(|k, o| keep(k, o));
    }

    /// How many writes the caches have not caught up with.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the caches have caught up with every write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newest of `cached` (the cache's copy of `key`) and the controller's last write of it.
    /// Once the cache has caught up, the write is forgotten.
    pub fn newest(&self, key: &str, cached: Option<Arc<K>>) -> Newest<K> {
        let mut objects = self.lock();
        let mut written = objects.get(key);
        // Another object of the same name (deleted and created again): versions of the two
        // say nothing about each other, and the cache has the one that exists.
        if let (Some(c), Some(w)) = (&cached, written)
            && let (Some(cu), Some(wu)) = (&c.meta().uid, &w.meta().uid)
            && cu != wu
        {
            objects.remove(key);
            written = None;
        }
        let choice = choose(
            cached
                .as_ref()
                .map(|c| c.meta().resource_version.as_deref()),
            written.map(|w| w.meta().resource_version.as_deref()),
        );
        match choice {
            Choice::Cached => {
                objects.remove(key);
                cached.map_or(Newest::Absent, Newest::Object)
            }
            Choice::Written => written.cloned().map_or(Newest::Unknown, Newest::Object),
            Choice::Unknown => Newest::Unknown,
        }
    }

    /// The newest copy of `key` ([`LastWritten::newest`]), or, when neither copy can be trusted,
    /// what `read` returns from the API server, kept as the newest copy. `None`: it is gone.
    pub async fn newest_or_read<E, F>(
        &self,
        key: &str,
        cached: Option<Arc<K>>,
        read: impl FnOnce() -> F,
    ) -> Result<Option<Arc<K>>, E>
    where
        F: std::future::Future<Output = Result<Option<K>, E>>,
    {
        match self.newest(key, cached) {
            Newest::Object(o) => Ok(Some(o)),
            Newest::Absent => Ok(None),
            Newest::Unknown => {
                let read = read().await?;
                match read {
                    Some(mut o) => {
                        (self.slim)(&mut o);
                        let o = Arc::new(o);
                        self.lock().insert(key.to_string(), o.clone());
                        Ok(Some(o))
                    }
                    None => {
                        self.forget(key);
                        Ok(None)
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<K>>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(version: &str, value: &str) -> ConfigMap {
        with_uid(version, value, "u1")
    }

    fn with_uid(version: &str, value: &str, uid: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    fn value(n: &Newest<ConfigMap>) -> Option<&str> {
        match n {
            Newest::Object(o) => o.data.as_ref()?.get("v").map(String::as_str),
            _ => None,
        }
    }

    #[test]
    fn the_newer_version_wins_and_numbers_compare_as_numbers() {
        assert_eq!(choose(Some(Some("5")), None), Choice::Cached);
        assert_eq!(choose(None, None), Choice::Cached);
        assert_eq!(choose(Some(Some("10")), Some(Some("9"))), Choice::Cached);
        assert_eq!(choose(Some(Some("9")), Some(Some("9"))), Choice::Cached);
        // "10" < "9" as text; as versions it is newer.
        assert_eq!(choose(Some(Some("9")), Some(Some("10"))), Choice::Written);
        assert_eq!(choose(None, Some(Some("10"))), Choice::Unknown);
        assert_eq!(choose(Some(Some("a")), Some(Some("10"))), Choice::Unknown);
        assert_eq!(choose(Some(None), Some(Some("10"))), Choice::Unknown);
        assert_eq!(choose(Some(Some("10")), Some(None)), Choice::Unknown);
    }

    #[test]
    fn a_lagging_cache_is_bridged_by_the_last_write_until_it_catches_up() {
        let written = LastWritten::default();
        // Nothing written: the cache answers, also that the object is not there.
        assert_eq!(
            value(&written.newest("c", Some(Arc::new(cm("3", "old"))))),
            Some("old")
        );
        assert_eq!(written.newest("c", None), Newest::Absent);

        written.record("c", cm("7", "mine"));
        // The cache still has version 3: the write is newer.
        assert_eq!(
            value(&written.newest("c", Some(Arc::new(cm("3", "old"))))),
            Some("mine")
        );
        assert_eq!(written.len(), 1);
        // The cache lost it: deleted since, or not listed yet; only the API server knows.
        assert_eq!(written.newest("c", None), Newest::Unknown);
        // The cache caught up (here with someone else's later change): it wins, and the write
        // is forgotten.
        assert_eq!(
            value(&written.newest("c", Some(Arc::new(cm("8", "theirs"))))),
            Some("theirs")
        );
        assert!(written.is_empty());
        assert_eq!(
            value(&written.newest("c", Some(Arc::new(cm("3", "old"))))),
            Some("old")
        );

        written.record("c", cm("9", "mine"));
        written.forget("c");
        assert!(written.is_empty());
        written.record("c", cm("9", "mine"));
        written.record("d", cm("9", "mine"));
        written.retain(|k, _| k == "d");
        assert_eq!(written.len(), 1);
    }

    #[tokio::test]
    async fn what_neither_copy_can_say_is_read_and_kept_until_the_cache_catches_up() {
        let written = LastWritten::default();
        written.record("c", cm("7", "mine"));
        let read = || async { Ok::<_, ()>(Some(cm("8", "read"))) };
        // Not in the cache: read, and kept.
        let got = written.newest_or_read("c", None, read).await.unwrap();
        assert_eq!(got.unwrap().data.as_ref().unwrap()["v"], "read");
        let again = written
            .newest_or_read("c", Some(Arc::new(cm("3", "old"))), || async {
                Err::<Option<ConfigMap>, ()>(())
            })
            .await;
        assert_eq!(again.unwrap().unwrap().data.as_ref().unwrap()["v"], "read");
        // Gone on the API server: forgotten.
        let gone = written
            .newest_or_read("c", None, || async { Ok::<_, ()>(None) })
            .await;
        assert_eq!(gone, Ok(None));
        assert!(written.is_empty());
    }

    #[tokio::test]
    async fn what_is_kept_is_slimmed_as_the_cache_slims_it() {
        let written = LastWritten::slimmed_by(|c: &mut ConfigMap| c.data = None);
        written.record("c", cm("7", "mine"));
        let Newest::Object(kept) = written.newest("c", Some(Arc::new(cm("6", "old")))) else {
            panic!("the write is newer than the cache");
        };
        assert_eq!(kept.data, None);
        // Not in the cache: read, and kept slim too.
        let read = written
            .newest_or_read("c", None, || async { Ok::<_, ()>(Some(cm("8", "read"))) })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.data, None);
        // Kept whole by default.
        let whole = LastWritten::default();
        whole.record("c", cm("7", "mine"));
        let Newest::Object(kept) = whole.newest("c", Some(Arc::new(cm("6", "old")))) else {
            panic!("the write is newer than the cache");
        };
        assert_eq!(kept.data.as_ref().unwrap()["v"], "mine");
    }

    #[test]
    fn a_write_of_another_object_of_the_same_name_is_ignored() {
        let written = LastWritten::default();
        written.record("c", with_uid("90", "deleted since", "old"));
        let created_again = Arc::new(with_uid("12", "new", "new"));
        assert_eq!(
            value(&written.newest("c", Some(created_again))),
            Some("new")
        );
        assert!(written.is_empty());
    }
}
