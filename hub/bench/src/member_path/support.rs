//! What the member path's scenarios stand on: their content on the hub, waits for it on the
//! members and in the hub's Works, the agents' request counts, and the clean-up.

use super::*;

impl Bench {
    /// Namespace `ns` on the hub with ConfigMap `c-0` (`data.v: value`) and, unless `image` is
    /// empty, Deployment `web` (`replicas`, `image`).
    pub(crate) async fn content(
        &self,
        ns: &str,
        replicas: i32,
        value: &str,
        image: &str,
    ) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let apply = PatchParams::apply(fleethub_crds::field_manager::BENCH).force();
        Api::<Namespace>::all(hub.clone())
            .patch(
                ns,
                &apply,
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(ns, None)}),
                ),
            )
            .await?;
        Api::<ConfigMap>::namespaced(hub.clone(), ns)
            .patch(
                "c-0",
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c-0", Some(ns)),
                                     "data": {"v": value}})),
            )
            .await?;
        if !image.is_empty() {
            let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web", Some(ns)),
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "web", "image": image}]}}}});
            Api::<Deployment>::namespaced(hub, ns)
                .patch("web", &apply, &Patch::Apply(&d))
                .await?;
        }
        Ok(())
    }

    /// Waits until `seen` has `value` for `key` after `since`; the time from `since`.
    pub(super) async fn restored(
        &self,
        seen: &Seen,
        key: &str,
        value: &str,
        since: Instant,
    ) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + self.timeout;
        loop {
            // A restored value is the hub's value seen again after the edit.
            if let Some(at) = seen_after(seen, key, value, Some(since)) {
                return Ok(at.saturating_duration_since(since));
            }
            anyhow::ensure!(Instant::now() < deadline, "{key} not restored to {value}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until Work `namespace/name` reports `Applied=True` for its current generation.
    pub(crate) async fn wait_work_applied(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let works: Api<Work> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(w) = works.get_opt(name).await?
                && let Some(status) = &w.status
                && fleethub_crds::conditions::find(&status.conditions, "Applied").is_some_and(|c| {
                    c.status == "True" && c.observed_generation == w.metadata.generation
                })
            {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "Work {namespace}/{name} not applied within {:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Member agent `i`'s manifest applies and reads so far, once they rest: read every 200 ms
    /// until three readings in a row (and its reconcile count) are the same, within the
    /// bench's timeout.
    pub(super) async fn agent_calls_settled(&self, i: usize) -> anyhow::Result<f64> {
        let read = || async {
            let m = self.agent_metrics(i).await?;
            let calls = metric(
                &m,
                "fleethub_member_agent_applies_total{result=\"success\"}",
            ) + metric(
                &m,
                "fleethub_member_agent_applies_total{result=\"failure\"}",
            ) + metric(&m, "fleethub_member_agent_object_reads_total");
            let reconciles = metric(
                &m,
                "fleethub_member_agent_reconciles_total{result=\"success\"}",
            ) + metric(
                &m,
                "fleethub_member_agent_reconciles_total{result=\"failure\"}",
            );
            Ok::<(f64, f64), anyhow::Error>((calls, reconciles))
        };
        let deadline = Instant::now() + self.timeout;
        let mut last = read().await?;
        let mut same = 0;
        while same < 3 {
            anyhow::ensure!(
                Instant::now() < deadline,
                "member-{i}'s agent kept applying for {:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = read().await?;
            if now == last {
                same += 1;
            } else {
                (last, same) = (now, 0);
            }
        }
        Ok(last.0)
    }

    /// The member agents' `fleethub_member_agent_work_requests_total` by request, and their
    /// reconciles, summed over agents `1..=members`.
    pub(crate) async fn agent_requests(
        &self,
        members: usize,
    ) -> anyhow::Result<BTreeMap<String, f64>> {
        let mut sums = BTreeMap::new();
        for i in 1..=members {
            let m = self.agent_metrics(i).await?;
            for line in m.lines() {
                let Some((series, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                let key = if let Some(rest) =
                    series.strip_prefix("fleethub_member_agent_work_requests_total{request=\"")
                {
                    rest.trim_end_matches("\"}").to_string()
                } else if series.starts_with("fleethub_member_agent_reconciles_total{") {
                    "reconciles".to_string()
                } else {
                    continue;
                };
                *sums.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(sums)
    }

    /// The member agent `i`'s metrics page.
    pub(super) async fn agent_metrics(&self, i: usize) -> anyhow::Result<String> {
        let (code, body) = fleethub_testkit::http_get(self.fleet.agent_health_addr(i), "/metrics")
            .await
            .context("reading the agent's metrics")?;
        anyhow::ensure!(code == 200, "agent metrics: HTTP {code}");
        Ok(body)
    }

    pub(super) async fn member_path_clean_up(&self) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let placements: Api<Placement> = Api::all(hub.clone());
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        let ours: Vec<String> = namespaces
            .list(&Default::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n.starts_with(PREFIX))
            .collect();
        for n in &ours {
            match placements.delete(n, &DeleteParams::background()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The agents remove the members' copies once the Works are gone.
        for i in 1..=self.fleet.member_count().min(3) {
            let member: Api<Namespace> = Api::all(self.fleet.member(i).await?);
            let left = || async {
                Ok::<usize, anyhow::Error>(
                    member
                        .list(&Default::default())
                        .await?
                        .items
                        .iter()
                        .filter(|n| n.name_any().starts_with(PREFIX))
                        .count(),
                )
            };
            let deadline = Instant::now() + self.timeout;
            while left().await? > 0 {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "member-{i} still has bench namespaces"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        for n in &ours {
            match namespaces.delete(n, &DeleteParams::background()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A RollingUpdate placement named after namespace `ns` of it on `clusters`.
pub(super) async fn rolling_placement(
    hub: &Client,
    ns: &str,
    clusters: &[String],
) -> anyhow::Result<()> {
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": meta(ns, None),
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": ns}],
                 "policy": {"placementType": "PickFixed", "clusterNames": clusters},
                 "strategy": {"type": "RollingUpdate"}}});
    crate::fleet_objects::apply(&Api::<Placement>::all(hub.clone()), ns, &obj).await?;
    Ok(())
}

pub(super) async fn set_value(hub: &Client, ns: &str, name: &str, v: &str) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(hub.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": v}})),
        )
        .await?;
    Ok(())
}

pub(super) async fn wait_value(
    api: &Api<ConfigMap>,
    name: &str,
    v: &str,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(cm) = api.get_opt(name).await?
            && cm
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .map(String::as_str)
                == Some(v)
        {
            return Ok(Instant::now());
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} did not become {v}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) async fn wait_count(
    api: &Api<ConfigMap>,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let bench = kube::api::ListParams::default().labels(BENCH_LABEL);
    loop {
        let have = api.list(&bench).await?.items.len();
        if have >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{have}/{n} ConfigMaps on the member"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(super) async fn wait_replicas(
    api: &Api<Deployment>,
    replicas: i32,
    since: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let deadline = since + timeout;
    loop {
        let d = api.get("web").await?;
        if d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas) {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "replicas not restored to {replicas}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The value of sample `series` (its full text before the value) in a metrics page.
pub(super) fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}
