//! Which run of a placement goes: a newer run supersedes an older one (as a new Deployment
//! revision supersedes the old), but only once it passed validation, so a run that can never
//! start does not stop one that is rolling out.

use fleethub_crds::UpdateRun;
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::update_run::{INITIALIZED, SUCCEEDED, UpdateRunState, UpdateRunStatus, reason};
use jiff::Timestamp;
use kube::ResourceExt;

/// A run of the same placement, as the planner needs it to decide who goes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiblingRun {
    /// The run's name.
    pub name: String,
    /// When it was created; runs are ordered by (creation, name).
    pub created: Option<Timestamp>,
    /// It has ended (Succeeded set, either way) or is being deleted: it concerns no one.
    pub over: bool,
    /// It passed validation (initialized, or waiting for an earlier run to end or for its
    /// placement's scheduling) and may run:
    /// a run that is only planned (`spec.state: Initialize`) supersedes no one.
    pub validated: bool,
}

impl SiblingRun {
    /// The planner's view of a run.
    pub fn of(run: &UpdateRun) -> Self {
        Self::with_status(run, run.status.as_ref())
    }

    /// The planner's view of `run` with `status` (its own, taken out of it).
    pub fn with_status(run: &UpdateRun, status: Option<&UpdateRunStatus>) -> Self {
        let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
        let waiting = find(conditions, INITIALIZED).is_some_and(|c| {
            [
                reason::WAITING_FOR_PREVIOUS_RUN,
                reason::WAITING_FOR_SCHEDULING,
            ]
            .contains(&c.reason.as_str())
        });
        Self {
            name: run.name_any(),
            created: run.metadata.creation_timestamp.as_ref().map(|t| t.0),
            over: find(conditions, SUCCEEDED).is_some()
                || run.metadata.deletion_timestamp.is_some(),
            validated: (is_true(conditions, INITIALIZED) || waiting)
                && run.spec.state != Some(UpdateRunState::Initialize),
        }
    }

    fn key(&self) -> (Option<Timestamp>, &str) {
        (self.created, &self.name)
    }
}

/// The unfinished runs of the placement created before `me`, which `me` waits for (they yield
/// to it), and the validated ones created after it, to which `me` yields; oldest first.
/// `siblings` may include `me` itself and runs that are over: both are ignored.
pub fn order<'a>(me: &SiblingRun, siblings: &'a [SiblingRun]) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut live: Vec<&SiblingRun> = siblings
        .iter()
        .filter(|s| !s.over && s.name != me.name)
        .collect();
    live.sort_by(|a, b| a.key().cmp(&b.key()));
    let earlier = live
        .iter()
        .filter(|s| s.key() < me.key())
        .map(|s| s.name.as_str())
        .collect();
    let later = live
        .iter()
        .filter(|s| s.key() > me.key() && s.validated)
        .map(|s| s.name.as_str())
        .collect();
    (earlier, later)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sibling(name: &str, created: i64, over: bool, validated: bool) -> SiblingRun {
        SiblingRun {
            name: name.into(),
            created: Some(Timestamp::from_second(1_800_000_000 + created).unwrap()),
            over,
            validated,
        }
    }

    #[test]
    fn newer_validated_runs_supersede_and_older_live_runs_are_waited_for() {
        let me = sibling("me", 10, false, true);
        let all = [
            sibling("old-done", 0, true, true),
            sibling("old-live", 5, false, true),
            sibling("old-unvalidated", 6, false, false),
            me.clone(),
            sibling("new-invalid", 20, false, false),
            sibling("new-valid", 30, false, true),
            sibling("new-ended", 40, true, true),
        ];
        let (earlier, later) = order(&me, &all);
        // An older run waits for validation too, but it still holds the placement.
        assert_eq!(earlier, ["old-live", "old-unvalidated"]);
        // A newer run that cannot start never stops this one.
        assert_eq!(later, ["new-valid"]);
    }

    #[test]
    fn runs_created_in_the_same_second_are_ordered_by_name() {
        let me = sibling("b", 10, false, true);
        let all = [sibling("a", 10, false, true), sibling("c", 10, false, true)];
        let (earlier, later) = order(&me, &all);
        assert_eq!(earlier, ["a"]);
        assert_eq!(later, ["c"]);
    }

    #[test]
    fn a_run_reads_its_own_state() {
        let mut run = UpdateRun::new("r", Default::default());
        assert!(!SiblingRun::of(&run).validated);
        assert!(!SiblingRun::of(&run).over);
        let status = run.status.get_or_insert_with(Default::default);
        fleethub_crds::conditions::set_condition(
            &mut status.conditions,
            fleethub_crds::conditions::NewCondition::new(
                INITIALIZED,
                "False",
                reason::WAITING_FOR_PREVIOUS_RUN,
                String::new(),
                None,
            ),
            Timestamp::UNIX_EPOCH,
        );
        assert!(SiblingRun::of(&run).validated);
        let status = run.status.get_or_insert_with(Default::default);
        fleethub_crds::conditions::set_condition(
            &mut status.conditions,
            fleethub_crds::conditions::NewCondition::new(
                SUCCEEDED,
                "False",
                reason::SUPERSEDED,
                String::new(),
                None,
            ),
            Timestamp::UNIX_EPOCH,
        );
        assert!(SiblingRun::of(&run).over);
    }
}
