//! Graceful shutdown: SIGTERM or SIGINT cancels a token every task watches.

use tokio_util::sync::CancellationToken;

/// Returns a token that is cancelled when the process receives SIGTERM or SIGINT.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let signal = wait_for_signal().await;
        tracing::info!(signal, "shutting down");
        cancel.cancel();
    });
    token
}

/// Runs `work` until it ends; once `cancel` is cancelled, lets it finish within `grace`, then
/// drops it with a warning. A controller whose caches have not synced yet does not notice a
/// stop (kube-runtime holds it until its store is ready), and a request stuck on an unresponsive
/// API server waits for its read timeout: neither may keep a stopping process alive. Dropping
/// cancels the reconciles in flight; everything is in the API servers, so nothing is lost.
pub async fn stop_within(
    grace: std::time::Duration,
    work: impl std::future::Future<Output = ()>,
    cancel: &CancellationToken,
) {
    tokio::pin!(work);
    tokio::select! {
        _ = &mut work => {}
        _ = cancel.cancelled() => {
            if tokio::time::timeout(grace, &mut work).await.is_err() {
                tracing::warn!(?grace, "did not stop in time; dropping what was still running");
            }
        }
    }
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        _ => {
            // Without signal handlers the process can still be killed; never shut down by itself.
            tracing::warn!("cannot install signal handlers; graceful shutdown is unavailable");
            std::future::pending().await
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "ctrl-c"
}
