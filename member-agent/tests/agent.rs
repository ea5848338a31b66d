//! The member agent against the real local fleet (hub + member cluster `member-1`): joining and
//! heartbeats, applying Works with server-side apply, availability and the health timeout,
//! cleanup of exactly what the agent created, and restarts.
//!
//! Each test has a MemberCluster of its own (`m-<random>`) and namespaces of its own on the
//! member, so tests (and the fleet's own agents) do not interfere.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use fleethub_crds::MemberCluster;
use fleethub_crds::applied_work::{AppliedWork, WORK_NAMESPACE_LABEL};
use fleethub_crds::member_cluster::AGENT_LEASE;
use fleethub_member_agent::{AGENT_VERSION, quantity};
use fleethub_testkit::{Fleet, poll_until, unique_name, wait_deleted, wait_for};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

#[tokio::test]
async fn joins_once_its_member_cluster_exists_and_heartbeats() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::named(fleet).await;
    let agent = TestAgent::start(fleet, &m.name).await;

    // No MemberCluster yet: not ready, and /readyz says why.
    let missing = format!("MemberCluster {} does not exist on the hub", m.name);
    poll_until(
        "/readyz to name the missing MemberCluster",
        TIMEOUT,
        || async {
            let (code, body) = agent.readyz().await;
            (code == 503 && body.contains(&missing)).then_some(())
        },
    )
    .await
    .unwrap();

    m.create_objects(Some(1)).await;
    let members: Api<MemberCluster> = Api::all(m.hub.clone());
    let joined = wait_for(
        &members,
        &m.name,
        "the agent to join",
        TIMEOUT,
        |mc: Option<&MemberCluster>| {
            mc.and_then(|mc| mc.status.as_ref()).is_some_and(|s| {
                fleethub_crds::conditions::find(&s.conditions, "Joined")
                    .is_some_and(|c| c.status == "True" && c.reason == "AgentJoined")
            })
        },
    )
    .await
    .unwrap();
    let status = joined.status.unwrap();
    let nodes = Api::<Node>::all(m.member.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let version = m.member.apiserver_version().await.unwrap().git_version;
    assert_eq!(status.node_count, Some(nodes.len() as i32));
    assert_eq!(status.kubernetes_version.as_deref(), Some(version.as_str()));
    assert_eq!(status.agent_version.as_deref(), Some(AGENT_VERSION));
    let expected: BTreeMap<String, String> = ["cpu", "memory", "pods"]
        .into_iter()
        .map(|r| {
            let values = nodes.iter().map(|n| {
                n.status.as_ref().unwrap().allocatable.as_ref().unwrap()[r]
                    .0
                    .as_str()
            });
            (r.to_string(), quantity::sum(values).unwrap())
        })
        .collect();
    assert_eq!(status.allocatable, expected);

    // The heartbeat is the agent's Lease in the member's hub namespace, renewed every period
    // (1 s), while the unchanged status is not written again.
    let leases: Api<Lease> = Api::namespaced(m.hub.clone(), &m.namespace);
    let renewed = |lease: &Lease| lease.spec.as_ref().and_then(|s| s.renew_time.clone());
    let first = wait_for(
        &leases,
        AGENT_LEASE,
        "the agent's Lease",
        TIMEOUT,
        |l: Option<&Lease>| l.and_then(renewed).is_some(),
    )
    .await
    .unwrap();
    assert_eq!(
        first
            .labels()
            .get("fleethub.dev/cluster")
            .map(String::as_str),
        Some(m.name.as_str())
    );
    let first = renewed(&first).unwrap();
    wait_for(
        &leases,
        AGENT_LEASE,
        "the next renewal",
        TIMEOUT,
        |l: Option<&Lease>| l.and_then(renewed).is_some_and(|t| t.0 > first.0),
    )
    .await
    .unwrap();
    let reported = members.get(&m.name).await.unwrap().status.unwrap();
    assert_eq!(
        reported.last_heartbeat_time, status.last_heartbeat_time,
        "an unchanged status is not written every heartbeat"
    );
    agent.wait_ready().await;

    drop(agent);
    m.delete().await;
}

#[tokio::test]
async fn applies_a_work_reports_available_and_deletes_removed_manifests() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::create(fleet, None).await;
    let agent = TestAgent::start(fleet, &m.name).await;
    agent.wait_ready().await;

    let app = unique_name("app");
    let placement = unique_name("web");
    let manifests = vec![
        deployment(&app, "web", 2, json!({}), "1"),
        config_map(&app, "config", json!({"greeting": "hello"})),
        config_map(&app, "extra", json!({"x": "1"})),
        namespace(&app),
    ];
    m.apply_work("web", work_spec(&placement, 2, manifests.clone()))
        .await;

    let work = m
        .wait_work("web", "Applied and Available", |w| {
            has(w, "Applied", "True", "ManifestsApplied")
                && has(w, "Available", "True", "WorkloadsAvailable")
        })
        .await;
    let status = work.status.as_ref().unwrap();
    assert_eq!(status.applied_resource_snapshot_index, Some(2));
    assert_eq!(
        condition(&work, "Applied").unwrap().message,
        "applied 4 manifests of resource snapshot 2"
    );
    let ids: Vec<(i32, &str, &str)> = status
        .manifest_conditions
        .iter()
        .map(|m| {
            (
                m.identifier.ordinal,
                m.identifier.kind.as_str(),
                m.identifier.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            (0, "Deployment", "web"),
            (1, "ConfigMap", "config"),
            (2, "ConfigMap", "extra"),
            (3, "Namespace", app.as_str())
        ]
    );
    for mc in &status.manifest_conditions {
        for c in &mc.conditions {
            assert_eq!(c.observed_generation, work.metadata.generation, "{mc:?}");
        }
    }
    assert!(
        work.finalizers()
            .iter()
            .any(|f| f == "fleethub.dev/member-agent-cleanup")
    );

    // On the member: labelled, owned by the Work's AppliedWork, which records them.
    let aw_name = m.applied_work_name("web");
    let aw = m.applied_works().get(&aw_name).await.unwrap();
    assert_eq!(
        (aw.spec.work_namespace.as_str(), aw.spec.work_name.as_str()),
        (m.namespace.as_str(), "web")
    );
    assert_eq!(aw.status.as_ref().unwrap().applied_resources.len(), 4);
    let deploy = Api::<Deployment>::namespaced(m.member.clone(), &app)
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        deploy.labels().get("fleethub.dev/placement"),
        Some(&placement)
    );
    assert_eq!(
        deploy
            .owner_references()
            .iter()
            .map(|o| (o.kind.as_str(), o.name.as_str(), o.uid.as_str()))
            .collect::<Vec<_>>(),
        [("AppliedWork", aw_name.as_str(), aw.uid().unwrap().as_str())]
    );

    // A manifest leaves the Work: its object is deleted from the member.
    let mut fewer = manifests.clone();
    fewer.remove(2);
    m.apply_work("web", work_spec(&placement, 3, fewer)).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(m.member.clone(), &app);
    wait_deleted(&config_maps, "extra", TIMEOUT).await.unwrap();
    let work = m
        .wait_work("web", "the smaller Work to be applied", |w| {
            has(w, "Applied", "True", "ManifestsApplied")
                && w.status.as_ref().unwrap().applied_resource_snapshot_index == Some(3)
        })
        .await;
    assert_eq!(work.status.unwrap().manifest_conditions.len(), 3);
    assert!(config_maps.get_opt("config").await.unwrap().is_some());

    // The Work is deleted: so is everything the agent created, then the Work itself.
    m.works()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&m.works(), "web", TIMEOUT).await.unwrap();
    assert!(m.applied_works().get_opt(&aw_name).await.unwrap().is_none());
    // Foreground deletion of the AppliedWork waited for its dependents.
    assert!(
        Api::<Namespace>::all(m.member.clone())
            .get_opt(&app)
            .await
            .unwrap()
            .is_none()
    );

    drop(agent);
    m.delete().await;
}

#[tokio::test]
async fn unready_deployment_times_out_and_a_restart_keeps_the_deadline() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::create(fleet, None).await;
    let agent = TestAgent::start(fleet, &m.name).await;
    agent.wait_ready().await;

    let app = unique_name("app");
    let mut spec = work_spec(
        &unique_name("bad"),
        5,
        vec![
            namespace(&app),
            deployment(
                &app,
                "web",
                2,
                json!({"fleethub.dev/simulate": "unready"}),
                "1",
            ),
        ],
    );
    spec["healthTimeout"] = json!("10s");
    let started = Instant::now();
    m.apply_work("bad", spec).await;

    let work = m
        .wait_work("bad", "Available=False HealthTimeout", |w| {
            has(w, "Available", "False", "HealthTimeout")
        })
        .await;
    let available = condition(&work, "Available").unwrap();
    assert!(
        available
            .message
            .contains(&format!("deployment {app}/web: 0/2 replicas ready")),
        "{}",
        available.message
    );
    assert!(available.message.contains("10s"), "{}", available.message);
    assert!(has(&work, "Applied", "True", "ManifestsApplied"));
    // Not before the deadline (recorded times have whole seconds, hence 9).
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    let applied_at = condition(&work, "Applied")
        .unwrap()
        .last_transition_time
        .clone();

    // A restarted agent re-applies but keeps the recorded apply time, so the timeout stands.
    agent.kill();
    let agent = TestAgent::start(fleet, &m.name).await;
    agent.wait_reconciled(1.0).await;
    let work = m.works().get("bad").await.unwrap();
    assert!(
        has(&work, "Available", "False", "HealthTimeout"),
        "{:?}",
        work.status
    );
    assert_eq!(
        condition(&work, "Applied").unwrap().last_transition_time,
        applied_at
    );

    m.delete_works().await;
    drop(agent);
    m.delete().await;
}

#[tokio::test]
async fn deleting_a_work_keeps_objects_the_agent_did_not_create() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::create(fleet, None).await;
    let agent = TestAgent::start(fleet, &m.name).await;
    agent.wait_ready().await;

    // Someone else's namespace and ConfigMap, there before the Work.
    let app = unique_name("app");
    m.cleanup.track::<Namespace>("member-1", None, &app);
    let someone = PatchParams::apply("someone-else");
    Api::<Namespace>::all(m.member.clone())
        .patch(&app, &someone, &Patch::Apply(namespace(&app)))
        .await
        .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(m.member.clone(), &app);
    config_maps
        .patch(
            "existing",
            &someone,
            &Patch::Apply(config_map(&app, "existing", json!({"owner": "someone"}))),
        )
        .await
        .unwrap();

    let placement = unique_name("mixed");
    let manifests = vec![
        namespace(&app),
        config_map(&app, "existing", json!({"fleet": "yes"})),
        config_map(&app, "created", json!({"fleet": "yes"})),
    ];
    m.apply_work("mixed", work_spec(&placement, 1, manifests.clone()))
        .await;
    m.wait_work("mixed", "Applied", |w| {
        has(w, "Applied", "True", "ManifestsApplied")
    })
    .await;

    let aw_name = m.applied_work_name("mixed");
    let owned_by_agent =
        |o: &ConfigMap| o.owner_references().iter().any(|r| r.kind == "AppliedWork");
    let existing = config_maps.get("existing").await.unwrap();
    assert!(!owned_by_agent(&existing), "{:?}", existing.metadata);
    assert_eq!(
        existing
            .data
            .as_ref()
            .unwrap()
            .get("fleet")
            .map(String::as_str),
        Some("yes")
    );
    assert!(owned_by_agent(&config_maps.get("created").await.unwrap()));
    let ns = Api::<Namespace>::all(m.member.clone())
        .get(&app)
        .await
        .unwrap();
    assert!(ns.owner_references().is_empty());

    // The pre-existing ConfigMap leaves the Work: it stays (the agent did not create it).
    let mut fewer = manifests.clone();
    fewer.remove(1);
    m.apply_work("mixed", work_spec(&placement, 2, fewer)).await;
    wait_for(
        &m.applied_works(),
        &aw_name,
        "the AppliedWork to record 2 objects",
        TIMEOUT,
        |aw: Option<&AppliedWork>| {
            aw.and_then(|aw| aw.status.as_ref())
                .is_some_and(|s| s.applied_resources.len() == 2)
        },
    )
    .await
    .unwrap();
    assert!(config_maps.get_opt("existing").await.unwrap().is_some());

    // The Work is deleted: what the agent created goes, what existed before stays.
    m.works()
        .delete("mixed", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&m.works(), "mixed", TIMEOUT).await.unwrap();
    assert!(config_maps.get_opt("created").await.unwrap().is_none());
    assert!(config_maps.get_opt("existing").await.unwrap().is_some());
    assert!(
        Api::<Namespace>::all(m.member.clone())
            .get_opt(&app)
            .await
            .unwrap()
            .is_some()
    );

    drop(agent);
    m.delete().await;
    let _ = Api::<Namespace>::all(m.member.clone())
        .delete(&app, &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn an_applied_work_whose_work_went_without_the_agents_clean_up_is_removed() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::create(fleet, None).await;
    let agent = TestAgent::start(fleet, &m.name).await;
    agent.wait_ready().await;
    let app = unique_name("orphan");
    m.cleanup.track::<Namespace>("member-1", None, &app);
    let placement = unique_name("orphan");
    m.apply_work(
        "orphan",
        work_spec(
            &placement,
            1,
            vec![
                namespace(&app),
                config_map(&app, "created", json!({"fleet": "yes"})),
            ],
        ),
    )
    .await;
    m.wait_work("orphan", "Applied", |w| {
        has(w, "Applied", "True", "ManifestsApplied")
    })
    .await;

    // The Work goes without the agent's clean-up: its finalizer is removed by force.
    m.works()
        .patch(
            "orphan",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    m.works()
        .delete("orphan", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&m.works(), "orphan", TIMEOUT).await.unwrap();

    // The agent's sweep finds the orphaned AppliedWork; the member's garbage collector removes
    // what it owned.
    wait_deleted(&m.applied_works(), &m.applied_work_name("orphan"), TIMEOUT)
        .await
        .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(m.member.clone(), &app);
    wait_deleted(&config_maps, "created", TIMEOUT)
        .await
        .unwrap();
    drop(agent);
    m.delete().await;
}

#[tokio::test]
async fn a_restarted_agent_converges_without_duplicates_and_sees_deletions_made_while_down() {
    let fleet = Fleet::get().unwrap();
    let m = TestMember::create(fleet, None).await;
    let agent = TestAgent::start(fleet, &m.name).await;
    agent.wait_ready().await;

    let app = unique_name("app");
    let placement = unique_name("web");
    m.apply_work(
        "web",
        work_spec(
            &placement,
            1,
            vec![
                namespace(&app),
                config_map(&app, "config", json!({"v": "1"})),
                deployment(&app, "web", 1, json!({}), "1"),
            ],
        ),
    )
    .await;
    m.wait_work("web", "Applied and Available", |w| {
        has(w, "Applied", "True", "ManifestsApplied")
            && has(w, "Available", "True", "WorkloadsAvailable")
    })
    .await;

    // The agent crashes; the Work changes meanwhile.
    agent.kill();
    m.apply_work(
        "web",
        work_spec(
            &placement,
            2,
            vec![
                namespace(&app),
                config_map(&app, "config", json!({"v": "2"})),
                config_map(&app, "more", json!({"v": "2"})),
                deployment(&app, "web", 1, json!({}), "2"),
            ],
        ),
    )
    .await;
    let agent = TestAgent::start(fleet, &m.name).await;
    let work = m
        .wait_work("web", "the new generation Applied and Available", |w| {
            has(w, "Applied", "True", "ManifestsApplied")
                && has(w, "Available", "True", "WorkloadsAvailable")
                && w.status.as_ref().unwrap().applied_resource_snapshot_index == Some(2)
        })
        .await;
    assert_eq!(work.metadata.generation, Some(2));

    // One AppliedWork, one owner reference per object, one Deployment with one live ReplicaSet.
    let aws = m
        .applied_works()
        .list(&ListParams::default().labels(&format!("{WORK_NAMESPACE_LABEL}={}", m.namespace)))
        .await
        .unwrap();
    assert_eq!(aws.items.len(), 1);
    assert_eq!(
        aws.items[0]
            .status
            .as_ref()
            .unwrap()
            .applied_resources
            .len(),
        4
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(m.member.clone(), &app);
    for name in ["config", "more"] {
        let cm = config_maps.get(name).await.unwrap();
        assert_eq!(
            cm.owner_references().len(),
            1,
            "{name}: {:?}",
            cm.metadata.owner_references
        );
        assert_eq!(cm.data.unwrap()["v"], "2");
    }
    let deploys = Api::<Deployment>::namespaced(m.member.clone(), &app)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(deploys.items.len(), 1);
    assert_eq!(deploys.items[0].owner_references().len(), 1);
    let live_replica_sets = Api::<ReplicaSet>::namespaced(m.member.clone(), &app)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|rs| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0)
        .count();
    assert_eq!(live_replica_sets, 1);

    // The Work is deleted while the agent is down: the finalizer holds it until the agent is back.
    agent.kill();
    m.works()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let pending = m.works().get("web").await.unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    let agent = TestAgent::start(fleet, &m.name).await;
    wait_deleted(&m.works(), "web", TIMEOUT).await.unwrap();
    assert!(
        Api::<Namespace>::all(m.member.clone())
            .get_opt(&app)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        m.applied_works()
            .get_opt(&m.applied_work_name("web"))
            .await
            .unwrap()
            .is_none()
    );

    drop(agent);
    m.delete().await;
}
