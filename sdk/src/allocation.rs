//! What NodeResourcesFit's scoring strategies read per resource: the node's allocatable and what would be
//! requested on it with the pod placed, by kube-scheduler's rules (`calculateResourceAllocatableRequest`).

use crate::cluster::NodeInfo;
use crate::resources::{ResourceVector, ResourceWeight};
use crate::types::Pod;

/// `(requested with the pod, allocatable)` of one resource, or None when it does not count: CPU and memory with
/// pods that request nothing counted at 100m and 200 MiB, other resources at their real requests; an extended
/// resource the pod does not request, or one the node does not have, does not count.
pub fn requested_and_allocatable(pod: &Pod, node: &NodeInfo, resource: &str) -> Option<(u64, u64)> {
    let allocatable = ResourceVector::from(&node.node.allocatable).get(resource);
    let (placed, wanted) = match resource {
        "cpu" | "memory" => (ResourceVector::from(&node.usage.non_zero_requested), pod.non_zero_requests()),
        _ => (ResourceVector::from(&node.usage.requested), pod.requests()),
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
pub fn weighted(pod: &Pod, node: &NodeInfo, resources: &[ResourceWeight], score: impl Fn(u64, u64) -> i64) -> i64 {
    let (mut total, mut weights) = (0, 0);
    for resource in resources {
        if let Some((requested, allocatable)) = requested_and_allocatable(pod, node, &resource.name) {
            total += score(requested, allocatable) * resource.weight;
            weights += resource.weight;
        }
    }
    if weights == 0 { 0 } else { total / weights }
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
        let best_effort = PodBuilder::new("p").build();
        assert_eq!(requested_and_allocatable(&best_effort, node, "cpu"), Some((100, 4000)));
        assert_eq!(requested_and_allocatable(&best_effort, node, "memory"), Some((200 << 20, 8 << 30)));
        assert_eq!(requested_and_allocatable(&best_effort, node, "nvidia.com/gpu"), None);
        let gpu = PodBuilder::new("g").request("nvidia.com/gpu", "1").build();
        assert_eq!(requested_and_allocatable(&gpu, node, "nvidia.com/gpu"), Some((1, 4)));
        assert_eq!(requested_and_allocatable(&gpu, node, "example.com/fpga"), None, "the node does not have it");
    }
}
