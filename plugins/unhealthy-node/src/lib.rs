//! `unhealthy-node`: pods leave a node that works badly for them. A node under pressure (a `MemoryPressure`,
//! `DiskPressure` or `PIDPressure` condition that is True) or not Ready has its pods proposed; and a pod whose
//! containers keep restarting on its node while the other pods of its workload, on other nodes, do not, is
//! proposed too: the node is the likely cause.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use wasp_sdk::types::{EvictContext, Eviction, Pod, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Node conditions that, when True, make a node unhealthy.
    pub pressure_conditions: Vec<String>,
    /// Also act on nodes whose Ready condition is not True.
    pub not_ready: bool,
    /// Restarts at which a pod counts as crashing, when its workload's pods on other nodes restart at most
    /// a quarter as often.
    pub restart_threshold: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { pressure_conditions: vec!["MemoryPressure".into(), "DiskPressure".into(), "PIDPressure".into()], not_ready: true, restart_threshold: 10 }
    }
}

pub struct UnhealthyNode {
    settings: Settings,
}

fn restarts(pod: &Pod) -> u32 {
    pod.containers.iter().map(|container| container.restart_count).fold(0, u32::saturating_add)
}

impl Policy for UnhealthyNode {
    type Settings = Settings;
    const NAME: &'static str = "unhealthy-node";
    const NODE_FACTS: NodeFacts = NodeFacts { conditions: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { containers: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "pressureConditions: node conditions that mean trouble when True (default MemoryPressure, DiskPressure, PIDPressure)\n\
        notReady: act on nodes that are not Ready (default true)\n\
        restartThreshold: restarts of a pod, against at most a quarter of that for its siblings elsewhere (default 10)";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.restart_threshold == 0 {
            return Err("restartThreshold: must be at least 1".into());
        }
        Ok(UnhealthyNode { settings })
    }
}

impl Evict for UnhealthyNode {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        // Per workload (namespace, owner), the most restarts of its pods on each node.
        let mut workloads: HashMap<(&str, &str, &str), Vec<(u32, u32)>> = HashMap::new();
        for bound in cluster.pods() {
            if let Some(owner) = bound.pod.owner.as_ref().filter(|owner| owner.controller) {
                workloads.entry((&bound.pod.namespace, &owner.kind, &owner.name)).or_default().push((bound.node, restarts(&bound.pod)));
            }
        }
        let mut evictions = Vec::new();
        for node in cluster.nodes() {
            let pressure = self.settings.pressure_conditions.iter().find(|condition| node.node.condition(condition) == Some("True"));
            let sick = match pressure {
                Some(condition) => Some(format!("node {} reports {condition}", node.name())),
                None if self.settings.not_ready && !node.node.is_ready() => Some(format!("node {} is not Ready", node.name())),
                None => None,
            };
            for bound in cluster.pods_on(node).filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed)) {
                if let Some(reason) = &sick {
                    evictions.push(Eviction::new(bound.id, reason.clone()));
                    continue;
                }
                let count = restarts(&bound.pod);
                if count < self.settings.restart_threshold {
                    continue;
                }
                let Some(owner) = bound.pod.owner.as_ref().filter(|owner| owner.controller) else { continue };
                let siblings = &workloads[&(bound.pod.namespace.as_str(), owner.kind.as_str(), owner.name.as_str())];
                let elsewhere: Vec<u32> = siblings.iter().filter(|(other, _)| *other != node.id).map(|(_, restarts)| *restarts).collect();
                if !elsewhere.is_empty() && elsewhere.iter().all(|other| other.saturating_mul(4) <= count) {
                    evictions.push(Eviction::new(
                        bound.id,
                        format!(
                            "{count} restarts on node {} while its siblings on other nodes restart at most {}",
                            node.name(),
                            elsewhere.iter().max().unwrap_or(&0)
                        ),
                    ));
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(UnhealthyNode);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn pods_leave_nodes_under_pressure_or_not_ready() {
        let mut cluster = Cluster::for_policy::<UnhealthyNode>();
        let pressed = cluster.add_node(NodeBuilder::new("pressed").condition("MemoryPressure", "True").build());
        let down = cluster.add_node(NodeBuilder::new("down").condition("Ready", "Unknown").build());
        let fine = cluster.add_node(NodeBuilder::new("fine").build());
        let a = cluster.bind(PodBuilder::new("a").running().build(), pressed);
        let b = cluster.bind(PodBuilder::new("b").running().build(), down);
        cluster.bind(PodBuilder::new("c").running().build(), fine);
        let proposals = build::<UnhealthyNode>("").unwrap().propose(&cluster, &EvictContext::at(0));
        let by_pod: HashMap<_, _> = proposals.iter().map(|eviction| (eviction.pod, eviction.reason.as_str())).collect();
        assert_eq!(by_pod.len(), 2);
        assert_eq!(by_pod[&a], "node pressed reports MemoryPressure");
        assert_eq!(by_pod[&b], "node down is not Ready");
    }

    #[test]
    fn a_pod_crashing_only_where_it_is_moves() {
        let mut cluster = Cluster::for_policy::<UnhealthyNode>();
        let bad = cluster.add_node(NodeBuilder::new("bad").build());
        let good = cluster.add_node(NodeBuilder::new("good").build());
        let crashing = cluster.bind(PodBuilder::new("web-1").owner("ReplicaSet", "web").restarts(20).running().build(), bad);
        cluster.bind(PodBuilder::new("web-2").owner("ReplicaSet", "web").restarts(1).running().build(), good);
        cluster.bind(PodBuilder::new("db-1").owner("ReplicaSet", "db").restarts(20).running().build(), bad);
        cluster.bind(PodBuilder::new("db-2").owner("ReplicaSet", "db").restarts(18).running().build(), good);
        let proposals = build::<UnhealthyNode>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1, "db crashes everywhere: its image, not the node: {proposals:?}");
        assert_eq!(proposals[0].pod, crashing);
        assert_eq!(proposals[0].reason, "20 restarts on node bad while its siblings on other nodes restart at most 1");
    }
}
