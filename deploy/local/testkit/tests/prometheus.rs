//! The local fleet runs a real Prometheus: it scrapes the hub, every member agent and the test
//! exporter, and a gauge a test sets reaches its queries, follows changes and disappears when
//! the test drops it.

use std::time::Duration;

use fleethub_testkit::{Fleet, TestGauge, unique_name};

const TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_gauge_a_test_sets_is_what_prometheus_answers_until_the_test_drops_it() {
    let fleet = Fleet::get().unwrap();
    let id = unique_name("prom");
    let query = format!(r#"fleethub_test_gauge{{test="{id}"}}"#);
    assert!(fleet.prometheus_query(&query).await.unwrap().is_empty());

    let gauge = TestGauge::new(fleet, "fleethub_test_gauge", &[("test", &id)], 1.0)
        .await
        .unwrap();
    assert_eq!(gauge.selector(), query);
    let result = fleet.wait_prometheus_data(&query, TIMEOUT).await.unwrap();
    assert_eq!(result.len(), 1, "{result:?}");
    assert_eq!(result[0].value, 1.0);
    assert_eq!(result[0].labels["job"], "fleet-test-exporter");

    // A gate's query in alerting style returns data only while its condition holds.
    let healthy = format!("{query} < 0.5");
    assert!(fleet.prometheus_query(&healthy).await.unwrap().is_empty());
    gauge.set(0.25).await.unwrap();
    let result = fleet
        .wait_prometheus(&healthy, TIMEOUT, |r| !r.is_empty())
        .await
        .unwrap();
    assert_eq!(result[0].value, 0.25);

    drop(gauge);
    fleet
        .wait_prometheus(&query, TIMEOUT, <[_]>::is_empty)
        .await
        .unwrap();
}

#[tokio::test]
async fn prometheus_scrapes_the_hub_and_every_member_agent() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet
        .wait_prometheus_data(r#"up{job="fleethub-hub"} == 1"#, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(hub.len(), 1, "{hub:?}");
    let members = fleet.member_count();
    let agents = fleet
        .wait_prometheus(r#"up{job="fleethub-member-agent"} == 1"#, TIMEOUT, |r| {
            r.len() == members
        })
        .await
        .unwrap();
    let mut clusters: Vec<&str> = agents
        .iter()
        .map(|s| s.labels["cluster"].as_str())
        .collect();
    clusters.sort();
    let expected: Vec<String> = (1..=members).map(|i| format!("member-{i}")).collect();
    assert_eq!(clusters, expected);
}
