//! Member-path figures that need a placement strategy, with the fleet's real members and agents:
//! an approval gate between two stages (member-1, then member-2), timed from the approval to the
//! object on member-2; and `whenToApply: IfNotDrifted`, timed from an edit on member-1 to the
//! drift in the Work's status on the hub.

use std::time::{Duration, Instant};

use fleethub_crds::update_run::{PROGRESSING, SUCCEEDED, reason as run_reason};
use fleethub_crds::{ApprovalRequest, MemberCluster, Placement, UpdateRun, Work, names};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::Bench;
use crate::fleet_objects as objects;
use crate::member_path::{PREFIX, Seen, meta, placement_label, record, seen_after, seen_at};
use crate::report::Scenario;
use crate::sim::BENCH_LABEL;
use crate::stats::summarize;

/// The gated placement, its namespace, its strategy; its runs are `<GATED>-<n>`.
const GATED: &str = "bench-mp-gated";
/// The `IfNotDrifted` placement and its namespace.
const IF_NOT_DRIFTED: &str = "bench-mp-ind";
/// The label that puts member-1 in stage `first` and member-2 in stage `second`.
const STAGE: &str = "bench.fleethub.dev/member-path-stage";
/// The field manager of that label (released at clean-up, which removes it).
const LABEL_MANAGER: &str = "fleethub-bench-member-path";
/// The field manager of the bench's edits on a member: kubectl's, so the agent sees a person's
/// edit.
const EDITOR: &str = "kubectl-edit";

/// The `(path, member value)` pairs of the drift a Work reports for its manifest `kind/name`.
fn reported_drift(w: &Work, kind: &str, name: &str) -> Vec<(String, String)> {
    let Some(status) = &w.status else {
        return Vec::new();
    };
    status
        .manifest_conditions
        .iter()
        .filter(|m| m.identifier.kind == kind && m.identifier.name == name)
        .filter_map(|m| m.drift.as_ref())
        .flat_map(|d| &d.fields)
        .map(|f| {
            let value = f.member_value.as_deref().unwrap_or("absent");
            // Values are JSON; a string's quotes are left out.
            let value = match serde_json::from_str::<Value>(value) {
                Ok(Value::String(s)) => s,
                _ => value.to_string(),
            };
            (f.path.clone(), value)
        })
        .collect()
}

/// Whether run `r` is waiting at an after-stage task.
fn waiting(r: &UpdateRun) -> bool {
    r.status
        .as_ref()
        .and_then(|s| fleethub_crds::conditions::find(&s.conditions, PROGRESSING))
        .is_some_and(|c| c.reason == run_reason::WAITING)
}

/// Whether run `r` succeeded.
fn succeeded(r: &UpdateRun) -> bool {
    r.status
        .as_ref()
        .and_then(|s| fleethub_crds::conditions::find(&s.conditions, SUCCEEDED))
        .is_some_and(|c| c.status == "True")
}

impl Bench {
    /// Approval → the object on the first member of the next stage: runs over member-1 (stage
    /// `first`, an Approval after it) then member-2 (stage `second`); each run's approval is
    /// made once the run waits for it, as `kubectl patch --subresource=status` makes it, and
    /// timed until member-2's ConfigMap has the run's value (a watch of member-2).
    pub(crate) async fn member_path_approvals(
        &mut self,
        samples: usize,
        member_2: &Client,
    ) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let apply = PatchParams::apply(fleethub_crds::field_manager::BENCH).force();
        for (member, stage) in [("member-1", "first"), ("member-2", "second")] {
            let label = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": member, "labels": {STAGE: stage}}});
            Api::<MemberCluster>::all(hub.clone())
                .patch(
                    member,
                    &PatchParams::apply(LABEL_MANAGER).force(),
                    &Patch::Apply(&label),
                )
                .await?;
        }
        let strategy = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
            "metadata": meta(GATED, None), "spec": {"stages": [
                {"name": "first", "labelSelector": {"matchLabels": {STAGE: "first"}},
                 "afterStageTasks": [{"type": "Approval"}]},
                {"name": "second", "labelSelector": {"matchLabels": {STAGE: "second"}}}]}});
        Api::<fleethub_crds::StagedUpdateStrategy>::all(hub.clone())
            .patch(GATED, &apply, &Patch::Apply(&strategy))
            .await?;
        self.content(GATED, 0, "g0", "").await?;
        let clusters = vec!["member-1".to_string(), "member-2".to_string()];
        objects::create_placement(&hub, GATED, GATED, &clusters).await?;

        let arrived: Seen = Default::default();
        record(
            Api::<ConfigMap>::namespaced(member_2.clone(), GATED),
            BENCH_LABEL.into(),
            arrived.clone(),
            |cm: &ConfigMap| cm.data.as_ref()?.get("v").cloned(),
        );
        let runs_label = format!("{BENCH_LABEL}=true");
        let start = Instant::now();
        let mut latencies = Vec::new();
        for j in 0..samples {
            let value = format!("g{j}");
            self.content(GATED, 0, &value, "").await?;
            objects::wait_placed(&hub, GATED, j as u64, clusters.len(), self.timeout).await?;
            let run = format!("{GATED}-{j}");
            objects::create_run(&hub, &run, GATED, j as i64, GATED).await?;
            let request = names::approval_request_name(&run, "first");
            objects::wait_until(
                Api::<UpdateRun>::all(hub.clone()),
                &runs_label,
                &format!("run {run} to wait for its approval"),
                self.timeout,
                |runs| runs.iter().any(|r| r.name_any() == run && waiting(r)),
            )
            .await?;
            objects::wait_until(
                Api::<ApprovalRequest>::all(hub.clone()),
                &format!("{}={run}", names::UPDATE_RUN_LABEL),
                &format!("ApprovalRequest {request}"),
                self.timeout,
                |a| a.iter().any(|a| a.name_any() == request),
            )
            .await?;
            let approved = Instant::now();
            objects::approve(&hub, &request).await?;
            let deadline = approved + self.timeout;
            let key = format!("{GATED}/c-0");
            let at = loop {
                if let Some(at) = seen_at(&arrived, &key, &value) {
                    break at;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{value} not on member-2 within {:?} of approving {request}",
                    self.timeout
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            latencies.push(at.saturating_duration_since(approved));
            // The next run starts once this one is done (else it would supersede it).
            objects::wait_until(
                Api::<UpdateRun>::all(hub.clone()),
                &runs_label,
                &format!("run {run} to succeed"),
                self.timeout,
                |runs| runs.iter().any(|r| r.name_any() == run && succeeded(r)),
            )
            .await?;
        }
        self.report(Scenario {
            name: format!("member path: {samples} gated runs, member-1 then member-2"),
            members: 2,
            clusters: samples * 2,
            seconds: start.elapsed().as_secs_f64(),
            special: Some((
                "approval → object on the next stage's first member".into(),
                summarize(&latencies),
            )),
            ..Default::default()
        });
        Ok(())
    }

    /// `whenToApply: IfNotDrifted` on member-1: a ConfigMap edited and a Deployment scaled there
    /// by a person (kubectl's field manager), each timed until the Work's status on the hub
    /// reports the member's new value.
    pub(crate) async fn member_path_if_not_drifted(
        &mut self,
        rounds: usize,
        member_1: &Client,
    ) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let ns = IF_NOT_DRIFTED;
        self.content(ns, 1, "0", "registry.invalid/web:0").await?;
        let placement = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": meta(ns, None),
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": ns}],
                     "policy": {"placementType": "PickFixed", "clusterNames": ["member-1"]},
                     "strategy": {"type": "RollingUpdate", "applyStrategy": {"whenToApply": "IfNotDrifted"}}}});
        objects::apply(&Api::<Placement>::all(hub.clone()), ns, &placement).await?;
        let work = names::work_name(ns);
        let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace("member-1"));
        // Records, per value, when the Work first reports `field` of `kind/name` drifted to it.
        let reported = |kind: &'static str, name: &'static str, field: &'static str| {
            let seen: Seen = Default::default();
            let w = work.clone();
            record(
                works.clone(),
                placement_label(ns),
                seen.clone(),
                move |x: &Work| {
                    (x.name_any() == w)
                        .then(|| reported_drift(x, kind, name))?
                        .into_iter()
                        .find(|(p, _)| p == field)
                        .map(|(_, v)| v)
                },
            );
            seen
        };
        let cm_reported = reported("ConfigMap", "c-0", "data.v");
        let scale_reported = reported("Deployment", "web", "spec.replicas");
        // The content is on member-1 and applied.
        self.wait_work_applied(&names::member_namespace("member-1"), &work)
            .await?;
        let cms: Api<ConfigMap> = Api::namespaced(member_1.clone(), ns);
        let deployments: Api<Deployment> = Api::namespaced(member_1.clone(), ns);
        let edit = PatchParams {
            field_manager: Some(EDITOR.into()),
            ..Default::default()
        };
        let timeout = self.timeout;
        let wait_reported = |seen: Seen, key: String, value: String, since: Instant| async move {
            let deadline = since + timeout;
            loop {
                if let Some(at) = seen_after(&seen, &key, &value, Some(since)) {
                    return Ok::<Duration, anyhow::Error>(at.saturating_duration_since(since));
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{key}: {value} not reported within {timeout:?}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let key = format!("{}/{work}", names::member_namespace("member-1"));
        let (mut edited, mut scaled) = (Vec::new(), Vec::new());
        let start = Instant::now();
        for i in 1..=rounds {
            let value = format!("ind-{i}");
            let sent = Instant::now();
            cms.patch("c-0", &edit, &Patch::Merge(json!({"data": {"v": value}})))
                .await?;
            edited.push(wait_reported(cm_reported.clone(), key.clone(), value, sent).await?);

            // 2, 3, 2, …: each round a value the Work does not report yet.
            let replicas = 2 + (i % 2) as i32;
            let sent = Instant::now();
            deployments
                .patch(
                    "web",
                    &edit,
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await?;
            scaled.push(
                wait_reported(
                    scale_reported.clone(),
                    key.clone(),
                    replicas.to_string(),
                    sent,
                )
                .await?,
            );
        }
        for (what, samples) in [
            (
                "ConfigMap edited on the member → reported (IfNotDrifted)",
                edited,
            ),
            (
                "Deployment scaled on the member → reported (IfNotDrifted)",
                scaled,
            ),
        ] {
            self.report(Scenario {
                name: format!("member path: IfNotDrifted ×{rounds}"),
                members: 1,
                seconds: start.elapsed().as_secs_f64(),
                special: Some((what.into(), summarize(&samples))),
                ..Default::default()
            });
        }
        Ok(())
    }

    /// Removes what only the strategy figures created: their runs, the gated strategy, and
    /// the members' stage label (their placements and namespaces start with the member path's
    /// prefix and go with the rest).
    pub(crate) async fn member_path_strategies_clean_up(&self) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let runs: Api<UpdateRun> = Api::all(hub.clone());
        for r in runs
            .list(&ListParams::default().labels(&format!("{BENCH_LABEL}=true")))
            .await?
            .items
        {
            if r.name_any().starts_with(PREFIX) {
                match runs
                    .delete(&r.name_any(), &DeleteParams::background())
                    .await
                {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        match Api::<fleethub_crds::StagedUpdateStrategy>::all(hub.clone())
            .delete(GATED, &DeleteParams::background())
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
        for member in ["member-1", "member-2"] {
            // Applying nothing under the label's manager removes the label it alone set.
            let none = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": member}});
            match Api::<MemberCluster>::all(hub.clone())
                .patch(
                    member,
                    &PatchParams::apply(LABEL_MANAGER).force(),
                    &Patch::Apply(&none),
                )
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
