//! How often a placement's status is rewritten. A change of state (a rolled-up condition's
//! status or reason, the generation described, the newest snapshot, how many clusters are
//! selected) is written at once: runs wait on those. A change of detail alone (one cluster's
//! conditions, messages, drift counts) is written at most once per [`DETAIL_INTERVAL`]: during a
//! rollout each member's report changed it, and each of those writes reached the hub API server
//! while the next member's report was on its way there.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fleethub_crds::placement::PlacementStatus;

/// The shortest time between two writes of a placement's status that differ in detail only.
pub const DETAIL_INTERVAL: Duration = Duration::from_secs(1);

/// When each placement's status was last written by this process (a view, not a decision:
/// after a restart the first change is written at once).
#[derive(Default)]
pub struct StatusPace(Mutex<HashMap<String, Instant>>);

impl StatusPace {
    /// How long the write of `next` over `stored` should wait, at `now`; `None`: write it now.
    pub fn wait(
        &self,
        placement: &str,
        stored: Option<&PlacementStatus>,
        next: &PlacementStatus,
        now: Instant,
    ) -> Option<Duration> {
        let stored = stored?;
        if state(stored) != state(next) {
            return None;
        }
        let last = *self.lock().get(placement)?;
        let left = DETAIL_INTERVAL.saturating_sub(now.saturating_duration_since(last));
        (!left.is_zero()).then_some(left)
    }

    /// `placement`'s status was written at `now`.
    pub fn wrote(&self, placement: &str, now: Instant) {
        let mut last = self.lock();
        last.retain(|_, at| now.saturating_duration_since(*at) < DETAIL_INTERVAL);
        last.insert(placement.to_string(), now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What of a placement's status is its state: what a run or a person waits on.
fn state(s: &PlacementStatus) -> impl PartialEq + '_ {
    let conditions: Vec<_> = s
        .conditions
        .iter()
        .map(|c| (&c.type_, &c.status, &c.reason, c.observed_generation))
        .collect();
    (
        conditions,
        s.observed_generation,
        s.latest_resource_snapshot_index,
        s.selected_cluster_count,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::conditions::Condition;
    use fleethub_crds::placement::ClusterPlacementStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn status(available: &str, message: &str, clusters: &[&str]) -> PlacementStatus {
        PlacementStatus {
            conditions: vec![Condition {
                type_: "Available".into(),
                status: available.into(),
                reason: "R".into(),
                message: message.into(),
                observed_generation: Some(1),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            }],
            observed_generation: Some(1),
            selected_cluster_count: Some(3),
            placement_statuses: clusters
                .iter()
                .map(|c| ClusterPlacementStatus {
                    cluster_name: c.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_change_of_detail_waits_for_the_interval_and_a_change_of_state_does_not() {
        let pace = StatusPace::default();
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let before = status("False", "1 of 3 available", &["a"]);
        let detail = status("False", "2 of 3 available", &["a", "b"]);
        let state = status("True", "3 of 3 available", &["a", "b", "c"]);
        // Nothing written yet by this process: at once.
        assert_eq!(pace.wait("p", Some(&before), &detail, ms(0)), None);
        pace.wrote("p", ms(0));
        // Detail alone, 300 ms after the last write: what is left of the interval.
        assert_eq!(
            pace.wait("p", Some(&before), &detail, ms(300)),
            Some(Duration::from_millis(700))
        );
        // The interval over: at once.
        assert_eq!(pace.wait("p", Some(&before), &detail, ms(1000)), None);
        // A change of state: at once, whenever.
        assert_eq!(pace.wait("p", Some(&detail), &state, ms(301)), None);
        // Another placement, and the first status of all: at once.
        assert_eq!(pace.wait("q", Some(&before), &detail, ms(300)), None);
        assert_eq!(pace.wait("p", None, &detail, ms(300)), None);
    }
}
