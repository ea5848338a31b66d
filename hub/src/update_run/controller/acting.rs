//! A run's writes in the background, one plan's after the other's.
//!
//! A reconcile records the run's status and hands the plan's writes (Bindings, approvals) to
//! its run's queue instead of waiting for them: at 1,000 clusters a stage's Bindings took
//! 0.3–1.4 s to write, and every member report that came in meanwhile waited for them before
//! the next reconcile could record it. The writes of one plan start only when those of the
//! previous plan of the same run have ended, so nothing is written out of order; a plan made
//! while earlier writes were in flight may repeat some of them, and [`super::act`] skips those
//! the API server has already answered. A failed write is kept for the run's next reconcile,
//! which fails with it (and backs off, as a failed reconcile always did), and that reconcile is
//! asked for at once: its plan repeats whatever is still missing.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// Per key (a run's name), the last queued batch of writes and the first failure not yet
/// reported.
pub(super) struct Queues<E> {
    last: Mutex<HashMap<String, JoinHandle<()>>>,
    failed: Arc<Mutex<HashMap<String, E>>>,
    /// Asks for a key's next reconcile (after a failure).
    retry: UnboundedSender<String>,
}

impl<E: Send + 'static> Queues<E> {
    pub(super) fn new(retry: UnboundedSender<String>) -> Self {
        Queues {
            last: Mutex::default(),
            failed: Arc::default(),
            retry,
        }
    }

    /// Runs `writes` once the batch queued before it for `key` has ended.
    pub(super) fn enqueue<F>(&self, key: &str, writes: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
    {
        let mut last = lock(&self.last);
        let before = last.remove(key);
        let name = key.to_string();
        let (failed, retry) = (self.failed.clone(), self.retry.clone());
        let task = tokio::spawn(async move {
            if let Some(before) = before {
                // A batch that panicked or was aborted has nothing left to wait for.
                let _ = before.await;
            }
            if let Err(e) = writes.await {
                lock(&failed).entry(name.clone()).or_insert(e);
                let _ = retry.send(name);
            }
        });
        last.insert(key.to_string(), task);
    }

    /// The failure of a batch of `key` since the last call, if any.
    pub(super) fn take_failure(&self, key: &str) -> Option<E> {
        lock(&self.failed).remove(key)
    }

    /// Forgets the queues whose writes have all ended and whose key `keep` no longer holds for.
    pub(super) fn prune(&self, keep: impl Fn(&str) -> bool) {
        lock(&self.last).retain(|key, task| !task.is_finished() || keep(key));
        lock(&self.failed).retain(|key, _| keep(key));
    }

    /// Stops every batch (the controller stopped: another process may be leading now).
    pub(super) fn abort_all(&self) {
        for (_, task) in lock(&self.last).drain() {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    type Log = Arc<Mutex<Vec<String>>>;

    fn batch(
        log: &Log,
        name: &'static str,
        gate: Option<tokio::sync::oneshot::Receiver<()>>,
        fail: bool,
    ) -> impl Future<Output = Result<(), String>> + Send + 'static {
        let log = log.clone();
        async move {
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            lock(&log).push(name.to_string());
            if fail {
                Err(format!("{name} failed"))
            } else {
                Ok(())
            }
        }
    }

    async fn wait_for(log: &Log, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while lock(log).len() < n {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the batches ran");
    }

    #[tokio::test]
    async fn a_runs_batches_run_in_order_even_when_an_earlier_one_is_slow() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let queues = Queues::new(tx);
        let log: Log = Arc::default();
        let (open, gate) = tokio::sync::oneshot::channel();
        queues.enqueue("r", batch(&log, "first", Some(gate), false));
        queues.enqueue("r", batch(&log, "second", None, false));
        // Another run's writes do not wait for this one's.
        queues.enqueue("other", batch(&log, "other", None, false));
        wait_for(&log, 1).await;
        assert_eq!(*lock(&log), vec!["other"]);
        open.send(()).unwrap();
        wait_for(&log, 3).await;
        assert_eq!(*lock(&log), vec!["other", "first", "second"]);
    }

    #[tokio::test]
    async fn a_failed_batch_is_kept_for_the_runs_next_reconcile_and_asks_for_it() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let queues = Queues::new(tx);
        let log: Log = Arc::default();
        queues.enqueue("r", batch(&log, "a", None, true));
        queues.enqueue("r", batch(&log, "b", None, true));
        assert_eq!(rx.recv().await.as_deref(), Some("r"));
        assert_eq!(rx.recv().await.as_deref(), Some("r"));
        // The first failure is the one reported; once taken, it is gone.
        assert_eq!(queues.take_failure("r").as_deref(), Some("a failed"));
        assert_eq!(queues.take_failure("r"), None);
        assert_eq!(queues.take_failure("other"), None);
    }

    #[tokio::test]
    async fn prune_keeps_what_is_in_flight_and_abort_stops_it() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let queues = Queues::new(tx);
        let log: Log = Arc::default();
        let (_never, gate) = tokio::sync::oneshot::channel::<()>();
        queues.enqueue("slow", batch(&log, "slow", Some(gate), false));
        queues.enqueue("done", batch(&log, "done", None, false));
        wait_for(&log, 1).await;
        tokio::time::timeout(Duration::from_secs(10), async {
            while !lock(&queues.last)["done"].is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        queues.prune(|_| false);
        let left: Vec<String> = lock(&queues.last).keys().cloned().collect();
        assert_eq!(left, vec!["slow"]);
        queues.abort_all();
        assert!(lock(&queues.last).is_empty());
        assert_eq!(*lock(&log), vec!["done"]);
    }
}
