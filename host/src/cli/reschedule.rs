//! `wasp reschedule`: one rescheduling run against any cluster (kubeconfig or in-cluster), printing the plan as
//! a table: each candidate, the policy and its reason, and where the fit check places it or why it stays.
//! With `--dry-run` nothing is evicted and nothing is written; budgets and placement are still simulated. Without
//! it, a run is refused while a host holds the Lease (`--force` overrides).

use crate::config::{HostConfig, ReschedulerSection, Strategy};
use crate::host::Host;
use crate::kube::leader::LeaderElection;
use crate::kube::{ApiClient, HostIdentity};
use crate::registry::PolicyRegistry;
use crate::runtime::Runtime;
use anyhow::Context;
use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
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
    /// Evict even while a running host holds the Lease (its pacing and backoff do not see this run's evictions).
    #[arg(long)]
    force: bool,
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

/// A leader's rescheduler paces evictions and backs off per workload from what it remembers; a run from the
/// command line beside it would evict behind its back. Refused while the Lease is held and fresh by the holder's
/// own `renewTime` and duration (read from here, so this machine's clock judges it).
async fn refuse_while_led(api: &ApiClient, settings: &LeaderElection) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(api.client.clone(), &settings.lease_namespace);
    let lease = leases.get_opt(&settings.lease_name).await.with_context(|| {
        format!("reading the Lease {}/{} to check that no host leads (--force evicts without checking)", settings.lease_namespace, settings.lease_name)
    })?;
    let Some(spec) = lease.and_then(|lease| lease.spec) else { return Ok(()) };
    let holder = spec.holder_identity.unwrap_or_default();
    let Some(renewed) = spec.renew_time.map(|time| time.0) else { return Ok(()) };
    let age = jiff::Timestamp::now().duration_since(renewed).as_secs_f64();
    if holder.is_empty() || age > f64::from(spec.lease_duration_seconds.unwrap_or(15)) {
        return Ok(());
    }
    anyhow::bail!(
        "the Lease {}/{} is held by {holder} (renewed {age:.0}s ago): that host's rescheduler evicts with pacing and backoff this run would not respect; use --dry-run to see the plan, or --force to evict anyway",
        settings.lease_namespace,
        settings.lease_name
    )
}

pub fn run(args: RescheduleArgs) -> anyhow::Result<()> {
    let config = super::config_or_built_in(args.config.as_deref())?;
    let config = with_strategies(config, &args.strategies)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let api = ApiClient::connect_with(args.kubeconfig.as_deref()).await?;
        if !args.dry_run && !args.force {
            refuse_while_led(&api, &config.leader_election).await?;
        }
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
