//! What a reconcile observes: the run's lookups before it is initialized (strategy, placement,
//! snapshot, override snapshots), the placement's existence afterwards, the caches, and the
//! metric checks' outcomes.

use std::collections::HashSet;

use fleethub_crds::update_run::UpdateRunStatus;
use fleethub_runtime::last_written::Newest;

use super::*;

/// What a run reads from the API server only until it is initialized (afterwards its status
/// holds the frozen copy), and whether its placement still exists afterwards.
pub(super) struct Lookups {
    strategy: Option<StagedUpdateStrategy>,
    placement: Option<Placement>,
    placement_deleted: bool,
    snapshot_exists: bool,
    override_snapshots: OverrideSnapshots,
}

/// Whether a run with `status` froze its plan (`Initialized=True`).
fn initialized(status: Option<&UpdateRunStatus>) -> bool {
    status.is_some_and(|s| is_true(&s.conditions, INITIALIZED))
}

pub(super) async fn look_up(ctx: &Context, run: &UpdateRun) -> Result<Lookups, Error> {
    let initialized = initialized(run.status.as_ref());
    let placement_name = &run.spec.placement_name;
    let placements: Api<Placement> = Api::all(ctx.io.client.clone());
    if initialized {
        // The cache says whether the placement is still there; a cache that says it is gone is
        // asked again (it may lag a re-created placement), a deleted placement is never assumed.
        let gone =
            |p: Option<&Placement>| p.is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        let mut placement_deleted = gone(
            ctx.caches
                .placements
                .get(&ObjectRef::new(placement_name))
                .as_deref(),
        );
        if placement_deleted {
            placement_deleted = gone(placements.get_opt(placement_name).await?.as_ref());
        }
        return Ok(Lookups {
            strategy: None,
            placement: None,
            placement_deleted,
            snapshot_exists: true,
            override_snapshots: OverrideSnapshots::default(),
        });
    }
    let strategies: Api<StagedUpdateStrategy> = Api::all(ctx.io.client.clone());
    let snapshots: Api<ResourceSnapshot> = Api::all(ctx.io.client.clone());
    let placement = placements.get_opt(placement_name).await?;
    let index = match run.snapshot_index() {
        Some(parsed) => parsed.ok(), // the planner refuses an unreadable index itself
        None => latest_index(placement.as_ref()),
    };
    let snapshot_exists = match index {
        Some(index) => {
            let snapshot = names::resource_snapshot_name(placement_name, index.max(0) as u64);
            snapshots
                .get_opt(&snapshot)
                .await?
                .is_some_and(|s| &s.spec.placement_name == placement_name)
        }
        None => false,
    };
    Ok(Lookups {
        strategy: strategies
            .get_opt(&run.spec.staged_rollout_strategy_name)
            .await?,
        placement,
        placement_deleted: false,
        snapshot_exists,
        override_snapshots: newest_override_snapshots(ctx, placement_name).await?,
    })
}

/// The placement's latest resource snapshot index, as its status says.
fn latest_index(placement: Option<&Placement>) -> Option<i64> {
    placement?.status.as_ref()?.latest_resource_snapshot_index
}

/// The newest snapshot of every override that may apply to `placement` (limited to it, or to
/// no placement), as a run fixes them when it starts.
async fn newest_override_snapshots(
    ctx: &Context,
    placement: &str,
) -> Result<OverrideSnapshots, Error> {
    let allows = |p: &Option<fleethub_crds::overrides::PlacementRef>| {
        p.as_ref().is_none_or(|p| p.name == placement)
    };
    let cluster = Api::<ClusterResourceOverrideSnapshot>::all(ctx.io.client.clone())
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|s| allows(&s.spec.override_spec.placement));
    let namespaced = Api::<ResourceOverrideSnapshot>::all(ctx.io.client.clone())
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|s| allows(&s.spec.override_spec.placement));
    Ok(override_apply::choose(None, cluster, namespaced).names())
}

/// Every member's labels, read from the API server rather than the cache.
pub(super) async fn fresh_cluster_labels(
    ctx: &Context,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, Error> {
    let members = Api::<MemberCluster>::all(ctx.io.client.clone())
        .list_metadata(&Default::default())
        .await?;
    Ok(members
        .items
        .into_iter()
        .map(|m| (m.name_any(), m.metadata.labels.unwrap_or_default()))
        .collect())
}

/// Everything the planner looks at, from the lookups and the caches, for `run` with `status`
/// (its own, taken out of it).
pub(super) fn observe<'a>(
    ctx: &Context,
    run: &'a UpdateRun,
    status: Option<&UpdateRunStatus>,
    lookups: &'a Lookups,
) -> Observed<'a> {
    let placement = &run.spec.placement_name;
    let name = run.name_any();
    let newest: Vec<Arc<Binding>> = ctx
        .caches
        .bindings
        .state()
        .into_iter()
        .filter(|b| &b.spec.placement_name == placement)
        // A bind this process made that the cache does not show yet.
        .map(|b| {
            let name = b.metadata.name.as_deref().unwrap_or_default();
            match ctx.recent.bound.newest(name, Some(b.clone())) {
                Newest::Object(newest) => newest,
                Newest::Absent | Newest::Unknown => b,
            }
        })
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .collect();
    let bindings = ctx
        .caches
        .binding_views
        .of(placement, newest.iter().map(|b| b.as_ref()));
    // After initialization the planner reads the Works and the members' health only of the
    // clusters it has not finished with, and no labels: at 10,000 clusters, views of every Work
    // and copies of every member's labels were most of each reconcile's CPU.
    let initialized = initialized(status);
    let open = initialized.then(|| unfinished_clusters(status));
    let open_or_all = |cluster: &str| open.as_ref().is_none_or(|open| open.contains(cluster));
    // Only the members the run concerns, looked up by name: a reconcile copied every member's
    // labels, and at 10,000 members with 100 runs reconciling at once those copies held over a
    // GiB.
    let member = |c: &str| ctx.caches.members.get(&ObjectRef::new(c));
    let members: Vec<_> = match &open {
        Some(open) => open.iter().filter_map(|c| member(c)).collect(),
        None => concerned_clusters(status, &bindings)
            .into_iter()
            .filter_map(member)
            .collect(),
    };
    Observed {
        run,
        override_snapshots: lookups.override_snapshots.clone(),
        strategy: lookups.strategy.as_ref().map(|s| &s.spec),
        placement: lookups.placement.as_ref(),
        placement_deleted: lookups.placement_deleted,
        plan_lost: None,
        latest_snapshot_index: latest_index(lookups.placement.as_ref()),
        snapshot_exists: lookups.snapshot_exists,
        // Read only to initialize (stages by label, order by sorting label).
        cluster_labels: if initialized {
            BTreeMap::new()
        } else {
            members
                .iter()
                .map(|m| (m.name_any(), m.labels().clone()))
                .collect()
        },
        down_members: members
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .and_then(|s| find(&s.conditions, HEALTHY))
                    .is_some_and(|c| c.status == fleethub_crds::conditions::FALSE)
            })
            .map(|m| m.name_any())
            .collect(),
        unhealthy_members: members
            .iter()
            .filter_map(|m| {
                let healthy = find(&m.status.as_ref()?.conditions, HEALTHY)?;
                (healthy.status != TRUE).then(|| (m.name_any(), healthy.message.clone()))
            })
            .collect(),
        bindings,
        works: ctx
            .caches
            .works
            .state()
            .iter()
            .filter(|w| &w.spec.placement_name == placement)
            .filter_map(|w| {
                let cluster = names::cluster_of_namespace(w.metadata.namespace.as_deref()?)?;
                // A cluster the run is done with is watched for regressions: its Work is
                // read only when it is not healthy.
                (open_or_all(cluster) || !work_healthy(w))
                    .then(|| (cluster.to_string(), WorkView::from_work(w)))
            })
            .collect(),
        approvals: ctx
            .caches
            .approvals
            .state()
            .iter()
            .filter(|a| a.spec.parent_stage_rollout == name)
            .map(|a| (a.name_any(), ApprovalView::from_request(a)))
            .collect(),
        siblings: ctx
            .caches
            .runs
            .state()
            .iter()
            .filter(|r| &r.spec.placement_name == placement)
            .map(|r| SiblingRun::of(r))
            .collect(),
        metric_results: BTreeMap::new(),
        freeze: fleethub_crds::freeze::holding(
            ctx.caches.freezes.state().iter().map(|f| f.as_ref()),
            placement,
            ctx.io.clock.now(),
        )
        .map(|f| (f.describe(), f.spec.until.as_ref().map(|u| u.0))),
        now: ctx.io.clock.now(),
    }
}

/// The clusters a run with `status` concerns: those of its placement's `bindings` (the
/// clusters it starts with) and those its status names (in its stages, or to remove
/// afterwards). The planner looks members up only by these names.
fn concerned_clusters<'a>(
    status: Option<&'a UpdateRunStatus>,
    bindings: &'a [Arc<BindingView>],
) -> HashSet<&'a str> {
    let mut names: HashSet<&str> = bindings.iter().map(|b| b.cluster.as_str()).collect();
    if let Some(status) = status {
        let stages = status
            .stages_status
            .iter()
            .chain(status.deletion_stage_status.as_ref());
        for stage in stages {
            names.extend(stage.clusters.iter().map(|c| c.cluster_name.as_str()));
        }
    }
    names
}

/// The clusters of a run with `status` the planner is not finished with: in its stages, those
/// that neither succeeded nor were passed over (pending, updating, failed); every cluster of
/// its deletion stage. The planner reads Works and members' health only for these.
fn unfinished_clusters(status: Option<&UpdateRunStatus>) -> HashSet<&str> {
    let Some(status) = status else {
        return HashSet::new();
    };
    // A regressed cluster is read until it recovers.
    let finished = |c: &fleethub_crds::update_run::ClusterUpdatingStatus| {
        (is_true(&c.conditions, SUCCEEDED)
            && !is_true(&c.conditions, fleethub_crds::update_run::REGRESSED))
            || is_true(&c.conditions, fleethub_crds::update_run::CLUSTER_SKIPPED)
    };
    let stages = status
        .stages_status
        .iter()
        .flat_map(|s| &s.clusters)
        .filter(|c| !finished(c));
    let deletion = status
        .deletion_stage_status
        .iter()
        .flat_map(|s| &s.clusters);
    stages
        .chain(deletion)
        .map(|c| c.cluster_name.as_str())
        .collect()
}

/// Whether a Work is applied and available for its current generation, read in place (at
/// 10,000 clusters a view of every Work was most of a reconcile).
fn work_healthy(w: &fleethub_crds::Work) -> bool {
    let Some(status) = w.status.as_ref() else {
        return false;
    };
    [fleethub_crds::work::APPLIED, fleethub_crds::work::AVAILABLE]
        .iter()
        .all(|type_| {
            find(&status.conditions, type_)
                .is_some_and(|c| c.status == TRUE && c.observed_generation == w.metadata.generation)
        })
}

/// Makes the metric checks' queries, together.
pub(super) async fn query(
    ctx: &Context,
    queries: &[MetricQuery],
) -> BTreeMap<MetricKey, QueryOutcome> {
    let asks = queries.iter().map(|q| async move {
        let outcome = match &q.secret {
            None => ctx.io.prometheus.query(&q.url, &q.query).await,
            Some(name) => match credentials(&ctx.io.secrets, name).await {
                Ok(auth) => ctx.io.prometheus.query_with(&q.url, &q.query, Some(&auth)).await,
                Err(e) => QueryOutcome::Error(e),
            },
        };
        let result = match &outcome {
            QueryOutcome::Data(_) => "pass",
            QueryOutcome::NoData => "no-data",
            QueryOutcome::Error(e) => {
                tracing::info!(stage = %q.key.stage, url = %q.url, error = %e, "metric check failed");
                "error"
            }
        };
        ctx.io.metrics.count_metric_check(result);
        (q.key.clone(), outcome)
    });
    futures::future::join_all(asks).await.into_iter().collect()
}

/// A metric check's credentials from Secret `name`; the error names the Secret (never a
/// value), and fails the check instead of passing it.
async fn credentials(secrets: &Api<Secret>, name: &str) -> Result<Auth, String> {
    let ns = secrets.namespace().unwrap_or_default();
    match secrets.get_opt(name).await {
        Ok(Some(secret)) => {
            Auth::from_secret(&secret).map_err(|e| format!("Secret {ns}/{name} {e}"))
        }
        Ok(None) => Err(format!(
            "Secret {ns}/{name} (metricCheck.secretRef) not found"
        )),
        Err(e) => Err(format!(
            "cannot read Secret {ns}/{name} (metricCheck.secretRef): {e}"
        )),
    }
}
