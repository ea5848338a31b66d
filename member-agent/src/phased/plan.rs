//! A phased rollout's next step, as a pure function of the StatefulSet, the rollout's status
//! and (when a check was due) the check's outcome. While the StatefulSet runs one revision on
//! every pod the partition is held at `replicas`, so a new revision rolls nothing by itself; once
//! a new revision appears, each step — lowering the partition by one, so the StatefulSet
//! controller rolls the next pod (highest ordinal first) — waits until the last rolled pod runs
//! the update revision, every pod is available, and the check passed `successThreshold` times
//! in a row after `initialDelay`.

use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, UNKNOWN, set_condition};
use fleethub_crds::metric_check::{self, MetricCheckStatus, QueryOutcome, Settings};
use fleethub_crds::phased_rollout::{
    PhasedRolloutPhase, PhasedRolloutSpec, PhasedRolloutStatus, ROLLED_OUT, reason,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// What the plan reads of the StatefulSet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatefulSetView {
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `spec.replicas` (default 1).
    pub replicas: i32,
    /// `spec.updateStrategy.type` is `OnDelete`.
    pub on_delete: bool,
    /// `spec.updateStrategy.rollingUpdate.partition`.
    pub partition: Option<i32>,
    /// `status.currentRevision`.
    pub current_revision: Option<String>,
    /// `status.updateRevision`.
    pub update_revision: Option<String>,
    /// `status.updatedReplicas`.
    pub updated_replicas: i32,
    /// `status.availableReplicas` (ready for `minReadySeconds`).
    pub available_replicas: i32,
}

/// What to do with the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionAction {
    /// Leave it.
    Keep,
    /// Set it (server-side apply under the agent's phased-rollout field manager).
    Set(i32),
    /// Give it up (apply nothing under that manager: the field goes, the StatefulSet rolls).
    Release,
}

/// A check to make now, from the rollout's check read as one (`PhasedRolloutCheck::effective`),
/// whichever names the spec used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The Prometheus base URL, with its scheme (`http://` for one given as `host:port/path`).
    pub url: String,
    /// The PromQL query, its placeholders expanded.
    pub query: String,
    /// The Secret with the credentials, in the rollout's namespace (`check.secretRef.name` or
    /// `check.query.secretRef`).
    pub secret_name: Option<String>,
}

/// The step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// The check is due: query Prometheus and plan again with the outcome.
    Query(Query),
    /// Write `status`, then do `partition`; look again by `recheck` at the latest.
    Step {
        /// The new status.
        status: Box<PhasedRolloutStatus>,
        /// The partition.
        partition: PartitionAction,
        /// When to look again without a change (a check's next time), if at all.
        recheck: Option<Timestamp>,
    },
}

/// Everything one step decides on.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The rollout's namespace (`$namespace` in the query).
    pub namespace: &'a str,
    /// Its generation.
    pub generation: Option<i64>,
    /// Its spec.
    pub spec: &'a PhasedRolloutSpec,
    /// Its status as read.
    pub status: &'a PhasedRolloutStatus,
    /// The StatefulSet, if it exists.
    pub statefulset: Option<&'a StatefulSetView>,
    /// Now.
    pub now: Timestamp,
    /// The outcome of the query asked for by [`Plan::Query`].
    pub outcome: Option<&'a QueryOutcome>,
}

/// Decides the rollout's next step.
pub fn plan(o: &Observed<'_>) -> Plan {
    let mut status = o.status.clone();
    status.observed_generation = o.generation;
    let cond = |status: &mut PhasedRolloutStatus, value: &str, why: &str, message: String| {
        set_condition(
            &mut status.conditions,
            NewCondition::new(ROLLED_OUT, value, why, message, o.generation),
            o.now,
        );
    };
    let done = |status, partition, recheck| Plan::Step {
        status: Box::new(status),
        partition,
        recheck,
    };
    let Some(sts) = o.statefulset else {
        status.phase = PhasedRolloutPhase::Refused;
        status.check = None;
        let message = format!(
            "StatefulSet {} does not exist in namespace {}",
            o.spec.target_ref, o.namespace
        );
        cond(&mut status, FALSE, reason::TARGET_NOT_FOUND, message);
        return done(status, PartitionAction::Keep, None);
    };
    status.replicas = sts.replicas;
    status.update_revision = sts.update_revision.clone();
    status.rolled_replicas = sts.updated_replicas;
    if o.spec.standard_rolling_update {
        status.phase = PhasedRolloutPhase::HandedBack;
        status.partition = None;
        status.check = None;
        let message = "standardRollingUpdate is set: the StatefulSet's own rolling update rolls every pod; the partition is released".to_string();
        cond(&mut status, UNKNOWN, reason::HANDED_BACK, message);
        return done(status, PartitionAction::Release, None);
    }
    if sts.on_delete {
        status.phase = PhasedRolloutPhase::Refused;
        status.check = None;
        let message = format!(
            "StatefulSet {} uses updateStrategy OnDelete: pods change only when deleted, so there is no partition to step; use RollingUpdate",
            o.spec.target_ref
        );
        cond(&mut status, FALSE, reason::ON_DELETE, message);
        return done(status, PartitionAction::Keep, None);
    }
    let check = match o.spec.check.effective() {
        Ok(check) => check,
        Err(why) => {
            status.phase = PhasedRolloutPhase::Refused;
            cond(&mut status, FALSE, reason::INVALID_CHECK, why);
            return done(status, PartitionAction::Keep, None);
        }
    };
    // A held rollout keeps waiting and checking: no timeout.
    let settings = Settings {
        timeout: None,
        ..check.settings
    };
    let replicas = sts.replicas;
    if sts.observed_generation < sts.generation {
        // The StatefulSet controller has not seen the latest change (a new template, or the
        // partition just set): its revisions and counts are not about it yet.
        return done(status, PartitionAction::Keep, None);
    }
    let partition = sts.partition.unwrap_or(0);
    if sts.update_revision.is_none() || sts.update_revision == sts.current_revision {
        // One revision everywhere: hold the partition at replicas so the next revision rolls
        // nothing by itself.
        status.phase = PhasedRolloutPhase::Idle;
        status.check = None;
        status.partition = Some(replicas);
        status.rolled_replicas = replicas;
        let message = format!(
            "all {replicas} pods run revision {}; the next revision waits for checks between pods",
            sts.update_revision.as_deref().unwrap_or("?")
        );
        cond(&mut status, TRUE, reason::COMPLETE, message);
        let action = if sts.partition == Some(replicas) {
            PartitionAction::Keep
        } else {
            PartitionAction::Set(replicas)
        };
        return done(status, action, None);
    }
    status.phase = PhasedRolloutPhase::Rolling;
    status.partition = Some(partition.min(replicas));
    if partition <= 0 {
        // The last pod was let go: the StatefulSet controller finishes it.
        let message = format!(
            "rolling the last pod ({}/{replicas} rolled)",
            sts.updated_replicas
        );
        cond(&mut status, FALSE, reason::ROLLING, message);
        return done(status, PartitionAction::Keep, None);
    }
    let rolled_expected = replicas - partition.min(replicas);
    if sts.updated_replicas < rolled_expected || sts.available_replicas < replicas {
        status.check = None;
        let message = format!(
            "waiting for pods: {}/{replicas} run revision {} ({rolled_expected} expected), {}/{replicas} available",
            sts.updated_replicas,
            sts.update_revision.as_deref().unwrap_or("?"),
            sts.available_replicas
        );
        cond(&mut status, FALSE, reason::WAITING_FOR_PODS, message);
        return done(status, PartitionAction::Keep, None);
    }
    // Every pod available, the last rolled one on the new revision: the check decides.
    let query = metric_check::expand(
        &check.query,
        &[
            ("statefulset", &o.spec.target_ref),
            ("namespace", o.namespace),
        ],
    );
    let mut series = status.check.clone().unwrap_or_else(|| MetricCheckStatus {
        query: query.clone(),
        start_time: Some(Time(o.now)),
        ..Default::default()
    });
    let step = metric_check::step(&settings, &mut series, o.now, o.outcome);
    let threshold = settings.success_threshold;
    match step {
        metric_check::Step::Query => Plan::Query(Query {
            url: check.url,
            // As first expanded (kept in the status with the count).
            query: series.query.clone(),
            secret_name: check.secret_name,
        }),
        metric_check::Step::Passed => {
            let next = partition - 1;
            status.check = None;
            status.partition = Some(next);
            let message = format!(
                "check passed {threshold} times: rolling pod {next} ({}/{replicas} rolled)",
                sts.updated_replicas
            );
            cond(&mut status, FALSE, reason::ROLLING, message);
            done(status, PartitionAction::Set(next), None)
        }
        metric_check::Step::Wait { until, failing } => {
            let message = format!(
                "{rolled_expected}/{replicas} rolled; before pod {}: check {}/{threshold}{}",
                partition - 1,
                series.consecutive_passes,
                match (failing, &series.last_value) {
                    (true, Some(v)) => format!(", failing: {v}"),
                    _ => String::new(),
                }
            );
            cond(&mut status, FALSE, reason::WAITING_FOR_CHECK, message);
            status.check = Some(series);
            done(status, PartitionAction::Keep, Some(until))
        }
        // Without a timeout the check never times out; were it to, it checks again.
        metric_check::Step::TimedOut => {
            status.check = Some(series);
            done(status, PartitionAction::Keep, Some(o.now))
        }
    }
}
