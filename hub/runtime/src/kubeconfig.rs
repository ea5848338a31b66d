//! Kubernetes clients from a kubeconfig file, or from the in-cluster / default configuration.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::Error;

/// A client for the cluster that `kubeconfig` points at (its current context), or for the
/// in-cluster / `$KUBECONFIG` configuration when `None`.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, Error> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig_error = |source| Error::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(kubeconfig_error)?
        }
        None => Config::infer().await?,
    };
    let builder = kube::client::ClientBuilder::try_from(with_timeouts(config))?;
    Ok(builder
        .with_layer(&RequestLimitLayer::new(MAX_CONCURRENT_REQUESTS))
        .build())
}

/// Requests (not watches) one client has in flight at most. kube sets no bound: the hub opened
/// a connection per concurrent request and held 1,752 connections to its API server, with the
/// memory to match (515 MiB), during 100 concurrent runs. client-go bounds its clients likewise
/// (by rate); a bound on requests in flight keeps the connection pool small without slowing a
/// burst that the API server could serve anyway.
pub const MAX_CONCURRENT_REQUESTS: usize = 64;

/// A request that waits this long for one of the [`MAX_CONCURRENT_REQUESTS`] slots is logged:
/// that many requests of the process were in flight without an answer all that time.
const SLOW_PERMIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a request may wait for its response's next bytes. kube sets none, so a request
/// that never got an answer (a dropped connection the client did not notice) waited forever
/// and halted whatever awaited it: the hub's placement controller stopped for good that way
/// during a benchmark. The API server answers other requests within its own 60 s
/// `--request-timeout`, and closes watches at their `timeoutSeconds`
/// ([`crate::WATCH_TIMEOUT_SECONDS`], 60 s), so this cuts off only what would never have
/// finished, and a dead watch connection is noticed within 75 s.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(75);

fn with_timeouts(mut config: Config) -> Config {
    config.read_timeout = Some(READ_TIMEOUT);
    // Count from when a request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}

/// A [`tower::Layer`] that lets at most `n` requests of a client be in flight; watches (which
/// stay open) pass without a permit. A permit is held until the response's headers arrive.
#[derive(Clone)]
struct RequestLimitLayer {
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl RequestLimitLayer {
    fn new(n: usize) -> Self {
        Self {
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(n)),
        }
    }
}

impl<S> tower::Layer<S> for RequestLimitLayer {
    type Service = RequestLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestLimit {
            inner,
            permits: self.permits.clone(),
        }
    }
}

struct RequestLimit<S> {
    inner: S,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Whether `uri` asks for a watch (`?watch=true` or `?watch=1`).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

impl<S, B> tower::Service<http::Request<B>> for RequestLimit<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let permits = (!is_watch(request.uri())).then(|| self.permits.clone());
        // Only for the log line of a slow wait: a `Uri` clone shares its bytes.
        let uri = permits.is_some().then(|| request.uri().clone());
        // The inner future is lazy: nothing is sent (no connection taken) until it is polled,
        // which happens once a permit is held.
        let response = self.inner.call(request);
        Box::pin(async move {
            let _permit = match permits {
                Some(p) => {
                    let asked = std::time::Instant::now();
                    let permit = p.acquire_owned().await.ok();
                    let waited = asked.elapsed();
                    if waited >= SLOW_PERMIT {
                        tracing::warn!(
                            path = uri.as_ref().map(|u| u.path()),
                            waited_ms = waited.as_millis() as u64,
                            limit = MAX_CONCURRENT_REQUESTS,
                            "a request waited for a free slot: the client's other requests were all unanswered"
                        );
                    }
                    permit
                }
                None => None,
            };
            response.await
        })
    }
}

#[cfg(test)]
mod request_limit_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tower::{Layer, Service, ServiceExt};

    use super::*;

    #[test]
    fn watches_are_recognized_by_their_query() {
        for (uri, watch) in [
            ("/api/v1/pods?watch=true&resourceVersion=1", true),
            ("/api/v1/pods?resourceVersion=1&watch=1", true),
            ("/api/v1/pods?labelSelector=watch%3Dtrue", false),
            ("/api/v1/pods", false),
        ] {
            assert_eq!(is_watch(&uri.parse().unwrap()), watch, "{uri}");
        }
    }

    #[tokio::test]
    async fn at_most_n_requests_are_in_flight_and_watches_pass() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (a, b) = (in_flight.clone(), most.clone());
        let slow = tower::service_fn(move |_: http::Request<()>| {
            let (a, b) = (a.clone(), b.clone());
            async move {
                let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                b.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                a.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(())
            }
        });
        let service = RequestLimitLayer::new(3).layer(slow);
        let service = Arc::new(tokio::sync::Mutex::new(service));
        let calls = (0..12).map(|i| {
            let service = service.clone();
            async move {
                let uri = if i == 0 { "/w?watch=true" } else { "/r" };
                let request = http::Request::get(uri).body(()).unwrap();
                let response = {
                    let mut s = service.lock().await;
                    s.ready().await.unwrap().call(request)
                };
                response.await.unwrap();
            }
        });
        futures::future::join_all(calls).await;
        // Three requests plus the watch, never more.
        assert_eq!(most.load(Ordering::SeqCst), 4);
    }
}
