//! Cost of policy decisions in the sandbox against the same Rust logic compiled natively, side by side.
//!
//! `cargo bench -p wasp --bench policy_runtime` (after scripts/build-policies.sh). Prints, at 500 and 5000 nodes,
//! the cost per (pod, node) of the `resources-fit` + `taint-toleration` filters in wasm and natively and their
//! ratio, then the cost of a full cluster sync, a one-node delta and an instantiation.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp::cluster::ClusterState;
use wasp::contract::types as host;
use wasp::policy::{LoadedPolicy, PolicyOptions};
use wasp::runtime::Runtime;
use wasp_sdk::testing::{NodeBuilder, PodBuilder};
use wasp_sdk::{Filter, Policy};

// The `wasp` binary's allocator and its settings, so that memory figures are the binary's.
wasp_allocator::binary_allocator!();

const LABELS: usize = 10;

fn load(runtime: &Arc<Runtime>, name: &str) -> LoadedPolicy {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/out").join(format!("{name}.wasm"));
    let wasm = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}; run scripts/build-policies.sh", path.display()));
    LoadedPolicy::load(runtime, name, &wasm, PolicyOptions::default()).unwrap()
}

fn host_node(index: usize) -> host::Node {
    let labels = (0..LABELS).map(|label| (format!("example.com/label-{label}"), format!("value-{index}-{label}"))).collect();
    host::Node {
        name: format!("node-{index}"),
        labels,
        taints: Vec::new(),
        unschedulable: false,
        allocatable: host::Resources { cpu_millis: 16_000, memory_bytes: 64 << 30, ephemeral_storage_bytes: 100 << 30, scalar: Vec::new() },
        allocatable_pods: 110,
        conditions: vec![host::Condition { kind: "Ready".into(), status: "True".into() }],
        images: Vec::new(),
        volume_limits: Vec::new(),
    }
}

fn sdk_node(index: usize) -> wasp_sdk::types::Node {
    (0..LABELS)
        .fold(NodeBuilder::new(&format!("node-{index}")).cpu("16").memory("64Gi"), |builder, label| {
            builder.label(&format!("example.com/label-{label}"), &format!("value-{index}-{label}"))
        })
        .build()
}

fn host_pod(name: &str) -> host::Pod {
    let source: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}, namespace: default, uid: {name}, labels: {{app: web}}}}\nspec: {{containers: [{{name: app, resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}}}], tolerations: [{{key: dedicated, operator: Exists}}]}}"
    ))
    .unwrap();
    wasp::cluster::convert::pod(&source).unwrap()
}

/// Median time of `runs` batches of `iterations` calls, per call.
fn measure(runs: usize, iterations: usize, mut body: impl FnMut()) -> Duration {
    for _ in 0..iterations.min(50) {
        body();
    }
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..iterations {
                body();
            }
            started.elapsed() / iterations as u32
        })
        .collect();
    samples.sort();
    samples[runs / 2]
}

fn main() {
    let runtime = Runtime::new(None).unwrap();
    let fit = load(&runtime, "resources-fit");
    let taints = load(&runtime, "taint-toleration");
    println!("filter resources-fit + taint-toleration, one pod against every node ({LABELS} labels per node)");
    println!("{:>6}  {:>18}  {:>20}  {:>12}", "nodes", "wasm ns/(pod,node)", "native ns/(pod,node)", "wasm/native");
    for nodes in [500, 5000] {
        let mut cluster = ClusterState::new();
        for index in 0..nodes {
            cluster.upsert_node(host_node(index));
        }
        let ids = cluster.node_ids();
        let pod = host_pod("bench");
        let iterations = 2_000_000 / nodes;
        let wasm = measure(7, iterations, || {
            black_box(fit.filter(&cluster, &pod, &ids).unwrap());
            black_box(taints.filter(&cluster, &pod, &ids).unwrap());
        });

        let mut native_cluster = wasp_sdk::Cluster::new();
        let native_ids: Vec<u32> = (0..nodes).map(|index| native_cluster.add_node(sdk_node(index))).collect();
        let native_pod = PodBuilder::new("bench").cpu("500m").memory("1Gi").toleration("dedicated", None, None).build();
        let native_fit = resources_fit::ResourcesFit::new(Default::default()).unwrap();
        let native_taints = taint_toleration::TaintToleration::new(Default::default()).unwrap();
        let native = measure(7, iterations, || {
            black_box(native_fit.filter_all(&native_pod, &native_cluster, &native_ids));
            black_box(native_taints.filter_all(&native_pod, &native_cluster, &native_ids));
        });
        let per_pair = |duration: Duration| duration.as_nanos() as f64 / nodes as f64;
        println!("{nodes:>6}  {:>18.1}  {:>20.1}  {:>11.2}x", per_pair(wasm), per_pair(native), per_pair(wasm) / per_pair(native));
    }

    let mut cluster = ClusterState::new();
    for index in 0..5000 {
        cluster.upsert_node(host_node(index));
    }
    let full_sync = measure(5, 3, || {
        let mut instance = fit.new_instance().unwrap();
        cluster.sync(&mut instance, host::ViewScope::Nodes).unwrap();
        black_box(instance);
    });
    let instantiate = measure(5, 20, || {
        black_box(fit.new_instance().unwrap());
    });
    let mut instance = fit.new_instance().unwrap();
    cluster.sync(&mut instance, host::ViewScope::Nodes).unwrap();
    let template = host_pod("delta");
    let node_names: Vec<String> = (0..5000).map(|index| format!("node-{index}")).collect();
    let mut serial = 0;
    let delta = measure(5, 2000, || {
        serial += 1;
        let mut pod = template.clone();
        pod.uid = serial.to_string();
        cluster.upsert_pod(pod, &node_names[serial % 5000]);
        cluster.sync(&mut instance, host::ViewScope::Nodes).unwrap();
    });
    println!();
    println!("full sync of 5000 nodes into a new instance   {:>9.2} ms (includes instantiation)", full_sync.as_secs_f64() * 1e3);
    println!("instantiate + configure from InstancePre      {:>9.3} ms", instantiate.as_secs_f64() * 1e3);
    println!("one pod bound: host bookkeeping + delta sync  {:>9.2} µs", delta.as_secs_f64() * 1e6);
    drop((cluster, instance));
    memory_at_scale(&runtime);
}

fn resident_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 =
        status.lines().find_map(|line| line.strip_prefix("VmRSS:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0.0);
    kib / 1024.0
}

/// The policies of all three loops in the shipped configuration (`manifests/20-config.yaml`).
fn shipped_policies() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/20-config.yaml");
    let config_map: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let text = config_map["data"]["config.yaml"].as_str().expect("the ConfigMap holds config.yaml");
    wasp::config::HostConfig::parse(text).unwrap().policy_names()
}

/// The shipped configuration's policies (scheduler, rescheduler, autoscaler), two synced instances each, over
/// 5000 nodes and 50k bound pods.
fn memory_at_scale(runtime: &Arc<Runtime>) {
    const INSTANCES: usize = 2;
    let before = resident_mib();
    let mut cluster = ClusterState::new();
    for index in 0..5000 {
        cluster.upsert_node(host_node(index));
    }
    let template = host_pod("web");
    for index in 0..50_000 {
        let mut pod = template.clone();
        pod.uid = format!("pod-{index}");
        pod.name = format!("web-{index}");
        cluster.upsert_pod(pod, &format!("node-{}", index % 5000));
    }
    let cluster_mib = resident_mib() - before;
    let names = shipped_policies();
    let mut instances = Vec::new();
    for name in &names {
        let policy = load(runtime, name);
        for _ in 0..INSTANCES {
            let mut instance = policy.new_instance().unwrap();
            cluster.sync(&mut instance, policy.view()).unwrap();
            instances.push((instance, policy.descriptor.view));
        }
    }
    println!();
    let keeping_pods = instances.iter().filter(|(_, view)| *view == host::ViewScope::NodesAndPods).count() / INSTANCES;
    println!("memory, 5000 nodes + 50k pods, the shipped configuration's {} policies ({keeping_pods} keep pods) x {INSTANCES} synced instances:", names.len());
    println!("  host cluster state {cluster_mib:>7.0} MiB");
    println!("  process total      {:>7.0} MiB resident (target 500 MiB)", resident_mib());
    black_box(instances);
}
