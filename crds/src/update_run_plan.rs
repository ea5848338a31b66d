//! `UpdateRunPlan`: the order in which a run updates the clusters of its large stages, frozen
//! when the run initializes.
//!
//! A run's status is written again on every step of the run (each member's report), whole. The
//! names of a 10,000-cluster run's clusters were 110 of its 128 KB, the same in every write; here
//! they are written once. The run's status keeps each large stage's progress as index ranges
//! into this order (see [`stored_stage`](crate::stored_stage)) and names its plan in
//! `status.planRef`, with the plan's uid.

#[allow(unused_imports)]
use kube::core::Rule;
use kube::{Client, CustomResource, KubeSchema, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::UpdateRun;
use crate::update_run::PlanRef;

/// The order of the clusters of each stage of an UpdateRun that has over 100 of them. Named
/// after the run, owned by it, written once when it initializes and never changed.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "UpdateRunPlan",
    plural = "updaterunplans",
    category = "fleethub",
    derive = "Default",
    derive = "PartialEq",
    doc = "The order in which an UpdateRun updates the clusters of its stages of over 100 clusters, frozen when the run initializes.",
    printcolumn(name = "Stages", type_ = "integer", json_path = ".spec.stageCount"),
    printcolumn(name = "Clusters", type_ = "integer", json_path = ".spec.clusterCount"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("an UpdateRunPlan is immutable: it is the frozen order of its run's clusters"))]
pub struct UpdateRunPlanSpec {
    /// How many stages it holds.
    #[schemars(range(min = 0))]
    pub stage_count: i32,
    /// How many clusters its stages hold together.
    #[schemars(range(min = 0))]
    pub cluster_count: i32,
    /// The stages of over 100 clusters, each with its clusters in update order.
    #[schemars(length(max = 1000))]
    pub stages: Vec<PlannedStage>,
}

/// One stage's clusters, in update order.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlannedStage {
    /// The stage (`fleethub.dev/delete` for the stage that removes the workload from clusters
    /// the placement no longer selects).
    #[schemars(length(min = 1, max = 253))]
    pub stage_name: String,
    /// The stage's clusters in update order, comma-separated: one string rather than a list,
    /// which the API server would decode and validate item by item.
    pub cluster_name_list: String,
}

impl UpdateRunPlanSpec {
    /// The plan of `run`'s stages whose clusters it keeps ([`ClusterList::InPlan`]), from their
    /// clusters as planned.
    ///
    /// [`ClusterList::InPlan`]: crate::update_run::ClusterList::InPlan
    pub fn of(status: &crate::update_run::UpdateRunStatus) -> Self {
        let planned: Vec<_> = status
            .stages()
            .filter(|s| s.cluster_list == crate::update_run::ClusterList::InPlan)
            .collect();
        let clusters: usize = planned.iter().map(|s| s.clusters.len()).sum();
        let stages: Vec<PlannedStage> = planned
            .into_iter()
            .map(|s| PlannedStage {
                stage_name: s.stage_name.clone(),
                cluster_name_list: s
                    .clusters
                    .iter()
                    .map(|c| c.cluster_name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            })
            .collect();
        UpdateRunPlanSpec {
            stage_count: stages.len() as i32,
            cluster_count: clusters as i32,
            stages,
        }
    }
}

/// Why a run's plan cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The API server did not answer.
    #[error("cannot read UpdateRunPlan {name}: {source}")]
    Read {
        /// The plan.
        name: String,
        /// What went wrong.
        #[source]
        source: kube::Error,
    },
    /// The plan is gone, is another's, or lacks a stage: the run's order is lost.
    #[error("UpdateRunPlan {name}, which holds the order of the run's clusters, {why}")]
    Lost {
        /// The plan.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Whether `plan` is the one `reference` names.
pub fn check(plan: Option<&UpdateRunPlan>, reference: &PlanRef) -> Result<(), PlanError> {
    let lost = |why: &str| PlanError::Lost {
        name: reference.name.clone(),
        why: why.to_string(),
    };
    match plan {
        None => Err(lost("does not exist (it was deleted)")),
        Some(p) if p.uid().as_deref() != Some(reference.uid.as_str()) => Err(lost(
            "is not the one the run wrote (it was deleted and created again)",
        )),
        Some(_) => Ok(()),
    }
}

/// Whether `run` has stages whose clusters are in its UpdateRunPlan, not read yet.
pub fn needs_plan(run: &UpdateRun) -> bool {
    run.status.as_ref().is_some_and(|s| s.plan_unread())
}

/// The UpdateRunPlan to read from the API server for `run`: None when the run needs none, or
/// when `known` (a plan read earlier; plans never change) is the one its `status.planRef` names.
pub fn plan_to_read<'a>(run: &'a UpdateRun, known: Option<&UpdateRunPlan>) -> Option<&'a str> {
    if !needs_plan(run) {
        return None;
    }
    let reference = run.status.as_ref()?.plan_ref.as_ref()?;
    let known_uid = known.and_then(|p| p.metadata.uid.as_deref());
    (known_uid != Some(reference.uid.as_str())).then_some(reference.name.as_str())
}

/// Reads into `run` the clusters of the stages kept in `plan` (its UpdateRunPlan as read from
/// the API server: None if there is none). A run that needs no plan is left as it is.
pub fn read_into(run: &mut UpdateRun, plan: Option<&UpdateRunPlan>) -> Result<(), PlanError> {
    let name = run.name_any();
    let Some(status) = run.status.as_mut().filter(|s| s.plan_unread()) else {
        return Ok(());
    };
    let Some(reference) = status.plan_ref.clone() else {
        return Err(PlanError::Lost {
            name,
            why: "is not named in status.planRef".into(),
        });
    };
    check(plan, &reference)?;
    if let Some(plan) = plan {
        status
            .read_plan(&plan.spec)
            .map_err(|why| PlanError::Lost {
                name: reference.name.clone(),
                why,
            })?;
    }
    Ok(())
}

/// `run` with the clusters of every stage, reading its UpdateRunPlan when a stage's are there
/// (one GET). A run without one is returned as it is.
pub async fn read_run(client: &Client, mut run: UpdateRun) -> Result<UpdateRun, PlanError> {
    let plan = match plan_to_read(&run, None) {
        Some(name) => {
            let plans: kube::Api<UpdateRunPlan> = kube::Api::all(client.clone());
            plans
                .get_opt(name)
                .await
                .map_err(|source| PlanError::Read {
                    name: name.to_string(),
                    source,
                })?
        }
        None => None,
    };
    read_into(&mut run, plan.as_ref())?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update_run::{
        ClusterList, ClusterUpdatingStatus, StageUpdatingStatus, UpdateRunStatus,
    };

    fn stage(name: &str, clusters: usize, list: ClusterList) -> StageUpdatingStatus {
        StageUpdatingStatus {
            stage_name: name.into(),
            clusters: (0..clusters)
                .map(|i| ClusterUpdatingStatus {
                    cluster_name: format!("{name}-{i}"),
                    ..Default::default()
                })
                .collect(),
            cluster_list: list,
            ..Default::default()
        }
    }

    #[test]
    fn a_plan_holds_the_stages_kept_in_it_and_reads_back_into_the_status() {
        let status = UpdateRunStatus {
            stages_status: vec![
                stage("canary", 3, ClusterList::InStatus),
                stage("edge", 150, ClusterList::InPlan),
            ],
            deletion_stage_status: Some(stage(
                crate::update_run::DELETION_STAGE,
                120,
                ClusterList::InPlan,
            )),
            ..Default::default()
        };
        let plan = UpdateRunPlanSpec::of(&status);
        assert_eq!((plan.stage_count, plan.cluster_count), (2, 270));
        assert_eq!(plan.stages[0].stage_name, "edge");
        assert!(
            plan.stages[0]
                .cluster_name_list
                .starts_with("edge-0,edge-1,")
        );
        let mut read: UpdateRunStatus =
            serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
        assert!(read.plan_unread());
        assert!(read.stages_status[1].clusters.is_empty());
        read.read_plan(&plan).unwrap();
        assert!(!read.plan_unread());
        assert_eq!(read, status);
        // A plan without one of the stages says which.
        let mut read: UpdateRunStatus =
            serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
        let partial = UpdateRunPlanSpec {
            stages: plan.stages[..1].to_vec(),
            ..plan.clone()
        };
        assert_eq!(
            read.read_plan(&partial).unwrap_err(),
            "it has no clusters for stage fleethub.dev/delete"
        );
    }

    #[test]
    fn a_plan_is_read_again_only_when_the_one_known_is_not_the_runs() {
        let mut stored = UpdateRunStatus {
            stages_status: vec![stage("edge", 150, ClusterList::InPlan)],
            plan_ref: Some(PlanRef {
                name: "r".into(),
                uid: "u1".into(),
            }),
            ..Default::default()
        };
        let mut run = UpdateRun::new("r", Default::default());
        run.status = Some(stored.clone());
        assert_eq!(plan_to_read(&run, None), None, "its clusters are read");
        run.status = Some(serde_json::from_value(serde_json::to_value(&stored).unwrap()).unwrap());
        let mut known = UpdateRunPlan::new("r", UpdateRunPlanSpec::of(&stored));
        assert_eq!(plan_to_read(&run, None), Some("r"));
        known.metadata.uid = Some("u0".into());
        assert_eq!(plan_to_read(&run, Some(&known)), Some("r"), "another plan");
        known.metadata.uid = Some("u1".into());
        assert_eq!(plan_to_read(&run, Some(&known)), None);
        stored.plan_ref = None;
        run.status = Some(serde_json::from_value(serde_json::to_value(&stored).unwrap()).unwrap());
        assert_eq!(
            plan_to_read(&run, None),
            None,
            "no plan named: nothing to read"
        );
        assert!(read_into(&mut run, None).is_err());
    }

    #[test]
    fn a_plan_deleted_or_created_again_is_lost() {
        let reference = PlanRef {
            name: "r".into(),
            uid: "u1".into(),
        };
        let mut plan = UpdateRunPlan::new("r", UpdateRunPlanSpec::default());
        plan.metadata.uid = Some("u1".into());
        assert!(check(Some(&plan), &reference).is_ok());
        let gone = check(None, &reference).unwrap_err();
        assert!(matches!(gone, PlanError::Lost { .. }));
        assert_eq!(
            gone.to_string(),
            "UpdateRunPlan r, which holds the order of the run's clusters, does not exist (it was deleted)"
        );
        plan.metadata.uid = Some("u2".into());
        assert!(
            check(Some(&plan), &reference)
                .unwrap_err()
                .to_string()
                .contains("deleted and created again")
        );
    }
}
