//! Listing a repository's tags through the OCI distribution API (`oci-client`).
//!
//! - **Pagination**: tags are asked for in pages of [`PAGE_SIZE`] with `n` and `last` (the
//!   distribution spec's way; registries that page, such as distribution 3, Harbor or GHCR,
//!   honour them), until a page brings no tag not seen before. `oci-client` does not expose the
//!   `Link` header that announces a next page, so a short page cannot be taken as the last one
//!   (a registry may cap `n` lower); the price is one request more, answered with an empty page.
//!   `last` is the last tag of the page before. A registry that ignores `n` and `last` (Debian's
//!   distribution 2.8, the local fleet's) answers every tag at once, twice.
//! - **Authentication**: `oci-client` answers a registry's `WWW-Authenticate` challenge: a
//!   bearer-token challenge gets a token from the realm it names (anonymously, or with the
//!   credentials as Basic auth), a Basic challenge gets the credentials.
//! - **Plain HTTP** is used for registries on a loopback host (`127.0.0.1`, `localhost`,
//!   `[::1]`, any port) and for those a [`RegistryClient`] is told are insecure
//!   ([`RegistryClient::with_insecure_registries`]); HTTPS for every other.
//! - **Time**: each connection has [`CONNECT_TIMEOUT`], each read [`READ_TIMEOUT`], and the
//!   whole listing the client's timeout ([`DEFAULT_TIMEOUT`] unless set).

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::image::ImageRef;

/// Tags asked for per request.
pub const PAGE_SIZE: usize = 100;
/// At most this many pages (100,000 tags): a registry that keeps answering new tags does not
/// keep a check going forever.
pub const MAX_PAGES: usize = 1000;
/// The longest a connection to a registry may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a registry may stay silent while answering.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a whole listing (every page, tokens included) may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How to authenticate to a registry (from the policy's Secret: `username` and `password`, or
/// `token`).
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    /// No credentials; a bearer-token challenge is answered with an anonymous token.
    #[default]
    Anonymous,
    /// A user name and password (or a personal access token as the password).
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
    /// A bearer token sent as it is.
    Bearer(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
            Credentials::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

impl From<&Credentials> for RegistryAuth {
    fn from(c: &Credentials) -> Self {
        match c {
            Credentials::Anonymous => RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Credentials::Bearer(token) => RegistryAuth::Bearer(token.clone()),
        }
    }
}

/// Why tags could not be listed. Every message names the repository.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The repository is not a valid reference.
    #[error("repository {repository:?} is not valid: {reason}")]
    InvalidRepository {
        /// The repository as given.
        repository: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The registry could not be reached (connection refused, DNS, TLS).
    #[error("registry {registry} of repository {repository} is unreachable: {reason}")]
    Unreachable {
        /// The repository.
        repository: String,
        /// The registry host.
        registry: String,
        /// The cause.
        reason: String,
    },
    /// The registry does not know the repository.
    #[error("repository {repository} does not exist in its registry: {reason}")]
    NotFound {
        /// The repository.
        repository: String,
        /// The registry's answer.
        reason: String,
    },
    /// The registry refused the credentials, or asks for some.
    #[error(
        "the registry refused access to repository {repository} (check the policy's secretRef): {reason}"
    )]
    Unauthorized {
        /// The repository.
        repository: String,
        /// The registry's answer.
        reason: String,
    },
    /// The listing took longer than the client's timeout.
    #[error("listing the tags of repository {repository} took longer than {after:?}")]
    Timeout {
        /// The repository.
        repository: String,
        /// The timeout.
        after: Duration,
    },
    /// The registry answered with an error or something that is not a tag list.
    #[error(
        "the registry answered the tag list of repository {repository} with an error: {reason}"
    )]
    Registry {
        /// The repository.
        repository: String,
        /// The error.
        reason: String,
    },
}

impl RegistryError {
    /// A short label for metrics (`fleethub_autoupdate_check_errors_total{reason=…}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            RegistryError::InvalidRepository { .. } => "invalid_repository",
            RegistryError::Unreachable { .. } => "unreachable",
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::Unauthorized { .. } => "unauthorized",
            RegistryError::Timeout { .. } => "timeout",
            RegistryError::Registry { .. } => "registry_error",
        }
    }
}

/// A tag lister with its settings: which registries are spoken to over plain HTTP and how long
/// a listing may take.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    insecure: Vec<String>,
    timeout: Duration,
}

impl Default for RegistryClient {
    fn default() -> Self {
        RegistryClient {
            insecure: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Lists the tags of `repository` (`host[:port]/path`, or a Docker Hub name such as `nginx`)
/// with the default [`RegistryClient`].
pub async fn list_tags(
    repository: &str,
    credentials: &Credentials,
) -> Result<Vec<String>, RegistryError> {
    RegistryClient::default()
        .list_tags(repository, credentials)
        .await
}

impl RegistryClient {
    /// Registries (`host` or `host:port`, as in the repository) spoken to over plain HTTP
    /// besides loopback ones: e.g. a registry inside a private network without TLS.
    pub fn with_insecure_registries(mut self, registries: Vec<String>) -> Self {
        self.insecure = registries;
        self
    }

    /// The longest a whole listing may take.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether `registry` is spoken to over plain HTTP.
    pub fn is_plain_http(&self, registry: &str) -> bool {
        let host = match registry.rsplit_once(':') {
            // `[::1]:5000`, `127.0.0.1:5000`, `localhost:5000`; not the colons of `[::1]` itself.
            Some((host, port)) if !port.contains(']') => host,
            _ => registry,
        };
        matches!(host, "localhost" | "[::1]")
            || host.starts_with("127.") && host.split('.').count() == 4
            || self.insecure.iter().any(|r| r == registry)
    }

    /// Every tag of `repository` (`host[:port]/path`, or a Docker Hub name such as `nginx`),
    /// in the registry's order, following pagination.
    pub async fn list_tags(
        &self,
        repository: &str,
        credentials: &Credentials,
    ) -> Result<Vec<String>, RegistryError> {
        let invalid = |reason: String| RegistryError::InvalidRepository {
            repository: repository.to_string(),
            reason,
        };
        let image = ImageRef::parse(repository).map_err(invalid)?;
        if image.tag.is_some() || image.digest.is_some() {
            return Err(invalid("a repository has no tag or digest".into()));
        }
        let qualified = image.qualified_repository();
        let reference: Reference = format!("{qualified}:latest")
            .parse()
            .map_err(|e| invalid(format!("{e}")))?;
        let registry = image.registry().to_string();
        let protocol = if self.is_plain_http(&registry) {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        };
        ensure_crypto_provider();
        let client = Client::try_from(ClientConfig {
            protocol,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..Default::default()
        })
        .map_err(|e| RegistryError::Unreachable {
            repository: repository.to_string(),
            registry: registry.clone(),
            reason: format!("cannot make an HTTP client: {e}"),
        })?;
        let auth = RegistryAuth::from(credentials);
        let pages = collect_pages(|last| {
            let (client, reference, auth) = (&client, &reference, &auth);
            async move {
                client
                    .list_tags(reference, auth, Some(PAGE_SIZE), last.as_deref())
                    .await
                    .map(|page| page.tags)
            }
        });
        match tokio::time::timeout(self.timeout, pages).await {
            Ok(Ok(tags)) => Ok(tags),
            Ok(Err(e)) => Err(classify(repository, &registry, e)),
            Err(_) => Err(RegistryError::Timeout {
                repository: repository.to_string(),
                after: self.timeout,
            }),
        }
    }
}

/// reqwest's rustls (without a built-in provider, like kube's) uses the process's default
/// crypto provider: ring, which kube uses too.
fn ensure_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err: another one is installed already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Collects every tag from `fetch(last)`, which answers the page after tag `last` (`None`: the
/// first page): asks for the next page while a page brings tags not seen before, up to
/// [`MAX_PAGES`] pages.
pub async fn collect_pages<F, Fut, E>(mut fetch: F) -> Result<Vec<String>, E>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Vec<String>, E>>,
{
    let mut seen = HashSet::new();
    let mut tags = Vec::new();
    let mut last = None;
    for _ in 0..MAX_PAGES {
        let page = fetch(last.take()).await?;
        let before = tags.len();
        last = page.last().cloned();
        tags.extend(page.into_iter().filter(|t| seen.insert(t.clone())));
        if tags.len() == before {
            break;
        }
    }
    Ok(tags)
}

fn classify(repository: &str, registry: &str, e: OciDistributionError) -> RegistryError {
    let repository = repository.to_string();
    match e {
        OciDistributionError::RegistryError { envelope, .. } => {
            let reason = envelope
                .errors
                .iter()
                .map(|e| format!("{:?}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ");
            let code = |c: OciErrorCode| envelope.errors.iter().any(|e| e.code == c);
            if code(OciErrorCode::NameUnknown) || code(OciErrorCode::NotFound) {
                RegistryError::NotFound { repository, reason }
            } else if code(OciErrorCode::Unauthorized) || code(OciErrorCode::Denied) {
                RegistryError::Unauthorized { repository, reason }
            } else {
                RegistryError::Registry { repository, reason }
            }
        }
        OciDistributionError::UnauthorizedError { url } => RegistryError::Unauthorized {
            repository,
            reason: format!("401 Unauthorized from {url}"),
        },
        OciDistributionError::AuthenticationFailure(reason) => {
            RegistryError::Unauthorized { repository, reason }
        }
        OciDistributionError::ServerError {
            code: 404, message, ..
        } => RegistryError::NotFound {
            repository,
            reason: message,
        },
        OciDistributionError::ServerError {
            code: 401 | 403,
            message,
            ..
        } => RegistryError::Unauthorized {
            repository,
            reason: message,
        },
        OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
            RegistryError::Unreachable {
                repository,
                registry: registry.to_string(),
                reason: chain(&e),
            }
        }
        other => RegistryError::Registry {
            repository,
            reason: chain(&other),
        },
    }
}

/// An error with its causes, `outer: inner: …` (reqwest's own message hides the cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry's paging as the distribution spec has it: tags in lexical order, at most `n`
    /// after `last`.
    fn spec_page(all: &[String], n: usize, last: Option<String>) -> Vec<String> {
        let mut sorted = all.to_vec();
        sorted.sort();
        sorted
            .into_iter()
            .filter(|t| last.as_ref().is_none_or(|l| t > l))
            .take(n)
            .collect()
    }

    fn tags(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("1.{i}.0")).collect()
    }

    async fn collect(fetch: impl FnMut(Option<String>) -> Vec<String>) -> (Vec<String>, usize) {
        let mut fetch = fetch;
        let mut calls = 0;
        let got = collect_pages(|last| {
            calls += 1;
            std::future::ready(Ok::<_, ()>(fetch(last)))
        })
        .await
        .unwrap();
        (got, calls)
    }

    #[tokio::test]
    async fn pages_are_followed_until_one_brings_nothing_new() {
        // tags in the registry, requests expected
        for (count, requests) in [
            (0, 1),
            (1, 2),
            (99, 2),
            (100, 2),
            (101, 3),
            (250, 4),
            (300, 4),
        ] {
            let all = tags(count);
            let (mut got, calls) = collect(|last| spec_page(&all, PAGE_SIZE, last)).await;
            got.sort();
            let mut want = all.clone();
            want.sort();
            assert_eq!(got, want, "{count} tags");
            assert_eq!(calls, requests, "{count} tags");
        }
    }

    #[tokio::test]
    async fn a_registry_that_ignores_paging_is_asked_once_or_until_nothing_is_new() {
        let all = tags(136);
        // Ignores n and last: every tag at once (Debian's registry 2.8), and again.
        let (got, calls) = collect(|_| all.clone()).await;
        assert_eq!((got.len(), calls), (136, 2));
        // Honours n but ignores last: the same first page again brings nothing new.
        let (got, calls) = collect(|_| all[..PAGE_SIZE].to_vec()).await;
        assert_eq!((got.len(), calls), (PAGE_SIZE, 2));
        // Caps pages lower than asked for: the short pages are followed all the same.
        let (got, calls) = collect(|last| spec_page(&all, 50, last)).await;
        assert_eq!((got.len(), calls), (136, 4));
    }

    #[tokio::test]
    async fn a_failing_page_fails_the_listing() {
        let mut calls = 0;
        let got: Result<Vec<String>, &str> = collect_pages(|last| {
            calls += 1;
            std::future::ready(match last {
                None => Ok(tags(PAGE_SIZE)),
                Some(_) => Err("boom"),
            })
        })
        .await;
        assert_eq!(got, Err("boom"));
        assert_eq!(calls, 2);
    }

    #[test]
    fn loopback_and_listed_registries_use_plain_http() {
        let client = RegistryClient::default()
            .with_insecure_registries(vec!["registry.internal:5000".into()]);
        for (registry, plain) in [
            ("127.0.0.1:17300", true),
            ("127.0.0.1", true),
            ("localhost:5000", true),
            ("localhost", true),
            ("[::1]:5000", true),
            ("registry.internal:5000", true),
            ("registry.internal", false),
            ("127.example.com", false),
            ("ghcr.io", false),
            ("docker.io", false),
        ] {
            assert_eq!(client.is_plain_http(registry), plain, "{registry}");
        }
    }

    #[test]
    fn credentials_do_not_show_secrets_when_printed() {
        let basic = Credentials::Basic {
            username: "robot".into(),
            password: "s3cret".into(),
        };
        assert_eq!(format!("{basic:?}"), "Basic(robot, <redacted>)");
        assert_eq!(
            format!("{:?}", Credentials::Bearer("t0ken".into())),
            "Bearer(<redacted>)"
        );
    }

    #[tokio::test]
    async fn a_repository_with_a_tag_or_an_invalid_name_is_refused_before_any_request() {
        for (repository, want) in [
            ("127.0.0.1:1/web:1.0", "no tag or digest"),
            ("127.0.0.1:1/Web", "lowercase"),
            ("", "empty"),
        ] {
            let err = list_tags(repository, &Credentials::Anonymous)
                .await
                .unwrap_err();
            assert_eq!(err.metric_label(), "invalid_repository", "{err}");
            assert!(err.to_string().contains(want), "{repository}: {err}");
        }
    }
}
