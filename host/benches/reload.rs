//! Hot reload costs: how long from the kubelet's `..data` swap to the new version serving, and how much
//! scheduling throughput continuous reloads take away.
//!
//! `cargo bench -p wasp --bench reload` (after scripts/build-policies.sh). The policy volume is written exactly
//! as the kubelet writes it; the watcher runs with its default 50 ms debounce; compiled artifacts are cached on
//! disk as in the Deployment (`--cache-dir`). "Cold" swaps get a never-seen component each time (the same code
//! with a different custom section, so a new digest and a full compile); "cached" swaps alternate between two
//! versions compiled before (a rollout and its rollback).

#[path = "../../tests/common/atomic_writer.rs"]
mod atomic_writer;
mod support;

use atomic_writer::AtomicWriter;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::HostIdentity;
use wasp::registry::watch::{PolicyWatcher, WatchOptions};
use wasp::registry::PolicyRegistry;
use wasp::runtime::Runtime;

const SWAPS: usize = 20;
const SWAP_EVERY: Duration = Duration::from_millis(100);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The same component with a custom section appended: identical behaviour, a new digest.
fn variant(component: &[u8], tag: u32) -> Vec<u8> {
    let name = b"wasp-bench";
    let payload = tag.to_le_bytes();
    let mut bytes = component.to_vec();
    bytes.push(0); // custom section id
    bytes.push((1 + name.len() + payload.len()) as u8); // section size (LEB128, < 128)
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&payload);
    bytes
}

/// A policy volume with the default set, and a registry over it with a disk artifact cache in which
/// resources-fit's two alternating versions are already compiled.
struct Volume {
    _root: tempfile::TempDir,
    writer: AtomicWriter,
    files: BTreeMap<String, Vec<u8>>,
    registry: Arc<PolicyRegistry>,
    original: Vec<u8>,
    versions: [Vec<u8>; 2],
}

impl Volume {
    fn new() -> Volume {
        let root = tempfile::tempdir().unwrap();
        let writer = AtomicWriter::new(&root.path().join("policies"));
        let files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(repo().join("plugins/out"))
            .unwrap()
            .flatten()
            .map(|entry| (entry.file_name().to_string_lossy().into_owned(), std::fs::read(entry.path()).unwrap()))
            .collect();
        writer.write(&files);
        let mut config = HostConfig::built_in();
        config.policy_dir = writer.path().to_path_buf();
        let runtime = Runtime::new(Some(root.path().join("cache"))).unwrap();
        let registry = Arc::new(PolicyRegistry::new(&runtime, config, None).unwrap());
        let original = files["resources-fit.wasm"].clone();
        let versions = [variant(&original, 1), variant(&original, 2)];
        let mut volume = Volume { _root: root, writer, files, registry, original, versions };
        for index in 0..2 {
            volume.write(volume.versions[index].clone());
            volume.registry.reload();
        }
        volume
    }

    fn write(&mut self, resources_fit: Vec<u8>) {
        self.files.insert("resources-fit.wasm".into(), resources_fit);
        self.writer.write(&self.files);
    }

    /// The `index`th version to swap in: alternating cached ones, or a new one each time.
    fn version(&self, index: u32, cold: bool) -> Vec<u8> {
        if cold {
            variant(&self.original, 1000 + index)
        } else {
            self.versions[index as usize % 2].clone()
        }
    }
}

fn percentile(samples: &mut [Duration], share: f64) -> f64 {
    samples.sort();
    samples[((samples.len() - 1) as f64 * share).round() as usize].as_secs_f64() * 1e3
}

/// Milliseconds from writing a new resources-fit to the registry serving its digest (through the watcher), and
/// of the reload work alone (called directly, without the debounce).
async fn swap_latency(cold: bool) -> (Vec<Duration>, Vec<Duration>) {
    let mut volume = Volume::new();
    let watcher = PolicyWatcher::spawn(volume.registry.clone(), WatchOptions::default(), |_| {}).unwrap();
    let mut end_to_end = Vec::new();
    for swap in 0..SWAPS as u32 {
        let bytes = volume.version(swap, cold);
        let digest = wasp::registry::source::sha256_hex(&bytes);
        let started = Instant::now();
        volume.write(bytes);
        while volume.registry.current().policies["resources-fit"].digest != digest {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        end_to_end.push(started.elapsed());
        tokio::time::sleep(SWAP_EVERY).await;
    }
    drop(watcher);
    let mut reload_work = Vec::new();
    for swap in 0..SWAPS as u32 {
        volume.write(volume.version(SWAPS as u32 + swap, cold));
        let started = Instant::now();
        let report = volume.registry.reload();
        assert_eq!(report.swapped, ["resources-fit"], "{report:?}");
        reload_work.push(started.elapsed());
    }
    (end_to_end, reload_work)
}

/// Pods per second for `pods` pods on `nodes` nodes while a new resources-fit version (cold or cached) is
/// written at the given interval (or never), and the files written and generations swapped meanwhile.
async fn throughput(nodes: u32, pods: u32, reloads: Option<(bool, Duration)>) -> (f64, u32, u64) {
    let (_simulator, api) = support::pending_pods_cluster(nodes, pods).await;

    let mut volume = Volume::new();
    let registry = volume.registry.clone();
    let host = Host::new(api, registry.clone(), HostIdentity::named("bench", None));
    let scheduler = host.scheduler.clone();
    let _watcher = host.watch_policies(WatchOptions::default()).unwrap();
    let generation_before = registry.current().number;
    let done = Arc::new(AtomicBool::new(false));
    let swapper = {
        let done = done.clone();
        tokio::task::spawn_blocking(move || {
            let mut writes = 0;
            while let Some((cold, interval)) = reloads.filter(|_| !done.load(Ordering::Relaxed)) {
                std::thread::sleep(interval);
                volume.write(volume.version(writes, cold));
                writes += 1;
            }
            writes
        })
    };
    let started = Instant::now();
    let worker = tokio::spawn(host.clone().run_loops());
    while scheduler.stats.scheduled.load(Ordering::Relaxed) < pods as u64 && started.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rate = scheduler.stats.scheduled.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let writes = swapper.await.unwrap();
    worker.abort();
    (rate, writes, registry.current().number - generation_before)
}

/// The throughput cases: label, whether versions are new (cold), how often one is written (None: never).
const CASES: [(&str, bool, Option<Duration>); 5] = [
    ("steady (no reloads)", false, None),
    ("new version every 100 ms, cached", false, Some(SWAP_EVERY)),
    ("new version every 100 ms, cold", true, Some(SWAP_EVERY)),
    ("new version every 1 s, cold", true, Some(Duration::from_secs(1))),
    ("steady again", false, None),
];

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (nodes, pods) = (500, 30_000);
    // Each throughput case runs in a process of its own (this benchmark with `case N`), so that no case inherits
    // another's leftovers; it prints `rate writes swaps`.
    let arguments: Vec<String> = std::env::args().collect();
    if let Some(position) = arguments.iter().position(|argument| argument == "case") {
        let (_, cold, interval) = CASES[arguments[position + 1].parse::<usize>().unwrap()];
        let (rate, writes, swaps) = runtime.block_on(throughput(nodes, pods, interval.map(|interval| (cold, interval))));
        println!("{rate} {writes} {swaps}");
        return;
    }
    runtime.block_on(async {
        let size = std::fs::metadata(repo().join("plugins/out/resources-fit.wasm")).unwrap().len() / 1024;
        println!("swap latency: ..data rename -> new resources-fit ({size} KB) serving; watcher debounce 50 ms; {SWAPS} swaps");
        for (label, cold) in [("cached (artifact on disk)", false), ("cold (new digest, compiled)", true)] {
            let (mut end_to_end, mut work) = swap_latency(cold).await;
            println!(
                "  {label:<28} p50 {:>6.1} ms  p90 {:>6.1} ms  max {:>6.1} ms   (reload work alone: p50 {:>5.1} ms, max {:>5.1} ms)",
                percentile(&mut end_to_end, 0.5),
                percentile(&mut end_to_end, 0.9),
                percentile(&mut end_to_end, 1.0),
                percentile(&mut work, 0.5),
                percentile(&mut work, 1.0),
            );
        }
    });
    println!("scheduling {pods} pods on {nodes} nodes, default policy set (simulator in process over HTTP, 2 cores shared)");
    let mut steady = None;
    for (index, (label, _, interval)) in CASES.iter().enumerate() {
        let output = std::process::Command::new(std::env::current_exe().unwrap()).args(["case", &index.to_string()]).output().unwrap();
        assert!(output.status.success(), "case {label} failed: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8(output.stdout).unwrap();
        let fields: Vec<f64> = text.split_whitespace().map(|field| field.parse().unwrap()).collect();
        let (rate, writes, swaps) = (fields[0], fields[1], fields[2]);
        let baseline = *steady.get_or_insert(rate);
        match interval {
            None => println!("  {label:<40} {rate:>6.0} pods/s  {:.2}x steady", rate / baseline),
            Some(_) => println!("  {label:<40} {rate:>6.0} pods/s  {:.2}x steady  ({writes} writes, {swaps} swaps)", rate / baseline),
        }
    }
}
