//! `wasp sim serve`: a simulated cluster on a loopback port, with a kubeconfig for kubectl and kube-rs.

use clap::Subcommand;
use std::net::SocketAddr;
use std::path::PathBuf;
use wasp_sim::{Scenario, Simulator, SimulatorOptions};

#[derive(Subcommand)]
pub enum SimCommand {
    /// Serve a scenario until interrupted.
    Serve {
        #[arg(long)]
        scenario: PathBuf,
        /// Address to listen on (loopback only is sensible: there is no authentication).
        #[arg(long, default_value = "127.0.0.1:6443")]
        address: SocketAddr,
        /// Where to write the kubeconfig that points at the simulator.
        #[arg(long, default_value = "wasp-sim.kubeconfig")]
        kubeconfig: PathBuf,
        /// Append one JSON line per answered request to a resource to this file (who, verb, resource, name,
        /// status code), as kube-apiserver's audit log does.
        #[arg(long)]
        audit_log: Option<PathBuf>,
    },
}

pub fn run(command: SimCommand) -> anyhow::Result<()> {
    let SimCommand::Serve { scenario, address, kubeconfig, audit_log } = command;
    let scenario = Scenario::load(&scenario)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let options = SimulatorOptions { audit_log, ..Default::default() };
        let simulator = Simulator::start_with(&scenario, address, options).await?;
        simulator.write_kubeconfig(&kubeconfig)?;
        println!("simulated cluster {:?} serving on {}", scenario.name, simulator.url());
        println!("export KUBECONFIG={}", std::fs::canonicalize(&kubeconfig)?.display());
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
