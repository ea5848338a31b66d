//! The ApprovalRequests this process created that its cache does not show yet. A run is planned
//! again as soon as another report arrives, and a plan made before the cache of approvals has
//! seen the request its last plan created asks for it again: the hub API server refused 30
//! such creates (409) for 20 gates in the benchmark, each costing it about as much as a write.
//! A request asked for recently is not asked for again until the cache shows it or
//! [`ASK_AGAIN`] has passed (a request deleted before the cache ever saw it is then created
//! again; a repeat is only a refused create).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long a created request is taken as existing without the cache showing it.
pub(super) const ASK_AGAIN: Duration = Duration::from_secs(10);

/// When each ApprovalRequest not yet in the cache was created, by name.
#[derive(Default)]
pub(super) struct Asked {
    at: Mutex<HashMap<String, Instant>>,
}

impl Asked {
    /// Whether request `name` need not be created: this process created it within
    /// [`ASK_AGAIN`] and the cache (`cached`: whether it holds it) has not caught up. Once the
    /// cache holds it, it is forgotten.
    pub(super) fn recently(&self, name: &str, cached: bool) -> bool {
        let mut at = self.lock();
        if cached {
            at.remove(name);
            return false;
        }
        at.get(name).is_some_and(|t| t.elapsed() < ASK_AGAIN)
    }

    /// Records that request `name` exists now (created, or found existing).
    pub(super) fn created(&self, name: &str) {
        self.lock().insert(name.to_string(), Instant::now());
    }

    /// Forgets the requests asked for longer ago than [`ASK_AGAIN`].
    pub(super) fn forget_old(&self) {
        let mut at = self.lock();
        if !at.is_empty() {
            at.retain(|_, t| t.elapsed() < ASK_AGAIN);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_is_not_asked_for_again_until_the_cache_shows_it_or_time_passes() {
        let asked = Asked::default();
        assert!(!asked.recently("r-s1", false), "never asked");
        asked.created("r-s1");
        assert!(asked.recently("r-s1", false), "asked, not in the cache yet");
        assert!(!asked.recently("r-s2", false), "another request");

        // The cache shows it: forgotten, so a later deletion makes the plan ask again.
        assert!(!asked.recently("r-s1", true));
        assert!(!asked.recently("r-s1", false));

        // Never seen by the cache (deleted at once): asked again after ASK_AGAIN.
        asked.created("r-s2");
        tokio::time::advance(ASK_AGAIN - Duration::from_millis(1)).await;
        assert!(asked.recently("r-s2", false));
        asked.forget_old();
        assert!(asked.recently("r-s2", false), "not old yet");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!asked.recently("r-s2", false));
        asked.forget_old();
        assert!(asked.lock().is_empty());
    }
}
