//! Shell completion of `kubectl fleet`: subcommands, flags, and the names of the hub's runs,
//! approval requests, placements, strategies and member clusters.
//!
//! kubectl (1.26 and later) completes a plugin's arguments by running `kubectl_complete-fleet`
//! (installed beside `kubectl-fleet`) with the words typed after `kubectl fleet`, the last one
//! being the word to complete, and reads Cobra's answer: one candidate per line, then a line
//! `:<directive>` (4: do not fall back to file names). `kubectl fleet __complete …` answers the
//! same way.

use clap::CommandFactory;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use fleethub_crds::{
    ApprovalRequest, MemberCluster, Placement, StagedUpdateStrategy, UpdateRun, run_progress,
};

/// Cobra's ShellCompDirectiveNoFileComp.
const NO_FILES: u8 = 4;

/// What the word being completed names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// A subcommand of `kubectl fleet`.
    Subcommand,
    /// An UpdateRun (unfinished ones for stop/resume).
    Run { unfinished_only: bool },
    /// An ApprovalRequest nobody approved yet.
    PendingApproval,
    /// A Placement.
    Placement,
    /// A Placement or an UpdateRun.
    PlacementOrRun,
    /// A StagedUpdateStrategy.
    Strategy,
    /// A MemberCluster.
    Member,
    /// Nothing we can list.
    Nothing,
}

/// What the last of `words` (the words after `kubectl fleet`) names. Pure: unit-tested.
pub fn what(words: &[String]) -> Names {
    let Some((_current, before)) = words.split_last() else {
        return Names::Subcommand;
    };
    // Flags and their values do not count as positional words.
    let mut positional = Vec::new();
    let mut previous_flag: Option<&str> = None;
    for w in before {
        if let Some(flag) = previous_flag.take()
            && takes_value(flag)
        {
            continue;
        }
        if w.starts_with('-') {
            if !w.contains('=') {
                previous_flag = Some(w);
            }
            continue;
        }
        positional.push(w.as_str());
    }
    if let Some(flag) = previous_flag
        && takes_value(flag)
    {
        return match flag {
            "--strategy" => Names::Strategy,
            "--cluster" => Names::Member,
            _ => Names::Nothing,
        };
    }
    match positional.as_slice() {
        [] => Names::Subcommand,
        ["run"] => Names::Run {
            unfinished_only: false,
        },
        ["stop" | "resume"] => Names::Run {
            unfinished_only: true,
        },
        ["approve"] => Names::PendingApproval,
        ["start" | "render" | "drift"] => Names::Placement,
        ["rollback"] => Names::PlacementOrRun,
        ["autoupdate", ..] | ["join" | "unjoin", ..] => Names::Nothing,
        _ => Names::Nothing,
    }
}

fn takes_value(flag: &str) -> bool {
    matches!(
        flag,
        "--strategy"
            | "--cluster"
            | "--index"
            | "--name"
            | "--snapshot"
            | "--kubeconfig"
            | "--context"
            | "-m"
            | "--message"
    )
}

/// The candidates for `what`, from the hub (names only; an unreachable hub completes nothing).
async fn names(client: &Client, what: Names) -> Vec<String> {
    let lp = ListParams::default();
    match what {
        Names::Subcommand | Names::Nothing => Vec::new(),
        Names::Run { unfinished_only } => Api::<UpdateRun>::all(client.clone())
            .list(&lp)
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|r| !unfinished_only || !run_progress::RunPhase::of(r).finished())
                    .map(|r| r.name_any())
                    .collect()
            })
            .unwrap_or_default(),
        Names::PendingApproval => Api::<ApprovalRequest>::all(client.clone())
            .list(&lp)
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|a| !crate::render::is_approved(a))
                    .map(|a| a.name_any())
                    .collect()
            })
            .unwrap_or_default(),
        Names::Placement => list::<Placement>(client).await,
        Names::PlacementOrRun => {
            let mut all = list::<Placement>(client).await;
            all.extend(list::<UpdateRun>(client).await);
            all
        }
        Names::Strategy => list::<StagedUpdateStrategy>(client).await,
        Names::Member => list::<MemberCluster>(client).await,
    }
}

async fn list<K>(client: &Client) -> Vec<String>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect())
        .unwrap_or_default()
}

/// The value of `--kubeconfig` / `--context` among `words`.
fn flag_value(words: &[String], flag: &str) -> Option<String> {
    words.iter().enumerate().find_map(|(i, w)| {
        w.strip_prefix(&format!("{flag}="))
            .map(str::to_string)
            .or_else(|| (w == flag).then(|| words.get(i + 1).cloned()).flatten())
    })
}

/// Prints the completions of the last of `words`, Cobra's way.
pub async fn complete(words: &[String]) {
    let what = what(words);
    let prefix = words.last().map(String::as_str).unwrap_or_default();
    let candidates = if what == Names::Subcommand {
        crate::Cli::command()
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name().to_string())
            .collect()
    } else {
        let kubeconfig = flag_value(words, "--kubeconfig").map(std::path::PathBuf::from);
        let context = flag_value(words, "--context");
        match crate::cluster::connect(kubeconfig.as_deref(), context.as_deref()).await {
            Ok(hub) => names(&hub.client, what).await,
            Err(_) => Vec::new(),
        }
    };
    let mut candidates: Vec<String> = candidates
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect();
    candidates.sort();
    candidates.dedup();
    for c in candidates {
        println!("{c}");
    }
    println!(":{NO_FILES}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        let mut w: Vec<String> = s.split(' ').map(str::to_string).collect();
        if s.ends_with(' ') {
            w.pop();
            w.push(String::new());
        }
        w
    }

    #[test]
    fn the_word_being_completed_is_known_by_its_command_and_flag() {
        let cases = [
            ("", Names::Subcommand),
            ("ap", Names::Subcommand),
            (
                "run ",
                Names::Run {
                    unfinished_only: false,
                },
            ),
            (
                "stop sam",
                Names::Run {
                    unfinished_only: true,
                },
            ),
            ("approve ", Names::PendingApproval),
            ("approve -m lgtm ", Names::PendingApproval),
            ("start ", Names::Placement),
            ("start web --strategy ", Names::Strategy),
            (
                "start web --strategy three --index 3 --plan ",
                Names::Nothing,
            ),
            ("render web --cluster ", Names::Member),
            ("render web --cluster=m1 --snapshot ", Names::Nothing),
            ("rollback ", Names::PlacementOrRun),
            (
                "--kubeconfig hub.kubeconfig approve ",
                Names::PendingApproval,
            ),
            ("run sample ", Names::Nothing),
        ];
        for (typed, want) in cases {
            assert_eq!(what(&words(typed)), want, "{typed:?}");
        }
        assert_eq!(what(&[]), Names::Subcommand);
    }

    #[test]
    fn flag_values_are_read_in_both_spellings() {
        let w = words("--kubeconfig /k --context=c run ");
        assert_eq!(flag_value(&w, "--kubeconfig").as_deref(), Some("/k"));
        assert_eq!(flag_value(&w, "--context").as_deref(), Some("c"));
        assert_eq!(flag_value(&w, "--cluster"), None);
    }
}
