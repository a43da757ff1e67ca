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

fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|line| line.strip_prefix("VmRSS:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
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
    println!("bindings over HTTP (kube-rs, {IN_FLIGHT} in flight, 5000 nodes)  {rate:>9.0}/s   target 5000/s   {:.2}x", rate / 5000.0);
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
    println!(
        "watch fan-out: {EVENTS} pod events to 3 watchers         {rate:>9.0}/s per watcher; all delivered: {} (writes took {:.2}s, delivery {:.2}s)",
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

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        memory_at_scale().await;
        bindings_per_second().await;
        watch_fan_out().await;
    });
}
