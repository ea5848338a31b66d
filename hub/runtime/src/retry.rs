//! The one way fleethub retries: exponential backoff, the same doubling for an async operation
//! retried in place (through `backon`) and for a controller's error policy (which kube does not
//! tell how often an object failed, so [`FailureBackoff`] counts that per object).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Delays that start at `first` and double up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay before the first retry.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
}

/// How a controller retries an object whose reconcile failed: 1 s doubling up to 30 s, so after
/// an outage of an API server every object is reconciled again within half a minute of its
/// return.
pub const ERROR_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

impl Backoff {
    /// Delays from `first`, doubling, at most `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self { first, max }
    }

    /// The delay before retry number `attempt` (0-based): `first · 2^attempt`, at most `max`.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.first
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.max)
    }

    /// The same delays as a `backon` backoff, without a limit on attempts (add
    /// `.with_max_times(n)` for one, `.with_jitter()` to spread many retriers apart).
    pub const fn builder(&self) -> backon::ExponentialBuilder {
        backon::ExponentialBuilder::new()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
    }
}

/// Runs `op` until it succeeds, waiting `backoff`'s delays between tries; `failed` is told each
/// failure and the wait before the next try. `None` when `stop` fires first.
pub async fn until_ok<T, E, F, Fut>(
    backoff: Backoff,
    stop: &CancellationToken,
    op: F,
    failed: impl FnMut(&E, Duration),
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    use backon::Retryable as _;
    let retried = op.retry(backoff.builder()).notify(failed);
    tokio::select! {
        result = retried => result.ok(),
        _ = stop.cancelled() => None,
    }
}

/// Runs `op` up to `tries` times (at least once) while its error is `retryable`, waiting
/// `backoff`'s delays between tries; `failed` is told each failure that is retried and the wait
/// before the next try. The first success, or the last error.
pub async fn retry<T, E, F, Fut>(
    backoff: Backoff,
    tries: usize,
    op: F,
    retryable: impl FnMut(&E) -> bool,
    failed: impl FnMut(&E, Duration),
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    use backon::Retryable as _;
    op.retry(backoff.builder().with_max_times(tries.saturating_sub(1)))
        .when(retryable)
        .notify(failed)
        .await
}

/// Consecutive failures per object, for a controller's error policy: `failed` counts one more
/// and says how long to wait, `succeeded` starts the object over. Only the retry delay depends
/// on it; nothing is decided from it (after a restart every object starts at the first delay).
#[derive(Debug)]
pub struct FailureBackoff<K> {
    backoff: Backoff,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash> FailureBackoff<K> {
    /// Failure counts whose delays follow `backoff`.
    pub fn new(backoff: Backoff) -> Self {
        Self {
            backoff,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure of `key`; the delay before its retry.
    pub fn failed(&self, key: K) -> Duration {
        self.failed_with(key, self.backoff)
    }

    /// Like [`failed`](Self::failed), with other delays (a step that failed in another way)
    /// over the same count.
    pub fn failed_with(&self, key: K, backoff: Backoff) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let n = failures.entry(key).or_default();
        let before = *n;
        *n = n.saturating_add(1);
        backoff.delay(before)
    }

    /// Forgets `key`'s failures (it succeeded, or is gone).
    pub fn succeeded(&self, key: &K) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// Passes `result` on, forgetting `key`'s failures when it is `Ok`: wrap a reconcile's
    /// result in it and let the error policy call [`failed`](Self::failed).
    pub fn observe<T, E>(&self, key: &K, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.succeeded(key);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn delays_double_up_to_the_cap() {
        let backoff = Backoff::new(S(1), S(30));
        let delays: Vec<_> = (0..7).map(|a| backoff.delay(a)).collect();
        assert_eq!(delays, [S(1), S(2), S(4), S(8), S(16), S(30), S(30)]);
        assert_eq!(backoff.delay(u32::MAX), S(30));
    }

    #[test]
    fn the_backon_builder_makes_the_same_delays() {
        use backon::BackoffBuilder as _;
        let backoff = Backoff::new(S(1), S(30));
        let delays: Vec<_> = backoff.builder().build().take(7).collect();
        let ours: Vec<_> = (0..7).map(|a| backoff.delay(a)).collect();
        assert_eq!(delays, ours);
    }

    #[test]
    fn failures_grow_the_delay_per_object_until_it_succeeds() {
        let errors = FailureBackoff::new(Backoff::new(S(1), S(4)));
        assert_eq!(errors.failed("a"), S(1));
        assert_eq!(errors.failed("a"), S(2));
        // Another object has its own count.
        assert_eq!(errors.failed("b"), S(1));
        assert_eq!(errors.failed("a"), S(4));
        assert_eq!(errors.failed("a"), S(4));
        // Other delays over the same count.
        assert_eq!(errors.failed_with("a", Backoff::new(S(5), S(300))), S(80));
        assert_eq!(errors.observe(&"a", Ok::<_, ()>(())), Ok(()));
        assert_eq!(errors.failed("a"), S(1));
        // An error does not reset it.
        assert_eq!(errors.observe(&"b", Err::<(), _>("no")), Err("no"));
        assert_eq!(errors.failed("b"), S(2));
        errors.succeeded(&"b");
        assert_eq!(errors.failed("b"), S(1));
    }

    #[test]
    fn objects_are_keyed_by_their_reference() {
        // How a controller keys it: by the object's reference, as kube's error policy gets it.
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector::ObjectRef;
        let errors = FailureBackoff::new(ERROR_BACKOFF);
        let cm = |name: &str| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(errors.failed(ObjectRef::from(&cm("a"))), S(1));
        assert_eq!(errors.failed(ObjectRef::from(&cm("a"))), S(2));
        assert_eq!(errors.failed(ObjectRef::from(&cm("b"))), S(1));
        let reconciled: Result<(), ()> = Ok(());
        let _ = errors.observe(&ObjectRef::from(&cm("a")), reconciled);
        assert_eq!(errors.failed(ObjectRef::from(&cm("a"))), S(1));
    }

    #[tokio::test]
    async fn until_ok_retries_with_the_delays_and_stops_when_told() {
        let ms = Duration::from_millis;
        let mut tries = 0;
        let mut waits = Vec::new();
        let value = until_ok(
            Backoff::new(ms(1), ms(2)),
            &CancellationToken::new(),
            || {
                tries += 1;
                let now = tries;
                async move { if now < 4 { Err("not yet") } else { Ok(now) } }
            },
            |_, wait| waits.push(wait),
        )
        .await;
        assert_eq!(value, Some(4));
        assert_eq!(waits, [ms(1), ms(2), ms(2)]);

        let stop = CancellationToken::new();
        stop.cancel();
        let never = until_ok(
            Backoff::new(S(60), S(60)),
            &stop,
            || async { Err::<(), _>("never") },
            |_, _| {},
        )
        .await;
        assert_eq!(never, None);
    }

    #[tokio::test]
    async fn retry_gives_up_after_its_tries_or_at_an_error_not_worth_retrying() {
        let ms = Duration::from_millis;
        let mut tries = 0;
        let mut waits = Vec::new();
        let result = retry(
            Backoff::new(ms(1), ms(10)),
            3,
            || {
                tries += 1;
                async { Err::<(), _>("busy") }
            },
            |_| true,
            |_, wait| waits.push(wait),
        )
        .await;
        assert_eq!((result, tries), (Err("busy"), 3));
        assert_eq!(waits, [ms(1), ms(2)]);

        let mut tries = 0;
        let result = retry(
            Backoff::new(ms(1), ms(10)),
            3,
            || {
                tries += 1;
                async { Err::<(), _>("gone") }
            },
            |e| *e != "gone",
            |_, _| {},
        )
        .await;
        assert_eq!((result, tries), (Err("gone"), 1));
    }
}
