//! Soak: two `wasp run` replicas (leader election) against `wasp sim serve` (separate processes, as a user runs
//! them) for a long time, with pod churn, policy reloads, injected API faults, a rescheduler evicting within its
//! limits and a failover every few minutes. Every 30 s it samples each replica's resident memory; at the end it
//! checks, from the simulator's audit log (what the API server received and answered, not what wasp says it
//! sent), that no pod was bound twice and no eviction left the envelope.
//!
//! `cargo bench -p wasp --bench soak` (after scripts/build-policies.sh). `SOAK_SECONDS` (default 600) sets the
//! length, `SOAK_FAILOVER_SECONDS` (default 300) how often the leader is stopped (SIGTERM) and a new replica
//! started. The load:
//! - 40 bare pods a second for the `wasp` profile, the oldest deleted beyond about 400, and 5 bare pods that live
//!   the whole run (past pod-lifetime's age: the rescheduler must leave them, bare pods are protected);
//! - a Deployment of 60 replicas under a PodDisruptionBudget (maxUnavailable 2) whose pods `pod-lifetime` evicts
//!   past 120 s, at most 4 a run every 15 s (so the rescheduler works at its limit all the time);
//! - a new version of resources-fit written kubelet-style every 5 s;
//! - faults: 2% of bindings and lists fail (500, 503), 5% of evictions (503), every watch is cut after 2 minutes.

#[path = "../../tests/common/atomic_writer.rs"]
mod atomic_writer;

use atomic_writer::AtomicWriter;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wasp_sim::audit::{AuditEntry, AuditLog};

const PODS_PER_SECOND: usize = 40;
const LIVE_PODS: usize = 400;
const RELOAD_EVERY: Duration = Duration::from_secs(5);
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// The rescheduler's interval and per-run limit in the configuration below.
const RUN_INTERVAL: Duration = Duration::from_secs(15);
const MAX_PER_RUN: usize = 4;
/// A replica's first two minutes warm it up (compiled artifacts, pools, caches): its memory counts after that.
const WARM_UP: Duration = Duration::from_secs(120);

const SCENARIO: &str = "\
name: soak
kubelet: {readyDelay: 100ms, terminationDelay: 100ms}
nodeGroups: [{name: n, count: 50, cpu: '32', memory: 128Gi, pods: 110, zones: [a, b, c]}]
faults:
  seed: 7
  dropWatchesAfter: 2m
  rules:
  - {verbs: [create], resources: [pods/binding], errorRate: 0.02, status: 500}
  - {verbs: [create], resources: [pods/eviction], errorRate: 0.05, status: 503}
  - {verbs: [list], errorRate: 0.02, status: 503}
";

const RESCHEDULER: &str = "
  pod-lifetime: {settings: {maxPodLifeTimeSeconds: 120}}
rescheduler:
  interval: 15s
  strategies: [{policy: pod-lifetime}]
  protections: {minPodAge: 30s}
  limits: {maxPerRun: 4, maxPerNode: 2, maxPerNamespace: 4, maxPerWorkload: 4}
  pacing: {replacementTimeout: 2m, maxEvictionsPerWorkload: 1000, window: 1m, budgetRetry: 10s}
";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn seconds_from_env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis() as u64)
}

/// Kills the child process when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One `wasp run` replica, with the memory samples taken after its warm-up.
struct Replica {
    name: String,
    process: Process,
    started: Instant,
    warm_samples: Vec<f64>,
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

fn start_replica(root: &Path, config: &Path, kubeconfig: &Path, index: usize) -> Replica {
    let name = format!("soak-host-{index}");
    let process = Process(
        Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["run", "--config", config.to_str().unwrap(), "--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--cache-dir", root.join(format!("cache-{index}")).to_str().unwrap()])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", &name)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    Replica { name, process, started: Instant::now(), warm_samples: Vec::new() }
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases.get("wasp-scheduler").await.ok()?.spec?.holder_identity.filter(|holder| !holder.is_empty())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = seconds_from_env("SOAK_SECONDS", 600);
    let failover_every = Duration::from_secs(seconds_from_env("SOAK_FAILOVER_SECONDS", 300));
    let root = tempfile::tempdir().unwrap();

    let scenario = root.path().join("scenario.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let kubeconfig = root.path().join("kubeconfig");
    let audit_log = root.path().join("audit.log");
    let _simulator = Process(
        Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["sim", "serve", "--scenario", scenario.to_str().unwrap(), "--address", &format!("127.0.0.1:{}", free_port())])
            .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "--audit-log", audit_log.to_str().unwrap()])
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
    // The built-in configuration ends with its `policies` map: pod-lifetime's settings join it.
    let configured = built_in.replace("policyDir: plugins/out", &format!("policyDir: {}", policies.path().display()));
    std::fs::write(&config, format!("{}{RESCHEDULER}", configured.trim_end())).unwrap();

    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(), &Default::default()).await.unwrap(),
    )
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let deployment = json!({
        "metadata": {"name": "churn"},
        "spec": {"replicas": 60, "selector": {"matchLabels": {"app": "churn"}}, "template": {
            "metadata": {"labels": {"app": "churn"}},
            "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}
    });
    let budget = json!({"metadata": {"name": "churn"}, "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "churn"}}}});
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &serde_json::from_value(deployment).unwrap()).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    budgets.create(&PostParams::default(), &serde_json::from_value(budget).unwrap()).await.unwrap();

    for index in 0..5 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("bare-{index}"), "labels": {"app": "bare"}},
            "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }

    let mut replicas: Vec<Replica> = (0..2).map(|index| start_replica(root.path(), &config, &kubeconfig, index)).collect();
    let mut next_replica = 2;
    let mut failovers: Vec<u64> = Vec::new();
    let mut retired: Vec<Replica> = Vec::new();
    println!(
        "soak: 2 wasp run replicas against wasp sim serve, 50 nodes, {PODS_PER_SECOND} pods/s created and deleted (about {LIVE_PODS} live), a 60-replica Deployment evicted by pod-lifetime at most {MAX_PER_RUN} every {}s, a new resources-fit every {}s, faults (2% of bindings and lists, 5% of evictions, watches cut every 2m), a failover every {}s, for {seconds}s",
        RUN_INTERVAL.as_secs(),
        RELOAD_EVERY.as_secs(),
        failover_every.as_secs()
    );
    println!(
        "{:>8} {:>22} {:>22} {:>9} {:>9} {:>8} {:>9} {:>9}",
        "time", "replica RSS", "replica RSS", "created", "deleted", "reloads", "evicted", "failovers"
    );

    let started = Instant::now();
    let (mut live, mut created, mut deleted, mut reloads) = (VecDeque::new(), 0usize, 0usize, 0u32);
    let (mut last_reload, mut last_sample, mut last_failover) = (Instant::now(), Instant::now() - SAMPLE_EVERY, Instant::now());
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
        if last_failover.elapsed() >= failover_every {
            if let Some(holder) = lease_holder(&leases).await {
                if let Some(index) = replicas.iter().position(|replica| holder.starts_with(&replica.name)) {
                    // A graceful stop, as a rolling update or a node drain gives: SIGTERM, then a new replica.
                    let mut leader = replicas.remove(index);
                    Command::new("kill").arg("-TERM").arg(leader.process.0.id().to_string()).status().unwrap();
                    let _ = leader.process.0.wait();
                    retired.push(leader);
                    failovers.push(now_ms());
                    replicas.push(start_replica(root.path(), &config, &kubeconfig, next_replica));
                    next_replica += 1;
                }
            }
            last_failover = Instant::now();
        }
        if last_sample.elapsed() >= SAMPLE_EVERY {
            let mut columns = Vec::new();
            for replica in &mut replicas {
                let resident = resident_mib(replica.process.0.id());
                if replica.started.elapsed() >= WARM_UP {
                    replica.warm_samples.push(resident);
                }
                columns.push(format!("{:>11} {resident:>6.1} MiB", replica.name));
            }
            let evicted = AuditLog::read(&audit_log).unwrap_or_default().iter().filter(|entry| entry.subresource == "eviction" && entry.code == 201).count();
            println!(
                "{:>7.0}s {:>22} {:>22} {created:>9} {deleted:>9} {reloads:>8} {evicted:>9} {:>9}",
                started.elapsed().as_secs_f64(),
                columns[0],
                columns[1],
                failovers.len()
            );
            last_sample = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed())).await;
    }

    println!("memory after each replica's first {}s (a replica stopped at a failover: until then):", WARM_UP.as_secs());
    for replica in retired.iter().chain(&replicas) {
        if let (Some(first), Some(last)) = (replica.warm_samples.first(), replica.warm_samples.last()) {
            let peak = replica.warm_samples.iter().copied().fold(0.0, f64::max);
            println!(
                "  {}: {first:.1} MiB -> {last:.1} MiB ({:.2}x), peak {peak:.1} MiB over {} samples",
                replica.name,
                last / first,
                replica.warm_samples.len()
            );
        }
    }
    let audit = AuditLog::read(&audit_log).unwrap();
    check_bindings(&audit);
    check_evictions(&audit, &failovers);
    println!("{created} pods created, {deleted} deleted, {reloads} policy versions, {} failovers", failovers.len());
}

/// No pod bound twice: the API server answered at most one binding per pod with 201, and refused none as
/// already bound (a second leader's decision, or a retry of a binding that had in fact succeeded, would be a 409).
fn check_bindings(audit: &[AuditEntry]) {
    let bindings: Vec<&AuditEntry> = audit.iter().filter(|entry| entry.subresource == "binding" && entry.verb == "create").collect();
    let mut bound: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for entry in bindings.iter().filter(|entry| entry.code == 201) {
        *bound.entry((&entry.namespace, &entry.name)).or_default() += 1;
    }
    let twice: Vec<_> = bound.iter().filter(|(_, count)| **count > 1).collect();
    let conflicts = bindings.iter().filter(|entry| entry.code == 409).count();
    let injected = bindings.iter().filter(|entry| entry.code == 500).count();
    println!(
        "bindings: {} pods bound, {} bound twice, {conflicts} refused as already bound, {injected} failed by injection (and retried)",
        bound.len(),
        twice.len()
    );
    assert!(twice.is_empty() && conflicts == 0, "pods bound twice: {twice:?}; {conflicts} bindings refused as already bound");
}

/// No eviction outside the envelope: no bare pod (`soak-*`, `bare-*`: protected, and the `bare-*` ones old enough
/// for pod-lifetime to propose them) evicted, and no more than the per-run
/// limit accepted within any half interval, except around a failover (the stopped leader's last run and the new
/// leader's first may fall within one).
fn check_evictions(audit: &[AuditEntry], failovers: &[u64]) {
    let evictions: Vec<&AuditEntry> = audit.iter().filter(|entry| entry.subresource == "eviction" && entry.verb == "create").collect();
    let accepted: Vec<&AuditEntry> = evictions.iter().copied().filter(|entry| entry.code == 201).collect();
    let by_budget = evictions.iter().filter(|entry| entry.code == 429).count();
    let injected = evictions.iter().filter(|entry| entry.code == 503).count();
    let protected = accepted.iter().filter(|entry| entry.name.starts_with("soak-") || entry.name.starts_with("bare-") || entry.namespace != "default").count();
    let half = RUN_INTERVAL.as_millis() as u64 / 2;
    let near_failover = |at: u64| failovers.iter().any(|failover| at + 30_000 >= *failover && at <= failover + 30_000);
    let busiest = accepted
        .iter()
        .filter(|entry| !near_failover(entry.at_ms))
        .map(|entry| accepted.iter().filter(|other| other.at_ms >= entry.at_ms && other.at_ms < entry.at_ms + half).count())
        .max()
        .unwrap_or(0);
    println!(
        "evictions: {} accepted, {by_budget} refused by the budget (429), {injected} failed by injection; {protected} of protected pods; at most {busiest} within {half} ms away from failovers (limit {MAX_PER_RUN} per run)",
        accepted.len()
    );
    assert_eq!(protected, 0, "protected pods were evicted");
    assert!(busiest <= MAX_PER_RUN, "{busiest} evictions within half an interval");
}
