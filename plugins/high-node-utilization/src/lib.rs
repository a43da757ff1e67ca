//! `high-node-utilization`: the descheduler's HighNodeUtilization. Nodes whose requested CPU, memory and pod
//! count are all below `thresholds` are underutilized: their pods are proposed so the cluster packs onto fewer
//! nodes and the cluster autoscaler can remove the emptied ones. Each pod goes to the fullest other node that has
//! room for it (a preferred placement, so a spreading scheduler profile still packs), and only pods that such a
//! node can take are proposed.

use serde::{Deserialize, Serialize};
use wasp_sdk::resources::ResourceVector;
use wasp_sdk::types::{EvictContext, Eviction, NodeId, Placement, PodPhase, ViewScope};
use wasp_sdk::utilization::{Thresholds, Utilization};
use wasp_sdk::{Cluster, Evict, NodeFacts, NodeInfo, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    pub thresholds: Thresholds,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { thresholds: Thresholds::uniform(20.0) }
    }
}

pub struct HighNodeUtilization {
    settings: Settings,
}

impl HighNodeUtilization {
    fn underutilized(&self, node: &NodeInfo) -> bool {
        Utilization::of(node).all_below(&self.settings.thresholds)
    }
}

impl Policy for HighNodeUtilization {
    type Settings = Settings;
    const NAME: &'static str = "high-node-utilization";
    const NODE_FACTS: NodeFacts = NodeFacts::DEFAULT;
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { containers: true, placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "thresholds: {cpu, memory, pods} percent of allocatable under which a node is emptied (default 20 each)";

    fn new(settings: Settings) -> Result<Self, String> {
        settings.thresholds.validate("thresholds")?;
        Ok(HighNodeUtilization { settings })
    }
}

impl Evict for HighNodeUtilization {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let usable = |node: &&NodeInfo| node.node.is_ready() && !node.node.unschedulable;
        let mut sources: Vec<&NodeInfo> = cluster.nodes().filter(usable).filter(|node| self.underutilized(node)).collect();
        // The emptiest first: they are the cheapest to empty.
        sources.sort_by_key(|node| (node.cpu_share_per_mille(), node.name().to_string()));
        // Room the proposals take on each target, so two pods are not sent to the last free slot of one node.
        let mut taken: Vec<(NodeId, ResourceVector, u32)> = Vec::new();
        let mut evictions = Vec::new();
        for source in &sources {
            for bound in cluster.pods_on(source).filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed)) {
                let requests = bound.pod.requests();
                let target = cluster
                    .nodes()
                    .filter(usable)
                    .filter(|node| !self.underutilized(node) && node.id != source.id)
                    .filter(|node| match taken.iter().find(|(id, _, _)| *id == node.id) {
                        None => node.has_room_for(&bound.pod),
                        // With what earlier proposals of this run already send there.
                        Some((_, resources, pods)) => {
                            let mut with_taken = (*node).clone();
                            let mut requested = ResourceVector::from(&with_taken.usage.requested);
                            requested.add(resources);
                            with_taken.usage.requested = (&requested).into();
                            with_taken.usage.pod_count += pods;
                            with_taken.has_room_for(&bound.pod)
                        }
                    })
                    .max_by_key(|node| (node.cpu_share_per_mille(), std::cmp::Reverse(node.name().to_string())));
                let Some(target) = target else { continue };
                match taken.iter_mut().find(|(id, _, _)| *id == target.id) {
                    Some((_, resources, pods)) => {
                        resources.add(&requests);
                        *pods += 1;
                    }
                    None => taken.push((target.id, requests, 1)),
                }
                let reason = format!("node {} is underutilized; packing its pods onto fuller nodes (this one onto {})", source.name(), target.name());
                evictions.push(Eviction::new(bound.id, reason).placement(Placement::PreferredNode(target.name().to_string())));
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(HighNodeUtilization);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    fn node(name: &str) -> wasp_sdk::types::Node {
        NodeBuilder::new(name).cpu("10").memory("10Gi").max_pods(100).build()
    }

    #[test]
    fn pods_of_underutilized_nodes_go_to_the_fullest_node_with_room() {
        let mut cluster = Cluster::for_policy::<HighNodeUtilization>();
        let idle = cluster.add_node(node("idle"));
        let half = cluster.add_node(node("half"));
        let full = cluster.add_node(node("full"));
        let lone = cluster.bind(PodBuilder::new("lone").cpu("1").running().build(), idle);
        cluster.bind(PodBuilder::new("h").cpu("5").running().build(), half);
        cluster.bind(PodBuilder::new("f").cpu("9").running().build(), full);
        let proposals = build::<HighNodeUtilization>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1, "{proposals:?}");
        assert_eq!(proposals[0].pod, lone);
        // `full` has exactly one CPU left: the fullest node with room.
        assert_eq!(proposals[0].placement, Some(Placement::PreferredNode("full".into())));
        assert_eq!(proposals[0].reason, "node idle is underutilized; packing its pods onto fuller nodes (this one onto full)");
    }

    #[test]
    fn room_is_counted_across_proposals_and_pods_without_a_target_stay() {
        let mut cluster = Cluster::for_policy::<HighNodeUtilization>();
        let idle = cluster.add_node(node("idle"));
        let full = cluster.add_node(node("full"));
        cluster.bind(PodBuilder::new("a").cpu("500m").running().build(), idle);
        cluster.bind(PodBuilder::new("b").cpu("500m").running().build(), idle);
        cluster.bind(PodBuilder::new("f").cpu("9500m").running().build(), full);
        let proposals = build::<HighNodeUtilization>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1, "half a CPU left on full takes one pod: {proposals:?}");
        assert!(build::<HighNodeUtilization>(r#"{"thresholds": {"cpu": -1, "memory": 1, "pods": 1}}"#).is_err());
    }
}
