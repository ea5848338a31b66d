//! The hub API server's requests during a scenario, from its own counter
//! (`apiserver_request_total`) read before and after it: what the hub, the members and the bench
//! asked of it, per cluster update. A small write costs the API server about as much as a large
//! one (the request itself is most of it), so the count per cluster is what a change can cut.

use std::collections::BTreeMap;

use kube::Client;

/// Requests by `VERB resource[/subresource] code`.
pub(crate) type Counts = BTreeMap<String, f64>;

/// The hub API server's request counter now; `None` when it cannot be read (the scenario then
/// reports no requests).
pub(crate) async fn read(client: &Client) -> Option<Counts> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    Some(parse(&text))
}

/// The counter's series in Prometheus' text format, summed by verb, resource, subresource and
/// code. Watches are left out (each counts a connection, not an object).
pub(crate) fn parse(text: &str) -> Counts {
    let mut counts = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\""))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_default()
        };
        let verb = label("verb");
        if verb == "WATCH" || verb.is_empty() {
            continue;
        }
        let resource = match label("subresource") {
            "" => label("resource").to_string(),
            sub => format!("{}/{sub}", label("resource")),
        };
        *counts
            .entry(format!("{verb} {resource} {}", label("code")))
            .or_default() += value;
    }
    counts
}

/// The requests made between `before` and `after`, the most frequent first.
pub(crate) fn between(before: &Counts, after: &Counts) -> Vec<(String, u64)> {
    let mut made: Vec<(String, u64)> = after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).unwrap_or(&0.0)).max(0.0) as u64,
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    made.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="fleethub.dev",resource="works",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="fleethub.dev",resource="bindings",scope="resource",subresource="",verb="GET",version="v1alpha1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="fleethub.dev",resource="works",scope="namespace",subresource="",verb="WATCH",version="v1alpha1"} 7
apiserver_request_total_other{verb="GET"} 1
"#;

    #[test]
    fn requests_are_counted_by_verb_resource_and_code_without_watches() {
        let before = parse(BEFORE);
        assert_eq!(before.len(), 2);
        assert_eq!(before["APPLY works/status 200"], 10.0);
        let after = parse(&format!(
            "{BEFORE}apiserver_request_total{{code=\"200\",group=\"fleethub.dev\",resource=\"works\",scope=\"cluster\",subresource=\"status\",verb=\"APPLY\"}} 25\napiserver_request_total{{code=\"409\",resource=\"bindings\",subresource=\"\",verb=\"PATCH\"}} 3\n"
        ));
        assert_eq!(
            between(&before, &after),
            vec![
                ("APPLY works/status 200".to_string(), 25),
                ("PATCH bindings 409".to_string(), 3),
            ]
        );
    }
}
