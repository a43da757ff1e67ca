//! Property tests of the rescheduler's safety envelope: over random clusters (nodes of three sizes, some tainted
//! or cordoned; pods of four workloads, DaemonSets and bare pods in three namespaces, some unready, annotated
//! `never` or with local storage; PodDisruptionBudgets) and random proposals (moves with and without a placement,
//! victims for a pending pod), no plan exceeds a limit, evicts a protected pod, spends more than a budget allows,
//! or sends a pod (or the pending pod) to a node where it does not fit. The plan is the host's own
//! (`rescheduler::plan`) with the built-in scheduler profile as its fit check (the components built by
//! scripts/build-policies.sh); the checks here recount everything from the random case. Seeded: the same cases
//! every run, and a failure shrinks to a small one.

mod common;

use common::repo_root;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
// The plan reads tokio's clock (simulated time under `wasp simulate`).
use tokio::time::Instant;
use wasp::cluster::volumes::VolumeObjects;
use wasp::cluster::{convert, ClusterState};
use wasp::config::{HostConfig, ReschedulerSection};
use wasp::contract::types::{Eviction, Placement};
use wasp::contract::{EvictContext, PendingPod};
use wasp::registry::{Generation, PolicyRegistry};
use wasp::rescheduler::budgets::Budgets;
use wasp::rescheduler::memory::Memory;
use wasp::rescheduler::plan::{self, Decision, Plan, Proposals};
use wasp::runtime::Runtime;

/// Seconds since the Unix epoch at planning time; every pod is older.
const NOW: i64 = 1_800_000_000;
const WORKLOADS: usize = 5;
const PENDING_UID: &str = "uid-pending";
/// The host's own namespace, protected like kube-system.
const HOST_NAMESPACE: &str = "wasp-system";

#[derive(Debug, Clone)]
struct NodeSpec {
    cpu_millis: u32,
    tainted: bool,
    cordoned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Owner {
    ReplicaSet(usize),
    DaemonSet,
    Bare,
}

#[derive(Debug, Clone)]
struct PodSpec {
    /// For DaemonSet and bare pods; a ReplicaSet's pods are in its own namespace.
    namespace: &'static str,
    owner: Owner,
    cpu_millis: u32,
    /// The node tried first; the next ones in turn until one has room.
    node: usize,
    ready: bool,
    never: bool,
    local_storage: bool,
}

#[derive(Debug, Clone)]
struct ProposalSpec {
    pod: usize,
    /// 0: none, 1: a required node, 2: a preferred node.
    placement: u8,
    node: usize,
    /// A victim for the pending pod rather than a move.
    room: bool,
    /// Which of the two strategies proposes it.
    second: bool,
}

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<NodeSpec>,
    pods: Vec<PodSpec>,
    /// (workload, disruptions allowed): a budget over the workload's pods.
    budgets: Vec<(usize, i32)>,
    proposals: Vec<ProposalSpec>,
    /// maxPerRun, maxPerNode, maxPerNamespace, maxPerWorkload.
    limits: (u32, u32, u32, u32),
    pending_cpu_millis: u32,
}

fn workload_namespace(workload: usize) -> &'static str {
    ["team-a", "team-b", "team-a", "team-b", "kube-system"][workload % WORKLOADS]
}

fn case() -> impl Strategy<Value = Case> {
    let node = (prop::sample::select(vec![2000u32, 4000, 8000]), prop::bool::weighted(0.15), prop::bool::weighted(0.1))
        .prop_map(|(cpu_millis, tainted, cordoned)| NodeSpec { cpu_millis, tainted, cordoned });
    let owner = prop_oneof![10 => (0..WORKLOADS).prop_map(Owner::ReplicaSet), 1 => Just(Owner::DaemonSet), 1 => Just(Owner::Bare)];
    let pod = (
        prop::sample::select(vec!["team-a", "team-b", "kube-system", HOST_NAMESPACE]),
        owner,
        prop::sample::select(vec![100u32, 250, 500, 1000]),
        0..8usize,
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(namespace, owner, cpu_millis, node, ready, never, local_storage)| PodSpec {
            namespace,
            owner,
            cpu_millis,
            node,
            ready,
            never,
            local_storage,
        });
    let proposal = (0..32usize, 0..3u8, 0..8usize, prop::bool::weighted(0.25), any::<bool>()).prop_map(|(pod, placement, node, room, second)| ProposalSpec {
        pod,
        placement,
        node,
        room,
        second,
    });
    (
        prop::collection::vec(node, 2..6),
        prop::collection::vec(pod, 1..32),
        // Most workloads have a budget (allowing 0, 1 or 2 disruptions); now and then the first has two.
        (prop::collection::vec(prop::option::weighted(0.7, 0..3i32), WORKLOADS), prop::bool::weighted(0.1)).prop_map(|(allowed, twice)| {
            let budgets = allowed.into_iter().enumerate().filter_map(|(workload, allowed)| Some((workload, allowed?)));
            budgets.chain(twice.then_some((0, 1))).collect::<Vec<_>>()
        }),
        prop::collection::vec(proposal, 0..24),
        (1..8u32, 1..4u32, 1..6u32, 1..4u32),
        prop::sample::select(vec![500u32, 1000, 2000]),
    )
        .prop_map(|(nodes, pods, budgets, proposals, limits, pending_cpu_millis)| Case { nodes, pods, budgets, proposals, limits, pending_cpu_millis })
}

/// A pod as placed in the cluster.
struct Placed {
    uid: String,
    node: usize,
    spec: PodSpec,
}

impl Placed {
    fn namespace(&self) -> &'static str {
        match self.spec.owner {
            Owner::ReplicaSet(workload) => workload_namespace(workload),
            Owner::DaemonSet | Owner::Bare => self.spec.namespace,
        }
    }
}

struct Built {
    cluster: ClusterState,
    placed: Vec<Placed>,
    /// CPU requested on each node, in millicores.
    used: Vec<u32>,
    budgets: Vec<PodDisruptionBudget>,
    pending: PendingPod,
}

fn node_name(index: usize) -> String {
    format!("node-{index}")
}

fn build(case: &Case) -> Built {
    let mut cluster = ClusterState::new();
    for (index, node) in case.nodes.iter().enumerate() {
        let taints = if node.tainted { "taints: [{key: maintenance, value: 'true', effect: NoSchedule}], " } else { "" };
        let yaml = format!(
            "metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\nspec: {{{taints}unschedulable: {}}}\n\
             status: {{allocatable: {{cpu: {}m, memory: 16Gi, pods: '110'}}, conditions: [{{type: Ready, status: 'True'}}]}}",
            node.cordoned,
            node.cpu_millis,
            name = node_name(index)
        );
        cluster.upsert_node(convert::node(&serde_yaml::from_str(&yaml).unwrap()).unwrap());
    }
    let mut used = vec![0u32; case.nodes.len()];
    let mut placed = Vec::new();
    for (index, spec) in case.pods.iter().enumerate() {
        // Pods are where they fit (they may have come before a taint or a cordon).
        let count = case.nodes.len();
        let Some(node) = (0..count).map(|offset| (spec.node + offset) % count).find(|node| used[*node] + spec.cpu_millis <= case.nodes[*node].cpu_millis)
        else {
            continue;
        };
        used[node] += spec.cpu_millis;
        let uid = format!("uid-{index}");
        let pod = Placed { uid: uid.clone(), node, spec: spec.clone() };
        let (labels, owner) = match spec.owner {
            Owner::ReplicaSet(workload) => (
                format!("{{app: w{workload}}}"),
                format!(", ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: w{workload}, uid: rs-{workload}, controller: true}}]"),
            ),
            Owner::DaemonSet => {
                ("{app: agent}".into(), ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: ds, controller: true}]".into())
            }
            Owner::Bare => ("{app: bare}".into(), String::new()),
        };
        let annotations = if spec.never { ", annotations: {wasp.dev/evict: never}" } else { "" };
        let volumes = if spec.local_storage { ", volumes: [{name: scratch, emptyDir: {}}]" } else { "" };
        let yaml = format!(
            "metadata: {{name: p{index}, namespace: {namespace}, uid: {uid}, labels: {labels}, creationTimestamp: '2026-01-01T00:00:00Z'{owner}{annotations}}}\n\
             spec: {{schedulerName: wasp, nodeName: {node_name}, containers: [{{name: app, resources: {{requests: {{cpu: {cpu}m, memory: 100Mi}}}}}}]{volumes}}}\n\
             status: {{phase: Running, conditions: [{{type: Ready, status: '{ready}'}}]}}",
            namespace = pod.namespace(),
            node_name = node_name(node),
            cpu = spec.cpu_millis,
            ready = if spec.ready { "True" } else { "False" },
        );
        let source: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&yaml).unwrap();
        cluster.upsert_pod_with(convert::pod(&source).unwrap(), &node_name(node), convert::pod_meta(&source));
        placed.push(pod);
    }
    let budgets = case
        .budgets
        .iter()
        .enumerate()
        .map(|(index, (workload, allowed))| {
            let yaml = format!(
                "metadata: {{name: budget-{index}, namespace: {}, generation: 1}}\nspec: {{minAvailable: 1, selector: {{matchLabels: {{app: w{workload}}}}}}}\n\
                 status: {{disruptionsAllowed: {allowed}, currentHealthy: 3, desiredHealthy: 2, expectedPods: 3, observedGeneration: 1}}",
                workload_namespace(*workload)
            );
            serde_yaml::from_str(&yaml).unwrap()
        })
        .collect();
    let yaml = format!(
        "metadata: {{name: pending, namespace: team-b, uid: {PENDING_UID}, creationTimestamp: '2026-01-01T00:00:00Z'}}\n\
         spec: {{schedulerName: wasp, priority: 1000, containers: [{{name: app, resources: {{requests: {{cpu: {}m, memory: 100Mi}}}}}}]}}\nstatus: {{phase: Pending}}",
        case.pending_cpu_millis
    );
    let pending = PendingPod { pod: convert::pod(&serde_yaml::from_str(&yaml).unwrap()).unwrap(), reason: "0/1 nodes are available".into() };
    Built { cluster, placed, used, budgets, pending }
}

/// The random proposals as two strategies' answers.
fn answers(case: &Case, built: &Built) -> Vec<(String, Vec<Eviction>)> {
    if built.placed.is_empty() {
        return Vec::new();
    }
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for proposal in &case.proposals {
        let pod = &built.placed[proposal.pod % built.placed.len()];
        let node = node_name(proposal.node % case.nodes.len());
        let placement = match (proposal.room, proposal.placement) {
            (true, _) | (false, 0) => None,
            (false, 1) => Some(Placement::RequiredNode(node)),
            (false, _) => Some(Placement::PreferredNode(node)),
        };
        let eviction = Eviction {
            pod: built.cluster.pod_id(&pod.uid).unwrap(),
            reason: "proposed at random".into(),
            room_for: proposal.room.then(|| PENDING_UID.to_string()),
            placement,
        };
        if proposal.second { &mut second } else { &mut first }.push(eviction);
    }
    vec![("first".into(), first), ("second".into(), second)]
}

fn make_plan(generation: &Generation, case: &Case, built: &Built) -> Plan {
    let mut section = ReschedulerSection::with_strategies(Vec::new());
    let (run, node, namespace, workload) = case.limits;
    section.limits =
        serde_yaml::from_str(&format!("{{maxPerRun: {run}, maxPerNode: {node}, maxPerNamespace: {namespace}, maxPerWorkload: {workload}}}")).unwrap();
    let (budgets, warnings) = Budgets::from_objects(&built.budgets);
    assert!(warnings.is_empty(), "{warnings:?}");
    let memory = Memory::default();
    let volumes = VolumeObjects::default();
    let inputs = plan::Inputs {
        section: &section,
        plans: &generation.plans,
        memory: &memory,
        budgets,
        now: Instant::now(),
        wall: NOW,
        volumes: &volumes,
        host_namespaces: &[HOST_NAMESPACE],
        gangs: &[],
    };
    let context = EvictContext { now: NOW, pending: vec![built.pending.clone()], failed: Vec::new() };
    plan::plan(inputs, Proposals::given(built.cluster.fork(), context, answers(case, built)))
}

/// Everything the plan must hold to, recounted from the case.
fn holds(case: &Case, built: &Built, plan: &Plan) -> Result<(), TestCaseError> {
    let table = plan.table();
    let by_uid: HashMap<&str, &Placed> = built.placed.iter().map(|pod| (pod.uid.as_str(), pod)).collect();
    // In the order the plan decided them: a pending pod's victims on one node together, where the first of them is.
    let group_start = |entry: &plan::PlanEntry| {
        let first = plan.entries.iter().position(|other| other.room_for.is_some() && other.room_for == entry.room_for && other.node == entry.node);
        first.unwrap_or_else(|| plan.entries.iter().position(|other| other.uid == entry.uid).unwrap())
    };
    let mut evicted: Vec<(&plan::PlanEntry, &Placed)> = plan.evictions().map(|entry| (entry, by_uid[entry.uid.as_str()])).collect();
    evicted.sort_by_key(|(entry, _)| group_start(entry));

    // Limits: per run, node, namespace; per workload for moves (a preemption's victims are not paced).
    let (max_run, max_node, max_namespace, max_workload) = case.limits;
    prop_assert!(evicted.len() as u32 <= max_run, "maxPerRun {max_run}:\n{table}");
    let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
    let mut per_namespace: BTreeMap<&str, u32> = BTreeMap::new();
    let mut per_workload: BTreeMap<usize, u32> = BTreeMap::new();
    for (entry, pod) in &evicted {
        *per_node.entry(pod.node).or_default() += 1;
        *per_namespace.entry(pod.namespace()).or_default() += 1;
        if let (Decision::Evict { .. }, Owner::ReplicaSet(workload)) = (&entry.decision, pod.spec.owner) {
            *per_workload.entry(workload).or_default() += 1;
        }
    }
    prop_assert!(per_node.values().all(|count| *count <= max_node), "maxPerNode {max_node}: {per_node:?}\n{table}");
    prop_assert!(per_namespace.values().all(|count| *count <= max_namespace), "maxPerNamespace {max_namespace}: {per_namespace:?}\n{table}");
    prop_assert!(per_workload.values().all(|count| *count <= max_workload), "maxPerWorkload {max_workload}: {per_workload:?}\n{table}");

    // Protections.
    for (entry, pod) in &evicted {
        let protected = ["kube-system", HOST_NAMESPACE].contains(&pod.namespace())
            || !matches!(pod.spec.owner, Owner::ReplicaSet(_))
            || pod.spec.never
            || pod.spec.local_storage;
        prop_assert!(!protected, "{} is protected ({:?}):\n{table}", entry.key(), pod.spec);
    }

    // Budgets, as the Eviction API counts them (every budget here has 3 healthy pods and wants 2): a pod under two
    // budgets is refused; an unready pod passes free while its budget has the healthy pods it wants, and otherwise
    // spends a disruption like a Ready one; a Ready pod spends one and leaves one healthy pod fewer.
    let mut budgets_of: HashMap<usize, Vec<i32>> = HashMap::new();
    for (workload, allowed) in &case.budgets {
        budgets_of.entry(*workload).or_default().push(*allowed);
    }
    let mut left: HashMap<usize, (i32, i32)> = budgets_of.iter().map(|(workload, allowed)| (*workload, (allowed[0], 3))).collect();
    for (entry, pod) in &evicted {
        let Owner::ReplicaSet(workload) = pod.spec.owner else { continue };
        let Some(budgets) = budgets_of.get(&workload) else { continue };
        prop_assert!(budgets.len() == 1, "{} is selected by {} budgets:\n{table}", entry.key(), budgets.len());
        let (allowed, healthy) = left.get_mut(&workload).unwrap();
        if !pod.spec.ready && *healthy >= 2 {
            continue;
        }
        prop_assert!(*allowed > 0, "{} spends a disruption its budget (w{workload}, {} allowed) no longer has:\n{table}", entry.key(), budgets[0]);
        *allowed -= 1;
        if pod.spec.ready {
            *healthy -= 1;
        }
    }

    // Fit: after every eviction, every moved pod on its target and the pending pod on the node made for it, no
    // node that received one is over its CPU, and none is tainted or cordoned (no pod here tolerates that).
    let mut used = built.used.clone();
    let index_of = |name: &str| name.strip_prefix("node-").and_then(|index| index.parse::<usize>().ok()).unwrap();
    for (_, pod) in &evicted {
        used[pod.node] -= pod.spec.cpu_millis;
    }
    let mut received = HashSet::new();
    let mut rooms = HashSet::new();
    for (entry, pod) in &evicted {
        match &entry.decision {
            Decision::Evict { target } => {
                let target = index_of(target);
                prop_assert!(target != pod.node, "{} moves to its own node:\n{table}", entry.key());
                used[target] += pod.spec.cpu_millis;
                received.insert(target);
            }
            Decision::Preempt { node, .. } => {
                if rooms.insert(index_of(node)) {
                    used[index_of(node)] += case.pending_cpu_millis;
                    received.insert(index_of(node));
                }
            }
            Decision::Clear | Decision::Skip(_) => {}
        }
    }
    prop_assert!(rooms.len() <= 1, "room made for one pending pod on {rooms:?}:\n{table}");
    for node in received {
        let spec = &case.nodes[node];
        prop_assert!(used[node] <= spec.cpu_millis, "{} holds {}m of {}m CPU after the plan:\n{table}", node_name(node), used[node], spec.cpu_millis);
        prop_assert!(!spec.tainted && !spec.cordoned, "{} receives a pod though it is tainted or cordoned ({spec:?}):\n{table}", node_name(node));
    }
    Ok(())
}

#[test]
fn no_plan_breaks_a_limit_a_protection_a_budget_or_a_fit() {
    let mut config = HostConfig::built_in();
    config.policy_dir = repo_root().join("plugins/out");
    config.validate().unwrap();
    let runtime: Arc<Runtime> = Runtime::new(None).unwrap();
    let registry = PolicyRegistry::new(&runtime, config, None).unwrap();
    let generation = registry.current();
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]));
    let (planned, evictions) = (Cell::new(0), Cell::new(0));
    runner
        .run(&case(), |case| {
            let built = build(&case);
            let plan = make_plan(&generation, &case, &built);
            planned.set(planned.get() + plan.entries.len());
            evictions.set(evictions.get() + plan.evictions().count());
            holds(&case, &built, &plan)
        })
        .unwrap();
    let (planned, evictions) = (planned.get(), evictions.get());
    // The cases must reach the checks: proposals planned, and some of them evicted.
    println!("{planned} candidates planned, {evictions} evicted over the cases");
    assert!(evictions >= 20, "the random cases evicted only {evictions} pods of {planned} candidates");
}
