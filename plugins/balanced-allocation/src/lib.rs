//! `balanced-allocation`: kube-scheduler's NodeResourcesBalancedAllocation. Prefers nodes whose requested
//! fractions of each resource stay close to each other after placing the pod: `(1 - std) * 100`, where `std` is
//! the standard deviation of `requested / allocatable` over the configured resources.

use wasp_sdk::resources::{validate_resource_weights, ResourceVector, ResourceWeightSettings};
use wasp_sdk::policy::{scores_for, Normalization};
use wasp_sdk::types::{NodeId, Pod};
use wasp_sdk::{Cluster, NodeInfo, Policy, Score, NodeFacts};

pub struct BalancedAllocation {
    resources: Vec<String>,
}

impl Policy for BalancedAllocation {
    type Settings = ResourceWeightSettings;
    const NAME: &'static str = "balanced-allocation";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "resources: [{name, weight}], default cpu and memory";

    fn new(settings: ResourceWeightSettings) -> Result<Self, String> {
        validate_resource_weights("resources", &settings.resources)?;
        Ok(BalancedAllocation { resources: settings.resources.into_iter().map(|entry| entry.name).collect() })
    }
}

impl BalancedAllocation {
    fn score_with(&self, wanted: &ResourceVector, node: &NodeInfo) -> i64 {
        // A pod that requests none of the resources does not change any balance (kube-scheduler skips it).
        if self.resources.iter().all(|name| wanted.get(name) == 0) {
            return 0;
        }
        let (allocatable, requested) = (&node.node.allocatable, &node.usage.requested);
        let fractions: Vec<f64> = self
            .resources
            .iter()
            .filter(|name| allocatable.get(name) > 0)
            .map(|name| (requested.get(name).saturating_add(wanted.get(name)) as f64 / allocatable.get(name) as f64).min(1.0))
            .collect();
        if fractions.is_empty() {
            return 0;
        }
        let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
        let variance = fractions.iter().map(|fraction| (fraction - mean).powi(2)).sum::<f64>() / fractions.len() as f64;
        ((1.0 - variance.sqrt()) * 100.0) as i64
    }
}

impl Score for BalancedAllocation {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        self.score_with(&pod.requests(), node)
    }

    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        let wanted = pod.requests();
        scores_for(cluster, candidates, Normalization::None, |node| self.score_with(&wanted, node))
    }
}

wasp_sdk::export_policy!(BalancedAllocation);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn matches_kube_scheduler_arithmetic() {
        // kube-scheduler's example: cpu 3000/4000 = 0.75, memory 5000/10000 = 0.5, std 0.125 -> 87.
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("10000").build());
        let pod = PodBuilder::new("p").cpu("3").memory("5000").build();
        let policy = build::<BalancedAllocation>("").unwrap();
        assert_eq!(policy.score(&pod, cluster.node(node).unwrap(), &cluster), 87);
    }

    #[test]
    fn prefers_the_node_the_pod_balances() {
        let mut cluster = Cluster::new();
        let cpu_heavy = cluster.add_node(NodeBuilder::new("a").cpu("4").memory("4Gi").build());
        let memory_heavy = cluster.add_node(NodeBuilder::new("b").cpu("4").memory("4Gi").build());
        cluster.bind(PodBuilder::new("x").cpu("3").build(), cpu_heavy);
        cluster.bind(PodBuilder::new("y").memory("3Gi").build(), memory_heavy);
        let memory_pod = PodBuilder::new("p").memory("3Gi").build();
        let scores = build::<BalancedAllocation>("").unwrap().score_all(&memory_pod, &cluster, &[cpu_heavy, memory_heavy]);
        assert!(scores[0] > scores[1], "{scores:?}");
        assert_eq!(scores[0], 100);
    }

    #[test]
    fn pods_without_requests_score_zero_everywhere() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("a").build());
        let policy = build::<BalancedAllocation>("").unwrap();
        assert_eq!(policy.score(&PodBuilder::new("p").build(), cluster.node(node).unwrap(), &cluster), 0);
    }
}
