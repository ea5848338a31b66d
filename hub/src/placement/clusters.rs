//! Which member clusters a placement selects, and how its Bindings must change.

use std::collections::{BTreeMap, HashSet};

use fleethub_crds::MemberCluster;
use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::is_true;
use fleethub_crds::member_cluster::JOINED;
use fleethub_crds::placement::{PlacementPolicy, PlacementType, RolloutStrategyType};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

/// A MemberCluster as placement needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its agent has joined (condition Joined=True) and it is not being deleted.
    pub eligible: bool,
}

impl From<&MemberCluster> for Member {
    fn from(m: &MemberCluster) -> Self {
        Member {
            name: m.name_any(),
            labels: m.labels().clone(),
            eligible: m.metadata.deletion_timestamp.is_none()
                && m.status
                    .as_ref()
                    .is_some_and(|s| is_true(&s.conditions, JOINED)),
        }
    }
}

/// The clusters `policy` selects among `members`, and the named clusters it wanted but could
/// not have (PickFixed names that do not exist or have not joined).
pub fn select(
    policy: Option<&PlacementPolicy>,
    members: &[Member],
) -> Result<(Vec<String>, Vec<String>), String> {
    let default = PlacementPolicy::default();
    let policy = policy.unwrap_or(&default);
    match policy.placement_type {
        PlacementType::PickAll => {
            let selector = policy
                .cluster_selector
                .clone()
                .map(Selector::try_from)
                .transpose()
                .map_err(|e| format!("spec.policy.clusterSelector: {e}"))?;
            let mut picked: Vec<String> = members
                .iter()
                .filter(|m| m.eligible && selector.as_ref().is_none_or(|s| s.matches(&m.labels)))
                .map(|m| m.name.clone())
                .collect();
            picked.sort();
            Ok((picked, Vec::new()))
        }
        PlacementType::PickFixed => {
            let mut picked = Vec::new();
            let mut missing = Vec::new();
            let eligible: HashSet<&str> = members
                .iter()
                .filter(|m| m.eligible)
                .map(|m| m.name.as_str())
                .collect();
            for name in policy.cluster_names.iter().flatten() {
                if eligible.contains(name.as_str()) {
                    picked.push(name.clone());
                } else {
                    missing.push(name.clone());
                }
            }
            picked.sort();
            picked.dedup();
            Ok((picked, missing))
        }
    }
}

/// A change to one Binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingChange {
    /// Create the binding in this state (at this index when Bound).
    Create {
        cluster: String,
        state: BindingState,
        index: Option<i64>,
    },
    /// Set the state (and, when Bound, the index) of an existing binding.
    Set {
        cluster: String,
        state: BindingState,
        index: Option<i64>,
    },
    /// Delete the binding (its Work goes with it).
    Delete { cluster: String },
}

/// How the placement's bindings must change. Under `External`, the placement only creates
/// bindings as `Scheduled` and marks unselected ones `Unscheduled`: pointing clusters at a
/// snapshot and removing unselected ones is the UpdateRuns' job. Under `RollingUpdate` the hub
/// binds every selected cluster to the latest snapshot and deletes unselected bindings itself.
pub fn binding_changes(
    strategy: RolloutStrategyType,
    selected: &[String],
    existing: &BTreeMap<String, (BindingState, Option<i64>)>,
    latest: Option<i64>,
) -> Vec<BindingChange> {
    let mut changes = Vec::new();
    for cluster in selected {
        let current = existing.get(cluster);
        match strategy {
            RolloutStrategyType::External => match current {
                None => changes.push(BindingChange::Create {
                    cluster: cluster.clone(),
                    state: BindingState::Scheduled,
                    index: None,
                }),
                Some((BindingState::Unscheduled, index)) => changes.push(BindingChange::Set {
                    cluster: cluster.clone(),
                    state: BindingState::Scheduled,
                    index: *index,
                }),
                Some(_) => {}
            },
            RolloutStrategyType::RollingUpdate => {
                let Some(latest) = latest else { continue };
                match current {
                    None => changes.push(BindingChange::Create {
                        cluster: cluster.clone(),
                        state: BindingState::Bound,
                        index: Some(latest),
                    }),
                    Some((BindingState::Bound, Some(i))) if *i == latest => {}
                    Some(_) => changes.push(BindingChange::Set {
                        cluster: cluster.clone(),
                        state: BindingState::Bound,
                        index: Some(latest),
                    }),
                }
            }
        }
    }
    let chosen: HashSet<&str> = selected.iter().map(String::as_str).collect();
    for (cluster, (state, index)) in existing {
        if chosen.contains(cluster.as_str()) {
            continue;
        }
        match strategy {
            RolloutStrategyType::External if *state != BindingState::Unscheduled => {
                changes.push(BindingChange::Set {
                    cluster: cluster.clone(),
                    state: BindingState::Unscheduled,
                    index: *index,
                })
            }
            RolloutStrategyType::External => {}
            RolloutStrategyType::RollingUpdate => changes.push(BindingChange::Delete {
                cluster: cluster.clone(),
            }),
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn member(name: &str, env: &str, eligible: bool) -> Member {
        Member {
            name: name.into(),
            labels: BTreeMap::from([("env".to_string(), env.to_string())]),
            eligible,
        }
    }

    fn members() -> Vec<Member> {
        vec![
            member("b", "prod", true),
            member("a", "prod", true),
            member("c", "dev", true),
            member("d", "prod", false),
        ]
    }

    #[test]
    fn pick_all_takes_joined_clusters_matching_the_selector() {
        assert_eq!(
            select(None, &members()).unwrap(),
            (vec!["a".into(), "b".into(), "c".into()], vec![])
        );
        let policy: PlacementPolicy =
            serde_json::from_value(json!({"clusterSelector": {"matchLabels": {"env": "prod"}}}))
                .unwrap();
        assert_eq!(select(Some(&policy), &members()).unwrap().0, ["a", "b"]);
    }

    #[test]
    fn pick_fixed_takes_the_named_clusters_and_reports_the_missing() {
        let policy: PlacementPolicy = serde_json::from_value(
            json!({"placementType": "PickFixed", "clusterNames": ["c", "d", "x", "a"]}),
        )
        .unwrap();
        assert_eq!(
            select(Some(&policy), &members()).unwrap(),
            (vec!["a".into(), "c".into()], vec!["d".into(), "x".into()])
        );
    }

    #[test]
    fn external_placements_only_schedule_and_unschedule() {
        let existing = BTreeMap::from([
            ("a".to_string(), (BindingState::Bound, Some(3))),
            ("b".to_string(), (BindingState::Scheduled, None)),
            ("gone".to_string(), (BindingState::Bound, Some(3))),
            ("back".to_string(), (BindingState::Unscheduled, Some(2))),
        ]);
        let selected: Vec<String> = ["a", "b", "new", "back"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let changes = binding_changes(RolloutStrategyType::External, &selected, &existing, Some(4));
        assert_eq!(
            changes,
            vec![
                BindingChange::Create {
                    cluster: "new".into(),
                    state: BindingState::Scheduled,
                    index: None
                },
                BindingChange::Set {
                    cluster: "back".into(),
                    state: BindingState::Scheduled,
                    index: Some(2)
                },
                BindingChange::Set {
                    cluster: "gone".into(),
                    state: BindingState::Unscheduled,
                    index: Some(3)
                },
            ]
        );
    }

    #[test]
    fn rolling_updates_bind_everything_to_the_latest_snapshot() {
        let existing = BTreeMap::from([
            ("a".to_string(), (BindingState::Bound, Some(4))),
            ("b".to_string(), (BindingState::Bound, Some(3))),
            ("gone".to_string(), (BindingState::Bound, Some(3))),
        ]);
        let selected: Vec<String> = ["a", "b", "new"].iter().map(|s| s.to_string()).collect();
        let changes = binding_changes(
            RolloutStrategyType::RollingUpdate,
            &selected,
            &existing,
            Some(4),
        );
        assert_eq!(
            changes,
            vec![
                BindingChange::Set {
                    cluster: "b".into(),
                    state: BindingState::Bound,
                    index: Some(4)
                },
                BindingChange::Create {
                    cluster: "new".into(),
                    state: BindingState::Bound,
                    index: Some(4)
                },
                BindingChange::Delete {
                    cluster: "gone".into()
                },
            ]
        );
        assert!(
            binding_changes(
                RolloutStrategyType::RollingUpdate,
                &selected,
                &BTreeMap::new(),
                None
            )
            .is_empty()
        );
    }
}
