//! `kubectl fleet freeze|freezes|unfreeze` against the real hub: a freeze of one placement holds
//! its run before its first cluster, the run naming who froze it and why (the API server
//! checked the name); another placement's freeze does not; lifted, the run goes on.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use common::{Scenario, TIMEOUT, clusters_in_order, simulate_members, succeeded};
use fleethub_crds::conditions::find;
use fleethub_crds::{Freeze, UpdateRun};
use fleethub_testkit::{Fleet, wait_for};
use kube::Api;
use serde_json::json;
use support::{plugin_err, plugin_ok};

#[tokio::test]
async fn a_freeze_holds_its_placements_run_until_unfrozen() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "frz").await;
    let (ours, other) = (format!("frz-{}", s.id), format!("frz-other-{}", s.id));
    s.cleanup.track::<Freeze>("hub", None, &ours);
    s.cleanup.track::<Freeze>("hub", None, &other);
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}}}]))
        .await;

    // A freeze of another placement, and one of ours.
    plugin_ok(
        fleet,
        &[
            "freeze",
            "--name",
            &other,
            "--placement",
            "someone-elses",
            "--reason",
            "not ours",
        ],
    );
    let made = plugin_ok(
        fleet,
        &[
            "freeze",
            "--name",
            &ours,
            "--placement",
            &s.placement,
            "--reason",
            "quarter-end close",
        ],
    );
    assert!(
        made.contains(&format!("(freeze {ours}): quarter-end close"))
            && made.contains(&format!("holds placements {}", s.placement)),
        "{made}"
    );
    let again = plugin_err(fleet, &["freeze", "--name", &ours, "--reason", "twice"]);
    assert!(again.contains("already exists"), "{again}");
    let listed = plugin_ok(fleet, &["freezes"]);
    let line = listed
        .lines()
        .find(|l| l.starts_with(&format!("{ours} ")))
        .unwrap_or_else(|| panic!("{ours} missing from:\n{listed}"));
    assert!(
        line.contains("holding") && line.contains("quarter-end close"),
        "{listed}"
    );

    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    let frozen = wait_for(
        &runs,
        &s.run,
        "the run to be held by the freeze",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, "Progressing"))
                .is_some_and(|c| c.reason == "Frozen")
        },
    )
    .await
    .unwrap();
    let message = find(&frozen.status.unwrap().conditions, "Progressing")
        .unwrap()
        .message
        .clone();
    assert!(
        message.starts_with("stage staging waits: frozen by ")
            && message.contains(&format!(
                "until unfrozen (freeze {ours}): quarter-end close"
            )),
        "{message}"
    );
    assert!(clusters_in_order(&updates).is_empty());

    // Lifted: the run goes on; the other placement's freeze never mattered.
    let lifted = plugin_ok(fleet, &["unfreeze", &ours]);
    assert!(
        lifted.contains(&format!("freeze {ours} lifted")),
        "{lifted}"
    );
    wait_for(
        &runs,
        &s.run,
        "the run to succeed once unfrozen",
        TIMEOUT,
        succeeded,
    )
    .await
    .unwrap();
    assert_eq!(clusters_in_order(&updates), [stg]);
    let gone = plugin_err(fleet, &["unfreeze", &ours]);
    assert!(gone.contains("not found"), "{gone}");
    plugin_ok(fleet, &["unfreeze", &other]);
    members.abort();
}
