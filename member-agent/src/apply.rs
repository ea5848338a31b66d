//! Applying a Work's manifests to the member, in dependency order ([`apply_order`]), one
//! decision per manifest.
//!
//! Each manifest is decided by [`drift::decide`] from the member's object (from the watch's
//! cache, else a GET), the Work's `applyStrategy` and whether the hub's object changed since it
//! was last applied (`appliedHash` in the Work's status): an object that neither the hub nor a
//! person changed is not applied again; drift is restored (`whenToApply: Always`) or left and
//! reported ([`correction`]); a pre-existing object is taken over per `whenToTakeOver`;
//! `ReportDiff` applies nothing.

use std::time::Instant;

use fleethub_crds::Work;
use fleethub_crds::applied_work::{AppliedResource, AppliedWork};
use fleethub_crds::apply_strategy::{ApplyStrategy, DriftType, FieldDiff};
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::work::ManifestIdentifier;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::apply_order::{OrderKey, apply_order};
use crate::context::Context;
use crate::drift::{self, Decision, Member};
use crate::error::{describe as api_message, is_not_found};
use crate::kind_resolver::ResolvedKind;
use crate::manifest::{self, Decoration, ParsedManifest, describe, owned_by};
use crate::member_objects::Cached;
use crate::{Error, correction};

/// What was applied for one manifest.
#[derive(Debug, Clone)]
pub struct AppliedObject {
    /// The object, as recorded in the AppliedWork.
    pub resource: AppliedResource,
    /// The object as the member's API server returned it after the apply.
    pub object: Value,
}

/// What happened to one manifest.
#[derive(Debug, Clone)]
pub struct ManifestOutcome {
    /// Which manifest (with the namespace it is applied into, once its kind is known).
    pub identifier: ManifestIdentifier,
    /// The member's object (applied, or already as the hub has it, or under `ReportDiff` as
    /// the member has it), or why it is not applied (naming the object).
    pub result: Result<AppliedObject, String>,
    /// Why it is not applied when the strategy says so (`Drifted`, `TakeoverRefused`); `None`
    /// for an error.
    pub refusal: Option<&'static str>,
    /// How the member's object differs from the hub's while it is left so.
    pub drift: Option<(DriftType, usize, Vec<FieldDiff>)>,
    /// The drift this reconcile undid.
    pub correction: Option<Vec<FieldDiff>>,
    /// The hash of the hub's object, when the member now has it (applied or unchanged).
    pub hash: Option<String>,
}

impl ManifestOutcome {
    fn failed(identifier: ManifestIdentifier, message: String) -> Self {
        ManifestOutcome {
            identifier,
            result: Err(message),
            refusal: None,
            drift: None,
            correction: None,
            hash: None,
        }
    }
}

/// Applies every manifest of `work` in dependency order; one outcome per manifest, in the
/// Work's order.
pub async fn apply_manifests(
    work: &Work,
    applied_work: &AppliedWork,
    ctx: &Context,
) -> Vec<ManifestOutcome> {
    let key = format!("{}/{}", ctx.namespace, work.name_any());
    let manifests = &work.spec.workload.manifests;
    let parsed: Vec<_> = manifests
        .iter()
        .enumerate()
        .map(|(i, m)| manifest::parse(i, m))
        .collect();
    // Scope decides the order; a kind not served yet (its CRD is in this Work) is resolved
    // again when its turn comes, and ordered meanwhile by whether the manifest names a namespace.
    let mut kinds: Vec<Option<ResolvedKind>> = Vec::with_capacity(parsed.len());
    for p in &parsed {
        kinds.push(match p {
            Ok(m) => ctx.kinds.resolve(&m.gvk()).await.ok().flatten(),
            Err(_) => None,
        });
    }
    let keys: Vec<OrderKey<'_>> = parsed
        .iter()
        .zip(&kinds)
        .map(|(p, k)| match p {
            Ok(m) => OrderKey {
                group: &m.group,
                kind: &m.kind,
                namespaced: k.as_ref().map_or(m.namespace.is_some(), |k| k.namespaced),
            },
            Err(_) => OrderKey {
                group: "",
                kind: "",
                namespaced: true,
            },
        })
        .collect();

    let default_strategy = ApplyStrategy::default();
    let empty = Vec::new();
    let target = Target {
        work: &key,
        placement: &work.spec.placement_name,
        applied_work,
        strategy: work
            .spec
            .apply_strategy
            .as_ref()
            .unwrap_or(&default_strategy),
        previous: work
            .status
            .as_ref()
            .map_or(&empty, |s| &s.manifest_conditions),
    };
    let mut outcomes: Vec<Option<ManifestOutcome>> = vec![None; parsed.len()];
    for i in apply_order(&keys) {
        outcomes[i] = Some(match &parsed[i] {
            Err(invalid) => {
                ManifestOutcome::failed(invalid.identifier.clone(), invalid.message.clone())
            }
            Ok(m) => apply_one(m, kinds[i].take(), &target, ctx).await,
        });
    }
    outcomes.into_iter().flatten().collect()
}

/// Where manifests are applied for.
struct Target<'a> {
    /// The Work, `namespace/name`.
    work: &'a str,
    /// Its placement.
    placement: &'a str,
    /// Its AppliedWork.
    applied_work: &'a AppliedWork,
    /// Its apply strategy.
    strategy: &'a ApplyStrategy,
    /// Its manifests' status as last reported (their `appliedHash`, drift first seen).
    previous: &'a Vec<fleethub_crds::work::ManifestCondition>,
}

/// The hash recorded for a manifest: of the hub's object and the placement it is applied for.
fn manifest_hash(manifest: &Value, placement: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(placement.as_bytes());
    hasher.update([0]);
    hasher.update(manifest.to_string().as_bytes());
    let digest = hasher.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies one manifest; the outcome's error names the object and the API server's message.
async fn apply_one(
    m: &ParsedManifest,
    known: Option<ResolvedKind>,
    target: &Target<'_>,
    ctx: &Context,
) -> ManifestOutcome {
    let mut identifier = m.identifier();
    let written = describe(&m.kind, m.namespace.as_deref(), &m.name);
    let fail = |identifier: ManifestIdentifier, message: String| {
        tracing::warn!(work = %target.work, object = %written, error = %message, "apply failed");
        ManifestOutcome::failed(identifier, message)
    };
    let kind = match known {
        Some(k) => k,
        None => match ctx.kinds.resolve(&m.gvk()).await {
            Ok(Some(k)) => k,
            Ok(None) => {
                let api_version = m.object["apiVersion"].as_str().unwrap_or_default();
                let message = format!(
                    "{written}: the member cluster does not serve kind {} in {api_version}",
                    m.kind
                );
                return fail(identifier, message);
            }
            Err(e) => return fail(identifier, format!("{written}: {e}")),
        },
    };
    let namespace = kind
        .namespaced
        .then(|| m.namespace.clone().unwrap_or_else(|| "default".to_string()));
    identifier.namespace = namespace.clone();
    let object = describe(&m.kind, namespace.as_deref(), &m.name);
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(ctx.member.clone(), ns, &kind.resource),
        None => Api::all_with(ctx.member.clone(), &kind.resource),
    };

    // The member's object: from the watch's cache when it has it (no API call), else asked.
    ctx.objects.watch(&kind);
    let existing: Option<Value> = match ctx.objects.get(&kind, namespace.as_deref(), &m.name) {
        Cached::Present(v) => Some(v),
        Cached::Absent | Cached::Unknown => match read(ctx, &api, &m.name).await {
            Ok(existing) => match existing.map(|o| json_of(&o, &object)).transpose() {
                Ok(v) => v,
                Err(e) => return fail(identifier, e),
            },
            Err(e) => return fail(identifier, format!("{object}: {}", api_message(&e))),
        },
    };
    let applied_work_name = target.applied_work.name_any();
    let owners: Vec<OwnerReference> = existing
        .as_ref()
        .and_then(|o| serde_json::from_value(o["metadata"]["ownerReferences"].clone()).ok())
        .unwrap_or_default();
    let ours = owned_by(&owners, &applied_work_name);
    let managed_by_agent = existing.as_ref().is_some_and(|o| {
        o["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["manager"] == MEMBER_AGENT))
    });
    // The agent owns what it creates, and only that: an object that existed before is applied
    // without an owner reference, so deleting the Work never deletes it.
    let owner = match &existing {
        None => manifest::owner_reference(target.applied_work),
        Some(_) if ours => manifest::owner_reference(target.applied_work),
        Some(_) => None,
    };
    let body = manifest::prepare(
        &m.object,
        &Decoration {
            placement: target.placement,
            work: target.work,
            namespace: namespace.as_deref(),
            owner,
        },
    );
    let hash = manifest_hash(&m.object, target.placement);
    let previous = target
        .previous
        .iter()
        .find(|p| p.identifier == identifier)
        .and_then(|p| p.applied_hash.as_deref());
    let decision = drift::decide(
        target.strategy,
        body,
        Member {
            object: existing.as_ref(),
            fleet_managed: ours || managed_by_agent,
        },
        previous != Some(hash.as_str()),
        previous.is_some(),
    );
    let resource = AppliedResource {
        group: m.group.clone(),
        version: m.version.clone(),
        kind: m.kind.clone(),
        resource: kind.resource.plural.clone(),
        namespace: namespace.clone(),
        name: m.name.clone(),
    };
    let outcome = |result, hash| ManifestOutcome {
        identifier: identifier.clone(),
        result,
        refusal: None,
        drift: None,
        correction: None,
        hash,
    };
    let (body, correction) = match decision {
        Decision::Unchanged => {
            ctx.metrics.apply_skipped();
            let object = existing.unwrap_or(Value::Null);
            return outcome(Ok(AppliedObject { resource, object }), Some(hash));
        }
        Decision::Leave { why, count, fields } => {
            ctx.metrics.left_different(why.as_str());
            let (refusal, message) =
                correction::left_message(why, &object, target.strategy, count, &fields);
            let left = ManifestOutcome {
                drift: Some((why, count, fields)),
                ..outcome(
                    match refusal {
                        Some(_) => Err(message.clone()),
                        None => Ok(AppliedObject {
                            resource,
                            object: existing.unwrap_or(Value::Null),
                        }),
                    },
                    None,
                )
            };
            if refusal.is_some() {
                tracing::info!(work = %target.work, %object, reason = why.as_str(), "{message}");
            }
            return ManifestOutcome { refusal, ..left };
        }
        Decision::Apply { body, correction } => (body, correction),
    };
    let started = Instant::now();
    let result = api
        .patch(
            &m.name,
            &PatchParams::apply(MEMBER_AGENT).force(),
            &Patch::Apply(&body),
        )
        .await;
    ctx.metrics
        .apply(result.is_ok(), started.elapsed().as_secs_f64());
    let applied = match result {
        Ok(applied) => applied,
        Err(e) => {
            if is_not_found(&e) {
                // The resource itself may be gone (e.g. its CRD was deleted).
                ctx.kinds.forget(&m.gvk());
            }
            return fail(identifier, format!("{object}: {}", api_message(&e)));
        }
    };
    if existing.is_none() {
        tracing::info!(work = %target.work, %object, "created");
    } else {
        tracing::debug!(work = %target.work, %object, "applied");
    }
    if let Some(fields) = &correction {
        ctx.metrics.drift_corrected(&m.kind);
        let note = correction::restored_note(&object, fields);
        tracing::info!(work = %target.work, %object, "{note}");
        correction::record(ctx, &applied, target.work, &note).await;
    }
    let value = json_of(&applied, &object);
    // The next reconcile may come before the watch has this version (see `member_objects`).
    ctx.objects.record(&kind, applied);
    let value = match value {
        Ok(v) => v,
        Err(e) => return fail(identifier, e),
    };
    ManifestOutcome {
        correction,
        ..outcome(
            Ok(AppliedObject {
                resource,
                object: value,
            }),
            Some(hash),
        )
    }
}

/// `o` as JSON; the error names `object`.
fn json_of(o: &DynamicObject, object: &str) -> Result<Value, String> {
    serde_json::to_value(o).map_err(|source| {
        Error::Json {
            what: object.to_string(),
            source,
        }
        .to_string()
    })
}

/// Reads one object from the member's API server (counted: the watch caches answer the rest).
async fn read(
    ctx: &Context,
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    ctx.metrics.object_read();
    api.get_opt(name).await
}
