//! `Freeze`: a change freeze. While one holds a placement (or, naming none, the whole fleet), no
//! run of it starts a cluster or a stage and no AutoUpdatePolicy of it applies a new version;
//! clusters already updating finish. It lifts at `until`, or when it is deleted
//! (`kubectl fleet unfreeze`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
#[allow(unused_imports)]
use kube::core::Rule;
use kube::{CustomResource, KubeSchema, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::names::STARTED_BY_ANNOTATION;

/// A change freeze, created by `kubectl fleet freeze --until TIME --reason TEXT`; the API server
/// records who made it (`fleethub.dev/started-by`).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "Freeze",
    plural = "freezes",
    shortname = "freeze",
    category = "fleethub",
    derive = "Default",
    derive = "PartialEq",
    doc = "A change freeze: while it holds, runs of the placements it names (every placement when it names none) start no cluster and no stage, and auto-update applies no new version.",
    printcolumn(name = "Until", type_ = "string", json_path = ".spec.until"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".spec.reason"),
    printcolumn(
        name = "By",
        type_ = "string",
        json_path = ".metadata.annotations.fleethub\\.dev/started-by"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FreezeSpec {
    /// Why: shown on every run it holds and on the dashboard's banner.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// When it lifts by itself (RFC 3339, e.g. `2026-12-01T08:00:00Z`). Unset: until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    /// The placements it holds. Empty: every placement of the fleet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub placements: Vec<String>,
}

impl Freeze {
    /// Whether it holds `placement` at `now`.
    pub fn holds(&self, placement: &str, now: jiff::Timestamp) -> bool {
        self.spec.until.as_ref().is_none_or(|u| u.0 > now)
            && (self.spec.placements.is_empty()
                || self.spec.placements.iter().any(|p| p == placement))
    }

    /// In words, for a run it holds: "frozen by alice until 2026-12-01T08:00:00Z (freeze
    /// release-week): quarter-end close".
    pub fn describe(&self) -> String {
        let by = self
            .annotations()
            .get(STARTED_BY_ANNOTATION)
            .map_or(String::new(), |u| format!(" by {u}"));
        let until = self
            .spec
            .until
            .as_ref()
            .map_or(" until unfrozen".to_string(), |u| format!(" until {}", u.0));
        format!(
            "frozen{by}{until} (freeze {}): {}",
            self.name_any(),
            self.spec.reason
        )
    }
}

/// Of `freezes`, the one holding `placement` at `now` the longest (one without an end first).
pub fn holding<'a>(
    freezes: impl IntoIterator<Item = &'a Freeze>,
    placement: &str,
    now: jiff::Timestamp,
) -> Option<&'a Freeze> {
    freezes
        .into_iter()
        .filter(|f| f.holds(placement, now))
        .max_by_key(|f| f.spec.until.as_ref().map_or(jiff::Timestamp::MAX, |u| u.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn freeze(name: &str, until: Option<&str>, placements: &[&str]) -> Freeze {
        let mut f = Freeze::new(
            name,
            FreezeSpec {
                reason: "quarter-end close".into(),
                until: until.map(|u| Time(u.parse().unwrap())),
                placements: placements.iter().map(|p| p.to_string()).collect(),
            },
        );
        f.metadata.annotations =
            Some([(STARTED_BY_ANNOTATION.to_string(), "alice".to_string())].into());
        f
    }

    #[test]
    fn a_freeze_holds_its_placements_until_it_lifts() {
        let now: jiff::Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
        let web = freeze("web-only", Some("2026-11-30T13:00:00Z"), &["web"]);
        assert!(web.holds("web", now));
        assert!(!web.holds("db", now));
        assert!(!web.holds("web", "2026-11-30T13:00:00Z".parse().unwrap()));
        let all = freeze("fleet", None, &[]);
        assert!(all.holds("db", now));
        let both = [web.clone(), all.clone()];
        assert_eq!(holding(&both, "web", now), Some(&all));
        assert_eq!(holding(std::slice::from_ref(&web), "db", now), None);
        assert_eq!(
            web.describe(),
            "frozen by alice until 2026-11-30T13:00:00Z (freeze web-only): quarter-end close"
        );
        assert_eq!(
            all.describe(),
            "frozen by alice until unfrozen (freeze fleet): quarter-end close"
        );
    }
}
