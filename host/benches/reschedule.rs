//! One rescheduling run (every shipped strategy proposing, then the envelope, budgets and the fit check with the
//! default scheduler profile) on 5000 nodes and 50k pods, in the sandbox; the time of each strategy, of the
//! checks, and the process's memory. Side by side: the same run with the fit check's profile reduced to one
//! filter, to show what the scheduler's own policies cost the plan; strategies cold (the default) and warm; and
//! the strategies the manifests ship, cold.
//!
//! `cargo bench -p wasp --bench reschedule` (after scripts/build-policies.sh).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};
use wasp::cluster::{convert, ClusterState};
use wasp::config::{HostConfig, ReschedulerSection};
use wasp::contract::EvictContext;
use wasp::registry::PolicyRegistry;
use wasp::rescheduler::budgets::Budgets;
use wasp::rescheduler::memory::Memory;
use wasp::rescheduler::plan::{self, Plan};
use wasp::runtime::Runtime;

const NODES: usize = 5000;
const PODS: usize = 50_000;
/// Nodes tainted for maintenance: their pods are the taint strategy's candidates.
const TAINTED: usize = 20;

const STRATEGIES: [&str; 13] = [
    "remove-pods-violating-node-taints",
    "remove-pods-violating-inter-pod-anti-affinity",
    "remove-failed-pods",
    "remove-pods-violating-node-affinity",
    "remove-pods-violating-topology-spread-constraint",
    "remove-duplicates",
    "low-node-utilization",
    "high-node-utilization",
    "pod-lifetime",
    "remove-pods-having-too-many-restarts",
    "unhealthy-node",
    "drain-for-maintenance",
    "make-room-for-pending",
];

/// The strategies of the configuration the manifests ship (`manifests/20-config.yaml`).
fn shipped_strategies() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/20-config.yaml");
    let manifest: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let config: serde_yaml::Value = serde_yaml::from_str(manifest["data"]["config.yaml"].as_str().unwrap()).unwrap();
    let strategies = config["rescheduler"]["strategies"].as_sequence().unwrap();
    strategies.iter().map(|strategy| strategy["policy"].as_str().unwrap().to_string()).collect()
}

/// The built-in configuration with these strategies; `filters`, when given, replaces the profile's filters;
/// `warm` keeps the strategies' instances between runs (`keepStrategiesWarm`).
fn config(filters: Option<&[&str]>, warm: bool, strategies: &[String]) -> HostConfig {
    let mut config = HostConfig::built_in();
    config.policy_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/out");
    if let Some(filters) = filters {
        config.scheduler.profiles[0].filters = filters.iter().map(ToString::to_string).collect();
    }
    let strategies: Vec<String> = strategies.iter().map(|name| format!("{{policy: {name}}}")).collect();
    let section = format!("strategies: [{}]\nlimits: {{maxPerRun: 10, maxPerWorkload: 1}}\nkeepStrategiesWarm: {warm}", strategies.join(", "));
    config.rescheduler = Some(serde_yaml::from_str::<ReschedulerSection>(&section).unwrap());
    config.validate().unwrap();
    config
}

/// 5000 nodes over three zones, 50k pods of 100 ReplicaSets, unevenly spread (the first tenth of the nodes twice as
/// full), some nodes tainted for maintenance.
fn cluster() -> ClusterState {
    let mut cluster = ClusterState::new();
    for index in 0..NODES {
        let taints = if index < TAINTED { "taints: [{key: maintenance, value: 'true', effect: NoSchedule}]" } else { "" };
        let yaml = format!(
            "metadata: {{name: node-{index}, labels: {{topology.kubernetes.io/zone: zone-{}, kubernetes.io/hostname: node-{index}}}}}\nspec: {{{taints}}}\nstatus: {{allocatable: {{cpu: '32', memory: 128Gi, pods: '110'}}, conditions: [{{type: Ready, status: 'True'}}]}}",
            index % 3
        );
        cluster.upsert_node(convert::node(&serde_yaml::from_str(&yaml).unwrap()).unwrap());
    }
    for index in 0..PODS {
        let workload = index % 100;
        let node = if index % 5 == 0 { index % (NODES / 10) } else { index % NODES };
        let yaml = format!(
            "metadata: {{name: w{workload}-{index}, namespace: team-{}, uid: uid-{index}, labels: {{app: w{workload}}}, creationTimestamp: '2026-01-01T00:00:00Z', ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: w{workload}, uid: rs-{workload}, controller: true}}]}}\nspec: {{schedulerName: wasp, containers: [{{name: app, resources: {{requests: {{cpu: 900m, memory: 1Gi}}}}}}]}}\nstatus: {{phase: Running, conditions: [{{type: Ready, status: 'True'}}]}}",
            workload % 10
        );
        cluster.upsert_pod(convert::pod(&serde_yaml::from_str(&yaml).unwrap()).unwrap(), &format!("node-{}", node));
    }
    cluster
}

fn run(registry: &PolicyRegistry, live: &ClusterState) -> (Plan, Duration) {
    let generation = registry.current();
    let section = generation.config.rescheduler.as_ref().unwrap();
    let memory = Memory::default();
    let started = Instant::now();
    let wall = jiff::Timestamp::now().as_second();
    let volumes = wasp::cluster::volumes::VolumeObjects::default();
    let inputs = plan::Inputs {
        section,
        plans: &generation.plans,
        memory: &memory,
        budgets: Budgets::default(),
        now: tokio::time::Instant::now(),
        wall,
        volumes: &volumes,
        host_namespaces: &[],
        gangs: &[],
    };
    let proposals =
        plan::propose(&generation.plans.eviction, &generation.plans, live, EvictContext { now: wall, ..EvictContext::default() }, section.keep_strategies_warm);
    let plan = plan::plan(inputs, proposals);
    (plan, started.elapsed())
}

fn main() {
    let runtime = Runtime::new(None).unwrap();
    let started = Instant::now();
    let live = cluster();
    println!("{NODES} nodes, {PODS} pods built in {:.1} s; resident {:.0} MiB", started.elapsed().as_secs_f64(), support::resident_mib());
    let every: Vec<String> = STRATEGIES.iter().map(ToString::to_string).collect();
    let full = PolicyRegistry::new(&runtime, config(None, true, &every), None).unwrap();
    let lean = PolicyRegistry::new(&runtime, config(Some(&["resources-fit"]), true, &every), None).unwrap();
    let cold = PolicyRegistry::new(&runtime, config(None, false, &every), None).unwrap();
    let shipped = PolicyRegistry::new(&runtime, config(None, false, &shipped_strategies()), None).unwrap();
    let filters = full.current().config.scheduler.profiles[0].filters.len();
    // The first run of each sends every strategy its snapshot of the cluster; later runs send deltas to warm
    // strategies and a snapshot again to cold ones (the default).
    for (label, registry) in [
        (format!("the default profile ({filters} filters), strategies kept warm"), &full),
        ("resources-fit only, strategies kept warm".to_string(), &lean),
        (format!("the default profile ({filters} filters), strategies cold (the default)"), &cold),
        ("the shipped configuration's strategies (manifests/20-config.yaml), cold".to_string(), &shipped),
    ] {
        let mut totals = Vec::new();
        let mut last = None;
        for round in 0..3 {
            let (plan, took) = run(registry, &live);
            if round > 0 {
                totals.push(took);
            }
            last = Some((plan, took));
        }
        let (plan, first) = last.unwrap();
        let mean = totals.iter().sum::<Duration>() / totals.len() as u32;
        println!();
        println!(
            "fit check with {label}: a run takes {:.0} ms (mean of {} runs after the first; last {:.0} ms)",
            mean.as_secs_f64() * 1e3,
            totals.len(),
            first.as_secs_f64() * 1e3
        );
        for (policy, took, proposed) in &plan.proposals {
            println!("  {policy:<40} {:>7.1} ms  {proposed:>6} proposed", took.as_secs_f64() * 1e3);
        }
        println!(
            "  {:<40} {:>7.1} ms  {:>6} candidates, {} to evict",
            "envelope, budgets and fit check",
            plan.checks.as_secs_f64() * 1e3,
            plan.entries.len(),
            plan.evictions().count()
        );
        if !plan.failures.is_empty() {
            println!("  failures: {:?}", plan.failures);
        }
    }
    println!();
    println!("resident {:.0} MiB with the three registries' instances", support::resident_mib());
}
