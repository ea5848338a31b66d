//! When and how the agent writes a Work's status: at once when its state changes, and at most
//! once per [`PROGRESS_WRITE_INTERVAL`] while only its workloads' progress does
//! ([`crate::work_status::only_messages_differ`]).
//!
//! A newer state overtakes a write in flight ([`write_overtaken`]). A reconcile's status write
//! is conditional on the version of the Work it planned from. If one of the Work's objects on
//! the member changes state while that write is in flight (the usual case: a Deployment turns
//! available a few milliseconds after its new version was applied, while the write that reports
//! "applied, not yet available" is still on its way), the newer status is written at once
//! beside it, unconditionally, instead of after it. Whichever of the two the API server takes
//! first, the newer one is what stays: if the first lands first, the second lands after it; if
//! the second lands first, the first no longer matches its version and is refused (409). The
//! report of availability so waits for one write, not two.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fleethub_crds::Work;
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::work::WorkStatus;
use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::Error;
use crate::context::Context;
use crate::member_objects::WorkChanges;
use crate::metrics::request;

/// How often a Work's status is written while only its workloads' progress changes (the messages
/// of conditions that keep their status and reason: "1/2 replicas ready"): the first such change
/// is written at once, later ones at most this often. A Work's status writes are one at a time,
/// so the write that reports a workload available would otherwise often wait behind one that
/// reported its progress a moment before (measured: 266 ms p99 where one write takes 50-150 ms).
pub const PROGRESS_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a write of only progress waits when the Work's status was last written at
/// `last_write`: `None` (write now) once [`PROGRESS_WRITE_INTERVAL`] has passed.
pub fn progress_write_delay(last_write: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    let since = now.duration_since(last_write?);
    let since = Duration::try_from(since).unwrap_or_default();
    PROGRESS_WRITE_INTERVAL
        .checked_sub(since)
        .filter(|d| !d.is_zero())
}

/// When the agent last wrote each Work's status, by `namespace/name`.
#[derive(Default)]
pub struct StatusWrites(Mutex<HashMap<String, Timestamp>>);

impl StatusWrites {
    /// How long a progress-only write of Work `key` waits at `now` (`None`: write now).
    pub fn progress_delay(&self, key: &str, now: Timestamp) -> Option<Duration> {
        progress_write_delay(self.lock().get(key).copied(), now)
    }

    /// Records that Work `key`'s status was written at `at`.
    pub fn wrote(&self, key: &str, at: Timestamp) {
        self.lock().insert(key.to_string(), at);
    }

    /// Forgets Work `key` (it is being deleted).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Timestamp>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Something that says when one of a Work's member objects changed.
pub trait Changes {
    /// Waits for the next change.
    fn next(&mut self) -> impl Future<Output = ()> + Send;
}

impl Changes for WorkChanges {
    fn next(&mut self) -> impl Future<Output = ()> + Send {
        WorkChanges::next(self)
    }
}

/// What came of a status write and of the newer one that may have overtaken it.
#[derive(Debug)]
pub struct Writes<T, E> {
    /// The write planned first.
    pub first: Result<T, E>,
    /// The newer status written beside it, when one of the Work's objects changed state while
    /// the first was in flight.
    pub second: Option<Result<T, E>>,
}

/// Runs `first` (a write conditional on the version it was planned from). While it is in
/// flight, each change the Work's objects make is planned again (`replan`: the newer status
/// when it differs in state, not only in progress); the first such status is written at once
/// (`second`, unconditionally) beside `first`, and both are awaited.
pub async fn write_overtaken<T, E, S, P, W>(
    first: impl Future<Output = Result<T, E>>,
    changes: &mut impl Changes,
    mut replan: impl FnMut() -> P,
    second: impl FnOnce(S) -> W,
) -> Writes<T, E>
where
    P: Future<Output = Option<S>>,
    W: Future<Output = Result<T, E>>,
{
    let mut first = std::pin::pin!(first);
    loop {
        tokio::select! {
            biased;
            result = &mut first => return Writes { first: result, second: None },
            () = changes.next() => {
                if let Some(newer) = replan().await {
                    let (first, second) = futures::join!(first, second(newer));
                    return Writes { first, second: Some(second) };
                }
            }
        }
    }
}

/// Writes `status` on `work` by server-side apply: only if the Work is still at
/// `resource_version` when one is given. Returns the Work as written.
pub async fn send(
    work: &Work,
    status: &WorkStatus,
    resource_version: Option<&str>,
    ctx: &Context,
) -> Result<Work, kube::Error> {
    let name = work.name_any();
    let mut metadata = json!({"name": name, "namespace": ctx.namespace});
    if let Some(version) = resource_version {
        metadata["resourceVersion"] = json!(version);
    }
    let body = json!({
        "apiVersion": Work::api_version(&()),
        "kind": Work::kind(&()),
        "metadata": metadata,
        "status": status,
    });
    ctx.metrics.work_request(request::WRITE_WORK_STATUS);
    let written = Api::<Work>::namespaced(ctx.hub.clone(), &ctx.namespace)
        .patch_status(
            &name,
            &PatchParams::apply(MEMBER_AGENT).force(),
            &Patch::Apply(&body),
        )
        .await;
    if written.as_ref().is_err_and(crate::error::is_conflict) {
        ctx.metrics.work_request(request::WORK_STATUS_REFUSED);
    }
    written
}

/// Whether `newer`, planned while `planned` was being written, differs from it in state: not
/// only in progress messages, nor in the times of conditions that changed in both (two plans a
/// moment apart stamp them a moment apart). Worth writing at once beside it.
pub fn changes_state(planned: &WorkStatus, newer: &WorkStatus) -> bool {
    let without_times = |s: &WorkStatus| {
        crate::work_status::with_each_condition(s, |c| {
            c.last_transition_time =
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
        })
    };
    let (planned, newer) = (without_times(planned), without_times(newer));
    planned != newer && !crate::work_status::only_messages_differ(&planned, &newer)
}

/// Whether `status` is what `work` already has (compared as JSON, which is what the API server
/// stores: times in whole seconds).
pub fn unchanged(work: &Work, status: &WorkStatus, namespace: &str) -> Result<bool, Error> {
    let json_of = |s: &WorkStatus| {
        serde_json::to_value(s).map_err(|source| Error::Json {
            what: format!("status of Work {namespace}/{}", work.name_any()),
            source,
        })
    };
    match &work.status {
        Some(current) => Ok(json_of(current)? == json_of(status)?),
        None => Ok(false),
    }
}

/// What a reconcile's status write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Nothing: the status is unchanged, or only progress changed and is held back.
    Nothing,
    /// The planned status.
    Planned,
    /// The planned status, and a newer one beside it (a workload changed state meanwhile).
    Overtaken,
    /// Nothing: the Work changed since it was read, and the write was refused.
    Conflict,
}

/// How soon a reconcile whose status write was refused (the Work changed since it was read)
/// runs again if the Work's watch has not brought the change by then.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(250);

/// Writes `status` on `work` unless it already has it, conditional on the version it was
/// planned from; a newer state planned by `replan` while it is in flight overtakes it
/// ([`write_overtaken`]).
pub async fn write<P: Future<Output = Option<WorkStatus>>>(
    work: &Work,
    status: &WorkStatus,
    changes: &mut WorkChanges,
    replan: impl FnMut() -> P,
    ctx: &Context,
) -> Result<Written, Error> {
    if unchanged(work, status, &ctx.namespace)? {
        return Ok(Written::Nothing);
    }
    let name = work.name_any();
    let failed = || {
        Error::hub(format!(
            "writing the status of Work {}/{name}",
            ctx.namespace
        ))
    };
    let writes = write_overtaken(
        send(work, status, work.resource_version().as_deref(), ctx),
        changes,
        replan,
        |newer| async move { send(work, &newer, None, ctx).await },
    )
    .await;
    if let Some(second) = &writes.second {
        // What each write came to (the first is refused when the second landed before it).
        let landed = |r: &Result<Work, kube::Error>| match r {
            Ok(w) => format!("version {}", w.resource_version().unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        tracing::debug!(
            first = %landed(&writes.first),
            second = %landed(second),
            "a newer state overtook the status write in flight"
        );
    }
    match writes.second {
        None => match writes.first {
            Ok(written) => {
                ctx.written_works.record(&name, written);
                Ok(Written::Planned)
            }
            Err(e) if crate::error::is_conflict(&e) => Ok(Written::Conflict),
            Err(e) => Err(failed()(e)),
        },
        // The second landed last (or the first was refused because it did): it is the newer.
        Some(second) => {
            if let Ok(first) = writes.first {
                ctx.written_works.record(&name, first);
            }
            ctx.written_works.record(&name, second.map_err(failed())?);
            Ok(Written::Overtaken)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::time::Instant;

    impl Changes for tokio::sync::mpsc::UnboundedReceiver<()> {
        async fn next(&mut self) {
            if self.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// A write that takes `ms` and records when it started and ended.
    async fn write(
        log: Arc<Mutex<Vec<String>>>,
        what: &'static str,
        ms: u64,
        t0: Instant,
    ) -> Result<&'static str, ()> {
        let at = |t0: Instant| Instant::now().duration_since(t0).as_millis();
        log.lock()
            .unwrap()
            .push(format!("{what} sent at {}", at(t0)));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        log.lock()
            .unwrap()
            .push(format!("{what} landed at {}", at(t0)));
        Ok(what)
    }

    /// A change of state while the first write is in flight is written at once beside it, not
    /// after it; a change of progress only is not.
    #[tokio::test(start_paused = true)]
    async fn a_newer_state_is_written_beside_the_write_in_flight() {
        let t0 = Instant::now();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
        // Two changes while the first write (100 ms) is in flight: at 20 ms only progress, at
        // 30 ms the workload turned available.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(()).unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send(()).unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let mut plans = vec![Some("available"), None].into_iter().rev();
        let writes = write_overtaken(
            write(log.clone(), "first", 100, t0),
            &mut changes,
            || std::future::ready(plans.next().flatten()),
            |newer| write(log.clone(), newer, 40, t0),
        )
        .await;
        assert_eq!(writes.first, Ok("first"));
        assert_eq!(writes.second, Some(Ok("available")));
        assert_eq!(
            *log.lock().unwrap(),
            [
                "first sent at 0",
                "available sent at 30",
                "available landed at 70",
                "first landed at 100"
            ]
        );
    }

    /// Without a change, the first write is all there is.
    #[tokio::test(start_paused = true)]
    async fn without_a_change_only_the_first_is_written() {
        let t0 = Instant::now();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (_tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
        let writes = write_overtaken(
            write(log.clone(), "first", 100, t0),
            &mut changes,
            || std::future::ready(Some("never planned")),
            |newer| write(log.clone(), newer, 40, t0),
        )
        .await;
        assert_eq!(writes.first, Ok("first"));
        assert!(writes.second.is_none());
        assert_eq!(
            *log.lock().unwrap(),
            ["first sent at 0", "first landed at 100"]
        );
    }

    #[test]
    fn progress_is_written_at_most_once_per_interval() {
        let at = |ms: i64| Timestamp::from_millisecond(ms).unwrap();
        assert_eq!(progress_write_delay(None, at(5_000)), None);
        assert_eq!(
            progress_write_delay(Some(at(5_000)), at(5_300)),
            Some(PROGRESS_WRITE_INTERVAL - Duration::from_millis(300))
        );
        assert_eq!(progress_write_delay(Some(at(5_000)), at(6_000)), None);
        assert_eq!(progress_write_delay(Some(at(5_000)), at(9_000)), None);
        // A clock that went back: wait at most one interval.
        assert_eq!(
            progress_write_delay(Some(at(5_000)), at(4_000)),
            Some(PROGRESS_WRITE_INTERVAL)
        );
    }

    #[test]
    fn only_a_new_state_is_worth_writing_beside_the_write_in_flight() {
        use fleethub_crds::conditions::{NewCondition, set_condition};
        let status = |available: &str, message: &str, at_ms: i64| {
            let mut conditions = Vec::new();
            set_condition(
                &mut conditions,
                NewCondition::new("Available", available, "Reason", message.into(), Some(2)),
                Timestamp::from_millisecond(at_ms).unwrap(),
            );
            WorkStatus {
                conditions,
                ..Default::default()
            }
        };
        let planned = status("False", "0/2 replicas ready", 10_100);
        // Planned 300 ms later: the same state, the same second.
        assert!(!changes_state(
            &planned,
            &status("False", "0/2 replicas ready", 10_400)
        ));
        // Progress only.
        assert!(!changes_state(
            &planned,
            &status("False", "1/2 replicas ready", 10_400)
        ));
        // Available.
        assert!(changes_state(
            &planned,
            &status("True", "all available", 10_400)
        ));
    }

    #[test]
    fn each_work_has_its_own_last_write() {
        let at = |ms: i64| Timestamp::from_millisecond(ms).unwrap();
        let writes = StatusWrites::default();
        assert_eq!(writes.progress_delay("ns/a", at(1_000)), None);
        writes.wrote("ns/a", at(1_000));
        assert_eq!(
            writes.progress_delay("ns/a", at(1_400)),
            Some(Duration::from_millis(600))
        );
        assert_eq!(writes.progress_delay("ns/b", at(1_400)), None);
        writes.forget("ns/a");
        assert_eq!(writes.progress_delay("ns/a", at(1_400)), None);
    }
}
