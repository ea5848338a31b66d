//! `kubectl fleet runs|run|stop|resume|approvals|approve` against the real hub: a run that waits
//! on an approval gate is followed, stopped, approved with the plugin (the hub sees the same
//! Approved condition the dashboard writes) and resumed to success.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::time::Duration;

use common::{Scenario, TIMEOUT, clusters_in_order, simulate_members, succeeded};
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::UpdateRunState;
use fleethub_crds::{ApprovalRequest, UpdateRun};
use fleethub_testkit::{Fleet, wait_for};
use kube::Api;
use serde_json::json;
use support::{plugin_err, plugin_ok, plugin_spawn, wait_exit};

fn progressing_reason(reason: &'static str) -> impl Fn(Option<&UpdateRun>) -> bool {
    move |r| {
        r.and_then(|r| r.status.as_ref())
            .and_then(|s| find(&s.conditions, "Progressing"))
            .is_some_and(|c| c.reason == reason)
    }
}

#[tokio::test]
async fn follow_stop_approve_and_resume_a_run() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "kf").await;
    let hub = s.hub.clone();
    let run = s.run.clone();
    let gate = format!("{run}-canary");
    let can = s.member("can", json!({"env": s.env("canary")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    s.placement(&[&can, &prod], false).await;
    s.strategy(json!([
        {"name": "canary", "labelSelector": {"matchLabels": {"env": s.env("canary")}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
    let (updates, members) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    wait_for(
        &runs,
        &run,
        "the run to wait for the canary approval",
        TIMEOUT,
        progressing_reason("UpdateRunWaiting"),
    )
    .await
    .unwrap();

    // runs: one line for the run, waiting at canary, 1 of 2 clusters done.
    let table = plugin_ok(fleet, &["runs"]);
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{run} ")))
        .unwrap_or_else(|| panic!("{run} missing from:\n{table}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &cells[..7],
        [
            run.as_str(),
            s.placement.as_str(),
            "0",
            "Waiting",
            "canary",
            "1/2",
            "clusters"
        ],
        "{table}"
    );

    // run: the stages in order, the gate and the exact command that opens it.
    let detail = plugin_ok(fleet, &["run", &run]);
    assert!(
        !detail.contains('\x1b'),
        "no colours into a pipe:\n{detail}"
    );
    let at = |s: &str| {
        detail
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} missing from:\n{detail}"))
    };
    assert!(at("stage 1/2 canary") < at(&can) && at(&can) < at("stage 2/2 production"));
    assert!(at("stage 2/2 production") < at(&prod));
    assert!(detail.contains(&format!("{can:<24} Succeeded")), "{detail}");
    assert!(detail.contains(&format!("{prod:<24} Pending")), "{detail}");
    assert!(
        detail.contains(&format!("Approval {gate}: waiting for approval since")),
        "{detail}"
    );
    assert!(
        detail.contains(&format!("approve with: kubectl fleet approve {gate}")),
        "{detail}"
    );

    // approvals lists the pending gate.
    let pending = plugin_ok(fleet, &["approvals"]);
    assert!(
        pending.lines().any(|l| l.starts_with(&gate)
            && l.ends_with(&format!("pending: kubectl fleet approve {gate}"))),
        "{pending}"
    );

    // Clear errors for what does not exist.
    let err = plugin_err(fleet, &["approve", "no-such-request-kf"]);
    assert!(
        err.contains("approvalrequest no-such-request-kf not found on the hub (kubectl fleet approvals lists pending ones)"),
        "{err}"
    );
    let err = plugin_err(fleet, &["run", "no-such-run-kf"]);
    assert!(
        err.contains("updaterun no-such-run-kf not found on the hub"),
        "{err}"
    );

    // stop: spec.state=Stop.
    let out = plugin_ok(fleet, &["stop", &run]);
    assert!(out.contains(&format!("updaterun {run} stopping")), "{out}");
    assert_eq!(
        runs.get(&run).await.unwrap().spec.state,
        Some(UpdateRunState::Stop)
    );

    // Follow the run from here to the end.
    let watch = plugin_spawn(fleet, &["run", &run, "--watch"]);

    // approve: the same Approved condition the dashboard writes, by the caller's identity.
    let out = plugin_ok(fleet, &["approve", &gate, "--message", "canary looks good"]);
    assert!(
        out.contains(&format!(
            "approved by fleet-admin: the gate after stage canary of UpdateRun {run}: stage production starts next (approvalrequest {gate})"
        )),
        "{out}"
    );
    let request = approvals.get(&gate).await.unwrap();
    let approved = find(&request.status.as_ref().unwrap().conditions, "Approved").unwrap();
    assert_eq!(approved.status, "True");
    assert_eq!(approved.reason, "Approved");
    assert_eq!(
        approved.message,
        "approved by fleet-admin: canary looks good"
    );
    let err = plugin_err(fleet, &["approve", &gate]);
    assert!(
        err.contains(&format!(
            "approvalrequest {gate} is already approved (approved by fleet-admin"
        )),
        "{err}"
    );

    // The gate opens, but the run is stopped: production does not start.
    wait_for(
        &runs,
        &run,
        "the run to stop after the gate",
        TIMEOUT,
        progressing_reason("UpdateRunStopped"),
    )
    .await
    .unwrap();
    assert_eq!(clusters_in_order(&updates), std::slice::from_ref(&can));
    let detail = plugin_ok(fleet, &["run", &run]);
    assert!(
        detail.contains(&format!("UpdateRun {run}   Stopped")),
        "{detail}"
    );
    assert!(
        detail.contains(&format!("resume with: kubectl fleet resume {run}")),
        "{detail}"
    );
    assert!(
        detail.contains(&format!(
            "Approval {gate}: approved by fleet-admin: canary looks good at"
        )),
        "{detail}"
    );

    // resume: the run finishes.
    let out = plugin_ok(fleet, &["resume", &run]);
    assert!(out.contains(&format!("updaterun {run} resumed")), "{out}");
    wait_for(&runs, &run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    assert_eq!(clusters_in_order(&updates), [can.clone(), prod.clone()]);

    // The watcher saw it through and exited 0 when the run finished.
    let out = wait_exit(
        watch,
        "run --watch to exit after the run finished",
        Duration::from_secs(60),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("---"), "re-rendered on changes:\n{text}");
    assert!(
        text.contains(&format!("UpdateRun {run}   Stopped")),
        "{text}"
    );
    let last = text.rsplit("---").next().unwrap();
    assert!(
        last.contains(&format!("UpdateRun {run}   Succeeded")),
        "{text}"
    );
    assert!(last.contains("2/2 clusters done"), "{last}");

    let table = plugin_ok(fleet, &["runs"]);
    assert!(
        table.lines().any(|l| l.starts_with(&format!("{run} "))
            && l.contains("Succeeded")
            && l.contains("2/2 clusters")),
        "{table}"
    );
    let err = plugin_err(fleet, &["stop", &run]);
    assert!(
        err.contains(&format!("UpdateRun {run} has already finished (Succeeded)")),
        "{err}"
    );
    members.abort();
}

#[tokio::test]
async fn kubectl_finds_the_plugin_on_path_and_gates_of_gone_runs_are_refused() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "kfp").await;
    // A run of this test's own (one that fails: it names a missing placement), so the list
    // below has it whatever else the fleet holds.
    let failing = format!("{}-bad", s.run);
    s.create(json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun", "metadata": {"name": failing},
        "spec": {"placementName": format!("missing-{}", s.id), "resourceSnapshotIndex": "0", "stagedRolloutStrategyName": "none"}}))
    .await;
    // kubectl runs `kubectl-fleet` from PATH and hands it its flags.
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-fleet"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out =
        std::process::Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
            .args(["fleet", "runs", "--kubeconfig"])
            .arg(fleet.kubeconfig("hub"))
            .env("PATH", path)
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.starts_with("NAME") && listed.lines().any(|l| l.starts_with(&failing)),
        "{listed}"
    );

    // A gate whose run is gone: nothing waits for it, and approve says so instead of approving.
    let gone = format!("{}-canary", s.run);
    s.create(json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "ApprovalRequest",
        "metadata": {"name": gone, "labels": {"fleethub.dev/update-run": s.run, "fleethub.dev/stage": "canary"}},
        "spec": {"parentStageRollout": s.run, "targetStage": "canary"}}))
    .await;
    let err = plugin_err(fleet, &["approve", &gone]);
    assert!(
        err.contains(&format!(
            "gates UpdateRun {}, which no longer exists",
            s.run
        )),
        "{err}"
    );
    let request = Api::<ApprovalRequest>::all(s.hub.clone())
        .get(&gone)
        .await
        .unwrap();
    assert!(
        request.status.is_none_or(|st| st.conditions.is_empty()),
        "nothing was approved"
    );

    // A run that fails: run shows why, and --watch exits 1 saying so.
    let watch = plugin_spawn(fleet, &["run", &failing, "--watch"]);
    // First the hub's verdict (so a slow hub and a watcher that misses it fail differently).
    wait_for(
        &Api::<UpdateRun>::all(s.hub.clone()),
        &failing,
        "the hub to fail the run",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .is_some_and(|s| find(&s.conditions, "Succeeded").is_some())
        },
    )
    .await
    .unwrap();
    let out = wait_exit(
        watch,
        "run --watch of the failed run to exit",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "UpdateRun {failing} failed: Placement missing-{} does not exist",
            s.id
        )),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("UpdateRun {failing}   Failed"))
    );

    // Usage errors exit 2, with kubectl-style help.
    let out = support::plugin(fleet, &["approve"]);
    assert_eq!(out.status.code(), Some(2));
    let help = plugin_ok(fleet, &["--help"]);
    for cmd in [
        "runs",
        "run",
        "stop",
        "resume",
        "approvals",
        "approve",
        "join",
        "unjoin",
        "Exit codes",
    ] {
        assert!(help.contains(cmd), "{cmd} missing from --help:\n{help}");
    }
}
