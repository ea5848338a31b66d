//! What a restarted hub knows of the objects it provisioned for members before it stopped.
//!
//! Membership applies six objects per member, the ClusterRoleBinding last, and marks that one
//! with a fingerprint of all six. A restarted hub lists the marked ClusterRoleBindings once:
//! a member whose mark matches what it would apply now is trusted as provisioned, and its
//! objects are re-asserted within the next `REPROVISION_AFTER` (spread by member) instead of
//! all at once. At 1,000 members that turns 6,000 applies at start, which held every other
//! controller's first requests back, into one list. A member whose objects would change (a
//! newer hub grants agents other rights), or whose provisioning a crash cut short (no mark),
//! is provisioned at once as before.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::ListParams;
use kube::{Api, Client};

/// The annotation on a member's ClusterRoleBinding: the fingerprint of everything provisioned.
pub const ANNOTATION: &str = "fleethub.dev/provisioned";

/// FNV-1a (64 bit) over the JSON of `objects`, in hex: the same objects give the same
/// fingerprint in every build.
pub fn fingerprint(objects: &[&dyn erased::Json]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for object in objects {
        for byte in object.json() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

/// Serializable objects of different types in one slice.
pub mod erased {
    /// An object's JSON.
    pub trait Json {
        /// Its JSON bytes (empty if it cannot be written, which no Kubernetes object hits).
        fn json(&self) -> Vec<u8>;
    }

    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> Vec<u8> {
            serde_json::to_vec(self).unwrap_or_default()
        }
    }
}

/// The fingerprints marked on members' ClusterRoleBindings, by the uid of the MemberCluster
/// that owns each. Empty if they cannot be listed: then every member is provisioned at once.
pub async fn recorded(client: &Client, cluster_label: &str) -> HashMap<String, String> {
    let api: Api<ClusterRoleBinding> = Api::all(client.clone());
    let list = match api.list(&ListParams::default().labels(cluster_label)).await {
        Ok(list) => list,
        Err(e) => {
            tracing::info!(error = %e, "cannot list the members' ClusterRoleBindings; provisioning every member again");
            return HashMap::new();
        }
    };
    list.items
        .iter()
        .filter_map(|crb| {
            let mark = crb.metadata.annotations.as_ref()?.get(ANNOTATION)?;
            let owner = crb.metadata.owner_references.as_ref()?.first()?;
            Some((owner.uid.clone(), mark.clone()))
        })
        .collect()
}

/// When a member's objects count as last provisioned, if `recorded` (its mark) is `expected`
/// (what would be applied now): a moment within the last `period`, chosen by its `uid`, so the
/// re-assertions of many members spread over the period.
pub fn trusted_since(
    recorded: Option<&str>,
    expected: &str,
    uid: &str,
    now: Timestamp,
    period: Duration,
) -> Option<Timestamp> {
    if recorded != Some(expected) {
        return None;
    }
    // FNV of similar short strings differs in few bits: mixed (SplitMix64's finalizer) before
    // taking the remainder.
    let mut x = u64::from_str_radix(&fingerprint(&[&uid]), 16).unwrap_or(0);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let offset = x % period.as_secs().max(1);
    now.checked_sub(jiff::SignedDuration::from_secs(offset as i64))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_trusted_only_when_it_matches_and_spreads_members_over_the_period() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let period = Duration::from_secs(600);
        assert_eq!(trusted_since(None, "abc", "uid-1", now, period), None);
        assert_eq!(
            trusted_since(Some("old"), "abc", "uid-1", now, period),
            None
        );
        let mut offsets: Vec<i64> = (0..100)
            .map(|i| {
                let at =
                    trusted_since(Some("abc"), "abc", &format!("uid-{i}"), now, period).unwrap();
                now.as_second() - at.as_second()
            })
            .collect();
        assert!(offsets.iter().all(|o| (0..600).contains(o)), "{offsets:?}");
        offsets.sort();
        offsets.dedup();
        assert!(offsets.len() > 80, "spread, not bunched: {offsets:?}");
        // The same member always gets the same moment.
        assert_eq!(
            trusted_since(Some("abc"), "abc", "uid-7", now, period),
            trusted_since(Some("abc"), "abc", "uid-7", now, period)
        );
    }

    #[test]
    fn the_fingerprint_follows_the_content() {
        let a = serde_json::json!({"rules": ["get"]});
        let b = serde_json::json!({"rules": ["get", "list"]});
        assert_eq!(fingerprint(&[&a, &b]), fingerprint(&[&a, &b]));
        assert_ne!(fingerprint(&[&a, &b]), fingerprint(&[&b, &a]));
        assert_ne!(fingerprint(&[&a]), fingerprint(&[&b]));
        assert_eq!(fingerprint(&[&a]).len(), 16);
    }
}
