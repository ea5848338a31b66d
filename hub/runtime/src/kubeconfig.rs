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
    client_for(config)
}

/// A client for `config` with fleethub's timeouts ([`READ_TIMEOUT`]), request limit
/// ([`MAX_CONCURRENT_REQUESTS`]) and bounded retry ([`TransientRetry`]), as [`client`] makes
/// them; for a process that builds its own `Config` (the dashboard: one per signed-in user).
/// Must be called within a tokio runtime.
pub fn client_for(config: Config) -> Result<Client, Error> {
    let mut config = with_timeouts(config);
    // kube's own retry (up to 15 times, each wait as long as the server's `Retry-After` or up
    // to 1,000 s) is replaced by [`TransientRetry`], in the layers added below.
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&limited_and_retried(
            MAX_CONCURRENT_REQUESTS,
            crate::retry_wait_max(),
        ))
        .build())
}

/// [`limited_and_retried`]'s layers, outermost last.
type ClientLayers = tower::layer::util::Stack<
    RequestLimitLayer,
    tower::layer::util::Stack<
        tower::buffer::BufferLayer<http::Request<kube::client::Body>>,
        tower::layer::util::Stack<
            tower::retry::RetryLayer<TransientRetry>,
            tower::layer::util::Identity,
        >,
    >,
>;

/// The layers fleethub adds to kube's client: at most `slots` requests in flight
/// ([`RequestLimitLayer`]), and [`TransientRetry`] outside it, behind a buffer (the retry needs a
/// service it can call again), so a request waiting to be sent again holds no slot.
fn limited_and_retried(slots: usize, max_wait: std::time::Duration) -> ClientLayers {
    tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(TransientRetry::new(max_wait)))
        .layer(tower::buffer::BufferLayer::new(BUFFERED_REQUESTS))
        .layer(RequestLimitLayer::new(slots))
        .into_inner()
}

/// Requests queued for the request limit's layer (kube's own buffer holds as many).
const BUFFERED_REQUESTS: usize = 1024;

/// How often a request answered 429, 503 or 504 is sent again before its caller sees the error.
pub const TRANSIENT_RETRIES: u32 = 10;

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

/// The client's retry of answers that say "not now" (429 Too Many Requests, 503 Service
/// Unavailable, 504 Gateway Timeout except to a create), as kube's default retry but with a
/// bounded wait: at most [`TRANSIENT_RETRIES`] times, each wait [`crate::WATCH_BACKOFF`]'s
/// jittered doubling or the server's `Retry-After` if longer, never longer than the process's
/// longest wait ([`crate::set_retry_wait_max`]). A restarted API server answers 503 with
/// `Retry-After: 5` until its paths are installed (about a second): kube's retry honoured the
/// 5 s, so every watch and request of the hub sent in that second waited 5 s, past the hub's own
/// bound.
#[derive(Clone, Debug)]
pub(crate) struct TransientRetry {
    attempt: u32,
    max_wait: std::time::Duration,
}

impl TransientRetry {
    pub(crate) fn new(max_wait: std::time::Duration) -> Self {
        Self {
            attempt: 0,
            max_wait,
        }
    }

    /// The wait before the next try, for an answer whose `Retry-After` said `server`.
    fn wait(&self, server: Option<std::time::Duration>) -> std::time::Duration {
        use backon::BackoffBuilder as _;
        let ours = crate::jittered_within(crate::WATCH_BACKOFF.first, self.max_wait)
            .build()
            .nth(self.attempt as usize)
            .unwrap_or(self.max_wait);
        let wanted = ours.max(server.unwrap_or_default());
        match wanted < self.max_wait {
            true => wanted,
            // Capped: jittered between half the bound and all of it, so that the clients of
            // many processes told the same `Retry-After` do not all come back at once.
            false => self.max_wait.mul_f64(0.5 + fastrand::f64() / 2.0),
        }
    }
}

/// `Retry-After` in seconds (the API server sends no dates).
fn retry_after(headers: &http::HeaderMap) -> Option<std::time::Duration> {
    let seconds = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    Some(std::time::Duration::from_secs(seconds.trim().parse().ok()?))
}

impl<Res, E> tower::retry::Policy<http::Request<kube::client::Body>, http::Response<Res>, E>
    for TransientRetry
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut http::Request<kube::client::Body>,
        result: &mut Result<http::Response<Res>, E>,
    ) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        let status = response.status();
        let transient = match status {
            // Not served: the API server did not act on the request.
            http::StatusCode::TOO_MANY_REQUESTS | http::StatusCode::SERVICE_UNAVAILABLE => true,
            // Timed out, perhaps after it was acted on. Sent again, every request but a create
            // finds the same outcome; a create would be refused as AlreadyExists, hiding that
            // the first one worked, so its caller sees the timeout instead.
            http::StatusCode::GATEWAY_TIMEOUT => request.method() != http::Method::POST,
            _ => false,
        };
        if !transient || self.attempt >= TRANSIENT_RETRIES {
            return None;
        }
        let wait = self.wait(retry_after(response.headers()));
        self.attempt += 1;
        tracing::debug!(
            path = request.uri().path(),
            status = status.as_u16(),
            attempt = self.attempt,
            wait_ms = wait.as_millis() as u64,
            "request answered \"not now\"; sending it again"
        );
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(
        &mut self,
        request: &http::Request<kube::client::Body>,
    ) -> Option<http::Request<kube::client::Body>> {
        // A streamed body cannot be sent twice: such a request is not retried.
        let body = request.body().try_clone()?;
        let mut copy = http::Request::new(body);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
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

#[cfg(test)]
mod transient_retry_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use kube::client::Body;
    use tower::{BoxError, Layer, Service, ServiceExt};

    use super::*;

    const MAX_WAIT: Duration = Duration::from_secs(1);

    fn answer(status: u16, retry_after: Option<&str>) -> http::Response<()> {
        let mut response = http::Response::builder().status(status);
        if let Some(s) = retry_after {
            response = response.header(http::header::RETRY_AFTER, s);
        }
        response.body(()).unwrap()
    }

    /// A server answering `first` to the first `n` requests to `/busy`, then 200; every other path
    /// gets 200 at once. Counts the requests to `/busy`.
    fn server(
        n: u32,
        first: (u16, Option<&'static str>),
    ) -> (
        impl Service<
            http::Request<Body>,
            Response = http::Response<()>,
            Error = BoxError,
            Future = impl Send,
        > + Send
        + 'static,
        Arc<AtomicU32>,
    ) {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let service = tower::service_fn(move |request: http::Request<Body>| {
            let calls = counted.clone();
            async move {
                if request.uri().path() != "/busy" {
                    return Ok::<_, BoxError>(answer(200, None));
                }
                let k = calls.fetch_add(1, Ordering::SeqCst);
                Ok(match k < n {
                    true => answer(first.0, first.1),
                    false => answer(200, None),
                })
            }
        });
        (service, calls)
    }

    /// `request` through `client`, answered.
    async fn send<S>(client: &mut S, request: http::Request<Body>) -> http::Response<()>
    where
        S: Service<http::Request<Body>, Response = http::Response<()>>,
        S::Error: std::fmt::Debug,
    {
        client.ready().await.unwrap().call(request).await.unwrap()
    }

    /// `GET path` through `client`, answered.
    async fn get<S>(client: &mut S, path: &str) -> http::Response<()>
    where
        S: Service<http::Request<Body>, Response = http::Response<()>>,
        S::Error: std::fmt::Debug,
    {
        send(
            client,
            http::Request::get(path).body(Body::empty()).unwrap(),
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_asking_for_5s_is_retried_within_the_process_bound() {
        let (inner, calls) = server(2, (503, Some("5")));
        let mut client = limited_and_retried(4, MAX_WAIT).layer(inner);
        let started = tokio::time::Instant::now();
        let response = get(&mut client, "/busy").await;
        assert_eq!(response.status(), 200);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        // Two waits of at most 1 s each, where the server's Retry-After said 5 s each.
        assert!(started.elapsed() <= 2 * MAX_WAIT, "{:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_retry_after_below_the_bound_is_waited_out() {
        // Our own first waits are 250-500 ms; the server asks for 1 s each time.
        let (inner, calls) = server(2, (429, Some("1")));
        let mut client = limited_and_retried(4, Duration::from_secs(5)).layer(inner);
        let started = tokio::time::Instant::now();
        let response = get(&mut client, "/busy").await;
        assert_eq!(response.status(), 200);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_wait_at_the_bound_is_jittered() {
        let policy = TransientRetry::new(MAX_WAIT);
        let waits: Vec<Duration> = (0..50)
            .map(|_| policy.wait(Some(Duration::from_secs(5))))
            .collect();
        assert!(
            waits.iter().all(|w| *w >= MAX_WAIT / 2 && *w <= MAX_WAIT),
            "{waits:?}"
        );
        assert!(waits.iter().any(|w| *w != waits[0]), "{waits:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn transient_answers_are_retried_a_bounded_number_of_times() {
        let (inner, calls) = server(u32::MAX, (429, Some("1")));
        let mut client = limited_and_retried(4, MAX_WAIT).layer(inner);
        let response = get(&mut client, "/busy").await;
        assert_eq!(response.status(), 429);
        assert_eq!(calls.load(Ordering::SeqCst), TRANSIENT_RETRIES + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_that_timed_out_is_not_sent_again() {
        let (inner, calls) = server(1, (504, None));
        let mut client = limited_and_retried(4, MAX_WAIT).layer(inner);
        let request = http::Request::post("/busy")
            .body(Body::from(b"{}".to_vec()))
            .unwrap();
        let response = send(&mut client, request).await;
        assert_eq!(response.status(), 504);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // A read that timed out is.
        let (inner, calls) = server(1, (504, None));
        let mut client = limited_and_retried(4, MAX_WAIT).layer(inner);
        assert_eq!(get(&mut client, "/busy").await.status(), 200);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn other_answers_are_not_retried() {
        for status in [200, 404, 409, 410, 422, 500] {
            let (inner, calls) = server(1, (status, None));
            let mut client = limited_and_retried(4, MAX_WAIT).layer(inner);
            let response = get(&mut client, "/busy").await;
            assert_eq!(response.status(), status);
            assert_eq!(calls.load(Ordering::SeqCst), 1, "{status}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waiting_to_be_retried_holds_no_slot() {
        // One slot: the retried request waits (1 s at most per try) without it, so another
        // request is answered in the meantime.
        let (inner, _) = server(u32::MAX, (503, Some("5")));
        let client = limited_and_retried(1, MAX_WAIT).layer(inner);
        let mut retried = client.clone();
        let mut other = client.clone();
        // Polled first: the retried request takes the slot before the other one asks.
        let busy = std::pin::pin!(async move { get(&mut retried, "/busy").await });
        let answered = std::pin::pin!(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let started = tokio::time::Instant::now();
            let response = get(&mut other, "/other").await;
            (response.status(), started.elapsed())
        });
        match futures::future::select(busy, answered).await {
            futures::future::Either::Right(((status, took), _)) => {
                assert_eq!(status, 200);
                assert!(took < MAX_WAIT, "{took:?}");
            }
            futures::future::Either::Left(_) => panic!("the other request waited for the retries"),
        }
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let headers = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::RETRY_AFTER, v.parse().unwrap());
            h
        };
        assert_eq!(retry_after(&headers("5")), Some(Duration::from_secs(5)));
        assert_eq!(retry_after(&headers(" 1 ")), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(&http::HeaderMap::new()), None);
    }
}
