//! `wasp simulate`: a scenario on the simulated API server, scheduled by the host over HTTP exactly as against
//! a real cluster, then a report: pods per node, what could not be placed and why, timings.

use crate::config::HostConfig;
use crate::host::Host;
use crate::kube::ApiClient;
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;
use clap::Args;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wasp_sim::{Scenario, Simulator};

#[derive(Args)]
pub struct SimulateArgs {
    /// The scenario (see sim/scenarios/).
    #[arg(long, default_value = "sim/scenarios/small.yaml")]
    scenario: PathBuf,
    /// Host configuration; the built-in default uses the policies in plugins/out.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Give up waiting after this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let scenario = Scenario::load(&args.scenario)?;
    let config = match &args.config {
        Some(path) => HostConfig::load(path)?,
        None => HostConfig::built_in(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(simulate(&scenario, &config, args.timeout))
}

/// An API client for a simulator. kube's own retries are off: the loops back off by themselves.
pub fn sim_client(simulator: &Simulator) -> anyhow::Result<ApiClient> {
    ApiClient::from_config(kube::Config::new(simulator.url().parse()?))
}

async fn simulate(scenario: &Scenario, config: &HostConfig, timeout: Duration) -> anyhow::Result<()> {
    let simulator = Simulator::start(scenario, "127.0.0.1:0".parse()?).await?;
    let api = sim_client(&simulator)?;
    let client = api.client.clone();
    let runtime = Runtime::new(None)?;
    let host = Host::with_config(config, &runtime, api)?;
    let scheduler = host.scheduler.clone();
    scheduler.keep_report();
    let profiles = scheduler.profile_names();
    println!("scenario {:?}: {} nodes; profiles {}; API server {}", scenario.name, scenario.node_names().len(), profiles.join(", "), simulator.url());
    let started = Instant::now();
    let worker = tokio::spawn(host.clone().run_loops());
    let pods: Api<Pod> = Api::all(client.clone());
    // Done when every pod for our profiles is bound or waiting as unschedulable, and that holds for a moment.
    let mut settled_since: Option<Instant> = None;
    let mut last_report = Instant::now();
    let ours = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.scheduler_name.as_deref()).is_some_and(|name| profiles.iter().any(|profile| profile == name));
    let bound = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).is_some();
    loop {
        let list = pods.list(&ListParams::default()).await?.items;
        let mine: Vec<&Pod> = list.iter().filter(|pod| ours(pod)).collect();
        let bound_count = mine.iter().filter(|pod| bound(pod)).count();
        let sizes = scheduler.queue().sizes();
        let settled = !mine.is_empty() && sizes.active == 0 && sizes.backoff == 0 && bound_count + sizes.unschedulable >= mine.len();
        if last_report.elapsed() > Duration::from_secs(2) {
            println!("  {:>5.1}s  {bound_count}/{} bound, {} unschedulable", started.elapsed().as_secs_f64(), mine.len(), sizes.unschedulable);
            last_report = Instant::now();
        }
        settled_since = if settled { settled_since.or(Some(Instant::now())) } else { None };
        if settled_since.is_some_and(|since| since.elapsed() > Duration::from_millis(500)) || started.elapsed() > timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    worker.abort();
    report(&client, &scheduler, &profiles, elapsed).await
}

async fn report(client: &Client, scheduler: &Scheduler, profiles: &[String], elapsed: Duration) -> anyhow::Result<()> {
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?.items;
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let mut per_node: BTreeMap<String, Vec<String>> = nodes.iter().map(|node| (node.metadata.name.clone().unwrap_or_default(), Vec::new())).collect();
    for pod in &pods {
        if let Some(node) = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()) {
            per_node.entry(node).or_default().push(pod.metadata.name.clone().unwrap_or_default());
        }
    }
    println!();
    println!("{:<12} {:>4}  PODS", "NODE", "N");
    for (node, names) in &per_node {
        let mut names = names.clone();
        names.sort();
        println!("{node:<12} {:>4}  {}", names.len(), names.join(" "));
    }
    let details = scheduler.stats.report().unwrap_or_default();
    let failures = details.last_failure;
    if !failures.is_empty() {
        println!();
        println!("unschedulable:");
        for (pod, message) in &failures {
            println!("  {pod}: {message}");
        }
    }
    let mut latencies = details.latencies;
    latencies.sort();
    let percentile = |p: f64| latencies.get(((latencies.len() as f64 - 1.0) * p).round() as usize).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let scheduled = scheduler.stats.scheduled.load(Ordering::Relaxed);
    println!();
    println!(
        "profiles {}: {scheduled} bound, {} unschedulable, {} binding errors in {:.2}s; queue-to-bound latency p50 {:.1} ms, p99 {:.1} ms",
        profiles.join(", "),
        failures.len(),
        scheduler.stats.bind_errors.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        percentile(0.5),
        percentile(0.99),
    );
    Ok(())
}
