//! Which of a repository's tags auto-update moves to: the highest semantic version that the
//! policy's constraint allows, that has not failed before and that is newer than what runs.
//!
//! The rules, in the `semver` crate's terms (the same as Cargo's):
//! - A tag is a version if it parses as one (`1.2.3`, `1.2.3-rc.1`, `1.2.3+build.5`), with or
//!   without one leading `v` (`v1.2.3`, a common convention). Anything else (`latest`,
//!   `sha-1a2b3c`, `1.2`, `01.2.3`) is skipped. When `1.2.3` and `v1.2.3` both exist, the tag
//!   without `v` is chosen.
//! - The constraint is a [`VersionReq`] (`>=1.0.0, <2`; a bare `1.2` means `^1.2`). As in Cargo,
//!   a pre-release matches only when a comparator of the constraint names a pre-release of the
//!   same major.minor.patch: `>=1.3.0-rc.1, <2` allows `1.3.0-rc.2` but not `1.4.0-rc.1`, and
//!   `>=1.0.0` allows none.
//! - A version listed as failed (compared as a version, so `v1.2.3` failed means `1.2.3` did)
//!   is never chosen again.
//! - Only a version of higher precedence than the current one is chosen (build metadata does not
//!   count: `1.2.3+b2` is not newer than `1.2.3`). Without a current version (the running tag is
//!   not a version) every allowed version is newer.

use std::cmp::Ordering;

use semver::{Version, VersionReq};

/// A version to move to, with the tag that names it in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The version.
    pub version: Version,
    /// The tag as the registry has it (`1.2.3` or `v1.2.3`): what the new image names.
    pub tag: String,
}

/// Reads `tag` as a version, accepting one leading `v`.
pub fn parse_tag(tag: &str) -> Option<Version> {
    Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// The highest of `tags` that `req` allows, that is not in `failed` and is newer than
/// `current` (see the module's rules); `None` when there is none.
pub fn choose(
    tags: &[String],
    req: &VersionReq,
    current: Option<&Version>,
    failed: &[String],
) -> Option<Candidate> {
    let failed: Vec<Version> = failed.iter().filter_map(|f| parse_tag(f)).collect();
    tags.iter()
        .filter_map(|tag| {
            let version = parse_tag(tag)?;
            Some(Candidate {
                version,
                tag: tag.clone(),
            })
        })
        .filter(|c| req.matches(&c.version))
        .filter(|c| !failed.contains(&c.version))
        .filter(|c| current.is_none_or(|cur| c.version.cmp_precedence(cur) == Ordering::Greater))
        .max_by(|a, b| {
            a.version
                .cmp(&b.version)
                // Of `1.2.3` and `v1.2.3`, the plain one wins.
                .then_with(|| b.tag.starts_with('v').cmp(&a.tag.starts_with('v')))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &str) -> Vec<String> {
        list.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_highest_allowed_newer_unfailed_version_is_chosen() {
        let all = "latest sha-1a2b3c 0.9.0 1.0.0 1.1.0 1.2.0 1.10.0 2.0.0 1.2 01.3.0 1.11.0-rc.1";
        // tags, constraint, current, failed, chosen tag
        let cases: &[(&str, &str, Option<&str>, &str, Option<&str>)] = &[
            // Numeric, not lexical, order; 2.0.0 is outside the constraint.
            (all, ">=1.0.0, <2", None, "", Some("1.10.0")),
            (all, ">=1.0.0, <2", Some("1.1.0"), "", Some("1.10.0")),
            // Failed versions are skipped, the next highest wins.
            (all, ">=1.0.0, <2", Some("1.1.0"), "1.10.0", Some("1.2.0")),
            (all, ">=1.0.0, <2", Some("1.1.0"), "1.10.0 1.2.0", None),
            // A failed entry is compared as a version.
            (all, ">=1.0.0, <2", Some("1.1.0"), "v1.10.0", Some("1.2.0")),
            // Equal and lower versions are not updates.
            (all, ">=1.0.0, <2", Some("1.10.0"), "", None),
            (all, ">=1.0.0, <2", Some("1.12.0"), "", None),
            (all, "*", Some("1.10.0"), "", Some("2.0.0")),
            (all, "^1.1", Some("1.0.0"), "", Some("1.10.0")),
            (all, "~1.1", Some("1.0.0"), "", Some("1.1.0")),
            (all, "=1.2.0", None, "", Some("1.2.0")),
            (all, ">=3", None, "", None),
            // Pre-releases only when the constraint names one on the same major.minor.patch.
            (
                all,
                ">=1.11.0-rc.0, <2",
                Some("1.10.0"),
                "",
                Some("1.11.0-rc.1"),
            ),
            (
                "1.10.0 1.12.0-rc.1",
                ">=1.11.0-rc.0, <2",
                Some("1.10.0"),
                "",
                None,
            ),
            ("1.0.0 1.1.0-beta.1", ">=1.0.0", Some("1.0.0"), "", None),
            // A pre-release of the current version is older; its release is newer.
            (
                "1.2.0-rc.1 1.2.0-rc.2",
                ">=1.2.0-rc.1",
                Some("1.2.0-rc.1"),
                "",
                Some("1.2.0-rc.2"),
            ),
            (
                "1.2.0-rc.2 1.2.0",
                ">=1.2.0-rc.1",
                Some("1.2.0-rc.2"),
                "",
                Some("1.2.0"),
            ),
            // Build metadata does not make a version newer.
            ("1.2.0+build.2", ">=1", Some("1.2.0"), "", None),
            (
                "1.2.0+build.2 1.2.1+build.1",
                ">=1",
                Some("1.2.0"),
                "",
                Some("1.2.1+build.1"),
            ),
            // A leading v is accepted; the plain tag wins a tie.
            (
                "v1.0.0 v1.3.0 1.2.0",
                ">=1",
                Some("1.0.0"),
                "",
                Some("v1.3.0"),
            ),
            ("v1.3.0 1.3.0", ">=1", None, "", Some("1.3.0")),
            ("1.3.0 v1.3.0", ">=1", None, "", Some("1.3.0")),
            ("V1.3.0 vv1.3.0 1.3", ">=1", None, "", None),
            // Nothing to choose from.
            ("", ">=1", None, "", None),
            ("latest stable", "*", None, "", None),
        ];
        for &(list, req, current, failed, want) in cases {
            let req_parsed = VersionReq::parse(req).unwrap();
            let current_parsed = current.map(|c| Version::parse(c).unwrap());
            let got = choose(
                &tags(list),
                &req_parsed,
                current_parsed.as_ref(),
                &tags(failed),
            );
            assert_eq!(
                got.as_ref().map(|c| c.tag.as_str()),
                want,
                "tags [{list}], constraint {req}, current {current:?}, failed [{failed}]"
            );
            if let Some(c) = got {
                assert_eq!(Some(c.version), parse_tag(&c.tag));
            }
        }
    }

    #[test]
    fn tags_read_as_versions() {
        let cases = [
            ("1.2.3", Some("1.2.3")),
            ("v1.2.3", Some("1.2.3")),
            ("1.2.3-rc.1+b5", Some("1.2.3-rc.1+b5")),
            ("latest", None),
            ("sha-1a2b3c", None),
            ("1.2", None),
            ("01.2.3", None),
            ("vv1.2.3", None),
            ("", None),
        ];
        for (tag, want) in cases {
            assert_eq!(
                parse_tag(tag).map(|v| v.to_string()).as_deref(),
                want,
                "{tag}"
            );
        }
    }
}
