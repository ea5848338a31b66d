//! The metric gates' Prometheus client, for the hub and the member agent: one instant query
//! (`GET /api/v1/query`), read with alerting semantics. It never fails: an unreachable server, a refused query or an answer that
//! does not read becomes [`QueryOutcome::Error`] with a message naming the URL, so a gate waits
//! and says why instead of passing. A Prometheus behind authentication gets the [`Auth`] read
//! from a Secret (`metricCheck.secretRef`).

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Request, header};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

use fleethub_crds::metric_check::QueryOutcome;

/// How long one query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read (a query returning a huge vector is still one pass).
const MAX_ANSWER: usize = 4 << 20;

/// Credentials a Prometheus wants, from a Secret's keys `token`, or `username` and `password`.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic <base64(username:password)>`.
    Basic {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    /// Never the secret itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(…)"),
            Auth::Basic { username, .. } => write!(f, "Basic({username}:…)"),
        }
    }
}

impl Auth {
    /// Reads a Secret: `token` (bearer) wins over `username` + `password` (basic). The error
    /// says which keys are missing, never a value.
    pub fn from_secret(secret: &Secret) -> Result<Self, String> {
        let key = |k: &str| -> Result<Option<String>, String> {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(k))
                .map(|b| b.0.clone())
                .or_else(|| {
                    let s = secret.string_data.as_ref()?.get(k)?;
                    Some(s.clone().into_bytes())
                });
            match bytes {
                None => Ok(None),
                Some(b) if b.is_empty() => Ok(None),
                Some(b) => String::from_utf8(b)
                    .map(|s| Some(s.trim_end_matches(['\r', '\n']).to_string()))
                    .map_err(|_| format!("key {k} is not UTF-8")),
            }
        };
        if let Some(token) = key("token")? {
            return Ok(Auth::Bearer(token));
        }
        match (key("username")?, key("password")?) {
            (Some(username), Some(password)) => Ok(Auth::Basic { username, password }),
            _ => Err("has neither key token nor keys username and password".to_string()),
        }
    }

    fn header(&self) -> Result<HeaderValue, String> {
        let value = match self {
            Auth::Bearer(token) => format!("Bearer {token}"),
            Auth::Basic { username, password } => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            ),
        };
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| "the credentials hold a character a header cannot".to_string())?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// A client for any number of Prometheus servers (each gate names its own URL).
#[derive(Clone)]
pub struct Prometheus {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl Prometheus {
    /// A client trusting the system's root certificates for `https://` URLs.
    pub fn new() -> std::io::Result<Self> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// Runs `query` at `base` (e.g. `http://127.0.0.1:9090`) now.
    pub async fn query(&self, base: &str, query: &str) -> QueryOutcome {
        self.query_with(base, query, None).await
    }

    /// Runs `query` at `base` now, with `auth` if given.
    pub async fn query_with(&self, base: &str, query: &str, auth: Option<&Auth>) -> QueryOutcome {
        match tokio::time::timeout(QUERY_TIMEOUT, self.ask(base, query, auth)).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => QueryOutcome::Error(format!("{base}: {e}")),
            Err(_) => QueryOutcome::Error(format!(
                "{base}: no answer within {}s",
                QUERY_TIMEOUT.as_secs()
            )),
        }
    }

    async fn ask(
        &self,
        base: &str,
        query: &str,
        auth: Option<&Auth>,
    ) -> Result<QueryOutcome, String> {
        let answer = self
            .client
            .request(request(base, query, auth)?)
            .await
            .map_err(|e| format!("cannot reach Prometheus: {e}"))?;
        let code = answer.status();
        let body = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        read_answer(code.as_u16(), &body)
    }
}

/// `GET <base>/api/v1/query?query=…`, with an `Authorization` header for `auth`.
fn request(base: &str, query: &str, auth: Option<&Auth>) -> Result<Request<Empty<Bytes>>, String> {
    let mut url = url::Url::parse(base).map_err(|e| format!("not a URL: {e}"))?;
    url.path_segments_mut()
        .map_err(|()| "not a base URL".to_string())?
        .pop_if_empty()
        .extend(["api", "v1", "query"]);
    url.query_pairs_mut().append_pair("query", query);
    let mut request = Request::get(url.as_str());
    if let Some(auth) = auth {
        request = request.header(header::AUTHORIZATION, auth.header()?);
    }
    request
        .body(Empty::new())
        .map_err(|e| format!("not a request: {e}"))
}

/// Reads an answer of the query API.
fn read_answer(code: u16, body: &[u8]) -> Result<QueryOutcome, String> {
    #[derive(Deserialize)]
    struct Answer {
        status: String,
        #[serde(default)]
        data: Option<Data>,
        #[serde(default)]
        error: Option<String>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Data {
        result_type: String,
        result: serde_json::Value,
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|_| {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        format!("HTTP {code}, not a Prometheus answer: {text}")
    })?;
    if answer.status != "success" {
        return Err(format!(
            "the query was refused (HTTP {code}): {}",
            answer.error.unwrap_or_default()
        ));
    }
    let data = answer.data.ok_or("a success without data")?;
    Ok(match data.result_type.as_str() {
        // Scalars and strings always hold a value.
        "scalar" | "string" => QueryOutcome::Data(sample_value(&data.result)),
        _ => match data.result.as_array().and_then(|r| r.first()) {
            None => QueryOutcome::NoData,
            Some(series) => QueryOutcome::Data(
                series
                    .get("value")
                    .map(sample_value)
                    .unwrap_or_else(|| "a range".to_string()),
            ),
        },
    })
}

/// `[ts, "value"]` → `value`.
fn sample_value(sample: &serde_json::Value) -> String {
    sample
        .get(1)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_passes_an_empty_vector_does_not_and_a_refusal_is_an_error() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":"a"},"value":[1700000000.1,"0.004"]}]}}"#;
        assert_eq!(
            read_answer(200, vector),
            Ok(QueryOutcome::Data("0.004".into()))
        );
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(read_answer(200, empty), Ok(QueryOutcome::NoData));
        let scalar =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
        assert_eq!(read_answer(200, scalar), Ok(QueryOutcome::Data("1".into())));
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        let e = read_answer(400, refused).unwrap_err();
        assert!(e.contains("HTTP 400") && e.contains("parse error"), "{e}");
        let html = b"<html>gateway</html>";
        assert!(read_answer(502, html).unwrap_err().contains("HTTP 502"));
    }

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_secret_gives_a_bearer_token_or_basic_auth_and_names_missing_keys() {
        let auth = Auth::from_secret(&secret(&[("token", "t0k\n"), ("username", "u")])).unwrap();
        assert_eq!(auth, Auth::Bearer("t0k".into()));
        let auth = Auth::from_secret(&secret(&[("username", "u"), ("password", "p")])).unwrap();
        assert_eq!(
            auth,
            Auth::Basic {
                username: "u".into(),
                password: "p".into()
            }
        );
        assert!(!format!("{auth:?}").contains('p'), "{auth:?}");
        let e = Auth::from_secret(&secret(&[("username", "u")])).unwrap_err();
        assert!(e.contains("token") && e.contains("password"), "{e}");
        assert!(Auth::from_secret(&Secret::default()).is_err());
    }

    #[test]
    fn the_request_carries_the_query_and_the_credentials() {
        let plain = request("http://p:9090/prom/", "up == 1", None).unwrap();
        assert_eq!(
            plain.uri().to_string(),
            "http://p:9090/prom/api/v1/query?query=up+%3D%3D+1"
        );
        assert!(plain.headers().get(header::AUTHORIZATION).is_none());
        let basic = Auth::Basic {
            username: "fleet".into(),
            password: "s3cret".into(),
        };
        let r = request("http://p:9090", "up", Some(&basic)).unwrap();
        let value = r.headers().get(header::AUTHORIZATION).unwrap();
        // base64("fleet:s3cret")
        assert_eq!(value, "Basic ZmxlZXQ6czNjcmV0");
        assert!(value.is_sensitive(), "kept out of logs");
        let r = request("http://p:9090", "up", Some(&Auth::Bearer("abc".into()))).unwrap();
        assert_eq!(r.headers()[header::AUTHORIZATION], "Bearer abc");
    }

    #[tokio::test]
    async fn an_unreachable_server_is_an_error_naming_it() {
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let base = format!("http://127.0.0.1:{port}");
        match Prometheus::new().unwrap().query(&base, "up").await {
            QueryOutcome::Error(e) => assert!(e.contains(&base), "{e}"),
            other => panic!("expected an error, got {other:?}"),
        }
    }
}
