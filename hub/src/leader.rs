//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several hub replicas only one
//! reconciles.
//!
//! The rules (the same as client-go's, which every Kubernetes controller manager uses):
//! - A process takes the lease when nobody holds it, when it already names this process's
//!   identity (a restarted container of the same pod takes over at once), or when the holder's
//!   record has not changed for the holder's `leaseDurationSeconds`, measured on this process's
//!   own clock from when it *saw* that record (never by comparing the holder's `renewTime` with
//!   the local clock, so clock skew between nodes does not matter).
//! - Every write carries the `resourceVersion` it read: of two candidates only one write wins.
//! - The leader renews every retry period; when it could not renew for the renew deadline
//!   (shorter than the lease duration) it stops reconciling before anyone else may take over.
//! - On graceful shutdown the leader releases the lease (empties the holder); a standby watches
//!   the lease and takes it as soon as it sees the release, instead of after the lease duration.
//!
//! [`decide`] and [`must_step_down`] are the pure part; [`LeaderElector`] does the API calls.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;

/// The hub's leader-election flags.
#[derive(clap::Args, Debug, Clone)]
pub struct LeaderElectionArgs {
    /// Elect a leader among hub replicas (only the leader runs the controllers). Turn off only
    /// when exactly one hub runs.
    #[arg(long, env = "FLEETHUB_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (in a cluster: the hub's own namespace).
    #[arg(
        long,
        env = "FLEETHUB_LEADER_ELECTION_NAMESPACE",
        default_value = "fleethub-system"
    )]
    pub leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "FLEETHUB_LEADER_ELECTION_LEASE",
        default_value = "fleethub-hub"
    )]
    pub leader_election_lease: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name). A
    /// process whose identity holds the lease takes it at once, so keep it unique per replica
    /// and stable across restarts of the same replica.
    #[arg(long, env = "POD_NAME")]
    pub leader_election_identity: Option<String>,
    /// Seconds a standby waits after the lease was last renewed before taking over.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=600))]
    pub leader_election_lease_duration: u64,
    /// Seconds the leader keeps reconciling without a successful renewal (less than the lease
    /// duration).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub leader_election_renew_deadline: u64,
    /// Seconds between renewals (leader) and checks (standby).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub leader_election_retry_period: u64,
}

impl LeaderElectionArgs {
    /// The lease configuration, or why the flags are unusable.
    pub fn config(&self) -> Result<LeaseConfig, String> {
        let identity = match &self.leader_election_identity {
            Some(id) => id.clone(),
            None => hostname().ok_or(
                "no leader-election identity: pass --leader-election-identity or set POD_NAME",
            )?,
        };
        let config = LeaseConfig {
            namespace: self.leader_election_namespace.clone(),
            name: self.leader_election_lease.clone(),
            identity,
            lease_duration: Duration::from_secs(self.leader_election_lease_duration),
            renew_deadline: Duration::from_secs(self.leader_election_renew_deadline),
            retry_period: Duration::from_secs(self.leader_election_retry_period),
        };
        config.validate()?;
        Ok(config)
    }
}

/// The host name (in a pod: the pod name), from $HOSTNAME or the kernel.
fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// Where the lease lives, who this process is, and the timing.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This process's identity (the pod name in a cluster).
    pub identity: String,
    /// How long a standby waits, after the lease record last changed, before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps reconciling without a successful renewal. Shorter than
    /// `lease_duration`, so the leader has stopped before anyone else may take over.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby checks the lease.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// Checks the timing rules client-go also enforces.
    pub fn validate(&self) -> Result<(), String> {
        if self.identity.is_empty() {
            return Err("the leader-election identity is empty".into());
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "the lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline <= self.retry_period {
            return Err(format!(
                "the renew deadline ({:?}) must be longer than the retry period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }
}

/// The part of a Lease the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `spec.holderIdentity` (`None` or empty: released).
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds` as the holder wrote it.
    pub lease_duration: Duration,
}

impl Record {
    fn of(spec: Option<&LeaseSpec>, default_duration: Duration) -> Self {
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            lease_duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map_or(default_duration, Duration::from_secs),
        }
    }
}

/// What to do about the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write the lease naming this process the holder (renewTime = now). `transition` is true
    /// when the holder changes (acquireTime = now, leaseTransitions + 1).
    Take {
        /// Whether another holder (or nobody) held it before.
        transition: bool,
    },
    /// Someone else holds it; it expires at `expires` unless its record changes before.
    Wait {
        /// The current holder.
        holder: String,
        /// When the holder's lease runs out, by this process's clock.
        expires: Timestamp,
    },
}

/// Whether this process (`identity`) may write the lease: `record` is the lease as last read
/// (`None`: it does not exist), `seen_at` when this process first saw that exact record.
pub fn decide(
    record: Option<&Record>,
    seen_at: Timestamp,
    identity: &str,
    now: Timestamp,
) -> Decision {
    let Some(record) = record else {
        return Decision::Take { transition: true };
    };
    match record.holder.as_deref() {
        None => Decision::Take { transition: true },
        Some(holder) if holder == identity => Decision::Take { transition: false },
        Some(holder) => {
            let expires = seen_at
                .checked_add(record.lease_duration)
                .unwrap_or(seen_at);
            if now >= expires {
                Decision::Take { transition: true }
            } else {
                Decision::Wait {
                    holder: holder.to_string(),
                    expires,
                }
            }
        }
    }
}

/// Whether a leader that last renewed at `last_renewed` must stop reconciling now.
pub fn must_step_down(last_renewed: Timestamp, renew_deadline: Duration, now: Timestamp) -> bool {
    now >= last_renewed
        .checked_add(renew_deadline)
        .unwrap_or(last_renewed)
}

/// When this process first saw the lease version `resource_version`: `previous` is the version
/// it saw before and since when.
pub fn seen_since(
    previous: Option<&(String, Timestamp)>,
    resource_version: &str,
    now: Timestamp,
) -> Timestamp {
    match previous {
        Some((rv, at)) if rv == resource_version => *at,
        _ => now,
    }
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// Another process holds the lease now.
    TakenBy(String),
    /// No renewal succeeded within the renew deadline.
    NotRenewed(String),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::TakenBy(h) => write!(f, "the lease is now held by {h}"),
            Lost::NotRenewed(why) => write!(f, "could not renew the lease in time: {why}"),
        }
    }
}

/// Outcome of one attempt to take or renew the lease.
enum Attempt {
    Held,
    HeldBy(String),
    Conflict,
}

/// Whether nobody holds `lease` (a leader released it, or it was never taken).
fn is_released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// Takes, holds and releases the lease for this process.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    leader_gauge: Gauge,
    /// The lease version last read, and when this process first saw it.
    seen: Option<(String, Timestamp)>,
    /// The holder last reported in the log while standing by.
    logged_holder: Option<String>,
    last_renewed: Option<Timestamp>,
}

impl LeaderElector {
    /// An elector for `config`'s lease; `leader_gauge` is set to 1 while this process leads.
    pub fn new(
        client: Client,
        config: LeaseConfig,
        clock: Arc<dyn Clock>,
        leader_gauge: Gauge,
    ) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            clock,
            leader_gauge,
            seen: None,
            logged_holder: None,
            last_renewed: None,
        }
    }

    /// The lease's configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Waits until this process holds the lease (true), or `shutdown` (false).
    pub async fn acquire(&mut self, shutdown: &CancellationToken) -> bool {
        tracing::info!(
            identity = %self.config.identity,
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            "waiting to lead"
        );
        // A release (a leader's graceful shutdown) is seen through a watch of the lease and
        // answered at once; the retry period is the fallback (a leader that died without
        // releasing: its record must age for the lease duration anyway).
        let selector = format!("metadata.name={}", self.config.name);
        let mut released = std::pin::pin!(
            fleethub_runtime::watch(
                self.api.clone(),
                fleethub_runtime::watcher_config().fields(&selector)
            )
            .applied_objects()
            .filter(|lease| std::future::ready(lease.as_ref().is_ok_and(is_released)))
        );
        loop {
            let attempt = tokio::select! {
                a = tokio::time::timeout(self.config.retry_period * 2, self.attempt()) => a,
                _ = shutdown.cancelled() => return false,
            };
            match attempt {
                Ok(Ok(Attempt::Held)) => {
                    self.leader_gauge.set(1);
                    self.logged_holder = None;
                    tracing::info!(
                        identity = %self.config.identity,
                        lease = %format!("{}/{}", self.config.namespace, self.config.name),
                        "became the leader; starting controllers"
                    );
                    return true;
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    if self.logged_holder.as_deref() != Some(holder.as_str()) {
                        tracing::info!(identity = %self.config.identity, leader = %holder, "standing by: another hub leads");
                        self.logged_holder = Some(holder);
                    }
                }
                Ok(Ok(Attempt::Conflict)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(
                        lease = %format!("{}/{}", self.config.namespace, self.config.name),
                        error = %e,
                        "cannot read or write the leader-election lease; retrying"
                    );
                }
                Err(_) => tracing::warn!("the leader-election lease request timed out; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                Some(_) = released.next() => {
                    tracing::debug!(identity = %self.config.identity, "the leader released the lease; trying to take it");
                }
                _ = shutdown.cancelled() => return false,
            }
        }
    }

    /// Renews the lease every retry period while this process leads; returns when it no longer
    /// does (it must then stop reconciling at once).
    pub async fn hold(&mut self) -> Lost {
        let mut last_error = String::from("no renewal attempted");
        loop {
            let Some(last) = self.last_renewed else {
                return self.lost(Lost::NotRenewed("the lease was never renewed".into()));
            };
            let now = self.clock.now();
            if must_step_down(last, self.config.renew_deadline, now) {
                return self.lost(Lost::NotRenewed(last_error));
            }
            let left = remaining(last, self.config.renew_deadline, now);
            tokio::time::sleep(self.config.retry_period.min(left)).await;
            let left = remaining(last, self.config.renew_deadline, self.clock.now());
            match tokio::time::timeout(left, self.attempt()).await {
                Ok(Ok(Attempt::Held)) => {}
                Ok(Ok(Attempt::HeldBy(holder))) => return self.lost(Lost::TakenBy(holder)),
                Ok(Ok(Attempt::Conflict)) => last_error = "write conflict".into(),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "renewing the leader-election lease failed");
                    last_error = e.to_string();
                }
                Err(_) => last_error = "the renewal request timed out".into(),
            }
        }
    }

    fn lost(&mut self, why: Lost) -> Lost {
        self.leader_gauge.set(0);
        self.last_renewed = None;
        tracing::error!(identity = %self.config.identity, reason = %why, "lost leadership; stopping controllers");
        why
    }

    /// Gives the lease up (graceful shutdown), so a standby takes over at once.
    pub async fn release(&mut self) {
        self.leader_gauge.set(0);
        self.last_renewed = None;
        let name = &self.config.name;
        let result = async {
            let Some(mut lease) = self.api.get_opt(name).await? else {
                return Ok::<bool, kube::Error>(false);
            };
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(self.clock.now()));
            self.api
                .replace(name, &PostParams::default(), &lease)
                .await?;
            Ok(true)
        };
        match tokio::time::timeout(self.config.retry_period * 2, result).await {
            Ok(Ok(true)) => {
                tracing::info!(identity = %self.config.identity, "released the leader-election lease")
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot release the leader-election lease; a standby takes over when it expires")
            }
            Err(_) => tracing::warn!(
                "releasing the leader-election lease timed out; a standby takes over when it expires"
            ),
        }
    }

    /// One read and, if [`decide`] says so, one write of the lease.
    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        let name = self.config.name.clone();
        let now = self.clock.now();
        let Some(lease) = self.api.get_opt(&name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None, true, now)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.last_renewed = Some(now);
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let seen_at = seen_since(self.seen.as_ref(), &rv, now);
        self.seen = Some((rv, seen_at));
        let record = Record::of(lease.spec.as_ref(), self.config.lease_duration);
        match decide(Some(&record), seen_at, &self.config.identity, now) {
            Decision::Wait { holder, .. } => Ok(Attempt::HeldBy(holder)),
            Decision::Take { transition } => {
                let mut next = lease.clone();
                next.spec = Some(self.spec(lease.spec.as_ref(), transition, now));
                // `next` carries the resourceVersion read above: a concurrent writer makes this
                // a 409 instead of two leaders.
                match self.api.replace(&name, &PostParams::default(), &next).await {
                    Ok(written) => {
                        self.seen =
                            Some((written.metadata.resource_version.unwrap_or_default(), now));
                        self.last_renewed = Some(now);
                        Ok(Attempt::Held)
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The lease spec naming this process the holder at `now`.
    fn spec(&self, previous: Option<&LeaseSpec>, transition: bool, now: Timestamp) -> LeaseSpec {
        let existed = previous.is_some();
        let previous = previous.cloned().unwrap_or_default();
        let transitions = previous.lease_transitions.unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: if transition || previous.acquire_time.is_none() {
                Some(MicroTime(now))
            } else {
                previous.acquire_time
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if transition && existed {
                transitions.saturating_add(1)
            } else {
                transitions
            }),
            ..previous
        }
    }
}

fn remaining(last: Timestamp, deadline: Duration, now: Timestamp) -> Duration {
    let end = last.checked_add(deadline).unwrap_or(last);
    Duration::try_from(end.duration_since(now)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    const LEASE: Duration = Duration::from_secs(15);

    fn held_by(holder: &str) -> Record {
        Record {
            holder: Some(holder.into()),
            lease_duration: LEASE,
        }
    }

    fn t0() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    #[test]
    fn an_absent_or_released_lease_is_taken() {
        assert_eq!(
            decide(None, t0(), "a", t0()),
            Decision::Take { transition: true }
        );
        let released = Record {
            holder: None,
            lease_duration: LEASE,
        };
        assert_eq!(
            decide(Some(&released), t0(), "a", t0()),
            Decision::Take { transition: true }
        );
        // An empty holderIdentity is how other implementations release, too.
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(Record::of(Some(&spec), LEASE).holder, None);
    }

    #[test]
    fn the_holder_renews_and_a_restarted_holder_takes_over_at_once() {
        // Same identity: whether this process renewed a second ago or is the pod's restarted
        // container that never saw the lease before, it takes the lease without waiting.
        assert_eq!(
            decide(Some(&held_by("a")), t0(), "a", t0()),
            Decision::Take { transition: false }
        );
    }

    #[test]
    fn another_holder_is_waited_out_from_when_its_record_was_seen() {
        let clock = FakeClock::new(t0());
        let record = held_by("b");
        let seen_at = clock.now();
        assert_eq!(
            decide(Some(&record), seen_at, "a", clock.now()),
            Decision::Wait {
                holder: "b".into(),
                expires: t0().checked_add(LEASE).unwrap()
            }
        );
        clock.advance(LEASE - Duration::from_millis(1));
        assert!(matches!(
            decide(Some(&record), seen_at, "a", clock.now()),
            Decision::Wait { .. }
        ));
        clock.advance(Duration::from_millis(1));
        assert_eq!(
            decide(Some(&record), seen_at, "a", clock.now()),
            Decision::Take { transition: true }
        );
    }

    #[test]
    fn the_holders_own_lease_duration_counts() {
        let record = Record {
            holder: Some("b".into()),
            lease_duration: Duration::from_secs(60),
        };
        let now = t0().checked_add(Duration::from_secs(30)).unwrap();
        assert!(matches!(
            decide(Some(&record), t0(), "a", now),
            Decision::Wait { .. }
        ));
        let spec = LeaseSpec {
            holder_identity: Some("b".into()),
            lease_duration_seconds: Some(60),
            ..Default::default()
        };
        assert_eq!(Record::of(Some(&spec), LEASE), record);
        assert_eq!(Record::of(None, LEASE).lease_duration, LEASE);
    }

    #[test]
    fn a_renewed_record_restarts_the_wait() {
        let clock = FakeClock::new(t0());
        let first = seen_since(None, "100", clock.now());
        clock.advance(Duration::from_secs(10));
        // The same version seen again: still counted from its first sighting.
        assert_eq!(
            seen_since(Some(&("100".into(), first)), "100", clock.now()),
            first
        );
        // The holder renewed (new version): the wait starts over.
        let renewed = seen_since(Some(&("100".into(), first)), "101", clock.now());
        assert_eq!(renewed, clock.now());
        clock.advance(Duration::from_secs(10));
        assert!(matches!(
            decide(Some(&held_by("b")), renewed, "a", clock.now()),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn a_leader_steps_down_before_a_standby_may_take_over() {
        let config = LeaseConfig {
            namespace: "fleethub-system".into(),
            name: "fleethub-hub".into(),
            identity: "a".into(),
            lease_duration: LEASE,
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        config.validate().unwrap();
        let clock = FakeClock::new(t0());
        let renewed = clock.now();
        clock.advance(Duration::from_secs(9));
        assert!(!must_step_down(renewed, config.renew_deadline, clock.now()));
        clock.advance(Duration::from_secs(1));
        assert!(must_step_down(renewed, config.renew_deadline, clock.now()));
        // A standby that saw the last renewal no earlier than it happened waits longer.
        assert!(matches!(
            decide(Some(&held_by("a")), renewed, "b", clock.now()),
            Decision::Wait { .. }
        ));
        assert_eq!(
            remaining(renewed, config.renew_deadline, clock.now()),
            Duration::ZERO
        );
    }

    #[test]
    fn bad_timing_is_refused_with_a_reason() {
        let mut config = LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "a".into(),
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        assert!(config.validate().unwrap_err().contains("renew deadline"));
        config.lease_duration = Duration::from_secs(15);
        config.retry_period = Duration::from_secs(10);
        assert!(config.validate().unwrap_err().contains("retry period"));
        config.retry_period = Duration::from_secs(2);
        config.identity.clear();
        assert!(config.validate().unwrap_err().contains("identity"));
    }
}
