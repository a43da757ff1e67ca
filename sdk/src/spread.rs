//! Pod topology spread as kube-scheduler counts it: a constraint's selector (with `matchLabelKeys`), the nodes
//! whose pods count (inclusion policies), and matching pods per domain. Shared by the scheduler's filter and
//! score and the rescheduler's strategy, so they agree on what "spread" means.

use crate::cluster::{Cluster, NodeInfo};
use crate::collections::FastHashMap;
use crate::matching::{first_untolerated_taint, same_text};
use crate::types::{InclusionPolicy, LabelSelector, Pod, SelectorOperator, SelectorRequirement, TaintEffect, TopologySpreadConstraint};

/// The constraint's selector with `matchLabelKeys` folded in from `pod`'s labels.
pub fn resolved_selector(pod: &Pod, constraint: &TopologySpreadConstraint) -> LabelSelector {
    let mut selector = constraint.label_selector.clone().unwrap_or(LabelSelector { match_labels: Vec::new(), match_expressions: Vec::new() });
    for key in &constraint.match_label_keys {
        if let Some(value) = pod.label(key) {
            selector.match_expressions.push(SelectorRequirement { key: key.clone(), operator: SelectorOperator::In, values: vec![value.to_string()] });
        }
    }
    selector
}

/// Whether a node's pods count toward the constraint's domains: it has every key in `keys`, and passes the
/// inclusion policies for `pod`.
pub fn eligible(pod: &Pod, constraint: &TopologySpreadConstraint, node: &NodeInfo, keys: &[&str]) -> bool {
    if keys.iter().any(|key| node.node.label(key).is_none()) {
        return false;
    }
    if constraint.node_affinity_policy == InclusionPolicy::Honor && !pod.matches_node_selector_and_required_affinity(&node.node) {
        return false;
    }
    let blocking = [TaintEffect::NoSchedule, TaintEffect::NoExecute];
    constraint.node_taints_policy == InclusionPolicy::Ignore || first_untolerated_taint(&node.node.taints, &pod.tolerations, &blocking).is_none()
}

/// Pods of `pod`'s namespace matching `selector` (terminating ones aside) per domain of the constraint's key,
/// over the eligible nodes; domains with none are present with 0.
pub fn domain_counts<'a>(
    pod: &Pod,
    cluster: &'a Cluster,
    constraint: &TopologySpreadConstraint,
    selector: &LabelSelector,
    keys: &[&str],
) -> FastHashMap<&'a str, i64> {
    let mut counts = FastHashMap::default();
    // The domain of each eligible node, by node id; then only the pods the selector names are read.
    let mut domains: Vec<Option<&'a str>> = Vec::new();
    for node in cluster.nodes().filter(|node| eligible(pod, constraint, node, keys)) {
        let domain = node.node.label(&constraint.topology_key).expect("eligible nodes have every key");
        counts.entry(domain).or_insert(0);
        let index = node.id as usize;
        if index >= domains.len() {
            domains.resize(index + 1, None);
        }
        domains[index] = Some(domain);
    }
    for bound in cluster.pods_matching(selector).filter(|bound| same_text(&bound.pod.namespace, &pod.namespace) && !bound.pod.terminating) {
        if let Some(domain) = domains.get(bound.node as usize).copied().flatten() {
            *counts.entry(domain).or_insert(0) += 1;
        }
    }
    counts
}
