//! The bake after a run's last stage (`bake`): every cluster stays watched for that long before
//! the run succeeds. Like a soak, it counts only healthy time: while a cluster of the run is
//! regressed it stands still.

use std::time::Duration;

use fleethub_crds::conditions::TRUE;
use fleethub_crds::duration;
use fleethub_crds::update_run::{BakeStatus, PROGRESSING, reason, resume_wait, wait_end};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Planner;

impl Planner<'_, '_> {
    /// The run's bake: its own, else its strategy's.
    fn bake_time(&self) -> Option<Duration> {
        let text = self.o.run.spec.bake.as_deref().or_else(|| {
            self.status
                .staged_update_strategy_snapshot
                .as_ref()?
                .bake
                .as_deref()
        })?;
        duration::parse(text).ok()
    }

    /// A regressed cluster holds the run: a bake that started stands still.
    pub(super) fn pause_bake(&mut self) {
        let now = self.o.now;
        if let Some(bake) = self.status.bake.as_mut().filter(|b| b.end_time.is_none()) {
            bake.paused_since.get_or_insert(Time(now));
        }
    }

    /// Whether the bake is over (or the run has none). Until then the run is Baking.
    pub(super) fn baked(&mut self) -> bool {
        let Some(wait) = self.bake_time() else {
            return true;
        };
        let now = self.o.now;
        let bake = self.status.bake.get_or_insert(BakeStatus {
            start_time: Time(now),
            paused_seconds: None,
            paused_since: None,
            end_time: None,
        });
        if bake.end_time.is_some() {
            return true;
        }
        let paused = resume_wait(&mut bake.paused_seconds, &mut bake.paused_since, now);
        let start = bake.start_time.0;
        let until = wait_end(start, wait, paused);
        if now >= until {
            bake.end_time = Some(Time(now));
            return true;
        }
        let counted = (now.as_second() - start.as_second() - paused).max(0) as u64;
        let message = format!(
            "baking: every stage is done; each cluster stays watched until {until} ({} of {} so far)",
            duration::format(Duration::from_secs(counted)),
            duration::format(wait)
        );
        self.set_run(PROGRESSING, TRUE, reason::BAKING, message);
        self.requeue_at(until);
        false
    }
}
