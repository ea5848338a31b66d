//! `kubectl fleet start|rollback` and shell completion against the real hub: a run planned first
//! and started with `resume`, a rollback to the snapshot before, asked for confirmation unless
//! `--yes`, and the names kubectl completes through `kubectl_complete-fleet`.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::process::Command;

use common::{Scenario, TIMEOUT, clusters_in_order, simulate_members, succeeded};
use fleethub_crds::{ApprovalRequest, UpdateRun};
use fleethub_testkit::{Fleet, wait_for};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use support::{plugin, plugin_err, plugin_ok};

/// The run `out` says it created ("updaterun NAME created: …").
fn created(out: &str) -> String {
    out.lines()
        .find_map(|l| {
            let (name, _) = l.strip_prefix("updaterun ")?.split_once(" created")?;
            Some(name.to_string())
        })
        .unwrap_or_else(|| panic!("no run created in:\n{out}"))
}

#[tokio::test]
async fn start_a_planned_run_then_roll_it_back() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "ks").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    s.placement(&[&stg, &prod], false).await;
    s.set_version("2").await;
    s.wait_snapshot(1).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}}},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());

    // Bad input is refused with a sentence, nothing created.
    let err = plugin_err(
        fleet,
        &["start", "no-such-placement-ks", "--strategy", &s.strategy],
    );
    assert!(
        err.contains("placement no-such-placement-ks not found on the hub"),
        "{err}"
    );
    let err = plugin_err(
        fleet,
        &[
            "start",
            &s.placement,
            "--strategy",
            &s.strategy,
            "--index",
            "9",
        ],
    );
    assert!(
        err.contains(&format!(
            "placement {} has no resource snapshot 9 (it has 0, 1)",
            s.placement
        )),
        "{err}"
    );
    let err = plugin_err(
        fleet,
        &["start", &s.placement, "--strategy", "no-such-strategy-ks"],
    );
    assert!(
        err.contains("stagedupdatestrategy no-such-strategy-ks not found"),
        "{err}"
    );

    // A usage error (exit 2), before anything is asked of the hub.
    let out = plugin(
        fleet,
        &[
            "start",
            &s.placement,
            "--strategy",
            &s.strategy,
            "--bake",
            "0s",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a bake is longer than 0s"), "{err}");

    // --plan: the run is planned (stages and clusters in order) and nothing starts.
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 1);
    let name = format!("{}-planned", s.run);
    s.cleanup.track::<UpdateRun>("hub", None, &name);
    let out = plugin_ok(
        fleet,
        &[
            "start",
            &s.placement,
            "--strategy",
            &s.strategy,
            "--name",
            &name,
            "--plan",
            "--on-failure",
            "Rollback",
            "--bake",
            "1s",
        ],
    );
    let planned = runs.get(&name).await.unwrap();
    assert_eq!(
        (planned.spec.on_failure, planned.spec.bake.as_deref()),
        (
            Some(fleethub_crds::strategy::OnFailure::Rollback),
            Some("1s")
        )
    );
    assert!(
        out.contains(&format!("UpdateRun {name}   Planned")),
        "{out}"
    );
    assert!(
        out.contains(&format!("resource snapshot 1, strategy {}", s.strategy)),
        "{out}"
    );
    assert!(
        out.contains("stage 1/2 staging") && out.contains("stage 2/2 production"),
        "{out}"
    );
    assert!(
        out.contains(&format!("kubectl fleet resume {name}")),
        "{out}"
    );
    assert!(clusters_in_order(&updates).is_empty());
    let out = plugin_ok(fleet, &["resume", &name]);
    assert!(out.contains("resumed"), "{out}");
    wait_for(
        &runs,
        &name,
        "the planned run to succeed",
        TIMEOUT,
        succeeded,
    )
    .await
    .unwrap();
    assert_eq!(clusters_in_order(&updates), [stg.clone(), prod.clone()]);
    members.abort();

    // rollback: from snapshot 1 back to 0 with the same strategy; asks first.
    let out = plugin(fleet, &["rollback", &s.placement]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("pass --yes to roll back"), "{err}");
    // This placement's runs only: the other test of this file creates and deletes its own.
    let placement_runs = || async {
        runs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|r| r.spec.placement_name == s.placement)
            .count()
    };
    let before = placement_runs().await;
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    let out = plugin_ok(fleet, &["rollback", &name, "--yes"]);
    assert!(
        out.contains(&format!(
            "Roll placement {} back from resource snapshot 1 to 0 with strategy {} (stages staging → production)",
            s.placement, s.strategy
        )),
        "{out}"
    );
    let rollback = created(&out);
    s.cleanup.track::<UpdateRun>("hub", None, &rollback);
    assert!(
        rollback.starts_with(&format!("{}-0-", s.placement)),
        "{rollback}"
    );
    assert_eq!(placement_runs().await, before + 1);
    let done = wait_for(
        &runs,
        &rollback,
        "the rollback to succeed",
        TIMEOUT,
        succeeded,
    )
    .await
    .unwrap();
    assert_eq!(done.spec.resource_snapshot_index.as_deref(), Some("0"));
    assert_eq!(clusters_in_order(&updates), [stg.clone(), prod.clone()]);
    // Nothing older than 0: refused.
    let err = plugin_err(fleet, &["rollback", &s.placement, "--yes"]);
    assert!(err.contains("nothing to roll back to"), "{err}");
    members.abort();
}

#[tokio::test]
async fn kubectl_completes_run_approval_and_placement_names() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "kc").await;
    let can = s.member("can", json!({"env": s.env("canary")})).await;
    s.placement(&[&can], false).await;
    s.strategy(json!([
        {"name": "canary", "labelSelector": {"matchLabels": {"env": s.env("canary")}},
         "afterStageTasks": [{"type": "Approval"}]}]))
        .await;
    let (_, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let gate = format!("{}-canary", s.run);
    let approvals: Api<ApprovalRequest> = Api::all(s.hub.clone());
    wait_for(
        &approvals,
        &gate,
        "the canary ApprovalRequest",
        TIMEOUT,
        |a: Option<&ApprovalRequest>| a.is_some(),
    )
    .await
    .unwrap();

    // kubectl_complete-fleet, as kubectl runs it: the words after `kubectl fleet`.
    let complete = |words: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl_complete-fleet"))
            .env("KUBECONFIG", fleet.kubeconfig("hub"))
            .args(words)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let prefix = &s.run[..s.run.len() - 3];
    let out = complete(&["approve", prefix]);
    assert_eq!(out, format!("{gate}\n:4\n"));
    let out = complete(&["run", prefix]);
    assert_eq!(out, format!("{}\n:4\n", s.run));
    let out = complete(&["start", &s.placement]);
    assert_eq!(out, format!("{}\n:4\n", s.placement));
    let out = complete(&[
        "start",
        &s.placement,
        "--strategy",
        &s.strategy[..s.strategy.len() - 2],
    ]);
    assert_eq!(out, format!("{}\n:4\n", s.strategy));
    let out = complete(&["ap"]);
    assert_eq!(out, "approvals\napprove\n:4\n");

    // The real kubectl, finding the plugin and its completion on PATH.
    let dir = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-fleet"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(kubectl)
        .env("PATH", path)
        .env("KUBECONFIG", fleet.kubeconfig("hub"))
        .args(["__complete", "fleet", "approve", prefix])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().next() == Some(gate.as_str()),
        "kubectl __complete fleet approve: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Approved: no longer offered.
    common::approve(&approvals, &gate).await.unwrap();
    assert_eq!(complete(&["approve", prefix]), ":4\n");
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    members.abort();
}
