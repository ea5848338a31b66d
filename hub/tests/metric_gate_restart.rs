//! A hub killed (SIGKILL) in the middle of a metric gate's count neither loses the count nor
//! passes early: the count lives in the run's status, so a restarted hub continues it from
//! there, and a gate that fails while the hub is down starts its count again instead of passing
//! on passes from before the crash.
//!
//! Every write of the run's status is watched from the start, so the test sees each step of the
//! count, not just where it ends.

mod common;

use std::sync::{Arc, Mutex};

use common::{Scenario, TIMEOUT, simulate_members, succeeded};
use fleethub_crds::UpdateRun;
use fleethub_crds::conditions::is_true;
use fleethub_crds::update_run::{METRIC_CHECK_PASSED, MetricCheckResult, UpdateRunStatus};
use fleethub_testkit::{Fleet, TestGauge, poll_until, wait_for};
use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const THRESHOLD: i32 = 6;
const INTERVAL_SECS: i64 = 2;

/// One state of the gate as written to the run's status.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    passes: i32,
    result: Option<MetricCheckResult>,
    checked: Option<jiff::Timestamp>,
    passed: bool,
}

fn gate(status: Option<&UpdateRunStatus>) -> Option<Seen> {
    let task = status?
        .stages_status
        .first()?
        .after_stage_task_status
        .first()?;
    let m = task.metric_check.as_ref()?;
    Some(Seen {
        passes: m.consecutive_passes,
        result: m.last_result,
        checked: m.last_check_time.as_ref().map(|t| t.0),
        passed: is_true(&task.conditions, METRIC_CHECK_PASSED),
    })
}

fn gate_of(run: Option<&UpdateRun>) -> Option<Seen> {
    gate(run?.status.as_ref())
}

/// Records every distinct state of the gate the hub writes.
fn record(
    runs: Api<UpdateRun>,
    name: &str,
) -> (Arc<Mutex<Vec<Seen>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let log = seen.clone();
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        let mut stream = watcher(runs, cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(next) = stream.next().await {
            let Some(state) = next.ok().and_then(|r| gate_of(Some(&r))) else {
                continue;
            };
            let mut log = log.lock().unwrap();
            if log.last() != Some(&state) {
                log.push(state);
            }
        }
    });
    (seen, task)
}

/// Starts the hub again when the test ends, however it ends.
struct HubBack(&'static Fleet);

impl Drop for HubBack {
    fn drop(&mut self) {
        if let Err(e) = self.0.start_fleethub() {
            eprintln!("could not restart the fleet's hub: {e}");
        }
    }
}

/// Kills the hub and returns the gate as the dead hub left it.
async fn kill_hub(fleet: &Fleet, runs: &Api<UpdateRun>, run: &str) -> Seen {
    fleet.kill("hub").unwrap();
    gate_of(runs.get_opt(run).await.unwrap().as_ref()).unwrap()
}

async fn start_hub(fleet: &Fleet) {
    common::start_hub(fleet).await;
}

#[tokio::test]
async fn a_hub_killed_mid_count_continues_the_count_and_never_passes_early() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "mgkill").await;
    let hub = s.hub.clone();
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    let errors = TestGauge::new(
        fleet,
        "fleethub_test_errors",
        &[("run", &s.run), ("cluster", &stg)],
        0.1,
    )
    .await
    .unwrap();
    let query = r#"fleethub_test_errors{run="$run",cluster=~"$clusters"} < 0.5"#;
    let sent = format!(
        r#"fleethub_test_errors{{run="{}",cluster=~"{stg}"}} < 0.5"#,
        s.run
    );
    // Passing from the first check on, so the count only climbs until the test makes it fail.
    fleet.wait_prometheus_data(&sent, TIMEOUT).await.unwrap();
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "MetricCheck", "metricCheck": {
             "url": fleet.prometheus_url().unwrap(), "query": query,
             "interval": format!("{INTERVAL_SECS}s"), "successThreshold": THRESHOLD}}]}]))
        .await;
    let (_updates, members) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.wait_snapshot(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let (seen, recorder) = record(runs.clone(), &s.run);
    s.start_run(0).await;
    let _hub_back = HubBack(fleet);

    // Killed at two passes: the restarted hub's next check makes three, not one.
    let passes_at_least =
        |n: i32| move |r: Option<&UpdateRun>| gate_of(r).is_some_and(|g| g.passes >= n);
    wait_for(&runs, &s.run, "two passes", TIMEOUT, passes_at_least(2))
        .await
        .unwrap();
    let before = kill_hub(fleet, &runs, &s.run).await;
    let killed_at = jiff::Timestamp::now();
    assert!(
        before.passes < THRESHOLD - 1 && !before.passed,
        "the gate got too far before the kill: {before:?}"
    );
    start_hub(fleet).await;
    let after = wait_for(
        &runs,
        &s.run,
        "a pass after the restart",
        TIMEOUT,
        passes_at_least(before.passes + 1),
    )
    .await
    .unwrap();
    let after = gate_of(Some(&after)).unwrap();
    assert_eq!(
        after.passes,
        before.passes + 1,
        "{:?}",
        seen.lock().unwrap()
    );
    assert!(
        after.checked.unwrap().as_second() >= killed_at.as_second(),
        "the pass after the restart was not a new check: {after:?}"
    );

    // Killed again mid-count, and the metric fails while the hub is down: the restarted hub
    // checks, resets the count, and needs THRESHOLD new passes.
    let before = kill_hub(fleet, &runs, &s.run).await;
    let killed_again_at = jiff::Timestamp::now();
    assert!(!before.passed, "{before:?}");
    errors.set(1.0).await.unwrap();
    fleet
        .wait_prometheus(&sent, TIMEOUT, |r| r.is_empty())
        .await
        .unwrap();
    start_hub(fleet).await;
    wait_for(
        &runs,
        &s.run,
        "the failing check after the restart",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            gate_of(r).is_some_and(|g| g.result == Some(MetricCheckResult::NoData))
        },
    )
    .await
    .unwrap();
    errors.set(0.1).await.unwrap();
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    // The recorder's watch may trail the wait's: let it see the gate open.
    poll_until("the recorder to see the gate open", TIMEOUT, || async {
        seen.lock().unwrap().iter().any(|g| g.passed).then_some(())
    })
    .await
    .unwrap();
    recorder.abort();
    members.abort();

    let seen = seen.lock().unwrap().clone();
    let history = format!("{seen:#?}");
    // Every step of the count: one more pass (by a later check), or back to zero on a failure.
    for pair in seen.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.passes == b.passes {
            continue;
        }
        if b.passes == 0 {
            assert_eq!(b.result, Some(MetricCheckResult::NoData), "{history}");
        } else {
            assert_eq!(b.passes, a.passes + 1, "the count jumped: {history}");
            if let (Some(earlier), Some(later)) = (a.checked, b.checked) {
                let gap = later.as_second() - earlier.as_second();
                assert!(gap >= INTERVAL_SECS, "checks {gap}s apart: {history}");
            }
        }
    }
    // The first check of the hub restarted the second time failed and reset the count; nothing
    // passed in between.
    let reset_from = seen
        .iter()
        .position(|g| {
            g.checked
                .is_some_and(|t| t.as_second() > killed_again_at.as_second())
        })
        .unwrap();
    assert_eq!(
        (seen[reset_from].passes, seen[reset_from].result),
        (0, Some(MetricCheckResult::NoData)),
        "{history}"
    );
    // The gate opened on the THRESHOLD-th consecutive pass after the reset, and only then.
    let opened = seen.iter().position(|g| g.passed).unwrap();
    assert!(opened > reset_from, "{history}");
    assert_eq!(seen[opened].passes, THRESHOLD, "{history}");
    assert!(
        seen[reset_from..opened].iter().all(|g| !g.passed),
        "{history}"
    );
    let stage_done = runs
        .get(&s.run)
        .await
        .unwrap()
        .status
        .unwrap()
        .stages_status[0]
        .end_time
        .clone()
        .unwrap();
    assert!(stage_done.0 >= seen[opened].checked.unwrap(), "{history}");
}
