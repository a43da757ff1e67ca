//! `drain-for-maintenance`: empties nodes marked for maintenance, so nobody runs `kubectl drain` by hand. A
//! node is marked by a label (`wasp.dev/maintenance` by default, any value) or a taint with that key; every pod
//! on it is proposed, whatever it tolerates. The host paces the drain (one pod per workload until its
//! replacement is Ready), keeps PodDisruptionBudgets, and skips DaemonSet and static pods. Each replacement is
//! given the least loaded node with room (a preferred placement); `node-unschedulable` keeps the pods of wasp's
//! profiles off a labelled node, and a taint (or a cordon) keeps every scheduler's pods away.

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{EvictContext, Eviction, Placement, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, NodeInfo, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// A node with this label, or a taint with this key, is drained.
    pub key: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { key: "wasp.dev/maintenance".into() }
    }
}

pub struct DrainForMaintenance {
    settings: Settings,
}

impl DrainForMaintenance {
    fn marked(&self, node: &NodeInfo) -> bool {
        let key = &self.settings.key;
        node.node.label(key).is_some() || node.node.taints.iter().any(|taint| taint.key == *key)
    }
}

impl Policy for DrainForMaintenance {
    type Settings = Settings;
    const NAME: &'static str = "drain-for-maintenance";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, taints: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { containers: true, placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "key: label or taint key marking nodes to drain (default wasp.dev/maintenance)";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.key.is_empty() {
            return Err("key: must not be empty".into());
        }
        Ok(DrainForMaintenance { settings })
    }
}

impl Evict for DrainForMaintenance {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let mut evictions = Vec::new();
        for node in cluster.nodes().filter(|node| self.marked(node)) {
            for bound in cluster.pods_on(node).filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed)) {
                let reason = format!("node {} is marked for maintenance ({})", node.name(), self.settings.key);
                let mut eviction = Eviction::new(bound.id, reason);
                if node.node.may_take_new_pods() {
                    let target = cluster
                        .nodes()
                        .filter(|other| other.id != node.id && !self.marked(other) && other.has_room_for(&bound.pod))
                        .min_by_key(|other| (other.cpu_share_per_mille(), other.name().to_string()));
                    if let Some(target) = target {
                        eviction = eviction.placement(Placement::PreferredNode(target.name().to_string()));
                    }
                }
                evictions.push(eviction);
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(DrainForMaintenance);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};
    use wasp_sdk::types::TaintEffect;

    #[test]
    fn every_pod_of_a_marked_node_is_proposed_with_a_place_to_go() {
        let mut cluster = Cluster::for_policy::<DrainForMaintenance>();
        let marked = cluster.add_node(NodeBuilder::new("old").cpu("8").label("wasp.dev/maintenance", "kernel-upgrade").build());
        let busy = cluster.add_node(NodeBuilder::new("busy").cpu("8").build());
        cluster.add_node(NodeBuilder::new("quiet").cpu("8").build());
        cluster.bind(PodBuilder::new("load").cpu("4").running().build(), busy);
        let tolerant = cluster.bind(PodBuilder::new("tolerant").cpu("1").toleration("", None, None).running().build(), marked);
        let proposals = build::<DrainForMaintenance>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1);
        assert_eq!(proposals[0].pod, tolerant, "tolerations do not keep a pod on a node under maintenance");
        assert_eq!(proposals[0].reason, "node old is marked for maintenance (wasp.dev/maintenance)");
        assert_eq!(proposals[0].placement, Some(Placement::PreferredNode("quiet".into())), "the least loaded node with room");
    }

    #[test]
    fn a_pod_no_other_node_can_take_gets_no_place_to_go() {
        let mut cluster = Cluster::for_policy::<DrainForMaintenance>();
        let marked = cluster.add_node(NodeBuilder::new("old").cpu("16").label("wasp.dev/maintenance", "yes").label("pool", "x").build());
        cluster.add_node(NodeBuilder::new("other").cpu("8").build());
        cluster.bind(PodBuilder::new("pinned").node_selector("pool", "x").running().build(), marked);
        cluster.bind(PodBuilder::new("big").cpu("9").running().build(), marked);
        let proposals = build::<DrainForMaintenance>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 2);
        assert!(proposals.iter().all(|eviction| eviction.placement.is_none()), "{proposals:?}");
    }

    #[test]
    fn a_tainted_node_is_drained_and_its_taint_keeps_replacements_away_by_itself() {
        let mut cluster = Cluster::for_policy::<DrainForMaintenance>();
        let node = cluster.add_node(NodeBuilder::new("n").taint("wasp.dev/maintenance", "", TaintEffect::NoSchedule).build());
        cluster.add_node(NodeBuilder::new("other").build());
        cluster.bind(PodBuilder::new("p").running().build(), node);
        let proposals = build::<DrainForMaintenance>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1);
        assert_eq!(proposals[0].placement, None);
        assert!(build::<DrainForMaintenance>(r#"{"key": ""}"#).is_err());
    }
}
