//! The CustomResourceDefinitions the agent needs on its member cluster (`AppliedWork`), installed
//! by the agent itself with server-side apply at start.

use std::time::Duration;

use fleethub_crds::field_manager::MEMBER_AGENT;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

use crate::Error;

/// How long a freshly applied CRD may take to become established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Applies every member CRD and waits until each is established.
pub async fn install(member: &Client) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(member.clone());
    for crd in fleethub_crds::member_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(MEMBER_AGENT).force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(Error::member(format!(
            "applying CustomResourceDefinition {name}"
        )))?;
        let established = tokio::time::timeout(
            ESTABLISH_TIMEOUT,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await;
        let why = match established {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("not established after {ESTABLISH_TIMEOUT:?}"),
        };
        return Err(Error::CrdNotEstablished { name, why });
    }
    Ok(())
}
