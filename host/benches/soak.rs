//! Soak: `wasp run` against `wasp sim serve` (two real processes, as a user runs them) for a long time with pod
//! churn and policy reloads, sampling the host's resident memory. Memory must stay flat: no state may grow with
//! the number of pods ever seen, events sent or versions ever loaded.
//!
//! `cargo bench -p wasp --bench soak` (after scripts/build-policies.sh); `SOAK_SECONDS` (default 600) sets the
//! length. Every second it creates a batch of pods for the `wasp` profile and deletes the oldest beyond a few
//! hundred; every 5 s it writes a new version of resources-fit into the policy volume (kubelet-style).

#[path = "../../tests/common/atomic_writer.rs"]
mod atomic_writer;

use atomic_writer::AtomicWriter;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PODS_PER_SECOND: usize = 40;
const LIVE_PODS: usize = 400;
const RELOAD_EVERY: Duration = Duration::from_secs(5);
const SAMPLE_EVERY: Duration = Duration::from_secs(30);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Kills the child process when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn resident_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status.lines().find_map(|line| line.strip_prefix("VmRSS:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kib.unwrap_or(0.0) / 1024.0
}

/// The same component with a custom section appended: identical behaviour, a new digest.
fn variant(component: &[u8], tag: u32) -> Vec<u8> {
    let name = b"wasp-soak";
    let mut bytes = component.to_vec();
    bytes.extend_from_slice(&[0, (1 + name.len() + 4) as u8, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&tag.to_le_bytes());
    bytes
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: u64 = std::env::var("SOAK_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(600);
    let root = tempfile::tempdir().unwrap();
    let wasp = env!("CARGO_BIN_EXE_wasp");

    let scenario = root.path().join("scenario.yaml");
    std::fs::write(&scenario, "name: soak\nkubelet: {readyDelay: 100ms, terminationDelay: 100ms}\nnodeGroups: [{name: n, count: 50, cpu: '32', memory: 128Gi, pods: 110, zones: [a, b, c]}]\n").unwrap();
    let kubeconfig = root.path().join("kubeconfig");
    let api_port = free_port();
    let _simulator = Process(
        Command::new(wasp)
            .args(["sim", "serve", "--scenario", scenario.to_str().unwrap(), "--address", &format!("127.0.0.1:{api_port}"), "--kubeconfig", kubeconfig.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&kubeconfig);

    let policies = AtomicWriter::new(&root.path().join("policies"));
    let mut files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(repo().join("plugins/out"))
        .unwrap()
        .flatten()
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), std::fs::read(entry.path()).unwrap()))
        .collect();
    policies.write(&files);
    let original = files["resources-fit.wasm"].clone();
    let config = root.path().join("config.yaml");
    let built_in = std::fs::read_to_string(repo().join("host/src/config/default-config.yaml")).unwrap();
    std::fs::write(&config, built_in.replace("policyDir: plugins/out", &format!("policyDir: {}", policies.path().display()))).unwrap();
    let host = Process(
        Command::new(wasp)
            .args(["run", "--config", config.to_str().unwrap(), "--listen", &format!("127.0.0.1:{}", free_port()), "--no-leader-election"])
            .args(["--cache-dir", root.path().join("cache").to_str().unwrap()])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = host.0.id();

    let client = kube::Client::try_from(kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap())
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    println!("soak: wasp run against wasp sim serve, 50 nodes, {PODS_PER_SECOND} pods/s created and deleted (about {LIVE_PODS} live), a new resources-fit every {}s, for {seconds}s", RELOAD_EVERY.as_secs());
    println!("{:>8} {:>12} {:>10} {:>10} {:>8}", "time", "host RSS", "created", "deleted", "reloads");

    let started = Instant::now();
    let (mut live, mut created, mut deleted, mut reloads) = (VecDeque::new(), 0usize, 0usize, 0u32);
    let (mut last_reload, mut last_sample) = (Instant::now(), Instant::now() - SAMPLE_EVERY);
    let mut samples = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        let tick = Instant::now();
        for _ in 0..PODS_PER_SECOND {
            let name = format!("soak-{created}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": "soak", "batch": format!("b{}", created / PODS_PER_SECOND)}},
                "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }))
            .unwrap();
            if pods.create(&PostParams::default(), &pod).await.is_ok() {
                live.push_back(name);
                created += 1;
            }
        }
        while live.len() > LIVE_PODS {
            let name = live.pop_front().unwrap();
            if pods.delete(&name, &DeleteParams::default().grace_period(0)).await.is_ok() {
                deleted += 1;
            }
        }
        if last_reload.elapsed() >= RELOAD_EVERY {
            files.insert("resources-fit.wasm".into(), variant(&original, reloads));
            policies.write(&files);
            reloads += 1;
            last_reload = Instant::now();
        }
        if last_sample.elapsed() >= SAMPLE_EVERY {
            let resident = resident_mib(pid);
            samples.push(resident);
            println!("{:>7.0}s {:>8.1} MiB {created:>10} {deleted:>10} {reloads:>8}", started.elapsed().as_secs_f64(), resident);
            last_sample = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed())).await;
    }
    // The first minute warms up (compiled artifacts, pools, caches); after that, memory must not trend upwards.
    let warm: Vec<f64> = samples.iter().skip(2).copied().collect();
    if let (Some(first), Some(last)) = (warm.first(), warm.last()) {
        let peak = warm.iter().copied().fold(0.0, f64::max);
        println!("after warm-up: {first:.1} MiB -> {last:.1} MiB ({:.2}x), peak {peak:.1} MiB; {created} pods created, {deleted} deleted, {reloads} policy versions", last / first);
    }
}
