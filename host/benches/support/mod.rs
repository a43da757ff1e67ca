//! Shared by the benchmarks: a simulated cluster with pods waiting for the `wasp` scheduler, and memory readings.

use kube::Client;
use wasp_sim::{Scenario, Simulator};

/// `nodes` nodes over three zones and `pods` pending pods for the `wasp` profile, served over HTTP in process.
pub async fn pending_pods_cluster(nodes: u32, pods: u32) -> (Simulator, Client) {
    let scenario = Scenario::parse(&format!(
        "kubelet: {{readyDelay: 1h}}\nnodeGroups: [{{name: n, count: {nodes}, cpu: '32', memory: 128Gi, pods: 110, zones: [a, b, c]}}]\nworkloads: [{{name: p, kind: Pods, replicas: {pods}, schedulerName: wasp, cpu: 100m, memory: 128Mi}}]\n"
    ))
    .unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut kube_config = kube::Config::new(simulator.url().parse().unwrap());
    kube_config.default_retry = false;
    let client = Client::try_from(kube_config).unwrap();
    (simulator, client)
}

/// The process's resident memory.
#[allow(dead_code)] // not every benchmark reports memory
pub fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|line| line.strip_prefix("VmRSS:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}
