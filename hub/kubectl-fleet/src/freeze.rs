//! `freeze`, `unfreeze` and `freezes`: change freezes from the terminal. A freeze holds every
//! run of the placements it names (every placement when it names none) before its next cluster
//! or stage, and every AutoUpdatePolicy's next version; the API server records who made it.

use fleethub_crds::Freeze;
use fleethub_crds::freeze::FreezeSpec;
use fleethub_crds::names::STARTED_BY_ANNOTATION;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

use crate::cluster::{Cluster, whoami};
use crate::error::{Error, Result};
use crate::render;

/// The freeze `kubectl fleet freeze` makes when given no `--name`.
pub const DEFAULT_NAME: &str = "fleet";

/// `kubectl fleet freeze [--name N] --reason TEXT [--until TIME] [--placement P]...`.
pub async fn freeze(
    hub: &Cluster,
    name: &str,
    reason: &str,
    until: Option<&str>,
    placements: &[String],
) -> Result<()> {
    let until = until
        .map(|u| {
            u.parse::<jiff::Timestamp>().map_err(|e| {
                Error::Invalid(format!(
                    "--until {u:?} is not a time like 2026-12-01T08:00:00Z: {e}"
                ))
            })
        })
        .transpose()?;
    if let Some(u) = until
        && u <= jiff::Timestamp::now()
    {
        return Err(Error::Invalid(format!("--until {u} is in the past")));
    }
    let by = whoami(hub).await;
    let mut freeze = Freeze::new(
        name,
        FreezeSpec {
            reason: reason.to_string(),
            until: until.map(Time),
            placements: placements.to_vec(),
        },
    );
    freeze.metadata.annotations = Some([(STARTED_BY_ANNOTATION.to_string(), by)].into());
    let made = Api::<Freeze>::all(hub.client.clone())
        .create(&PostParams::default(), &freeze)
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 409 => Error::Refused(format!(
                "freeze {name} already exists (kubectl fleet freezes); lift it first with kubectl fleet unfreeze {name}, or pass another --name"
            )),
            _ => Error::api(format!("creating freeze {name}"))(e),
        })?;
    let scope = if placements.is_empty() {
        "every placement".to_string()
    } else {
        format!("placements {}", placements.join(", "))
    };
    println!("{} — holds {scope}", made.describe());
    Ok(())
}

/// `kubectl fleet unfreeze [NAME]`.
pub async fn unfreeze(hub: &Cluster, name: &str) -> Result<()> {
    match Api::<Freeze>::all(hub.client.clone())
        .delete(name, &Default::default())
        .await
    {
        Ok(_) => {
            println!("freeze {name} lifted: runs and auto-updates it held go on");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Err(Error::NotFound(format!(
            "freeze {name} not found (kubectl fleet freezes lists them)"
        ))),
        Err(e) => Err(Error::api(format!("deleting freeze {name}"))(e)),
    }
}

/// `kubectl fleet freezes`: the freezes, those holding now first.
pub async fn freezes(hub: &Cluster) -> Result<()> {
    let items = Api::<Freeze>::all(hub.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::api("listing freezes"))?
        .items;
    if items.is_empty() {
        println!("No freezes: runs and auto-updates go on.");
        return Ok(());
    }
    let now = jiff::Timestamp::now();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|f| {
            let holding = f.spec.until.as_ref().is_none_or(|u| u.0 > now);
            vec![
                f.name_any(),
                if holding { "holding" } else { "lifted" }.to_string(),
                f.spec
                    .until
                    .as_ref()
                    .map_or("-".into(), |u| u.0.to_string()),
                if f.spec.placements.is_empty() {
                    "*".to_string()
                } else {
                    f.spec.placements.join(",")
                },
                f.annotations()
                    .get(STARTED_BY_ANNOTATION)
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                f.spec.reason.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        render::table(
            &["NAME", "STATE", "UNTIL", "PLACEMENTS", "BY", "REASON"],
            &rows
        )
    );
    Ok(())
}
