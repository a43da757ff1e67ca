//! `inter-pod-affinity`: kube-scheduler's InterPodAffinity. The filter enforces the pod's required affinity and
//! anti-affinity and, symmetrically, the required anti-affinity of the pods already placed; the score adds the
//! preferred terms of both sides and the existing pods' required affinity (`hardPodAffinityWeight`). Every count
//! is made once per pod, keyed by topology domain, so each node costs a few lookups; the pod's own terms read only
//! the pods their selectors name (the view's label index) and the existing pods' terms are read once per distinct
//! term (the view's term groups), not once per replica.

use serde::{Deserialize, Serialize};
use wasp_sdk::affinity::required;
use wasp_sdk::index::TermKind;
use wasp_sdk::matching::same_text;
use wasp_sdk::policy::verdicts_for;
use wasp_sdk::topology::DomainCounts;
use wasp_sdk::types::{FilterResult, NodeId, Pod, PodAffinityTerm, PodId, ViewScope};
use wasp_sdk::{Cluster, Filter, LabelScope, NodeFacts, NodeInfo, PodFacts, Policy, Score, Verdict};

const AFFINITY_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
const ANTI_AFFINITY_NOT_MATCH: &str = "node(s) didn't match pod anti-affinity rules";
const EXISTING_ANTI_AFFINITY_NOT_MATCH: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Weight of an existing pod's required affinity toward the incoming pod, in the score.
    pub hard_pod_affinity_weight: i32,
    /// Score only by the incoming pod's preferred terms when it has some, and not at all otherwise.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { hard_pod_affinity_weight: 1, ignore_preferred_terms_of_existing_pods: false }
    }
}

pub struct InterPodAffinity {
    settings: Settings,
}

impl Policy for InterPodAffinity {
    type Settings = Settings;
    const NAME: &'static str = "inter-pod-affinity";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { labels: LabelScope::Selected, pod_affinity: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "hardPodAffinityWeight: score weight of existing pods' required affinity to the pod, 0-100 (default 1)\n\
        ignorePreferredTermsOfExistingPods: score only with the pod's own preferred terms (default false)";

    fn new(settings: Settings) -> Result<Self, String> {
        if !(0..=100).contains(&settings.hard_pod_affinity_weight) {
            return Err(format!("hardPodAffinityWeight: {} is not in 0..=100", settings.hard_pod_affinity_weight));
        }
        Ok(InterPodAffinity { settings })
    }
}

/// Pods (or score) per topology domain: for each topology key of the terms (a few), a count per domain of that
/// key (see [`wasp_sdk::topology`]: a node's domain is an index, so a node costs no label lookup or hashing).
#[derive(Default)]
struct Domains {
    by_key: Vec<DomainCounts>,
}

impl Domains {
    fn of_key(&mut self, key: &str, cluster: &Cluster) -> &mut DomainCounts {
        let index = match self.by_key.iter().position(|counts| same_text(counts.domains.key(), key)) {
            Some(index) => index,
            None => {
                self.by_key.push(DomainCounts::new(cluster.topology(key)));
                self.by_key.len() - 1
            }
        };
        &mut self.by_key[index]
    }

    /// The count of the node's domain of `key` (a key counted for): None when the node lacks the label.
    fn at(&self, key: &str, node: NodeId) -> Option<i64> {
        self.by_key.iter().find(|counts| same_text(counts.domains.key(), key)).and_then(|counts| counts.at(node))
    }

    fn is_empty(&self) -> bool {
        self.by_key.iter().all(DomainCounts::is_empty)
    }

    /// The counts of the node's domains, one per key the node has a label for.
    fn of_node(&self, node: NodeId) -> impl Iterator<Item = i64> + '_ {
        self.by_key.iter().filter_map(move |counts| counts.at(node))
    }
}

/// What the filter needs to know of the bound pods, counted once per incoming pod (kube-scheduler's PreFilter).
struct Counts {
    /// Existing pods whose required anti-affinity selects the incoming pod, per domain of their node.
    existing_anti: Domains,
    /// Pods matching all of the incoming pod's required affinity terms, per domain of each term.
    affinity: Domains,
    /// Pods selected by one of the incoming pod's required anti-affinity terms, per domain.
    anti: Domains,
}

fn count(pod: &Pod, cluster: &Cluster) -> Counts {
    let (affinity_terms, anti_terms) = (required(&pod.pod_affinity), required(&pod.pod_anti_affinity));
    let mut counts = Counts { existing_anti: Domains::default(), affinity: Domains::default(), anti: Domains::default() };
    for group in cluster.affinity_term_groups().filter(|group| group.kind == TermKind::RequiredAntiAffinity) {
        if cluster.group_selects(group, pod) {
            add_each(&mut counts.existing_anti, &group.term, cluster, group.pods.iter().copied(), 1);
        }
    }
    // Pods matching all of the required affinity terms are among those the first one selects.
    if let Some((first, others)) = affinity_terms.split_first() {
        let matching: Vec<PodId> = cluster
            .pods_selected_by(first, pod)
            .filter(|bound| others.iter().all(|term| cluster.term_selects(term, pod, &bound.pod)))
            .map(|bound| bound.id)
            .collect();
        for term in affinity_terms {
            add_each(&mut counts.affinity, term, cluster, matching.iter().copied(), 1);
        }
    }
    for term in anti_terms {
        add_each(&mut counts.anti, term, cluster, cluster.pods_selected_by(term, pod).map(|bound| bound.id), 1);
    }
    counts
}

/// Adds `amount` to the domain of each pod's node for `term`.
fn add_each(domains: &mut Domains, term: &PodAffinityTerm, cluster: &Cluster, pods: impl Iterator<Item = PodId>, amount: i64) {
    let counts = domains.of_key(&term.topology_key, cluster);
    for id in pods {
        if let Some(bound) = cluster.pod(id) {
            counts.add(bound.node, amount);
        }
    }
}

impl Counts {
    /// kube-scheduler's three checks in its order; the first that fails is the reason.
    fn verdict(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> Verdict {
        if !self.satisfies_affinity(pod, node, cluster) {
            return Verdict::reject(AFFINITY_NOT_MATCH);
        }
        // Each key of `anti` is a key of the pod's anti-affinity terms, counted by those terms only.
        if self.anti.of_node(node.id).any(|count| count > 0) {
            return Verdict::reject(ANTI_AFFINITY_NOT_MATCH);
        }
        if self.existing_anti.of_node(node.id).any(|count| count > 0) {
            return Verdict::reject(EXISTING_ANTI_AFFINITY_NOT_MATCH);
        }
        Verdict::Pass
    }

    fn satisfies_affinity(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> bool {
        let terms = required(&pod.pod_affinity);
        let mut pods_exist = true;
        // `count` counted for every term's key, so None is a node without the term's topology label.
        for term in terms {
            match self.affinity.at(&term.topology_key, node.id) {
                Some(count) if count > 0 => {}
                Some(_) => pods_exist = false,
                None => return false,
            }
        }
        // The first pod of a group that wants to be together: nothing matches anywhere yet, and the pod matches
        // its own terms, so it may go wherever the topology keys exist.
        pods_exist || (self.affinity.is_empty() && terms.iter().all(|term| cluster.term_selects(term, pod, pod)))
    }
}

impl Filter for InterPodAffinity {
    fn filter(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> Verdict {
        count(pod, cluster).verdict(pod, node, cluster)
    }

    fn filter_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> FilterResult {
        let has_terms = !required(&pod.pod_affinity).is_empty() || !required(&pod.pod_anti_affinity).is_empty();
        if !has_terms && !cluster.affinity_term_groups().any(|group| group.kind == TermKind::RequiredAntiAffinity) {
            return verdicts_for(cluster, candidates, |_| Verdict::Pass);
        }
        let counts = count(pod, cluster);
        verdicts_for(cluster, candidates, |node| counts.verdict(pod, node, cluster))
    }
}

impl InterPodAffinity {
    /// kube-scheduler's PreScore: weights per topology domain from both sides' terms.
    fn topology_scores<'a>(&self, pod: &'a Pod, cluster: &'a Cluster) -> Domains {
        let preferred = |affinity: &'a Option<wasp_sdk::types::PodAffinity>| affinity.iter().flat_map(|affinity| affinity.preferred.iter());
        let has_constraints = preferred(&pod.pod_affinity).next().is_some() || preferred(&pod.pod_anti_affinity).next().is_some();
        let mut scores = Domains::default();
        if self.settings.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return scores;
        }
        let selected = |term: &'a PodAffinityTerm| cluster.pods_selected_by(term, pod).map(|bound| bound.id);
        for weighted in preferred(&pod.pod_affinity) {
            add_each(&mut scores, &weighted.term, cluster, selected(&weighted.term), i64::from(weighted.weight));
        }
        for weighted in preferred(&pod.pod_anti_affinity) {
            add_each(&mut scores, &weighted.term, cluster, selected(&weighted.term), -i64::from(weighted.weight));
        }
        if self.settings.ignore_preferred_terms_of_existing_pods {
            return scores;
        }
        let hard_weight = i64::from(self.settings.hard_pod_affinity_weight);
        for group in cluster.affinity_term_groups() {
            let amount = match group.kind {
                TermKind::RequiredAffinity => hard_weight,
                TermKind::RequiredAntiAffinity => continue,
                TermKind::PreferredAffinity(weight) => i64::from(weight),
                TermKind::PreferredAntiAffinity(weight) => -i64::from(weight),
            };
            if amount != 0 && cluster.group_selects(group, pod) {
                add_each(&mut scores, &group.term, cluster, group.pods.iter().copied(), amount);
            }
        }
        scores
    }
}

impl Score for InterPodAffinity {
    fn score(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> i64 {
        self.score_all(pod, cluster, &[node.id])[0] as i64
    }

    /// A node's raw score is the sum of its domains' scores; then min-max normalized to 0..=100 over the
    /// candidates (all 0 when they are equal or nothing scored).
    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        let scores = self.topology_scores(pod, cluster);
        if scores.is_empty() {
            return vec![0; candidates.len()];
        }
        let raw: Vec<i64> = candidates.iter().map(|&id| scores.of_node(id).sum()).collect();
        let (lowest, highest) = (raw.iter().copied().min().unwrap_or(0), raw.iter().copied().max().unwrap_or(0));
        let spread = highest - lowest;
        raw.iter().map(|score| if spread > 0 { (100.0 * ((score - lowest) as f64 / spread as f64)) as u32 } else { 0 }).collect()
    }
}

wasp_sdk::export_policy!(InterPodAffinity);

#[cfg(test)]
mod tests;
