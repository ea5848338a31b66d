use super::*;
use fleethub_crds::work::DEFAULT_HEALTH_TIMEOUT;
use serde_json::json;

fn deploy(generation: i64, replicas: Option<i64>, status: Value) -> Value {
    let mut spec = json!({});
    if let Some(r) = replicas {
        spec["replicas"] = json!(r);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "app", "generation": generation},
           "spec": spec, "status": status})
}

fn not_ready(msg: &str) -> Readiness {
    Readiness::NotReady(msg.to_string())
}

fn pod(name: &str, image: &str, waiting: Value, last: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "app"},
           "spec": {"containers": [{"name": "web", "image": image}]},
           "status": {"containerStatuses": [{"name": "web", "restartCount": 4,
               "state": {"waiting": waiting}, "lastState": last}]}})
}

#[test]
fn pod_problems_name_the_image_and_the_state() {
    let missing = pod(
        "web-1",
        "reg/demo:9.9.9",
        json!({"reason": "ImagePullBackOff", "message": "Back-off pulling image \"reg/demo:9.9.9\""}),
        json!({}),
    );
    let crashing = pod(
        "web-2",
        "reg/demo:1.2.0",
        json!({"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}),
        json!({"terminated": {"exitCode": 1, "reason": "Error"}}),
    );
    let starting = pod(
        "web-3",
        "reg/demo:1.1.0",
        json!({"reason": "ContainerCreating"}),
        json!({}),
    );
    let pods = [missing.clone(), missing, crashing, starting];
    assert_eq!(
        pod_problems(&pods),
        [
            "container web (image reg/demo:9.9.9): ImagePullBackOff in 2 pods: Back-off pulling image \"reg/demo:9.9.9\"",
            "container web (image reg/demo:1.2.0): CrashLoopBackOff in 1 pod: it exits with code 1",
        ]
    );
    let unschedulable = json!({"metadata": {"name": "web-4"}, "spec": {"containers": []},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available"}]}});
    assert_eq!(
        pod_problems(&[unschedulable]),
        ["pod not scheduled (Unschedulable) in 1 pod: 0/1 nodes are available"]
    );
    assert!(pod_problems(&[]).is_empty());
}

#[test]
fn pod_selectors_of_workloads() {
    let d = deploy(1, Some(1), json!({}));
    assert_eq!(pod_selector(&d), None, "no selector");
    let mut d = d;
    d["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "front"}});
    assert_eq!(pod_selector(&d).as_deref(), Some("app=web,tier=front"));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "spec": {"selector": {"matchLabels": {"a": "b"}}}});
    assert_eq!(pod_selector(&cm), None);
}

#[test]
fn deployments() {
    let full = |n: i64| {
        json!({"observedGeneration": 2, "replicas": n, "updatedReplicas": n,
               "readyReplicas": n, "availableReplicas": n})
    };
    let cases = [
        ("ready", deploy(2, Some(3), full(3)), Readiness::Ready),
        (
            "replicas default to 1",
            deploy(2, None, full(1)),
            Readiness::Ready,
        ),
        (
            "scaled to zero",
            deploy(2, Some(0), json!({"observedGeneration": 2})),
            Readiness::Ready,
        ),
        (
            "new generation not observed",
            deploy(3, Some(3), full(3)),
            not_ready(
                "deployment app/web: its controller has not yet observed generation 3 (observed 2)",
            ),
        ),
        (
            "no status yet",
            deploy(1, Some(3), json!(null)),
            not_ready("deployment app/web: its controller has not yet observed generation 1"),
        ),
        (
            "rolling out",
            deploy(
                2,
                Some(3),
                json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1,
                                      "readyReplicas": 3, "availableReplicas": 3}),
            ),
            not_ready("deployment app/web: 1/3 replicas updated"),
        ),
        (
            "new pods unready",
            deploy(
                2,
                Some(3),
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                                      "readyReplicas": 1, "availableReplicas": 1}),
            ),
            not_ready("deployment app/web: 1/3 replicas ready"),
        ),
        (
            "no pod ready (status fields absent)",
            deploy(
                2,
                Some(2),
                json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2}),
            ),
            not_ready("deployment app/web: 0/2 replicas ready"),
        ),
        (
            "ready but not yet available (minReadySeconds)",
            deploy(
                2,
                Some(3),
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                                      "readyReplicas": 3, "availableReplicas": 2}),
            ),
            not_ready("deployment app/web: 2/3 replicas available"),
        ),
        (
            "old replicas still terminating",
            deploy(
                2,
                Some(3),
                json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3,
                                      "readyReplicas": 3, "availableReplicas": 3}),
            ),
            not_ready(
                "deployment app/web: 4 replicas exist where 3 are wanted (old replicas are still running)",
            ),
        ),
    ];
    for (what, object, want) in cases {
        assert_eq!(readiness(&object), want, "{what}");
    }
}

#[test]
fn stateful_sets() {
    let sts = |status: Value| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "db", "namespace": "app", "generation": 4},
               "spec": {"replicas": 3}, "status": status})
    };
    let cases = [
        (
            "ready",
            sts(
                json!({"observedGeneration": 4, "currentRevision": "db-2", "updateRevision": "db-2", "readyReplicas": 3, "availableReplicas": 3}),
            ),
            Readiness::Ready,
        ),
        (
            "ready, not yet for minReadySeconds",
            {
                let mut s = sts(
                    json!({"observedGeneration": 4, "currentRevision": "db-2", "updateRevision": "db-2", "readyReplicas": 3, "availableReplicas": 1}),
                );
                s["spec"]["minReadySeconds"] = json!(30);
                s
            },
            not_ready("statefulset app/db: 1/3 replicas available (ready for minReadySeconds 30)"),
        ),
        (
            "stale generation",
            sts(
                json!({"observedGeneration": 3, "currentRevision": "db-2", "updateRevision": "db-2", "readyReplicas": 3}),
            ),
            not_ready(
                "statefulset app/db: its controller has not yet observed generation 4 (observed 3)",
            ),
        ),
        (
            "rolling out",
            sts(
                json!({"observedGeneration": 4, "currentRevision": "db-1", "updateRevision": "db-2",
                       "updatedReplicas": 1, "readyReplicas": 3}),
            ),
            not_ready("statefulset app/db: rolling out revision db-2 (1/3 replicas updated)"),
        ),
        (
            "not ready",
            sts(
                json!({"observedGeneration": 4, "currentRevision": "db-2", "updateRevision": "db-2", "readyReplicas": 2}),
            ),
            not_ready("statefulset app/db: 2/3 replicas ready"),
        ),
    ];
    for (what, object, want) in cases {
        assert_eq!(readiness(&object), want, "{what}");
    }
}

#[test]
fn phased_rollouts_are_available_once_rolled_out() {
    let pr = |status: Value| {
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "PhasedRollout",
               "metadata": {"name": "db", "namespace": "app", "generation": 2},
               "status": status})
    };
    let rolled_out = |status: &str, generation: i64, message: &str| {
        json!({"rolledReplicas": 2, "replicas": 5, "conditions": [{"type": "RolledOut",
               "status": status, "observedGeneration": generation, "message": message}]})
    };
    assert_eq!(
        readiness(&pr(rolled_out("True", 2, "all 5 pods run revision db-2"))),
        Readiness::Ready
    );
    assert_eq!(
        readiness(&pr(rolled_out(
            "False",
            2,
            "2/5 rolled; before pod 2: check 1/3"
        ))),
        not_ready("phasedrollout app/db: 2/5 pods rolled: 2/5 rolled; before pod 2: check 1/3")
    );
    assert!(matches!(
        readiness(&pr(rolled_out("True", 1, "old"))),
        Readiness::NotReady(_)
    ));
    assert!(matches!(readiness(&pr(json!({}))), Readiness::NotReady(_)));
}

#[test]
fn daemon_sets() {
    let ds = |status: Value| {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "agent", "namespace": "kube-system", "generation": 1},
               "status": status})
    };
    let cases = [
        (
            "ready",
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}),
            ),
            Readiness::Ready,
        ),
        (
            "no nodes",
            ds(json!({"observedGeneration": 1, "desiredNumberScheduled": 0})),
            Readiness::Ready,
        ),
        (
            "not updated",
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 2, "numberAvailable": 3}),
            ),
            not_ready("daemonset kube-system/agent: 2/3 pods updated"),
        ),
        (
            "not available",
            ds(
                json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 1}),
            ),
            not_ready("daemonset kube-system/agent: 1/3 pods available"),
        ),
        (
            "not observed",
            ds(json!({})),
            not_ready(
                "daemonset kube-system/agent: its controller has not yet observed generation 1",
            ),
        ),
    ];
    for (what, object, want) in cases {
        assert_eq!(readiness(&object), want, "{what}");
    }
}

#[test]
fn jobs() {
    let job = |spec: Value, status: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "migrate", "namespace": "app", "generation": 1},
               "spec": spec, "status": status})
    };
    let cases = [
        (
            "complete",
            job(
                json!({}),
                json!({"succeeded": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}),
            ),
            Readiness::Ready,
        ),
        (
            "running",
            job(json!({"completions": 3}), json!({"succeeded": 1})),
            not_ready("job app/migrate: not complete yet (1/3 pods succeeded)"),
        ),
        (
            "complete=False does not count",
            job(
                json!({}),
                json!({"conditions": [{"type": "Complete", "status": "False"}]}),
            ),
            not_ready("job app/migrate: not complete yet (0/1 pods succeeded)"),
        ),
        (
            "failed",
            job(
                json!({}),
                json!({"conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
            ),
            not_ready(
                "job app/migrate: failed (BackoffLimitExceeded): Job has reached the specified backoff limit",
            ),
        ),
    ];
    for (what, object, want) in cases {
        assert_eq!(readiness(&object), want, "{what}");
    }
}

#[test]
fn other_kinds_are_available_once_applied() {
    for (api_version, kind) in [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Service"),
        ("v1", "Namespace"),
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("example.com/v1", "Deployment"),
        ("v1", "Job"),
    ] {
        let object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
        assert_eq!(readiness(&object), Readiness::Ready, "{api_version} {kind}");
    }
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

#[test]
fn verdict_available_not_ready_and_timed_out() {
    let timeout = Duration::from_secs(10);
    let msgs = vec!["deployment app/web: 0/2 replicas ready".to_string()];
    let applied = ts(1_000);

    let v = verdict(&[], 3, 2, applied, timeout, ts(1_001));
    assert_eq!(
        (v.status, v.reason, v.message.as_str(), v.recheck_after),
        (
            "True",
            WORKLOADS_AVAILABLE,
            "all 3 manifests of resource snapshot 2 are available",
            None
        )
    );

    let v = verdict(&msgs, 3, 2, applied, timeout, ts(1_004));
    assert_eq!(
        (v.status, v.reason, v.message.as_str(), v.recheck_after),
        (
            "False",
            WORKLOADS_NOT_READY,
            "deployment app/web: 0/2 replicas ready",
            Some(Duration::from_secs(6))
        )
    );

    // The deadline itself counts as timed out.
    for now in [ts(1_010), ts(5_000)] {
        let v = verdict(&msgs, 3, 2, applied, timeout, now);
        assert_eq!(
            (v.status, v.reason, v.message.as_str(), v.recheck_after),
            (
                "False",
                HEALTH_TIMEOUT,
                "not available within the health timeout of 10s after resource snapshot 2 was applied: deployment app/web: 0/2 replicas ready",
                None
            )
        );
    }

    // A clock behind the apply time (skew) never times out early.
    let v = verdict(&msgs, 3, 2, applied, timeout, ts(990));
    assert_eq!(v.recheck_after, Some(Duration::from_secs(20)));
}

#[test]
fn verdict_names_a_few_objects_and_counts_the_rest() {
    let msgs: Vec<String> = (1..=5)
        .map(|i| format!("deployment app/w{i}: 0/1 replicas ready"))
        .collect();
    let v = verdict(&msgs, 5, 0, ts(0), DEFAULT_HEALTH_TIMEOUT, ts(1));
    assert_eq!(
        v.message,
        "deployment app/w1: 0/1 replicas ready; deployment app/w2: 0/1 replicas ready; deployment app/w3: 0/1 replicas ready; and 2 more"
    );
}

fn restarted(name: &str, count: i64, finished: &str, reason: &str, code: i64) -> Value {
    json!({"metadata": {"name": name}, "status": {"containerStatuses": [{
        "name": "demo", "image": "reg/demo:1.3.0", "ready": true, "restartCount": count,
        "lastState": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": finished}}}]}})
}

#[test]
fn restarts_after_the_update_are_named_and_earlier_ones_are_not() {
    let since: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
    let pods = [
        restarted("a", 2, "2026-11-29T10:00:30Z", "Error", 1),
        restarted("b", 1, "2026-11-29T10:01:00Z", "Error", 1),
        // Before the update: an old crash of this pod does not count.
        restarted("c", 4, "2026-11-29T09:59:00Z", "Error", 1),
        restarted("d", 1, "2026-11-29T10:02:00Z", "OOMKilled", 137),
        // Never restarted.
        json!({"metadata": {"name": "e"}, "status": {"containerStatuses": [{
            "name": "demo", "image": "reg/demo:1.3.0", "ready": true, "restartCount": 0}]}}),
    ];
    assert_eq!(
        restarts_since(&pods, since),
        [
            "container demo (image reg/demo:1.3.0) restarted 3 times since the update in 2 pods: last it exited with code 1 (Error)",
            "container demo (image reg/demo:1.3.0) restarted once since the update in 1 pod: last it exited with code 137 (OOMKilled)",
        ]
    );
    assert!(restarts_since(&pods[2..3], since).is_empty());
    assert!(restarts_since(&pods[4..], since).is_empty());
}
