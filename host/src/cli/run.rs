//! `wasp run`: the scheduler against a real cluster (kubeconfig, or the in-cluster service account), swapping in
//! policies and configuration when their files change.

use crate::registry::watch::WatchOptions;
use crate::registry::PolicyRegistry;
use crate::runtime::Runtime;
use crate::scheduler::config::{SchedulerConfig, DEFAULT_CONFIG};
use crate::scheduler::writer::ObjectRef;
use crate::scheduler::{http, leader, Scheduler};
use std::sync::Arc;
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Args)]
pub struct RunArgs {
    /// Scheduler configuration; the built-in default uses the policies in plugins/out.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "0.0.0.0:10259")]
    listen: SocketAddr,
    /// Compiled policies persist here across restarts.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Schedule without holding the lease (only one replica may run then).
    #[arg(long)]
    no_leader_election: bool,
    /// Load policies and configuration once; by default their files are watched and swapped in when changed.
    #[arg(long)]
    no_watch: bool,
    /// Quiet time after a file change before reloading.
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    reload_debounce: std::time::Duration,
    /// Full rescan of the policy files, as a backstop for missed file events.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    rescan_interval: std::time::Duration,
}

fn identity() -> String {
    let host = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_else(|_| "wasp".into());
    format!("{host}_{:08x}", fastrand::u32(..))
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => SchedulerConfig::load(path)?,
        None => SchedulerConfig::parse(DEFAULT_CONFIG).context("built-in scheduler config")?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let mut kube_config = kube::Config::infer().await.context("loading the kubeconfig or in-cluster configuration")?;
        // kube retries 429/503/504 for minutes by default; the scheduler backs off per pod instead.
        kube_config.default_retry = false;
        let client = kube::Client::try_from(kube_config)?;
        let version = client.apiserver_version().await.context("the API server is unreachable")?;
        tracing::info!(version = %version.git_version, "connected to the API server");
        let runtime = Runtime::new(args.cache_dir.clone())?;
        let policies = PolicyRegistry::new(&runtime, config.clone(), args.config.clone())?;
        let scheduler = Scheduler::with_registry(Arc::new(policies), client.clone());
        if let Some(host) = ObjectRef::host_pod_from_env() {
            scheduler.report_events_on(host);
        }
        let _watcher = match args.no_watch {
            true => None,
            false => {
                let options = WatchOptions { debounce: args.reload_debounce, rescan: args.rescan_interval, ..Default::default() };
                Some(scheduler.watch_policies(options)?)
            }
        };
        let address = http::serve(scheduler.clone(), args.listen).await?;
        tracing::info!(%address, profiles = ?scheduler.profile_names(), "serving /metrics, /healthz, /readyz, /policies");
        if args.no_leader_election {
            scheduler.run().await;
            return Ok(());
        }
        let candidate = leader::Candidate::new(client, config.leader_election.clone(), &identity());
        scheduler.run_as_leader(candidate).await;
        anyhow::bail!("lost leadership; exiting so a restart begins from a clean state")
    })
}
