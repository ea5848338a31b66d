//! The wait of a Binding's status for its member's report on a Work just written: one status
//! write then says both that the Work was written and what the member made of it.

use std::time::{Duration, Instant};

use fleethub_crds::Work;
use fleethub_crds::conditions::{FALSE, TRUE, find};
use fleethub_crds::work::{APPLIED, AVAILABLE, reason::WORKLOADS_NOT_READY};

use super::{Outcome, Step};

/// How long the Binding's status waits for the member's settled report on a Work just written
/// before it says what there is. At 1,000 clusters a status write of its own for each Work
/// written was a third of the run's Binding status writes, on the API server that bounds how
/// soon a member's report is noticed; and a member reports a rollout twice (applied, then
/// available moments later), each of which was a Binding status write while the next report
/// was on its way to the same API server.
pub(super) const REPORT_GRACE: Duration = Duration::from_secs(2);

/// The Work generations this controller wrote whose member has not reported a settled state on
/// them yet, by Work, with when they were written: their Bindings' status waits up to
/// [`REPORT_GRACE`] for that report.
#[derive(Default)]
pub(super) struct FirstReports(
    pub(super) std::sync::Mutex<std::collections::HashMap<String, (Option<i64>, Instant)>>,
);

/// Whether the member's report on `work` at `generation` is settled: it applied the Work and
/// its workloads are available, or it failed. Applied with workloads not ready yet is a report
/// under way (the next one follows when they are).
fn settled(work: &Work, generation: Option<i64>) -> bool {
    let Some(status) = work.status.as_ref() else {
        return false;
    };
    let current =
        |type_| find(&status.conditions, type_).filter(|c| c.observed_generation == generation);
    match current(APPLIED) {
        None => false,
        Some(applied) if applied.status != TRUE => true,
        Some(_) => {
            !current(AVAILABLE).is_none_or(|a| a.status == FALSE && a.reason == WORKLOADS_NOT_READY)
        }
    }
}

impl FirstReports {
    /// How long the Binding's status write should still wait after a reconcile that performed
    /// `step` on Work `key` (`namespace/name`) of generation `before`, with `outcome`; `None`:
    /// write it now.
    pub(super) fn wait(
        &self,
        key: String,
        step: Step,
        before: Option<i64>,
        outcome: &Outcome,
    ) -> Option<Duration> {
        let mut written = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(work) = outcome.work.as_deref() else {
            written.remove(&key);
            return None;
        };
        let generation = work.metadata.generation;
        if settled(work, generation) || outcome.sync.status != TRUE {
            written.remove(&key);
            return None;
        }
        if matches!(step, Step::Apply(_)) && generation != before {
            // Works never reported on (their Binding went away meanwhile) are dropped here.
            written.retain(|_, (_, at)| at.elapsed() < REPORT_GRACE);
            written.insert(key, (generation, Instant::now()));
            return Some(REPORT_GRACE);
        }
        let (at_generation, at) = *written.get(&key)?;
        let left = REPORT_GRACE.saturating_sub(at.elapsed());
        if at_generation != generation || left.is_zero() {
            written.remove(&key);
            return None;
        }
        Some(left)
    }
}
