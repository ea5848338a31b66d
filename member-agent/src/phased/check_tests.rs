//! The member side of a check's `secretRef`: a rollout in the reference design's form (`query:
//! {expr, url, secretRef}`, the URL as `host:port/path`) queries `http://host:port/path` with the
//! `Authorization` header its Secret's keys make; a missing Secret, or one without usable keys,
//! fails the check naming it and sends nothing. Against a fake Prometheus on loopback that
//! records the head of each request it gets.

use std::time::Duration;

use fleethub_crds::metric_check::QueryOutcome;
use fleethub_crds::phased_rollout::PhasedRolloutSpec;
use fleethub_runtime::prometheus::Prometheus;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::check_once;
use super::plan::Query;

/// A Prometheus answering every query with one sample; the head of each request it gets comes
/// out of the receiver. Returns its base URL without a scheme, with a path, as the reference
/// design writes it.
async fn fake_prometheus() -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (heads, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = heads.send(String::from_utf8_lossy(&head).into_owned());
            let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"1"]}]}}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (format!("127.0.0.1:{port}/xx"), received)
}

/// The query a reference-form rollout's check makes, read through the one reading of a check.
fn reference_query(url: &str) -> Query {
    let spec: PhasedRolloutSpec = serde_json::from_value(json!({
        "targetRef": "web",
        "check": {"initialDelaySeconds": 0, "periodSeconds": 1, "successThreshold": 1,
                  "query": {"expr": "up", "url": url, "secretRef": "prom-secret"}},
    }))
    .unwrap();
    let check = spec.check.effective().unwrap();
    Query {
        url: check.url,
        query: check.query,
        secret_name: check.secret_name,
    }
}

/// A Secret as the API server returns it (`stringData` is folded into `data`).
fn secret(pairs: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The value of header `name` in a request head (names are case-insensitive).
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

async fn next_head(received: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), received.recv())
        .await
        .expect("the fake Prometheus got a request")
        .unwrap()
}

#[tokio::test]
async fn the_secrets_keys_are_sent_to_the_url_given_without_a_scheme() {
    let (url, mut received) = fake_prometheus().await;
    let query = reference_query(&url);
    assert_eq!(query.url, format!("http://{url}"));
    let prometheus = Prometheus::new().unwrap();

    // The reference's Secret: token (bearer) wins over username and password.
    let reference = secret(&[
        ("token", "token"),
        ("password", "password"),
        ("username", "username"),
    ]);
    let outcome = check_once(&prometheus, "app", &query, Some(&reference)).await;
    assert_eq!(outcome, QueryOutcome::Data("1".into()));
    let head = next_head(&mut received).await;
    assert!(
        head.starts_with("GET /xx/api/v1/query?query=up HTTP/1.1"),
        "{head}"
    );
    assert_eq!(
        header(&head, "authorization").as_deref(),
        Some("Bearer token")
    );

    // username and password only: basic auth.
    let basic = secret(&[("username", "prom"), ("password", "s3cret")]);
    let outcome = check_once(&prometheus, "app", &query, Some(&basic)).await;
    assert_eq!(outcome, QueryOutcome::Data("1".into()));
    let head = next_head(&mut received).await;
    // base64("prom:s3cret")
    assert_eq!(
        header(&head, "authorization").as_deref(),
        Some("Basic cHJvbTpzM2NyZXQ=")
    );

    // A check naming no Secret sends no credentials.
    let anonymous = Query {
        secret_name: None,
        ..query.clone()
    };
    let outcome = check_once(&prometheus, "app", &anonymous, None).await;
    assert_eq!(outcome, QueryOutcome::Data("1".into()));
    let head = next_head(&mut received).await;
    assert_eq!(header(&head, "authorization"), None, "{head}");
}

#[tokio::test]
async fn a_missing_or_unusable_secret_fails_the_check_naming_it_and_sends_nothing() {
    let (url, mut received) = fake_prometheus().await;
    let query = reference_query(&url);
    let prometheus = Prometheus::new().unwrap();
    let missing = check_once(&prometheus, "app", &query, None).await;
    match missing {
        QueryOutcome::Error(e) => {
            assert!(e.contains("Secret app/prom-secret"), "{e}");
            assert!(e.contains("does not exist"), "{e}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let keyless = secret(&[("username", "prom")]);
    match check_once(&prometheus, "app", &query, Some(&keyless)).await {
        QueryOutcome::Error(e) => {
            assert!(e.contains("Secret app/prom-secret"), "{e}");
            assert!(e.contains("token") && e.contains("password"), "{e}");
            assert!(!e.contains("prom\""), "no value in the message: {e}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(received.try_recv().is_err(), "a request was sent");
}
