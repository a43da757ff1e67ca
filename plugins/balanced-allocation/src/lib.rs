//! `balanced-allocation`: kube-scheduler's NodeResourcesBalancedAllocation. Prefers nodes whose requested
//! fractions of each resource stay close to each other after placing the pod: `(1 - std) * 100`, where `std` is
//! the standard deviation of `requested / allocatable` over the configured resources.

use wasp_sdk::policy::{scores_for, Normalization};
use wasp_sdk::resources::{validate_resource_weights, ResourceName, ResourceWeightSettings};
use wasp_sdk::types::{NodeId, Pod};
use wasp_sdk::{Cluster, NodeFacts, NodeInfo, Policy, Score};

pub struct BalancedAllocation {
    resources: Vec<ResourceName>,
}

impl Policy for BalancedAllocation {
    type Settings = ResourceWeightSettings;
    const NAME: &'static str = "balanced-allocation";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "resources: [{name, weight}], default cpu and memory";

    fn new(settings: ResourceWeightSettings) -> Result<Self, String> {
        validate_resource_weights("resources", &settings.resources)?;
        Ok(BalancedAllocation { resources: settings.resources.iter().map(|entry| ResourceName::from(entry.name.as_str())).collect() })
    }
}

impl BalancedAllocation {
    /// The pod's request of each configured resource, in their order: read once per call, not per node.
    fn wanted(&self, pod: &Pod) -> Vec<u64> {
        let requests = pod.requests();
        self.resources.iter().map(|name| requests.amount(name)).collect()
    }

    fn score_with(&self, wanted: &[u64], node: &NodeInfo) -> i64 {
        // A pod that requests none of the resources does not change any balance (kube-scheduler skips it).
        if wanted.iter().all(|amount| *amount == 0) {
            return 0;
        }
        let (allocatable, requested) = (&node.node.allocatable, &node.usage.requested);
        // Two passes over the few resources rather than a vector of fractions per node; `f64::min` is a libm call
        // in a sandbox, a comparison is not.
        let fractions = || {
            self.resources.iter().zip(wanted).filter_map(|(name, wanted)| {
                let capacity = allocatable.amount(name);
                let fraction = requested.amount(name).saturating_add(*wanted) as f64 / capacity as f64;
                (capacity > 0).then_some(if fraction > 1.0 { 1.0 } else { fraction })
            })
        };
        let (count, sum) = fractions().fold((0usize, 0.0), |(count, sum), fraction| (count + 1, sum + fraction));
        if count == 0 {
            return 0;
        }
        let mean = sum / count as f64;
        let variance = fractions().map(|fraction| (fraction - mean).powi(2)).sum::<f64>() / count as f64;
        ((1.0 - variance.sqrt()) * 100.0) as i64
    }
}

impl Score for BalancedAllocation {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        self.score_with(&self.wanted(pod), node)
    }

    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        let wanted = self.wanted(pod);
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
