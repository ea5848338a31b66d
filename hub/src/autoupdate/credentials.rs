//! Registry credentials, and how they are read from a Kubernetes Secret's data.
//!
//! A Secret gives credentials in one of three shapes (checked in this order):
//! - `token`: a bearer token sent as it is;
//! - `username` and `password` (a personal access token may be the password);
//! - `.dockerconfigjson` (a `kubernetes.io/dockerconfigjson` Secret, what `kubectl create secret
//!   docker-registry` makes): the entry of `auths` for the repository's registry, with
//!   `username` and `password` or `auth` (base64 of `username:password`), or `identitytoken`.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;

/// The Secret key of a bearer token.
pub const TOKEN_KEY: &str = "token";
/// The Secret key of a user name (with [`PASSWORD_KEY`]).
pub const USERNAME_KEY: &str = "username";
/// The Secret key of a password (with [`USERNAME_KEY`]).
pub const PASSWORD_KEY: &str = "password";
/// The Secret key of a Docker config (`kubernetes.io/dockerconfigjson`).
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// How to authenticate to a registry.
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

impl Credentials {
    /// The credentials for `registry` (a host with its port, as in
    /// [`ImageRef::registry`](super::image::ImageRef::registry)) in a Secret's `data`. The
    /// message of an error names the key and what is wrong, never a secret value.
    pub fn from_secret_data(
        data: &BTreeMap<String, ByteString>,
        registry: &str,
    ) -> Result<Credentials, String> {
        let text = |key: &str| -> Result<Option<String>, String> {
            data.get(key)
                .map(|v| {
                    String::from_utf8(v.0.clone())
                        .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
                        .map_err(|_| format!("key {key:?} of the Secret is not UTF-8 text"))
                })
                .transpose()
        };
        if let Some(token) = text(TOKEN_KEY)? {
            return Ok(Credentials::Bearer(token));
        }
        match (text(USERNAME_KEY)?, text(PASSWORD_KEY)?) {
            (Some(username), Some(password)) => {
                return Ok(Credentials::Basic { username, password });
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(format!(
                    "the Secret has only one of {USERNAME_KEY:?} and {PASSWORD_KEY:?}: both are needed"
                ));
            }
            (None, None) => {}
        }
        if let Some(config) = text(DOCKER_CONFIG_KEY)? {
            return from_docker_config(&config, registry);
        }
        Err(format!(
            "the Secret has none of the keys {TOKEN_KEY:?}, {USERNAME_KEY:?} and {PASSWORD_KEY:?}, or {DOCKER_CONFIG_KEY:?}"
        ))
    }
}

/// The entry of a Docker config's `auths` for `registry`. Docker Hub's entry may be named
/// `https://index.docker.io/v1/` (what `docker login` writes), and any entry may carry a scheme
/// or a path.
fn from_docker_config(config: &str, registry: &str) -> Result<Credentials, String> {
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(default)]
        auths: BTreeMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        username: Option<String>,
        password: Option<String>,
        auth: Option<String>,
        identitytoken: Option<String>,
    }
    let config: Config = serde_json::from_str(config).map_err(|e| {
        format!("key {DOCKER_CONFIG_KEY:?} of the Secret is not a Docker config: {e}")
    })?;
    let host = |key: &str| -> String {
        let key = key
            .strip_prefix("https://")
            .or_else(|| key.strip_prefix("http://"))
            .unwrap_or(key);
        let host = key.split('/').next().unwrap_or(key);
        match host {
            "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
            other => other.to_string(),
        }
    };
    let Some(entry) = config
        .auths
        .iter()
        .find(|(key, _)| host(key) == registry)
        .map(|(_, e)| e)
    else {
        return Err(format!(
            "the Docker config in the Secret has no entry for registry {registry} (it has: {})",
            config
                .auths
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    if let Some(token) = &entry.identitytoken {
        return Ok(Credentials::Bearer(token.clone()));
    }
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Credentials::Basic {
            username: username.clone(),
            password: password.clone(),
        });
    }
    let bad_auth = || {
        format!(
            "the Docker config's entry for {registry} has an \"auth\" that is not base64 of username:password"
        )
    };
    if let Some(auth) = &entry.auth {
        let decoded = STANDARD.decode(auth.trim()).map_err(|_| bad_auth())?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad_auth())?;
        let (username, password) = decoded.split_once(':').ok_or_else(bad_auth)?;
        return Ok(Credentials::Basic {
            username: username.to_string(),
            password: password.to_string(),
        });
    }
    Err(format!(
        "the Docker config's entry for {registry} has no username and password, auth or identitytoken"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn basic(username: &str, password: &str) -> Credentials {
        Credentials::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    #[test]
    fn a_secret_gives_a_token_a_user_and_password_or_a_docker_config_entry() {
        let docker = r#"{"auths": {
            "ghcr.io": {"username": "robot", "password": "pat"},
            "https://index.docker.io/v1/": {"auth": "aHViOmh1YnBhc3M="},
            "127.0.0.1:17300": {"identitytoken": "idt"},
            "http://registry.internal:5000/v2/": {"auth": "dTpwOmFzcw=="}
        }}"#;
        // Secret data, registry, credentials
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Credentials);
        let cases: &[Case] = &[
            (
                &[("token", "t0k\n")],
                "ghcr.io",
                Credentials::Bearer("t0k".into()),
            ),
            (
                &[("username", "robot"), ("password", "s3cret")],
                "ghcr.io",
                basic("robot", "s3cret"),
            ),
            // A token wins over the others.
            (
                &[("token", "t"), ("username", "u"), ("password", "p")],
                "ghcr.io",
                Credentials::Bearer("t".into()),
            ),
            (
                &[(".dockerconfigjson", docker)],
                "ghcr.io",
                basic("robot", "pat"),
            ),
            (
                &[(".dockerconfigjson", docker)],
                "docker.io",
                basic("hub", "hubpass"),
            ),
            (
                &[(".dockerconfigjson", docker)],
                "127.0.0.1:17300",
                Credentials::Bearer("idt".into()),
            ),
            // A password may hold a colon.
            (
                &[(".dockerconfigjson", docker)],
                "registry.internal:5000",
                basic("u", "p:ass"),
            ),
        ];
        for (pairs, registry, want) in cases {
            assert_eq!(
                &Credentials::from_secret_data(&data(pairs), registry).unwrap(),
                want,
                "{pairs:?} for {registry}"
            );
        }
    }

    #[test]
    fn an_unusable_secret_is_an_error_naming_the_key_and_never_a_value() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "has none of the keys"),
            (&[("user", "x")], "has none of the keys"),
            (
                &[("username", "robot")],
                "only one of \"username\" and \"password\"",
            ),
            (&[("password", "s3cret")], "only one of"),
            (&[(".dockerconfigjson", "s3cret")], "is not a Docker config"),
            (
                &[(".dockerconfigjson", r#"{"auths": {"quay.io": {}}}"#)],
                "no entry for registry ghcr.io (it has: quay.io)",
            ),
            (
                &[(".dockerconfigjson", r#"{"auths": {"ghcr.io": {}}}"#)],
                "has no username and password",
            ),
            (
                &[(
                    ".dockerconfigjson",
                    r#"{"auths": {"ghcr.io": {"auth": "s3cret!"}}}"#,
                )],
                "not base64 of username:password",
            ),
        ];
        for (pairs, want) in cases {
            let err = Credentials::from_secret_data(&data(pairs), "ghcr.io").unwrap_err();
            assert!(err.contains(want), "{pairs:?}: {err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
        let mut bad = data(&[]);
        bad.insert("token".into(), ByteString(vec![0xff, 0xfe]));
        let err = Credentials::from_secret_data(&bad, "ghcr.io").unwrap_err();
        assert!(
            err.contains("key \"token\" of the Secret is not UTF-8"),
            "{err}"
        );
    }

    #[test]
    fn credentials_do_not_show_secrets_when_printed() {
        assert_eq!(
            format!("{:?}", basic("robot", "s3cret")),
            "Basic(robot, <redacted>)"
        );
        assert_eq!(
            format!("{:?}", Credentials::Bearer("t0ken".into())),
            "Bearer(<redacted>)"
        );
    }
}
