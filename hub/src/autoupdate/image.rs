//! Container image references: `[host[:port]/]path[:tag][@algorithm:digest]`, as a pod's
//! `image` field holds them, split into the repository the registry knows, the tag and the
//! digest.
//!
//! The repository is kept as it was written (`nginx` stays `nginx`, not
//! `docker.io/library/nginx`), so an image rewritten with another tag changes nothing but the
//! tag; [`ImageRef::registry`] and [`ImageRef::path`] give the resolved registry and path
//! (Docker Hub's `docker.io` and `library/` defaults) where they matter.

/// The registry an image without a host in its name comes from.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// A parsed container image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The repository as written: everything before the tag and digest, e.g.
    /// `127.0.0.1:17300/web` or `nginx`.
    pub repository: String,
    /// The tag, e.g. `1.2.0`; `None` when the reference names none.
    pub tag: Option<String>,
    /// The digest, e.g. `sha256:0123…`; `Some` for a digest-pinned image, which auto-update
    /// never changes (the digest decides what runs, whatever the tag says).
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `image`. The message of an error says what is wrong with it.
    pub fn parse(image: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("image {image:?} is not a valid reference: {why}"));
        if image.is_empty() {
            return bad("it is empty");
        }
        if image.chars().any(|c| c.is_whitespace()) {
            return bad("it contains white space");
        }
        let (name, digest) = match image.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (image, None),
        };
        if let Some(digest) = digest {
            if let Err(why) = check_digest(digest) {
                return bad(&why);
            }
        }
        // A tag follows the last ':' after the last '/' (a ':' before it is a registry's port).
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[last_slash..].rfind(':') {
            Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
            None => (name, None),
        };
        if let Some(tag) = tag {
            if let Err(why) = check_tag(tag) {
                return bad(&why);
            }
        }
        let image_ref = ImageRef {
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        };
        if let Err(why) = check_path(image_ref.path_as_written()) {
            return bad(&why);
        }
        if image_ref.registry().is_empty() {
            return bad("the registry host is empty");
        }
        Ok(image_ref)
    }

    /// Whether a digest pins the image.
    pub fn is_digest_pinned(&self) -> bool {
        self.digest.is_some()
    }

    /// The same repository with `tag` and no digest: `repository:tag`.
    pub fn with_tag(&self, tag: &str) -> String {
        format!("{}:{tag}", self.repository)
    }

    /// The registry host (with its port), `docker.io` when the reference names none.
    pub fn registry(&self) -> &str {
        match self.host_split() {
            Some((host, _)) => host,
            None => DEFAULT_REGISTRY,
        }
    }

    /// The repository's path in its registry, with Docker Hub's `library/` for a one-part name
    /// there (`nginx` is `library/nginx`).
    pub fn path(&self) -> String {
        let path = self.path_as_written();
        if self.registry() == DEFAULT_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_string()
        }
    }

    /// `registry/path`, the repository fully qualified (what a registry client needs).
    pub fn qualified_repository(&self) -> String {
        format!("{}/{}", self.registry(), self.path())
    }

    /// The first component names a registry host when it has a '.' or a ':' or is
    /// `localhost` (the rule Docker and containerd use), and more components follow.
    fn host_split(&self) -> Option<(&str, &str)> {
        let (first, rest) = self.repository.split_once('/')?;
        (first.contains('.') || first.contains(':') || first == "localhost")
            .then_some((first, rest))
    }

    fn path_as_written(&self) -> &str {
        match self.host_split() {
            Some((_, rest)) => rest,
            None => &self.repository,
        }
    }
}

/// A path: '/'-separated components of lowercase letters and digits, joined by '.', '_', '__'
/// or runs of '-'.
fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the repository name is empty".into());
    }
    for component in path.split('/') {
        let ok = !component.is_empty()
            && component.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
            })
            && component.starts_with(|c: char| c.is_ascii_alphanumeric())
            && component.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(format!(
                "repository component {component:?} must be lowercase letters and digits, \
                 separated by '.', '_' or '-'"
            ));
        }
    }
    Ok(())
}

/// A tag: up to 128 of letters, digits, '_', '.', '-', not starting with '.' or '-'.
fn check_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !tag.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        ))
    }
}

/// A digest: `algorithm:hex`; a sha256 one has 64 lowercase hex digits.
fn check_digest(digest: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!(
            "digest {digest:?} must be algorithm:hex, e.g. sha256:…"
        ));
    };
    let hex_ok = !hex.is_empty()
        && hex
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    let length_ok = algorithm != "sha256" || hex.len() == 64;
    if algorithm.is_empty() || !hex_ok || !length_ok {
        return Err(format!(
            "digest {digest:?} must be algorithm:hex (sha256 has 64 lowercase hex digits)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_into_repository_tag_and_digest() {
        let pinned = format!("nginx@{SHA}");
        let tagged_pinned = format!("ghcr.io/acme/web:1.2.0@{SHA}");
        // image, repository, tag, digest, registry, path
        let cases: &[(&str, &str, Option<&str>, Option<&str>, &str, &str)] = &[
            ("nginx", "nginx", None, None, "docker.io", "library/nginx"),
            (
                "nginx:1.25",
                "nginx",
                Some("1.25"),
                None,
                "docker.io",
                "library/nginx",
            ),
            (
                "acme/web:v2",
                "acme/web",
                Some("v2"),
                None,
                "docker.io",
                "acme/web",
            ),
            (
                "docker.io/library/nginx:1",
                "docker.io/library/nginx",
                Some("1"),
                None,
                "docker.io",
                "library/nginx",
            ),
            (
                "127.0.0.1:17300/web:1.0.0",
                "127.0.0.1:17300/web",
                Some("1.0.0"),
                None,
                "127.0.0.1:17300",
                "web",
            ),
            (
                "127.0.0.1:17300/web",
                "127.0.0.1:17300/web",
                None,
                None,
                "127.0.0.1:17300",
                "web",
            ),
            (
                "localhost/team/web:1.0.0-rc.1",
                "localhost/team/web",
                Some("1.0.0-rc.1"),
                None,
                "localhost",
                "team/web",
            ),
            (
                "localhost:5000/a/b/c:latest",
                "localhost:5000/a/b/c",
                Some("latest"),
                None,
                "localhost:5000",
                "a/b/c",
            ),
            (
                "ghcr.io/acme/web-app_x.y:sha-abc123",
                "ghcr.io/acme/web-app_x.y",
                Some("sha-abc123"),
                None,
                "ghcr.io",
                "acme/web-app_x.y",
            ),
            (
                &pinned,
                "nginx",
                None,
                Some(SHA),
                "docker.io",
                "library/nginx",
            ),
            (
                &tagged_pinned,
                "ghcr.io/acme/web",
                Some("1.2.0"),
                Some(SHA),
                "ghcr.io",
                "acme/web",
            ),
        ];
        for &(image, repository, tag, digest, registry, path) in cases {
            let r = ImageRef::parse(image).unwrap_or_else(|e| panic!("{image}: {e}"));
            assert_eq!(r.repository, repository, "{image}");
            assert_eq!(r.tag.as_deref(), tag, "{image}");
            assert_eq!(r.digest.as_deref(), digest, "{image}");
            assert_eq!(r.is_digest_pinned(), digest.is_some(), "{image}");
            assert_eq!(r.registry(), registry, "{image}");
            assert_eq!(r.path(), path, "{image}");
            assert_eq!(
                r.qualified_repository(),
                format!("{registry}/{path}"),
                "{image}"
            );
        }
    }

    #[test]
    fn with_tag_changes_only_the_tag_and_drops_a_digest() {
        let cases = [
            ("nginx:1.25", "1.26.0", "nginx:1.26.0"),
            ("nginx", "1.26.0", "nginx:1.26.0"),
            (
                "127.0.0.1:17300/web:1.0.0",
                "1.1.0",
                "127.0.0.1:17300/web:1.1.0",
            ),
            ("127.0.0.1:17300/web", "1.1.0", "127.0.0.1:17300/web:1.1.0"),
        ];
        for (image, tag, want) in cases {
            assert_eq!(
                ImageRef::parse(image).unwrap().with_tag(tag),
                want,
                "{image}"
            );
        }
        let pinned = ImageRef::parse(&format!("ghcr.io/acme/web:1.2.0@{SHA}")).unwrap();
        assert_eq!(pinned.with_tag("1.3.0"), "ghcr.io/acme/web:1.3.0");
    }

    #[test]
    fn bad_references_are_errors_that_say_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("web app:1", "white space"),
            ("Web:1", "lowercase"),
            ("acme//web", "lowercase"),
            ("web:", "tag \"\""),
            ("web:-1", "tag \"-1\""),
            ("web:1:2", "lowercase"),
            ("web@sha256:abc", "64 lowercase hex"),
            ("web@sha256", "algorithm:hex"),
            ("web@:abc", "algorithm:hex"),
            ("127.0.0.1:17300/", "repository name is empty"),
            ("-web:1", "lowercase"),
        ];
        for (image, want) in cases {
            let err = ImageRef::parse(image).expect_err(image);
            assert!(err.contains(want), "{image}: {err}");
            assert!(err.contains(&format!("{image:?}")), "{image}: {err}");
        }
    }
}
