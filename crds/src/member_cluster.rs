//! `MemberCluster`: one per member cluster of the fleet.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, ObjectMeta, Time};
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Condition type: the member's agent has joined the hub.
pub const JOINED: &str = "Joined";
/// Condition type: the member's agent heartbeats on time.
pub const HEALTHY: &str = "Healthy";

/// Reasons of a MemberCluster's conditions.
pub mod reason {
    /// `Joined=True`, written by the member agent.
    pub const AGENT_JOINED: &str = "AgentJoined";
    /// `Healthy=Unknown`: no heartbeat has arrived yet.
    pub const AGENT_NOT_JOINED: &str = "AgentNotJoined";
    /// `Healthy=True`: the last heartbeat is recent.
    pub const HEARTBEAT_FRESH: &str = "HeartbeatFresh";
    /// `Healthy=False`: heartbeats stopped for several periods.
    pub const HEARTBEAT_STALE: &str = "HeartbeatStale";
}

/// Heartbeat period when `spec.heartbeatPeriodSeconds` is not set.
pub const DEFAULT_HEARTBEAT_PERIOD: Duration = Duration::from_secs(15);
/// The longest `spec.heartbeatPeriodSeconds` (the schema's maximum); the hub also caps the
/// period an agent's Lease declares at it.
pub const MAX_HEARTBEAT_PERIOD_SECONDS: u16 = 600;
/// The longest a member agent leaves its MemberCluster's status unwritten while nothing in it
/// changes (its `lastHeartbeatTime` then says when it was last confirmed). Liveness is the
/// agent's Lease ([`AGENT_LEASE`]), renewed every period; the status is written when it changes
/// and at least this often, as a kubelet reports its Node's status.
pub const STATUS_REPORT_PERIOD: Duration = Duration::from_secs(300);

/// The member agent's ServiceAccount in its member's hub namespace (`fleet-member-<name>`): the
/// identity the agent uses on the hub.
pub const AGENT_SERVICE_ACCOUNT: &str = "member-agent";
/// The member agent's heartbeat: a `coordination.k8s.io/v1` Lease of this name in its member's
/// hub namespace, renewed every heartbeat period. The hub judges `Healthy` from its `renewTime`.
pub const AGENT_LEASE: &str = "member-agent";
/// The Role (and RoleBinding) in a member's hub namespace that lets its agent read its Works
/// and write their status.
pub const AGENT_ROLE: &str = "fleethub-member-agent";
/// Finalizer `kubectl fleet unjoin` puts on a MemberCluster while it removes the member's
/// agent and what its Works deployed.
pub const UNJOIN_FINALIZER: &str = "fleethub.dev/kubectl-fleet-unjoin";

/// A member cluster of the fleet. Its labels are what update stages select on. Creating one makes
/// the hub provision namespace `fleet-member-<name>` with RBAC that lets that member's agent read
/// its Works and write only its own statuses.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "MemberCluster",
    plural = "memberclusters",
    shortname = "member",
    shortname = "mc",
    category = "fleethub",
    status = "MemberClusterStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A member cluster of the fleet. Labels on it are what StagedUpdateStrategy stages select on.",
    validation = Rule::new("self.metadata.name.size() <= 50 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS label of at most 50 characters, so that namespace fleet-member-<name> is valid"),
    printcolumn(name = "Joined", type_ = "string", json_path = ".status.conditions[?(@.type==\"Joined\")].status"),
    printcolumn(name = "Healthy", type_ = "string", json_path = ".status.conditions[?(@.type==\"Healthy\")].status"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodeCount"),
    printcolumn(name = "Kubernetes", type_ = "string", json_path = ".status.kubernetesVersion"),
    printcolumn(name = "Reported", type_ = "date", json_path = ".status.lastHeartbeatTime"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// How often the member's agent reports a heartbeat, in seconds (default 15). The hub marks
    /// the member Healthy=False when no heartbeat arrived for several periods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_HEARTBEAT_PERIOD_SECONDS))]
    pub heartbeat_period_seconds: Option<i32>,
}

/// What the member's agent last reported, and the hub's view of the member's health.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterStatus {
    /// `Joined` (the agent has connected) and `Healthy` (its heartbeat is fresh).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// When the agent last reported this status. The agent reports it when it changes and at
    /// least every 5 minutes; its heartbeat is its Lease `member-agent` in namespace
    /// `fleet-member-<name>` (and, from agents older than Leases, this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// The version of the member agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The member's Kubernetes version, as its API server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// How many nodes the member has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<i32>,
    /// The sum of the members' nodes' allocatable resources (e.g. `cpu`, `memory`, `pods`), as
    /// Kubernetes quantities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
}

/// Member `member`'s agent Lease ([`AGENT_LEASE`]) renewed at `now` by `holder` for `period`,
/// from the Lease as last read (`None`: a new one in the member's hub namespace, labelled with
/// the member's name, which is what the hub watches).
pub fn agent_lease(
    previous: Option<Lease>,
    member: &str,
    holder: &str,
    period: Duration,
    now: jiff::Timestamp,
) -> Lease {
    let mut lease = previous.unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(AGENT_LEASE.to_string()),
            namespace: Some(crate::names::member_namespace(member)),
            labels: Some(BTreeMap::from([(
                crate::names::CLUSTER_LABEL.to_string(),
                member.to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    });
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(holder.to_string());
    spec.lease_duration_seconds = Some(i32::try_from(period.as_secs()).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(now));
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_lease_is_labelled_in_its_namespace_and_renewal_keeps_the_version() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let new = agent_lease(None, "m1", "m1/pod", Duration::from_secs(15), now);
        assert_eq!(new.metadata.name.as_deref(), Some(AGENT_LEASE));
        assert_eq!(new.metadata.namespace.as_deref(), Some("fleet-member-m1"));
        assert_eq!(
            new.metadata.labels.as_ref().unwrap()["fleethub.dev/cluster"],
            "m1"
        );
        assert_eq!(new.metadata.resource_version, None);
        let spec = new.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("m1/pod"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));

        let mut read = new.clone();
        read.metadata.resource_version = Some("42".into());
        let later = now
            .checked_add(jiff::SignedDuration::from_secs(15))
            .unwrap();
        let renewed = agent_lease(Some(read), "m1", "m1/other", Duration::from_secs(30), later);
        assert_eq!(renewed.metadata.resource_version.as_deref(), Some("42"));
        let spec = renewed.spec.as_ref().unwrap();
        assert_eq!(spec.renew_time, Some(MicroTime(later)));
        assert_eq!(spec.holder_identity.as_deref(), Some("m1/other"));
        assert_eq!(spec.lease_duration_seconds, Some(30));
    }
}
