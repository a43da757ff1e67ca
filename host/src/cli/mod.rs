//! The `wasp` command line: one subcommand module per area.

mod certs;
mod configmap;
mod explain;
mod manifests;
mod policy;
pub mod reference;
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
    /// Why the leading host decided what it did: a pod's placement, an eviction, an Autoscaler's sync (also
    /// `kubectl wasp explain` with this binary installed as `kubectl-wasp`).
    Explain(explain::ExplainArgs),
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
        // The report is the output (and progress on stderr): logs only when RUST_LOG asks for them. Errors the
        // scenario injects on purpose would otherwise read as the host's.
        #[cfg(feature = "sim")]
        Command::Simulate(_) => "off",
        Command::Run(_) => "info",
        Command::Reschedule(_) => "warn",
        Command::Configmap(_) => "warn",
        Command::Crd => "warn",
        Command::Certs(_) => "warn",
        Command::Explain(_) => "warn",
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
        Command::Explain(args) => explain::run(args),
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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Locked for the whole line, so that a cut line and its note are not split by another thread's.
    let writer = || BoundedLines(std::io::stderr().lock());
    // Colours only for a terminal: a log captured to a file or a pipe reads without escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi).init();
}

/// A log line is cut past this many bytes: kube's client logs the whole body of a response it cannot decode (a
/// 420 KB line on every sync was seen), and no line is worth more than this.
const MAX_LOG_LINE_BYTES: usize = 8 << 10;

/// Writes each log line (the formatter hands over one whole line per write) cut at [`MAX_LOG_LINE_BYTES`].
struct BoundedLines<W>(W);

impl<W: std::io::Write> std::io::Write for BoundedLines<W> {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        if line.len() <= MAX_LOG_LINE_BYTES {
            self.0.write_all(line)?;
            return Ok(line.len());
        }
        // Back to the start of a UTF-8 character.
        let mut cut = MAX_LOG_LINE_BYTES;
        while cut > 0 && line[cut] & 0xC0 == 0x80 {
            cut -= 1;
        }
        self.0.write_all(&line[..cut])?;
        writeln!(self.0, "... ({} more bytes cut)", line.len() - cut)?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_log_line_is_cut_at_a_character_boundary() {
        let mut cut = BoundedLines(Vec::new());
        cut.write_all(b"short\n").unwrap();
        let long = format!("{}é{}\n", "x".repeat(MAX_LOG_LINE_BYTES - 1), "y".repeat(1000));
        cut.write_all(long.as_bytes()).unwrap();
        let written = String::from_utf8(cut.0).unwrap();
        assert_eq!(written, format!("short\n{}... (1003 more bytes cut)\n", "x".repeat(MAX_LOG_LINE_BYTES - 1)));
    }
}
