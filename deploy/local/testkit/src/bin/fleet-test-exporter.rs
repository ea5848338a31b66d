//! fleet-test-exporter: a Prometheus target whose gauges the tests set, so a test can make a
//! metric gate pass or fail on the real Prometheus the local fleet runs.
//!
//! `deploy/local/fleet up` starts it on 127.0.0.1:FLEET_PORT_BASE+311 and Prometheus scrapes
//! it every second. Values live in memory only:
//!
//! ```text
//! PUT    /gauges/<name>?label=value&...   body: the value (e.g. `0.25`, `NaN`, `+Inf`)
//! DELETE /gauges/<name>?label=value&...   removes that one series
//! GET    /metrics                         every series, in the Prometheus text format
//! GET    /healthz
//! ```
//!
//! Label values are percent-decoded (`+` is a space); a series is its name plus its exact label
//! set.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, put};

/// A series' labels, sorted by name so one label set is one key.
type Labels = BTreeMap<String, String>;
/// Every gauge: metric name → label set → value.
type Gauges = Arc<Mutex<BTreeMap<String, BTreeMap<Labels, f64>>>>;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let listen = match (args.next().as_deref(), args.next()) {
        (Some("--listen"), Some(addr)) => addr,
        _ => {
            eprintln!("usage: fleet-test-exporter --listen 127.0.0.1:PORT");
            std::process::exit(2);
        }
    };
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {listen}: {e}"));
    eprintln!("fleet-test-exporter listening on http://{listen}/metrics");
    axum::serve(listener, router(Gauges::default()))
        .await
        .expect("serving stopped");
}

fn router(gauges: Gauges) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/gauges/{name}", put(set_gauge).delete(delete_gauge))
        .with_state(gauges)
}

async fn metrics(State(gauges): State<Gauges>) -> ([(&'static str, &'static str); 1], String) {
    let gauges = gauges.lock().unwrap_or_else(PoisonError::into_inner);
    (
        [("content-type", "text/plain; version=0.0.4")],
        render(&gauges),
    )
}

async fn set_gauge(
    State(gauges): State<Gauges>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    body: String,
) -> (StatusCode, String) {
    let labels = match series(&name, query.as_deref()) {
        Ok(labels) => labels,
        Err(e) => return (StatusCode::BAD_REQUEST, e),
    };
    let Ok(value) = body.trim().parse::<f64>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!("the body {body:?} is not a number\n"),
        );
    };
    let mut gauges = gauges.lock().unwrap_or_else(PoisonError::into_inner);
    gauges.entry(name).or_default().insert(labels, value);
    (StatusCode::OK, String::new())
}

async fn delete_gauge(
    State(gauges): State<Gauges>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> (StatusCode, String) {
    let labels = match series(&name, query.as_deref()) {
        Ok(labels) => labels,
        Err(e) => return (StatusCode::BAD_REQUEST, e),
    };
    let mut gauges = gauges.lock().unwrap_or_else(PoisonError::into_inner);
    let removed = gauges
        .get_mut(&name)
        .and_then(|series| series.remove(&labels))
        .is_some();
    if gauges.get(&name).is_some_and(BTreeMap::is_empty) {
        gauges.remove(&name);
    }
    if removed {
        (StatusCode::OK, String::new())
    } else {
        (StatusCode::NOT_FOUND, "no such series\n".into())
    }
}

/// Checks the metric name and decodes the label set from the query string.
fn series(name: &str, query: Option<&str>) -> Result<Labels, String> {
    if !valid_name(name, true) {
        return Err(format!("{name:?} is not a valid metric name\n"));
    }
    let mut labels = Labels::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (key, value) = (decode(key)?, decode(value)?);
        if !valid_name(&key, false) || key.starts_with("__") {
            return Err(format!("{key:?} is not a valid label name\n"));
        }
        labels.insert(key, value);
    }
    Ok(labels)
}

/// Prometheus' name rules: `[a-zA-Z_:][a-zA-Z0-9_:]*` for metrics, no `:` in label names.
fn valid_name(name: &str, metric: bool) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':');
    name.chars()
        .next()
        .is_some_and(|c| ok(c) && !c.is_ascii_digit())
        && name.chars().all(ok)
}

/// Percent-decoding of one query-string component (`+` is a space).
fn decode(s: &str) -> Result<String, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = [bytes.next(), bytes.next()];
                let digit = |d: Option<u8>| (d? as char).to_digit(16);
                match (digit(hex[0]), digit(hex[1])) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => return Err(format!("bad percent-encoding in {s:?}\n")),
                }
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} does not decode to UTF-8\n"))
}

/// The Prometheus text exposition format (0.0.4) of every gauge.
fn render(gauges: &BTreeMap<String, BTreeMap<Labels, f64>>) -> String {
    let mut out = String::new();
    for (name, series) in gauges {
        out.push_str(&format!("# TYPE {name} gauge\n"));
        for (labels, value) in series {
            out.push_str(name);
            if !labels.is_empty() {
                let pairs: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                out.push_str(&format!("{{{}}}", pairs.join(",")));
            }
            out.push_str(&format!(" {}\n", number(*value)));
        }
    }
    out
}

fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// A value as the text format spells it (Rust would write `inf` and `NaN`).
fn number(v: f64) -> String {
    match v {
        v if v.is_nan() => "NaN".into(),
        f64::INFINITY => "+Inf".into(),
        f64::NEG_INFINITY => "-Inf".into(),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_decoded_and_checked() {
        let labels = series("http_errors", Some("cluster=member-1&msg=a%20b+c%22")).unwrap();
        assert_eq!(labels["cluster"], "member-1");
        assert_eq!(labels["msg"], "a b c\"");
        assert!(series("1bad", None).is_err());
        assert!(series("ok", Some("bad-label=x")).is_err());
        assert!(series("ok", Some("__name__=x")).is_err());
        assert!(series("ok", Some("a=%zz")).is_err());
    }

    #[test]
    fn the_text_format_escapes_values_and_spells_special_numbers() {
        let mut gauges = BTreeMap::new();
        let labels = series("g", Some("b=x%22y&a=1")).unwrap();
        gauges.insert(
            "g".to_string(),
            BTreeMap::from([(labels, 0.5), (Labels::new(), f64::INFINITY)]),
        );
        assert_eq!(
            render(&gauges),
            "# TYPE g gauge\ng +Inf\ng{a=\"1\",b=\"x\\\"y\"} 0.5\n"
        );
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(-2.0), "-2");
    }
}
