//! Kubernetes-style conditions (`metav1.Condition`), kept the way the API conventions ask:
//! one entry per `type`, `lastTransitionTime` moved only when `status` changes.

use jiff::Timestamp;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `status: "True"`.
pub const TRUE: &str = "True";
/// `status: "False"`.
pub const FALSE: &str = "False";
/// `status: "Unknown"`.
pub const UNKNOWN: &str = "Unknown";

/// A condition to be set, without its transition time (which [`set_condition`] decides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCondition<'a> {
    /// The condition's `type`, e.g. `Succeeded`.
    pub type_: &'a str,
    /// `True`, `False` or `Unknown`.
    pub status: &'a str,
    /// CamelCase reason.
    pub reason: &'a str,
    /// A sentence a person can act on.
    pub message: String,
    /// The generation of the object the condition was computed from.
    pub observed_generation: Option<i64>,
}

impl<'a> NewCondition<'a> {
    /// A condition of `type_` with `status`, `reason` and `message`, computed from `generation`.
    pub fn new(
        type_: &'a str,
        status: &'a str,
        reason: &'a str,
        message: String,
        observed_generation: Option<i64>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message,
            observed_generation,
        }
    }
}

/// Sets `new` in `conditions`, replacing any condition of the same type. The transition time is
/// `now` when the status changes (or the condition is new) and is kept otherwise. Returns whether
/// anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    new: NewCondition<'_>,
    now: Timestamp,
) -> bool {
    let existing = conditions.iter_mut().find(|c| c.type_ == new.type_);
    match existing {
        Some(c) => {
            let transition = c.status != new.status;
            let changed = transition
                || c.reason != new.reason
                || c.message != new.message
                || c.observed_generation != new.observed_generation;
            if transition {
                c.last_transition_time = Time(now);
            }
            c.status = new.status.to_string();
            c.reason = new.reason.to_string();
            c.message = new.message;
            c.observed_generation = new.observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: new.type_.to_string(),
                status: new.status.to_string(),
                reason: new.reason.to_string(),
                message: new.message,
                observed_generation: new.observed_generation,
                last_transition_time: Time(now),
            });
            true
        }
    }
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Whether the condition of type `type_` is present with status `False`.
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == FALSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn cond<'a>(status: &'a str, reason: &'a str) -> NewCondition<'a> {
        NewCondition {
            type_: "Ready",
            status,
            reason,
            message: format!("{reason} happened"),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut conds = Vec::new();
        assert!(set_condition(&mut conds, cond(FALSE, "Waiting"), ts(10)));
        assert_eq!(conds[0].last_transition_time, Time(ts(10)));

        // Same status, new reason: changed, but transition time kept.
        assert!(set_condition(
            &mut conds,
            cond(FALSE, "StillWaiting"),
            ts(20)
        ));
        assert_eq!(conds[0].last_transition_time, Time(ts(10)));
        assert_eq!(conds[0].reason, "StillWaiting");

        // Identical: no change at all.
        assert!(!set_condition(
            &mut conds,
            cond(FALSE, "StillWaiting"),
            ts(30)
        ));
        assert_eq!(conds[0].last_transition_time, Time(ts(10)));

        // Status flips: transition time moves.
        assert!(set_condition(&mut conds, cond(TRUE, "Done"), ts(40)));
        assert_eq!(conds[0].last_transition_time, Time(ts(40)));
        assert_eq!(conds.len(), 1);
        assert!(is_true(&conds, "Ready"));
        assert!(!is_false(&conds, "Ready"));
        assert!(find(&conds, "Other").is_none());
    }

    #[test]
    fn conditions_are_keyed_by_type() {
        let mut conds = Vec::new();
        set_condition(&mut conds, cond(TRUE, "A"), ts(1));
        set_condition(
            &mut conds,
            NewCondition {
                type_: "Other",
                ..cond(FALSE, "B")
            },
            ts(2),
        );
        assert_eq!(conds.len(), 2);
        assert!(is_false(&conds, "Other"));
    }
}
