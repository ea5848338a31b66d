//! Membership on the real hub: a MemberCluster gets its namespace and an agent identity that can
//! reach only its own Works and status (RBAC, checked by impersonation); its health follows its
//! heartbeat (its Lease, or its status from agents older than Leases); deleting it cleans up.

use std::time::Duration;

use fleethub_crds::MemberCluster;
use fleethub_crds::conditions::find;
use fleethub_crds::member_cluster::{AGENT_LEASE, MemberClusterSpec, agent_lease};
use fleethub_crds::{Work, names};
use fleethub_testkit::{Cleanup, Fleet, unique_name, wait_deleted, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

fn healthy(reason: &'static str) -> impl Fn(Option<&MemberCluster>) -> bool {
    move |m: Option<&MemberCluster>| {
        m.and_then(|m| m.status.as_ref())
            .and_then(|s| find(&s.conditions, "Healthy"))
            .is_some_and(|c| c.reason == reason)
    }
}

async fn agent_client(fleet: &Fleet, member: &str) -> Client {
    let ns = names::member_namespace(member);
    fleet
        .hub_as(
            &format!("system:serviceaccount:{ns}:member-agent"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{ns}"),
                "system:authenticated",
            ],
        )
        .await
        .unwrap()
}

fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>, what: &str) {
    match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

async fn heartbeat(api: &Api<MemberCluster>, name: &str) -> Result<MemberCluster, kube::Error> {
    let patch = json!({"status": {"lastHeartbeatTime": jiff::Timestamp::now().to_string()}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

#[tokio::test]
async fn a_member_gets_an_isolated_identity_health_and_clean_up() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let members: Api<MemberCluster> = Api::all(hub.clone());
    let (a, b) = (unique_name("ma"), unique_name("mb"));
    let cleanup = Cleanup::new(fleet);
    for name in [&a, &b] {
        cleanup.track::<Namespace>("hub", None, &names::member_namespace(name));
        cleanup.track::<MemberCluster>("hub", None, name);
        let m = MemberCluster::new(
            name,
            MemberClusterSpec {
                heartbeat_period_seconds: Some(1),
            },
        );
        members.create(&PostParams::default(), &m).await.unwrap();
    }
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    for name in [&a, &b] {
        let sas: Api<ServiceAccount> = Api::namespaced(hub.clone(), &names::member_namespace(name));
        wait_for(
            &sas,
            "member-agent",
            "the member agent's ServiceAccount",
            TIMEOUT,
            |s: Option<&ServiceAccount>| s.is_some(),
        )
        .await
        .unwrap();
    }

    // No heartbeat yet: unknown. One heartbeat: healthy. Then silence: unhealthy after 3 periods.
    wait_for(
        &members,
        &a,
        "Healthy=Unknown",
        TIMEOUT,
        healthy("AgentNotJoined"),
    )
    .await
    .unwrap();
    let agent_a = agent_client(fleet, &a).await;
    let as_a: Api<MemberCluster> = Api::all(agent_a.clone());
    heartbeat(&as_a, &a)
        .await
        .expect("the agent may write its own MemberCluster status");
    wait_for(
        &members,
        &a,
        "Healthy=True",
        TIMEOUT,
        healthy("HeartbeatFresh"),
    )
    .await
    .unwrap();
    let stale = wait_for(
        &members,
        &a,
        "Healthy=False",
        TIMEOUT,
        healthy("HeartbeatStale"),
    )
    .await
    .unwrap();
    let c = find(&stale.status.unwrap().conditions, "Healthy")
        .unwrap()
        .clone();
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("expected every 1s; unhealthy after 3s"),
        "{}",
        c.message
    );

    // A renewal of the agent's Lease alone is a heartbeat: the member comes back without a
    // status write, and goes stale again when the renewals stop.
    let own_leases: Api<Lease> = Api::namespaced(agent_a.clone(), &names::member_namespace(&a));
    let period = Duration::from_secs(1);
    let lease = agent_lease(None, &a, "test", period, jiff::Timestamp::now());
    let lease = own_leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("the agent may create its Lease");
    wait_for(
        &members,
        &a,
        "Healthy=True from the Lease",
        TIMEOUT,
        healthy("HeartbeatFresh"),
    )
    .await
    .unwrap();
    let lease = agent_lease(Some(lease), &a, "test", period, jiff::Timestamp::now());
    own_leases
        .replace(AGENT_LEASE, &PostParams::default(), &lease)
        .await
        .expect("the agent may renew its Lease");
    wait_for(
        &members,
        &a,
        "Healthy=False after the renewals stop",
        TIMEOUT,
        healthy("HeartbeatStale"),
    )
    .await
    .unwrap();
    let other_leases: Api<Lease> = Api::namespaced(agent_a.clone(), &names::member_namespace(&b));
    let forged = agent_lease(None, &b, "test", period, jiff::Timestamp::now());
    forbidden(
        other_leases.create(&PostParams::default(), &forged).await,
        "creating member b's Lease",
    );
    forbidden(
        own_leases.get("fleethub-hub").await,
        "reading another Lease of its own namespace",
    );

    // Isolation: a's agent reaches its own Works and status, nothing of b's.
    let own_works: Api<Work> = Api::namespaced(agent_a.clone(), &names::member_namespace(&a));
    own_works
        .list(&ListParams::default())
        .await
        .expect("own Works are readable");
    let other_works: Api<Work> = Api::namespaced(agent_a.clone(), &names::member_namespace(&b));
    forbidden(
        other_works.list(&ListParams::default()).await,
        "listing member b's Works",
    );
    forbidden(other_works.get("web").await, "reading member b's Work");
    forbidden(heartbeat(&as_a, &b).await, "writing member b's status");
    forbidden(as_a.get(&b).await, "reading member b's MemberCluster");
    forbidden(
        as_a.delete(&a, &Default::default()).await,
        "deleting its own MemberCluster",
    );
    let work = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Work", "metadata": {"name": "forged"},
                      "spec": {"placementName": "web", "resourceSnapshotIndex": 0, "workload": {"manifests": []}}});
    forbidden(
        own_works
            .create(
                &PostParams::default(),
                &serde_json::from_value(work).unwrap(),
            )
            .await,
        "creating a Work",
    );

    // Deleting the MemberCluster removes what was provisioned for it.
    members.delete(&a, &Default::default()).await.unwrap();
    wait_deleted(&namespaces, &names::member_namespace(&a), TIMEOUT)
        .await
        .unwrap();
    let roles: Api<ClusterRole> = Api::all(hub.clone());
    wait_deleted(&roles, &format!("fleethub:member:{a}"), TIMEOUT)
        .await
        .unwrap();
    members.delete(&b, &Default::default()).await.unwrap();
}
