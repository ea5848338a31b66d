//! When things happened, as the benchmark saw them: Works reaching simulated members, members
//! reporting, the hub marking clusters and runs done, members provisioned. Everything is an
//! `Instant` of this process, so differences are exact regardless of the API server's clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// A Work at one snapshot index for one member: (placement, cluster, index).
pub type WorkKey = (String, String, i64);

#[derive(Default)]
struct Inner {
    work_seen: HashMap<WorkKey, Instant>,
    /// The resourceVersion of the Work at its first sighting: the hub API server wrote it then.
    work_version: HashMap<WorkKey, u64>,
    reported: HashMap<WorkKey, Instant>,
    /// When the API server answered the report's write.
    report_answered: HashMap<WorkKey, Instant>,
    cluster_done: HashMap<(String, String), Instant>,
    /// The resourceVersion of the run whose status first showed the cluster done.
    done_version: HashMap<(String, String), u64>,
    run_succeeded: HashMap<String, Instant>,
    run_failed: HashMap<String, String>,
    provisioned: HashMap<String, Instant>,
    status_write_errors: u64,
}

/// The shared record; `changed()` wakes waiters after every update.
pub struct Timeline {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            version: watch::channel(0).0,
        }
    }
}

impl Timeline {
    fn update(&self, f: impl FnOnce(&mut Inner)) {
        if let Ok(mut inner) = self.inner.lock() {
            f(&mut inner);
        }
        self.version.send_modify(|v| *v += 1);
    }

    fn read<T>(&self, f: impl FnOnce(&Inner) -> T) -> Option<T> {
        self.inner.lock().ok().map(|i| f(&i))
    }

    /// A simulated member first saw the Work `key` (later sightings are ignored), written at
    /// resourceVersion `version`.
    pub fn work_seen(&self, key: WorkKey, at: Instant, version: u64) {
        self.update(|i| {
            i.work_version.entry(key.clone()).or_insert(version);
            i.work_seen.entry(key).or_insert(at);
        });
    }

    /// A simulated member reported `key` applied and available (the first report counts).
    pub fn reported(&self, key: WorkKey, at: Instant) {
        self.update(|i| {
            i.reported.entry(key).or_insert(at);
        });
    }

    /// The hub API server answered `key`'s report (sent at [`Timeline::reported`]) at `at`.
    pub fn report_answered(&self, key: WorkKey, at: Instant) {
        self.update(|i| {
            i.report_answered.entry(key).or_insert(at);
        });
    }

    /// Whether `key` was already reported.
    pub fn was_reported(&self, key: &WorkKey) -> bool {
        self.read(|i| i.reported.contains_key(key)).unwrap_or(false)
    }

    /// A status write failed (after retries).
    pub fn status_write_failed(&self) {
        self.update(|i| i.status_write_errors += 1);
    }

    /// How many simulated status writes failed.
    pub fn status_write_errors(&self) -> u64 {
        self.read(|i| i.status_write_errors).unwrap_or(0)
    }

    /// The hub marked `cluster` of `run` succeeded (first sighting counts) in the run's status
    /// at resourceVersion `version`.
    pub fn cluster_done(&self, run: &str, cluster: &str, at: Instant, version: u64) {
        self.update(|i| {
            let key = (run.to_string(), cluster.to_string());
            i.done_version.entry(key.clone()).or_insert(version);
            i.cluster_done.entry(key).or_insert(at);
        });
    }

    /// The run succeeded.
    pub fn run_succeeded(&self, run: &str, at: Instant) {
        self.update(|i| {
            i.run_succeeded.entry(run.to_string()).or_insert(at);
        });
    }

    /// The run failed (or reports `Progressing=False`), with why.
    pub fn run_failed(&self, run: &str, why: String) {
        self.update(|i| {
            i.run_failed.insert(run.to_string(), why);
        });
    }

    /// Member `cluster`'s agent identity (its ServiceAccount) exists on the hub.
    pub fn provisioned(&self, cluster: &str, at: Instant) {
        self.update(|i| {
            i.provisioned.entry(cluster.to_string()).or_insert(at);
        });
    }

    /// When member `cluster` was provisioned.
    pub fn provisioned_at(&self, cluster: &str) -> Option<Instant> {
        self.read(|i| i.provisioned.get(cluster).copied()).flatten()
    }

    /// When the run succeeded, or why it failed.
    pub fn run_outcome(&self, run: &str) -> Option<Result<Instant, String>> {
        self.read(|i| {
            if let Some(at) = i.run_succeeded.get(run) {
                Some(Ok(*at))
            } else {
                i.run_failed.get(run).cloned().map(Err)
            }
        })
        .flatten()
    }

    /// When the hub marked `cluster` of `run` done.
    pub fn cluster_done_at(&self, run: &str, cluster: &str) -> Option<Instant> {
        self.read(|i| {
            i.cluster_done
                .get(&(run.to_string(), cluster.to_string()))
                .copied()
        })
        .flatten()
    }

    /// How many clusters of `run` the hub marked done.
    pub fn done_count(&self, run: &str) -> usize {
        self.read(|i| i.cluster_done.keys().filter(|(r, _)| r == run).count())
            .unwrap_or(0)
    }

    /// Work sightings of `placement` at `index`: (cluster, when).
    pub fn works_of(&self, placement: &str, index: i64) -> Vec<(String, Instant)> {
        self.read(|i| {
            i.work_seen
                .iter()
                .filter(|((p, _, x), _)| p == placement && *x == index)
                .map(|((_, c, _), t)| (c.clone(), *t))
                .collect()
        })
        .unwrap_or_default()
    }

    /// The first sign of progress of `run` (of `placement` at `index`) seen after `after` and
    /// written after resourceVersion `written_after` (the hub API server's revision once the old
    /// hub was dead): a Work delivered or a cluster marked done. A Work the killed hub wrote just
    /// before it died can reach a member after the restart; it is not the new hub's progress.
    pub fn first_progress_after(
        &self,
        run: &str,
        placement: &str,
        index: i64,
        after: Instant,
        written_after: u64,
    ) -> Option<Instant> {
        self.read(|i| {
            let works = i
                .work_seen
                .iter()
                .filter(|(k @ (p, _, x), t)| {
                    p == placement
                        && *x == index
                        && **t > after
                        && i.work_version.get(*k).is_some_and(|v| *v > written_after)
                })
                .map(|(_, t)| *t);
            let done = i
                .cluster_done
                .iter()
                .filter(|(k @ (r, _), t)| {
                    r == run
                        && **t > after
                        && i.done_version.get(*k).is_some_and(|v| *v > written_after)
                })
                .map(|(_, t)| *t);
            works.chain(done).min()
        })
        .flatten()
    }

    /// Waits until `done()` holds on the timeline, or `timeout` passes (false).
    pub async fn wait(&self, timeout: Duration, mut done: impl FnMut(&Timeline) -> bool) -> bool {
        let mut rx = self.version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(self),
            }
        }
    }

    /// The latencies of one run of `placement` at `index` over `clusters`.
    pub fn run_figures(
        &self,
        run: &str,
        placement: &str,
        index: i64,
        clusters: &[String],
    ) -> RunFigures {
        self.read(|i| {
            let mut f = RunFigures::default();
            let mut reports = Vec::new();
            let mut arrivals = Vec::new();
            for c in clusters {
                let key = (placement.to_string(), c.clone(), index);
                let seen = i.work_seen.get(&key);
                let reported = i.reported.get(&key);
                let done = i.cluster_done.get(&(run.to_string(), c.clone()));
                if let (Some(r), Some(d)) = (reported, done) {
                    f.available_to_done.push(d.saturating_duration_since(*r));
                }
                if let (Some(r), Some(a)) = (reported, i.report_answered.get(&key)) {
                    f.report_write.push(a.saturating_duration_since(*r));
                }
                if let (Some(s), Some(r)) = (seen, reported) {
                    f.agent.push(r.saturating_duration_since(*s));
                }
                reports.extend(reported.copied());
                arrivals.extend(seen.copied());
            }
            reports.sort();
            // A step: a member's report frees a slot (or ends a stage), the hub hands the next
            // cluster its Work. Arrivals before any report are the run's first batch.
            for w in arrivals {
                if let Some(prev) = reports.iter().rev().find(|r| **r <= w) {
                    f.step.push(w.saturating_duration_since(*prev));
                }
            }
            f
        })
        .unwrap_or_default()
    }
}

/// Latency samples of one run.
#[derive(Debug, Default, Clone)]
pub struct RunFigures {
    /// Member reported Available → the run's status marks the cluster succeeded.
    pub available_to_done: Vec<Duration>,
    /// Member's report → the next Work of the run delivered to a member (the hub's step).
    pub step: Vec<Duration>,
    /// Work delivered → the simulated member's report (the simulation's own share).
    pub agent: Vec<Duration>,
    /// The member's report: its status write sent → answered.
    pub report_write: Vec<Duration>,
}

impl RunFigures {
    /// Adds `other`'s samples.
    pub fn extend(&mut self, other: RunFigures) {
        self.available_to_done.extend(other.available_to_done);
        self.step.extend(other.step);
        self.agent.extend(other.agent);
        self.report_write.extend(other.report_write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_pair_each_delivery_with_the_report_before_it() {
        let t = Timeline::default();
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let key = |c: &str| ("p".to_string(), c.to_string(), 0);
        // a and b start together; a reports at 100, c arrives at 130; b reports at 200,
        // d arrives at 260.
        t.work_seen(key("a"), ms(0), 1);
        t.work_seen(key("b"), ms(0), 1);
        t.reported(key("a"), ms(100));
        t.work_seen(key("c"), ms(130), 1);
        t.reported(key("b"), ms(200));
        t.work_seen(key("d"), ms(260), 1);
        t.cluster_done("r", "a", ms(150), 1);
        t.cluster_done("r", "b", ms(230), 1);
        let names: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let f = t.run_figures("r", "p", 0, &names);
        let mut step = f.step.clone();
        step.sort();
        assert_eq!(step, [Duration::from_millis(30), Duration::from_millis(60)]);
        let mut done = f.available_to_done.clone();
        done.sort();
        assert_eq!(done, [Duration::from_millis(30), Duration::from_millis(50)]);
        assert_eq!(f.agent.len(), 2);
        assert_eq!(t.done_count("r"), 2);
    }

    #[test]
    fn progress_after_a_restart_counts_only_what_was_written_after_it() {
        let t = Timeline::default();
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let key = |c: &str| ("p".to_string(), c.to_string(), 0);
        // The killed hub wrote a's Work at version 10; it reaches the member after the kill
        // (marker 20). The new hub writes b's Work at 25 and marks a done at 30.
        t.work_seen(key("a"), ms(100), 10);
        t.work_seen(key("b"), ms(300), 25);
        t.cluster_done("r", "a", ms(250), 30);
        assert_eq!(t.first_progress_after("r", "p", 0, t0, 20), Some(ms(250)));
        assert_eq!(t.first_progress_after("r", "p", 0, t0, 30), None);
        assert_eq!(t.first_progress_after("r", "p", 0, t0, 5), Some(ms(100)));
        assert_eq!(
            t.first_progress_after("r", "p", 0, ms(260), 5),
            Some(ms(300))
        );
    }
}
