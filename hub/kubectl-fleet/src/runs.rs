//! `runs`, `run`, `stop`, `resume`, `approvals` and `approve`: the hub's UpdateRuns and their
//! gates.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};

use fleethub_crds::approval::approval_apply;
use fleethub_crds::conditions::is_true;
use fleethub_crds::names::UPDATE_RUN_LABEL;
use fleethub_crds::update_run::SUCCEEDED;
use fleethub_crds::update_run_plan::{self, UpdateRunPlan};
use fleethub_crds::{ApprovalRequest, UpdateRun};
use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::cluster::{Cluster, whoami};
use crate::error::{Error, Result, is_not_found};
use crate::render::{self, RunState, Style};

/// The field manager of every write the plugin makes.
pub use fleethub_crds::field_manager::KUBECTL_FLEET as FIELD_MANAGER;

pub(crate) fn style() -> Style {
    Style {
        color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    }
}

async fn get_run(client: &Client, name: &str) -> Result<UpdateRun> {
    Api::<UpdateRun>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading UpdateRun {name}")))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "updaterun {name} not found on the hub (kubectl fleet runs lists them)"
            ))
        })
}

/// `run` with the clusters of its large stages, which are in its UpdateRunPlan: read into
/// `plan` the first time (a plan never changes). A plan that is lost leaves those stages with
/// their counts; the run's conditions say why.
async fn with_plan(
    client: &Client,
    plan: &mut Option<UpdateRunPlan>,
    mut run: UpdateRun,
) -> Result<UpdateRun> {
    if let Some(name) = update_run_plan::plan_to_read(&run, plan.as_ref()) {
        *plan = Api::<UpdateRunPlan>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading UpdateRunPlan {name}")))?;
    }
    // Lost: shown with its counts.
    let _ = update_run_plan::read_into(&mut run, plan.as_ref());
    Ok(run)
}

async fn run_approvals(client: &Client, run: &str) -> Result<BTreeMap<String, ApprovalRequest>> {
    let list = Api::<ApprovalRequest>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{UPDATE_RUN_LABEL}={run}")))
        .await
        .map_err(Error::api(format!(
            "listing the ApprovalRequests of UpdateRun {run}"
        )))?;
    Ok(list
        .items
        .into_iter()
        .map(|a| (kube::ResourceExt::name_any(&a), a))
        .collect())
}

/// `kubectl fleet runs`.
pub async fn runs(hub: &Cluster) -> Result<()> {
    let list = Api::<UpdateRun>::all(hub.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::api("listing UpdateRuns"))?;
    print!(
        "{}",
        render::runs_table(&list.items, jiff::Timestamp::now())
    );
    Ok(())
}

/// `kubectl fleet run <name> [--watch]`. With `watch`, re-renders whenever the run or one of
/// its ApprovalRequests changes, and returns when the run has finished; failing if it failed.
pub async fn run(hub: &Cluster, name: &str, watch: bool, all_clusters: bool) -> Result<()> {
    let style = style();
    let mut plan = None;
    let mut run = with_plan(&hub.client, &mut plan, get_run(&hub.client, name).await?).await?;
    let mut approvals = run_approvals(&hub.client, name).await?;
    let mut last = String::new();
    let mut show = |run: &UpdateRun, approvals: &BTreeMap<String, ApprovalRequest>| {
        let approvals: Vec<ApprovalRequest> = approvals.values().cloned().collect();
        let text = render::run_detail_listing(
            run,
            &approvals,
            jiff::Timestamp::now(),
            style,
            all_clusters,
        );
        if text == last {
            return;
        }
        let mut out = std::io::stdout().lock();
        if watch && style.color {
            let _ = write!(out, "\x1b[H\x1b[2J");
        } else if !last.is_empty() {
            let _ = writeln!(out, "---");
        }
        let _ = write!(out, "{text}");
        let _ = out.flush();
        last = text;
    };
    show(&run, &approvals);
    if !watch {
        return Ok(());
    }
    // One merged stream: the run itself and the approvals that gate it.
    enum Change {
        Run(Box<UpdateRun>),
        RunDeleted,
        Gates,
    }
    let runs = watcher(
        Api::<UpdateRun>::all(hub.client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .map_ok(|e| match e {
        watcher::Event::Apply(r) | watcher::Event::InitApply(r) => Some(Change::Run(Box::new(r))),
        watcher::Event::Delete(_) => Some(Change::RunDeleted),
        watcher::Event::Init | watcher::Event::InitDone => None,
    });
    let gates = watcher(
        Api::<ApprovalRequest>::all(hub.client.clone()),
        watcher::Config::default().labels(&format!("{UPDATE_RUN_LABEL}={name}")),
    )
    .default_backoff()
    .touched_objects()
    .map_ok(|_| Some(Change::Gates));
    let mut events = futures::stream::select(runs.boxed(), gates.boxed());
    // On a terminal the clocks (soak time left, ages) also tick once a second; into a pipe, only
    // changes are written.
    let tty = std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(std::time::Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut warned = false;
    while !render::run_state(&run).finished() {
        let next = tokio::select! {
            next = events.next() => next,
            _ = ticks.tick(), if tty => {
                show(&run, &approvals);
                continue;
            }
        };
        match next {
            Some(Ok(Some(Change::Run(r)))) => {
                run = with_plan(&hub.client, &mut plan, *r).await?;
                warned = false;
            }
            Some(Ok(Some(Change::Gates))) => approvals = run_approvals(&hub.client, name).await?,
            Some(Ok(Some(Change::RunDeleted))) => {
                return Err(Error::NotFound(format!(
                    "updaterun {name} was deleted while being watched"
                )));
            }
            Some(Ok(None)) => continue,
            // The watcher retries with a backoff (e.g. across an API server restart); say so once.
            Some(Err(e)) => {
                if !warned {
                    eprintln!("watching UpdateRun {name}: {e}; retrying");
                    warned = true;
                }
                continue;
            }
            None => break,
        }
        show(&run, &approvals);
    }
    if render::run_state(&run) == RunState::Failed {
        return Err(Error::Refused(format!(
            "UpdateRun {name} failed: {}",
            render::run_message(&run).as_deref().unwrap_or("see above")
        )));
    }
    Ok(())
}

/// `kubectl fleet stop|resume <run>`: sets `spec.state`.
pub async fn set_state(hub: &Cluster, name: &str, stop: bool) -> Result<()> {
    let run = get_run(&hub.client, name).await?;
    let state = render::run_state(&run);
    if state.finished() {
        return Err(Error::Refused(format!(
            "UpdateRun {name} has already finished ({}); there is nothing to {}",
            state.label(),
            if stop { "stop" } else { "resume" }
        )));
    }
    let value = if stop { "Stop" } else { "Run" };
    let patch = serde_json::json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "UpdateRun",
        "metadata": {"name": name},
        "spec": {"state": value},
    });
    Api::<UpdateRun>::all(hub.client.clone())
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::api(format!(
            "setting spec.state of UpdateRun {name} to {value}"
        )))?;
    if stop {
        println!(
            "updaterun {name} stopping: no new cluster starts; clusters already updating finish (kubectl fleet resume {name} continues)"
        );
    } else {
        println!("updaterun {name} resumed");
    }
    Ok(())
}

/// `kubectl fleet approvals [--all]`.
pub async fn approvals(hub: &Cluster, all: bool) -> Result<()> {
    let list = Api::<ApprovalRequest>::all(hub.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::api("listing ApprovalRequests"))?;
    let items: Vec<ApprovalRequest> = list
        .items
        .into_iter()
        .filter(|a| all || !render::is_approved(a))
        .collect();
    print!(
        "{}",
        render::approvals_table(&items, jiff::Timestamp::now())
    );
    Ok(())
}

/// `kubectl fleet approve <request> [--message]`: the person's own approval, the same change as
/// the dashboard's (see [`approval_apply`]).
pub async fn approve(hub: &Cluster, name: &str, message: &str) -> Result<()> {
    let api: Api<ApprovalRequest> = Api::all(hub.client.clone());
    let request = api
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading ApprovalRequest {name}")))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "approvalrequest {name} not found on the hub (kubectl fleet approvals lists pending ones)"
            ))
        })?;
    if let Some(approval) = fleethub_crds::run_progress::Approval::of(&request) {
        return Err(Error::Refused(format!(
            "approvalrequest {name} is already approved ({} at {})",
            approval.message, approval.at
        )));
    }
    let run_name = &request.spec.parent_stage_rollout;
    let run = match Api::<UpdateRun>::all(hub.client.clone())
        .get(run_name)
        .await
    {
        Ok(r) => r,
        Err(e) if is_not_found(&e) => {
            return Err(Error::Refused(format!(
                "approvalrequest {name} gates UpdateRun {run_name}, which no longer exists; nothing waits for it"
            )));
        }
        Err(e) => return Err(Error::api(format!("reading UpdateRun {run_name}"))(e)),
    };
    let state = render::run_state(&run);
    let stage_done = run.status.as_ref().is_some_and(|s| {
        s.stages_status.iter().any(|st| {
            st.stage_name == request.spec.target_stage && is_true(&st.conditions, SUCCEEDED)
        })
    });
    if state.finished() {
        return Err(Error::Refused(format!(
            "UpdateRun {run_name} is over ({}), so nothing waits for approvalrequest {name} any more",
            state.label()
        )));
    }
    if stage_done {
        return Err(Error::Refused(format!(
            "stage {} of UpdateRun {run_name} has already finished: approvalrequest {name} opens nothing any more",
            request.spec.target_stage
        )));
    }
    let gate = gate_of(&run, name, &request.spec.target_stage).ok_or_else(|| {
        Error::Refused(format!(
            "UpdateRun {run_name} has no approval gate named {name} in its plan; nothing waits for it"
        ))
    })?;
    let approver = whoami(hub).await;
    if request.approvers().contains(&approver.as_str()) {
        return Err(Error::Refused(format!(
            "you ({approver}) have already approved approvalrequest {name}; it waits for {} more",
            request
                .spec
                .policy
                .as_ref()
                .map_or(1, |p| p.needed())
                .saturating_sub(request.approvers().len())
        )));
    }
    let (manager, body) = approval_apply(&request, &approver, message, jiff::Timestamp::now());
    let approved = api
        .patch_status(
            name,
            &PatchParams::apply(&manager).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::api(format!("approving ApprovalRequest {name}")))?;
    match &approved.spec.policy {
        Some(policy) if !approved.is_approved() => println!(
            "approved by {approver}: {} of {} approvals; {gate} once the gate has them all (approvalrequest {name})",
            approved.approvers().len(),
            policy.needed()
        ),
        _ => println!("approved by {approver}: {gate} (approvalrequest {name})"),
    }
    Ok(())
}

/// The gate approval request `name` opens, in words: "the gate after stage canary of UpdateRun
/// r: stage production starts next", or None when the run's plan has no such gate.
fn gate_of(run: &UpdateRun, name: &str, stage: &str) -> Option<String> {
    use fleethub_crds::strategy::StageTaskType;
    let status = run.status.as_ref()?;
    let run_name = kube::ResourceExt::name_any(run);
    let position = status
        .stages_status
        .iter()
        .position(|s| s.stage_name == stage)?;
    let this = &status.stages_status[position];
    let names_it = |tasks: &[fleethub_crds::update_run::StageTaskStatus]| {
        tasks.iter().any(|t| {
            t.type_ == StageTaskType::Approval && t.approval_request_name.as_deref() == Some(name)
        })
    };
    if names_it(&this.before_stage_task_status) {
        return Some(format!(
            "the gate before stage {stage} of UpdateRun {run_name}: its clusters may start"
        ));
    }
    if !names_it(&this.after_stage_task_status) {
        return None;
    }
    let next = match status.stages_status.get(position + 1) {
        Some(n) => format!("stage {} starts next", n.stage_name),
        None => "the run finishes next".to_string(),
    };
    let others = this
        .after_stage_task_status
        .iter()
        .filter(|t| t.type_ != StageTaskType::Approval)
        .count();
    let also = if others > 0 {
        " once its other gates pass"
    } else {
        ""
    };
    Some(format!(
        "the gate after stage {stage} of UpdateRun {run_name}: {next}{also}"
    ))
}
