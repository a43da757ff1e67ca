//! The `wasp` command line: one subcommand module per area.

mod certs;
mod configmap;
mod manifests;
mod policy;
mod reschedule;
mod run;
mod scaffold;
#[cfg(feature = "sim")]
mod sim;
#[cfg(feature = "sim")]
mod simulate;

use crate::config::HostConfig;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `relative` in the wasp checkout this binary was built in, if it is still there: what a command run from
/// anywhere else (a policy author's own crate) falls back on for the SDK and the default policies.
fn in_build_checkout(relative: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    path.exists().then(|| path.canonicalize().unwrap_or(path))
}

/// The configuration in `path`, or the built-in one. The built-in one names `plugins/out`, relative to the
/// working directory; outside a wasp checkout, the default policies of the checkout the binary was built in.
fn config_or_built_in(path: Option<&Path>) -> anyhow::Result<HostConfig> {
    let Some(path) = path else {
        let mut config = HostConfig::built_in();
        if !config.policy_dir.is_dir() {
            if let Some(built) = in_build_checkout(&config.policy_dir.to_string_lossy()) {
                config.policy_dir = built;
            }
        }
        return Ok(config);
    };
    HostConfig::load(path)
}

#[derive(Parser)]
#[command(name = "wasp", version, about = "WebAssembly policy host for Kubernetes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect and try policy components.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Run a simulated Kubernetes API server from a scenario.
    #[cfg(feature = "sim")]
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Print a ConfigMap holding a directory's policy components (binaryData), for kubectl.
    Configmap(configmap::ConfigMapArgs),
    /// Run the host (scheduler) against a cluster (kubeconfig or in-cluster service account).
    Run(run::RunArgs),
    /// One rescheduling run against a cluster: print the plan (with --dry-run, evict nothing).
    Reschedule(reschedule::RescheduleArgs),
    /// Make a CA and a webhook serving certificate; print the Secret (and the caBundle on stderr).
    Certs(certs::CertsArgs),
    /// Print the Autoscaler CustomResourceDefinition (generated from the Rust type) for kubectl apply.
    Crd,
    /// Schedule a scenario's workloads on a simulated cluster with the policies, and report what happened.
    #[cfg(feature = "sim")]
    Simulate(simulate::SimulateArgs),
    /// The child process `wasp run` compiles a policy in, under limits: the component on stdin, the artifact on
    /// stdout.
    #[command(hide = true)]
    CompilePolicy {
        #[arg(long)]
        memory_bytes: u64,
        #[arg(long)]
        cpu_seconds: u64,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // No logging set up: the parent reads this child's stderr as the reason of a failure.
    if let Command::CompilePolicy { memory_bytes, cpu_seconds } = cli.command {
        return crate::runtime::compile_policy_child(memory_bytes, cpu_seconds);
    }
    let default_level = match cli.command {
        Command::Policy(_) => "warn",
        #[cfg(feature = "sim")]
        Command::Sim(_) => "info",
        #[cfg(feature = "sim")]
        Command::Simulate(_) => "warn",
        Command::Run(_) => "info",
        Command::Reschedule(_) => "warn",
        Command::Configmap(_) => "warn",
        Command::Crd => "warn",
        Command::Certs(_) => "warn",
        Command::CompilePolicy { .. } => unreachable!("handled above"),
    };
    init_logging(default_level);
    let result = match cli.command {
        Command::Policy(command) => policy::run(command),
        #[cfg(feature = "sim")]
        Command::Sim(command) => sim::run(command),
        #[cfg(feature = "sim")]
        Command::Simulate(args) => simulate::run(args),
        Command::Run(args) => run::run(args),
        Command::Reschedule(args) => reschedule::run(args),
        Command::Configmap(args) => configmap::run(args),
        Command::Certs(args) => certs::run(args),
        Command::Crd => {
            print!("{}", crate::autoscaler::resource::crd_yaml());
            Ok(())
        }
        Command::CompilePolicy { .. } => unreachable!("handled above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr so command output on stdout stays clean; `RUST_LOG` overrides the level.
fn init_logging(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
