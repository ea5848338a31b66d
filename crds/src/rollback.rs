//! What "roll back" means for a placement, read once for the dashboard's one-click rollback and
//! `kubectl fleet rollback`: the snapshot its newest run rolled out (else its latest), and the
//! newest snapshot before it, rolled out with the same strategy.

use kube::ResourceExt;

use crate::UpdateRun;

/// A rollback of one placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    /// The snapshot index the placement is at: its newest run's, else its latest.
    pub from: i64,
    /// The newest snapshot index older than `from` that still exists.
    pub to: i64,
    /// The strategy of the placement's newest run, if it has one.
    pub strategy: Option<String>,
    /// The placement's newest run, if it has one.
    pub newest_run: Option<String>,
}

/// The runs of `placement` among `runs`, oldest first (by creation, then name).
pub fn runs_of<'a>(placement: &str, runs: &'a [UpdateRun]) -> Vec<&'a UpdateRun> {
    let mut own: Vec<&UpdateRun> = runs
        .iter()
        .filter(|r| r.spec.placement_name == placement)
        .collect();
    own.sort_by_key(|r| {
        (
            r.metadata.creation_timestamp.as_ref().map(|t| t.0),
            r.name_any(),
        )
    });
    own
}

/// The rollback of `placement`, whose latest snapshot index is `latest` and whose existing
/// snapshots have `indices`; None when there is nothing older to go back to.
pub fn rollback(
    placement: &str,
    latest: Option<i64>,
    runs: &[UpdateRun],
    indices: &[i64],
) -> Option<Rollback> {
    let newest = runs_of(placement, runs).last().copied();
    let from = newest.and_then(|r| r.snapshot_index()?.ok()).or(latest)?;
    let to = indices.iter().copied().filter(|i| *i < from).max()?;
    Some(Rollback {
        from,
        to,
        strategy: newest.map(|r| r.spec.staged_rollout_strategy_name.clone()),
        newest_run: newest.map(|r| r.name_any()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update_run::UpdateRunSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn run(name: &str, placement: &str, index: &str, strategy: &str, at: i64) -> UpdateRun {
        let mut r = UpdateRun::new(
            name,
            UpdateRunSpec {
                placement_name: placement.into(),
                resource_snapshot_index: Some(index.into()),
                staged_rollout_strategy_name: strategy.into(),
                ..Default::default()
            },
        );
        r.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(1_800_000_000 + at).unwrap(),
        ));
        r
    }

    #[test]
    fn back_from_the_newest_run_to_the_newest_older_snapshot_with_its_strategy() {
        let runs = [
            run("a", "web", "4", "slow", 10),
            run("b", "web", "2", "fast", 20),
            run("c", "other", "9", "x", 30),
        ];
        let r = rollback("web", Some(5), &runs, &[0, 1, 3, 4, 5]).unwrap();
        assert_eq!((r.from, r.to), (2, 1));
        assert_eq!(r.strategy.as_deref(), Some("fast"));
        assert_eq!(r.newest_run.as_deref(), Some("b"));
        // Without runs: from the latest snapshot; nothing older: no rollback.
        let r = rollback("new", Some(3), &runs, &[1, 3]).unwrap();
        assert_eq!((r.from, r.to, r.strategy), (3, 1, None));
        assert_eq!(rollback("new", Some(0), &runs, &[0]), None);
        assert_eq!(rollback("new", None, &[], &[0, 1]), None);
    }
}
