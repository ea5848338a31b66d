//! Phased StatefulSet rollouts on a real member (`member-1`: its own API server, controller
//! manager and kwok nodes, the fleet's real member agent): a 5-replica StatefulSet rolled a pod
//! at a time by the real StatefulSet controller, the partition lowered by the agent only after a
//! metric (a gauge of the fleet's test exporter, scraped by the fleet's real Prometheus) passed
//! twice in a row; paused while the metric fails and resumed when it recovers; `OnDelete`
//! refused; `standardRollingUpdate` hands the StatefulSet back; a check written in the reference
//! design's names (`query: {expr, url, secretRef}`, the URL without a scheme) sends the
//! credentials of its Secret, read on the member.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleethub_crds::PhasedRollout;
use fleethub_crds::conditions::find;
use fleethub_crds::metric_check::MetricCheckResult;
use fleethub_crds::phased_rollout::{PhasedRolloutPhase, ROLLED_OUT, reason};
use fleethub_testkit::{
    Cleanup, Fleet, GuardedPrometheus, TestGauge, poll_until, unique_name, wait_for,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(180);

fn statefulset(name: &str, on_delete: bool) -> StatefulSet {
    let strategy = if on_delete {
        json!({"type": "OnDelete"})
    } else {
        json!({"type": "RollingUpdate"})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 5, "serviceName": name, "updateStrategy": strategy,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "db", "image": "registry.invalid/db:1"}]}}},
    }))
    .unwrap()
}

fn rollout(name: &str, target: &str, prometheus: &str, query: &str) -> PhasedRollout {
    serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "PhasedRollout",
        "metadata": {"name": name},
        "spec": {"targetRef": target, "check": {"url": prometheus, "query": query,
                 "interval": "1s", "successThreshold": 2}},
    }))
    .unwrap()
}

fn partition(s: &StatefulSet) -> Option<i32> {
    s.spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()?
        .partition
}

async fn set_image(sets: &Api<StatefulSet>, name: &str, image: &str) {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "db", "image": image}]}}}});
    sets.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

/// A namespace of the test's own on member-1, deleted by the returned guard.
async fn namespace(fleet: &Fleet) -> (Client, String, Cleanup) {
    let member = fleet.member(1).await.unwrap();
    let ns = unique_name("phased");
    let cleanup = Cleanup::new(fleet);
    cleanup.track::<Namespace>("member-1", None, &ns);
    Api::<Namespace>::all(member.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    (member, ns, cleanup)
}

/// Waits until the check failed for more than two seconds of checks, and asserts the
/// partition stayed at 3 all along.
async fn hold_while_failing(rollouts: &Api<PhasedRollout>, sets: &Api<StatefulSet>) {
    let failing = |r: Option<&PhasedRollout>| {
        r.and_then(|r| r.status.as_ref())
            .and_then(|s| s.check.as_ref())
            .filter(|c| c.last_result == Some(MetricCheckResult::NoData))
            .and_then(|c| c.last_check_time.clone())
    };
    let first = wait_for(
        rollouts,
        "db",
        "the check to fail",
        TIMEOUT,
        |r: Option<&PhasedRollout>| failing(r).is_some(),
    )
    .await
    .unwrap();
    let since = failing(Some(&first)).unwrap().0;
    wait_for(
        rollouts,
        "db",
        "more failing checks",
        TIMEOUT,
        |r: Option<&PhasedRollout>| {
            failing(r).is_some_and(|t| t.0 > since + jiff::SignedDuration::from_secs(2))
        },
    )
    .await
    .unwrap();
    let s = sets.get("db").await.unwrap();
    assert_eq!(partition(&s), Some(3), "stepped while the metric failed");
}

#[tokio::test]
async fn a_statefulset_rolls_a_pod_at_a_time_while_the_metric_passes() {
    let fleet = Fleet::get().unwrap();
    let (member, ns, _cleanup) = namespace(fleet).await;
    let healthy = TestGauge::new(fleet, "fleethub_test_healthy", &[("test", &ns)], 1.0)
        .await
        .unwrap();
    let query = format!("{} > 0.5", healthy.selector());
    let sets: Api<StatefulSet> = Api::namespaced(member.clone(), &ns);
    let rollouts: Api<PhasedRollout> = Api::namespaced(member.clone(), &ns);
    sets.create(&PostParams::default(), &statefulset("db", false))
        .await
        .unwrap();
    let prometheus = fleet.prometheus_url().unwrap();
    rollouts
        .create(
            &PostParams::default(),
            &rollout("db", "db", &prometheus, &query),
        )
        .await
        .unwrap();

    // Idle: every pod runs the first revision; the agent holds the partition at 5.
    wait_for(
        &sets,
        "db",
        "5 available pods, partition held at 5",
        TIMEOUT,
        |s: Option<&StatefulSet>| {
            s.is_some_and(|s| {
                partition(s) == Some(5)
                    && s.status
                        .as_ref()
                        .is_some_and(|st| st.available_replicas == Some(5))
            })
        },
    )
    .await
    .unwrap();
    wait_for(
        &rollouts,
        "db",
        "RolledOut=True",
        TIMEOUT,
        |r: Option<&PhasedRollout>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, ROLLED_OUT))
                .is_some_and(|c| c.reason == reason::COMPLETE)
        },
    )
    .await
    .unwrap();

    // Every partition the StatefulSet takes, with the pods already rolled at that moment, from
    // a watch: the agent holds some values only briefly (0, once the last pod rolls, is reset to
    // 5 at once), and polling missed them on a loaded machine.
    let seen: Arc<Mutex<Vec<(i32, i32)>>> = Arc::default();
    let observer = tokio::spawn({
        let (sets, seen) = (sets.clone(), seen.clone());
        async move {
            let config = watcher::Config::default().fields("metadata.name=db");
            let mut objects = watcher(sets, config)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = objects.next().await {
                let Ok(s) = event else { continue };
                let p = partition(&s).unwrap_or(-1);
                let updated = s.status.and_then(|st| st.updated_replicas).unwrap_or(0);
                let mut seen = seen.lock().unwrap();
                if seen.last().map(|(q, _)| *q) != Some(p) {
                    seen.push((p, updated));
                }
            }
        }
    });
    let observed = || seen.lock().unwrap().clone();
    poll_until("the StatefulSet's watch to list it", TIMEOUT, || async {
        (!observed().is_empty()).then_some(())
    })
    .await
    .unwrap();

    // A new revision: every step waits for the check.
    set_image(&sets, "db", "registry.invalid/db:2").await;
    let mut paused = false;
    let deadline = tokio::time::Instant::now() + 2 * TIMEOUT;
    loop {
        let seen = observed();
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rollout did not finish: {seen:?}"
        );
        let s = sets.get("db").await.unwrap();
        let st = s.status.clone().unwrap_or_default();
        let p = partition(&s).unwrap_or(-1);
        let updated = st.updated_replicas.unwrap_or(0);
        if st.current_revision == st.update_revision && p == 5 && updated == 5 && seen.len() > 1 {
            break;
        }
        // Half-way, the metric fails: the rollout must hold at partition 3 while it does.
        if p == 3 && !paused {
            paused = true;
            healthy.set(0.0).await.unwrap();
            hold_while_failing(&rollouts, &sets).await;
            healthy.set(1.0).await.unwrap();
        }
        // Polled with the deadline above; the watch records every value.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The watch has delivered the final 5 once the GET above saw it.
    let seen = poll_until("the watch to see the final partition", TIMEOUT, || async {
        let seen = observed();
        (seen.len() > 1 && seen.last().map(|(p, _)| *p) == Some(5)).then_some(seen)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", observed()));
    observer.abort();
    assert!(paused, "the rollout never reached partition 3: {seen:?}");
    // Each partition came down by one, and only once the pods above it were rolled.
    let partitions: Vec<i32> = seen.iter().map(|(p, _)| *p).collect();
    assert_eq!(partitions, [5, 4, 3, 2, 1, 0, 5], "{seen:?}");
    for (p, updated) in &seen[1..5] {
        assert!(
            *updated <= 5 - p,
            "partition {p} was set with {updated} pods already rolled: two at once ({seen:?})"
        );
    }
    let r = rollouts.get("db").await.unwrap();
    assert_eq!(r.status.unwrap().phase, PhasedRolloutPhase::Idle);
}

#[tokio::test]
async fn on_delete_is_refused_and_standard_rolling_update_hands_back() {
    let fleet = Fleet::get().unwrap();
    let (member, ns, _cleanup) = namespace(fleet).await;
    let sets: Api<StatefulSet> = Api::namespaced(member.clone(), &ns);
    let rollouts: Api<PhasedRollout> = Api::namespaced(member.clone(), &ns);
    let prometheus = fleet.prometheus_url().unwrap();
    sets.create(&PostParams::default(), &statefulset("manual", true))
        .await
        .unwrap();
    rollouts
        .create(
            &PostParams::default(),
            &rollout("manual", "manual", &prometheus, "vector(1)"),
        )
        .await
        .unwrap();
    let refused = wait_for(
        &rollouts,
        "manual",
        "OnDelete to be refused",
        TIMEOUT,
        |r: Option<&PhasedRollout>| {
            r.and_then(|r| r.status.as_ref())
                .is_some_and(|s| s.phase == PhasedRolloutPhase::Refused)
        },
    )
    .await
    .unwrap();
    let c = find(&refused.status.unwrap().conditions, ROLLED_OUT)
        .cloned()
        .unwrap();
    assert_eq!(c.reason, reason::ON_DELETE);
    assert!(c.message.contains("OnDelete"), "{}", c.message);
    assert_eq!(partition(&sets.get("manual").await.unwrap()), None);

    // A held StatefulSet (a query that never passes), handed back: it rolls by itself.
    sets.create(&PostParams::default(), &statefulset("held", false))
        .await
        .unwrap();
    rollouts
        .create(
            &PostParams::default(),
            &rollout("held", "held", &prometheus, "absent(vector(1))"),
        )
        .await
        .unwrap();
    wait_for(
        &sets,
        "held",
        "the partition held at 5",
        TIMEOUT,
        |s: Option<&StatefulSet>| s.is_some_and(|s| partition(s) == Some(5)),
    )
    .await
    .unwrap();
    set_image(&sets, "held", "registry.invalid/db:2").await;
    let patch = json!({"spec": {"standardRollingUpdate": true}});
    rollouts
        .patch("held", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for(
        &sets,
        "held",
        "the StatefulSet to roll every pod itself",
        TIMEOUT,
        |s: Option<&StatefulSet>| {
            s.is_some_and(|s| {
                let st = s.status.clone().unwrap_or_default();
                partition(s).unwrap_or(0) == 0
                    && st.current_revision == st.update_revision
                    && st.updated_replicas == Some(5)
            })
        },
    )
    .await
    .unwrap();
    let r = rollouts.get("held").await.unwrap();
    assert_eq!(r.status.unwrap().phase, PhasedRolloutPhase::HandedBack);
}

/// The check's last outcome as the status shows it (a value, or what went wrong).
fn last_value(r: Option<&PhasedRollout>) -> Option<String> {
    r?.status.as_ref()?.check.as_ref()?.last_value.clone()
}

/// The member side of `secretRef`, in the reference design's form: `query: {expr, url,
/// secretRef}` with the URL as `127.0.0.1:<port>` (no scheme, so `http://`), against a
/// Prometheus of the test's own that wants basic auth. The real agent reads the Secret in the
/// rollout's namespace on the member at every check: missing, the rollout holds naming it; with
/// a wrong password, Prometheus refuses it and the rollout still holds; with the right one, the
/// StatefulSet rolls.
#[tokio::test]
async fn a_check_in_the_reference_designs_form_sends_the_credentials_of_its_secret() {
    let fleet = Fleet::get().unwrap();
    let prometheus = GuardedPrometheus::start(TIMEOUT).await.unwrap();
    let (member, ns, _cleanup) = namespace(fleet).await;
    let sets: Api<StatefulSet> = Api::namespaced(member.clone(), &ns);
    let rollouts: Api<PhasedRollout> = Api::namespaced(member.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(member.clone(), &ns);
    sets.create(&PostParams::default(), &statefulset("db", false))
        .await
        .unwrap();
    let rollout: PhasedRollout = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "PhasedRollout",
        "metadata": {"name": "db"},
        "spec": {"targetRef": "db", "standardRollingUpdate": false, "check": {
            "initialDelaySeconds": 0, "periodSeconds": 1, "successThreshold": 1,
            "query": {"expr": "vector(1)", "url": prometheus.address(),
                      "secretRef": "prom-secret"}}},
    }))
    .unwrap();
    rollouts
        .create(&PostParams::default(), &rollout)
        .await
        .unwrap();
    wait_for(
        &sets,
        "db",
        "the partition held at 5",
        TIMEOUT,
        |s: Option<&StatefulSet>| s.is_some_and(|s| partition(s) == Some(5)),
    )
    .await
    .unwrap();
    set_image(&sets, "db", "registry.invalid/db:2").await;

    // No Secret yet: the check fails naming it; no pod rolls.
    let held = wait_for(
        &rollouts,
        "db",
        "the check to name the missing Secret",
        TIMEOUT,
        |r: Option<&PhasedRollout>| last_value(r).is_some_and(|v| v.contains("does not exist")),
    )
    .await
    .unwrap();
    let v = last_value(Some(&held)).unwrap();
    assert!(v.contains(&format!("Secret {ns}/prom-secret")), "{v}");
    assert_eq!(partition(&sets.get("db").await.unwrap()), Some(5));

    // A wrong password: sent, and refused by Prometheus; still no pod rolls.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "prom-secret"},
        "stringData": {"username": GuardedPrometheus::USER, "password": "wrong"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    wait_for(
        &rollouts,
        "db",
        "Prometheus to refuse the wrong password",
        TIMEOUT,
        |r: Option<&PhasedRollout>| last_value(r).is_some_and(|v| v.contains("HTTP 401")),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; Prometheus log:\n{}", prometheus.log()));
    assert_eq!(partition(&sets.get("db").await.unwrap()), Some(5));

    // The right password, read at the next check: every pod rolls, a check before each.
    secrets
        .patch(
            "prom-secret",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": GuardedPrometheus::PASSWORD}})),
        )
        .await
        .unwrap();
    wait_for(
        &sets,
        "db",
        "every pod on the new revision, the partition held again",
        2 * TIMEOUT,
        |s: Option<&StatefulSet>| {
            s.is_some_and(|s| {
                let st = s.status.clone().unwrap_or_default();
                st.current_revision == st.update_revision
                    && st.updated_replicas == Some(5)
                    && partition(s) == Some(5)
            })
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; Prometheus log:\n{}", prometheus.log()));
    let r = wait_for(
        &rollouts,
        "db",
        "RolledOut=True",
        TIMEOUT,
        |r: Option<&PhasedRollout>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, ROLLED_OUT))
                .is_some_and(|c| c.reason == reason::COMPLETE)
        },
    )
    .await
    .unwrap();
    assert_eq!(r.status.unwrap().phase, PhasedRolloutPhase::Idle);
}
