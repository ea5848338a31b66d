//! `kubectl fleet`: the fleethub kubectl plugin. Put `kubectl-fleet` on PATH and kubectl finds
//! it (`kubectl fleet …`); it also runs on its own (`kubectl-fleet …`).
#![forbid(unsafe_code)]

mod agent_manifests;
mod autoupdate;
mod cluster;
mod complete;
mod drift;
mod error;
mod freeze;
mod join;
mod manifests;
mod render;
mod runs;
mod start;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[cfg(test)]
use crate::error::Error;
use crate::error::Result;

const EXAMPLES: &str = "Examples:
  kubectl fleet start web --strategy three-stages --plan; kubectl fleet resume web-latest-x7k2q
  kubectl fleet start web --strategy three-stages --index 3
  kubectl fleet rollback web
  kubectl fleet runs
  kubectl fleet run sample-rollout --watch
  kubectl fleet approvals
  kubectl fleet approve sample-rollout-canary -m 'canary metrics look good'
  kubectl fleet stop sample-rollout; kubectl fleet resume sample-rollout
  kubectl fleet drift; kubectl fleet drift web --corrections
  kubectl fleet render web --cluster prod-eu-1; kubectl fleet render web --cluster prod-eu-1 --snapshot 3 --diff
  kubectl fleet autoupdates; kubectl fleet autoupdate web
  kubectl fleet autoupdate check web; kubectl fleet autoupdate reset web
  kubectl fleet join prod-eu-1 --member-kubeconfig prod-eu-1.kubeconfig -l environment=production \\
      --hub-server https://hub.example.com:6443 --agent-image registry.example.com/fleethub-member-agent:0.1.0
  kubectl fleet unjoin prod-eu-1 --member-kubeconfig prod-eu-1.kubeconfig";

/// fleethub's kubectl plugin: follow and steer staged rollouts, approve their gates, and add or
/// remove member clusters.
///
/// Exit codes: 0 success; 1 failure (the message says what and what to do next); 2 bad usage.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl fleet",
    bin_name = "kubectl fleet",
    version,
    about,
    long_about,
    after_long_help = EXAMPLES
)]
struct Cli {
    /// The hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use for the hub (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start an UpdateRun of a placement (its strategy type External) with a strategy; with
    /// --plan, only plan it (spec.state Initialize) and print the stages and clusters in order:
    /// nothing starts until `kubectl fleet resume RUN`.
    Start {
        /// The Placement.
        placement: String,
        /// The StagedUpdateStrategy.
        #[arg(long, short = 's', value_name = "NAME")]
        strategy: String,
        /// The resource snapshot index to roll out (default: the placement's latest, recorded
        /// by the hub in the run's status.resourceSnapshotIndexUsed).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
        index: Option<i64>,
        /// The run's name (default: <placement>-<index>-<random>).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Plan only: create the run with spec.state Initialize and print its plan.
        #[arg(long)]
        plan: bool,
        /// What the run does when it fails: Hold (stop and wait for a person) or Rollback (roll
        /// the clusters it updated back). Default: the strategy's onFailure, else Hold.
        #[arg(long, value_name = "Hold|Rollback", value_parser = ["Hold", "Rollback"])]
        on_failure: Option<String>,
        /// Keep watching every cluster this long after the last stage before the run succeeds
        /// (e.g. 10m). Default: the strategy's bake, else none.
        #[arg(long, value_name = "DURATION", value_parser = parse_bake)]
        bake: Option<String>,
    },
    /// Roll a placement back: start a run to the resource snapshot before the one its newest
    /// run rolled out (as the dashboard's Roll back button does), with that run's strategy.
    /// Says what it will do and asks first, unless --yes.
    Rollback {
        /// A Placement, or an UpdateRun (its placement is rolled back).
        target: String,
        /// The strategy (default: the newest run's).
        #[arg(long, short = 's', value_name = "NAME")]
        strategy: Option<String>,
        /// The run's name (default: generated).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// List UpdateRuns: placement, snapshot, state, current stage, progress, age.
    Runs,
    /// Show one UpdateRun: its stages in order, each stage's clusters with their state and
    /// times, the soaks and approvals between stages, and why anything failed.
    Run {
        /// The UpdateRun.
        name: String,
        /// Keep showing the run as it changes, until it finishes (exit 1 if it failed).
        #[arg(short, long)]
        watch: bool,
        /// List every cluster of a stage of over 50 (by default such a stage shows its counts
        /// and the clusters updating, failed or passed over).
        #[arg(short, long)]
        all_clusters: bool,
    },
    /// Stop an UpdateRun (spec.state=Stop): no new cluster starts; clusters updating finish.
    Stop {
        /// The UpdateRun.
        run: String,
    },
    /// Resume a stopped UpdateRun, or start a planned one (spec.state=Run).
    Resume {
        /// The UpdateRun.
        run: String,
    },
    /// List ApprovalRequests waiting for a person (with --all, approved ones too).
    Approvals {
        /// Include approved requests.
        #[arg(long)]
        all: bool,
    },
    /// Approve an ApprovalRequest: sets Approved=True on its status, as the dashboard does,
    /// recording who approved (the identity the hub sees) and why.
    Approve {
        /// The ApprovalRequest (named <run>-<stage>).
        request: String,
        /// Why, recorded in the condition's message.
        #[arg(short, long, default_value = "")]
        message: String,
    },
    /// Freeze changes: until --until (or until unfrozen), no run of the placements named by
    /// --placement (every placement without it) starts a cluster or a stage, and no
    /// AutoUpdatePolicy applies a new version; clusters already updating finish.
    Freeze {
        /// Why (shown on every run it holds and on the dashboard).
        #[arg(long)]
        reason: String,
        /// When it lifts by itself, e.g. 2026-12-01T08:00:00Z.
        #[arg(long)]
        until: Option<String>,
        /// A placement it holds (repeatable); none: the whole fleet.
        #[arg(long = "placement")]
        placements: Vec<String>,
        /// The freeze's name.
        #[arg(long, default_value = freeze::DEFAULT_NAME)]
        name: String,
    },
    /// Lift a freeze: the runs and auto-updates it held go on.
    Unfreeze {
        /// The freeze's name.
        #[arg(default_value = freeze::DEFAULT_NAME)]
        name: String,
    },
    /// List the freezes: which hold now, until when, by whom and why.
    Freezes,
    /// List every member object that differs from the hub's (drifted and left so, diffed under
    /// ReportDiff, not taken over): cluster, placement, object, field, the member's and the
    /// hub's values, since when.
    Drift {
        /// Only this Placement's objects.
        placement: Option<String>,
        /// List the restorations the agents made instead (whenToApply: Always): the newest per
        /// object, with what the member had.
        #[arg(long)]
        corrections: bool,
    },
    /// Print exactly the manifests a placement sends to one cluster, as YAML: its resource
    /// snapshot with the overrides that count for the cluster applied the way the hub applies
    /// them. The snapshot is --snapshot, else the one the cluster's Binding points at, else the
    /// placement's newest; the overrides are the snapshots a run bound the cluster to, else the
    /// newest of every override. Comment lines at the top say which were used.
    Render {
        /// The Placement.
        placement: String,
        /// The MemberCluster.
        #[arg(long, value_name = "NAME")]
        cluster: String,
        /// Render this resource snapshot index instead.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
        snapshot: Option<i64>,
        /// Show a unified diff against the hub's template instead of the manifests.
        #[arg(long)]
        diff: bool,
    },
    /// List AutoUpdatePolicies: target, current and available version, what is in flight,
    /// the circuit, the next check.
    Autoupdates,
    /// Show an AutoUpdatePolicy (`autoupdate NAME`), or ask its controller for a registry check
    /// now (`autoupdate check NAME`) or to close its open circuit (`autoupdate reset NAME`).
    #[command(args_conflicts_with_subcommands = true)]
    Autoupdate {
        #[command(subcommand)]
        action: Option<AutoupdateAction>,
        /// The AutoUpdatePolicy to show.
        name: Option<String>,
    },
    /// Join a member cluster: create its MemberCluster on the hub, issue its agent's scoped hub
    /// credential (a ServiceAccount token), install the agent into the member and wait until it
    /// reports Joined. Running it again is safe: it reuses the credential.
    Join(JoinArgs),
    /// Remove a member cluster: delete its MemberCluster, let its agent remove the fleet's
    /// workloads from the member, wait for the member's hub namespace to go, then remove the
    /// agent from the member.
    Unjoin(UnjoinArgs),
    /// Shell completion, as kubectl asks for it (`kubectl_complete-fleet` runs this): the words
    /// after `kubectl fleet`, the last one being completed.
    #[command(name = "__complete", hide = true)]
    Complete {
        /// The words typed so far.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum AutoupdateAction {
    /// Check the registry now instead of at the next scheduled tick.
    Check {
        /// The AutoUpdatePolicy.
        name: String,
    },
    /// Close the circuit opened by repeated rollbacks: the newest eligible version is applied
    /// again (versions that failed stay skipped).
    Reset {
        /// The AutoUpdatePolicy.
        name: String,
    },
    /// Forget one failed version (recorded in the policy's history), so the policy may pick it
    /// again, e.g. after fixing what made it fail.
    Retry {
        /// The AutoUpdatePolicy.
        name: String,
        /// The failed version, e.g. 1.2.0.
        version: String,
    },
}

#[derive(clap::Args, Debug)]
struct JoinArgs {
    /// The member's name on the hub (a DNS label of at most 50 characters).
    name: String,
    /// The hub's kubeconfig (default: --kubeconfig / $KUBECONFIG).
    #[arg(long, value_name = "FILE")]
    hub_kubeconfig: Option<PathBuf>,
    /// The member's kubeconfig (admin: it installs the agent, RBAC and a CRD).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "no_install_agent"
    )]
    member_kubeconfig: Option<PathBuf>,
    /// The member kubeconfig's context (default: its current context).
    #[arg(long, value_name = "NAME")]
    member_context: Option<String>,
    /// A label for the MemberCluster (what stages select on); repeatable.
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE", value_parser = join::parse_label)]
    labels: Vec<(String, String)>,
    /// The agent's heartbeat period in seconds (spec.heartbeatPeriodSeconds; default 15).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=600))]
    heartbeat_period: Option<u32>,
    /// The agent's container image (default: the one deploy/member-agent names).
    #[arg(long, value_name = "IMAGE")]
    agent_image: Option<String>,
    /// The hub's URL as the agent reaches it (default: the hub kubeconfig's server).
    #[arg(long, value_name = "URL")]
    hub_server: Option<String>,
    /// Do not install the agent into the member (run it yourself with the written kubeconfig).
    #[arg(long, requires = "write_agent_kubeconfig")]
    no_install_agent: bool,
    /// Also write the agent's hub kubeconfig (it holds a credential: mode 0600) to this file.
    #[arg(long, value_name = "PATH")]
    write_agent_kubeconfig: Option<PathBuf>,
    /// How long each step may wait (hub provisioning, token, the agent joining).
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(clap::Args, Debug)]
struct UnjoinArgs {
    /// The member's name on the hub.
    name: String,
    /// The hub's kubeconfig (default: --kubeconfig / $KUBECONFIG).
    #[arg(long, value_name = "FILE")]
    hub_kubeconfig: Option<PathBuf>,
    /// The member's kubeconfig: remove the agent from it once the member left the hub.
    #[arg(long, value_name = "FILE")]
    member_kubeconfig: Option<PathBuf>,
    /// The member kubeconfig's context (default: its current context).
    #[arg(long, value_name = "NAME")]
    member_context: Option<String>,
    /// If the agent does not clean up in time (it is gone), remove its finalizers from the
    /// member's Works anyway: what they deployed then stays on the member.
    #[arg(long)]
    force: bool,
    /// How long each step may wait.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_duration)]
    timeout: Duration,
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    match fleethub_crds::duration::parse(s) {
        Ok(d) if d.is_zero() => Err("must be longer than 0s".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

async fn execute(cli: Cli) -> Result<()> {
    let hub = |path: Option<PathBuf>| {
        let context = cli.context.clone();
        let path = path.or_else(|| cli.kubeconfig.clone());
        async move { cluster::connect(path.as_deref(), context.as_deref()).await }
    };
    match cli.command {
        Command::Complete { ref words } => {
            complete::complete(words).await;
            Ok(())
        }
        Command::Start {
            ref placement,
            ref strategy,
            index,
            ref name,
            plan,
            ref on_failure,
            ref bake,
        } => {
            let opts = start::StartOptions {
                placement: placement.clone(),
                strategy: strategy.clone(),
                index,
                name: name.clone(),
                plan,
                on_failure: on_failure.as_deref().map(|o| match o {
                    "Rollback" => fleethub_crds::strategy::OnFailure::Rollback,
                    _ => fleethub_crds::strategy::OnFailure::Hold,
                }),
                bake: bake.clone(),
            };
            start::start(&hub(None).await?, &opts).await
        }
        Command::Rollback {
            ref target,
            ref strategy,
            ref name,
            yes,
        } => {
            let opts = start::RollbackOptions {
                target: target.clone(),
                strategy: strategy.clone(),
                name: name.clone(),
                yes,
            };
            start::rollback(&hub(None).await?, &opts).await
        }
        Command::Runs => runs::runs(&hub(None).await?).await,
        Command::Run {
            ref name,
            watch,
            all_clusters,
        } => runs::run(&hub(None).await?, name, watch, all_clusters).await,
        Command::Stop { ref run } => runs::set_state(&hub(None).await?, run, true).await,
        Command::Resume { ref run } => runs::set_state(&hub(None).await?, run, false).await,
        Command::Approvals { all } => runs::approvals(&hub(None).await?, all).await,
        Command::Approve {
            ref request,
            ref message,
        } => runs::approve(&hub(None).await?, request, message).await,
        Command::Freeze {
            ref reason,
            ref until,
            ref placements,
            ref name,
        } => {
            freeze::freeze(
                &hub(None).await?,
                name,
                reason,
                until.as_deref(),
                placements,
            )
            .await
        }
        Command::Unfreeze { ref name } => freeze::unfreeze(&hub(None).await?, name).await,
        Command::Freezes => freeze::freezes(&hub(None).await?).await,
        Command::Drift {
            ref placement,
            corrections,
        } => drift::drift(&hub(None).await?, placement.as_deref(), corrections).await,
        Command::Render {
            ref placement,
            ref cluster,
            snapshot,
            diff,
        } => manifests::render(&hub(None).await?, placement, cluster, snapshot, diff).await,
        Command::Autoupdates => autoupdate::list(&hub(None).await?).await,
        Command::Autoupdate {
            ref action,
            ref name,
        } => {
            let (name, what) = match (action, name) {
                (Some(AutoupdateAction::Check { name }), _) => {
                    (name, Some(autoupdate::Request::Check))
                }
                (Some(AutoupdateAction::Reset { name }), _) => {
                    (name, Some(autoupdate::Request::Reset))
                }
                (Some(AutoupdateAction::Retry { name, version }), _) => {
                    (name, Some(autoupdate::Request::Retry(version.clone())))
                }
                (None, Some(name)) => (name, None),
                (None, None) => {
                    return Err(crate::error::Error::Invalid(
                        "name an AutoUpdatePolicy: kubectl fleet autoupdate NAME (kubectl fleet autoupdates lists them)".into(),
                    ));
                }
            };
            let hub = hub(None).await?;
            match what {
                Some(what) => autoupdate::request(&hub, name, what).await,
                None => autoupdate::show(&hub, name).await,
            }
        }
        Command::Join(ref a) => {
            let hub = hub(a.hub_kubeconfig.clone()).await?;
            let member = match &a.member_kubeconfig {
                Some(p) if !a.no_install_agent => {
                    Some(cluster::connect(Some(p), a.member_context.as_deref()).await?)
                }
                _ => None,
            };
            let opts = join::JoinOptions {
                name: a.name.clone(),
                labels: a.labels.clone(),
                heartbeat_period: a.heartbeat_period,
                agent_image: a.agent_image.clone(),
                hub_server: a.hub_server.clone(),
                install_agent: !a.no_install_agent,
                write_agent_kubeconfig: a.write_agent_kubeconfig.clone(),
                timeout: a.timeout,
            };
            join::join(&hub, member.as_ref(), &opts).await
        }
        Command::Unjoin(ref a) => {
            let hub = hub(a.hub_kubeconfig.clone()).await?;
            let member = match &a.member_kubeconfig {
                Some(p) => Some(cluster::connect(Some(p), a.member_context.as_deref()).await?),
                None => None,
            };
            let opts = join::UnjoinOptions {
                name: a.name.clone(),
                force: a.force,
                timeout: a.timeout,
            };
            join::unjoin(&hub, member.as_ref(), &opts).await
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A `--bake` duration as the API takes it (`10m`, `1h30m`), longer than 0s and at most a week.
fn parse_bake(text: &str) -> Result<String, String> {
    let d = fleethub_crds::duration::parse(text).map_err(|e| e.to_string())?;
    if d.is_zero() || d > std::time::Duration::from_secs(7 * 24 * 3600) {
        return Err("a bake is longer than 0s and at most 168h (a week)".into());
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn join_without_an_agent_needs_somewhere_to_write_its_kubeconfig() {
        let err =
            Cli::try_parse_from(["kubectl-fleet", "join", "m", "--no-install-agent"]).unwrap_err();
        assert!(
            err.to_string().contains("--write-agent-kubeconfig"),
            "{err}"
        );
        let ok = Cli::try_parse_from([
            "kubectl-fleet",
            "join",
            "m",
            "--no-install-agent",
            "--write-agent-kubeconfig",
            "/tmp/x",
            "-l",
            "env=prod",
        ])
        .unwrap();
        let Command::Join(a) = ok.command else {
            panic!()
        };
        assert_eq!(a.labels, vec![("env".to_string(), "prod".to_string())]);
        assert!(
            Cli::try_parse_from(["kubectl-fleet", "join", "m"]).is_err(),
            "a member kubeconfig is required"
        );
        assert!(
            Cli::try_parse_from([
                "kubectl-fleet",
                "join",
                "m",
                "--member-kubeconfig",
                "k",
                "-l",
                "novalue"
            ])
            .is_err()
        );
    }

    #[test]
    fn autoupdate_takes_a_name_or_an_action() {
        let show = Cli::try_parse_from(["kubectl-fleet", "autoupdate", "web"]).unwrap();
        assert!(matches!(
            show.command,
            Command::Autoupdate { action: None, name: Some(ref n) } if n == "web"
        ));
        let reset = Cli::try_parse_from(["kubectl-fleet", "autoupdate", "reset", "web"]).unwrap();
        assert!(matches!(
            reset.command,
            Command::Autoupdate { action: Some(AutoupdateAction::Reset { ref name }), .. } if name == "web"
        ));
        assert!(Cli::try_parse_from(["kubectl-fleet", "autoupdate", "check"]).is_err());
    }

    #[test]
    fn render_needs_a_cluster_and_takes_a_snapshot_and_diff() {
        let c = Cli::try_parse_from([
            "kubectl-fleet",
            "render",
            "web",
            "--cluster",
            "m1",
            "--snapshot",
            "3",
            "--diff",
        ])
        .unwrap();
        assert!(matches!(
            c.command,
            Command::Render { ref placement, ref cluster, snapshot: Some(3), diff: true }
                if placement == "web" && cluster == "m1"
        ));
        let missing = Cli::try_parse_from(["kubectl-fleet", "render", "web"]).unwrap_err();
        assert_eq!(missing.exit_code(), 2);
        assert!(missing.to_string().contains("--cluster"), "{missing}");
        let negative = Cli::try_parse_from([
            "kubectl-fleet",
            "render",
            "web",
            "--cluster",
            "m1",
            "--snapshot",
            "-1",
        ]);
        assert!(negative.is_err());
    }

    #[test]
    fn global_flags_go_anywhere() {
        let c = Cli::try_parse_from([
            "kubectl-fleet",
            "runs",
            "--kubeconfig",
            "/k",
            "--context",
            "hub",
        ])
        .unwrap();
        assert_eq!(c.kubeconfig.as_deref(), Some(std::path::Path::new("/k")));
        assert_eq!(c.context.as_deref(), Some("hub"));
    }

    #[test]
    fn error_exit_messages_name_the_object() {
        let e = Error::NotFound("approvalrequest x not found on the hub".into());
        assert!(e.to_string().contains("approvalrequest x"));
    }
}
