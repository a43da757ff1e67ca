//! `pod-topology-spread`: kube-scheduler's PodTopologySpread. The filter enforces `DoNotSchedule` constraints
//! (placing the pod must not make any domain exceed `maxSkew` over the least loaded domain); the score prefers
//! nodes in domains with fewer matching pods for `ScheduleAnyway` constraints. Counts are computed once per pod
//! over the nodes eligible under `nodeAffinityPolicy` and `nodeTaintsPolicy`.

use wasp_sdk::collections::FastHashMap;
use wasp_sdk::policy::verdicts_for;
use wasp_sdk::spread::{domain_counts, resolved_selector};
use wasp_sdk::types::{FilterResult, LabelSelector, NodeId, Pod, TopologySpreadConstraint, UnsatisfiableAction, ViewScope};
use wasp_sdk::{Cluster, Filter, LabelScope, NoSettings, NodeFacts, NodeInfo, PodFacts, Policy, Score, Verdict};

const NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
const MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";

pub struct PodTopologySpread;

impl Policy for PodTopologySpread {
    type Settings = NoSettings;
    const NAME: &'static str = "pod-topology-spread";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, taints: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { labels: LabelScope::Selected, ..PodFacts::NONE };

    fn new(_: NoSettings) -> Result<Self, String> {
        Ok(PodTopologySpread)
    }
}

/// One constraint with its selector resolved (matchLabelKeys folded in) and matching pods counted per domain.
struct Counted<'a> {
    constraint: &'a TopologySpreadConstraint,
    selector: LabelSelector,
    /// Matching pods per topology value, over eligible nodes; domains with no pods are present with 0.
    counts: FastHashMap<&'a str, i64>,
    /// The smallest domain count, or 0 when there are fewer domains than `minDomains`: counted once per call, not
    /// per node (spread by hostname, each node's verdict would read every domain).
    global_minimum: i64,
}

impl<'a> Counted<'a> {
    fn new(constraint: &'a TopologySpreadConstraint, selector: LabelSelector, counts: FastHashMap<&'a str, i64>) -> Counted<'a> {
        let too_few_domains = constraint.min_domains.is_some_and(|min| (counts.len() as i64) < min as i64);
        let global_minimum = if too_few_domains { 0 } else { counts.values().copied().min().unwrap_or(0) };
        Counted { constraint, selector, counts, global_minimum }
    }
}

fn count<'a>(pod: &Pod, cluster: &'a Cluster, constraints: Vec<&'a TopologySpreadConstraint>) -> Vec<Counted<'a>> {
    let keys: Vec<&str> = constraints.iter().map(|constraint| constraint.topology_key.as_str()).collect();
    constraints
        .into_iter()
        .map(|constraint| {
            let selector = resolved_selector(pod, constraint);
            let counts = domain_counts(pod, cluster, constraint, &selector, &keys);
            Counted::new(constraint, selector, counts)
        })
        .collect()
}

fn constraints_of(pod: &Pod, action: UnsatisfiableAction) -> Vec<&TopologySpreadConstraint> {
    pod.topology_spread.iter().filter(|constraint| constraint.when_unsatisfiable == action).collect()
}

impl PodTopologySpread {
    fn verdict(pod: &Pod, node: &NodeInfo, counted: &[Counted]) -> Verdict {
        for entry in counted {
            let Some(domain) = node.node.label(&entry.constraint.topology_key) else {
                return Verdict::reject(MISSING_LABEL);
            };
            let self_match = i64::from(entry.selector.matches(&pod.labels));
            let in_domain = entry.counts.get(domain).copied().unwrap_or(0);
            if in_domain + self_match - entry.global_minimum > entry.constraint.max_skew as i64 {
                return Verdict::reject(NOT_MATCH);
            }
        }
        Verdict::Pass
    }
}

impl Filter for PodTopologySpread {
    fn filter(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> Verdict {
        Self::verdict(pod, node, &count(pod, cluster, constraints_of(pod, UnsatisfiableAction::DoNotSchedule)))
    }

    fn filter_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> FilterResult {
        let counted = count(pod, cluster, constraints_of(pod, UnsatisfiableAction::DoNotSchedule));
        verdicts_for(cluster, candidates, |node| Self::verdict(pod, node, &counted))
    }
}

impl Score for PodTopologySpread {
    fn score(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> i64 {
        let scores = self.score_all(pod, cluster, &[node.id]);
        scores[0] as i64
    }

    /// kube-scheduler's scoring: per constraint, matching pods in the node's domain weighted by
    /// `ln(domains + 2)`, plus `maxSkew - 1`; then reversed and normalized so the emptiest domain scores 100.
    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        let counted = count(pod, cluster, constraints_of(pod, UnsatisfiableAction::ScheduleAnyway));
        if counted.is_empty() {
            return vec![0; candidates.len()];
        }
        let raw: Vec<Option<f64>> = candidates
            .iter()
            .map(|&id| {
                let node = cluster.node(id)?;
                counted.iter().try_fold(0.0, |total, entry| {
                    let domain = node.node.label(&entry.constraint.topology_key)?;
                    let weight = ((entry.counts.len() + 2) as f64).ln();
                    let in_domain = entry.counts.get(domain).copied().unwrap_or(0) as f64;
                    Some(total + in_domain * weight + (entry.constraint.max_skew - 1) as f64)
                })
            })
            .map(|score| score.map(f64::round))
            .collect();
        let scored = raw.iter().flatten();
        let highest = scored.clone().copied().fold(f64::MIN, f64::max);
        let lowest = scored.copied().fold(f64::MAX, f64::min);
        raw.iter()
            .map(|score| match score {
                None => 0,
                Some(_) if highest <= 0.0 => 100,
                Some(score) => (100.0 * (highest + lowest - score) / highest) as u32,
            })
            .collect()
    }
}

wasp_sdk::export_policy!(PodTopologySpread);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};
    use wasp_sdk::types::{SelectorOperator, SelectorRequirement};

    /// Nodes in zones a, a, b, c; `web` pods: 2 in a, 1 in b, 0 in c.
    fn zoned_cluster() -> (Cluster, Vec<NodeId>) {
        let mut cluster = Cluster::for_policy::<PodTopologySpread>();
        let ids: Vec<NodeId> = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")]
            .iter()
            .map(|(name, zone)| cluster.add_node(NodeBuilder::new(name).label("zone", zone).build()))
            .collect();
        for (index, node) in [ids[0], ids[1], ids[2]].into_iter().enumerate() {
            cluster.bind(PodBuilder::new(&format!("web-{index}")).label("app", "web").running().build(), node);
        }
        cluster.bind(PodBuilder::new("other").label("app", "db").running().build(), ids[3]);
        (cluster, ids)
    }

    fn web(action: UnsatisfiableAction, max_skew: i32) -> Pod {
        PodBuilder::new("new").label("app", "web").spread("zone", max_skew, action, &[("app", "web")]).build()
    }

    #[test]
    fn do_not_schedule_keeps_skew_within_bounds() {
        let (cluster, ids) = zoned_cluster();
        let result = PodTopologySpread.filter_all(&web(UnsatisfiableAction::DoNotSchedule, 1), &cluster, &ids);
        // min is 0 (zone c): a would reach 3, b 2, c 1.
        assert_eq!(result.verdicts, vec![1, 1, 1, 0]);
        assert_eq!(result.rejections, vec![vec![NOT_MATCH.to_string()]]);
        let result = PodTopologySpread.filter_all(&web(UnsatisfiableAction::DoNotSchedule, 2), &cluster, &ids);
        assert_eq!(result.verdicts, vec![1, 1, 0, 0]);
    }

    #[test]
    fn nodes_without_the_topology_label_are_rejected() {
        let (mut cluster, mut ids) = zoned_cluster();
        ids.push(cluster.add_node(NodeBuilder::new("nolabel").build()));
        let result = PodTopologySpread.filter_all(&web(UnsatisfiableAction::DoNotSchedule, 5), &cluster, &ids);
        assert_eq!(result.verdicts, vec![0, 0, 0, 0, 1]);
        assert_eq!(result.rejections, vec![vec![MISSING_LABEL.to_string()]]);
    }

    #[test]
    fn min_domains_treats_missing_domains_as_empty() {
        let (cluster, ids) = zoned_cluster();
        let pod = web(UnsatisfiableAction::DoNotSchedule, 2).clone();
        let mut pod = pod;
        pod.topology_spread[0].min_domains = Some(5);
        // Only three domains exist, so the global minimum is 0: b (1 + 1) passes, a (2 + 1) does not.
        assert_eq!(PodTopologySpread.filter_all(&pod, &cluster, &ids).verdicts, vec![1, 1, 0, 0]);
    }

    #[test]
    fn honors_node_affinity_when_counting_domains() {
        let (cluster, ids) = zoned_cluster();
        // Restricting the pod to zones a and b removes zone c from the domains: min becomes 1 (zone b).
        let pod = PodBuilder::new("new")
            .label("app", "web")
            .spread("zone", 1, UnsatisfiableAction::DoNotSchedule, &[("app", "web")])
            .require_node_term(vec![SelectorRequirement { key: "zone".into(), operator: SelectorOperator::In, values: vec!["a".into(), "b".into()] }])
            .build();
        assert_eq!(PodTopologySpread.filter_all(&pod, &cluster, &ids[..3]).verdicts, vec![1, 1, 0]);
    }

    #[test]
    fn schedule_anyway_scores_emptier_domains_higher() {
        let (cluster, ids) = zoned_cluster();
        let scores = PodTopologySpread.score_all(&web(UnsatisfiableAction::ScheduleAnyway, 1), &cluster, &ids);
        assert_eq!(scores[3], 100, "zone c has no web pods: {scores:?}");
        assert!(scores[2] > scores[0], "{scores:?}");
        assert_eq!(scores[0], scores[1]);
        let unconstrained = PodBuilder::new("p").build();
        assert_eq!(PodTopologySpread.score_all(&unconstrained, &cluster, &ids), vec![0, 0, 0, 0]);
    }
}
