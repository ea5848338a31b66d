//! The watches the regression scenarios time with: one of a run (the first instant it shows a
//! state) and one of a placement's Bindings (which of them were pointed at a run).

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleethub_crds::{Binding, UpdateRun, names};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::task::JoinHandle;

use super::progressing;

/// Every state of one UpdateRun this process's watch saw since the last wait, with when.
type Sightings = Vec<(Instant, Arc<UpdateRun>)>;

/// A watch of one UpdateRun by name (it need not exist yet).
pub(super) struct RunWatch {
    name: String,
    seen: Arc<tokio::sync::watch::Sender<Sightings>>,
    task: JoinHandle<()>,
}

impl RunWatch {
    pub(super) fn start(client: &Client, name: &str) -> Self {
        let seen = Arc::new(tokio::sync::watch::channel(Sightings::new()).0);
        let api: Api<UpdateRun> = Api::all(client.clone());
        let config = fleethub_runtime::watcher_config().fields(&format!("metadata.name={name}"));
        let tx = seen.clone();
        let task = tokio::spawn(async move {
            let mut runs = fleethub_runtime::watch(api, config)
                .applied_objects()
                .boxed();
            while let Some(next) = runs.next().await {
                let Ok(run) = next else { continue };
                let at = Instant::now();
                tx.send_modify(|s| s.push((at, Arc::new(run))));
            }
        });
        RunWatch {
            name: name.to_string(),
            seen,
            task,
        }
    }

    /// The first state seen at or after `since` of which `f` says something, with when it was
    /// seen. Forgets the states seen before `since`.
    pub(super) async fn first<T>(
        &self,
        since: Instant,
        timeout: Duration,
        what: &str,
        f: impl Fn(&UpdateRun) -> Option<T>,
    ) -> anyhow::Result<(Instant, T)> {
        self.seen.send_modify(|s| s.retain(|(at, _)| *at >= since));
        let mut rx = self.seen.subscribe();
        let wait = async {
            loop {
                let found = rx
                    .borrow_and_update()
                    .iter()
                    .find_map(|(at, run)| f(run).map(|t| (*at, t)));
                if found.is_some() {
                    return found;
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Some(found)) => Ok(found),
            Ok(None) => anyhow::bail!(
                "the watch of UpdateRun {} ended while waiting for {what}",
                self.name
            ),
            Err(_) => {
                let last = self.seen.borrow().last().map(|(_, r)| r.clone());
                let last = last
                    .as_deref()
                    .and_then(progressing)
                    .map(|(s, r)| format!("Progressing={s} ({r})"))
                    .unwrap_or_else(|| "nothing".into());
                anyhow::bail!(
                    "UpdateRun {}: no {what} within {timeout:?}; last seen: {last}",
                    self.name
                )
            }
        }
    }
}

impl Drop for RunWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A watch of one placement's Bindings, recording every cluster of `clusters` whose Binding
/// was seen pointed at `run`.
pub(super) struct BindingWatch {
    pointed: Arc<Mutex<BTreeSet<String>>>,
    events: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl BindingWatch {
    /// Starts the watch and returns once its first list is done.
    pub(super) async fn start(
        client: &Client,
        placement: &str,
        run: &str,
        clusters: &[String],
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let api: Api<Binding> = Api::all(client.clone());
        let config = fleethub_runtime::watcher_config()
            .labels(&format!("{}={placement}", names::PLACEMENT_LABEL));
        let clusters: HashSet<String> = clusters.iter().cloned().collect();
        let run = run.to_string();
        let pointed: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let events: Arc<AtomicUsize> = Arc::default();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let (p, e) = (pointed.clone(), events.clone());
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut stream = fleethub_runtime::watch(api, config).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(b) | watcher::Event::InitApply(b)) => {
                        e.fetch_add(1, Ordering::Relaxed);
                        if clusters.contains(&b.spec.target_cluster)
                            && b.spec.update_run_name.as_deref() == Some(run.as_str())
                            && let Ok(mut p) = p.lock()
                        {
                            p.insert(b.spec.target_cluster.clone());
                        }
                    }
                    _ => {}
                }
            }
        });
        let watch = BindingWatch {
            pointed,
            events,
            task,
        };
        tokio::time::timeout(timeout, listed)
            .await
            .map_err(|_| {
                anyhow::anyhow!("the Bindings of {placement} were not listed within {timeout:?}")
            })?
            .map_err(|_| anyhow::anyhow!("the watch of the Bindings of {placement} ended"))?;
        Ok(watch)
    }

    /// The clusters whose Binding was seen pointed at the run.
    pub(super) fn pointed(&self) -> BTreeSet<String> {
        self.pointed.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Binding changes seen.
    pub(super) fn events(&self) -> usize {
        self.events.load(Ordering::Relaxed)
    }
}

impl Drop for BindingWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
