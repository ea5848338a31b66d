//! What the fleet-version metrics know, and which series change when they learn more: pure,
//! so that every rule is tested without a registry.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fleethub_crds::work::DEFAULT_HEALTH_TIMEOUT;
use jiff::Timestamp;

use super::{
    Changes, ClusterLabels, ClusterReading, FROM_NONE, MAX_TRANSITION_SERIES, Outcome,
    PlacementLabels, PolicyTarget, SEEN_LATE_BY, TransitionLabels, VersionInfoLabels,
};

/// What the metrics know of every placement, and what changes when they learn more.
#[derive(Debug, Default)]
pub struct State {
    placements: HashMap<String, PlacementVersions>,
    /// The placement each AutoUpdatePolicy was last seen on (a policy may change placement).
    policies: HashMap<String, String>,
    /// Numbers the observations, to tell the clusters no longer selected.
    epoch: u64,
    /// Numbers the counts, to drop the least recently counted transition series.
    counts: u64,
}

#[derive(Debug, Default)]
struct PlacementVersions {
    clusters: HashMap<String, Tracked>,
    latest: Option<i64>,
    /// The placement's AutoUpdatePolicies by name.
    policies: BTreeMap<String, PolicyImages>,
    /// The transition series exported, with the number of their last count.
    transitions: HashMap<TransitionKey, u64>,
}

#[derive(Debug)]
struct Tracked {
    running: Option<i64>,
    bound: Option<i64>,
    /// The move under way: the Binding points at a snapshot whose outcome is not known yet.
    moving: Option<Move>,
    seen: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Move {
    from: Option<i64>,
    to: i64,
    /// Not available by then, it failed (as the run that moved it judges it; see
    /// [`SEEN_LATE_BY`]).
    deadline: Timestamp,
}

/// The move that `r`'s Binding, pointed at its snapshot when seen at `now`, starts; none when
/// the cluster already runs it.
fn started(r: &ClusterReading<'_>, now: Timestamp) -> Option<Move> {
    let to = r.bound.filter(|to| r.running != Some(*to))?;
    let timeout = r
        .health_timeout
        .and_then(|t| fleethub_crds::duration::parse(t).ok())
        .unwrap_or(DEFAULT_HEALTH_TIMEOUT)
        .saturating_sub(SEEN_LATE_BY);
    Some(Move {
        from: r.running,
        to,
        deadline: now.checked_add(timeout).unwrap_or(Timestamp::MAX),
    })
}

#[derive(Debug, Default)]
struct PolicyImages {
    target: String,
    /// The target's image by snapshot index, for the indexes looked up (None: not in the
    /// snapshot, or the snapshot is gone). An index not looked up yet has no series.
    images: BTreeMap<i64, Option<String>>,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct TransitionKey {
    from: Option<i64>,
    to: i64,
    outcome: Outcome,
}

impl TransitionKey {
    fn labels(&self, placement: &str) -> TransitionLabels {
        TransitionLabels {
            placement: placement.to_string(),
            from: self.from.map_or(FROM_NONE.to_string(), |f| f.to_string()),
            to: self.to.to_string(),
            outcome: self.outcome.as_str(),
        }
    }
}

fn cluster_labels(placement: &str, cluster: &str) -> ClusterLabels {
    ClusterLabels {
        placement: placement.to_string(),
        cluster: cluster.to_string(),
    }
}

/// The version-info series of a cluster running `running`, one per policy that looked that
/// snapshot up.
fn info_series<'p>(
    placement: &'p str,
    cluster: &'p str,
    running: Option<i64>,
    policies: &'p BTreeMap<String, PolicyImages>,
) -> impl Iterator<Item = VersionInfoLabels> + 'p {
    policies.iter().filter_map(move |(policy, p)| {
        let index = running?;
        let image = p.images.get(&index)?;
        Some(VersionInfoLabels {
            placement: placement.to_string(),
            cluster: cluster.to_string(),
            policy: policy.clone(),
            snapshot: index.to_string(),
            image: image.clone().unwrap_or_default(),
        })
    })
}

/// The series that change when a cluster's running snapshot goes from `old` to `new`.
fn running_changed(
    placement: &str,
    cluster: &str,
    (old, new): (Option<i64>, Option<i64>),
    policies: &BTreeMap<String, PolicyImages>,
    changes: &mut Changes,
) {
    changes
        .snapshots
        .push((cluster_labels(placement, cluster), new));
    let removed = info_series(placement, cluster, old, policies).map(|l| (l, false));
    changes.info.extend(removed);
    let added = info_series(placement, cluster, new, policies).map(|l| (l, true));
    changes.info.extend(added);
}

/// Every series of policy `images` on the clusters of `clusters`, added or removed.
fn policy_series(
    placement: &str,
    policy: &str,
    images: &PolicyImages,
    clusters: &HashMap<String, Tracked>,
    add: bool,
    changes: &mut Changes,
) {
    if images.images.is_empty() {
        return;
    }
    for (cluster, t) in clusters {
        let Some(index) = t.running else { continue };
        let Some(image) = images.images.get(&index) else {
            continue;
        };
        let labels = VersionInfoLabels {
            placement: placement.to_string(),
            cluster: cluster.clone(),
            policy: policy.to_string(),
            snapshot: index.to_string(),
            image: image.clone().unwrap_or_default(),
        };
        changes.info.push((labels, add));
    }
}

impl State {
    /// Takes in every selected cluster of `placement` (each reconcile reads them all) at `now`:
    /// sets the snapshot each runs, removes the clusters no longer selected, and counts the moves
    /// that ended. `verdict` says how a cluster's move to a snapshot ended by its member's
    /// report, if it did; it is asked only about clusters with a move under way. A move without
    /// a verdict by its deadline failed; one pointed elsewhere before was superseded.
    pub fn observe<'a>(
        &mut self,
        placement: &str,
        readings: impl IntoIterator<Item = ClusterReading<'a>>,
        now: Timestamp,
        verdict: impl Fn(&ClusterReading<'a>, i64) -> Option<Outcome>,
    ) -> Changes {
        self.epoch += 1;
        let epoch = self.epoch;
        let mut changes = Changes::default();
        let mut ended = Vec::new();
        if !self.placements.contains_key(placement) {
            self.placements
                .insert(placement.to_string(), PlacementVersions::default());
        }
        let Some(p) = self.placements.get_mut(placement) else {
            return changes;
        };
        let mut observed = 0;
        for r in readings {
            let Some(t) = p.clusters.get_mut(r.cluster) else {
                p.clusters.insert(
                    r.cluster.to_string(),
                    Tracked {
                        running: r.running,
                        bound: r.bound,
                        moving: started(&r, now),
                        seen: epoch,
                    },
                );
                observed += 1;
                if r.running.is_some() {
                    let change = (None, r.running);
                    running_changed(placement, r.cluster, change, &p.policies, &mut changes);
                }
                continue;
            };
            if t.seen == epoch {
                continue; // the first reading of a cluster counts
            }
            t.seen = epoch;
            observed += 1;
            let rebound = t.bound != r.bound;
            if let Some(m) = t.moving {
                let outcome = verdict(&r, m.to)
                    .or((now >= m.deadline).then_some(Outcome::Failed))
                    .or(rebound.then_some(Outcome::Superseded));
                if let Some(outcome) = outcome {
                    ended.push(TransitionKey {
                        from: m.from,
                        to: m.to,
                        outcome,
                    });
                    t.moving = None;
                }
            }
            if rebound {
                t.bound = r.bound;
                t.moving = started(&r, now);
            }
            if t.running != r.running {
                let change = (t.running, r.running);
                t.running = r.running;
                running_changed(placement, r.cluster, change, &p.policies, &mut changes);
            }
        }
        if observed < p.clusters.len() {
            let gone: Vec<String> = p
                .clusters
                .iter()
                .filter(|(_, t)| t.seen != epoch)
                .map(|(c, _)| c.clone())
                .collect();
            for cluster in gone {
                if let Some(t) = p.clusters.remove(&cluster)
                    && t.running.is_some()
                {
                    let removed = info_series(placement, &cluster, t.running, &p.policies);
                    changes.info.extend(removed.map(|l| (l, false)));
                    changes
                        .snapshots
                        .push((cluster_labels(placement, &cluster), None));
                }
            }
        }
        for key in ended {
            self.count(placement, key, &mut changes);
        }
        changes
    }

    /// Counts one transition, dropping the placement's least recently counted series beyond
    /// [`MAX_TRANSITION_SERIES`].
    fn count(&mut self, placement: &str, key: TransitionKey, changes: &mut Changes) {
        self.counts += 1;
        let Some(p) = self.placements.get_mut(placement) else {
            return;
        };
        p.transitions.insert(key, self.counts);
        changes.transitions.push((key.labels(placement), true));
        if p.transitions.len() > MAX_TRANSITION_SERIES
            && let Some(oldest) = p
                .transitions
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| *k)
        {
            p.transitions.remove(&oldest);
            changes.transitions.push((oldest.labels(placement), false));
        }
    }

    /// Sets the placement's newest snapshot index.
    pub fn set_latest(&mut self, placement: &str, latest: Option<i64>) -> Changes {
        let mut changes = Changes::default();
        if let Some(p) = self.placements.get_mut(placement)
            && p.latest != latest
        {
            p.latest = latest;
            let labels = PlacementLabels {
                placement: placement.to_string(),
            };
            changes.latest.push((labels, latest));
        }
        changes
    }

    /// Sets the AutoUpdatePolicies of `placement`: the series of policies gone (or moved to
    /// another placement) are removed; a new policy, or one whose target changed, has none until
    /// its images are looked up ([`State::images_wanted`], [`State::set_image`]).
    pub fn set_policies(&mut self, placement: &str, policies: &[PolicyTarget]) -> Changes {
        let mut changes = Changes::default();
        if !self.placements.contains_key(placement) {
            return changes;
        }
        // A policy now on this placement leaves the one it was on.
        for p in policies {
            let was = self.policies.get(&p.policy).cloned();
            if let Some(was) = was.filter(|w| w != placement) {
                self.drop_policy(&was, &p.policy, &mut changes);
            }
            self.policies
                .insert(p.policy.clone(), placement.to_string());
        }
        let Some(versions) = self.placements.get_mut(placement) else {
            return changes;
        };
        let stale: Vec<String> = versions
            .policies
            .iter()
            .filter(|(name, images)| {
                !policies
                    .iter()
                    .any(|p| p.policy == **name && p.target == images.target)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(images) = versions.policies.remove(&name) {
                policy_series(
                    placement,
                    &name,
                    &images,
                    &versions.clusters,
                    false,
                    &mut changes,
                );
            }
        }
        for p in policies {
            versions
                .policies
                .entry(p.policy.clone())
                .or_insert_with(|| PolicyImages {
                    target: p.target.clone(),
                    images: BTreeMap::new(),
                });
        }
        let known: BTreeSet<&str> = policies.iter().map(|p| p.policy.as_str()).collect();
        self.policies
            .retain(|policy, on| on != placement || known.contains(policy.as_str()));
        changes
    }

    /// Removes policy `policy`'s series from `placement`.
    fn drop_policy(&mut self, placement: &str, policy: &str, changes: &mut Changes) {
        if let Some(p) = self.placements.get_mut(placement)
            && let Some(images) = p.policies.remove(policy)
        {
            policy_series(placement, policy, &images, &p.clusters, false, changes);
        }
    }

    /// The (policy, snapshot index) pairs of `placement` whose target image is to be looked up:
    /// the indexes its clusters run that a policy has not looked up yet.
    pub fn images_wanted(&self, placement: &str) -> Vec<(String, i64)> {
        let Some(p) = self.placements.get(placement) else {
            return Vec::new();
        };
        if p.policies.is_empty() {
            return Vec::new();
        }
        let running: BTreeSet<i64> = p.clusters.values().filter_map(|t| t.running).collect();
        p.policies
            .iter()
            .flat_map(|(policy, images)| {
                running
                    .iter()
                    .filter(|i| !images.images.contains_key(i))
                    .map(move |i| (policy.clone(), *i))
            })
            .collect()
    }

    /// Records the image policy `policy`'s target has in snapshot `index` of `placement` (None:
    /// not there, or the snapshot is gone), and labels the clusters running it.
    pub fn set_image(
        &mut self,
        placement: &str,
        policy: &str,
        index: i64,
        image: Option<String>,
    ) -> Changes {
        let mut changes = Changes::default();
        let Some(p) = self.placements.get_mut(placement) else {
            return changes;
        };
        let Some(images) = p.policies.get_mut(policy) else {
            return changes;
        };
        let before = images.images.insert(index, image.clone());
        if before.as_ref() == Some(&image) {
            return changes;
        }
        for (cluster, t) in &p.clusters {
            if t.running != Some(index) {
                continue;
            }
            let labels = |image: Option<String>| VersionInfoLabels {
                placement: placement.to_string(),
                cluster: cluster.clone(),
                policy: policy.to_string(),
                snapshot: index.to_string(),
                image: image.unwrap_or_default(),
            };
            if let Some(before) = before.clone() {
                changes.info.push((labels(before), false));
            }
            changes.info.push((labels(image.clone()), true));
        }
        changes
    }

    /// Removes every series of `placement` (it was deleted).
    pub fn forget_placement(&mut self, placement: &str) -> Changes {
        let mut changes = Changes::default();
        let Some(p) = self.placements.remove(placement) else {
            return changes;
        };
        for (cluster, t) in &p.clusters {
            if t.running.is_some() {
                let removed = info_series(placement, cluster, t.running, &p.policies);
                changes.info.extend(removed.map(|l| (l, false)));
                changes
                    .snapshots
                    .push((cluster_labels(placement, cluster), None));
            }
        }
        if p.latest.is_some() {
            let labels = PlacementLabels {
                placement: placement.to_string(),
            };
            changes.latest.push((labels, None));
        }
        for key in p.transitions.keys() {
            changes.transitions.push((key.labels(placement), false));
        }
        self.policies.retain(|_, on| on != placement);
        changes
    }

    /// Removes the series of every placement `keep` refuses (deleted meanwhile: a deleted
    /// object is not reconciled again).
    pub fn retain_placements(&mut self, keep: impl Fn(&str) -> bool) -> Changes {
        let gone: Vec<String> = self
            .placements
            .keys()
            .filter(|p| !keep(p))
            .cloned()
            .collect();
        let mut changes = Changes::default();
        for placement in gone {
            let Changes {
                snapshots,
                info,
                latest,
                transitions,
            } = self.forget_placement(&placement);
            changes.snapshots.extend(snapshots);
            changes.info.extend(info);
            changes.latest.extend(latest);
            changes.transitions.extend(transitions);
        }
        changes
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
