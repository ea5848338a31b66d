//! The auto-update tag lister against the local fleet's real OCI registry: every tag of a
//! repository with more than a page of them (none once they are deleted), a clear error for a repository the registry does
//! not know and for a registry that is down (which then comes back); and against a second real
//! registry process that challenges for bearer tokens: the token is fetched from the realm,
//! anonymously or with the credentials, and a refusal is a clear error.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::get;
use fleethub_hub::autoupdate::registry::{Credentials, RegistryClient, RegistryError, list_tags};
use fleethub_testkit::{Fleet, free_port, http_get, poll_until, unique_name};
use tokio::sync::RwLock;

/// The outage test stops the registry the other tests of this file use: it runs alone.
static REGISTRY: RwLock<()> = RwLock::const_new(());

#[tokio::test]
async fn every_tag_is_listed_past_a_page_of_them() {
    let _shared = REGISTRY.read().await;
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("aup-many").unwrap();
    let mut pushed: Vec<String> = (0..125).map(|i| format!("1.{i}.0")).collect();
    pushed.extend(["latest", "sha-1a2b3c", "2.0.0-rc.1"].map(String::from));
    let refs: Vec<&str> = pushed.iter().map(String::as_str).collect();
    repo.push(&refs).unwrap();

    let listed = list_tags(&repo.reference(), &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(listed.len(), pushed.len(), "no tag twice, none missing");
    assert_eq!(
        listed.into_iter().collect::<BTreeSet<_>>(),
        pushed.into_iter().collect::<BTreeSet<_>>()
    );

    // A repository whose manifests were all deleted lists no tags (the registry says `null`).
    fleet.delete_repository(repo.name()).unwrap();
    let listed = list_tags(&repo.reference(), &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(listed, Vec::<String>::new());
}

#[tokio::test]
async fn a_repository_the_registry_does_not_know_is_a_not_found_error_naming_it() {
    let _shared = REGISTRY.read().await;
    let fleet = Fleet::get().unwrap();
    let repository = format!("{}/{}", fleet.registry().unwrap(), unique_name("aup-none"));
    let err = list_tags(&repository, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "not_found");
    let message = err.to_string();
    assert!(message.contains(&repository), "{message}");
    assert!(message.contains("NameUnknown"), "{message}");
}

/// Starts the registry again when dropped, also when the test fails.
struct Restart<'a>(&'a Fleet);

impl Drop for Restart<'_> {
    fn drop(&mut self) {
        self.0.start_registry().unwrap();
    }
}

#[tokio::test]
async fn a_registry_that_is_down_is_an_unreachable_error_until_it_is_back() {
    let _alone = REGISTRY.write().await;
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("aup-down").unwrap();
    repo.push(&["1.0.0"]).unwrap();
    let client = RegistryClient::default().with_timeout(Duration::from_secs(20));

    {
        fleet.kill_registry().unwrap();
        let _restart = Restart(fleet);
        let err = client
            .list_tags(&repo.reference(), &Credentials::Anonymous)
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::Unreachable { .. }), "{err:?}");
        assert_eq!(err.metric_label(), "unreachable");
        let message = err.to_string();
        assert!(message.contains(&repo.reference()), "{message}");
        assert!(message.contains(&fleet.registry().unwrap()), "{message}");
        assert!(message.to_lowercase().contains("connect"), "{message}");
    }

    // Back: the same client lists the tags again (storage survived the outage).
    let listed = client
        .list_tags(&repo.reference(), &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(listed, ["1.0.0"]);
}

/// What the token endpoint was asked: its query and the Authorization header.
type TokenRequests = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A bearer-token realm for the challenging registry: records each request and hands out a
/// token (distribution's `silly` auth accepts any), or refuses every request with 401.
async fn token_endpoint(refuse: bool) -> (SocketAddr, TokenRequests, tokio::task::JoinHandle<()>) {
    let requests = TokenRequests::default();
    let seen = requests.clone();
    let app = Router::new().route(
        "/token",
        get(move |RawQuery(query): RawQuery, headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .map(|v| v.to_str().unwrap_or_default().to_string());
                seen.lock().unwrap().push((query.unwrap_or_default(), auth));
                if refuse {
                    (StatusCode::UNAUTHORIZED, r#"{"details":"no"}"#.to_string())
                } else {
                    (
                        StatusCode::OK,
                        r#"{"token":"fleet-test-token","expires_in":300}"#.to_string(),
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, requests, server)
}

/// A second, read-only registry process over the fleet registry's storage that challenges
/// every request for a bearer token from `realm` (distribution's development `silly` auth: a
/// real bearer challenge, any token accepted). Killed when dropped.
async fn challenging_registry(fleet: &Fleet, realm: SocketAddr) -> (String, tokio::process::Child) {
    let port = free_port().unwrap();
    let dir = fleet.dir().join(unique_name("registry-bearer"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog: {{level: error, accesslog: {{disabled: true}}}}\n\
             storage:\n  filesystem: {{rootdirectory: {}}}\n  maintenance: {{readonly: {{enabled: true}}}}\n\
             auth:\n  silly: {{realm: \"http://{realm}/token\", service: fleet-test}}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            fleet.dir().join("registry/data").display()
        ),
    )
    .unwrap();
    let child = tokio::process::Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    poll_until(
        "the challenging registry",
        Duration::from_secs(20),
        || async move {
            let (status, _) = http_get(addr, "/v2/").await.ok()?;
            (status == 401).then_some(())
        },
    )
    .await
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (format!("127.0.0.1:{port}"), child)
}

#[tokio::test]
async fn a_bearer_challenge_is_answered_with_a_token_from_its_realm() {
    let _shared = REGISTRY.read().await;
    let fleet = Fleet::get().unwrap();
    let repo = fleet.registry_repo("aup-bearer").unwrap();
    repo.push(&["1.0.0", "1.1.0"]).unwrap();
    let (realm, requests, server) = token_endpoint(false).await;
    let (registry, _child) = challenging_registry(fleet, realm).await;
    let repository = format!("{registry}/{}", repo.name());

    // Anonymous: a token without credentials, scoped to pulling this repository.
    let mut listed = list_tags(&repository, &Credentials::Anonymous)
        .await
        .unwrap();
    listed.sort();
    assert_eq!(listed, ["1.0.0", "1.1.0"]);
    let asked = std::mem::take(&mut *requests.lock().unwrap());
    assert!(!asked.is_empty());
    for (query, auth) in &asked {
        assert!(query.contains("service=fleet-test"), "{query}");
        assert!(
            query.contains(&format!("repository%3A{}%3Apull", repo.name())),
            "{query}"
        );
        assert_eq!(auth, &None);
    }

    // With credentials: the realm gets them as Basic auth.
    let basic = Credentials::Basic {
        username: "robot".into(),
        password: "s3cret".into(),
    };
    assert_eq!(list_tags(&repository, &basic).await.unwrap().len(), 2);
    let asked = std::mem::take(&mut *requests.lock().unwrap());
    assert!(!asked.is_empty());
    for (_, auth) in &asked {
        assert_eq!(auth.as_deref(), Some("Basic cm9ib3Q6czNjcmV0"));
    }
    server.abort();
}

#[tokio::test]
async fn a_realm_that_refuses_the_credentials_is_an_unauthorized_error() {
    let _shared = REGISTRY.read().await;
    let fleet = Fleet::get().unwrap();
    let (realm, requests, server) = token_endpoint(true).await;
    let (registry, _child) = challenging_registry(fleet, realm).await;
    let repository = format!("{registry}/{}", unique_name("aup-refused"));
    let basic = Credentials::Basic {
        username: "robot".into(),
        password: "wrong".into(),
    };
    let err = list_tags(&repository, &basic).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "unauthorized");
    assert!(err.to_string().contains(&repository), "{err}");
    assert!(!requests.lock().unwrap().is_empty());
    server.abort();
}
