//! `most-allocated`: kube-scheduler's NodeResourcesFit score with the MostAllocated strategy. Per resource,
//! `min(requested, allocatable) * 100 / allocatable` after placing the pod, averaged with the configured weights:
//! fuller nodes score higher, so pods pack onto few nodes and the rest can be scaled away.

use wasp_sdk::allocation::{percent_of, weighted, weighted_scores, PodRequests, WeightedResources};
use wasp_sdk::resources::{validate_resource_weights, ResourceWeightSettings};
use wasp_sdk::types::{NodeId, Pod};
use wasp_sdk::{Cluster, NodeFacts, NodeInfo, Policy, Score};

pub struct MostAllocated {
    resources: WeightedResources,
}

impl Policy for MostAllocated {
    type Settings = ResourceWeightSettings;
    const NAME: &'static str = "most-allocated";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "resources: [{name, weight 1-100}], default cpu and memory with weight 1";

    fn new(settings: ResourceWeightSettings) -> Result<Self, String> {
        validate_resource_weights("resources", &settings.resources)?;
        Ok(MostAllocated { resources: settings.resources.into() })
    }
}

/// The share of the resource requested with the pod placed, in percent (at most 100).
fn used_share(requested: u64, allocatable: u64) -> i64 {
    percent_of(requested.min(allocatable), allocatable)
}

impl Score for MostAllocated {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        weighted(&PodRequests::of(pod), node, &self.resources, used_share)
    }

    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        weighted_scores(pod, cluster, candidates, &self.resources, used_share)
    }
}

wasp_sdk::export_policy!(MostAllocated);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn matches_kube_scheduler_arithmetic() {
        // Node 4000m / 10000 bytes, pod 3000m / 5000: cpu 75, memory 50 -> (75 + 50) / 2 = 62.
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("10000").build());
        let pod = PodBuilder::new("p").cpu("3").memory("5000").build();
        assert_eq!(build::<MostAllocated>("").unwrap().score(&pod, cluster.node(node).unwrap(), &cluster), 62);
    }

    #[test]
    fn fuller_nodes_score_higher_and_overcommit_counts_as_full() {
        let mut cluster = Cluster::new();
        let busy = cluster.add_node(NodeBuilder::new("busy").cpu("4").memory("8Gi").build());
        let idle = cluster.add_node(NodeBuilder::new("idle").cpu("4").memory("8Gi").build());
        cluster.bind(PodBuilder::new("x").cpu("3").memory("6Gi").build(), busy);
        let policy = build::<MostAllocated>("").unwrap();
        let scores = policy.score_all(&PodBuilder::new("p").cpu("2").memory("2Gi").build(), &cluster, &[busy, idle]);
        assert_eq!(scores, vec![100, 37], "busy: cpu 5/4 counts 100, memory 100; idle: (50 + 25) / 2");
    }
}
