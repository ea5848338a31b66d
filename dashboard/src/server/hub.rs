//! The hub, as the dashboard talks to it: every read and write with the signed-in user's own
//! token (so the hub's RBAC decides), plus the one call made with the dashboard's own identity:
//! the TokenReview that checks a token at sign-in.

use std::path::Path;

use fleethub_crds::auto_update::{
    AutoUpdatePolicy, CHECK_REQUESTED_ANNOTATION, RESET_REQUESTED_ANNOTATION,
};
use fleethub_crds::update_run::{UpdateRunSpec, UpdateRunState};
use fleethub_crds::update_run_plan::{self, UpdateRunPlan};
use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, StagedUpdateStrategy,
    UpdateRun, approval,
};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{GetParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::core::{ObjectMeta, PartialObjectMetaExt};
use kube::{Api, Client, Config, ResourceExt};

use super::error::Error;
use super::views;
use crate::model::*;

/// Field manager of the dashboard's writes (the user is the one the hub records as author).
pub use fleethub_crds::field_manager::DASHBOARD as FIELD_MANAGER;

/// Where the hub is, and how the dashboard reviews tokens.
#[derive(Clone)]
pub struct Hub {
    /// Cluster URL, CA and timeouts; credentials are replaced per user.
    base: Config,
    /// Client with the dashboard's own identity, allowed only to create TokenReviews.
    reviewer: Option<Client>,
}

impl Hub {
    /// The hub of `kubeconfig` (only its server and CA are used), reviewing tokens with
    /// `reviewer_token` (or with the kubeconfig's own credentials when `None`).
    pub async fn from_kubeconfig(
        kubeconfig: &Path,
        reviewer_token: Option<String>,
    ) -> anyhow::Result<Self> {
        let kc = Kubeconfig::read_from(kubeconfig)?;
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        let reviewer = Some(match reviewer_token {
            Some(t) => client_with_token(&config, &t)?,
            None => fleethub_runtime::kubeconfig::client_for(config.clone())?,
        });
        Ok(Self {
            base: config,
            reviewer,
        })
    }

    /// The hub the dashboard runs in (in-cluster configuration: the API server's address and
    /// CA from the pod), reviewing tokens with the pod's ServiceAccount.
    pub fn in_cluster() -> anyhow::Result<Self> {
        let config = Config::incluster()?;
        let reviewer = Some(fleethub_runtime::kubeconfig::client_for(config.clone())?);
        Ok(Self {
            base: config,
            reviewer,
        })
    }

    /// A hub at `url` with no reviewer: every sign-in fails. For router tests.
    pub fn unreachable_for_tests(url: &str) -> anyhow::Result<Self> {
        Ok(Self {
            base: Config::new(url.parse()?),
            reviewer: None,
        })
    }

    /// The hub's address, for messages.
    pub fn url(&self) -> String {
        self.base.cluster_url.to_string()
    }

    /// A client that acts as the owner of `token`.
    pub fn user_client(&self, token: &str) -> Result<Client, Error> {
        client_with_token(&self.base, token).map_err(|e| Error::Unavailable {
            action: "connect to the hub".into(),
            detail: e.to_string(),
        })
    }

    /// Checks `token` with a TokenReview; returns the user name.
    pub async fn review(&self, token: &str) -> Result<String, Error> {
        let Some(reviewer) = &self.reviewer else {
            return Err(Error::Unavailable {
                action: "check your token".into(),
                detail: "no reviewer identity is configured".into(),
            });
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let out = Api::<TokenReview>::all(reviewer.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(
                |e| match Error::from_kube(e, "check your token", "TokenReview") {
                    // The dashboard's own identity was refused: an installation problem.
                    Error::Forbidden { message, .. } => Error::Unavailable {
                        action: "check your token".into(),
                        detail: format!(
                            "the dashboard's identity may not create TokenReviews: {message}"
                        ),
                    },
                    Error::TokenRejected => Error::Unavailable {
                        action: "check your token".into(),
                        detail: "the hub did not accept the dashboard's own identity".into(),
                    },
                    other => other,
                },
            )?;
        let status = out.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Error::BadInput(
                "The hub did not accept this token: it is invalid or has expired. Paste a current token (see README: $FLEET_DIR/admin.token or viewer.token)."
                    .into(),
            ));
        }
        status
            .user
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| Error::BadInput("The hub accepted the token but named no user.".into()))
    }
}

/// A client acting as the owner of `token`, with the fleet's timeouts, request limit and
/// bounded retry (kube's own retry honours a restarting API server's `Retry-After: 5` up to 15
/// times, and kube sets no read timeout: a page could hang on a dropped connection).
fn client_with_token(base: &Config, token: &str) -> anyhow::Result<Client> {
    let mut config = base.clone();
    config.auth_info = AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    Ok(fleethub_runtime::kubeconfig::client_for(config)?)
}

/// Pages read what they show from the hub API server's watch cache (`resourceVersion=0`), not
/// from etcd: a list with a label selector read from etcd decodes every object of its kind to
/// filter them (at 1,000 members, the run page's Bindings were 6 MB decoded per page view,
/// during the run, on the API server that the run waits for). The cache may be a moment behind
/// etcd; the page's change feed brings any later change.
fn from_cache() -> ListParams {
    ListParams::default().match_any()
}

async fn list<K>(client: &Client, what: &str) -> Result<Vec<K>, Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::all(client.clone())
        .list(&from_cache())
        .await
        .map(|l| l.items)
        .map_err(|e| Error::from_kube(e, &format!("list {what}"), what))
}

/// May the client's user do `verb` on `resource` (`subresource`) in group fleethub.dev? `None`
/// when the review failed (logged; the page hides the action).
async fn allowed(
    client: &Client,
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
) -> Option<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(fleethub_crds::GROUP.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(Into::into),
                verb: Some(verb.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(r) => Some(r.status.is_some_and(|s| s.allowed)),
        Err(e) => {
            tracing::warn!(error = %e, verb, resource, "SelfSubjectAccessReview failed; hiding the action");
            None
        }
    }
}

/// What the session's user may do (buttons are shown only for allowed actions; the hub still
/// decides every request), and whether every access review answered.
pub async fn me(client: &Client, user: &str, csrf: &str) -> (Me, bool) {
    let started = std::time::Instant::now();
    let (can_approve, can_update_runs, can_create_runs, can_update_policies) = futures::join!(
        allowed(client, "patch", "approvalrequests", Some("status")),
        allowed(client, "patch", "updateruns", None),
        allowed(client, "create", "updateruns", None),
        allowed(client, "patch", "autoupdatepolicies", None),
    );
    tracing::debug!(
        user,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "access reviews"
    );
    let answered = [
        can_approve,
        can_update_runs,
        can_create_runs,
        can_update_policies,
    ]
    .iter()
    .all(Option::is_some);
    let me = Me {
        user: user.to_string(),
        csrf: csrf.to_string(),
        can_approve: can_approve.unwrap_or(false),
        can_update_runs: can_update_runs.unwrap_or(false),
        can_create_runs: can_create_runs.unwrap_or(false),
        can_update_policies: can_update_policies.unwrap_or(false),
    };
    (me, answered)
}

/// The Fleet page.
pub async fn fleet(client: &Client) -> Result<FleetView, Error> {
    Ok(views::fleet(
        list::<MemberCluster>(client, "member clusters").await?,
    ))
}

/// The Placements page.
pub async fn placements(client: &Client) -> Result<PlacementsView, Error> {
    let (p, s, b, r, st) = futures::join!(
        list::<Placement>(client, "placements"),
        list::<ResourceSnapshot>(client, "resource snapshots"),
        list::<Binding>(client, "bindings"),
        list::<UpdateRun>(client, "update runs"),
        list::<StagedUpdateStrategy>(client, "staged update strategies"),
    );
    Ok(views::placements(
        p?,
        s?,
        b?,
        &r?,
        st?.iter().map(|s| s.name_any()).collect(),
    ))
}

/// The Runs page.
pub async fn runs(client: &Client) -> Result<RunsView, Error> {
    Ok(views::runs(list::<UpdateRun>(client, "update runs").await?))
}

/// The page of run `name`: the clusters `query` asks for, marked from their Bindings (listed by
/// label for just those clusters: a run may have 10,000).
pub async fn run(client: &Client, name: &str, query: &RunQuery) -> Result<RunView, Error> {
    // The run and its approval requests are read together; the Bindings need the run first.
    let run = async {
        Api::<UpdateRun>::all(client.clone())
            .get_with(name, &GetParams::any())
            .await
            .map_err(|e| Error::from_kube(e, "load the run", &format!("UpdateRun {name}")))
    };
    let approvals = async {
        Api::<ApprovalRequest>::all(client.clone())
            .list(&from_cache().labels(&format!(
                "{}={name}",
                fleethub_crds::names::UPDATE_RUN_LABEL
            )))
            .await
            .map_err(|e| {
                Error::from_kube(e, "list the run's approval requests", "approval requests")
            })
    };
    // A large run's clusters are in its UpdateRunPlan (same name), read alongside; needed only
    // by a run whose status says so.
    let plans = Api::<UpdateRunPlan>::all(client.clone());
    let plan = plans.get_opt(name);
    let started = std::time::Instant::now();
    let (read, plan) = futures::join!(async { futures::try_join!(run, approvals) }, plan);
    let (mut run, approvals) = read?;
    if update_run_plan::needs_plan(&run) {
        let plan = plan.map_err(|e| {
            Error::from_kube(
                e,
                "load the order of the run's clusters",
                &format!("UpdateRunPlan {name}"),
            )
        })?;
        if let Err(e) = update_run_plan::read_into(&mut run, plan.as_ref()) {
            // The run's own conditions say so too; its stages show their counts.
            tracing::info!(run = %name, error = %e, "run shown without its clusters");
        }
    }
    let read = started.elapsed();
    let mut view = views::run(&run, &approvals.items, query);
    let viewed = started.elapsed();
    let shown = views::shown_clusters(&view);
    let placement = &run.spec.placement_name;
    // Each row's overrides and drift are on its Binding; the run says whether any override
    // applies, the placement whether any cluster drifted (unreadable: the Bindings are read).
    let listed = !shown.is_empty()
        && (views::run_may_override(&run)
            || views::placement_may_drift(
                Api::<Placement>::all(client.clone())
                    .get_with(placement, &GetParams::any())
                    .await
                    .ok()
                    .as_ref(),
            ));
    if listed {
        let selector = format!(
            "{}={placement},{} in ({})",
            fleethub_crds::names::PLACEMENT_LABEL,
            fleethub_crds::names::CLUSTER_LABEL,
            shown.join(",")
        );
        let bindings = Api::<Binding>::all(client.clone())
            .list(&from_cache().labels(&selector))
            .await
            .map_err(|e| Error::from_kube(e, "list the placement's bindings", "bindings"))?;
        views::mark_bindings(&mut view, placement, &bindings.items);
    } else {
        views::mark_without_bindings(&mut view, placement);
    }
    tracing::debug!(
        run = name,
        shown = shown.len(),
        listed,
        read_ms = read.as_secs_f64() * 1e3,
        view_ms = (viewed - read).as_secs_f64() * 1e3,
        marks_ms = (started.elapsed() - viewed).as_secs_f64() * 1e3,
        "run page data"
    );
    Ok(view)
}

/// The Auto-updates page.
pub async fn auto_updates(client: &Client) -> Result<AutoUpdatesView, Error> {
    Ok(views::auto_updates(
        list::<AutoUpdatePolicy>(client, "auto-update policies").await?,
    ))
}

/// What a person asks an AutoUpdatePolicy's controller for (it acts once on each new value of
/// the request's annotation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyRequest {
    /// A registry check now.
    Check,
    /// Close the circuit and forget the rollbacks counted.
    Reset,
}

impl PolicyRequest {
    /// The annotation that carries the request.
    fn annotation(self) -> &'static str {
        match self {
            PolicyRequest::Check => CHECK_REQUESTED_ANNOTATION,
            PolicyRequest::Reset => RESET_REQUESTED_ANNOTATION,
        }
    }

    /// The request in words, for messages.
    pub fn verb(self) -> &'static str {
        match self {
            PolicyRequest::Check => "ask for a check of",
            PolicyRequest::Reset => "reset the circuit of",
        }
    }
}

/// Asks AutoUpdatePolicy `name` for a check or a reset as the signed-in user: the request's
/// annotation set to a new value (now) by server-side apply of the metadata alone, as
/// `kubectl fleet autoupdate check|reset` does.
pub async fn request_policy(client: &Client, name: &str, what: PolicyRequest) -> Result<(), Error> {
    let meta = ObjectMeta {
        name: Some(name.to_string()),
        annotations: Some(
            [(
                what.annotation().to_string(),
                jiff::Timestamp::now().to_string(),
            )]
            .into(),
        ),
        ..Default::default()
    }
    .into_request_partial::<AutoUpdatePolicy>();
    let api = Api::<AutoUpdatePolicy>::all(client.clone());
    // Only to turn a missing policy into "does not exist" rather than an apply creating nothing.
    api.get_metadata(name).await.map_err(|e| {
        Error::from_kube(
            e,
            &format!("{} {name}", what.verb()),
            &format!("AutoUpdatePolicy {name}"),
        )
    })?;
    api.patch_metadata(
        name,
        // Forced: a request is the person's to make, whoever asked last.
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&meta),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        Error::from_kube(
            e,
            &format!("{} {name}", what.verb()),
            &format!("AutoUpdatePolicy {name}"),
        )
    })
}

/// The Approvals page.
pub async fn approvals(client: &Client) -> Result<ApprovalsView, Error> {
    let (requests, runs) = futures::try_join!(
        list::<ApprovalRequest>(client, "approval requests"),
        list::<UpdateRun>(client, "update runs"),
    )?;
    Ok(views::approvals(requests, &runs))
}

/// One ApprovalRequest, for the confirmation page.
pub async fn approval(client: &Client, name: &str) -> Result<ApprovalRequest, Error> {
    Api::<ApprovalRequest>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| {
            Error::from_kube(
                e,
                "load the approval request",
                &format!("ApprovalRequest {name}"),
            )
        })
}

/// Approves ApprovalRequest `name` as `user`: their own entry in `status.approvals` (and
/// `Approved=True` once the gate opens), the same change `kubectl fleet approve` makes. The API
/// server checks `user` is the signed-in person and the gate's policy allows them.
pub async fn approve(
    client: &Client,
    user: &str,
    name: &str,
    message: &str,
) -> Result<ApprovalRequest, Error> {
    let api = Api::<ApprovalRequest>::all(client.clone());
    let failed = |e| {
        Error::from_kube(
            e,
            &format!("approve {name}"),
            &format!("ApprovalRequest {name}"),
        )
    };
    let request = api.get(name).await.map_err(failed)?;
    let (manager, body) = approval::approval_apply(&request, user, message, jiff::Timestamp::now());
    api.patch_status(
        name,
        &PatchParams::apply(&manager).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(failed)
}

/// Stops (`Stop`) or resumes (`Run`) run `name`.
pub async fn set_run_state(
    client: &Client,
    name: &str,
    state: UpdateRunState,
) -> Result<(), Error> {
    let verb = match state {
        UpdateRunState::Stop => "stop",
        UpdateRunState::Run => "resume",
        UpdateRunState::Initialize => "plan",
    };
    let patch = serde_json::json!({"spec": {"state": state}});
    Api::<UpdateRun>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| {
            Error::from_kube(
                e,
                &format!("{verb} run {name}"),
                &format!("UpdateRun {name}"),
            )
        })
}

/// Creates a run of `placement` to snapshot `index` with `strategy`, started by `user`;
/// returns its name.
pub async fn create_run(
    client: &Client,
    user: &str,
    placement: &str,
    index: i64,
    strategy: &str,
) -> Result<String, Error> {
    if !fleethub_crds::names::is_dns_label(placement)
        || !fleethub_crds::names::is_dns_label(strategy)
    {
        return Err(Error::BadInput(format!(
            "Placement {placement:?} or strategy {strategy:?} is not a valid name."
        )));
    }
    if index < 0 {
        return Err(Error::BadInput(format!(
            "Snapshot index {index} is negative."
        )));
    }
    // Names stay DNS labels of at most 63 characters (ApprovalRequests are <run>-<stage>).
    let prefix: String = format!("{placement}-{index}").chars().take(40).collect();
    let name = format!(
        "{}-{}",
        prefix.trim_end_matches('-'),
        &super::session::random_hex(3)
    );
    let mut run = UpdateRun::new(
        &name,
        UpdateRunSpec {
            placement_name: placement.to_string(),
            resource_snapshot_index: Some(index.to_string()),
            staged_rollout_strategy_name: strategy.to_string(),
            ..Default::default()
        },
    );
    // Who started it (the API server refuses any other name): its gates' approval policies
    // keep that person from approving them alone.
    run.metadata.annotations = Some(
        [(
            fleethub_crds::names::STARTED_BY_ANNOTATION.to_string(),
            user.to_string(),
        )]
        .into(),
    );
    Api::<UpdateRun>::all(client.clone())
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &run,
        )
        .await
        .map_err(|e| {
            Error::from_kube(
                e,
                &format!("start a run of {placement} to snapshot {index}"),
                &format!("UpdateRun {name}"),
            )
        })?;
    Ok(name)
}
