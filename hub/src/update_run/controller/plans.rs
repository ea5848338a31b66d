//! The runs' UpdateRunPlans: written once, before the status that first refers to them, and
//! read once per run and process (a plan never changes: each process keeps the plans it read,
//! by uid).

use std::collections::HashMap;
use std::sync::Mutex;

use fleethub_crds::update_run::{PlanRef, UpdateRunStatus};
use fleethub_crds::update_run_plan::{self, UpdateRunPlan, UpdateRunPlanSpec};
use kube::api::{DeleteParams, PostParams, Preconditions};

use super::*;

/// The plans read or written by this process, by run name.
#[derive(Default)]
pub(super) struct Plans(Mutex<HashMap<String, Arc<UpdateRunPlan>>>);

/// `run` with the clusters of every stage; or as it was, with why its plan is lost for good.
pub(super) enum WithPlan {
    Read(Arc<UpdateRun>),
    Lost(Arc<UpdateRun>, String),
}

impl Plans {
    /// `run` with the clusters of the stages its plan keeps (read from the API server the
    /// first time), or why that plan is lost.
    pub(super) async fn read(
        &self,
        client: &Client,
        run: Arc<UpdateRun>,
    ) -> Result<WithPlan, Error> {
        if !update_run_plan::needs_plan(&run) {
            return Ok(WithPlan::Read(run));
        }
        let known = self.known(&run.name_any());
        let plan = match update_run_plan::plan_to_read(&run, known.as_deref()) {
            Some(name) => {
                let api: Api<UpdateRunPlan> = Api::all(client.clone());
                let plan = api.get_opt(name).await?.map(Arc::new);
                if let Some(plan) = &plan {
                    self.keep(&run.name_any(), plan.clone());
                }
                plan
            }
            None => known,
        };
        let mut read = UpdateRun::clone(&run);
        Ok(
            match update_run_plan::read_into(&mut read, plan.as_deref()) {
                Ok(()) => WithPlan::Read(Arc::new(read)),
                Err(lost) => WithPlan::Lost(run, lost.to_string()),
            },
        )
    }

    /// Writes the plan of `run`'s `status` (its stages that keep their clusters in it) and
    /// returns what the status refers to it by. A plan left by an earlier attempt whose status
    /// write did not land (or by a deleted run of the same name) is replaced: no status refers
    /// to it.
    pub(super) async fn write(
        &self,
        client: &Client,
        run: &UpdateRun,
        status: &UpdateRunStatus,
    ) -> Result<PlanRef, Error> {
        let name = run.name_any();
        let spec = UpdateRunPlanSpec::of(status);
        let api: Api<UpdateRunPlan> = Api::all(client.clone());
        let mut plan = UpdateRunPlan::new(&name, spec.clone());
        plan.metadata.owner_references = run.controller_owner_ref(&()).map(|o| vec![o]);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        let created = match api.create(&params, &plan).await {
            Ok(created) => created,
            Err(kube::Error::Api(e)) if e.code == EXISTS => {
                let existing = api.get(&name).await?;
                let ours = existing
                    .owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == run.metadata.uid.as_ref());
                if ours && existing.spec == spec {
                    existing
                } else {
                    let delete = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: existing.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    api.delete(&name, &delete).await?;
                    tracing::info!(plan = %name, "replaced an UpdateRunPlan no status referred to");
                    api.create(&params, &plan).await?
                }
            }
            Err(e) => return Err(e.into()),
        };
        let uid = created.metadata.uid.clone().unwrap_or_default();
        self.keep(&name, Arc::new(created));
        Ok(PlanRef { name, uid })
    }

    fn known(&self, run: &str) -> Option<Arc<UpdateRunPlan>> {
        self.lock().get(run).cloned()
    }

    fn keep(&self, run: &str, plan: Arc<UpdateRunPlan>) {
        self.lock().insert(run.to_string(), plan);
    }

    /// Forgets the plan of `run` (it was deleted).
    fn forget(&self, run: &str) {
        self.lock().remove(run);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<UpdateRunPlan>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the plans of runs for which `exists` is false.
    pub(super) fn retain(&self, exists: impl Fn(&str) -> bool) {
        let mut plans = self.lock();
        if !plans.is_empty() {
            plans.retain(|run, _| exists(run));
        }
    }
}

/// The runs whose UpdateRunPlan was deleted (watched by metadata), each forgotten by
/// `ctx.caches.plans` before its run is reconciled: the run then finds its plan lost, as a
/// restarted hub would, instead of going on from this process' copy.
pub(super) fn deletions(
    client: Client,
    ctx: Arc<Context>,
) -> impl futures::Stream<Item = ObjectRef<UpdateRun>> + Send + 'static {
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher;
    let api: Api<PartialObjectMeta<UpdateRunPlan>> = Api::all(client);
    fleethub_runtime::watch(api, fleethub_runtime::watcher_config()).filter_map(move |event| {
        let run = match event {
            Ok(watcher::Event::Delete(plan)) => {
                let name = plan.name_any();
                ctx.caches.plans.forget(&name);
                Some(ObjectRef::new(&name))
            }
            _ => None,
        };
        std::future::ready(run)
    })
}
