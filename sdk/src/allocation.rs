//! What NodeResourcesFit's scoring strategies read per resource: the node's allocatable and what would be
//! requested on it with the pod placed, by kube-scheduler's rules (`calculateResourceAllocatableRequest`).
//!
//! The pod's requests are computed once per call ([`PodRequests`]) and each candidate's amounts are read in place:
//! a score call covers hundreds of nodes, and building the pod's and the node's vectors again for each node and
//! resource was most of what these policies cost.

use crate::cluster::NodeInfo;
use crate::policy::{scores_for, Normalization};
use crate::resources::{ResourceName, ResourceVector, ResourceWeight};
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
pub fn requested_and_allocatable(wanted: &PodRequests, node: &NodeInfo, resource: &ResourceName) -> Option<(u64, u64)> {
    let allocatable = node.node.allocatable.amount(resource);
    let (placed, wanted) =
        if resource.has_scoring_default() { (&node.usage.non_zero_requested, &wanted.non_zero) } else { (&node.usage.requested, &wanted.requests) };
    let wanted = wanted.amount(resource);
    let extended = matches!(resource, ResourceName::Extended(_));
    if allocatable == 0 || (extended && wanted == 0) {
        return None;
    }
    Some((placed.amount(resource).saturating_add(wanted), allocatable))
}

/// Resources and their weights as a score's settings list them, each name resolved once.
pub struct WeightedResources(Vec<(ResourceName, i64)>);

impl From<Vec<ResourceWeight>> for WeightedResources {
    fn from(weights: Vec<ResourceWeight>) -> Self {
        WeightedResources(weights.into_iter().map(|entry| (ResourceName::from(entry.name.as_str()), entry.weight)).collect())
    }
}

impl WeightedResources {
    pub fn iter(&self) -> impl Iterator<Item = &(ResourceName, i64)> {
        self.0.iter()
    }
}

/// The weighted mean of `score(requested, allocatable)` over the resources that count (integer division, as
/// kube-scheduler); 0 when none does.
pub fn weighted(wanted: &PodRequests, node: &NodeInfo, resources: &WeightedResources, score: impl Fn(u64, u64) -> i64) -> i64 {
    let (mut total, mut weights) = (0, 0);
    for (resource, weight) in resources.iter() {
        if let Some((requested, allocatable)) = requested_and_allocatable(wanted, node, resource) {
            total += score(requested, allocatable) * weight;
            weights += weight;
        }
    }
    if weights == 0 {
        0
    } else {
        total / weights
    }
}

/// The share `part / whole` in percent, rounded down (kube-scheduler's `part * 100 / whole`), in 64-bit arithmetic
/// unless `part * 100` would overflow it: 128-bit arithmetic, and even an overflow-checked 64-bit multiplication,
/// are library calls in a sandbox, and the common case needs neither.
#[inline]
pub fn percent_of(part: u64, whole: u64) -> i64 {
    if part <= u64::MAX / 100 {
        (part * 100 / whole) as i64
    } else {
        (u128::from(part) * 100 / u128::from(whole)) as i64
    }
}

/// [`weighted`] for every candidate, with the pod's requests computed once: a strategy's `score_all`.
pub fn weighted_scores(pod: &Pod, cluster: &Cluster, candidates: &[NodeId], resources: &WeightedResources, score: impl Fn(u64, u64) -> i64) -> Vec<u32> {
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
        let amounts = |wanted: &PodRequests, name: &str| requested_and_allocatable(wanted, node, &ResourceName::from(name));
        assert_eq!(amounts(&best_effort, "cpu"), Some((100, 4000)));
        assert_eq!(amounts(&best_effort, "memory"), Some((200 << 20, 8 << 30)));
        assert_eq!(amounts(&best_effort, "nvidia.com/gpu"), None);
        let gpu = PodRequests::of(&PodBuilder::new("g").request("nvidia.com/gpu", "1").build());
        assert_eq!(amounts(&gpu, "nvidia.com/gpu"), Some((1, 4)));
        assert_eq!(amounts(&gpu, "example.com/fpga"), None, "the node does not have it");
    }

    #[test]
    fn percentages_round_down_and_survive_amounts_whose_hundredfold_overflows() {
        assert_eq!(percent_of(1, 3), 33);
        assert_eq!(percent_of(2, 3), 66);
        assert_eq!(percent_of(u64::MAX / 2, u64::MAX), 49);
        assert_eq!(percent_of(u64::MAX, u64::MAX), 100);
    }
}
