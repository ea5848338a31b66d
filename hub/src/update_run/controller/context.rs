//! What the UpdateRun controller's reconciles share, in four parts: how it reaches the API
//! server and the rest of the world ([`Io`]), what it reads without asking ([`Caches`]), its
//! own writes the caches may not show yet ([`RecentWrites`]), and when runs are planned and
//! their writes performed ([`Pacing`]).

use super::*;

/// What the reconciler shares.
pub struct Context {
    pub(super) io: Io,
    pub(super) caches: Caches,
    pub(super) recent: RecentWrites,
    pub(super) pacing: Pacing,
}

/// How the controller reaches the outside: the API server, events, metrics, Prometheus, time.
pub(super) struct Io {
    pub(super) client: Client,
    pub(super) metrics: Metrics,
    pub(super) clock: Arc<dyn Clock>,
    /// Events go to a publisher task: a reconcile must not wait for one API call per event
    /// (a stage of 50 clusters makes 100 of them) before the run can move again.
    pub(super) events: publisher::Sender,
    /// Asks the metric gates' queries.
    pub(super) prometheus: Prometheus,
    /// The hub's namespace's Secrets: the metric gates' credentials (`metricCheck.secretRef`),
    /// read one by one (get only) when a check is made.
    pub(super) secrets: Api<Secret>,
}

/// What the controller reads without asking the API server: the watched stores, and what it
/// read or built from the API server's objects once.
pub(super) struct Caches {
    pub(super) runs: Store<UpdateRun>,
    pub(super) works: Store<Work>,
    pub(super) bindings: Store<Binding>,
    pub(super) approvals: Store<ApprovalRequest>,
    pub(super) members: Store<MemberCluster>,
    pub(super) placements: Store<Placement>,
    pub(super) freezes: Store<fleethub_crds::Freeze>,
    /// The planner's views of the Bindings of placements with an unfinished run, built again
    /// only when their Binding changed ([`binding_views`]).
    pub(super) binding_views: binding_views::BindingViews,
    /// The runs' UpdateRunPlans this process read or wrote ([`plans`]).
    pub(super) plans: plans::Plans,
}

/// This process' own writes that the caches may not show yet: freshness hints, never decisions.
pub(super) struct RecentWrites {
    /// Each run as this process' last status write returned it, until the cache of runs holds
    /// that version or a newer one: the reconcile right after a write (the Works' reports
    /// trigger one at once) plans on it instead of reading the run again (at 1,000 clusters a
    /// run is over 100 KB, and those reads were a tenth of the run's requests). A freshness
    /// hint, never a decision: a run planned on a stale copy is refused by the status write's
    /// resourceVersion precondition. Writes of runs that are gone are dropped.
    pub(super) written: LastWritten<UpdateRun>,
    /// Each Binding as this process' last bind of it returned it, until the cache of Bindings
    /// holds that version or a newer one: a plan made right after a bind sees it (instead of
    /// binding again, from a stale resourceVersion, into a conflict), and a bind a plan repeats
    /// while an earlier plan's writes were in flight is skipped when already done.
    pub(super) bound: LastWritten<Binding>,
    /// The ApprovalRequests created that the cache does not show yet ([`asked`]).
    pub(super) asked: asked::Asked,
}

/// When each run is planned again and how its plan's writes are performed.
pub(super) struct Pacing {
    /// Consecutive failed reconciles per run: retries back off from 1 s to 30 s.
    pub(super) errors: FailureBackoff<ObjectRef<UpdateRun>>,
    /// When each run may be planned next ([`pace`]).
    pub(super) pace: pace::Pace,
    /// Each run's plan writes, in the background and in order ([`acting`]).
    pub(super) acting: acting::Queues<Error>,
    /// Binding writes of one plan in flight at once (a stage starting many clusters together;
    /// [`crate::CONCURRENT_CLUSTER_UPDATES`]). They run after the status, in the background: in
    /// rounds before it, a 1,000-cluster run spent most of each reconcile binding (0.6–1.5 s)
    /// while a member's report waited to be recorded.
    pub(super) bind_concurrency: usize,
}

impl Context {
    /// The run to plan on: the newest of the cached one and our own last write of it; read
    /// again when neither can be trusted.
    pub(super) async fn freshest(
        &self,
        cached: Arc<UpdateRun>,
    ) -> Result<Option<Arc<UpdateRun>>, Error> {
        let name = cached.name_any();
        let runs: Api<UpdateRun> = Api::all(self.io.client.clone());
        self.recent
            .written
            .newest_or_read(&name, Some(cached), || runs.get_opt(&name))
            .await
            .map_err(Error::from)
    }

    /// Forgets the writes of runs no longer in the cache (deleted, even mid-rollout), and the
    /// binds of Bindings no longer in the cache.
    pub(super) fn forget_deleted_runs(&self) {
        let exists = |name: &str| self.caches.runs.get(&ObjectRef::new(name)).is_some();
        self.pacing.acting.prune(exists);
        self.pacing.pace.retain(exists);
        self.caches.plans.retain(exists);
        self.recent.asked.forget_old();
        let placements_in_runs: std::collections::HashSet<String> = self
            .caches
            .runs
            .state()
            .iter()
            .filter(|r| !finished(r))
            .map(|r| r.spec.placement_name.clone())
            .collect();
        self.caches
            .binding_views
            .retain(|placement| placements_in_runs.contains(placement));
        if !self.recent.written.is_empty() {
            self.recent.written.retain(|name, _| exists(name));
        }
        if !self.recent.bound.is_empty() {
            self.recent
                .bound
                .retain(|name, _| self.caches.bindings.get(&ObjectRef::new(name)).is_some());
        }
    }
}

impl Caches {
    /// Whether every store is complete, waiting for them together at most [`CACHE_WAIT`]:
    /// right after a (re)start or a change of leader, a run initialized on a cache still being
    /// filled would see clusters (or an earlier run) missing.
    pub(super) async fn ready(&self) -> bool {
        let caches = || async {
            tokio::try_join!(
                self.runs.wait_until_ready(),
                self.members.wait_until_ready(),
                self.bindings.wait_until_ready(),
                self.works.wait_until_ready(),
                self.approvals.wait_until_ready(),
                self.placements.wait_until_ready(),
                self.freezes.wait_until_ready()
            )
        };
        fleethub_runtime::ready_within(CACHE_WAIT, caches).await
    }
}
