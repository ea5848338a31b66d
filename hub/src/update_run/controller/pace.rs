//! How often one run is planned. Each reconcile plans every cluster of the run again, whatever
//! woke it: at 10,000 clusters about 100 ms of the hub's CPU, and a status write of 130 KB that
//! the hub API server checks and sends to every watcher of runs. Reports arriving one after
//! another then each cost a whole plan. With the Work writes bounded (the work generator's
//! concurrency), the hub API server answered the status writes sooner, the run was planned
//! 916 times in 315 s instead of about once a second, and the hub's CPU doubled — taken from
//! the API server that every cluster's writes wait for (the run took 46 % longer).
//!
//! So a run's next plan waits until planning has had at most a third of the time since the
//! last one started: a plan that took 100 ms is followed by the next one 200 ms after it ended
//! at the earliest, and every report that arrives meanwhile is in that next plan. A plan of a
//! few milliseconds (a run of a few hundred clusters) waits only as long.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The next plan waits this many times as long as the last one took.
const WAIT_PER_PLAN: u32 = 2;
/// The longest wait, however long a plan took (a hub whose CPU is starved).
const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// The wait after a plan that took `planned`.
pub(super) fn wait_after(planned: Duration) -> Duration {
    (planned * WAIT_PER_PLAN).min(LONGEST_WAIT)
}

/// When each run may be planned next.
#[derive(Default)]
pub(super) struct Pace {
    next: Mutex<HashMap<String, Instant>>,
}

impl Pace {
    /// Waits until `run` may be planned again.
    pub(super) async fn wait(&self, run: &str) {
        let next = self.lock().get(run).copied();
        if let Some(next) = next {
            tokio::time::sleep_until(next).await;
        }
    }

    /// Records that planning `run` just took `planned`.
    pub(super) fn planned(&self, run: &str, planned: Duration) {
        let next = Instant::now() + wait_after(planned);
        self.lock().insert(run.to_string(), next);
    }

    /// Forgets the runs `keep` says no.
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|run, _| keep(run));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.next.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_grows_with_the_plan_up_to_a_second() {
        assert_eq!(wait_after(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            wait_after(Duration::from_millis(3)),
            Duration::from_millis(6)
        );
        assert_eq!(
            wait_after(Duration::from_millis(100)),
            Duration::from_millis(200)
        );
        assert_eq!(wait_after(Duration::from_secs(2)), LONGEST_WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_waits_only_after_a_plan_of_its_own() {
        let pace = Pace::default();
        let start = Instant::now();
        pace.wait("a").await;
        assert_eq!(Instant::now(), start, "no plan yet: no wait");
        pace.planned("a", Duration::from_millis(100));
        pace.wait("b").await;
        assert_eq!(Instant::now(), start, "another run does not wait");
        pace.wait("a").await;
        assert_eq!(Instant::now() - start, Duration::from_millis(200));
        pace.retain(|run| run != "a");
        pace.planned("b", Duration::from_millis(1));
        let before = Instant::now();
        pace.wait("a").await;
        assert_eq!(Instant::now(), before, "a forgotten run does not wait");
    }
}
