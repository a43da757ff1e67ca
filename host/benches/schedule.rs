//! Scheduling throughput through a simulated API server over HTTP, the default policy set in wasm and the same
//! policy crates compiled natively, side by side; and the host's memory at 5000 nodes and 50k pods.
//!
//! `cargo bench -p wasp --bench schedule` (after scripts/build-policies.sh). The simulator runs as its own
//! process (`wasp sim serve`) on the same two cores, so the resident memory printed is the scheduler's alone.
//! Each run creates the pods pending and times from the scheduler's start (informer sync included) to the last
//! binding.
//!
//! `-- once wasm|native NODES PODS` makes one run of plain pods, for a profiler: under valgrind's callgrind, two
//! pod counts' difference is the cost of a pod, start-up and informer sync subtracted (compiled policies are
//! kept under `target/schedule-artifacts`, so only the first run compiles).

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::{ApiClient, HostIdentity};
use wasp::registry::PolicyRegistry;
use wasp::runtime::Runtime;

/// `wasp sim serve` in its own process, stopped on drop.
struct SimulatorProcess {
    child: Child,
    url: String,
    /// Kept open: the simulator dies of a broken pipe if it prints after its reader is gone.
    _stdout: std::io::Lines<BufReader<std::process::ChildStdout>>,
    _files: tempfile::TempDir,
}

impl SimulatorProcess {
    fn start(scenario_text: &str) -> SimulatorProcess {
        let files = tempfile::tempdir().unwrap();
        let scenario = files.path().join("scenario.yaml");
        std::fs::write(&scenario, scenario_text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["sim", "serve", "--address", "127.0.0.1:0", "--scenario"])
            .arg(&scenario)
            .arg("--kubeconfig")
            .arg(files.path().join("kubeconfig"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url =
            lines.find_map(|line| line.ok()?.split_once(" serving on ").map(|(_, url)| url.trim().to_string())).expect("the simulator prints its address");
        SimulatorProcess { child, url, _stdout: lines, _files: files }
    }
}

impl Drop for SimulatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Build {
    Wasm,
    Native,
}

fn config() -> HostConfig {
    let mut config = HostConfig::built_in();
    config.policy_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/out");
    config
}

/// The pods a run schedules.
#[derive(Clone, Copy)]
enum Workload {
    /// Plain pods: 100m CPU, 128Mi.
    Plain,
    /// The same, each with required anti-affinity to its app's replicas and preferred affinity to another app.
    AntiAffinity,
}

/// Pods per second, and the process's resident memory at the end.
async fn run(nodes: u32, pods: u32, workload: Workload, build: Build) -> (f64, f64) {
    let scenario = match workload {
        Workload::Plain => support::pending_pods_scenario(nodes, pods),
        Workload::AntiAffinity => support::anti_affinity_scenario(nodes, pods),
    };
    let simulator = SimulatorProcess::start(&scenario);
    let api = ApiClient::from_config(kube::Config::new(simulator.url.parse().unwrap())).unwrap();
    let runtime = Runtime::new(Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/schedule-artifacts"))).unwrap();
    let registry = match build {
        Build::Wasm => PolicyRegistry::new(&runtime, config(), None).unwrap(),
        Build::Native => PolicyRegistry::with_plans(&runtime, config(), support::native::native_plans(&config())),
    };
    let host = Host::new(api, Arc::new(registry), HostIdentity::named("bench", None));
    let scheduler = host.scheduler.clone();
    let started = Instant::now();
    let worker = tokio::spawn(host.run_loops());
    while scheduler.stats.scheduled.load(Ordering::Relaxed) < pods as u64 && started.elapsed() < Duration::from_secs(900) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let scheduled = scheduler.stats.scheduled.load(Ordering::Relaxed);
    assert_eq!(scheduled, pods as u64, "not every pod was bound");
    let rate = scheduled as f64 / started.elapsed().as_secs_f64();
    let resident = support::resident_mib();
    worker.abort();
    (rate, resident)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "once") {
        let usage = "once wasm|native NODES PODS [anti-affinity]";
        let build = match args.get(at + 1).map(String::as_str) {
            Some("wasm") => Build::Wasm,
            Some("native") => Build::Native,
            _ => panic!("{usage}"),
        };
        let count = |index: usize| args.get(at + index).and_then(|value| value.parse().ok()).unwrap_or_else(|| panic!("{usage}"));
        let (nodes, pods) = (count(2), count(3));
        let workload = if args.get(at + 4).is_some_and(|arg| arg == "anti-affinity") { Workload::AntiAffinity } else { Workload::Plain };
        let (rate, resident) = runtime.block_on(run(nodes, pods, workload, build));
        println!("{nodes} nodes, {pods} pods: {rate:.0} pods/s, {resident:.0} MiB");
        return;
    }
    // The 50k-pod case runs in a process of its own (this benchmark with `memory`), so that its resident
    // memory is not inflated by the earlier runs' freed but retained heap.
    if std::env::args().any(|arg| arg == "memory") {
        let (nodes, pods) = (5000, 50_000);
        let (wasm, resident) = runtime.block_on(run(nodes, pods, Workload::Plain, Build::Wasm));
        println!("{nodes:>6} {pods:>7}  {wasm:>12.0}  {:>12}  {:>11}  {resident:>11.0} MiB", "-", "-");
        return;
    }
    println!("default policy set, simulator in its own process over HTTP, 2 cores shared");
    println!("{:>6} {:>7}  {:>12}  {:>12}  {:>11}  {:>15}", "nodes", "pods", "wasm pods/s", "native pods/s", "wasm/native", "wasm resident");
    runtime.block_on(async {
        // `-- anti-affinity` runs only that row.
        let only_anti_affinity = std::env::args().any(|arg| arg == "anti-affinity");
        let rows = [(500, 10_000, Workload::Plain), (5000, 10_000, Workload::Plain), (5000, 10_000, Workload::AntiAffinity)];
        for (nodes, pods, workload) in rows.into_iter().filter(|row| !only_anti_affinity || matches!(row.2, Workload::AntiAffinity)) {
            let (wasm, resident) = run(nodes, pods, workload, Build::Wasm).await;
            let (native, _) = run(nodes, pods, workload, Build::Native).await;
            let name = match workload {
                Workload::Plain => "",
                Workload::AntiAffinity => "  anti-affinity to own replicas, affinity to another app",
            };
            println!("{nodes:>6} {pods:>7}  {wasm:>12.0}  {native:>12.0}  {:>10.2}x  {resident:>11.0} MiB{name}", wasm / native);
        }
    });
    if std::env::args().any(|arg| arg == "anti-affinity") {
        return;
    }
    let status = Command::new(std::env::current_exe().unwrap()).arg("memory").status().unwrap();
    assert!(status.success(), "the 50k-pod run failed");
}
