//! `metricCheck.secretRef` on the real hub against a real Prometheus that wants basic auth
//! (`--web.config.file`), started by the test: a Secret that does not exist holds the gate with
//! a message naming it, wrong credentials are refused by Prometheus (so the gate still waits),
//! and once the Secret holds the right ones the gate passes: the hub sends them.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use common::{HUB_NAMESPACE, Scenario, TIMEOUT, simulate_members, succeeded};
use fleethub_crds::UpdateRun;
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::{METRIC_CHECK_PASSED, reason};
use fleethub_testkit::{free_port, http_get, poll_until, unique_name, wait_for};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const USER: &str = "fleet";
const PASSWORD: &str = "fleethub-test-password";
/// bcrypt of PASSWORD (cost 4: Prometheus checks it at every request), made with
/// `python3 -c "import crypt; print(crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH)))"`.
const PASSWORD_BCRYPT: &str = "$2b$04$m49pTzeYfbr1G6klrW2U3.Q67mjsmoY19Wnn4/7TR1Ku.jk3Q11lG";

/// A Prometheus of the test's own that answers only with basic auth; stopped and its files
/// removed when dropped.
struct GuardedPrometheus {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl GuardedPrometheus {
    async fn start() -> Self {
        let dir = std::env::temp_dir().join(unique_name("fleethub-auth-prometheus"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            "global: {scrape_interval: 15s}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("web.yml"),
            format!("basic_auth_users:\n  {USER}: '{PASSWORD_BCRYPT}'\n"),
        )
        .unwrap();
        let port = free_port().unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--web.config.file={}",
                dir.join("web.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian's package) on PATH, as deploy/local/fleet needs it");
        let p = GuardedPrometheus {
            child,
            dir,
            url: format!("http://127.0.0.1:{port}"),
        };
        let addr = ([127, 0, 0, 1], port).into();
        // Without credentials it answers 401 once it serves.
        poll_until("the test's Prometheus to serve", TIMEOUT, || async {
            let (code, _) = http_get(addr, "/api/v1/query?query=vector(1)").await.ok()?;
            (code == 401).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", p.log()));
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for GuardedPrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The gate's MetricCheckPassed condition: (reason, message).
fn gate(run: Option<&UpdateRun>) -> Option<(String, String)> {
    let task = run?
        .status
        .as_ref()?
        .stages_status
        .first()?
        .after_stage_task_status
        .first()?;
    let c = find(&task.conditions, METRIC_CHECK_PASSED)?;
    Some((c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_metric_check_sends_the_credentials_of_its_secret() {
    let fleet = fleethub_testkit::Fleet::get().unwrap();
    let prometheus = GuardedPrometheus::start().await;
    let s = Scenario::new(fleet, "mgauth").await;
    let hub = s.hub.clone();
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    let secret = format!("prometheus-{}", s.id);
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "MetricCheck", "metricCheck": {
             "url": prometheus.url, "query": "vector(1)", "interval": "1s",
             "secretRef": {"name": secret}}}]}]))
        .await;
    let (_updates, members) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.wait_snapshot(0).await;
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());

    // No Secret yet: the gate waits, naming it.
    let named = format!("Secret {HUB_NAMESPACE}/{secret}");
    let run = wait_for(
        &runs,
        &s.run,
        "the gate to report the missing Secret",
        TIMEOUT,
        |r: Option<&UpdateRun>| gate(r).is_some_and(|(_, m)| m.contains("not found")),
    )
    .await
    .unwrap();
    let (why, message) = gate(Some(&run)).unwrap();
    assert_eq!(why, reason::METRIC_CHECK_FAILING, "{message}");
    assert!(message.contains(&named), "{message}");

    // Wrong password: Prometheus refuses it, the gate still waits.
    s.hub_secret(&secret, &[("username", USER), ("password", "wrong")])
        .await;
    wait_for(
        &runs,
        &s.run,
        "the gate to report Prometheus' refusal",
        TIMEOUT,
        |r: Option<&UpdateRun>| gate(r).is_some_and(|(_, m)| m.contains("HTTP 401")),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; Prometheus log:\n{}", prometheus.log()));
    assert!(!succeeded(runs.get_opt(&s.run).await.unwrap().as_ref()));

    // The right password, from the next check on (the hub reads the Secret at every check).
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), HUB_NAMESPACE);
    secrets
        .patch(
            &secret,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": PASSWORD}})),
        )
        .await
        .unwrap();
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap_or_else(|e| panic!("{e}; Prometheus log:\n{}", prometheus.log()));
    let (why, message) = gate(runs.get_opt(&s.run).await.unwrap().as_ref()).unwrap();
    assert_eq!(why, reason::METRIC_CHECK_SUCCEEDED, "{message}");
    members.abort();
}
