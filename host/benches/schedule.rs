//! Scheduling throughput through the simulated API server over HTTP, with the default policy set in wasm.
//!
//! `cargo bench -p wasp --bench schedule` (after scripts/build-policies.sh). For 500 and 5000 nodes, 10k pods
//! are created pending and scheduled; prints pods per second (creation to last binding) and the process's
//! resident memory. The simulator runs in the same process and shares the two cores.

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::Api;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wasp::runtime::Runtime;
use wasp::scheduler::config::{SchedulerConfig, DEFAULT_CONFIG};
use wasp::scheduler::Scheduler;

async fn run(nodes: u32, pods: u32) {
    let (_simulator, client) = support::pending_pods_cluster(nodes, pods).await;
    let mut config = SchedulerConfig::parse(DEFAULT_CONFIG).unwrap();
    config.policy_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/out");
    let scheduler = Scheduler::new(&config, &Runtime::new(None).unwrap(), client.clone()).unwrap();
    let started = Instant::now();
    let worker = tokio::spawn(scheduler.clone().run());
    while scheduler.stats.scheduled.load(Ordering::Relaxed) < pods as u64 && started.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    let bound = Api::<Pod>::all(client).list(&ListParams::default().fields("spec.nodeName!=")).await.unwrap().items.len();
    let rate = bound as f64 / elapsed.as_secs_f64();
    println!(
        "{nodes:>5} nodes  {bound:>6}/{pods} pods bound in {:>6.2}s  {rate:>7.0} pods/s   resident {:>5.0} MiB",
        elapsed.as_secs_f64(),
        support::resident_mib()
    );
    worker.abort();
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    println!("default policy set (wasm), simulator in process over HTTP, 2 cores shared");
    runtime.block_on(async {
        run(500, 10_000).await;
        run(5000, 10_000).await;
    });
}
