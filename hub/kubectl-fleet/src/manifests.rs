//! `render PLACEMENT --cluster NAME [--snapshot N] [--diff]`: exactly the manifests one cluster
//! gets, with the overrides applied as the hub applies them (`fleethub_crds::render`, the same
//! code the hub's work generator and the dashboard use).

use fleethub_crds::render::{self, Render, RenderError};

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// `kubectl fleet render`.
pub async fn render(
    hub: &Cluster,
    placement: &str,
    cluster: &str,
    snapshot: Option<i64>,
    diff: bool,
) -> Result<()> {
    let inputs = render::load(&hub.client, placement, cluster, snapshot)
        .await
        .map_err(from_render)?;
    let r = render::render(&inputs);
    print!("{}", text(&r, diff)?);
    Ok(())
}

fn from_render(e: RenderError) -> Error {
    match e {
        RenderError::NotFound(m) => Error::NotFound(m),
        RenderError::Invalid(m) => Error::Invalid(m),
        RenderError::Api { doing, source } => Error::Api { doing, source },
    }
}

/// What the command prints: the notes saying what was rendered from what (as YAML comments, so
/// the output still applies with `kubectl apply -f -`), then the YAML or the diff. A rule that
/// cannot apply is an error naming the override, the rule, the object and the path.
pub fn text(r: &Render, diff: bool) -> Result<String> {
    let body = if diff { r.diff() } else { r.yaml() }.map_err(|e| {
        Error::Refused(format!(
            "cluster {} gets nothing new from placement {}: {e} (the hub leaves its Work as it was)",
            r.cluster, r.placement
        ))
    })?;
    let mut out: String = r.notes().iter().map(|n| format!("# {n}\n")).collect();
    if diff && body.is_empty() {
        out.push_str("# no difference: this cluster gets the hub's template as it is\n");
    }
    out.push_str(&body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::override_apply::{Applied, OverrideError};
    use serde_json::json;

    fn rendered(result: Result<Applied, OverrideError>) -> Render {
        Render {
            placement: "web".into(),
            cluster: "member-3".into(),
            index: 2,
            index_source: "asked for".into(),
            override_source: "the newest snapshot of every override".into(),
            considered: vec!["app/image-1".into()],
            missing: vec![],
            template: vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c", "namespace": "app"}, "data": {"a": "hub"}})],
            result,
        }
    }

    #[test]
    fn the_yaml_is_preceded_by_what_it_was_rendered_from_as_comments() {
        let applied = Applied {
            manifests: vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "c", "namespace": "app"}, "data": {"a": "member"}})],
            used: vec!["image-1".into()],
        };
        let out = text(&rendered(Ok(applied)), false).unwrap();
        let (comments, yaml): (Vec<&str>, Vec<&str>) =
            out.lines().partition(|l| l.starts_with('#'));
        assert_eq!(
            comments[0],
            "# placement web, cluster member-3: resource snapshot 2 (asked for)"
        );
        assert!(comments.contains(&"# applied: image-1"), "{out}");
        assert!(yaml.contains(&"  a: member"), "{out}");
        let diff = text(
            &rendered(Ok(Applied {
                manifests: rendered(Ok(Applied::default())).template,
                used: vec![],
            })),
            true,
        )
        .unwrap();
        assert!(
            diff.ends_with("# no difference: this cluster gets the hub's template as it is\n"),
            "{diff}"
        );
    }

    #[test]
    fn a_rule_that_cannot_apply_is_an_error_naming_it() {
        let err = text(
            &rendered(Err(OverrideError {
                override_: "ResourceOverride app/bad".into(),
                rule: 0,
                object: "Deployment app/web".into(),
                reason: "replace /spec/x: the object has no such path".into(),
            })),
            true,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "cluster member-3 gets nothing new from placement web: ResourceOverride app/bad rule 0 on Deployment app/web: replace /spec/x: the object has no such path (the hub leaves its Work as it was)"
        );
    }
}
