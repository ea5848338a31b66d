//! `kubectl fleet join|unjoin` against the real fleet: new members join one of the fleet's
//! member clusters with their own scoped hub credential, a real `fleethub-member-agent` process
//! reports them Joined and applies a rollout, and unjoin removes the workload, the member's hub
//! namespace and identity, and the agent's objects, leaving nothing behind.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{Scenario, TIMEOUT};
use fleethub_crds::applied_work::{AppliedWork, applied_work_name};
use fleethub_crds::conditions::is_true;
use fleethub_crds::{MemberCluster, Work, names};
use fleethub_testkit::{Cleanup, Fleet, poll_until, wait_deleted, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::{
    AgentProcess, kubectl, plugin, plugin_err, plugin_ok, plugin_spawn, scratch, wait_exit,
};

fn joined(m: Option<&MemberCluster>) -> bool {
    m.and_then(|m| m.status.as_ref())
        .is_some_and(|s| is_true(&s.conditions, "Joined"))
}

/// A guard for a member `name` joined by a test: its MemberCluster and hub namespace, and what
/// join installs in member cluster `member_index` unless it was there before the test.
async fn join_cleanup(fleet: &Fleet, member: &Client, member_index: usize, name: &str) -> Cleanup {
    let cleanup = Cleanup::new(fleet);
    cleanup.track::<Namespace>("hub", None, &names::member_namespace(name));
    cleanup.track::<MemberCluster>("hub", None, name);
    let cluster = format!("member-{member_index}");
    let agent_objects = "fleethub-member-agent";
    if Api::<Namespace>::all(member.clone())
        .get_opt("fleethub-system")
        .await
        .unwrap()
        .is_none()
    {
        cleanup.track::<Namespace>(&cluster, None, "fleethub-system");
    }
    if Api::<ClusterRole>::all(member.clone())
        .get_opt(agent_objects)
        .await
        .unwrap()
        .is_none()
    {
        cleanup.track::<ClusterRole>(&cluster, None, agent_objects);
    }
    if Api::<ClusterRoleBinding>::all(member.clone())
        .get_opt(agent_objects)
        .await
        .unwrap()
        .is_none()
    {
        cleanup.track::<ClusterRoleBinding>(&cluster, None, agent_objects);
    }
    cleanup
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A ConfigMap rolled out to `member` by a RollingUpdate placement; returns the scenario (its
/// app namespace holds ConfigMap `web`) once the member cluster has it.
async fn roll_out_to(
    fleet: &Fleet,
    member_client: &Client,
    member_index: usize,
    member: &str,
) -> Scenario {
    let s = Scenario::new(fleet, "kfj").await;
    // The member's agent may be gone when the scenario is cleaned up: its Work's finalizer then
    // goes, and deleting the AppliedWork removes the workload from the member cluster.
    s.cleanup.track_forced::<AppliedWork>(
        &format!("member-{member_index}"),
        None,
        &applied_work_name(
            &names::member_namespace(member),
            &names::work_name(&s.placement),
        ),
    );
    s.cleanup.track_forced::<Work>(
        "hub",
        Some(&names::member_namespace(member)),
        &names::work_name(&s.placement),
    );
    s.placement(&[&member.to_string()], true).await;
    let cms: Api<ConfigMap> = Api::namespaced(member_client.clone(), &s.app_namespace());
    wait_for(
        &cms,
        "web",
        "the agent to apply the rollout in the member",
        TIMEOUT,
        |c: Option<&ConfigMap>| c.is_some(),
    )
    .await
    .unwrap();
    s
}

/// A kubeconfig for the member cluster whose user is the installed agent's ServiceAccount
/// (`fleethub-system/fleethub-member-agent`), so the agent runs with exactly the RBAC of
/// `deploy/member-agent`.
async fn member_sa_kubeconfig(fleet: &Fleet, member: &Client, member_index: usize, out: &Path) {
    let secrets: Api<Secret> = Api::namespaced(member.clone(), "fleethub-system");
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "test-agent-token", "annotations": {"kubernetes.io/service-account.name": "fleethub-member-agent"}},
        "type": "kubernetes.io/service-account-token"});
    secrets
        .patch(
            "test-agent-token",
            &PatchParams::apply("test"),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
    let secret = wait_for(
        &secrets,
        "test-agent-token",
        "the member SA token",
        TIMEOUT,
        |s: Option<&Secret>| {
            s.and_then(|s| s.data.as_ref())
                .is_some_and(|d| d.contains_key("token"))
        },
    )
    .await
    .unwrap();
    let token = String::from_utf8(secret.data.unwrap()["token"].0.clone()).unwrap();
    let admin =
        std::fs::read_to_string(fleet.kubeconfig(&format!("member-{member_index}"))).unwrap();
    let mut kc: serde_norway::Value = serde_norway::from_str(&admin).unwrap();
    kc["users"] =
        serde_norway::from_str(&format!("[{{name: agent, user: {{token: {token}}}}}]")).unwrap();
    kc["contexts"][0]["context"]["user"] = "agent".into();
    std::fs::write(out, serde_norway::to_string(&kc).unwrap()).unwrap();
}

#[tokio::test]
async fn join_installs_the_agent_and_unjoin_removes_everything() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let member_index = fleet.member_count(); // the last member cluster hosts the new member
    let member_kc = fleet.kubeconfig(&format!("member-{member_index}"));
    let member = fleet.member(member_index).await.unwrap();
    let name = fleethub_testkit::unique_name("joined");
    let dir = scratch(fleet, &name);
    let _cleanup = join_cleanup(fleet, &member, member_index, &name).await;

    // join waits for Joined=True; start it, then play the kubelet: run the agent it installed.
    let join = plugin_spawn(
        fleet,
        &[
            "join",
            &name,
            "--member-kubeconfig",
            path(&member_kc),
            "-l",
            "env=kf-test",
            "--heartbeat-period",
            "5",
            "--agent-image",
            "example.invalid/agent:test",
            "--timeout",
            "2m",
        ],
    );
    let secrets: Api<Secret> = Api::namespaced(member.clone(), "fleethub-system");
    let hub_secret = wait_for(
        &secrets,
        "fleethub-member-agent-hub",
        "the agent's hub Secret in the member",
        TIMEOUT,
        |s: Option<&Secret>| s.is_some(),
    )
    .await
    .unwrap();
    let data = hub_secret.data.unwrap();
    assert_eq!(String::from_utf8_lossy(&data["member-name"].0), name);
    let agent_hub_kc = dir.join("agent-hub.kubeconfig");
    std::fs::write(&agent_hub_kc, &data["kubeconfig"].0).unwrap();

    // The base's objects exist in the member, applied server-side by kubectl-fleet.
    let deployments: Api<Deployment> = Api::namespaced(member.clone(), "fleethub-system");
    let deploy = wait_for(
        &deployments,
        "fleethub-member-agent",
        "the agent Deployment",
        TIMEOUT,
        |d: Option<&Deployment>| d.is_some(),
    )
    .await
    .unwrap();
    let pod = deploy.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("example.invalid/agent:test")
    );
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("fleethub-member-agent")
    );
    assert!(
        deploy
            .metadata
            .managed_fields
            .unwrap()
            .iter()
            .any(|f| f.manager.as_deref() == Some("kubectl-fleet")
                && f.operation.as_deref() == Some("Apply"))
    );
    Api::<ServiceAccount>::namespaced(member.clone(), "fleethub-system")
        .get("fleethub-member-agent")
        .await
        .unwrap();
    Api::<ClusterRole>::all(member.clone())
        .get("fleethub-member-agent")
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(member.clone())
        .get("fleethub-member-agent")
        .await
        .unwrap();

    // The hub side: the MemberCluster with its labels and heartbeat period.
    let members: Api<MemberCluster> = Api::all(hub.clone());
    let mc = members.get(&name).await.unwrap();
    assert_eq!(mc.labels().get("env").map(String::as_str), Some("kf-test"));
    assert_eq!(mc.spec.heartbeat_period_seconds, Some(5));

    // The agent, as the installed Deployment would run it: the hub kubeconfig from the Secret,
    // the member as the installed ServiceAccount.
    let member_sa_kc = dir.join("member-sa.kubeconfig");
    member_sa_kubeconfig(fleet, &member, member_index, &member_sa_kc).await;
    let mut agent =
        AgentProcess::start(&name, &agent_hub_kc, &member_sa_kc, &dir.join("agent.log"));
    let out = wait_exit(
        join,
        "join to see the member Joined",
        Duration::from_secs(150),
    )
    .await;
    assert!(
        out.status.success(),
        "join failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("membercluster {name} joined the fleet"))
    );

    // The agent's scoped credential and the base's RBAC are enough to roll a workload out.
    let s = roll_out_to(fleet, &member, member_index, &name).await;

    // join again: idempotent, the same credential. A running agent rewrites its status only
    // every few minutes (its Lease is the heartbeat): first let the last status write age past
    // what the re-join accepts, so the re-join has to see the agent some other way.
    poll_until(
        "the agent's last status write to be 3 s old",
        TIMEOUT,
        || async {
            let m = members.get(&name).await.ok()?;
            let at = m.status?.last_heartbeat_time?.0;
            (jiff::Timestamp::now().duration_since(at) >= jiff::SignedDuration::from_secs(3))
                .then_some(())
        },
    )
    .await
    .unwrap();
    let out = plugin_ok(
        fleet,
        &[
            "join",
            &name,
            "--member-kubeconfig",
            path(&member_kc),
            "-l",
            "env=kf-test",
            "--heartbeat-period",
            "5",
            "--agent-image",
            "example.invalid/agent:test",
            "--timeout",
            "1m",
        ],
    );
    assert!(out.contains("joined the fleet"), "{out}");
    let again = secrets.get("fleethub-member-agent-hub").await.unwrap();
    assert_eq!(
        again.data.unwrap()["kubeconfig"].0,
        data["kubeconfig"].0,
        "a re-join reuses the credential"
    );

    // unjoin: the agent removes the workload, then the hub namespace goes, then the agent.
    let out = plugin(
        fleet,
        &[
            "unjoin",
            &name,
            "--member-kubeconfig",
            path(&member_kc),
            "--timeout",
            "2m",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "unjoin failed: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("membercluster {name} left the fleet"))
    );
    agent.kill();
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), &s.app_namespace());
    assert!(
        cms.get_opt("web").await.unwrap().is_none(),
        "the agent removed the workload first"
    );
    assert!(members.get_opt(&name).await.unwrap().is_none());
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    assert!(
        namespaces
            .get_opt(&names::member_namespace(&name))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ClusterRole>::all(hub.clone())
            .get_opt(&format!("fleethub:member:{name}"))
            .await
            .unwrap()
            .is_none()
    );
    let member_namespaces: Api<Namespace> = Api::all(member.clone());
    assert!(
        member_namespaces
            .get_opt("fleethub-system")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ClusterRole>::all(member.clone())
            .get_opt("fleethub-member-agent")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ClusterRoleBinding>::all(member.clone())
            .get_opt("fleethub-member-agent")
            .await
            .unwrap()
            .is_none()
    );
    // The fleet's own agent on this member still has AppliedWorks: their CRD stays.
    assert!(
        stderr.contains("kept CustomResourceDefinition appliedworks.fleethub.dev")
            || stderr.contains("agent removed"),
        "{stderr}"
    );

    // unjoin of a member that is gone: still succeeds, says so.
    let out = plugin_ok(fleet, &["unjoin", &name, "--timeout", "30s"]);
    assert!(out.contains("left the fleet"), "{out}");
}

#[tokio::test]
async fn join_without_agent_for_a_process_agent_and_force_unjoin_when_it_is_gone() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let member_index = 1;
    let member_kc = fleet.kubeconfig("member-1");
    let member = fleet.member(member_index).await.unwrap();
    let name = fleethub_testkit::unique_name("joinedp");
    let dir = scratch(fleet, &name);
    let _cleanup = join_cleanup(fleet, &member, member_index, &name).await;
    let agent_hub_kc = dir.join("agent-hub.kubeconfig");

    // What the local fleet does for its members.
    let out = plugin_ok(
        fleet,
        &[
            "join",
            &name,
            "--no-install-agent",
            "--write-agent-kubeconfig",
            path(&agent_hub_kc),
            "--label",
            "fleethub.dev/local-fleet=false",
            "--heartbeat-period",
            "5",
        ],
    );
    assert!(out.is_empty(), "progress goes to stderr: {out}");
    let mode = std::fs::metadata(&agent_hub_kc)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the credential is private");
    let written = std::fs::read_to_string(&agent_hub_kc).unwrap();
    assert!(written.contains("token:"), "{written}");
    // Nothing was installed in any member.
    assert!(
        Api::<Namespace>::all(member.clone())
            .get_opt("fleethub-system")
            .await
            .unwrap()
            .is_none()
    );

    // The credential is the member's own: it reads its MemberCluster but not another's.
    let mut agent = AgentProcess::start(&name, &agent_hub_kc, &member_kc, &dir.join("agent.log"));
    let members: Api<MemberCluster> = Api::all(hub.clone());
    wait_for(
        &members,
        &name,
        "the process agent to join",
        TIMEOUT,
        joined,
    )
    .await
    .unwrap();
    let out = kubectl(&[
        "--kubeconfig",
        path(&agent_hub_kc),
        "get",
        "membercluster",
        "member-1",
    ]);
    assert!(
        !out.status.success(),
        "the agent's credential must not read other members"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Re-join: the same credential.
    plugin_ok(
        fleet,
        &[
            "join",
            &name,
            "--no-install-agent",
            "--write-agent-kubeconfig",
            path(&agent_hub_kc),
            "--label",
            "fleethub.dev/local-fleet=false",
            "--heartbeat-period",
            "5",
        ],
    );
    assert_eq!(std::fs::read_to_string(&agent_hub_kc).unwrap(), written);

    // A workload on the member, its Work carrying the agent's finalizer; then the agent is gone.
    let s = roll_out_to(fleet, &member, member_index, &name).await;
    let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace(&name));
    let work = works.get(&s.placement).await.unwrap();
    assert!(
        work.finalizers()
            .iter()
            .any(|f| f == "fleethub.dev/member-agent-cleanup")
    );
    agent.kill();

    // Without --force, unjoin refuses to abandon the workload, and says what to do.
    let err = plugin_err(fleet, &["unjoin", &name, "--timeout", "5s"]);
    assert!(
        err.contains(&format!(
            "Works {} in {}",
            s.placement,
            names::member_namespace(&name)
        )),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert!(
        members
            .get(&name)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    // A member being removed cannot be joined again.
    let err = plugin_err(
        fleet,
        &[
            "join",
            &name,
            "--no-install-agent",
            "--write-agent-kubeconfig",
            path(&agent_hub_kc),
        ],
    );
    assert!(err.contains("is being removed"), "{err}");

    // --force removes the finalizer, says the workload stays, and finishes the job.
    let out = plugin(fleet, &["unjoin", &name, "--force", "--timeout", "2m"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("NOT removed from the member"), "{stderr}");
    wait_deleted(&members, &name, TIMEOUT).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    assert!(
        namespaces
            .get_opt(&names::member_namespace(&name))
            .await
            .unwrap()
            .is_none()
    );
    // What the abandoned Work deployed is still on the member, as the message said.
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), &s.app_namespace());
    assert!(cms.get_opt("web").await.unwrap().is_some());
    // The test cleans up what it abandoned: deleting the AppliedWork deletes what it owns.
    let applied: Api<AppliedWork> = Api::all(member.clone());
    let name = applied_work_name(&names::member_namespace(&name), &s.placement);
    applied
        .delete(&name, &kube::api::DeleteParams::foreground())
        .await
        .unwrap();
    wait_deleted(&applied, &name, TIMEOUT).await.unwrap();
}

#[tokio::test]
async fn the_kustomize_base_passes_a_server_side_dry_run() {
    let fleet = Fleet::get().unwrap();
    let base = fleethub_testkit::repo_root().join("deploy/member-agent");
    let kc = fleet.kubeconfig("member-2");
    let built = kubectl(&["kustomize", path(&base)]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let text = String::from_utf8_lossy(&built.stdout);
    assert!(
        text.contains("image: fleethub-member-agent:0.1.0"),
        "{text}"
    );
    // Namespaced objects need their namespace to exist even for a dry run: the test makes it,
    // and removes it again.
    let member = fleet.member(2).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(member.clone());
    let existed = namespaces
        .get_opt("fleethub-system")
        .await
        .unwrap()
        .is_some();
    let cleanup = Cleanup::new(fleet);
    if !existed {
        cleanup.track::<Namespace>("member-2", None, "fleethub-system");
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleethub-system"}});
        namespaces
            .patch(
                "fleethub-system",
                &PatchParams::apply("test"),
                &Patch::Apply(&ns),
            )
            .await
            .unwrap();
    }
    let out = kubectl(&[
        "--kubeconfig",
        path(&kc),
        "apply",
        "-k",
        path(&base),
        "--dry-run=server",
        "--server-side",
        "--field-manager=kubectl-fleet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !existed {
        namespaces
            .delete("fleethub-system", &Default::default())
            .await
            .unwrap();
        wait_deleted(&namespaces, "fleethub-system", TIMEOUT)
            .await
            .unwrap();
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for obj in [
        "namespace/fleethub-system",
        "serviceaccount/fleethub-member-agent",
        "clusterrole.rbac.authorization.k8s.io/fleethub-member-agent",
        "clusterrolebinding.rbac.authorization.k8s.io/fleethub-member-agent",
        "deployment.apps/fleethub-member-agent",
    ] {
        assert!(stdout.contains(obj), "{obj} missing from:\n{stdout}");
    }
    // Nothing was created.
    assert!(
        Api::<ClusterRole>::all(member)
            .get_opt("fleethub-member-agent")
            .await
            .unwrap()
            .is_none()
    );
}
