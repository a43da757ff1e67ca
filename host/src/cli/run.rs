//! `wasp run`: the host against a real cluster (kubeconfig, or the in-cluster service account): informers first,
//! then the endpoints, then leader election and the loops, swapping in policies and configuration when their
//! files change.

use crate::admission::tls::CertificateFiles;
use crate::admission::WebhookServing;
use crate::config::HostConfig;
use crate::host::{Host, Leadership};
use crate::kube::{ApiClient, HostIdentity};
use crate::registry::watch::WatchOptions;
use crate::registry::{PolicyRegistry, Refusal};
use crate::runtime::{budget_for_container, container_memory_limit, CompileLimits, Compiler, Runtime};
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, Signal, SignalKind};

#[derive(Args)]
pub struct RunArgs {
    /// Host configuration; the built-in default uses the policies in plugins/out.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where /metrics, /healthz, /readyz and /policies are served over HTTPS, as kube-scheduler's secure port:
    /// the probes open to all, /metrics and /policies to users the API server authenticates (TokenReview) and
    /// authorizes (SubjectAccessReview, `get` on the path). The certificate is --tls-cert-file's when given, else
    /// one made at start.
    #[arg(long, default_value = "0.0.0.0:10259")]
    listen: SocketAddr,
    /// Where others reach --listen (HOST:PORT), written on the Lease while this replica leads so `wasp explain`
    /// finds it. Default: the Pod's IP (POD_IP) and the bound port, else the bound address.
    #[arg(long)]
    advertise_address: Option<String>,
    /// Also serve every endpoint over plain HTTP, to anyone, here (a local try; keep it on 127.0.0.1).
    #[arg(long)]
    insecure_listen: Option<SocketAddr>,
    /// What every policy instance may hold together, in MiB (each is also held to its policy's `memoryMib`).
    /// Default: the container's memory limit less 512 MiB for the host and a compile, at least half the limit;
    /// no bound outside a container with a limit. More than the container's limit is refused.
    #[arg(long)]
    guest_memory_mib: Option<usize>,
    /// Compiled policies persist here across restarts.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Run the loops without holding the lease (only one replica may run then).
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
    /// Where the admission webhooks are served (HTTPS), when a certificate is given.
    #[arg(long, default_value = "0.0.0.0:9443")]
    webhook_listen: SocketAddr,
    /// The webhooks' serving certificate (PEM; re-read when it changes). Without it, no webhook is served.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// How often the certificate files are re-read.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    tls_reload_interval: std::time::Duration,
    /// On SIGTERM or SIGINT, the longest wait for the work in flight (bindings, evictions, a scale, webhook
    /// reviews) before the Lease is released and the process exits; keep it under the pod's
    /// terminationGracePeriodSeconds less its preStop.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    shutdown_timeout: std::time::Duration,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let identity = HostIdentity::from_env();
    if identity.pod.is_none() {
        tracing::warn!("POD_NAMESPACE and POD_NAME are not set: events about the host (refused reloads) are only logged");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(async move {
        let mut signals = Signals::listen();
        let api = tokio::select! {
            api = ApiClient::connect() => api?,
            signal = signals.next() => {
                tracing::info!(signal, "stopped while connecting to the API server");
                return Ok(());
            }
        };
        // Compiles run in children of this binary, under limits: a compile bomb costs the child, not the host.
        let program = std::env::current_exe().context("finding this binary, to compile policies in a child process")?;
        let policy_runtime = Runtime::with_compiler(args.cache_dir.clone(), Compiler::Isolated { program, limits: CompileLimits::default() })?;
        policy_runtime.guest_memory().set_budget(guest_memory_budget(args.guest_memory_mib, container_memory_limit())?);
        let Some((config, policies, refused)) = first_generation(&policy_runtime, args.config.as_deref(), &mut signals).await? else {
            return Ok(());
        };
        let host = Host::new(api, Arc::new(policies), identity);
        if !refused.is_empty() {
            let message = refused.iter().map(|refusal| refusal.message.as_str()).collect::<Vec<_>>().join("; ");
            let events = host.events.clone();
            tokio::spawn(async move { events.host_event("Warning", "PolicyRefusedAtStart", &message).await });
        }
        let _watcher = match args.no_watch {
            true => None,
            false => {
                let options = WatchOptions { debounce: args.reload_debounce, rescan: args.rescan_interval, ..Default::default() };
                Some(host.watch_policies(options)?)
            }
        };
        host.start_informers();
        let files = args.tls_cert_file.clone().zip(args.tls_private_key_file.clone()).map(|(certificate, private_key)| CertificateFiles { certificate, private_key });
        let address = host.serve_secure(args.listen, files, args.advertise_address.as_deref()).await?;
        tracing::info!(%address, instance = %host.identity.instance, profiles = ?host.scheduler.profile_names(), "serving /metrics, /healthz, /readyz, /policies over HTTPS (metrics and policies for authorized users)");
        if let Some(insecure) = args.insecure_listen {
            if !insecure.ip().is_loopback() {
                tracing::warn!(address = %insecure, "--insecure-listen serves the metrics and the configuration to anyone who can reach it");
            }
            let address = host.serve(insecure).await?;
            tracing::info!(%address, "serving /metrics, /healthz, /readyz, /policies over plain HTTP, to anyone");
        }
        if let (Some(certificate), Some(private_key)) = (args.tls_cert_file.clone(), args.tls_private_key_file.clone()) {
            let mut serving = WebhookServing::new(args.webhook_listen, certificate, private_key);
            serving.reload_interval = args.tls_reload_interval;
            let address = host.serve_webhooks(serving).await?;
            tracing::info!(%address, "serving the admission webhooks /validate-pods and /mutate-pods");
        }
        tokio::spawn(stop_on_signal(host.clone(), args.shutdown_timeout, signals));
        let leadership = if args.no_leader_election {
            host.clone().run_loops().await;
            Leadership::Released
        } else {
            host.clone().run_as_leader(config.leader_election.clone()).await
        };
        if leadership == Leadership::Lost {
            anyhow::bail!("lost leadership; exiting so a restart begins from a clean state");
        }
        // The loops are done; the webhook server finishes its reviews (bounded by the signal's deadline).
        host.servers_stopped().await;
        tracing::info!("stopped");
        Ok(())
    });
    // A hung request must not keep the process past its grace period: what is left is dropped here.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// The configuration and a registry of every policy it names, waiting until both can be had: installed before
/// its policy ConfigMaps (a chart cannot carry them), or with a configuration it cannot run, the host waits, not
/// Ready and saying why, instead of crash-looping into the kubelet's backoff, and starts within seconds of the
/// kubelet projecting what was missing. It tries again when the configuration file or the policy directory
/// changes, and every 30 s for what no file shows (a registry that answers again). A policy file that is there
/// but refused does not hold the start: its stand-in's failure mode answers for it ([`PolicyRegistry::start`]);
/// its refusals come back with the registry. None when a signal stops the wait.
async fn first_generation(
    runtime: &Arc<Runtime>,
    config_path: Option<&Path>,
    signals: &mut Signals,
) -> anyhow::Result<Option<(HostConfig, PolicyRegistry, Vec<Refusal>)>> {
    const POLL: Duration = Duration::from_secs(2);
    const RETRY_ANYWAY: Duration = Duration::from_secs(30);
    let started = Instant::now();
    let mut tried: Option<(u64, Instant)> = None;
    loop {
        let inputs = fingerprint(config_path);
        let due = tried.is_none_or(|(seen, at)| seen != inputs || at.elapsed() >= RETRY_ANYWAY);
        if due {
            let attempt = super::config_or_built_in(config_path)
                .and_then(|config| Ok((config.clone(), PolicyRegistry::start(runtime, config, config_path.map(Path::to_path_buf))?)));
            match attempt {
                Ok((config, (registry, refused))) => {
                    if tried.is_some() {
                        tracing::info!(waited = %humantime::format_duration(Duration::from_secs(started.elapsed().as_secs())), "the configuration and its policies are there; starting");
                    }
                    return Ok(Some((config, registry, refused)));
                }
                // A run outside a cluster (no configuration file) has nothing to wait for.
                Err(error) if config_path.is_none() => return Err(error),
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), "waiting for a configuration and policies the host can run (the policy ConfigMaps projected, or the configuration fixed); not Ready meanwhile");
                    tried = Some((inputs, Instant::now()));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            signal = signals.next() => {
                tracing::info!(signal, "stopped while waiting for the configuration and its policies");
                return Ok(None);
            }
        }
    }
}

/// A hash of what the first generation is made of: the configuration file's bytes and, for the policy directory
/// it names, each entry's name, size and modification time (through the kubelet's symlinks).
fn fingerprint(config_path: Option<&Path>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let Some(path) = config_path else { return 0 };
    let text = std::fs::read(path).unwrap_or_default();
    text.hash(&mut hasher);
    if let Ok(config) = HostConfig::parse_at(&String::from_utf8_lossy(&text), path) {
        let mut entries: Vec<_> = std::fs::read_dir(&config.policy_dir).into_iter().flatten().flatten().collect();
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let metadata = std::fs::metadata(entry.path()).ok();
            (entry.file_name(), metadata.as_ref().map(|metadata| metadata.len()), metadata.and_then(|metadata| metadata.modified().ok())).hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// Waits for SIGTERM (the kubelet, on every rollout and drain) or SIGINT, then stops the host gracefully; a
/// shutdown that outlasts `--shutdown-timeout`, or a second signal, ends the process at once.
async fn stop_on_signal(host: Arc<Host>, patience: std::time::Duration, mut signals: Signals) {
    let signal = signals.next().await;
    tracing::info!(signal, patience = %humantime::format_duration(patience), "stopping: no new work; finishing what is in flight, then releasing the lease");
    host.stop();
    tokio::select! {
        _ = tokio::time::sleep(patience) => tracing::warn!("the work in flight outlasted --shutdown-timeout; exiting without it"),
        signal = signals.next() => tracing::warn!(signal, "second signal; exiting at once"),
    }
    std::process::exit(1);
}

/// SIGTERM and SIGINT, listened for from the process's start: one that comes while the host waits for its first
/// generation, or before the loops run, is not lost (a listener registered later does not see it).
struct Signals(Option<(Signal, Signal)>);

impl Signals {
    fn listen() -> Signals {
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(interrupt)) => Signals(Some((term, interrupt))),
            _ => {
                tracing::warn!("cannot listen for signals; stopping only when killed");
                Signals(None)
            }
        }
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        let Some((term, interrupt)) = self.0.as_mut() else { return std::future::pending().await };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        }
    }
}

/// The guest memory budget in bytes from `--guest-memory-mib` and the container's memory `limit`.
fn guest_memory_budget(flag_mib: Option<usize>, limit: Option<usize>) -> anyhow::Result<Option<usize>> {
    match (flag_mib.map(|mib| mib.saturating_mul(1 << 20)), limit) {
        (Some(budget), Some(limit)) if budget > limit => {
            anyhow::bail!(
                "--guest-memory-mib {} is more than this container's memory limit of {} MiB: the kernel would kill the host before a policy ran out",
                budget >> 20,
                limit >> 20
            )
        }
        (Some(budget), _) => Ok(Some(budget)),
        (None, limit) => Ok(limit.map(budget_for_container)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_guest_memory_budget_stays_under_the_containers_limit() {
        use super::guest_memory_budget;
        assert_eq!(guest_memory_budget(None, Some(1536 << 20)).unwrap(), Some(1024 << 20));
        assert_eq!(guest_memory_budget(None, None).unwrap(), None, "no container limit: no bound");
        assert_eq!(guest_memory_budget(Some(700), Some(1536 << 20)).unwrap(), Some(700 << 20));
        let error = guest_memory_budget(Some(2048), Some(1536 << 20)).unwrap_err().to_string();
        assert!(error.starts_with("--guest-memory-mib 2048 is more than this container's memory limit of 1536 MiB"), "{error}");
    }
}
