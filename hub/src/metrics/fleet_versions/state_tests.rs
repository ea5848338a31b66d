use std::cell::RefCell;

use prometheus_client::registry::Registry;

use super::super::FleetVersions;
use super::*;

const P: &str = "web";

fn reading(cluster: &str, running: Option<i64>, bound: Option<i64>) -> ClusterReading<'_> {
    ClusterReading {
        cluster,
        running,
        bound,
        overrides_failed: false,
        health_timeout: None,
    }
}

/// The time of the tests' observations (moves' deadlines are five minutes after).
fn t0() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn undecided(_: &ClusterReading<'_>, _: i64) -> Option<Outcome> {
    None
}

fn snapshot(cluster: &str, value: Option<i64>) -> (ClusterLabels, Option<i64>) {
    (cluster_labels(P, cluster), value)
}

fn transition(from: &str, to: &str, outcome: Outcome, count: bool) -> (TransitionLabels, bool) {
    let labels = TransitionLabels {
        placement: P.to_string(),
        from: from.to_string(),
        to: to.to_string(),
        outcome: outcome.as_str(),
    };
    (labels, count)
}

fn info(cluster: &str, snapshot: i64, image: &str, add: bool) -> (VersionInfoLabels, bool) {
    let labels = VersionInfoLabels {
        placement: P.to_string(),
        cluster: cluster.to_string(),
        policy: "auto".to_string(),
        snapshot: snapshot.to_string(),
        image: image.to_string(),
    };
    (labels, add)
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

impl PartialOrd for ClusterLabels {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ClusterLabels {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.placement, &self.cluster).cmp(&(&other.placement, &other.cluster))
    }
}

fn auto(target: &str) -> Vec<PolicyTarget> {
    vec![PolicyTarget {
        policy: "auto".to_string(),
        target: target.to_string(),
    }]
}

#[test]
fn each_cluster_running_a_snapshot_has_a_series_and_only_changes_are_written() {
    let mut s = State::default();
    let first = s.observe(
        P,
        [
            reading("a", Some(3), Some(3)),
            reading("b", Some(2), Some(3)),
            reading("new", None, None),
        ],
        t0(),
        undecided,
    );
    assert_eq!(
        sorted(first.snapshots),
        [snapshot("a", Some(3)), snapshot("b", Some(2))],
        "a cluster that runs nothing yet has no series"
    );
    assert!(first.transitions.is_empty(), "{:?}", first.transitions);

    let same = s.observe(
        P,
        [
            reading("a", Some(3), Some(3)),
            reading("b", Some(2), Some(3)),
            reading("new", None, None),
        ],
        t0(),
        undecided,
    );
    assert_eq!(same, Changes::default(), "nothing moved: nothing written");

    // b applied 3; "new" is no longer selected (its Binding is gone or Unscheduled).
    let later = s.observe(
        P,
        [
            reading("a", Some(3), Some(3)),
            reading("b", Some(3), Some(3)),
        ],
        t0(),
        undecided,
    );
    assert_eq!(later.snapshots, [snapshot("b", Some(3))]);
    let gone = s.observe(P, [reading("b", Some(3), Some(3))], t0(), undecided);
    assert_eq!(
        gone.snapshots,
        [snapshot("a", None)],
        "a's series is removed"
    );
}

#[test]
fn a_move_is_counted_once_when_it_ends_with_the_snapshot_it_left() {
    let mut s = State::default();
    s.observe(P, [reading("a", Some(1), Some(1))], t0(), undecided);
    // A run points a at 2: a move 1 → 2 starts; nothing is counted before its outcome.
    let asked = RefCell::new(Vec::new());
    let pending = |r: &ClusterReading<'_>, to: i64| {
        asked.borrow_mut().push((r.cluster.to_string(), to));
        None
    };
    let bound = s.observe(P, [reading("a", Some(1), Some(2))], t0(), pending);
    assert!(bound.transitions.is_empty());
    assert!(asked.borrow().is_empty(), "no verdict asked before a move");
    let applied = s.observe(P, [reading("a", Some(2), Some(2))], t0(), pending);
    assert_eq!(applied.snapshots, [snapshot("a", Some(2))]);
    assert!(applied.transitions.is_empty());
    assert_eq!(*asked.borrow(), [("a".to_string(), 2)]);

    let available = |_: &ClusterReading<'_>, to: i64| (to == 2).then_some(Outcome::Available);
    let done = s.observe(P, [reading("a", Some(2), Some(2))], t0(), available);
    assert_eq!(
        done.transitions,
        [transition("1", "2", Outcome::Available, true)]
    );
    let again = s.observe(P, [reading("a", Some(2), Some(2))], t0(), available);
    assert!(again.transitions.is_empty(), "counted once");
}

#[test]
fn a_first_snapshot_comes_from_none_and_failures_and_takeovers_are_told_apart() {
    let mut s = State::default();
    s.observe(
        P,
        [reading("a", None, None), reading("b", Some(1), Some(1))],
        t0(),
        undecided,
    );
    s.observe(
        P,
        [reading("a", None, Some(1)), reading("b", Some(1), Some(2))],
        t0(),
        undecided,
    );
    let failed = |r: &ClusterReading<'_>, _: i64| (r.cluster == "b").then_some(Outcome::Failed);
    let judged = s.observe(
        P,
        [reading("a", None, Some(1)), reading("b", Some(2), Some(2))],
        t0(),
        failed,
    );
    assert_eq!(
        judged.transitions,
        [transition("1", "2", Outcome::Failed, true)]
    );
    // a is pointed at 3 before 1 became available: 1 is superseded, and the move to 3 starts
    // from what a runs (nothing).
    let rebound = s.observe(
        P,
        [reading("a", None, Some(3)), reading("b", Some(2), Some(2))],
        t0(),
        undecided,
    );
    assert_eq!(
        rebound.transitions,
        [transition(FROM_NONE, "1", Outcome::Superseded, true)]
    );
    let available = |_: &ClusterReading<'_>, _: i64| Some(Outcome::Available);
    let done = s.observe(
        P,
        [
            reading("a", Some(3), Some(3)),
            reading("b", Some(2), Some(2)),
        ],
        t0(),
        available,
    );
    assert_eq!(
        done.transitions,
        [transition(FROM_NONE, "3", Outcome::Available, true)],
        "b's failed move was counted already; it starts no other"
    );
}

#[test]
fn a_move_not_available_within_its_health_timeout_failed_even_if_rolled_back_after() {
    let mut s = State::default();
    let after = |secs: i64| {
        t0().checked_add(jiff::SignedDuration::from_secs(secs))
            .unwrap()
    };
    let minute = |cluster, running, bound| ClusterReading {
        health_timeout: Some("1m"),
        ..reading(cluster, running, bound)
    };
    s.observe(
        P,
        [
            reading("a", Some(1), Some(1)),
            reading("b", Some(1), Some(1)),
        ],
        t0(),
        undecided,
    );
    s.observe(
        P,
        [minute("a", Some(1), Some(2)), minute("b", Some(1), Some(2))],
        t0(),
        undecided,
    );
    // Within its minute (less the 5 s its bind may precede this process's seeing it), a is
    // pointed back at 1: a takeover, not a failure.
    let early = s.observe(
        P,
        [minute("a", Some(2), Some(1)), minute("b", Some(2), Some(2))],
        after(54),
        undecided,
    );
    assert_eq!(
        early.transitions,
        [transition("1", "2", Outcome::Superseded, true)]
    );
    // b was not available after its minute: failed, as its run judged it before rolling it back.
    let late = s.observe(
        P,
        [minute("a", Some(1), Some(1)), minute("b", Some(2), Some(1))],
        after(55),
        undecided,
    );
    assert_eq!(
        late.transitions,
        [transition("1", "2", Outcome::Failed, true)]
    );
    // Without a health timeout on its Binding, the agent's default (5 minutes) applies.
    s.observe(P, [reading("c", Some(1), Some(1))], t0(), undecided);
    s.observe(P, [reading("c", Some(1), Some(2))], t0(), undecided);
    let within = s.observe(P, [reading("c", Some(2), Some(2))], after(294), undecided);
    assert!(within.transitions.is_empty());
    let past = s.observe(P, [reading("c", Some(2), Some(2))], after(295), undecided);
    assert_eq!(
        past.transitions,
        [transition("1", "2", Outcome::Failed, true)]
    );
}

#[test]
fn pointing_a_cluster_at_the_snapshot_it_runs_is_no_move() {
    let mut s = State::default();
    s.observe(P, [reading("a", Some(1), Some(1))], t0(), undecided);
    // Its apply of 2 failed (the member still runs 1); a rollback points it at 1 again.
    s.observe(P, [reading("a", Some(1), Some(2))], t0(), undecided);
    let failed = |_: &ClusterReading<'_>, _: i64| Some(Outcome::Failed);
    let judged = s.observe(P, [reading("a", Some(1), Some(2))], t0(), failed);
    assert_eq!(
        judged.transitions,
        [transition("1", "2", Outcome::Failed, true)]
    );
    let back = s.observe(P, [reading("a", Some(1), Some(1))], t0(), failed);
    assert!(back.transitions.is_empty(), "{:?}", back.transitions);
    let still = s.observe(P, [reading("a", Some(1), Some(1))], t0(), failed);
    assert!(still.transitions.is_empty());
}

#[test]
fn a_new_leader_counts_the_moves_its_members_have_not_applied_yet() {
    let mut s = State::default();
    // First sight: a is bound to 5 and runs 4 (a move under way); b runs what it is bound to.
    s.observe(
        P,
        [
            reading("a", Some(4), Some(5)),
            reading("b", Some(5), Some(5)),
        ],
        t0(),
        undecided,
    );
    let available = |_: &ClusterReading<'_>, _: i64| Some(Outcome::Available);
    let done = s.observe(
        P,
        [
            reading("a", Some(5), Some(5)),
            reading("b", Some(5), Some(5)),
        ],
        t0(),
        available,
    );
    assert_eq!(
        done.transitions,
        [transition("4", "5", Outcome::Available, true)]
    );
}

#[test]
fn transition_series_are_bounded_per_placement_dropping_the_least_recently_counted() {
    let mut s = State::default();
    s.observe(P, [], t0(), undecided);
    let key = |from: i64, to: i64| TransitionKey {
        from: Some(from),
        to,
        outcome: Outcome::Available,
    };
    let mut filled = Changes::default();
    for i in 0..MAX_TRANSITION_SERIES as i64 {
        s.count(P, key(i, i + 1), &mut filled);
    }
    assert!(filled.transitions.iter().all(|(_, count)| *count));
    let mut c = Changes::default();
    s.count(P, key(0, 1), &mut c); // counted again: recent again
    s.count(P, key(100, 101), &mut c);
    assert_eq!(
        c.transitions,
        [
            transition("0", "1", Outcome::Available, true),
            transition("100", "101", Outcome::Available, true),
            transition("1", "2", Outcome::Available, false)
        ]
    );
}

#[test]
fn a_policys_clusters_are_labelled_with_its_targets_image_once_looked_up() {
    let mut s = State::default();
    s.observe(
        P,
        [
            reading("a", Some(1), Some(1)),
            reading("b", Some(2), Some(2)),
        ],
        t0(),
        undecided,
    );
    let none = s.set_policies(P, &auto("Deployment/web/web/app"));
    assert_eq!(none, Changes::default(), "no series before a look-up");
    assert_eq!(
        s.images_wanted(P),
        [("auto".to_string(), 1), ("auto".to_string(), 2)]
    );
    let one = s.set_image(P, "auto", 1, Some("web:1.0".into()));
    assert_eq!(one.info, [info("a", 1, "web:1.0", true)]);
    let two = s.set_image(P, "auto", 2, None);
    assert_eq!(
        two.info,
        [info("b", 2, "", true)],
        "a snapshot without the target (or pruned) is labelled with no image"
    );
    assert!(s.images_wanted(P).is_empty());
    assert_eq!(s.set_image(P, "auto", 2, None), Changes::default());

    // a moves to 2: its series follows; a cluster running an index not looked up has none.
    let moved = s.observe(
        P,
        [
            reading("a", Some(2), Some(2)),
            reading("b", Some(3), Some(3)),
        ],
        t0(),
        undecided,
    );
    assert_eq!(
        moved.info,
        [
            info("a", 1, "web:1.0", false),
            info("a", 2, "", true),
            info("b", 2, "", false)
        ]
    );
    assert_eq!(s.images_wanted(P), [("auto".to_string(), 3)]);

    // The policy's target changes: its series go, and the images are looked up again.
    let changed = s.set_policies(P, &auto("Deployment/web/web/sidecar"));
    assert_eq!(changed.info, [info("a", 2, "", false)]);
    assert_eq!(
        s.images_wanted(P),
        [("auto".to_string(), 2), ("auto".to_string(), 3)]
    );
    s.set_image(P, "auto", 3, Some("side:2".into()));
    let deleted = s.set_policies(P, &[]);
    assert_eq!(deleted.info, [info("b", 3, "side:2", false)]);
    assert!(s.images_wanted(P).is_empty());
}

#[test]
fn a_policy_moved_to_another_placement_leaves_the_first() {
    let mut s = State::default();
    s.observe(P, [reading("a", Some(1), Some(1))], t0(), undecided);
    s.observe("api", [reading("a", Some(7), Some(7))], t0(), undecided);
    s.set_policies(P, &auto("t"));
    s.set_image(P, "auto", 1, Some("web:1".into()));
    let moved = s.set_policies("api", &auto("t"));
    assert_eq!(moved.info, [info("a", 1, "web:1", false)]);
    assert_eq!(s.images_wanted("api"), [("auto".to_string(), 7)]);
    assert!(s.images_wanted(P).is_empty());
}

#[test]
fn a_deleted_placement_takes_every_series_of_its_own_along() {
    let mut s = State::default();
    s.observe(P, [reading("a", Some(1), Some(2))], t0(), undecided);
    s.set_latest(P, Some(2));
    s.set_policies(P, &auto("t"));
    s.set_image(P, "auto", 1, Some("web:1".into()));
    let available = |_: &ClusterReading<'_>, _: i64| Some(Outcome::Available);
    s.observe(P, [reading("a", Some(2), Some(2))], t0(), available);
    s.observe("other", [reading("a", Some(1), Some(1))], t0(), undecided);
    let gone = s.retain_placements(|p| p != P);
    assert_eq!(gone.snapshots, [snapshot("a", None)]);
    assert!(gone.info.is_empty(), "a runs 2, which was not looked up");
    assert_eq!(
        gone.latest,
        [(
            PlacementLabels {
                placement: P.to_string()
            },
            None
        )]
    );
    assert_eq!(
        gone.transitions,
        [transition("1", "2", Outcome::Available, false)]
    );
    assert_eq!(s.retain_placements(|_| true), Changes::default());
    assert_eq!(s.set_latest(P, Some(3)), Changes::default(), "gone");
}

#[test]
fn the_families_follow_the_state_and_go_with_the_lead() {
    use prometheus_client::encoding::text::encode;
    let mut registry = Registry::with_prefix("fleethub_hub");
    let versions = FleetVersions::default();
    versions.register(&mut registry);
    let text = |r: &Registry| {
        let mut s = String::new();
        encode(&mut s, r).unwrap();
        s
    };
    versions.observe(P, [reading("a", Some(1), Some(2))], t0(), undecided);
    versions.set_latest(P, Some(2));
    versions.set_policies(P, &auto("t"));
    for (policy, index) in versions.images_wanted(P) {
        versions.set_image(P, &policy, index, Some(format!("web:{index}")));
    }
    let available = |_: &ClusterReading<'_>, _: i64| Some(Outcome::Available);
    versions.observe(P, [reading("a", Some(2), Some(2))], t0(), available);
    for (policy, index) in versions.images_wanted(P) {
        versions.set_image(P, &policy, index, Some(format!("web:{index}")));
    }
    let during = text(&registry);
    for want in [
        "fleethub_hub_cluster_snapshot{placement=\"web\",cluster=\"a\"} 2",
        "fleethub_hub_cluster_version_info{placement=\"web\",cluster=\"a\",policy=\"auto\",snapshot=\"2\",image=\"web:2\"} 1",
        "fleethub_hub_placement_latest_snapshot{placement=\"web\"} 2",
        "fleethub_hub_cluster_transitions_total{placement=\"web\",from=\"1\",to=\"2\",outcome=\"available\"} 1",
    ] {
        assert!(during.contains(want), "missing {want:?} in\n{during}");
    }
    assert!(!during.contains("web:1"), "{during}");
    versions.forget();
    let after = text(&registry);
    assert!(!after.contains("placement=\"web\""), "{after}");
}
