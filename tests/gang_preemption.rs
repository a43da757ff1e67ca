//! Gang-aware preemption in the rescheduler's plan (`rescheduler::plan::gangs`): the victims proposed for the
//! waiting members of a gang are evicted only if, with them gone, the gang reaches its `minCount` (bound members,
//! members given room, members that fit as things are); otherwise none is, whatever each member's own room would
//! allow. The plan is the host's own, with the built-in scheduler profile as its fit check (the components built
//! by scripts/build-policies.sh), on a cluster of three nodes each holding one low-priority pod.

mod common;

use common::repo_root;
use std::sync::Arc;
use tokio::time::Instant;
use wasp::cluster::groups::GroupKey;
use wasp::cluster::volumes::VolumeObjects;
use wasp::cluster::{convert, ClusterState};
use wasp::config::{HostConfig, ReschedulerSection};
use wasp::contract::types::Eviction;
use wasp::contract::{EvictContext, PendingPod};
use wasp::registry::{Generation, PolicyRegistry};
use wasp::rescheduler::budgets::Budgets;
use wasp::rescheduler::memory::Memory;
use wasp::rescheduler::plan::gangs::PendingGang;
use wasp::rescheduler::plan::{self, Decision, Plan, Proposals, Skip};
use wasp::runtime::Runtime;

const NOW: i64 = 1_800_000_000;
const NODES: [&str; 3] = ["a", "b", "c"];

fn generation() -> Arc<Generation> {
    let mut config = HostConfig::built_in();
    config.policy_dir = repo_root().join("plugins/out");
    config.validate().unwrap();
    let runtime: Arc<Runtime> = Runtime::new(None).unwrap();
    PolicyRegistry::new(&runtime, config, None).unwrap().current()
}

/// Nodes a, b and c of 2 CPUs, each with a 1-CPU pod of priority 0 (`low-a`, ...); those named in `kept` carry
/// `wasp.dev/evict: never`. Plus `extra`, a 2-CPU node with nothing on it, when asked.
fn cluster(kept: &[&str], extra: bool) -> ClusterState {
    let mut cluster = ClusterState::new();
    for name in NODES.iter().copied().chain(extra.then_some("extra")) {
        let yaml = format!(
            "metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\n\
             status: {{allocatable: {{cpu: '2', memory: 8Gi, pods: '110'}}, conditions: [{{type: Ready, status: 'True'}}]}}"
        );
        cluster.upsert_node(convert::node(&serde_yaml::from_str(&yaml).unwrap()).unwrap());
    }
    for name in NODES {
        let annotations = if kept.contains(&name) { ", annotations: {wasp.dev/evict: never}" } else { "" };
        let yaml = format!(
            "metadata: {{name: low-{name}, namespace: batch, uid: uid-low-{name}, labels: {{app: low}}, creationTimestamp: '2026-01-01T00:00:00Z', \
             ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: low-{name}, uid: rs-{name}, controller: true}}]{annotations}}}\n\
             spec: {{schedulerName: wasp, nodeName: {name}, containers: [{{name: app, resources: {{requests: {{cpu: '1', memory: 100Mi}}}}}}]}}\n\
             status: {{phase: Running, conditions: [{{type: Ready, status: 'True'}}]}}"
        );
        let source: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&yaml).unwrap();
        cluster.upsert_pod_with(convert::pod(&source).unwrap(), name, convert::pod_meta(&source));
    }
    cluster
}

/// The gang's three waiting members, 1500m each at priority 1000: each fits on a node only without its low pod.
fn members() -> Vec<PendingPod> {
    (0..3)
        .map(|index| {
            let yaml = format!(
                "metadata: {{name: train-{index}, namespace: batch, uid: uid-train-{index}, creationTimestamp: '2026-01-01T00:00:00Z'}}\n\
                 spec: {{schedulerName: wasp, priority: 1000, schedulingGroup: {{podGroupName: train}}, \
                 containers: [{{name: app, resources: {{requests: {{cpu: 1500m, memory: 100Mi}}}}}}]}}\nstatus: {{phase: Pending}}"
            );
            let pod = convert::pod(&serde_yaml::from_str(&yaml).unwrap()).unwrap();
            PendingPod { pod, reason: "0/3 nodes are available: 3 Insufficient cpu.".into() }
        })
        .collect()
}

fn gang(min_count: usize, may_preempt: bool) -> PendingGang {
    PendingGang {
        group: GroupKey { namespace: "batch".into(), name: "train".into() },
        min_count,
        scheduled: 0,
        members: (0..3).map(|index| format!("uid-train-{index}")).collect(),
        may_preempt,
    }
}

/// What the preemption policy proposes: for member i, the low pod of node i.
fn plan_for(generation: &Generation, cluster: &ClusterState, gang: PendingGang) -> Plan {
    let section = ReschedulerSection::with_strategies(Vec::new());
    let (memory, volumes) = (Memory::default(), VolumeObjects::default());
    let gangs = [gang];
    let inputs = plan::Inputs {
        section: &section,
        plans: &generation.plans,
        memory: &memory,
        budgets: Budgets::default(),
        now: Instant::now(),
        wall: NOW,
        volumes: &volumes,
        host_namespaces: &[],
        gangs: &gangs,
    };
    let proposals = NODES
        .iter()
        .enumerate()
        .map(|(index, node)| Eviction {
            pod: cluster.pod_id(&format!("uid-low-{node}")).unwrap(),
            reason: format!("room on {node}"),
            room_for: Some(format!("uid-train-{index}")),
            placement: None,
        })
        .collect();
    let context = EvictContext { now: NOW, pending: members(), failed: Vec::new() };
    plan::plan(inputs, Proposals::given(cluster.fork(), context, vec![("make-room-for-pending".into(), proposals)]))
}

fn preempted(plan: &Plan) -> Vec<&str> {
    plan.entries.iter().filter(|entry| matches!(entry.decision, Decision::Preempt { .. })).map(|entry| entry.name.as_str()).collect()
}

#[test]
fn a_gang_gets_room_only_when_all_it_needs_can_be_made() {
    let generation = generation();

    // Every member's room may be made: all three victims go, each for its own member.
    let plan = plan_for(&generation, &cluster(&[], false), gang(3, true));
    assert_eq!(preempted(&plan), ["low-a", "low-b", "low-c"], "{}", plan.table());

    // low-c must stay: two rooms alone would leave the gang short, so neither is made.
    let plan = plan_for(&generation, &cluster(&["c"], false), gang(3, true));
    assert!(preempted(&plan).is_empty(), "a gang that would still not fit evicts nobody:\n{}", plan.table());
    let reason = |name: &str| match &plan.entries.iter().find(|entry| entry.name == name).unwrap().decision {
        Decision::Skip(skip) => (skip.kind(), skip.detail().to_string()),
        other => panic!("{name}: {other:?}"),
    };
    let (kind, detail) = reason("low-a");
    assert_eq!(kind, "preemption");
    assert!(
        detail.starts_with(
            "pod group batch/train would still not be placed: minCount (3) cannot be satisfied: 2 scheduled (0 bound, 2 given room, 0 fitting as they are)"
        ),
        "{detail}"
    );
    assert_eq!(reason("low-c").0, "protected", "the pod that must stay keeps its own reason");

    // With minCount 2, the two rooms that can be made are enough.
    let plan = plan_for(&generation, &cluster(&["c"], false), gang(2, true));
    assert_eq!(preempted(&plan), ["low-a", "low-b"], "{}", plan.table());

    // A member that fits as things are counts: room on a and b, and train-2 fits on the empty node.
    let plan = plan_for(&generation, &cluster(&["c"], true), gang(3, true));
    assert_eq!(preempted(&plan), ["low-a", "low-b"], "{}", plan.table());

    // A member with preemptionPolicy Never: the gang preempts for nobody.
    let plan = plan_for(&generation, &cluster(&[], false), gang(3, false));
    assert!(preempted(&plan).is_empty(), "{}", plan.table());
    assert!(plan.entries.iter().all(|entry| matches!(&entry.decision, Decision::Skip(Skip::Preemption(why)) if why.contains("may not preempt"))));
}
