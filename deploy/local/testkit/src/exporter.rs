//! The fleet's Prometheus and its test exporter, from a test's side: gauges a test sets (and
//! that go away when the test drops them) and instant queries with deadline-bounded waits.
//!
//! `deploy/local/fleet up` runs a real Prometheus (`FLEET_PROMETHEUS` in `fleet.env`) that
//! scrapes the hub, the member agents and `fleet-test-exporter` (`FLEET_TEST_EXPORTER`) every
//! second; see deploy/local/README.md.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::{Error, Fleet};

/// One element of an instant query's result: a series' labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series' labels (with `__name__` when the query keeps it).
    pub labels: BTreeMap<String, String>,
    /// The value at the query's evaluation time.
    pub value: f64,
}

impl Fleet {
    /// The base URL of the fleet's Prometheus, e.g. `http://127.0.0.1:17310`.
    pub fn prometheus_url(&self) -> Result<String, Error> {
        self.env_setting("FLEET_PROMETHEUS")
    }

    /// The base URL of the fleet's test exporter (`fleet-test-exporter`).
    pub fn test_exporter_url(&self) -> Result<String, Error> {
        self.env_setting("FLEET_TEST_EXPORTER")
    }

    pub(crate) fn env_setting(&self, key: &str) -> Result<String, Error> {
        let path = self.dir().join("fleet.env");
        let env = std::fs::read_to_string(&path)
            .map_err(|e| Error::Fleet(format!("{}: {e}", path.display())))?;
        env.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                Error::Fleet(format!(
                    "{} names no {key} (a fleet from an older deploy/local/fleet: run deploy/local/fleet up)",
                    path.display()
                ))
            })
    }

    /// Evaluates PromQL `query` now on the fleet's Prometheus. An empty result is Prometheus'
    /// "no data"; a query Prometheus refuses is an error naming its reason.
    pub async fn prometheus_query(&self, query: &str) -> Result<Vec<Sample>, Error> {
        let url = self.prometheus_url()?;
        let target = format!("/api/v1/query?query={}", encode(query));
        let (code, body) = request(address(&url)?, "GET", &target, "")
            .await
            .map_err(|e| Error::Fleet(format!("Prometheus {url}: {e}")))?;
        parse_query_response(&body)
            .map_err(|e| Error::Fleet(format!("Prometheus {url} (HTTP {code}) {query:?}: {e}")))
    }

    /// Polls `query` until `done` accepts its result, failing after `timeout` with the last
    /// result or error. Returns the accepted result.
    pub async fn wait_prometheus(
        &self,
        query: &str,
        timeout: Duration,
        mut done: impl FnMut(&[Sample]) -> bool,
    ) -> Result<Vec<Sample>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Prometheus scrapes every second: polling faster only loads it.
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let last = match self.prometheus_query(query).await {
                Ok(result) if done(&result) => return Ok(result),
                Ok(result) => format!("last result {result:?}"),
                Err(e) => format!("last error: {e}"),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(
                    timeout,
                    format!("Prometheus query {query:?} ({last})"),
                ));
            }
        }
    }

    /// Waits until `query` returns data (a non-empty result), and returns it.
    pub async fn wait_prometheus_data(
        &self,
        query: &str,
        timeout: Duration,
    ) -> Result<Vec<Sample>, Error> {
        self.wait_prometheus(query, timeout, |r| !r.is_empty())
            .await
    }
}

/// A gauge series on the fleet's test exporter, set by a test. Prometheus sees it from its next
/// scrape (within about a second); dropping the handle removes the series, so a test leaves the
/// fleet as it found it. Use a label with a [`crate::unique_name`] value so tests running at the
/// same time never share a series.
#[derive(Debug)]
pub struct TestGauge {
    addr: SocketAddr,
    name: String,
    labels: Vec<(String, String)>,
}

impl TestGauge {
    /// Creates series `name{labels}` on the fleet's test exporter with `value`.
    pub async fn new(
        fleet: &Fleet,
        name: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) -> Result<TestGauge, Error> {
        let gauge = TestGauge {
            addr: address(&fleet.test_exporter_url()?)?,
            name: name.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        gauge.set(value).await?;
        Ok(gauge)
    }

    /// Sets the series' value.
    pub async fn set(&self, value: f64) -> Result<(), Error> {
        let body = match value {
            v if v.is_nan() => "NaN".to_string(),
            v => v.to_string(),
        };
        let (code, reply) = request(self.addr, "PUT", &self.target(), &body)
            .await
            .map_err(|e| Error::Fleet(format!("test exporter {}: {e}", self.addr)))?;
        if code == 200 {
            Ok(())
        } else {
            Err(Error::Fleet(format!(
                "test exporter refused {} = {body}: HTTP {code} {reply}",
                self.selector()
            )))
        }
    }

    /// The PromQL selector of exactly this series, e.g. `errors{test="g-1a2b3c4d"}`.
    pub fn selector(&self) -> String {
        let pairs: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={}", serde_json::Value::from(v.as_str())))
            .collect();
        format!("{}{{{}}}", self.name, pairs.join(","))
    }

    fn target(&self) -> String {
        let query: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        format!("/gauges/{}?{}", self.name, query.join("&"))
    }
}

impl Drop for TestGauge {
    /// Removes the series. Drop cannot await, so this is one short blocking request.
    fn drop(&mut self) {
        let result = blocking_request(self.addr, "DELETE", &self.target());
        if !matches!(result, Ok(200)) {
            eprintln!(
                "fleethub-testkit: could not remove test gauge {}: {result:?}",
                self.selector()
            );
        }
    }
}

/// `http://127.0.0.1:PORT` → its socket address (the fleet serves only on loopback, plain HTTP).
fn address(url: &str) -> Result<SocketAddr, Error> {
    url.strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .and_then(|hostport| hostport.parse().ok())
        .ok_or_else(|| Error::Fleet(format!("{url} is not http://IP:PORT")))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// One HTTP/1.0 request: with 1.0 the server closes the connection after its answer and never
/// uses chunked encoding, so the whole response is simply everything read.
async fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(head(addr, method, target, body).as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        split_response(&response)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| std::io::Error::other(format!("{method} {target}: no answer in 10s")))?
}

/// [`request`] without a body or an async runtime, for [`Drop`]; returns the status code.
fn blocking_request(addr: SocketAddr, method: &str, target: &str) -> std::io::Result<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(head(addr, method, target, "").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(split_response(&response)?.0)
}

fn head(addr: SocketAddr, method: &str, target: &str, body: &str) -> String {
    format!(
        "{method} {target} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn split_response(response: &str) -> std::io::Result<(u16, String)> {
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b);
    Ok((status, body.unwrap_or_default().to_string()))
}

/// The result of `/api/v1/query`: a vector's samples, or a scalar as one unlabelled sample.
fn parse_query_response(body: &str) -> Result<Vec<Sample>, String> {
    let reply: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {body:.200}"))?;
    if reply["status"] != "success" {
        return Err(format!("{}: {}", reply["errorType"], reply["error"]));
    }
    let value = |v: &serde_json::Value| -> Result<f64, String> {
        v[1].as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no value in {v}"))
    };
    let data = &reply["data"];
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let labels = serde_json::from_value(s["metric"].clone())
                    .map_err(|e| format!("bad labels in {s}: {e}"))?;
                Ok(Sample {
                    labels,
                    value: value(&s["value"])?,
                })
            })
            .collect(),
        Some("scalar") => Ok(vec![Sample {
            labels: BTreeMap::new(),
            value: value(&data["result"])?,
        }]),
        other => Err(format!("unsupported result type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_responses_parse_into_samples_or_errors() {
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"up","job":"hub"},"value":[1700000000.1,"1"]}]}}"#;
        let samples = parse_query_response(vector).unwrap();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].labels["job"], "hub");
        assert_eq!(samples[0].value, 1.0);
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(parse_query_response(empty).unwrap().is_empty());
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"NaN"]}}"#;
        assert!(parse_query_response(scalar).unwrap()[0].value.is_nan());
        let bad = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert!(
            parse_query_response(bad)
                .unwrap_err()
                .contains("parse error")
        );
    }

    #[test]
    fn urls_labels_and_selectors_are_spelled_for_their_readers() {
        assert_eq!(
            address("http://127.0.0.1:17310/").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 17310))
        );
        assert!(address("https://example.com").is_err());
        assert_eq!(encode("a{b=\"c d\"}"), "a%7Bb%3D%22c%20d%22%7D");
        let gauge = TestGauge {
            addr: ([127, 0, 0, 1], 1).into(),
            name: "errors".into(),
            labels: vec![("test".into(), "x\"y".into())],
        };
        assert_eq!(gauge.selector(), r#"errors{test="x\"y"}"#);
        assert_eq!(gauge.target(), "/gauges/errors?test=x%22y");
        std::mem::forget(gauge);
    }
}
