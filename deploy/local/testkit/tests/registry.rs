//! The local fleet's registry and simulated unready images: tags pushed with the test kit are
//! served by the real registry and go away with the repository guard; pods running an image
//! the fleet simulates as unready stay unready on every member while pods of another image get
//! Ready, and become Ready when the simulation is cleared.

use std::time::Duration;

use fleethub_testkit::{Cleanup, Fleet, http_get, unique_name, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn tags(fleet: &Fleet, repository: &str) -> Vec<String> {
    let addr = fleet.registry().unwrap().parse().unwrap();
    let (status, body) = http_get(addr, &format!("/v2/{repository}/tags/list"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut tags: Vec<String> = serde_json::from_value(body["tags"].clone()).unwrap_or_default();
    tags.sort();
    tags
}

#[tokio::test]
async fn pushed_tags_are_served_by_the_registry_until_the_guard_deletes_them() {
    let fleet = Fleet::get().unwrap();
    let name;
    {
        let repo = fleet.registry_repo("testkit").unwrap();
        name = repo.name().to_string();
        assert_eq!(
            repo.image("1.0.0"),
            format!("{}/{name}:1.0.0", fleet.registry().unwrap())
        );
        repo.push(&["1.0.0", "1.1.0", "latest"]).unwrap();
        assert_eq!(tags(fleet, &name).await, ["1.0.0", "1.1.0", "latest"]);
    }
    assert!(tags(fleet, &name).await.is_empty());
}

async fn namespace(client: &Client, cleanup: &Cleanup, cluster: &str) -> String {
    let name = unique_name("t");
    cleanup.track::<Namespace>(cluster, None, &name);
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    name
}

fn deployment(name: &str, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 10,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            }
        }
    }))
    .unwrap()
}

fn progress(d: &Deployment) -> Option<String> {
    let c = d.status.as_ref()?.conditions.as_ref()?;
    c.iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| format!("{}/{}", c.status, c.reason.clone().unwrap_or_default()))
}

fn ready(d: &Deployment) -> i32 {
    d.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

#[tokio::test]
async fn pods_of_an_unready_image_stay_unready_on_every_member_until_cleared() {
    let fleet = Fleet::get().unwrap();
    let cleanup = Cleanup::new(fleet);
    let id = unique_name("img");
    let bad = format!("registry.invalid/{id}:bad");
    let good = format!("registry.invalid/{id}:good");
    let unready = fleet.simulate_unready(&bad).unwrap();

    let mut apis = Vec::new();
    let mut pods = Vec::new();
    for i in 1..=fleet.member_count() {
        let member = fleet.member(i).await.unwrap();
        let ns = namespace(&member, &cleanup, &format!("member-{i}")).await;
        let api: Api<Deployment> = Api::namespaced(member.clone(), &ns);
        for (name, image) in [("bad", &bad), ("good", &good)] {
            api.create(&PostParams::default(), &deployment(name, image))
                .await
                .unwrap();
        }
        apis.push(api);
        pods.push(Api::<Pod>::namespaced(member, &ns));
    }
    for api in &apis {
        wait_for(
            api,
            "good",
            "good to be ready",
            TIMEOUT,
            |d: Option<&Deployment>| d.is_some_and(|d| ready(d) == 2),
        )
        .await
        .unwrap();
        // The progress deadline passing shows the pods stayed unready all along.
        let stuck = wait_for(
            api,
            "bad",
            "bad to exceed its deadline",
            TIMEOUT,
            |d: Option<&Deployment>| {
                d.is_some_and(|d| progress(d).as_deref() == Some("False/ProgressDeadlineExceeded"))
            },
        )
        .await
        .unwrap();
        assert_eq!(ready(&stuck), 0);
        assert_eq!(stuck.status.unwrap().replicas, Some(2));
    }

    drop(unready);
    for (i, (api, pods)) in apis.iter().zip(&pods).enumerate() {
        let cleared = wait_for(
            api,
            "bad",
            "bad to be ready once cleared",
            TIMEOUT,
            |d: Option<&Deployment>| d.is_some_and(|d| ready(d) == 2),
        )
        .await;
        if let Err(e) = cleared {
            // What kwok did is the question then: the pods' states and its log say.
            let member = i + 1;
            panic!(
                "member-{member}: {e}\npods: {}\nmember-{member}-kwok log, last lines:\n{}",
                pod_states(pods).await,
                log_tail(fleet, &format!("member-{member}-kwok"), 20)
            );
        }
    }
}

/// Each pod's node, phase and Ready condition, for a failure message.
async fn pod_states(pods: &Api<Pod>) -> String {
    let list = match pods.list(&Default::default()).await {
        Ok(list) => list,
        Err(e) => return format!("cannot list them: {e}"),
    };
    let state = |p: &Pod| {
        let spec = p.spec.as_ref();
        let status = p.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| format!("{} since {:?}", c.status, c.last_transition_time));
        format!(
            "{} on {}: {}, Ready {}",
            p.metadata.name.as_deref().unwrap_or_default(),
            spec.and_then(|s| s.node_name.as_deref())
                .unwrap_or("no node"),
            status
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("no phase"),
            ready.as_deref().unwrap_or("unset")
        )
    };
    list.items.iter().map(state).collect::<Vec<_>>().join("; ")
}

/// The last `lines` lines of the fleet component `name`'s log.
fn log_tail(fleet: &Fleet, name: &str, lines: usize) -> String {
    let path = fleet.dir().join(format!("logs/{name}.log"));
    match std::fs::read_to_string(&path) {
        Ok(log) => {
            let all: Vec<&str> = log.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("cannot read {}: {e}", path.display()),
    }
}
