//! `drift [PLACEMENT] [--corrections]`: every member object that differs from the hub's, fleet
//! wide, from the members' reports on their Works (the Work lists up to 20 fields an object).

use fleethub_crds::drift::object_name;
use fleethub_crds::names::{CLUSTER_LABEL, PLACEMENT_LABEL};
use fleethub_crds::{Placement, Work};
use jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::render::{age, table};

/// `kubectl fleet drift [PLACEMENT] [--corrections]`.
pub async fn drift(hub: &Cluster, placement: Option<&str>, corrections: bool) -> Result<()> {
    let mut params = ListParams::default();
    if let Some(p) = placement {
        let known = Api::<Placement>::all(hub.client.clone())
            .get_opt(p)
            .await
            .map_err(Error::api(format!("reading Placement {p}")))?;
        if known.is_none() {
            return Err(Error::NotFound(format!(
                "placement {p} not found on the hub (kubectl get placements lists them)"
            )));
        }
        params = params.labels(&format!("{PLACEMENT_LABEL}={p}"));
    }
    let works = Api::<Work>::all(hub.client.clone())
        .list(&params)
        .await
        .map_err(Error::api("listing Works"))?;
    let now = Timestamp::now();
    let text = if corrections {
        corrections_table(&works.items, now)
    } else {
        drift_table(&works.items, now)
    };
    print!("{text}");
    Ok(())
}

fn cluster(work: &Work) -> String {
    work.labels()
        .get(CLUSTER_LABEL)
        .cloned()
        .unwrap_or_else(|| work.namespace().unwrap_or_default())
}

fn value(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "(unset)".to_string())
}

/// One line per differing field: cluster, placement, object, how it differs, the field, the
/// member's and the hub's values, and since when.
pub fn drift_table(works: &[Work], now: Timestamp) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for w in works {
        let Some(status) = &w.status else { continue };
        for m in &status.manifest_conditions {
            let Some(d) = &m.drift else { continue };
            let lead = [
                cluster(w),
                w.spec.placement_name.clone(),
                object_name(&m.identifier),
                d.type_.as_str().to_string(),
            ];
            let since = age(d.first_seen_time.0, now);
            let fields: Vec<[String; 3]> = if d.fields.is_empty() {
                vec![["-".into(), "-".into(), "-".into()]]
            } else {
                d.fields
                    .iter()
                    .map(|f| {
                        let (member, hub) = if f.path == "." {
                            let member = if f.member_value.is_some() {
                                "exists"
                            } else {
                                "missing"
                            };
                            (member.to_string(), "(object)".to_string())
                        } else {
                            (value(&f.member_value), value(&f.hub_value))
                        };
                        [f.path.clone(), member, hub]
                    })
                    .collect()
            };
            let shown = fields.len();
            for f in fields {
                let mut row = lead.to_vec();
                row.extend(f);
                row.push(since.clone());
                rows.push(row);
            }
            let more = (d.field_count as usize).saturating_sub(shown);
            if more > 0 {
                let mut row = lead.to_vec();
                row.extend([format!("({more} more)"), String::new(), String::new()]);
                row.push(since.clone());
                rows.push(row);
            }
        }
    }
    if rows.is_empty() {
        return "No member object differs from the hub.\n".to_string();
    }
    // By cluster, placement and object; an object's fields stay in the member's order.
    rows.sort_by(|a, b| a[..3].cmp(&b[..3]));
    table(
        &[
            "CLUSTER",
            "PLACEMENT",
            "OBJECT",
            "TYPE",
            "FIELD",
            "MEMBER",
            "HUB",
            "SINCE",
        ],
        &rows,
    )
}

/// One line per object the member agents last restored to the hub's values: when, and what the
/// member had.
pub fn corrections_table(works: &[Work], now: Timestamp) -> String {
    let mut rows: Vec<(Timestamp, Vec<String>)> = Vec::new();
    for w in works {
        let Some(status) = &w.status else { continue };
        for m in &status.manifest_conditions {
            let Some(c) = &m.last_correction else {
                continue;
            };
            let had: Vec<String> = c
                .fields
                .iter()
                .map(fleethub_crds::drift::describe_field)
                .collect();
            rows.push((
                c.time.0,
                vec![
                    cluster(w),
                    w.spec.placement_name.clone(),
                    object_name(&m.identifier),
                    format!("{} ago", age(c.time.0, now)),
                    had.join("; "),
                ],
            ));
        }
    }
    if rows.is_empty() {
        return "No drift corrections recorded.\n".to_string();
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let rows: Vec<Vec<String>> = rows.into_iter().map(|(_, r)| r).collect();
    table(
        &[
            "CLUSTER",
            "PLACEMENT",
            "OBJECT",
            "CORRECTED",
            "THE MEMBER HAD",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::apply_strategy::{DriftCorrection, DriftType, FieldDiff, ManifestDrift};
    use fleethub_crds::work::{ManifestCondition, ManifestIdentifier, WorkSpec, WorkStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn work(cluster: &str, manifests: Vec<ManifestCondition>) -> Work {
        let mut w = Work::new(
            "web",
            WorkSpec {
                placement_name: "web".into(),
                ..Default::default()
            },
        );
        w.metadata.namespace = Some(format!("fleet-member-{cluster}"));
        w.metadata.labels = Some([(CLUSTER_LABEL.to_string(), cluster.to_string())].into());
        w.status = Some(WorkStatus {
            manifest_conditions: manifests,
            ..Default::default()
        });
        w
    }

    fn manifest(name: &str) -> ManifestCondition {
        ManifestCondition {
            identifier: ManifestIdentifier {
                kind: "ConfigMap".into(),
                version: "v1".into(),
                namespace: Some("app".into()),
                name: name.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn field(path: &str, member: Option<&str>, hub: Option<&str>) -> FieldDiff {
        FieldDiff {
            path: path.into(),
            member_value: member.map(Into::into),
            hub_value: hub.map(Into::into),
        }
    }

    #[test]
    fn every_differing_field_is_a_line_with_both_values() {
        let drifted = ManifestCondition {
            drift: Some(ManifestDrift {
                type_: DriftType::Drifted,
                first_seen_time: Time(ts(0)),
                field_count: 3,
                fields: vec![field("data.v", Some("\"edited\""), Some("\"1\""))],
            }),
            ..manifest("settings")
        };
        let refused = ManifestCondition {
            drift: Some(ManifestDrift {
                type_: DriftType::TakeoverRefused,
                first_seen_time: Time(ts(50)),
                field_count: 1,
                fields: vec![field("data.owner", None, Some("\"fleet\""))],
            }),
            ..manifest("team")
        };
        let works = [
            work("member-2", vec![refused]),
            work("member-1", vec![drifted, manifest("fine")]),
        ];
        let text = drift_table(&works, ts(120));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("CLUSTER"), "{text}");
        let words: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            words,
            [
                "member-1",
                "web",
                "ConfigMap",
                "app/settings",
                "Drifted",
                "data.v",
                "\"edited\"",
                "\"1\"",
                "2m0s"
            ]
        );
        assert!(lines[2].contains("(2 more)"), "{text}");
        assert!(
            lines[3].contains("TakeoverRefused") && lines[3].contains("(unset)"),
            "{text}"
        );
        assert_eq!(
            drift_table(&[work("member-1", vec![manifest("fine")])], ts(0)),
            "No member object differs from the hub.\n"
        );
    }

    #[test]
    fn corrections_newest_first_with_what_the_member_had() {
        let corrected = |name: &str, at: i64, f: FieldDiff| ManifestCondition {
            last_correction: Some(DriftCorrection {
                time: Time(ts(at)),
                fields: vec![f],
            }),
            ..manifest(name)
        };
        let works = [work(
            "member-1",
            vec![
                corrected("old", 0, field("data.v", Some("\"x\""), Some("\"1\""))),
                corrected("new", 60, field(".", None, Some("{}"))),
            ],
        )];
        let text = corrections_table(&works, ts(90));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[1].contains("app/new") && lines[1].contains("30s ago"),
            "{text}"
        );
        assert!(lines[1].ends_with("missing on the member"), "{text}");
        assert!(
            lines[2].ends_with("data.v: member \"x\", hub \"1\""),
            "{text}"
        );
        assert_eq!(
            corrections_table(&[], ts(0)),
            "No drift corrections recorded.\n"
        );
    }
}
