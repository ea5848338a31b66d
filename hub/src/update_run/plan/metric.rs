//! An UpdateRun's MetricCheck tasks: the gate itself is the shared state machine
//! ([`fleethub_crds::metric_check`]); what is the run's own is which placeholders a query has.

use fleethub_crds::metric_check::{any_of, expand};

/// `query` with `$clusters` (a regex of the stage's cluster names), `$stage` and `$run`
/// expanded.
pub fn expand_for_run(query: &str, clusters: &[String], stage: &str, run: &str) -> String {
    let clusters = any_of(clusters);
    expand(
        query,
        &[("clusters", &clusters), ("stage", stage), ("run", run)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_to_the_stage_clusters_stage_and_run() {
        let q = r#"sum(rate(errors{cluster=~"$clusters",stage="$stage",run="$run"}[5m])) < 0.01"#;
        assert_eq!(
            expand_for_run(q, &["a-1".into(), "b-2".into()], "canary", "r1"),
            r#"sum(rate(errors{cluster=~"a-1|b-2",stage="canary",run="r1"}[5m])) < 0.01"#
        );
    }
}
