//! Shared by the benchmarks: a simulated cluster with pods waiting for the `wasp` scheduler, memory readings, and
//! the default policies compiled natively ([`native`]).

#[allow(dead_code)] // only the scheduling benchmark runs native policies
pub mod native;

// The `wasp` binary's allocator and its settings, so that memory figures are the binary's.
wasp_allocator::binary_allocator!();

use wasp::kube::ApiClient;
use wasp_sim::{Scenario, Simulator};

/// `nodes` nodes over three zones and `pods` pending pods for the `wasp` profile.
pub fn pending_pods_scenario(nodes: u32, pods: u32) -> String {
    format!(
        "kubelet: {{readyDelay: 1h}}\nnodeGroups: [{{name: n, count: {nodes}, cpu: '32', memory: 128Gi, pods: 110, zones: [a, b, c]}}]\nworkloads: [{{name: p, kind: Pods, replicas: {pods}, schedulerName: wasp, cpu: 100m, memory: 128Mi}}]\n"
    )
}

/// Issue "Scheduler parity"'s workload: apps of 100 replicas, each pod with required anti-affinity to its own
/// replicas (one per node) and preferred affinity to the next app's zone; every pod pending.
#[allow(dead_code)] // only the scheduling benchmark runs it
pub fn anti_affinity_scenario(nodes: u32, pods: u32) -> String {
    let apps = pods.div_ceil(100);
    let workloads: Vec<String> = (0..apps)
        .map(|app| {
            let next = (app + 1) % apps;
            format!(
                "- {{name: app-{app}, kind: Pods, replicas: 100, schedulerName: wasp, cpu: 100m, memory: 128Mi, podSpec: {{affinity: {{\
                 podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{labelSelector: {{matchLabels: {{app: app-{app}}}}}, topologyKey: kubernetes.io/hostname}}]}}, \
                 podAffinity: {{preferredDuringSchedulingIgnoredDuringExecution: [{{weight: 50, podAffinityTerm: {{labelSelector: {{matchLabels: {{app: app-{next}}}}}, topologyKey: topology.kubernetes.io/zone}}}}]}}}}}}}}"
            )
        })
        .collect();
    format!(
        "kubelet: {{readyDelay: 1h}}\nnodeGroups: [{{name: n, count: {nodes}, cpu: '32', memory: 128Gi, pods: 110, zones: [a, b, c]}}]\nworkloads:\n{}\n",
        workloads.join("\n")
    )
}

/// [`pending_pods_scenario`] served over HTTP in this process.
#[allow(dead_code)] // not every benchmark runs the simulator in process
pub async fn pending_pods_cluster(nodes: u32, pods: u32) -> (Simulator, ApiClient) {
    let scenario = Scenario::parse(&pending_pods_scenario(nodes, pods)).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    (simulator, api)
}

/// The process's resident memory.
#[allow(dead_code)] // not every benchmark reports memory
pub fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|line| line.strip_prefix("VmRSS:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok()).unwrap_or(0.0)
        / 1024.0
}
