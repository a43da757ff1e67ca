//! `low-node-utilization`: the descheduler's LowNodeUtilization. Nodes whose requested CPU, memory and pod
//! count are all below `thresholds` are underutilized; nodes with any of them above `targetThresholds` are
//! overutilized. Pods are proposed from the overutilized nodes (lowest priority first, then youngest) until
//! each is back under its target, or until the underutilized nodes would be filled to their targets. Usage is
//! what pods request, in percent of allocatable, as the descheduler computes it.

use serde::{Deserialize, Serialize};
use wasp_sdk::resources::ResourceVector;
use wasp_sdk::types::{EvictContext, Eviction, PodPhase, ViewScope};
use wasp_sdk::utilization::{Thresholds, Utilization};
use wasp_sdk::{Cluster, Evict, NodeFacts, NodeInfo, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    pub thresholds: Thresholds,
    pub target_thresholds: Thresholds,
    /// Act only when more than this many nodes are underutilized.
    pub number_of_nodes: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { thresholds: Thresholds::uniform(20.0), target_thresholds: Thresholds::uniform(50.0), number_of_nodes: 0 }
    }
}

pub struct LowNodeUtilization {
    settings: Settings,
}

/// Room left on the underutilized nodes up to their targets: CPU millis, memory bytes, pods.
#[derive(Debug, Default)]
struct Room {
    cpu: i128,
    memory: i128,
    pods: i128,
}

impl Room {
    fn takes(&self, requests: &ResourceVector) -> bool {
        self.cpu >= requests.cpu_millis as i128 && self.memory >= requests.memory_bytes as i128 && self.pods >= 1
    }
}

impl Policy for LowNodeUtilization {
    type Settings = Settings;
    const NAME: &'static str = "low-node-utilization";
    const NODE_FACTS: NodeFacts = NodeFacts { conditions: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { containers: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "thresholds: {cpu, memory, pods} percent of allocatable under which a node is underutilized (default 20 each)\n\
        targetThresholds: {cpu, memory, pods} percent over which a node is overutilized (default 50 each)\n\
        numberOfNodes: act only when more nodes than this are underutilized (default 0)";

    fn new(settings: Settings) -> Result<Self, String> {
        settings.thresholds.validate("thresholds")?;
        settings.target_thresholds.validate("targetThresholds")?;
        let (low, high) = (&settings.thresholds, &settings.target_thresholds);
        if low.cpu > high.cpu || low.memory > high.memory || low.pods > high.pods {
            return Err("thresholds: each must be at most its targetThresholds value".into());
        }
        Ok(LowNodeUtilization { settings })
    }
}

impl Evict for LowNodeUtilization {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let (low, target) = (&self.settings.thresholds, &self.settings.target_thresholds);
        let usable = |node: &&NodeInfo| node.node.is_ready() && !node.node.unschedulable;
        let underutilized: Vec<&NodeInfo> = cluster.nodes().filter(usable).filter(|node| Utilization::of(node).all_below(low)).collect();
        if underutilized.is_empty() || underutilized.len() as u32 <= self.settings.number_of_nodes {
            return Vec::new();
        }
        let mut room = Room::default();
        for node in &underutilized {
            let allocatable = &node.node.allocatable;
            room.cpu += (allocatable.cpu_millis as f64 * target.cpu / 100.0) as i128 - node.usage.requested.cpu_millis as i128;
            room.memory += (allocatable.memory_bytes as f64 * target.memory / 100.0) as i128 - node.usage.requested.memory_bytes as i128;
            room.pods += (node.node.allocatable_pods as f64 * target.pods / 100.0) as i128 - node.usage.pod_count as i128;
        }
        let mut overutilized: Vec<(&NodeInfo, Utilization)> =
            cluster.nodes().map(|node| (node, Utilization::of(node))).filter(|(_, usage)| usage.any_above(target)).collect();
        // The most loaded first: they gain most from the room there is.
        overutilized.sort_by(|(a, left), (b, right)| (right.cpu + right.memory).total_cmp(&(left.cpu + left.memory)).then(a.name().cmp(b.name())));
        let mut evictions = Vec::new();
        for (node, before) in overutilized {
            let mut pods: Vec<_> = cluster.pods_on(node).filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed)).collect();
            pods.sort_by_key(|bound| (bound.pod.priority, std::cmp::Reverse(bound.pod.created_at)));
            let (mut cpu, mut memory, mut count) = (node.usage.requested.cpu_millis, node.usage.requested.memory_bytes, node.usage.pod_count as u64);
            for bound in pods {
                if !Utilization::with(cpu, memory, count, node).any_above(target) {
                    break;
                }
                let requests = bound.pod.requests();
                if !room.takes(&requests) {
                    continue;
                }
                room.cpu -= requests.cpu_millis as i128;
                room.memory -= requests.memory_bytes as i128;
                room.pods -= 1;
                cpu = cpu.saturating_sub(requests.cpu_millis);
                memory = memory.saturating_sub(requests.memory_bytes);
                count = count.saturating_sub(1);
                evictions.push(Eviction::new(
                    bound.id,
                    format!(
                        "node {} is overutilized (requests: cpu {:.0}%, memory {:.0}%, pods {:.0}%; target {}/{}/{}); {} underutilized node(s) have room",
                        node.name(),
                        before.cpu,
                        before.memory,
                        before.pods,
                        target.cpu,
                        target.memory,
                        target.pods,
                        underutilized.len()
                    ),
                ));
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(LowNodeUtilization);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    fn node(name: &str) -> wasp_sdk::types::Node {
        NodeBuilder::new(name).cpu("10").memory("10Gi").max_pods(100).build()
    }

    fn pod(name: &str, cpu: &str, priority: i32) -> wasp_sdk::types::Pod {
        PodBuilder::new(name).cpu(cpu).memory("100Mi").priority(priority).owner("ReplicaSet", "web").running().build()
    }

    #[test]
    fn pods_move_from_overutilized_nodes_until_they_are_under_target() {
        let mut cluster = Cluster::for_policy::<LowNodeUtilization>();
        let hot = cluster.add_node(node("hot"));
        let idle = cluster.add_node(node("idle"));
        let important = cluster.bind(pod("important", "3", 1000), hot);
        let a = cluster.bind(pod("a", "2", 0), hot);
        let b = cluster.bind(pod("b", "2", 0), hot);
        cluster.bind(pod("c", "1", 0), idle);
        let proposals = build::<LowNodeUtilization>("").unwrap().propose(&cluster, &EvictContext::at(0));
        // hot requests 7 of 10 CPUs (70% > 50%): one 2-CPU pod brings it to 50%, which is not above the target.
        assert_eq!(proposals.len(), 1, "{proposals:?}");
        assert!([a, b].contains(&proposals[0].pod), "the lowest priority goes first, never {important}");
        assert_eq!(proposals[0].reason, "node hot is overutilized (requests: cpu 70%, memory 3%, pods 3%; target 50/50/50); 1 underutilized node(s) have room");
    }

    #[test]
    fn nothing_moves_without_underutilized_nodes_or_room() {
        let mut cluster = Cluster::for_policy::<LowNodeUtilization>();
        let hot = cluster.add_node(node("hot"));
        let warm = cluster.add_node(node("warm"));
        cluster.bind(pod("a", "8", 0), hot);
        cluster.bind(pod("b", "3", 0), warm);
        assert!(build::<LowNodeUtilization>("").unwrap().propose(&cluster, &EvictContext::at(0)).is_empty(), "warm is at 30%: not underutilized");
        let idle = cluster.add_node(node("idle"));
        cluster.bind(pod("small", "1", 0), idle);
        // idle has room up to 50% (4 CPUs): the 8-CPU pod does not fit in it.
        assert!(build::<LowNodeUtilization>("").unwrap().propose(&cluster, &EvictContext::at(0)).is_empty());
        assert!(build::<LowNodeUtilization>(r#"{"numberOfNodes": 1}"#).unwrap().propose(&cluster, &EvictContext::at(0)).is_empty());
    }

    #[test]
    fn settings_are_validated() {
        let error = |json: &str| build::<LowNodeUtilization>(json).err().unwrap();
        assert!(error(r#"{"thresholds": {"cpu": 120, "memory": 10, "pods": 10}}"#).ends_with("thresholds.cpu: 120 is outside 0..100"));
        assert!(error(r#"{"thresholds": {"cpu": 60, "memory": 10, "pods": 10}}"#).contains("at most its targetThresholds"));
    }
}
