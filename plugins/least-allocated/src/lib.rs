//! `least-allocated`: kube-scheduler's NodeResourcesFit score with the LeastAllocated strategy. Per resource,
//! `(allocatable - requested) * 100 / allocatable` after placing the pod (pods without requests count 100m CPU
//! and 200 MiB), averaged with the configured weights. Spreads load across nodes.

use wasp_sdk::allocation::{percent_of, weighted, weighted_scores, PodRequests, WeightedResources};
use wasp_sdk::resources::{validate_resource_weights, ResourceWeightSettings};
use wasp_sdk::types::{NodeId, Pod};
use wasp_sdk::{Cluster, NodeFacts, NodeInfo, Policy, Score};

pub struct LeastAllocated {
    resources: WeightedResources,
}

impl Policy for LeastAllocated {
    type Settings = ResourceWeightSettings;
    const NAME: &'static str = "least-allocated";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "resources: [{name, weight 1-100}], default cpu and memory with weight 1";

    fn new(settings: ResourceWeightSettings) -> Result<Self, String> {
        validate_resource_weights("resources", &settings.resources)?;
        Ok(LeastAllocated { resources: settings.resources.into() })
    }
}

/// The share of the resource left free with the pod placed, in percent.
fn free_share(requested: u64, allocatable: u64) -> i64 {
    if requested > allocatable {
        0
    } else {
        percent_of(allocatable - requested, allocatable)
    }
}

impl Score for LeastAllocated {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        weighted(&PodRequests::of(pod), node, &self.resources, free_share)
    }

    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        weighted_scores(pod, cluster, candidates, &self.resources, free_share)
    }
}

wasp_sdk::export_policy!(LeastAllocated);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn matches_kube_scheduler_arithmetic() {
        // kube-scheduler's own example: node 4000m/10000 bytes, pod 3000m/5000 -> ((25 + 50) / 2) = 37.
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("10000").build());
        let pod = PodBuilder::new("p").cpu("3").memory("5000").build();
        let policy = build::<LeastAllocated>("").unwrap();
        assert_eq!(policy.score(&pod, cluster.node(node).unwrap(), &cluster), 37);
    }

    #[test]
    fn emptier_nodes_score_higher_and_overcommit_scores_zero() {
        let mut cluster = Cluster::new();
        let busy = cluster.add_node(NodeBuilder::new("busy").cpu("4").memory("8Gi").build());
        let idle = cluster.add_node(NodeBuilder::new("idle").cpu("4").memory("8Gi").build());
        cluster.bind(PodBuilder::new("x").cpu("3").memory("6Gi").build(), busy);
        let policy = build::<LeastAllocated>("").unwrap();
        let scores = policy.score_all(&PodBuilder::new("p").cpu("1").memory("2Gi").build(), &cluster, &[busy, idle]);
        assert_eq!(scores, vec![0, 75]);
    }

    #[test]
    fn weights_and_validation() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("4Gi").build());
        let pod = PodBuilder::new("p").cpu("2").memory("1Gi").build();
        let cpu_only = build::<LeastAllocated>(r#"{"resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}"#).unwrap();
        assert_eq!(cpu_only.score(&pod, cluster.node(node).unwrap(), &cluster), (50 * 3 + 75) / 4);
        let error = build::<LeastAllocated>(r#"{"resources": [{"name": "cpu", "weight": 0}]}"#).err().unwrap();
        assert!(error.contains("resources[0].weight: 0 is outside 1..100"), "{error}");
    }
}
