//! What NodeResourcesFit's scoring strategies read per resource: the node's allocatable and what would be
//! requested on it with the pod placed, by kube-scheduler's rules (`calculateResourceAllocatableRequest`).
//!
//! The pod's requests are computed once per call ([`PodRequests`]) and each candidate's amounts are read in place:
//! a score call covers hundreds of nodes, and building the pod's and the node's vectors again for each node and
//! resource was most of what these policies cost.

use crate::cluster::NodeInfo;
use crate::policy::{scores_for, Normalization};
use crate::resources::{ResourceVector, ResourceWeight};
use crate::types::{NodeId, Pod};
use crate::Cluster;

/// A pod's requests as scoring counts them: real, and with kube-scheduler's non-zero defaults for CPU and memory.
pub struct PodRequests {
    pub requests: ResourceVector,
    pub non_zero: ResourceVector,
}

impl PodRequests {
    pub fn of(pod: &Pod) -> PodRequests {
        PodRequests { requests: pod.requests(), non_zero: pod.non_zero_requests() }
    }
}

/// `(requested with the pod, allocatable)` of one resource, or None when it does not count: CPU and memory with
/// pods that request nothing counted at 100m and 200 MiB, other resources at their real requests; an extended
/// resource the pod does not request, or one the node does not have, does not count.
pub fn requested_and_allocatable(wanted: &PodRequests, node: &NodeInfo, resource: &str) -> Option<(u64, u64)> {
    let allocatable = node.node.allocatable.get(resource);
    let (placed, wanted) = match resource {
        "cpu" | "memory" => (&node.usage.non_zero_requested, &wanted.non_zero),
        _ => (&node.usage.requested, &wanted.requests),
    };
    let wanted = wanted.get(resource);
    let extended = !matches!(resource, "cpu" | "memory" | "ephemeral-storage");
    if allocatable == 0 || (extended && wanted == 0) {
        return None;
    }
    Some((placed.get(resource).saturating_add(wanted), allocatable))
}

/// The weighted mean of `score(requested, allocatable)` over the resources that count (integer division, as
/// kube-scheduler); 0 when none does.
pub fn weighted(wanted: &PodRequests, node: &NodeInfo, resources: &[ResourceWeight], score: impl Fn(u64, u64) -> i64) -> i64 {
    let (mut total, mut weights) = (0, 0);
    for resource in resources {
        if let Some((requested, allocatable)) = requested_and_allocatable(wanted, node, &resource.name) {
            total += score(requested, allocatable) * resource.weight;
            weights += resource.weight;
        }
    }
    if weights == 0 { 0 } else { total / weights }
}

/// [`weighted`] for every candidate, with the pod's requests computed once: a strategy's `score_all`.
pub fn weighted_scores(pod: &Pod, cluster: &Cluster, candidates: &[NodeId], resources: &[ResourceWeight], score: impl Fn(u64, u64) -> i64) -> Vec<u32> {
    let wanted = PodRequests::of(pod);
    scores_for(cluster, candidates, Normalization::None, |node| weighted(&wanted, node, resources, &score))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use crate::Cluster;

    #[test]
    fn best_effort_pods_count_defaults_and_unrequested_extended_resources_do_not_count() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n").cpu("4").memory("8Gi").allocatable("nvidia.com/gpu", "4").build());
        let node = cluster.node(node).unwrap();
        let best_effort = PodRequests::of(&PodBuilder::new("p").build());
        assert_eq!(requested_and_allocatable(&best_effort, node, "cpu"), Some((100, 4000)));
        assert_eq!(requested_and_allocatable(&best_effort, node, "memory"), Some((200 << 20, 8 << 30)));
        assert_eq!(requested_and_allocatable(&best_effort, node, "nvidia.com/gpu"), None);
        let gpu = PodRequests::of(&PodBuilder::new("g").request("nvidia.com/gpu", "1").build());
        assert_eq!(requested_and_allocatable(&gpu, node, "nvidia.com/gpu"), Some((1, 4)));
        assert_eq!(requested_and_allocatable(&gpu, node, "example.com/fpga"), None, "the node does not have it");
    }
}
