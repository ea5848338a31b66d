//! demo-app: the workload the local fleet's staged rollouts move between versions.
//!
//! One binary serves every version; the image sets which one (`DEMO_VERSION`, see
//! `deploy/local/build-images`), as a real release would be built with its version baked in.
//!
//! ```text
//! GET /          "demo-app 1.1.0 on <pod name>\n"   (counted in demo_requests_total)
//! GET /fail      500, counted in demo_errors_total too (a test's way of making errors)
//! GET /healthz   liveness      GET /readyz   readiness
//! GET /metrics   demo_requests_total, demo_errors_total, demo_info{version}
//! ```
//!
//! Version `1.2.0` is a deliberately broken release: it exits at start with an error, so its pods
//! end in `CrashLoopBackOff` and never become ready. Version `1.3.0` is broken the sly way: it
//! turns ready, then exits with an error after about 20 s (every time it starts), as a release
//! that passes its rollout and fails in its soak.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// The version that is broken on purpose (the staged-rollout demos roll it out to see it fail).
const BROKEN_VERSION: &str = "1.2.0";
/// The version that turns ready and exits [`LATE_CRASH_AFTER`] later.
const LATE_CRASH_VERSION: &str = "1.3.0";
const LATE_CRASH_AFTER: std::time::Duration = std::time::Duration::from_secs(20);

struct App {
    version: String,
    pod: String,
    requests: AtomicU64,
    errors: AtomicU64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let version =
        std::env::var("DEMO_VERSION").unwrap_or_else(|_| env!("CARGO_PKG_VERSION").to_string());
    if version == BROKEN_VERSION {
        eprintln!("demo-app {version}: this release is broken on purpose; exiting");
        std::process::exit(1);
    }
    let listen = std::env::var("DEMO_LISTEN").unwrap_or_else(|_| "0.0.0.0:8080".to_string());
    let pod = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default();
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("demo-app {version}: cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("demo-app {version} listening on http://{listen}");
    if version == LATE_CRASH_VERSION {
        let v = version.clone();
        tokio::spawn(async move {
            tokio::time::sleep(LATE_CRASH_AFTER).await;
            eprintln!(
                "demo-app {v}: this release fails after it turned ready, on purpose; exiting"
            );
            std::process::exit(1);
        });
    }
    let app = Arc::new(App {
        version,
        pod,
        requests: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .unwrap_or_else(|e| panic!("cannot watch SIGTERM: {e}"));
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    if let Err(e) = axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("demo-app: serving failed: {e}");
        std::process::exit(1);
    }
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/fail", get(fail))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .with_state(app)
}

async fn root(State(app): State<Arc<App>>) -> String {
    app.requests.fetch_add(1, Ordering::Relaxed);
    if app.pod.is_empty() {
        format!("demo-app {}\n", app.version)
    } else {
        format!("demo-app {} on {}\n", app.version, app.pod)
    }
}

async fn fail(State(app): State<Arc<App>>) -> (StatusCode, String) {
    app.requests.fetch_add(1, Ordering::Relaxed);
    app.errors.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("demo-app {}: failed on request\n", app.version),
    )
}

async fn metrics(State(app): State<Arc<App>>) -> ([(&'static str, &'static str); 1], String) {
    let text = format!(
        "# HELP demo_requests_total Requests served (every path but /metrics, /healthz and /readyz).\n\
         # TYPE demo_requests_total counter\n\
         demo_requests_total {}\n\
         # HELP demo_errors_total Requests answered with an error (5xx).\n\
         # TYPE demo_errors_total counter\n\
         demo_errors_total {}\n\
         # HELP demo_info The running version.\n\
         # TYPE demo_info gauge\n\
         demo_info{{version=\"{}\"}} 1\n",
        app.requests.load(Ordering::Relaxed),
        app.errors.load(Ordering::Relaxed),
        app.version
    );
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::IntoFuture as _;

    async fn get(app: &Arc<App>, path: &str) -> (u16, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(axum::serve(listener, router(app.clone())).into_future());
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        server.abort();
        let status = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
        (status, body)
    }

    #[tokio::test]
    async fn answers_its_version_and_counts_requests_and_errors() {
        let app = Arc::new(App {
            version: "1.1.0".into(),
            pod: "demo-abc".into(),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        assert_eq!(
            get(&app, "/").await,
            (200, "demo-app 1.1.0 on demo-abc\n".into())
        );
        assert_eq!(get(&app, "/fail").await.0, 500);
        let (status, metrics) = get(&app, "/metrics").await;
        assert_eq!(status, 200);
        assert!(metrics.contains("demo_requests_total 2\n"), "{metrics}");
        assert!(metrics.contains("demo_errors_total 1\n"), "{metrics}");
        assert!(
            metrics.contains("demo_info{version=\"1.1.0\"} 1\n"),
            "{metrics}"
        );
        assert_eq!(get(&app, "/readyz").await.0, 200);
    }
}
