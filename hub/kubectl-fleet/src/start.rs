//! `start` and `rollback`: creating UpdateRuns from the terminal, the way the dashboard does.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use fleethub_crds::placement::RolloutStrategyType;
use fleethub_crds::run_progress::RunPhase;
use fleethub_crds::update_run::{UpdateRunSpec, UpdateRunState};
use fleethub_crds::{Placement, ResourceSnapshot, StagedUpdateStrategy, UpdateRun};
use kube::api::{ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::render;
use crate::runs::FIELD_MANAGER;

/// How long `start --plan` waits for the hub to write the plan.
const PLAN_WAIT: Duration = Duration::from_secs(60);

/// What to start.
pub struct StartOptions {
    /// The Placement (its strategy type must be External).
    pub placement: String,
    /// The StagedUpdateStrategy.
    pub strategy: String,
    /// The resource snapshot index (default: the hub takes the latest).
    pub index: Option<i64>,
    /// The run's name (default: `<placement>-<index>-<random>`).
    pub name: Option<String>,
    /// Create it as a plan (`spec.state: Initialize`) and print the plan.
    pub plan: bool,
    /// `spec.onFailure`.
    pub on_failure: Option<fleethub_crds::strategy::OnFailure>,
    /// `spec.bake`.
    pub bake: Option<String>,
}

async fn placement(hub: &Cluster, name: &str) -> Result<Placement> {
    let p = Api::<Placement>::all(hub.client.clone())
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading Placement {name}")))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "placement {name} not found on the hub (kubectl get placements lists them)"
            ))
        })?;
    let strategy = p
        .spec
        .strategy
        .as_ref()
        .map(|s| s.type_)
        .unwrap_or_default();
    if strategy != RolloutStrategyType::External {
        return Err(Error::Refused(format!(
            "placement {name} rolls out with strategy {strategy:?}: the hub moves its clusters itself, and UpdateRuns only drive placements whose spec.strategy.type is External"
        )));
    }
    Ok(p)
}

async fn snapshot_indices(hub: &Cluster, placement: &str) -> Result<Vec<i64>> {
    let list = Api::<ResourceSnapshot>::all(hub.client.clone())
        .list(&ListParams::default().fields(&format!("spec.placementName={placement}")))
        .await
        .map_err(Error::api(format!(
            "listing the ResourceSnapshots of Placement {placement}"
        )))?;
    let mut indices: Vec<i64> = list
        .items
        .iter()
        .filter(|s| s.spec.placement_name == placement)
        .map(|s| s.spec.resource_index)
        .collect();
    indices.sort_unstable();
    indices.dedup();
    Ok(indices)
}

async fn check_strategy(hub: &Cluster, name: &str) -> Result<StagedUpdateStrategy> {
    Api::<StagedUpdateStrategy>::all(hub.client.clone())
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading StagedUpdateStrategy {name}")))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "stagedupdatestrategy {name} not found on the hub (kubectl get stagedupdatestrategies lists them)"
            ))
        })
}

/// `kubectl fleet start PLACEMENT --strategy S [--index N] [--name R] [--plan]`.
pub async fn start(hub: &Cluster, o: &StartOptions) -> Result<()> {
    placement(hub, &o.placement).await?;
    check_strategy(hub, &o.strategy).await?;
    if let Some(index) = o.index {
        let indices = snapshot_indices(hub, &o.placement).await?;
        if !indices.contains(&index) {
            return Err(Error::NotFound(format!(
                "placement {} has no resource snapshot {index} (it has {}); kubectl get resourcesnapshots --field-selector spec.placementName={} lists them",
                o.placement,
                list(&indices),
                o.placement
            )));
        }
    }
    let run = create(hub, o).await?;
    let name = run.name_any();
    let what = match o.index {
        Some(i) => format!("resource snapshot {i}"),
        None => "its latest resource snapshot".to_string(),
    };
    if !o.plan {
        println!(
            "updaterun {name} created: rolls placement {} out to {what} with strategy {} (kubectl fleet run {name} --watch follows it)",
            o.placement, o.strategy
        );
        return Ok(());
    }
    let planned = wait_planned(hub, &name).await?;
    print!(
        "{}",
        render::run_detail(&planned, &[], jiff::Timestamp::now(), crate::runs::style())
    );
    if RunPhase::of(&planned) == RunPhase::Planned {
        println!("\nNothing starts until you run: kubectl fleet resume {name}");
    }
    Ok(())
}

fn list(indices: &[i64]) -> String {
    if indices.is_empty() {
        return "none yet".into();
    }
    indices
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

async fn create(hub: &Cluster, o: &StartOptions) -> Result<UpdateRun> {
    let mut run = UpdateRun::new(
        o.name.as_deref().unwrap_or_default(),
        UpdateRunSpec {
            placement_name: o.placement.clone(),
            resource_snapshot_index: o.index.map(|i| i.to_string()),
            staged_rollout_strategy_name: o.strategy.clone(),
            state: o.plan.then_some(UpdateRunState::Initialize),
            on_failure: o.on_failure,
            bake: o.bake.clone(),
            ..Default::default()
        },
    );
    // Who started it (the API server refuses any other name): its gates' approval policies
    // keep that person from approving them alone.
    run.metadata.annotations = Some(
        [(
            fleethub_crds::names::STARTED_BY_ANNOTATION.to_string(),
            crate::cluster::whoami(hub).await,
        )]
        .into(),
    );
    if o.name.is_none() {
        // The API server appends 5 random characters; run names stay DNS labels of at most 63
        // characters (ApprovalRequests are named <run>-<stage>).
        let index = o.index.map_or("latest".to_string(), |i| i.to_string());
        let prefix: String = format!("{}-{index}", o.placement)
            .chars()
            .take(40)
            .collect();
        run.metadata.name = None;
        run.metadata.generate_name = Some(format!("{}-", prefix.trim_end_matches('-')));
    }
    Api::<UpdateRun>::all(hub.client.clone())
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &run,
        )
        .await
        .map_err(Error::api(format!(
            "creating an UpdateRun of Placement {}",
            o.placement
        )))
}

/// Waits until the hub has planned run `name` (or refused it).
async fn wait_planned(hub: &Cluster, name: &str) -> Result<UpdateRun> {
    let api = Api::<UpdateRun>::all(hub.client.clone());
    let planned = |r: Option<&UpdateRun>| {
        r.is_some_and(|r| {
            !matches!(
                RunPhase::of(r),
                RunPhase::Pending | RunPhase::Initializing | RunPhase::Queued
            )
        })
    };
    match tokio::time::timeout(PLAN_WAIT, await_condition(api, name, planned)).await {
        Ok(Ok(Some(run))) => Ok(run),
        Ok(Ok(None)) => Err(Error::NotFound(format!(
            "updaterun {name} was deleted before the hub planned it"
        ))),
        Ok(Err(e)) => Err(Error::Timeout(format!(
            "watching UpdateRun {name} for its plan: {e}"
        ))),
        Err(_) => Err(Error::Timeout(format!(
            "the hub did not plan UpdateRun {name} within {}s: is fleethub-hub running? (kubectl fleet run {name} shows it when it does)",
            PLAN_WAIT.as_secs()
        ))),
    }
}

/// What `rollback` was asked to roll back.
pub struct RollbackOptions {
    /// A Placement, or an UpdateRun (its placement).
    pub target: String,
    /// The strategy (default: the newest run's).
    pub strategy: Option<String>,
    /// The run's name (default: generated).
    pub name: Option<String>,
    /// Do not ask.
    pub yes: bool,
}

/// `kubectl fleet rollback PLACEMENT|RUN [--strategy S] [--yes]`: a run to the snapshot before
/// the one the placement's newest run rolled out, the same rollback as the dashboard's.
pub async fn rollback(hub: &Cluster, o: &RollbackOptions) -> Result<()> {
    let runs = Api::<UpdateRun>::all(hub.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::api("listing UpdateRuns"))?
        .items;
    let placement_name = match runs.iter().find(|r| r.name_any() == o.target) {
        Some(run) => run.spec.placement_name.clone(),
        None => o.target.clone(),
    };
    let p = placement(hub, &placement_name).await.map_err(|e| match e {
        Error::NotFound(_) => Error::NotFound(format!(
            "{} is neither an UpdateRun nor a Placement on the hub (kubectl fleet runs, kubectl get placements)",
            o.target
        )),
        other => other,
    })?;
    let latest = p
        .status
        .as_ref()
        .and_then(|s| s.latest_resource_snapshot_index);
    let indices = snapshot_indices(hub, &placement_name).await?;
    let Some(back) = fleethub_crds::rollback::rollback(&placement_name, latest, &runs, &indices)
    else {
        return Err(Error::Refused(format!(
            "placement {placement_name} has no resource snapshot older than the one it rolled out last (snapshots: {}); there is nothing to roll back to",
            list(&indices)
        )));
    };
    let strategy = o
        .strategy
        .clone()
        .or(back.strategy.clone())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "placement {placement_name} has no run to take a strategy from: pass --strategy"
            ))
        })?;
    let stages = check_strategy(hub, &strategy).await?.spec.stages;
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    println!(
        "Roll placement {placement_name} back from resource snapshot {} to {} with strategy {strategy} (stages {}){}.",
        back.from,
        back.to,
        names.join(" → "),
        back.newest_run
            .as_deref()
            .and_then(|r| runs.iter().find(|run| run.name_any() == r))
            .filter(|r| !RunPhase::of(r).finished())
            .map(|r| format!(
                "; UpdateRun {}, still {}, is superseded",
                r.name_any(),
                RunPhase::of(r).label().to_lowercase()
            ))
            .unwrap_or_default()
    );
    if !o.yes && !confirm()? {
        return Err(Error::Refused("not confirmed; nothing was created".into()));
    }
    let run = create(
        hub,
        &StartOptions {
            placement: placement_name.clone(),
            strategy,
            index: Some(back.to),
            name: o.name.clone(),
            plan: false,
            // A rollback that fails stops for a person: it never rolls itself back.
            on_failure: Some(fleethub_crds::strategy::OnFailure::Hold),
            bake: None,
        },
    )
    .await?;
    let name = run.name_any();
    println!(
        "updaterun {name} created: rolls placement {placement_name} back to resource snapshot {} (kubectl fleet run {name} --watch follows it)",
        back.to
    );
    Ok(())
}

/// Asks "Continue? [y/N]" on the terminal; refuses without one (pass --yes).
fn confirm() -> Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Error::Invalid(
            "not on a terminal, so nobody can confirm: pass --yes to roll back".into(),
        ));
    }
    print!("Continue? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|source| Error::Io {
            path: "standard input".into(),
            source,
        })?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}
