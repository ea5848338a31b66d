//! The agent's metrics (`fleethub_member_agent_*` in the process registry).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use fleethub_crds::Work;
use jiff::Timestamp;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The requests a Work reconcile makes for itself (label `request` of
/// `fleethub_member_agent_work_requests_total`).
pub mod request {
    /// The Work read from the hub (its cache could not answer).
    pub const READ_WORK: &str = "read-work";
    /// The AppliedWork applied on the member (its cache did not have it as it should be).
    pub const APPLY_APPLIED_WORK: &str = "apply-applied-work";
    /// The AppliedWork's list of applied objects written.
    pub const WRITE_APPLIED_WORK_STATUS: &str = "write-applied-work-status";
    /// The Work's status written on the hub.
    pub const WRITE_WORK_STATUS: &str = "write-work-status";
    /// A Work status write the hub refused (409): the Work changed since it was read, or a newer
    /// status overtook it. Also counted as `write-work-status`.
    pub const WORK_STATUS_REFUSED: &str = "work-status-refused";
    /// Every request, so each series exists from the start.
    pub const ALL: &[&str] = &[
        READ_WORK,
        APPLY_APPLIED_WORK,
        WRITE_APPLIED_WORK_STATUS,
        WRITE_WORK_STATUS,
        WORK_STATUS_REFUSED,
    ];
}

/// Handles on every metric the agent updates.
#[derive(Clone, Debug)]
pub struct Metrics {
    applies: Family<Labels, Counter>,
    apply_duration: Histogram,
    deletions: Family<Labels, Counter>,
    reconciles: Family<Labels, Counter>,
    reconcile_errors: Family<Labels, Counter>,
    heartbeats: Family<Labels, Counter>,
    last_heartbeat: Gauge<f64, AtomicU64>,
    drift_corrections: Family<Labels, Counter>,
    objects_left_different: Family<Labels, Counter>,
    skipped: Counter,
    reads: Counter,
    bookkeeping: Family<Labels, Counter>,
    live: Arc<Live>,
}

/// Values computed when scraped: how many Works the agent holds, how old its last heartbeat is.
#[derive(Debug, Default)]
struct Live {
    works: OnceLock<Store<Work>>,
    last_heartbeat: Mutex<Option<Timestamp>>,
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let works = self.works.get().map_or(0, |s| s.len() as i64);
        let gauge = ConstGauge::new(works);
        gauge.encode(encoder.encode_descriptor(
            "works",
            "Works of this member on the hub, as the agent's watch sees them",
            None,
            gauge.metric_type(),
        )?)?;
        let last = *self
            .last_heartbeat
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = last {
            let age = Timestamp::now().duration_since(last).as_secs_f64();
            let gauge = ConstGauge::new(age);
            gauge.encode(encoder.encode_descriptor(
                "heartbeat_age_seconds",
                "Seconds since the agent last wrote its MemberCluster's heartbeat",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

fn result_label(ok: bool) -> Labels {
    vec![(
        "result".to_string(),
        if ok { "success" } else { "failure" }.to_string(),
    )]
}

impl Metrics {
    /// Registers the agent's metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            applies: Family::default(),
            apply_duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            deletions: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            heartbeats: Family::default(),
            last_heartbeat: Gauge::default(),
            drift_corrections: Family::default(),
            objects_left_different: Family::default(),
            skipped: Counter::default(),
            reads: Counter::default(),
            bookkeeping: Family::default(),
            live: Arc::new(Live::default()),
        };
        registry.register(
            "object_reads",
            "Objects read from the member's API server while applying (the watch caches answer the rest)",
            m.reads.clone(),
        );
        registry.register(
            "work_requests",
            "Requests a Work reconcile makes besides applying and reading manifests, by request: read-work (the Work from the hub, when the cache cannot answer), apply-applied-work, write-applied-work-status (member), write-work-status (hub; work-status-refused counts those the hub refused with a conflict)",
            m.bookkeeping.clone(),
        );
        registry.register(
            "drift_corrections",
            "Objects changed or deleted on the member that the agent restored to the hub's values, by kind",
            m.drift_corrections.clone(),
        );
        registry.register(
            "objects_left_different",
            "Times the agent found an object differing from the hub's and left it so (Drifted under whenToApply IfNotDrifted, Diffed under ReportDiff, TakeoverRefused), by reason",
            m.objects_left_different.clone(),
        );
        registry.register(
            "applies_skipped",
            "Manifests not applied because neither the hub's object nor the member's changed",
            m.skipped.clone(),
        );
        registry.register(
            "applies",
            "Server-side applies of manifests to the member cluster, by result",
            m.applies.clone(),
        );
        registry.register(
            "apply_duration_seconds",
            "Latency of one server-side apply of a manifest to the member cluster",
            m.apply_duration.clone(),
        );
        registry.register(
            "deletions",
            "Objects deleted from the member because their manifest left its Work, by result",
            m.deletions.clone(),
        );
        registry.register(
            "reconciles",
            "Work reconciliations, by result",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Work reconciliations that failed, by error",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "heartbeats",
            "Heartbeats written to the MemberCluster, by result",
            m.heartbeats.clone(),
        );
        registry.register(
            "last_heartbeat_timestamp_seconds",
            "When the agent last wrote its MemberCluster's heartbeat (Unix time)",
            m.last_heartbeat.clone(),
        );
        registry.register_collector(Box::new(m.live.clone()));
        // Both results exist from the start (at 0), so rate() and alerts see the first failure.
        for ok in [true, false] {
            for family in [&m.applies, &m.deletions, &m.reconciles, &m.heartbeats] {
                let _ = family.get_or_create(&result_label(ok));
            }
        }
        for r in request::ALL {
            let _ = m
                .bookkeeping
                .get_or_create(&vec![("request".to_string(), r.to_string())]);
        }
        m
    }

    /// Counts a drifted object restored to the hub's values.
    pub fn drift_corrected(&self, kind: &str) {
        self.drift_corrections
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .inc();
    }

    /// Counts an object left differing from the hub's (`Drifted`, `Diffed`, `TakeoverRefused`).
    pub fn left_different(&self, reason: &str) {
        self.objects_left_different
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }

    /// Counts a read of one object from the member's API server.
    pub fn object_read(&self) {
        self.reads.inc();
    }

    /// Counts one of a reconcile's own requests (see [`request`]).
    pub fn work_request(&self, request: &'static str) {
        self.bookkeeping
            .get_or_create(&vec![("request".to_string(), request.to_string())])
            .inc();
    }

    /// Counts a manifest not applied because nothing changed.
    pub fn apply_skipped(&self) {
        self.skipped.inc();
    }

    /// Counts one apply and its latency.
    pub fn apply(&self, ok: bool, seconds: f64) {
        self.applies.get_or_create(&result_label(ok)).inc();
        self.apply_duration.observe(seconds);
    }

    /// Counts one deletion of an object whose manifest left its Work.
    pub fn deletion(&self, ok: bool) {
        self.deletions.get_or_create(&result_label(ok)).inc();
    }

    /// Counts a finished reconciliation.
    pub fn reconciled(&self, ok: bool) {
        self.reconciles.get_or_create(&result_label(ok)).inc();
    }

    /// Counts a failed reconciliation by its error's label.
    pub fn reconcile_error(&self, label: &str) {
        self.reconciled(false);
        self.reconcile_errors
            .get_or_create(&vec![("error".to_string(), label.to_string())])
            .inc();
    }

    /// Counts a heartbeat; a successful one at `at` also sets the last-heartbeat time.
    pub fn heartbeat(&self, ok: bool, at: Timestamp) {
        self.heartbeats.get_or_create(&result_label(ok)).inc();
        if ok {
            self.last_heartbeat.set(at.as_millisecond() as f64 / 1000.0);
            *self
                .live
                .last_heartbeat
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(at);
        }
    }

    /// Lets the `works` gauge count the Works in `store` (the Work controller's cache).
    pub fn count_works_in(&self, store: Store<Work>) {
        // Only the first store counts; the agent has one Work controller.
        let _ = self.live.works.set(store);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn metrics_are_exposed_with_the_agent_prefix() {
        let mut registry = Registry::with_prefix("fleethub_member_agent");
        let m = Metrics::register(&mut registry);
        m.apply(true, 0.01);
        m.apply(false, 0.02);
        m.deletion(true);
        m.reconcile_error("member");
        m.work_request(request::WRITE_WORK_STATUS);
        m.heartbeat(true, Timestamp::from_second(1_700_000_000).unwrap());
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for want in [
            "fleethub_member_agent_applies_total{result=\"success\"} 1",
            "fleethub_member_agent_applies_total{result=\"failure\"} 1",
            "fleethub_member_agent_apply_duration_seconds_count 2",
            "fleethub_member_agent_deletions_total{result=\"success\"} 1",
            "fleethub_member_agent_reconcile_errors_total{error=\"member\"} 1",
            "fleethub_member_agent_reconciles_total{result=\"failure\"} 1",
            "fleethub_member_agent_heartbeats_total{result=\"success\"} 1",
            "fleethub_member_agent_last_heartbeat_timestamp_seconds 1700000000",
            "fleethub_member_agent_works 0",
            "fleethub_member_agent_work_requests_total{request=\"write-work-status\"} 1",
            "fleethub_member_agent_work_requests_total{request=\"read-work\"} 0",
            "fleethub_member_agent_work_requests_total{request=\"work-status-refused\"} 0",
            "fleethub_member_agent_heartbeat_age_seconds ",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }
}
