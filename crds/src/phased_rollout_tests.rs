//! A phased rollout's check under both sets of names: the reference design's manifest reads as
//! the same check as fleethub's names; both names of one setting are refused; a URL without a
//! scheme is `http://`.

use std::time::Duration;

use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::*;

/// The reference design's example, group changed (also applied by crds/tests/admission.rs).
const REFERENCE: &str = include_str!("../tests/data/reference-phased-rollout.yaml");

fn check(value: Value) -> PhasedRolloutCheck {
    serde_json::from_value(value).unwrap()
}

fn effective_of(value: Value) -> Result<EffectiveCheck, String> {
    check(value).effective()
}

#[test]
fn the_reference_manifest_reads_as_the_check_it_describes() {
    let rollout: PhasedRollout = serde_norway::from_str(REFERENCE).unwrap();
    assert_eq!(
        rollout.metadata.name.as_deref(),
        Some("phasedrollout-sample")
    );
    assert_eq!(rollout.spec.target_ref, "web");
    assert!(!rollout.spec.standard_rolling_update);
    assert_eq!(
        rollout.spec.check.effective(),
        Ok(EffectiveCheck {
            url: "http://prom:9000/xx".into(),
            query: "up{}".into(),
            secret_name: Some("prom-secret".into()),
            settings: Settings {
                initial_delay: Duration::from_secs(30),
                interval: Duration::from_secs(30),
                success_threshold: 3,
                timeout: None,
            },
        })
    );
    // Stored as written: what is read back is what was applied.
    let written: Value = serde_norway::from_str(REFERENCE).unwrap();
    assert_eq!(serde_json::to_value(&rollout).unwrap(), written);
}

#[test]
fn fleethubs_names_read_as_the_same_check() {
    let ours = effective_of(json!({
        "url": "http://prom:9000/xx", "query": "up{}", "initialDelay": "30s", "interval": "30s",
        "successThreshold": 3, "secretRef": {"name": "prom-secret"},
    }));
    let rollout: PhasedRollout = serde_norway::from_str(REFERENCE).unwrap();
    assert_eq!(ours, rollout.spec.check.effective());
    // Names of both designs mixed, one per setting, are one check too.
    let mixed = effective_of(json!({
        "initialDelaySeconds": 30, "interval": "30s", "successThreshold": 3,
        "query": {"expr": "up{}"}, "url": "prom:9000/xx", "secretRef": {"name": "prom-secret"},
    }));
    assert_eq!(mixed, ours);
}

#[test]
fn defaults_are_fleethubs() {
    let e = effective_of(json!({"url": "http://p:9090", "query": "up"})).unwrap();
    assert_eq!(e.settings.initial_delay, Duration::ZERO);
    assert_eq!(e.settings.interval, crate::metric_check::DEFAULT_INTERVAL);
    assert_eq!(e.settings.success_threshold, 1);
    assert_eq!(e.settings.timeout, None, "a held rollout waits");
    assert_eq!(e.secret_name, None);
    // `timeout`, accepted for a check copied from a stage, is not used.
    let e = effective_of(json!({"url": "http://p:9090", "query": "up", "timeout": "5m"})).unwrap();
    assert_eq!(e.settings.timeout, None);
}

#[test]
fn both_names_of_one_setting_are_refused_naming_them() {
    let base = || json!({"url": "http://p:9090", "query": "up"});
    let with = |extra: Value| {
        let mut v = base();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    for (extra, ours, reference) in [
        (
            json!({"initialDelay": "5s", "initialDelaySeconds": 5}),
            "spec.check.initialDelay",
            "spec.check.initialDelaySeconds",
        ),
        (
            json!({"interval": "5s", "periodSeconds": 5}),
            "spec.check.interval",
            "spec.check.periodSeconds",
        ),
        (
            json!({"query": {"expr": "up", "url": "prom:9000"}}),
            "spec.check.url",
            "spec.check.query.url",
        ),
        (
            json!({"secretRef": {"name": "a"}, "query": {"expr": "up", "secretRef": "b"}}),
            "spec.check.secretRef",
            "spec.check.query.secretRef",
        ),
    ] {
        let e = effective_of(with(extra.clone())).unwrap_err();
        assert!(e.contains(ours) && e.contains(reference), "{extra}: {e}");
    }
}

#[test]
fn a_query_neither_text_nor_the_reference_object_still_reads_and_is_reported() {
    // The API server cannot refuse these (the field takes any JSON): the object must still
    // deserialize, or one bad rollout would stop every watch of the kind.
    for (query, says) in [
        (json!(42), "invalid type"),
        (json!({"exp": "up"}), "unknown field `exp`"),
        (json!({"url": "prom:9000"}), "missing field `expr`"),
    ] {
        let rollout: PhasedRollout = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "PhasedRollout",
            "metadata": {"name": "db", "namespace": "app"},
            "spec": {"targetRef": "db", "check": {"url": "http://p:9090", "query": query}},
        }))
        .unwrap();
        assert_eq!(
            rollout.spec.check.query,
            CheckQuery::Unreadable(query.clone())
        );
        let e = rollout.spec.check.effective().unwrap_err();
        assert!(
            e.contains("spec.check.query") && e.contains(says),
            "{query}: {e}"
        );
    }
}

#[test]
fn a_missing_url_or_an_empty_query_is_named() {
    let e = effective_of(json!({"query": "up"})).unwrap_err();
    assert!(
        e.contains("spec.check.url") && e.contains("query.url"),
        "{e}"
    );
    let e = effective_of(json!({"url": "http://p", "query": " "})).unwrap_err();
    assert!(e.starts_with("spec.check.query is empty"), "{e}");
    let e = effective_of(json!({"url": "http://p", "query": {"expr": ""}})).unwrap_err();
    assert!(e.starts_with("spec.check.query.expr is empty"), "{e}");
    let e =
        effective_of(json!({"query": {"expr": "up", "url": "p", "secretRef": ""}})).unwrap_err();
    assert!(e.starts_with("spec.check.query.secretRef"), "{e}");
    let e =
        effective_of(json!({"url": "http://p", "query": "up", "interval": "soon"})).unwrap_err();
    assert!(e.starts_with("spec.check.interval"), "{e}");
}

#[test]
fn a_url_without_a_scheme_is_http() {
    for (given, called) in [
        ("prom:9000/xx", "http://prom:9000/xx"),
        (
            "prometheus.monitoring:9090",
            "http://prometheus.monitoring:9090",
        ),
        ("127.0.0.1:9090", "http://127.0.0.1:9090"),
        ("[::1]:9090/prom", "http://[::1]:9090/prom"),
        ("prometheus", "http://prometheus"),
        ("http://p:9090", "http://p:9090"),
        ("https://p:9090/prom/", "https://p:9090/prom/"),
        ("HTTPS://p", "HTTPS://p"),
        // `://` after a path or query is not a scheme.
        ("p:9090/x?next=http://y", "http://p:9090/x?next=http://y"),
    ] {
        assert_eq!(prometheus_url(given).as_deref(), Ok(called), "{given}");
    }
    for (given, says) in [
        ("ftp://p:21", "ftp://"),
        ("", "empty"),
        ("p:9090/a b", "space"),
    ] {
        let e = prometheus_url(given).unwrap_err();
        assert!(e.contains(says), "{given}: {e}");
    }
    let e = effective_of(json!({"query": {"expr": "up", "url": "ftp://p"}})).unwrap_err();
    assert!(e.starts_with("spec.check.query.url"), "{e}");
}

/// The sample of `deploy/local/sample/phased-rollout.yaml` (the README's walkthrough) is the
/// reference's shape and reads as the check it describes once its placeholders are filled in.
#[test]
fn the_local_fleets_sample_reads_as_a_reference_style_check() {
    use serde::Deserialize;
    let text = include_str!("../../deploy/local/sample/phased-rollout.yaml")
        .replace("REGISTRY", "127.0.0.1:5000")
        .replace("PROMETHEUS", "127.0.0.1:17310");
    let objects: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "Service",
            "StatefulSet",
            "PhasedRollout",
            "Secret"
        ]
    );
    let rollout: PhasedRollout = serde_json::from_value(objects[3].clone()).unwrap();
    assert!(
        matches!(rollout.spec.check.query, CheckQuery::Object(_)),
        "the reference's form"
    );
    let check = rollout.spec.check.effective().unwrap();
    assert_eq!(check.url, "http://127.0.0.1:17310");
    assert_eq!(check.secret_name.as_deref(), Some("prom-secret"));
    assert_eq!(objects[4]["metadata"]["name"], "prom-secret");
    assert_eq!(rollout.spec.target_ref, objects[2]["metadata"]["name"]);
}

/// The schema the API server gets: `query` takes any JSON, each reference name is documented
/// as the same setting as fleethub's (what `kubectl explain` shows), and the rules refusing
/// both names point at the reference name.
#[test]
fn the_crd_documents_both_names_and_refuses_both_at_once() {
    let crd = serde_json::to_value(PhasedRollout::crd()).unwrap();
    let check = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["check"];
    let props = &check["properties"];
    assert_eq!(props["query"]["x-kubernetes-preserve-unknown-fields"], true);
    assert!(props["query"].get("type").is_none(), "{}", props["query"]);
    let description = |f: &str| {
        props[f]["description"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        description("query").contains("expr"),
        "{}",
        description("query")
    );
    for (reference, ours) in [
        ("initialDelaySeconds", "initialDelay"),
        ("periodSeconds", "interval"),
        ("url", "query.url"),
        ("secretRef", "query.secretRef"),
    ] {
        assert!(
            description(reference).contains(ours),
            "{reference}: {}",
            description(reference)
        );
    }
    let rules = check["x-kubernetes-validations"].as_array().unwrap();
    for field in ["initialDelaySeconds", "periodSeconds"] {
        assert!(
            rules.iter().any(|r| r["fieldPath"] == format!(".{field}")
                && r["message"].as_str().unwrap().contains(field)),
            "no rule for {field}: {rules:?}"
        );
    }
    assert_eq!(
        check["required"],
        json!(["query"]),
        "url may be in query.url"
    );
    assert_eq!(props["url"]["pattern"], URL_PATTERN);
}
