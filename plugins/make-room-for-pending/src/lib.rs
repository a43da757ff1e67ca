//! `make-room-for-pending`: preemption as a rescheduling policy (the host runs it as the scheduler's preemption,
//! `rescheduler.preemption`). For each pod of a wasp profile that waits for room (highest priority first), finds
//! on each node the fewest pods of lower priority whose eviction lets it fit, and proposes the victims of the best
//! `maxNodesPerPod` nodes with `room-for`, best first, ranked as kube-scheduler's DefaultPreemption ranks its
//! candidates: the lowest highest-victim priority, then the smallest sum of priorities, then the fewest victims
//! (then the node name). Among pods of one priority every pod's first choice comes before any pod's second, so pods
//! that wait together (a gang's members, whose rooms the host makes all or none) are offered rooms apart; a pod the
//! scheduler tried that fits as things are (a gang's member that fit) keeps its room from the pods after it. The host checks each node's victims as a group (envelope, budgets, the pending pod's own
//! filters on that node) and takes the first group that passes, so a node whose victims a
//! PodDisruptionBudget protects is passed over for the next; it then nominates that node for the pending pod.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use wasp_sdk::resources::ResourceVector;
use wasp_sdk::types::{EvictContext, Eviction, PendingPod, Pod, PodId, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, NodeInfo, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Pending pods to make room for in one run.
    pub max_pending_per_run: u32,
    /// Victims per pending pod, at most.
    pub max_victims: u32,
    /// Only pending pods the scheduler rejected for lack of resources (`Insufficient ...`, `Too many pods`).
    pub only_for_resources: bool,
    /// Nodes offered per pending pod, best first: the host takes the first whose victims it may evict.
    pub max_nodes_per_pod: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { max_pending_per_run: 5, max_victims: 10, only_for_resources: true, max_nodes_per_pod: 3 }
    }
}

pub struct MakeRoomForPending {
    settings: Settings,
}

/// A node that room can be made on, with the victims (and their priorities) that make it.
type Room<'a> = (&'a NodeInfo, Vec<(PodId, i32)>);

/// Room the pods ahead in the queue take on each node, by node name: their requests and their pod slots.
type Reserved = HashMap<String, (ResourceVector, i64)>;

/// The fewest pods on `node`, of lower priority than `pending` and not taken already, whose removal frees what
/// `pending` requests besides the room `reserved` for pods ahead; lowest priority first, then the largest.
fn victims_on(node: &NodeInfo, cluster: &Cluster, pending: &Pod, taken: &HashSet<PodId>, reserved: &Reserved, most: usize) -> Option<Vec<(PodId, i32)>> {
    let wants = pending.requests();
    let mut free = node.free();
    let mut slots = node.node.allocatable_pods as i64 - node.usage.pod_count as i64;
    if let Some((requests, pods)) = reserved.get(node.name()) {
        free.subtract(requests);
        slots -= pods;
    }
    let fits = |free: &ResourceVector, slots: i64| {
        slots >= 1
            && free.cpu_millis >= wants.cpu_millis
            && free.memory_bytes >= wants.memory_bytes
            && free.ephemeral_storage_bytes >= wants.ephemeral_storage_bytes
            && wants.scalar.iter().all(|(name, amount)| free.get(name) >= *amount)
    };
    if fits(&free, slots) {
        return Some(Vec::new());
    }
    let mut candidates: Vec<_> = cluster
        .pods_on(node)
        .filter(|bound| bound.pod.priority < pending.priority && !taken.contains(&bound.id))
        .filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed) && !bound.pod.terminating)
        .collect();
    candidates.sort_by_key(|bound| (bound.pod.priority, std::cmp::Reverse(bound.pod.requests().cpu_millis)));
    let mut victims = Vec::new();
    for bound in candidates {
        if victims.len() >= most {
            return None;
        }
        free.add(&bound.pod.requests());
        slots += 1;
        victims.push((bound.id, bound.pod.priority));
        if fits(&free, slots) {
            return Some(victims);
        }
    }
    None
}

impl Policy for MakeRoomForPending {
    type Settings = Settings;
    const NAME: &'static str = "make-room-for-pending";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, taints: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { containers: true, placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "maxPendingPerRun: pending pods to make room for per run (default 5)\n\
        maxVictims: pods evicted for one pending pod, at most (default 10)\n\
        onlyForResources: only pods rejected for lack of resources (default true)\n\
        maxNodesPerPod: nodes offered per pending pod, best first; the host takes the first it may use (default 3)";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.max_pending_per_run == 0 || settings.max_victims == 0 || settings.max_nodes_per_pod == 0 {
            return Err("maxPendingPerRun, maxVictims and maxNodesPerPod must be at least 1".into());
        }
        Ok(MakeRoomForPending { settings })
    }
}

impl Evict for MakeRoomForPending {
    fn propose(&self, cluster: &Cluster, context: &EvictContext) -> Vec<Eviction> {
        // Victims of the pods served so far: those of their first choice, and all of them once a pod of lower
        // priority is served (a pod never takes the fallback of one that ranks above it).
        let mut taken: HashSet<PodId> = HashSet::new();
        // A pod the scheduler tried that fits as things are (a gang's member that fit, in a cycle that failed for
        // another) will be placed: the pods after it must not count on its room.
        let mut reserved: Reserved = HashMap::new();
        // Each pod served, with its nodes best first; highest priority first, as the pending pods come.
        let mut served: Vec<(&PendingPod, Vec<Room>)> = Vec::new();
        for pending in &context.pending {
            if served.len() >= self.settings.max_pending_per_run as usize {
                break;
            }
            let for_resources = pending.reason.contains("Insufficient") || pending.reason.contains("Too many pods");
            let for_its_group = pending.reason.starts_with("pod group is unschedulable");
            if pending.reason.is_empty() || (self.settings.only_for_resources && !for_resources && !for_its_group) {
                continue;
            }
            let pod = &pending.pod;
            if served.last().is_some_and(|(last, _)| last.pod.priority > pod.priority) {
                taken.extend(served.iter().flat_map(|(_, options)| options.iter().flat_map(|(_, victims)| victims.iter().map(|(id, _)| *id))));
            }
            let most = self.settings.max_victims as usize;
            let mut options: Vec<Room> = cluster
                .nodes()
                .filter(|node| pod.may_run_on(&node.node))
                .filter_map(|node| victims_on(node, cluster, pod, &taken, &reserved, most).map(|victims| (node, victims)))
                .collect();
            // Fitting somewhere already, it takes that room (the scheduler will place it); fitting nowhere even
            // so, there is nothing to do for it.
            if let Some((node, _)) = options.iter().find(|(_, victims)| victims.is_empty()) {
                let (requests, pods) = reserved.entry(node.name().to_string()).or_default();
                requests.add(&pod.requests());
                *pods += 1;
                continue;
            }
            if options.is_empty() {
                continue;
            }
            options.sort_by_cached_key(|(node, victims)| {
                let highest = victims.iter().map(|(_, priority)| *priority).max();
                let sum: i64 = victims.iter().map(|(_, priority)| i64::from(*priority)).sum();
                (highest, sum, victims.len(), node.name().to_string())
            });
            options.truncate(self.settings.max_nodes_per_pod as usize);
            taken.extend(options[0].1.iter().map(|(id, _)| *id));
            served.push((pending, options));
        }
        // Among pods of one priority (a gang's members share theirs), every pod's first choice, then every pod's
        // second, and so on: the host takes a pod's first node its checks allow, so pods that wait together get
        // the rooms they were chosen first. A choice that needs a victim offered already is left out: the host
        // names a victim once.
        let mut offered: HashSet<PodId> = HashSet::new();
        let mut evictions = Vec::new();
        for level in served.chunk_by(|(a, _), (b, _)| a.pod.priority == b.pod.priority) {
            for choice in 0..self.settings.max_nodes_per_pod as usize {
                for (pending, options) in level {
                    let Some((node, victims)) = options.get(choice) else { continue };
                    if victims.iter().any(|(id, _)| offered.contains(id)) {
                        continue;
                    }
                    let pod = &pending.pod;
                    for (id, priority) in victims {
                        offered.insert(*id);
                        let reason = format!(
                            "priority {priority} gives way on node {} to {}/{} (priority {}), which waits: {}",
                            node.name(),
                            pod.namespace,
                            pod.name,
                            pod.priority,
                            pending.reason
                        );
                        evictions.push(Eviction::new(*id, reason).room_for(&pod.uid));
                    }
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(MakeRoomForPending);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    fn waiting(pod: Pod, reason: &str) -> EvictContext {
        EvictContext { now: 0, pending: vec![PendingPod { pod, reason: reason.into() }], failed: Vec::new() }
    }

    fn important() -> Pod {
        PodBuilder::new("important").cpu("3").priority(1000).with(|pod| pod.uid = "uid-important".into()).build()
    }

    #[test]
    fn the_fewest_lowest_priority_pods_give_way_on_one_node() {
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        let busy = cluster.add_node(NodeBuilder::new("busy").cpu("4").build());
        let crowded = cluster.add_node(NodeBuilder::new("crowded").cpu("4").build());
        let big = cluster.bind(PodBuilder::new("big").cpu("3").priority(0).running().build(), busy);
        cluster.bind(PodBuilder::new("peer").cpu("1").priority(2000).running().build(), busy);
        for index in 0..4 {
            cluster.bind(PodBuilder::new(&format!("small-{index}")).cpu("1").priority(0).running().build(), crowded);
        }
        let context = waiting(important(), "0/2 nodes are available: 2 Insufficient cpu.");
        let proposals = build::<MakeRoomForPending>(r#"{"maxNodesPerPod": 1}"#).unwrap().propose(&cluster, &context);
        assert_eq!(proposals.len(), 1, "one pod on busy, three on crowded: {proposals:?}");
        assert_eq!(proposals[0].pod, big);
        assert_eq!(proposals[0].room_for.as_deref(), Some("uid-important"));
        assert!(proposals[0].reason.starts_with("priority 0 gives way on node busy to default/important (priority 1000)"), "{}", proposals[0].reason);
        // By default the next node follows, for the host to take if busy's pod may not go.
        let proposals = build::<MakeRoomForPending>("").unwrap().propose(&cluster, &context);
        let nodes: Vec<&str> = proposals.iter().map(|eviction| eviction.reason.split(" on node ").nth(1).unwrap().split(' ').next().unwrap()).collect();
        assert_eq!(nodes, ["busy", "crowded", "crowded", "crowded"]);
    }

    #[test]
    fn pods_that_wait_together_are_offered_their_first_choices_first_and_apart() {
        // Two members of a gang, each needing a node's low pod gone; either node would do for either.
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        for name in ["a", "b"] {
            let node = cluster.add_node(NodeBuilder::new(name).cpu("4").build());
            cluster.bind(PodBuilder::new(&format!("low-{name}")).cpu("3").priority(0).running().build(), node);
        }
        let member = |name: &str| PodBuilder::new(name).cpu("3").priority(1000).with(|pod| pod.uid = format!("uid-{name}")).build();
        let reason = "0/2 nodes are available: 2 Insufficient cpu.";
        let pending = ["train-0", "train-1"].map(|name| PendingPod { pod: member(name), reason: reason.into() }).to_vec();
        let context = EvictContext { now: 0, pending, failed: Vec::new() };
        let proposals = build::<MakeRoomForPending>("").unwrap().propose(&cluster, &context);
        let offered: Vec<(&str, &str)> = proposals
            .iter()
            .map(|eviction| (eviction.room_for.as_deref().unwrap(), eviction.reason.split(" on node ").nth(1).unwrap().split(' ').next().unwrap()))
            .collect();
        // train-0's second choice (b) is train-1's first: offered once, for train-1.
        assert_eq!(offered, [("uid-train-0", "a"), ("uid-train-1", "b")]);
    }

    #[test]
    fn a_pod_that_fits_as_things_are_keeps_its_room_from_the_pods_after_it() {
        // train-0 fit in its gang's cycle (on the empty node a) and waits for train-1, which needs room: a must not
        // be counted twice, so b's low pod is offered for train-1.
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        cluster.add_node(NodeBuilder::new("a").cpu("4").build());
        let b = cluster.add_node(NodeBuilder::new("b").cpu("4").build());
        let low = cluster.bind(PodBuilder::new("low").cpu("3").priority(0).running().build(), b);
        let member = |name: &str| PodBuilder::new(name).cpu("3").priority(1000).with(|pod| pod.uid = format!("uid-{name}")).build();
        let pending = vec![
            PendingPod { pod: member("train-0"), reason: "pod group is unschedulable, minCount (2) cannot be satisfied: 1 scheduled, 0 remaining".into() },
            PendingPod { pod: member("train-1"), reason: "0/2 nodes are available: 1 Insufficient cpu.".into() },
        ];
        let proposals = build::<MakeRoomForPending>("").unwrap().propose(&cluster, &EvictContext { now: 0, pending, failed: Vec::new() });
        assert_eq!(proposals.len(), 1, "{proposals:?}");
        assert_eq!((proposals[0].pod, proposals[0].room_for.as_deref()), (low, Some("uid-train-1")));
    }

    #[test]
    fn a_pod_never_takes_the_fallback_of_one_that_ranks_above_it() {
        // Both need a node's low pod; the first, of higher priority, is offered a and b; the second nothing.
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        for name in ["a", "b"] {
            let node = cluster.add_node(NodeBuilder::new(name).cpu("4").build());
            cluster.bind(PodBuilder::new(&format!("low-{name}")).cpu("3").priority(0).running().build(), node);
        }
        let pod = |name: &str, priority: i32| PodBuilder::new(name).cpu("3").priority(priority).with(|pod| pod.uid = format!("uid-{name}")).build();
        let reason = "0/2 nodes are available: 2 Insufficient cpu.";
        let pending = [("first", 2000), ("second", 1000)].map(|(name, priority)| PendingPod { pod: pod(name, priority), reason: reason.into() }).to_vec();
        let proposals = build::<MakeRoomForPending>("").unwrap().propose(&cluster, &EvictContext { now: 0, pending, failed: Vec::new() });
        let offered: Vec<&str> = proposals.iter().map(|eviction| eviction.room_for.as_deref().unwrap()).collect();
        assert_eq!(offered, ["uid-first", "uid-first"], "{proposals:?}");
    }

    #[test]
    fn a_node_the_pod_may_not_run_on_is_not_offered() {
        // The tainted node's victim would be the cheapest, and the selector rules out the other one.
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        let tainted = cluster.add_node(NodeBuilder::new("tainted").cpu("4").taint("dedicated", "gpu", wasp_sdk::types::TaintEffect::NoSchedule).build());
        let elsewhere = cluster.add_node(NodeBuilder::new("elsewhere").cpu("4").label("pool", "other").build());
        let fitting = cluster.add_node(NodeBuilder::new("fitting").cpu("4").label("pool", "main").build());
        for node in [tainted, elsewhere] {
            cluster.bind(PodBuilder::new("low").cpu("4").priority(0).running().build(), node);
        }
        for index in 0..2 {
            cluster.bind(PodBuilder::new(&format!("mid-{index}")).cpu("2").priority(1).running().build(), fitting);
        }
        let pod = PodBuilder::new("important").cpu("3").priority(1000).node_selector("pool", "main").with(|pod| pod.uid = "uid-important".into()).build();
        let proposals = build::<MakeRoomForPending>("").unwrap().propose(&cluster, &waiting(pod, "0/3 nodes are available: 3 Insufficient cpu."));
        assert_eq!(proposals.len(), 2, "{proposals:?}");
        assert!(proposals.iter().all(|eviction| eviction.reason.contains("on node fitting")), "{proposals:?}");
    }

    #[test]
    fn nodes_are_ranked_as_kube_scheduler_ranks_preemption_candidates() {
        // a: one victim of priority 10; b: two of priority 0; c: one of priority 0 and one of 5. The lowest
        // highest-victim priority comes first (b 0, c 5, a 10), though a needs the fewest victims.
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        let a = cluster.add_node(NodeBuilder::new("a").cpu("4").build());
        let b = cluster.add_node(NodeBuilder::new("b").cpu("4").build());
        let c = cluster.add_node(NodeBuilder::new("c").cpu("4").build());
        cluster.bind(PodBuilder::new("a-1").cpu("4").priority(10).running().build(), a);
        for index in 0..2 {
            cluster.bind(PodBuilder::new(&format!("b-{index}")).cpu("2").priority(0).running().build(), b);
        }
        cluster.bind(PodBuilder::new("c-0").cpu("2").priority(0).running().build(), c);
        cluster.bind(PodBuilder::new("c-5").cpu("2").priority(5).running().build(), c);
        let proposals = build::<MakeRoomForPending>("").unwrap().propose(&cluster, &waiting(important(), "0/3 nodes are available: 3 Insufficient cpu."));
        let nodes: Vec<&str> = proposals.iter().map(|eviction| eviction.reason.split(" on node ").nth(1).unwrap().split(' ').next().unwrap()).collect();
        assert_eq!(nodes, ["b", "b", "c", "c", "a"]);
    }

    #[test]
    fn higher_priority_pods_never_give_way_and_other_reasons_are_left_alone() {
        let mut cluster = Cluster::for_policy::<MakeRoomForPending>();
        let node = cluster.add_node(NodeBuilder::new("n").cpu("4").build());
        cluster.bind(PodBuilder::new("vip").cpu("4").priority(5000).running().build(), node);
        let policy = build::<MakeRoomForPending>("").unwrap();
        assert!(policy.propose(&cluster, &waiting(important(), "0/1 nodes are available: 1 Insufficient cpu.")).is_empty());
        let mut other = Cluster::for_policy::<MakeRoomForPending>();
        let node = other.add_node(NodeBuilder::new("n").cpu("4").build());
        other.bind(PodBuilder::new("low").cpu("4").running().build(), node);
        assert!(policy.propose(&other, &waiting(important(), "0/1 nodes are available: 1 node(s) had untolerated taint {a: b}.")).is_empty());
        assert!(policy.propose(&other, &waiting(important(), "")).is_empty(), "not tried by the scheduler yet");
        assert_eq!(policy.propose(&other, &waiting(important(), "0/1 nodes are available: 1 Insufficient cpu.")).len(), 1);
    }
}
