//! `wasp reschedule`: one rescheduling run against any cluster (kubeconfig or in-cluster), printing the plan as
//! a table: each candidate, the policy and its reason, and where the fit check places it or why it stays.
//! With `--dry-run` nothing is evicted and nothing is written; budgets and placement are still simulated.

use crate::config::{HostConfig, ReschedulerSection, Strategy};
use crate::host::Host;
use crate::kube::{ApiClient, HostIdentity};
use crate::registry::PolicyRegistry;
use crate::runtime::Runtime;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// Strategies of a run when neither the configuration nor the command line names any.
pub const DEFAULT_STRATEGIES: [&str; 3] = ["remove-pods-violating-node-taints", "remove-pods-violating-node-affinity", "remove-duplicates"];

#[derive(Args)]
pub struct RescheduleArgs {
    /// Plan only: evict nothing, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Cluster to plan for; default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Host configuration (its `rescheduler` section); the built-in default uses the policies in plugins/out.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Evict policies to run (repeatable), instead of the configuration's strategies.
    #[arg(long = "strategy")]
    strategies: Vec<String>,
}

/// The configuration with the strategies to run: the command line's, else the configuration's, else
/// [`DEFAULT_STRATEGIES`] with the default envelope.
fn with_strategies(mut config: HostConfig, strategies: &[String]) -> anyhow::Result<HostConfig> {
    let names: Vec<String> = match (strategies, &config.rescheduler) {
        ([], Some(_)) => return Ok(config),
        ([], None) => DEFAULT_STRATEGIES.iter().map(ToString::to_string).collect(),
        (names, _) => names.to_vec(),
    };
    let strategies = names.into_iter().map(|policy| Strategy { policy }).collect();
    let section = match config.rescheduler.take() {
        Some(section) => ReschedulerSection { strategies, ..section },
        None => ReschedulerSection::with_strategies(strategies),
    };
    config.rescheduler = Some(section);
    config.validate().context("the configuration with the command line's strategies")?;
    Ok(config)
}

pub fn run(args: RescheduleArgs) -> anyhow::Result<()> {
    let config = super::config_or_built_in(args.config.as_deref())?;
    let config = with_strategies(config, &args.strategies)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let api = ApiClient::connect_with(args.kubeconfig.as_deref()).await?;
        let policy_runtime = Runtime::new(None)?;
        let policies = PolicyRegistry::new(&policy_runtime, config, None)?;
        let host = Host::new(api, Arc::new(policies), HostIdentity::named("wasp-reschedule", None));
        host.start_informers();
        tracing::info!("listing nodes and pods");
        host.cluster.wait_until_ready().await;
        let plan = host.rescheduler.run_once(args.dry_run).await.context("the configuration has no rescheduler section")?;
        print!("{}", plan.table());
        Ok(())
    })
}
