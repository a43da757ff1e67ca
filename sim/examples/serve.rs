//! Serves a scenario without the host crate: `cargo run -p wasp-sim --example serve -- sim/scenarios/small.yaml
//! [kubeconfig path]` (default `./wasp-sim.kubeconfig`). Prints the URL, then serves until killed.

use wasp_sim::{Scenario, Simulator};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let scenario = match args.next() {
        Some(path) => Scenario::load(std::path::Path::new(&path))?,
        None => Scenario::parse("nodeGroups: [{name: worker, count: 3, cpu: '4', memory: 16Gi}]\n")?,
    };
    let kubeconfig = args.next().unwrap_or_else(|| "wasp-sim.kubeconfig".into());
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse()?).await?;
    simulator.write_kubeconfig(std::path::Path::new(&kubeconfig))?;
    println!("{}", simulator.url());
    std::future::pending::<()>().await;
    Ok(())
}
