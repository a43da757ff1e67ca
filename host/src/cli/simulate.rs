//! `wasp simulate`: a scenario on the simulated API server, scheduled by the host over HTTP exactly as against
//! a real cluster, then a report: pods per node, what could not be placed and why, timings; with a rescheduler
//! section, its runs and the cluster after them; with Autoscalers (`--autoscalers`), their replicas against the
//! load over the scenario's load curves.

use crate::cluster::ClusterState;
use crate::config::HostConfig;
use crate::host::Host;
use crate::kube::{ApiClient, HostIdentity};
use crate::registry::PolicyRegistry;
use std::sync::Arc;
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;
use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::{Node, Pod};
use crate::autoscaler::resource::Autoscaler;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wasp_sim::{Scenario, Simulator};

/// One node's load as the host sees it.
struct NodeLoad {
    name: String,
    zone: String,
    pods: usize,
    cpu: f64,
    memory: f64,
}

/// Pods and requested CPU and memory per node as distributions, per zone, and the least and most loaded nodes:
/// readable at 5000 nodes, where a listing is not.
fn summary(cluster: &ClusterState, per_node: &BTreeMap<String, Vec<String>>) -> String {
    let share = |used: u64, total: u64| if total == 0 { 0.0 } else { used as f64 * 100.0 / total as f64 };
    let loads: Vec<NodeLoad> = cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| {
            let (node, usage) = cluster.node(id)?;
            let zone = node.labels.iter().find(|(key, _)| key == "topology.kubernetes.io/zone").map_or("-", |(_, zone)| zone.as_str());
            Some(NodeLoad {
                name: node.name.clone(),
                zone: zone.to_string(),
                pods: per_node.get(&node.name).map_or(0, Vec::len),
                cpu: share(usage.requested.cpu_millis, node.allocatable.cpu_millis),
                memory: share(usage.requested.memory_bytes, node.allocatable.memory_bytes),
            })
        })
        .collect();
    let mut out = String::new();
    let quantiles = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let at = |share: f64| values.get(((values.len().max(1) - 1) as f64 * share).round() as usize).copied().unwrap_or(0.0);
        format!("{:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1}", at(0.0), at(0.1), at(0.5), at(0.9), at(1.0))
    };
    out.push_str(&format!("{} nodes (--full lists each)
", loads.len()));
    out.push_str(&format!("{:<22} {:>7} {:>7} {:>7} {:>7} {:>7}
", "per node", "min", "p10", "p50", "p90", "max"));
    out.push_str(&format!("{:<22} {}
", "pods", quantiles(loads.iter().map(|load| load.pods as f64).collect())));
    out.push_str(&format!("{:<22} {}
", "requested cpu %", quantiles(loads.iter().map(|load| load.cpu).collect())));
    out.push_str(&format!("{:<22} {}
", "requested memory %", quantiles(loads.iter().map(|load| load.memory).collect())));
    let mut zones: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
    for load in &loads {
        let zone = zones.entry(load.zone.as_str()).or_default();
        zone.0 += 1;
        zone.1 += load.pods;
        zone.2 += load.cpu;
    }
    out.push_str(&format!("
{:<12} {:>6} {:>7} {:>15}
", "ZONE", "NODES", "PODS", "MEAN CPU REQ %"));
    for (zone, (nodes, pods, cpu)) in &zones {
        out.push_str(&format!("{zone:<12} {nodes:>6} {pods:>7} {:>15.1}
", cpu / *nodes as f64));
    }
    let mut by_cpu: Vec<&NodeLoad> = loads.iter().collect();
    by_cpu.sort_by(|a, b| a.cpu.total_cmp(&b.cpu).then_with(|| super::natural_order(&a.name, &b.name)));
    let line = |load: &NodeLoad| format!("  {:<16} {:>4} pods  cpu {:>5.1}%  memory {:>5.1}%
", load.name, load.pods, load.cpu, load.memory);
    out.push_str("
least loaded (requested cpu):
");
    by_cpu.iter().take(3).for_each(|load| out.push_str(&line(load)));
    out.push_str("most loaded:
");
    by_cpu.iter().rev().take(3).for_each(|load| out.push_str(&line(load)));
    out
}

#[derive(Args)]
pub struct SimulateArgs {
    /// The scenario (see sim/scenarios/); by default sim/scenarios/small.yaml, built into the binary.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Host configuration; the built-in default uses the policies in plugins/out.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Give up waiting after this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// List every node's pods, however many nodes (by default clusters of more than 20 nodes get a summary).
    #[arg(long)]
    full: bool,
    /// Autoscalers to create (YAML, one or more documents); the configuration needs an autoscaler section.
    #[arg(long)]
    autoscalers: Option<PathBuf>,
    /// How long to follow the Autoscalers (default: the scenario's longest load curve, plus 30 s).
    #[arg(long, value_parser = humantime::parse_duration)]
    autoscale_for: Option<Duration>,
    /// Try a policy component without writing a configuration (repeatable): it joins the configuration where its
    /// kinds fit (filter and score in every profile, evict as a rescheduler strategy, scale in the autoscaler's
    /// list) and is used instead of any policy of the same name.
    #[arg(long = "policy", value_name = "FILE.wasm[.zst]")]
    policies: Vec<PathBuf>,
}

impl SimulateArgs {
    /// `wasp policy test`: one component tried on `scenario`, everything else as `wasp simulate` defaults it.
    pub fn trying(policy: PathBuf, scenario: PathBuf, config: Option<PathBuf>) -> SimulateArgs {
        SimulateArgs { scenario: Some(scenario), config, timeout: Duration::from_secs(60), full: false, autoscalers: None, autoscale_for: None, policies: vec![policy] }
    }
}

/// The cluster `wasp simulate` runs when given no scenario, wherever it is run from.
const DEFAULT_SCENARIO: &str = include_str!("../../../sim/scenarios/small.yaml");

/// Unschedulable pods whose decision record the report shows.
const EXPLAINED_FAILURES: usize = 3;

/// Above this many nodes, the report summarizes instead of listing every node.
const LISTED_NODES: usize = 20;

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let scenario = match &args.scenario {
        Some(path) => Scenario::load(path)?,
        None => Scenario::parse(DEFAULT_SCENARIO).expect("the built-in scenario is valid (tested)"),
    };
    let mut config = super::config_or_built_in(args.config.as_deref())?;
    // Kept until the simulation ends: the policy directory with the tried components.
    let _staged = match args.policies.is_empty() {
        true => None,
        false => Some(try_policies(&mut config, &args.policies)?),
    };
    let autoscalers: Vec<Autoscaler> = match &args.autoscalers {
        Some(path) if config.autoscaler.is_none() => anyhow::bail!("{}: the configuration has no autoscaler section to run them", path.display()),
        Some(path) => super::manifests::read_objects(path, "Autoscaler")?,
        None => Vec::new(),
    };
    let follow = args.autoscale_for.unwrap_or_else(|| scenario.longest_curve() + Duration::from_secs(30));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(simulate(&scenario, &config, args.timeout, args.full, (&autoscalers, follow)))
}

/// A policy directory with the configuration's policies and the tried ones in their place, and the configuration
/// changed to use them where their kinds fit.
fn try_policies(config: &mut HostConfig, files: &[PathBuf]) -> anyhow::Result<tempfile::TempDir> {
    use crate::contract::types::PolicyKind;
    let staged = tempfile::tempdir()?;
    for entry in std::fs::read_dir(&config.policy_dir).with_context(|| format!("reading {}", config.policy_dir.display()))? {
        let entry = entry?;
        std::os::unix::fs::symlink(std::fs::canonicalize(entry.path())?, staged.path().join(entry.file_name()))?;
    }
    for file in files {
        let policy = super::policy::load(file, String::new())?;
        let name = policy.descriptor.name.clone();
        let target = staged.path().join(format!("{name}.wasm"));
        // The tried file replaces the directory's, compressed or not.
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_file(staged.path().join(format!("{name}.wasm.zst")));
        std::fs::write(&target, crate::registry::bundle::read_component(file)?).with_context(|| format!("writing {}", target.display()))?;
        let mut uses = Vec::new();
        for kind in &policy.descriptor.kinds {
            match kind {
                PolicyKind::Filter => config.scheduler.profiles.iter_mut().for_each(|profile| {
                    if !profile.filters.contains(&name) {
                        profile.filters.push(name.clone());
                    }
                }),
                PolicyKind::Score => config.scheduler.profiles.iter_mut().for_each(|profile| {
                    if !profile.scores.iter().any(|score| score.policy == name) {
                        profile.scores.push(crate::config::WeightedPolicy { policy: name.clone(), weight: 1 });
                    }
                }),
                PolicyKind::Evict => {
                    let section = config.rescheduler.get_or_insert_with(|| serde_yaml::from_str("strategies: []").expect("a valid section"));
                    if !section.strategies.iter().any(|strategy| strategy.policy == name) {
                        section.strategies.push(crate::config::Strategy { policy: name.clone() });
                    }
                }
                PolicyKind::Scale => {
                    let section = config.autoscaler.get_or_insert_with(|| serde_yaml::from_str("policies: []").expect("a valid section"));
                    if !section.policies.contains(&name) {
                        section.policies.push(name.clone());
                    }
                }
            }
            uses.push(match kind {
                PolicyKind::Filter => "a filter in every profile",
                PolicyKind::Score => "a score (weight 1) in every profile",
                PolicyKind::Evict => "a rescheduler strategy",
                PolicyKind::Scale => "an autoscaler policy",
            });
        }
        println!("trying {name} {} from {}: {}", policy.descriptor.version, file.display(), uses.join(", "));
    }
    config.policy_dir = staged.path().to_path_buf();
    config.validate()?;
    Ok(staged)
}

/// An API client for a simulator. kube's own retries are off: the loops back off by themselves.
pub fn sim_client(simulator: &Simulator) -> anyhow::Result<ApiClient> {
    ApiClient::from_config(kube::Config::new(simulator.url().parse()?))
}

async fn simulate(scenario: &Scenario, config: &HostConfig, timeout: Duration, full: bool, (autoscalers, follow): (&[Autoscaler], Duration)) -> anyhow::Result<()> {
    // Policies load (and compile) before the simulated cluster starts, so the scenario's timed events happen
    // at their time relative to the scheduler's first decisions.
    let policies = Arc::new(PolicyRegistry::new(&Runtime::new(None)?, config.clone(), None)?);
    let simulator = Simulator::start(scenario, "127.0.0.1:0".parse()?).await?;
    let api = sim_client(&simulator)?;
    let client = api.client.clone();
    let host = Host::new(api, policies, HostIdentity::named("wasp-simulate", None));
    let scheduler = host.scheduler.clone();
    scheduler.keep_report();
    let profiles = scheduler.profile_names();
    println!("scenario {:?}: {} nodes; profiles {}; API server {}", scenario.name, scenario.node_names().len(), profiles.join(", "), simulator.url());
    let started = Instant::now();
    // The scheduler runs throughout; the rescheduler, if configured, runs after the first placement settles, so
    // the report can show the cluster before and after it.
    host.start_informers();
    let worker = tokio::spawn(scheduler.clone().run(tokio_util::sync::CancellationToken::new()));
    settle(&client, &host, &profiles, started, timeout, false).await?;
    let elapsed = started.elapsed();
    report(&client, &host, &profiles, elapsed, full).await?;
    if config.rescheduler.is_some() {
        // The scenario's timed events (a node pool opening, a node tainted) happen first.
        let last_event = scenario.events.iter().map(|event| event.at).max().unwrap_or_default();
        tokio::time::sleep_until((started + last_event + Duration::from_secs(1)).into()).await;
        reschedule(&client, &host, &profiles, started, timeout, full).await?;
    }
    if !autoscalers.is_empty() {
        autoscale(&client, &host, autoscalers, started, follow).await?;
    }
    worker.abort();
    Ok(())
}

/// Creates the Autoscalers (and their CRD), runs the autoscaler for `follow` after the simulation started,
/// and prints, every few seconds, each target's replicas against its metrics.
async fn autoscale(client: &Client, host: &Host, autoscalers: &[Autoscaler], started: Instant, follow: Duration) -> anyhow::Result<()> {
    let crd = <Autoscaler as kube::CustomResourceExt>::crd();
    Api::all(client.clone()).create(&PostParams::default(), &crd).await?;
    let mut names = Vec::new();
    for autoscaler in autoscalers {
        let namespace = autoscaler.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let mut autoscaler = autoscaler.clone();
        autoscaler.metadata.namespace = Some(namespace.clone());
        Api::<Autoscaler>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &autoscaler).await?;
        names.push((namespace, autoscaler.metadata.name.clone().unwrap_or_default()));
    }
    let worker = tokio::spawn(host.autoscaler.clone().run(tokio_util::sync::CancellationToken::new()));
    println!();
    println!("autoscaler ({} Autoscalers, until {}s):", names.len(), follow.as_secs());
    println!("{:>7}  {:<28} {:>8} {:>8}  METRICS", "TIME", "AUTOSCALER", "REPLICAS", "DESIRED");
    let mut next_row = Instant::now();
    while started.elapsed() < follow {
        if Instant::now() >= next_row {
            for (namespace, name) in &names {
                let status = Api::<Autoscaler>::namespaced(client.clone(), namespace).get(name).await?.status.unwrap_or_default();
                println!(
                    "{:>6.0}s  {:<28} {:>8} {:>8}  {}",
                    started.elapsed().as_secs_f64(),
                    format!("{namespace}/{name}"),
                    status.current_replicas,
                    status.desired_replicas,
                    status.targets.unwrap_or_default()
                );
            }
            next_row += Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    worker.abort();
    let scaled = host.autoscaler.stats.scale_requests.load(Ordering::Relaxed);
    let mut events = Api::<k8s_openapi::api::core::v1::Event>::all(client.clone()).list(&ListParams::default()).await?.items;
    events.retain(|event| event.reason.as_deref() == Some("SuccessfulRescale") && event.involved_object.kind.as_deref() == Some("Autoscaler"));
    events.sort_by_key(|event| event.first_timestamp.clone().map(|time| time.0));
    println!();
    println!("{scaled} replica changes:");
    for event in &events {
        let object = &event.involved_object;
        println!("  {}/{}: {}", object.namespace.as_deref().unwrap_or(""), object.name.as_deref().unwrap_or(""), event.message.as_deref().unwrap_or(""));
    }
    Ok(())
}

/// Waits until every pod of our profiles is bound (and, with `ready`, Ready) or waits as unschedulable, and that
/// holds for a moment; reports progress every 2 s; gives up at `timeout` after `started`.
async fn settle(client: &Client, host: &Host, profiles: &[String], started: Instant, timeout: Duration, ready: bool) -> anyhow::Result<()> {
    let scheduler = &host.scheduler;
    let pods: Api<Pod> = Api::all(client.clone());
    let mut settled_since: Option<Instant> = None;
    let mut last_report = Instant::now();
    let ours = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.scheduler_name.as_deref()).is_some_and(|name| profiles.iter().any(|profile| profile == name));
    let bound = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).is_some();
    let is_ready = |pod: &Pod| {
        let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
        conditions.into_iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True")
    };
    loop {
        let list = pods.list(&ListParams::default()).await?.items;
        let mine: Vec<&Pod> = list.iter().filter(|pod| ours(pod) && pod.metadata.deletion_timestamp.is_none()).collect();
        let bound_count = mine.iter().filter(|pod| bound(pod) && (!ready || is_ready(pod))).count();
        let sizes = scheduler.queue().sizes();
        let settled = !mine.is_empty() && sizes.active == 0 && sizes.backoff == 0 && bound_count + sizes.unschedulable >= mine.len();
        if last_report.elapsed() > Duration::from_secs(2) {
            println!("  {:>5.1}s  {bound_count}/{} bound, {} unschedulable", started.elapsed().as_secs_f64(), mine.len(), sizes.unschedulable);
            last_report = Instant::now();
        }
        settled_since = if settled { settled_since.or(Some(Instant::now())) } else { None };
        if settled_since.is_some_and(|since| since.elapsed() > Duration::from_millis(500)) || started.elapsed() > timeout {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Most rescheduling runs `wasp simulate` makes before it reports.
const RESCHEDULING_RUNS: usize = 20;

/// Rescheduling runs until one evicts nothing, each followed by the replacements' placement; then the cluster
/// after, and how its spread of requested CPU changed.
async fn reschedule(client: &Client, host: &Host, profiles: &[String], started: Instant, timeout: Duration, full: bool) -> anyhow::Result<()> {
    let before = utilization_spread(&host.cluster.read());
    println!();
    println!("rescheduler:");
    let mut evicted_total = 0;
    for run in 1..=RESCHEDULING_RUNS {
        let Some(plan) = host.rescheduler.run_once(false).await else { break };
        let evicted: Vec<&crate::rescheduler::plan::PlanEntry> =
            plan.entries.iter().filter(|entry| entry.outcome == Some(crate::rescheduler::plan::Outcome::Evicted)).collect();
        let mut by_policy: BTreeMap<&str, usize> = BTreeMap::new();
        for entry in &evicted {
            *by_policy.entry(entry.policy.as_str()).or_default() += 1;
        }
        let mut skipped: BTreeMap<&str, usize> = BTreeMap::new();
        for entry in &plan.entries {
            if let crate::rescheduler::plan::Decision::Skip(skip) = &entry.decision {
                *skipped.entry(skip.kind()).or_default() += 1;
            }
        }
        println!("  run {run}: {} candidates, {} evicted {by_policy:?}, skipped {skipped:?}", plan.entries.len(), evicted.len());
        for failure in &plan.failures {
            println!("    policy {} failed: {}", failure.policy, failure.error);
        }
        if evicted.is_empty() {
            break;
        }
        evicted_total += evicted.len();
        settle(client, host, profiles, started, timeout, true).await?;
    }
    println!();
    println!("after rescheduling ({evicted_total} pods moved):");
    report(client, host, profiles, started.elapsed(), full).await?;
    let after = utilization_spread(&host.cluster.read());
    println!("spread of requested cpu across nodes (standard deviation of %): {before:.1} before, {after:.1} after rescheduling");
    Ok(())
}

/// Standard deviation of the nodes' requested CPU in percent of allocatable: lower is more even.
fn utilization_spread(cluster: &ClusterState) -> f64 {
    let shares: Vec<f64> = cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| cluster.node(id))
        .filter(|(node, _)| node.allocatable.cpu_millis > 0)
        .map(|(node, usage)| usage.requested.cpu_millis as f64 * 100.0 / node.allocatable.cpu_millis as f64)
        .collect();
    if shares.is_empty() {
        return 0.0;
    }
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    (shares.iter().map(|share| (share - mean).powi(2)).sum::<f64>() / shares.len() as f64).sqrt()
}

/// Each claim a pod uses, with its volume's zone and the zone of the pod's node: where volume topology shows.
/// Empty when no pod has claims.
async fn claims_report(client: &Client, pods: &[Pod], nodes: &[Node]) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    const ZONE: &str = "topology.kubernetes.io/zone";
    let uses: Vec<(&Pod, &str)> = pods
        .iter()
        .flat_map(|pod| pod.spec.iter().flat_map(|spec| spec.volumes.iter().flatten()).filter_map(move |volume| Some((pod, volume.persistent_volume_claim.as_ref()?.claim_name.as_str()))))
        .collect();
    if uses.is_empty() {
        return Ok(String::new());
    }
    let claims = Api::<PersistentVolumeClaim>::all(client.clone()).list(&ListParams::default()).await?.items;
    let volumes = Api::<PersistentVolume>::all(client.clone()).list(&ListParams::default()).await?.items;
    let node_zone = |name: &str| nodes.iter().find(|node| node.metadata.name.as_deref() == Some(name)).and_then(|node| node.metadata.labels.as_ref()?.get(ZONE).cloned());
    let volume_zone = |name: &str| {
        let volume = volumes.iter().find(|volume| volume.metadata.name.as_deref() == Some(name))?;
        let terms = &volume.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
        let expression = terms.iter().flat_map(|term| term.match_expressions.iter().flatten()).find(|expression| expression.key == ZONE)?;
        Some(expression.values.as_ref()?.join(","))
    };
    let mut out = format!("\n{:<24} {:<8} {:<12} {:<24} {:<12} {}\n", "CLAIM", "STATUS", "VOLUME ZONE", "POD", "NODE", "NODE ZONE");
    for (pod, name) in uses {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let claim = claims.iter().find(|claim| claim.metadata.name.as_deref() == Some(name) && claim.metadata.namespace.as_deref() == Some(namespace));
        let status = claim.and_then(|claim| claim.status.as_ref()?.phase.clone()).unwrap_or_else(|| "Missing".into());
        let zone = claim.and_then(|claim| claim.spec.as_ref()?.volume_name.as_deref()).and_then(volume_zone).unwrap_or_else(|| "-".into());
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        let node_zone = node.as_deref().and_then(node_zone).unwrap_or_else(|| "-".into());
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        out += &format!("{name:<24} {status:<8} {zone:<12} {pod_name:<24} {:<12} {node_zone}\n", node.as_deref().unwrap_or("-"));
    }
    Ok(out)
}

async fn report(client: &Client, host: &Host, profiles: &[String], elapsed: Duration, full: bool) -> anyhow::Result<()> {
    let scheduler: &Scheduler = &host.scheduler;
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?.items;
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let mut per_node: BTreeMap<String, Vec<String>> = nodes.iter().map(|node| (node.metadata.name.clone().unwrap_or_default(), Vec::new())).collect();
    for pod in &pods {
        if let Some(node) = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()) {
            per_node.entry(node).or_default().push(pod.metadata.name.clone().unwrap_or_default());
        }
    }
    println!();
    if full || per_node.len() <= LISTED_NODES {
        println!("{:<12} {:>4}  PODS", "NODE", "N");
        let mut rows: Vec<(&String, &Vec<String>)> = per_node.iter().collect();
        rows.sort_by(|(a, _), (b, _)| super::natural_order(a, b));
        for (node, names) in rows {
            let mut names = names.clone();
            names.sort_by(|a, b| super::natural_order(a, b));
            println!("{node:<12} {:>4}  {}", names.len(), names.join(" "));
        }
    } else {
        print!("{}", summary(&host.cluster.read(), &per_node));
    }
    print!("{}", claims_report(client, &pods, &nodes).await?);
    // Per profile, how many nodes its pods occupy: where spreading and bin-packing profiles differ.
    println!();
    for profile in profiles {
        let placed: Vec<&str> = pods
            .iter()
            .filter_map(|pod| pod.spec.as_ref())
            .filter(|spec| spec.scheduler_name.as_deref() == Some(profile.as_str()))
            .filter_map(|spec| spec.node_name.as_deref())
            .collect();
        let occupied: std::collections::BTreeSet<&str> = placed.iter().copied().collect();
        println!("profile {profile}: {} pods on {} of {} nodes", placed.len(), occupied.len(), per_node.len());
    }
    let details = scheduler.stats.report().unwrap_or_default();
    let failures = details.last_failure;
    if !failures.is_empty() {
        println!();
        println!("unschedulable:");
        for (pod, message) in &failures {
            println!("  {pod}: {message}");
        }
        // What `wasp explain pod` would show in a cluster, for the first few.
        for key in failures.keys().take(EXPLAINED_FAILURES) {
            if let Some(record) = host.records.placements.get(key) {
                println!();
                print!("{}", crate::explain::render::placement(&record));
            }
        }
        if failures.len() > EXPLAINED_FAILURES {
            println!("({} more unschedulable pods; their records read the same)", failures.len() - EXPLAINED_FAILURES);
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
