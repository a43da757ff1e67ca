//! A fixed workload for instruction counts: one scheduling policy's filter and score calls for one pod, over a
//! cluster of one of scheduler_perf's test cases, in the sandbox or compiled natively. Wall time on this shared machine
//! moves by a third from run to run; the instructions valgrind counts do not, so they decide whether a change to
//! a policy, the SDK or the host's calls helps.
//!
//! `scripts/policy-instructions.sh [POLICY]` builds it, runs it under `valgrind --tool=callgrind` both ways and
//! prints the instructions per call and their ratio. By hand:
//! `valgrind --tool=callgrind --toggle-collect='*policy_instructions::measured*' BINARY [--native] [--policy NAME]
//! [--nodes N] [--pods M] [--calls K] [--workload NAME]`, counting only the measured calls (loading, compiling and
//! the first sync of the cluster into the instance are left out).
//!
//! The cluster: `--nodes` nodes (scheduler_perf's node-default: 4 CPUs, 32 GiB, 110 pods) and `--pods` bound pods,
//! one per node on the first nodes, of the workload's template; the pod asked about is one more of them.
//! `--workload anti-affinity` (the default): scheduler_perf's pod-with-pod-anti-affinity, each pod repelling its
//! own label per hostname. `--workload topology-spreading`: its pod-with-topology-spreading (`maxSkew: 5` over
//! zones), on nodes in three zones as TopologySpreading labels them. Each call filters every node, then scores the first
//! 500 feasible ones (kube-scheduler's share at 5000 nodes), as far as the policy filters and scores.
//! `--compare` instead checks that both builds give the same verdicts and scores (scripts/test.sh runs it on a
//! small cluster, so the workload keeps working).

#[allow(dead_code)] // the native policies, not the host that serves them
#[path = "support/native.rs"]
mod native;

use std::hint::black_box;
use std::sync::Arc;
use wasp::cluster::ClusterState;
use wasp::contract::types::{NodeId, Pod, PolicyKind};
use wasp::policy::{LoadedPolicy, PolicyOptions, SchedulingPolicy};
use wasp::runtime::Runtime;

fn main() {
    let (mut native_build, mut compare, mut policy_name, mut nodes, mut pods, mut calls) = (false, false, "inter-pod-affinity".to_string(), 5000, 3000, 10);
    let mut workload = Workload::AntiAffinity;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |flag: &str| args.next().and_then(|value| value.parse::<usize>().ok()).unwrap_or_else(|| panic!("{flag} takes a number"));
        match arg.as_str() {
            "--native" => native_build = true,
            "--compare" => compare = true,
            "--nodes" => nodes = number("--nodes"),
            "--pods" => pods = number("--pods"),
            "--calls" => calls = number("--calls"),
            "--policy" => policy_name = args.next().expect("--policy takes a policy of the default set"),
            "--workload" => workload = Workload::named(&args.next().expect("--workload takes a name")),
            "--bench" => {}
            other => panic!("unknown argument {other:?}: --native, --compare, --policy NAME, --nodes N, --pods M, --calls K, --workload NAME"),
        }
    }
    assert!(pods <= nodes, "one bound pod per node: --pods {pods} is more than --nodes {nodes}");
    let cluster = workload.cluster(nodes, pods);
    let pod = workload.pod(pods);
    let candidates = cluster.node_ids();
    let wasm = component(&policy_name);
    let kinds = Kinds { filter: wasm.implements(PolicyKind::Filter), score: wasm.implements(PolicyKind::Score) };
    if compare {
        let native = native::native(&policy_name, String::new());
        let feasible = kinds.feasible(wasm.as_ref(), &cluster, &pod, &candidates);
        assert_eq!(feasible, kinds.feasible(native.as_ref(), &cluster, &pod, &candidates), "{policy_name}: the builds' verdicts differ");
        if kinds.score {
            let scores = wasm.score_or_failure_mode(&cluster, &pod, &feasible);
            assert_eq!(scores, native.score_or_failure_mode(&cluster, &pod, &feasible), "{policy_name}: the builds' scores differ");
        }
        println!("{policy_name}: wasm and native agree on {} nodes ({} feasible)", candidates.len(), feasible.len());
        return;
    }
    let policy: Arc<dyn SchedulingPolicy> = match native_build {
        true => native::native(&policy_name, String::new()),
        false => wasm,
    };
    // The first calls sync the cluster into the instance (or the native copy): not measured.
    let feasible = kinds.feasible(policy.as_ref(), &cluster, &pod, &candidates);
    let scored = &feasible[..feasible.len().min(500)];
    if kinds.score {
        policy.score_or_failure_mode(&cluster, &pod, scored);
    }
    measured(policy.as_ref(), kinds, &cluster, &pod, &candidates, scored, calls);
    let build = if native_build { "native" } else { "wasm" };
    println!(
        "{policy_name} ({build}): {calls} calls of filter over {} nodes ({} feasible) and score over {} (filter: {}, score: {})",
        candidates.len(),
        feasible.len(),
        scored.len(),
        kinds.filter,
        kinds.score
    );
}

/// The component of `name`, from plugins/out.
fn component(name: &str) -> Arc<LoadedPolicy> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/out").join(format!("{name}.wasm"));
    let wasm = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}; run scripts/build-policies.sh", path.display()));
    // Compiled once into the cache outside valgrind, which would take minutes over cranelift.
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/policy-instructions-cache");
    let runtime = Runtime::new(Some(cache)).unwrap();
    Arc::new(LoadedPolicy::load(&runtime, name, &wasm, PolicyOptions::default()).unwrap())
}

/// What the policy implements, of what a scheduling cycle calls.
#[derive(Clone, Copy)]
struct Kinds {
    filter: bool,
    score: bool,
}

impl Kinds {
    /// The candidates the policy lets through (all of them, for a policy that only scores).
    fn feasible(self, policy: &dyn SchedulingPolicy, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> Vec<NodeId> {
        if !self.filter {
            return candidates.to_vec();
        }
        let result = policy.filter_or_failure_mode(cluster, pod, candidates);
        candidates.iter().zip(&result.verdicts).filter(|(_, verdict)| **verdict == 0).map(|(id, _)| *id).collect()
    }
}

/// The calls counted: what callgrind's `--toggle-collect` names.
#[inline(never)]
fn measured(policy: &dyn SchedulingPolicy, kinds: Kinds, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId], scored: &[NodeId], calls: usize) {
    for _ in 0..calls {
        if kinds.filter {
            black_box(policy.filter_or_failure_mode(cluster, pod, candidates));
        }
        if kinds.score {
            black_box(policy.score_or_failure_mode(cluster, pod, scored));
        }
    }
}

/// The test case whose node labels and pod template make the cluster.
#[derive(Clone, Copy)]
enum Workload {
    AntiAffinity,
    TopologySpreading,
}

impl Workload {
    fn named(name: &str) -> Workload {
        match name {
            "anti-affinity" => Workload::AntiAffinity,
            "topology-spreading" => Workload::TopologySpreading,
            other => panic!("no workload {other:?}: anti-affinity or topology-spreading"),
        }
    }

    fn cluster(self, nodes: usize, pods: usize) -> ClusterState {
        let mut cluster = ClusterState::new();
        for index in 0..nodes {
            let name = format!("scheduler-perf-{index}");
            let mut labels = serde_json::json!({"kubernetes.io/hostname": name});
            if let Workload::TopologySpreading = self {
                // TopologySpreading's labelNodePrepareStrategy: moon-1, moon-2, moon-3 in turn.
                labels["topology.kubernetes.io/zone"] = format!("moon-{}", index % 3 + 1).into();
            }
            let node = serde_json::json!({
                "metadata": {"name": name, "labels": labels},
                "status": {"capacity": {"pods": "110", "cpu": "4", "memory": "32Gi"}, "allocatable": {"pods": "110", "cpu": "4", "memory": "32Gi"},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            });
            cluster.upsert_node(wasp::cluster::convert::node(&serde_json::from_value(node).unwrap()).unwrap());
        }
        for index in 0..pods {
            cluster.upsert_pod(self.pod(index), &format!("scheduler-perf-{index}"));
        }
        cluster
    }

    /// The template's pod number `index`.
    fn pod(self, index: usize) -> Pod {
        let (name, labels, placement) = match self {
            Workload::AntiAffinity => (
                "anti-affinity-pod",
                serde_json::json!({"color": "green"}),
                serde_json::json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname", "namespaces": ["sched-1", "sched-0"]}]}}}),
            ),
            Workload::TopologySpreading => (
                "spreading-pod",
                serde_json::json!({"color": "blue"}),
                serde_json::json!({"topologySpreadConstraints": [
                    {"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"color": "blue"}}}]}),
            ),
        };
        let mut spec = serde_json::json!({
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.2", "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "100m", "memory": "500Mi"}, "requests": {"cpu": "100m", "memory": "500Mi"}}}],
        });
        spec.as_object_mut().unwrap().extend(placement.as_object().unwrap().clone());
        let pod = serde_json::json!({
            "metadata": {"name": format!("{name}-{index}"), "namespace": "sched-1", "uid": format!("uid-{index}"), "labels": labels},
            "spec": spec,
        });
        wasp::cluster::convert::pod(&serde_json::from_value(pod).unwrap()).unwrap()
    }
}
