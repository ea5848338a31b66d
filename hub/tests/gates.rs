//! Gates people can trust, on the real hub API server.
//!
//! Approval policies: a gate that needs two people. The people are users the API server
//! authenticates (admin impersonation, so `request.userInfo` is theirs and the hub's RBAC
//! applies), bound through a group to the `fleethub:admin` role `deploy/hub` ships. The API
//! server itself (ValidatingAdmissionPolicies `fleethub-run-starter` and `fleethub-approvals`)
//! refuses a run naming another starter, the starter's own approval, an approver outside the
//! policy, an approval written in someone else's name, an approval taken back, and a bare
//! `Approved` condition; one approval leaves the gate shut, the second person's opens it.
//!
//! Windows: a stage whose allowed window opens later waits, naming the opening, and starts at
//! it. The members' reports come from a stand-in for the agents.

mod common;

use common::{Scenario, TIMEOUT, clusters_in_order, simulate_members, succeeded};
use fleethub_crds::approval::approval_apply;
use fleethub_crds::conditions::find;
use fleethub_crds::names::STARTED_BY_ANNOTATION;
use fleethub_crds::{ApprovalRequest, UpdateRun};
use fleethub_testkit::{Fleet, wait_for};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// `user` approves `name` as the dashboard and `kubectl fleet approve` do.
async fn approve(as_user: &Client, user: &str, name: &str) -> Result<ApprovalRequest, String> {
    let api: Api<ApprovalRequest> = Api::all(as_user.clone());
    let request = api.get(name).await.map_err(|e| e.to_string())?;
    let (manager, body) = approval_apply(&request, user, "", jiff::Timestamp::now());
    api.patch_status(
        name,
        &PatchParams::apply(&manager).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| e.to_string())
}

fn refused(result: Result<ApprovalRequest, String>, why: &str) {
    match result {
        Ok(r) => panic!("expected a refusal ({why}), the API server took it: {r:?}"),
        Err(e) => assert!(e.contains(why), "refused, but not for {why:?}: {e}"),
    }
}

fn progressing(run: &UpdateRun) -> String {
    run.status
        .as_ref()
        .and_then(|s| find(&s.conditions, "Progressing"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_two_person_gate_refuses_the_starter_and_strangers_and_opens_with_the_second_approval() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "ap").await;
    let group = format!("approvers-{}", s.id);
    let person = |name: &str| format!("{name}-{}@example.com", s.id);
    let (alice, bob, carol, dave) = (
        person("alice"),
        person("bob"),
        person("carol"),
        person("dave"),
    );
    s.create(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("fleethub-admin-{}", s.id)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fleethub:admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}))
    .await;
    let as_person = async |user: &str| fleet.hub_as(user, &[&group]).await.unwrap();

    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let prod = s.member("prod", json!({"env": s.env("production")})).await;
    s.placement(&[&stg, &prod], false).await;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "Approval", "approvalPolicy": {
             "minApprovals": 2, "approvers": {"users": [alice, bob, carol]}}}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);

    // Carol starts the run: the API server takes only her own name as its starter.
    let run = |starter: &str| {
        serde_json::from_value::<UpdateRun>(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
            "metadata": {"name": s.run, "annotations": {STARTED_BY_ANNOTATION: starter}},
            "spec": {"placementName": s.placement, "resourceSnapshotIndex": "0",
                     "stagedRolloutStrategyName": s.strategy}}))
        .unwrap()
    };
    s.cleanup.track::<UpdateRun>("hub", None, &s.run);
    let carols_runs: Api<UpdateRun> = Api::all(as_person(&carol).await);
    let forged = carols_runs
        .create(&PostParams::default(), &run(&alice))
        .await
        .expect_err("a run naming someone else as its starter");
    assert!(
        forged
            .to_string()
            .contains("must name the user creating the UpdateRun"),
        "{forged}"
    );
    carols_runs
        .create(&PostParams::default(), &run(&carol))
        .await
        .unwrap();

    let name = format!("{}-staging", s.run);
    let approvals: Api<ApprovalRequest> = Api::all(s.hub.clone());
    let request = wait_for(
        &approvals,
        &name,
        "the staging gate's ApprovalRequest",
        TIMEOUT,
        |r: Option<&ApprovalRequest>| r.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(request.spec.started_by.as_deref(), Some(carol.as_str()));
    assert_eq!(request.spec.resource_snapshot_index.as_deref(), Some("0"));
    assert_eq!(
        request.spec.policy.as_ref().and_then(|p| p.min_approvals),
        Some(2)
    );

    // The starter, a stranger, a forged name, a bare condition: all refused by the API server.
    refused(
        approve(&as_person(&carol).await, &carol, &name).await,
        "the approval policy of this gate needs someone else",
    );
    refused(
        approve(&as_person(&dave).await, &dave, &name).await,
        "is not among the approvers of this gate",
    );
    refused(
        approve(&as_person(&alice).await, &bob, &name).await,
        "may add only their own approval",
    );
    let bare = fleethub_crds::approval::approve_patch(&alice, "", jiff::Timestamp::now());
    let bare = Api::<ApprovalRequest>::all(as_person(&alice).await)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&bare))
        .await
        .map_err(|e| e.to_string());
    refused(bare, "this gate has an approval policy");

    // Alice's approval is one of two: the gate stays shut, and the run says how far it got.
    let after_alice = approve(&as_person(&alice).await, &alice, &name)
        .await
        .unwrap();
    assert_eq!(after_alice.approvers(), [alice.as_str()]);
    assert!(!after_alice.is_approved());
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    let waiting = wait_for(
        &runs,
        &s.run,
        "the run to count one approval of two",
        TIMEOUT,
        |r: Option<&UpdateRun>| r.is_some_and(|r| progressing(r).contains("1 of 2 approvals")),
    )
    .await
    .unwrap();
    assert!(
        progressing(&waiting).contains(&name),
        "{}",
        progressing(&waiting)
    );
    // An approval once given stays: Bob cannot take Alice's back.
    let erase = json!({"status": {"approvals": []}});
    let erased = Api::<ApprovalRequest>::all(as_person(&bob).await)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&erase))
        .await
        .map_err(|e| e.to_string());
    refused(erased, "an approval once given is never changed or removed");
    assert_eq!(clusters_in_order(&updates), std::slice::from_ref(&stg));

    // Bob's is the second: the gate opens, production follows.
    approve(&as_person(&bob).await, &bob, &name).await.unwrap();
    wait_for(
        &runs,
        &s.run,
        "the run to succeed after the second approval",
        TIMEOUT,
        succeeded,
    )
    .await
    .unwrap();
    assert_eq!(clusters_in_order(&updates), [stg, prod]);
    let opened = approvals.get(&name).await.unwrap();
    let mut who = opened.approvers();
    who.sort();
    assert_eq!(who, [alice.as_str(), bob.as_str()]);
    let conditions = &opened.status.as_ref().unwrap().conditions;
    assert!(fleethub_crds::conditions::is_true(conditions, "Approved"));
    members.abort();
}

#[tokio::test]
async fn a_stage_reached_before_its_window_opens_waits_for_the_opening() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "win").await;
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    // A window opening once, 30 s from now (a 6-field schedule, seconds first), for an hour.
    let opening = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30))
        .round(jiff::Unit::Second)
        .unwrap();
    let at = opening.to_zoned(jiff::tz::TimeZone::UTC);
    let schedule = format!(
        "{} {} {} {} {} *",
        at.second(),
        at.minute(),
        at.hour(),
        at.day(),
        at.month()
    );
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "allowedWindows": [{"schedule": schedule, "duration": "1h"}]}]))
        .await;
    let (updates, members) = simulate_members(s.hub.clone(), s.placement.clone(), 0);
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(s.hub.clone());
    let waiting = wait_for(
        &runs,
        &s.run,
        "the run to wait for staging's window",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, "Progressing"))
                .is_some_and(|c| c.reason == "OutsideWindow")
        },
    )
    .await
    .unwrap();
    let message = progressing(&waiting);
    assert!(
        message.contains(
            "stage staging waits: outside its allowed windows stages[0].allowedWindows[0]"
        ) && message.contains(&format!("it may start at {opening}")),
        "{message}"
    );
    assert!(
        jiff::Timestamp::now() < opening,
        "the run reached staging after its window opened"
    );
    assert!(clusters_in_order(&updates).is_empty());
    wait_for(
        &runs,
        &s.run,
        "the run to succeed once the window opened",
        TIMEOUT,
        succeeded,
    )
    .await
    .unwrap();
    let first = updates.lock().unwrap().first().map(|(_, at, _)| *at);
    assert!(
        first.is_some_and(|t| t >= opening),
        "staging's cluster updated at {first:?}, before its window opened at {opening}"
    );
    members.abort();
}
