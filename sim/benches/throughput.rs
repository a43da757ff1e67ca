//! Is the simulator fast enough never to be what limits our scheduler benchmarks?
//!
//! `cargo bench -p wasp-sim --bench throughput`. Prints bindings per second over HTTP through kube-rs, a watch
//! fan-out of 50k pod events to 3 watchers, and the memory of 5000 nodes and 50k pods, each against its target.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp_sim::{resources, Scenario, Simulator, SimulatorOptions};

// The allocator `wasp sim serve` runs with: glibc's costs a fifth more CPU per pod here.
wasp_allocator::binary_allocator!();

fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|line| line.strip_prefix("VmRSS:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok()).unwrap_or(0.0)
        / 1024.0
}

fn client(simulator: &Simulator) -> Client {
    let mut config = kube::Config::new(simulator.url().parse().unwrap());
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

fn scenario(nodes: u32, pods: u32) -> Scenario {
    Scenario::parse(&format!(
        "kubelet: {{readyDelay: 1h}}\nnodeGroups: [{{name: n, count: {nodes}, cpu: '64', memory: 256Gi, pods: 200}}]\nworkloads: [{{name: p, kind: Pods, replicas: {pods}, schedulerName: wasp, cpu: 10m}}]\n"
    ))
    .unwrap()
}

async fn bindings_per_second() {
    const PODS: u32 = 10_000;
    const IN_FLIGHT: usize = 64;
    let simulator = Simulator::start(&scenario(5000, PODS), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&simulator), "default");
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    futures::stream::iter(0..PODS)
        .map(|index| {
            let pods = pods.clone();
            async move {
                let name = format!("p-{index}");
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": format!("n-{}", index % 5000)}});
                pods.create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding).await.unwrap();
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    let rate = PODS as f64 / started.elapsed().as_secs_f64();
    let cpu = (process_cpu_seconds() - cpu_before) * 1e6 / PODS as f64;
    println!(
        "bindings over HTTP (kube-rs, {IN_FLIGHT} in flight, 5000 nodes)  {rate:>9.0}/s   target 5000/s   {:.2}x (process CPU {cpu:.0} us per binding)",
        rate / 5000.0
    );
}

async fn watch_fan_out() {
    const EVENTS: usize = 50_000;
    let simulator = Simulator::start_with(&scenario(10, 0), "127.0.0.1:0".parse().unwrap(), SimulatorOptions::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&simulator), "default");
    let version = simulator.store.revision().to_string();
    let mut watchers = Vec::new();
    for _ in 0..3 {
        let stream = pods.watch(&WatchParams::default().timeout(290), &version).await.unwrap();
        watchers.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut received = 0;
            while received < EVENTS {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Added(_))) => received += 1,
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            received
        }));
    }
    let store = simulator.store.clone();
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    tokio::task::spawn_blocking(move || {
        for index in 0..EVENTS {
            let pod = json!({"metadata": {"name": format!("w-{index}"), "labels": {"app": "fan-out"}}, "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "10m"}}}]}});
            store.create(resources::pods(), Some("default"), pod).unwrap();
        }
    })
    .await
    .unwrap();
    let written = started.elapsed();
    let mut counts = Vec::new();
    for watcher in watchers {
        counts.push(tokio::time::timeout(Duration::from_secs(120), watcher).await.unwrap().unwrap());
    }
    let elapsed = started.elapsed();
    let rate = EVENTS as f64 / elapsed.as_secs_f64();
    let cpu = (process_cpu_seconds() - cpu_before) * 1e6 / EVENTS as f64;
    println!(
        "watch fan-out: {EVENTS} pod events to 3 watchers         {rate:>9.0}/s per watcher; all delivered: {} (writes took {:.2}s, delivery {:.2}s, process CPU {cpu:.0} us per event)",
        counts.iter().all(|count| *count == EVENTS),
        written.as_secs_f64(),
        elapsed.as_secs_f64()
    );
}

async fn memory_at_scale() {
    let before = resident_mib();
    let simulator = Arc::new(Simulator::start(&scenario(5000, 50_000), "127.0.0.1:0".parse().unwrap()).await.unwrap());
    let mib = resident_mib() - before;
    println!(
        "memory: {} nodes + {} pods in the store            {mib:>9.0} MiB  target 1024 MiB   {:.2}x",
        simulator.store.count(resources::nodes()),
        simulator.store.count(resources::pods()),
        mib / 1024.0
    );
}

/// Pods made by Deployments (the ReplicaSet controller creating them, the kubelet-less lifecycle, status
/// updates), bound by a client that watches pending pods and binds each as soon as it sees it.
async fn deployment_bindings(nodes: u32, pods: u32, deployments: u32) {
    const IN_FLIGHT: usize = 64;
    let before = resident_mib();
    let cpu_before = process_cpu_seconds();
    let workloads: String =
        (0..deployments).map(|index| format!("{{name: d{index}, replicas: {}, schedulerName: wasp, cpu: 10m}},", pods / deployments)).collect();
    let scenario = Scenario::parse(&format!(
        "kubelet: {{readyDelay: 100ms}}\nnodeGroups: [{{name: n, count: {nodes}, cpu: '64', memory: 256Gi, pods: 200}}]\nworkloads: [{workloads}]\n"
    ))
    .unwrap();
    let started = Instant::now();
    let history = std::env::var("WASP_SIM_HISTORY").ok().and_then(|text| text.parse().ok()).unwrap_or(SimulatorOptions::default().history);
    let options = SimulatorOptions { history, ..Default::default() };
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let start = started.elapsed().as_secs_f64();
    let pods_api: Api<Pod> = Api::namespaced(client(&simulator), "default");
    let pending = pods_api.watch(&WatchParams::default().fields("spec.nodeName=").timeout(290), "0").await.unwrap();
    let peak = Arc::new(std::sync::Mutex::new(0f64));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                {
                    let now = resident_mib();
                    let mut peak = peak.lock().unwrap();
                    *peak = peak.max(now);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let monitor = std::env::var("WASP_SIM_BENCH_TRACE").is_ok().then(|| {
        let store = simulator.store.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let all = store.all(resources::pods());
                let bound = all.iter().filter(|pod| pod.pointer("/spec/nodeName").is_some()).count();
                let running = all.iter().filter(|pod| pod.pointer("/status/phase").and_then(|phase| phase.as_str()) == Some("Running")).count();
                eprintln!(
                    "{:>5.1}s pods {} bound {bound} running {running} rss {:.0} MiB revision {}",
                    started.elapsed().as_secs_f64(),
                    all.len(),
                    resident_mib(),
                    store.revision()
                );
            }
        })
    });
    let total = pods as usize;
    let bound = pending
        .filter_map(|event| async move {
            match event {
                Ok(WatchEvent::Added(pod)) => pod.metadata.name,
                _ => None,
            }
        })
        .enumerate()
        .map(|(index, name)| {
            let pods_api = pods_api.clone();
            async move {
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": format!("n-{}", index as u32 % nodes)}});
                pods_api.create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding).await.is_ok()
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter(|ok| futures::future::ready(*ok))
        .take(total)
        .count();
    let bound = tokio::time::timeout(Duration::from_secs(600), bound).await.unwrap_or(0);
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    sampler.abort();
    if let Some(monitor) = monitor {
        monitor.abort();
    }
    let peak = *peak.lock().unwrap() - before;
    let rate = bound as f64 / elapsed;
    println!(
        "deployments: {deployments} x {} replicas on {nodes} nodes, bound {bound} in {elapsed:.1}s (the simulator's start {start:.1}s of it)  {rate:>9.0}/s   target 5000/s   {:.2}x (process CPU {cpu:.1}s, peak {peak:.0} MiB, target 500 MiB)",
        pods / deployments,
        rate / 5000.0
    );
}

/// User plus system CPU seconds of this process (simulator and client together).
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |index: usize| fields.get(index).and_then(|field| field.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The 1-minute load average and the CPU count. Rates here are wall-clock rates on a machine that may be shared:
/// one commit measured 23402 bindings/s idle and 3300-14000/s at a load average of 2-5 on 2 cores, so a figure is
/// only comparable with one taken at a similar load (better: the same run, A/B); CPU per operation moves less.
fn load() -> (f64, usize) {
    let average = std::fs::read_to_string("/proc/loadavg").ok().and_then(|text| text.split_whitespace().next()?.parse().ok()).unwrap_or(0.0);
    (average, std::thread::available_parallelism().map_or(1, usize::from))
}

fn main() {
    let (average, cpus) = load();
    println!(
        "load average {average:.2} on {cpus} CPUs{}",
        if average > 0.5 * cpus as f64 { " (busy: rates below are not comparable with an idle run)" } else { "" }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // WASP_SIM_BENCH=deployments[:nodes:pods:deployments] runs only the Deployment case, =bindings only bare pods,
    // =watch only the watch fan-out.
    let only = std::env::var("WASP_SIM_BENCH").unwrap_or_default();
    runtime.block_on(async {
        if let Some(rest) = only.strip_prefix("deployments") {
            let numbers: Vec<u32> = rest.split(':').filter_map(|part| part.parse().ok()).collect();
            let (nodes, pods, deployments) = match numbers[..] {
                [nodes, pods, deployments] => (nodes, pods, deployments),
                _ => (5000, 50_000, 5),
            };
            deployment_bindings(nodes, pods, deployments).await;
            return;
        }
        if only == "bindings" {
            bindings_per_second().await;
            return;
        }
        if only == "watch" {
            watch_fan_out().await;
            return;
        }
        memory_at_scale().await;
        bindings_per_second().await;
        watch_fan_out().await;
        deployment_bindings(5000, 50_000, 5).await;
    });
}
