//! How fleethub's watchers and clients wait before trying again: one bound per process
//! ([`set_retry_wait_max`]), jittered doubling ([`watch_backoff`]), and the watch failures each
//! process counts by kind ([`watch_failures`], exported by [`WatchFailureMetrics`]).

use crate::retry;

/// How watchers retry after an error: from 250 ms, doubling, reset after 10 s without errors.
/// The longest wait is [`WATCH_BACKOFF`]'s `max` (5 s) unless the process chose another with
/// [`set_retry_wait_max`]. (kube's default grows to 30 s and resets only after 120 s quiet, so
/// an API server restart soon after another one left changes unseen for minutes.) The clients of
/// [`crate::kubeconfig::client`] retry a 429 or 503 answer, and a 504 to anything but a create,
/// with the same delays.
pub const WATCH_BACKOFF: retry::Backoff = retry::Backoff::new(
    std::time::Duration::from_millis(250),
    std::time::Duration::from_secs(5),
);

/// The longest wait of this process's watchers and clients before they try again, in
/// milliseconds.
static RETRY_WAIT_MAX_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(WATCH_BACKOFF.max.as_millis() as u64);

/// Sets the longest wait before trying again (at least [`WATCH_BACKOFF`]'s first delay) of the
/// watchers and the clients ([`crate::kubeconfig::client`]) this process makes from now on. The member
/// agents keep 5 s: there are thousands of them, and a hub API server coming back is listed by all
/// of them within that spread. One hub can retry sooner.
pub fn set_retry_wait_max(max: std::time::Duration) {
    let ms = max.max(WATCH_BACKOFF.first).as_millis() as u64;
    RETRY_WAIT_MAX_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// This process's longest wait before trying again ([`set_retry_wait_max`]).
pub fn retry_wait_max() -> std::time::Duration {
    std::time::Duration::from_millis(RETRY_WAIT_MAX_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// [`WATCH_BACKOFF`] with this process's longest wait, as the backoff of a kube watcher of `kind`
/// (`WatchStreamExt::backoff`). Each wait is jittered (so the watches of many processes spread
/// out) and never longer than that longest wait: the jitter adds up to the delay itself again,
/// so the doubling stops at half of it. (Jitter added after the cap had let a "5 s" backoff
/// wait up to 10 s.) Each failure it waits after counts in [`watch_failures`].
pub fn watch_backoff(kind: &str) -> WatchBackoff {
    WatchBackoff {
        inner: kube::runtime::utils::ResetTimerBackoff::new(
            jittered_within(WATCH_BACKOFF.first, retry_wait_max()).into(),
            std::time::Duration::from_secs(10),
        ),
        failures: watch_failure_counter(kind),
    }
}

/// A watcher's backoff ([`watch_backoff`]) that counts the failures it waits after: a watch that
/// fails is retried inside its stream (the error never reaches a reconcile), so this count is
/// where an operator sees it.
pub struct WatchBackoff {
    inner: kube::runtime::utils::ResetTimerBackoff<kube::runtime::watcher::ExponentialBackoff>,
    failures: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    /// Asked once per failure (`StreamBackoff`), for the wait before the next try.
    fn next(&mut self) -> Option<std::time::Duration> {
        self.failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.next()
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.inner.reset()
    }
}

type FailureCounters =
    std::collections::BTreeMap<String, std::sync::Arc<std::sync::atomic::AtomicU64>>;

/// This process's watch failures by kind, since it started.
static WATCH_FAILURES: std::sync::Mutex<FailureCounters> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn watch_failure_counter(kind: &str) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let mut counters = WATCH_FAILURES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    counters.entry(kind.to_string()).or_default().clone()
}

/// How often this process's watches of each kind failed (a request refused or cut off, an
/// expired resource version) and were tried again, by kind, since the process started.
pub fn watch_failures() -> Vec<(String, u64)> {
    let counters = WATCH_FAILURES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    counters
        .iter()
        .map(|(kind, n)| (kind.clone(), n.load(std::sync::atomic::Ordering::Relaxed)))
        .collect()
}

/// [`watch_failures`] as a Prometheus counter, `<prefix>_watch_failures_total{kind}`: register it
/// with `Registry::register_collector`.
#[derive(Debug, Default)]
pub struct WatchFailureMetrics;

impl prometheus_client::collector::Collector for WatchFailureMetrics {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        let family = Family::<Vec<(&'static str, String)>, Counter>::default();
        for (kind, n) in watch_failures() {
            family.get_or_create(&vec![("kind", kind)]).inc_by(n);
        }
        family.encode(encoder.encode_descriptor(
            "watch_failures",
            "Watch requests that failed and were tried again after a backoff (refused, cut off, or expired), by kind",
            None,
            family.metric_type(),
        )?)
    }
}

/// Delays doubling from `first` whose jittered value never exceeds `max`: backon's jitter adds
/// a random part of the delay (up to all of it) after capping it.
pub(crate) fn jittered_within(
    first: std::time::Duration,
    max: std::time::Duration,
) -> backon::ExponentialBuilder {
    let half = max / 2;
    retry::Backoff::new(first.min(half), half)
        .builder()
        .with_jitter()
}

#[cfg(test)]
mod watch_backoff_tests {
    use std::time::Duration;

    use backon::BackoffBuilder;

    #[test]
    fn jittered_waits_stay_within_the_longest_wait_and_grow_to_it() {
        for max in [Duration::from_secs(1), Duration::from_secs(5)] {
            let mut longest = Duration::ZERO;
            for _ in 0..200 {
                let waits: Vec<Duration> = super::jittered_within(Duration::from_millis(250), max)
                    .build()
                    .take(12)
                    .collect();
                assert!(waits[0] >= Duration::from_millis(250), "{waits:?}");
                assert!(waits.iter().all(|w| *w <= max), "{max:?}: {waits:?}");
                // Past the doubling, every wait is between half the longest wait and all of it.
                assert!(
                    waits[8..].iter().all(|w| *w >= max / 2),
                    "{max:?}: {waits:?}"
                );
                longest = longest.max(waits.into_iter().max().unwrap());
            }
            assert!(longest > max * 9 / 10, "{max:?}: longest {longest:?}");
        }
    }

    #[test]
    fn each_failure_a_watch_backs_off_from_is_counted_by_kind_and_exported() {
        use kube::runtime::utils::Backoff as _;
        let count = |kind: &str| {
            super::watch_failures()
                .into_iter()
                .find(|(k, _)| k == kind)
                .map(|(_, n)| n)
        };
        // Two watches of one kind share its count; another kind counts apart.
        let (mut a, mut b) = (
            super::watch_backoff("CountedKind"),
            super::watch_backoff("CountedKind"),
        );
        let mut other = super::watch_backoff("OtherCountedKind");
        assert_eq!(count("CountedKind"), Some(0));
        a.next();
        a.next();
        a.reset();
        b.next();
        other.next();
        assert_eq!(count("CountedKind"), Some(3));
        assert_eq!(count("OtherCountedKind"), Some(1));

        let mut registry = prometheus_client::registry::Registry::with_prefix("test");
        registry.register_collector(Box::new(super::WatchFailureMetrics));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("# TYPE test_watch_failures counter"),
            "{text}"
        );
        assert!(
            text.contains("test_watch_failures_total{kind=\"CountedKind\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn a_longest_wait_below_the_first_delay_still_waits() {
        let waits: Vec<Duration> =
            super::jittered_within(Duration::from_millis(250), Duration::from_millis(100))
                .build()
                .take(4)
                .collect();
        assert!(
            waits
                .iter()
                .all(|w| *w > Duration::ZERO && *w <= Duration::from_millis(100)),
            "{waits:?}"
        );
    }
}
