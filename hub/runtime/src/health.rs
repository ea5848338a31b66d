//! The operational HTTP endpoints every fleethub process serves:
//! - `/healthz`: the process is alive (always 200 while it serves);
//! - `/readyz`: 200 once every readiness check passed, else 503 naming the checks not yet passed;
//! - `/metrics`: Prometheus text exposition of the process's registry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::Error;

/// Readiness checks and the metrics registry, shared between the process and its endpoints.
#[derive(Clone)]
pub struct Health {
    checks: Arc<Mutex<BTreeMap<String, Result<(), String>>>>,
    registry: Arc<Registry>,
}

impl Health {
    /// A health state whose readiness needs every one of `checks` to be marked passed.
    pub fn new(registry: Registry, checks: &[&str]) -> Self {
        let checks = checks
            .iter()
            .map(|c| (c.to_string(), Err("not checked yet".to_string())))
            .collect();
        Self {
            checks: Arc::new(Mutex::new(checks)),
            registry: Arc::new(registry),
        }
    }

    /// Records the outcome of readiness check `check`.
    pub fn set(&self, check: &str, outcome: Result<(), String>) {
        let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        checks.insert(check.to_string(), outcome);
    }

    /// `Ok` when every check passed, else the failing checks and why.
    pub fn readiness(&self) -> Result<(), String> {
        let checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        let failing: Vec<String> = checks
            .iter()
            .filter_map(|(name, r)| r.as_ref().err().map(|why| format!("{name}: {why}")))
            .collect();
        if failing.is_empty() {
            Ok(())
        } else {
            Err(failing.join("\n"))
        }
    }

    /// The router serving `/healthz`, `/readyz` and `/metrics`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
    }
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    match health.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{why}\n"),
        ),
    }
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    let mut body = String::new();
    match encode(&mut body, &health.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

/// Serves `router` on `addr` until `shutdown` is cancelled, then finishes in-flight requests.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(Error::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_waits_for_every_check() {
        let health = Health::new(Registry::default(), &["hub", "member"]);
        assert_eq!(
            get(health.router(), "/healthz").await,
            (StatusCode::OK, "ok\n".into())
        );

        let (status, body) = get(health.router(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("hub: not checked yet") && body.contains("member: not checked yet"),
            "{body}"
        );

        health.set("hub", Ok(()));
        health.set("member", Err("connection refused".into()));
        let (status, body) = get(health.router(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            !body.contains("hub:") && body.contains("member: connection refused"),
            "{body}"
        );

        health.set("member", Ok(()));
        assert_eq!(
            get(health.router(), "/readyz").await,
            (StatusCode::OK, "ok\n".into())
        );
    }

    #[tokio::test]
    async fn metrics_expose_the_registry() {
        let mut registry = Registry::with_prefix("fleethub");
        let counter = Counter::<u64>::default();
        registry.register("test_events", "Events seen by the test", counter.clone());
        counter.inc_by(3);
        let health = Health::new(registry, &[]);
        let (status, body) = get(health.router(), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("fleethub_test_events_total 3"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[tokio::test]
    async fn unknown_paths_are_not_found() {
        let health = Health::new(Registry::default(), &[]);
        assert_eq!(get(health.router(), "/nope").await.0, StatusCode::NOT_FOUND);
    }
}
