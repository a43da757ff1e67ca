//! `remove-duplicates`: the descheduler's RemoveDuplicates. Pods of one controller crowded on one node are a
//! single point of failure: when a workload has more pods on a node than an even spread over the nodes it may
//! run on would give (`ceil(pods / nodes)`), the surplus is proposed, youngest first. The host's fit check
//! decides whether they land elsewhere.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wasp_sdk::types::{EvictContext, Eviction, PodId, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, PodFacts, Policy};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Owner kinds whose pods are never counted as duplicates (say `ReplicaSet`).
    pub exclude_owner_kinds: Vec<String>,
}

pub struct RemoveDuplicates {
    settings: Settings,
}

/// A workload: namespace, owner kind and owner name.
type OwnerKey = (String, String, String);

impl Policy for RemoveDuplicates {
    type Settings = Settings;
    const NAME: &'static str = "remove-duplicates";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, taints: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "excludeOwnerKinds: owner kinds whose pods are never duplicates (default none)";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.exclude_owner_kinds.iter().any(String::is_empty) {
            return Err("excludeOwnerKinds: an entry is empty".into());
        }
        Ok(RemoveDuplicates { settings })
    }
}

impl Evict for RemoveDuplicates {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        // Per workload, per node (by name, for a stable order), its pods.
        let mut workloads: BTreeMap<OwnerKey, BTreeMap<&str, Vec<PodId>>> = BTreeMap::new();
        for node in cluster.nodes() {
            for bound in cluster.pods_on(node) {
                let pod = &bound.pod;
                let Some(owner) = pod.owner.as_ref().filter(|owner| owner.controller) else { continue };
                if matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) || self.settings.exclude_owner_kinds.contains(&owner.kind) {
                    continue;
                }
                let key = (pod.namespace.clone(), owner.kind.clone(), owner.name.clone());
                workloads.entry(key).or_default().entry(node.name()).or_default().push(bound.id);
            }
        }
        let mut evictions = Vec::new();
        for ((namespace, kind, name), per_node) in workloads {
            if per_node.values().all(|pods| pods.len() < 2) {
                continue;
            }
            let total: usize = per_node.values().map(Vec::len).sum();
            let Some(sample) = per_node.values().flatten().next().and_then(|id| cluster.pod(*id)) else { continue };
            let targets = cluster.nodes().filter(|node| sample.pod.may_run_on(&node.node)).count();
            if targets < 2 {
                continue;
            }
            let most = total.div_ceil(targets);
            for (node, mut pods) in per_node {
                if pods.len() <= most {
                    continue;
                }
                // Youngest first: the oldest pods have warmed caches and a history worth keeping.
                pods.sort_by_key(|id| std::cmp::Reverse(cluster.pod(*id).map_or(0, |bound| bound.pod.created_at)));
                for id in &pods[..pods.len() - most] {
                    evictions.push(Eviction::new(
                        *id,
                        format!(
                            "{} pods of {kind} {namespace}/{name} on node {node}; an even spread over {targets} nodes is at most {most} per node",
                            pods.len()
                        ),
                    ));
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(RemoveDuplicates);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};
    use wasp_sdk::types::{Pod, TaintEffect};

    fn replica(name: &str, created: i64) -> Pod {
        PodBuilder::new(name).owner("ReplicaSet", "web").created_at(created).running().build()
    }

    #[test]
    fn the_surplus_over_an_even_spread_is_proposed_youngest_first() {
        let mut cluster = Cluster::for_policy::<RemoveDuplicates>();
        let crowded = cluster.add_node(NodeBuilder::new("n1").build());
        let other = cluster.add_node(NodeBuilder::new("n2").build());
        cluster.add_node(NodeBuilder::new("n3").build());
        let ids: Vec<PodId> = (0..4).map(|index| cluster.bind(replica(&format!("web-{index}"), index), crowded)).collect();
        cluster.bind(replica("web-4", 9), other);
        let proposals = build::<RemoveDuplicates>("").unwrap().propose(&cluster, &EvictContext::at(0));
        // 5 pods over 3 nodes: at most 2 per node, so the 2 youngest of the 4 on n1 move.
        let proposed: Vec<PodId> = proposals.iter().map(|eviction| eviction.pod).collect();
        assert_eq!(proposed, [ids[3], ids[2]]);
        assert_eq!(proposals[0].reason, "4 pods of ReplicaSet default/web on node n1; an even spread over 3 nodes is at most 2 per node");
    }

    #[test]
    fn nodes_the_pods_cannot_use_do_not_count_and_excluded_kinds_stay() {
        let mut cluster = Cluster::for_policy::<RemoveDuplicates>();
        let node = cluster.add_node(NodeBuilder::new("n1").build());
        cluster.add_node(NodeBuilder::new("n2").taint("dedicated", "gpu", TaintEffect::NoSchedule).build());
        cluster.add_node(NodeBuilder::new("n3").unschedulable().build());
        cluster.bind(replica("a", 1), node);
        cluster.bind(replica("b", 2), node);
        assert!(build::<RemoveDuplicates>("").unwrap().propose(&cluster, &EvictContext::at(0)).is_empty(), "only one node can take them");
        let mut tolerating = Cluster::for_policy::<RemoveDuplicates>();
        let crowded = tolerating.add_node(NodeBuilder::new("n1").build());
        tolerating.add_node(NodeBuilder::new("n2").taint("dedicated", "gpu", TaintEffect::NoSchedule).build());
        for name in ["a", "b"] {
            tolerating.bind(PodBuilder::new(name).owner("ReplicaSet", "web").running().toleration("dedicated", Some("gpu"), None).build(), crowded);
        }
        assert_eq!(build::<RemoveDuplicates>("").unwrap().propose(&tolerating, &EvictContext::at(0)).len(), 1, "pods that tolerate the taint can use its node");
        let open = cluster.add_node(NodeBuilder::new("n4").build());
        assert_eq!(build::<RemoveDuplicates>("").unwrap().propose(&cluster, &EvictContext::at(0)).len(), 1);
        let excluding = build::<RemoveDuplicates>(r#"{"excludeOwnerKinds": ["ReplicaSet"]}"#).unwrap();
        assert!(excluding.propose(&cluster, &EvictContext::at(0)).is_empty());
        cluster.bind(PodBuilder::new("bare").running().build(), open);
        assert!(build::<RemoveDuplicates>(r#"{"excludeOwnerKinds": [""]}"#).is_err());
    }
}
