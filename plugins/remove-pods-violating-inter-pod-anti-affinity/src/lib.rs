//! `remove-pods-violating-inter-pod-anti-affinity`: the descheduler's RemovePodsViolatingInterPodAntiAffinity.
//! A pod whose required anti-affinity selects another pod in the same topology domain (placed before the rule
//! existed, or by another scheduler) is proposed, lowest priority first per node; once proposed it no longer
//! counts against the others, so of two pods that repel each other only one moves.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use wasp_sdk::affinity::required;
use wasp_sdk::selection::{Namespaces, PodFilter, Selector};
use wasp_sdk::types::{EvictContext, Eviction, NodeId, PodId, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, LabelScope, NodeFacts, NodeInfo, PodFacts, PodInfo, Policy};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Namespaces whose pods are considered (as candidates and as the pods they repel).
    pub namespaces: Namespaces,
    pub label_selector: Option<Selector>,
}

pub struct RemovePodsViolatingInterPodAntiAffinity {
    filter: PodFilter,
}

impl Policy for RemovePodsViolatingInterPodAntiAffinity {
    type Settings = Settings;
    const NAME: &'static str = "remove-pods-violating-inter-pod-anti-affinity";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { labels: LabelScope::Selected, pod_affinity: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "namespaces: {include: [...]} or {exclude: [...]}, the pods considered (default all)\n\
        labelSelector: only pods matching it (matchLabels, matchExpressions; default all)";

    fn new(settings: Settings) -> Result<Self, String> {
        Ok(RemovePodsViolatingInterPodAntiAffinity { filter: PodFilter::new(&settings.namespaces, settings.label_selector.as_ref())? })
    }

    fn label_keys(&self) -> Vec<String> {
        self.filter.label_keys()
    }
}

impl RemovePodsViolatingInterPodAntiAffinity {
    /// Whether the pod takes part: running, and in the strategy's namespaces and selector.
    fn considered(&self, bound: &PodInfo) -> bool {
        !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed) && self.filter.admits(&bound.pod)
    }
}

/// Nodes by their value of one topology key, built once per key a term names.
#[derive(Default)]
struct Domains<'a> {
    by_key: HashMap<&'a str, HashMap<&'a str, Vec<NodeId>>>,
}

impl<'a> Domains<'a> {
    /// The nodes in `node`'s domain for `key` (the descheduler's `hasSameLabelValue`): those with the same value,
    /// or the node alone when it lacks the label (a node is always in its own domain).
    fn of(&mut self, cluster: &'a Cluster, node: &'a NodeInfo, key: &'a str) -> Vec<NodeId> {
        let Some(value) = node.node.label(key) else { return vec![node.id] };
        let nodes = self.by_key.entry(key).or_insert_with(|| {
            let mut nodes: HashMap<&str, Vec<NodeId>> = HashMap::new();
            for other in cluster.nodes() {
                if let Some(value) = other.node.label(key) {
                    nodes.entry(value).or_default().push(other.id);
                }
            }
            nodes
        });
        nodes.get(value).cloned().unwrap_or_else(|| vec![node.id])
    }
}

impl Evict for RemovePodsViolatingInterPodAntiAffinity {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        // Only pods with required anti-affinity can violate it: per node, lowest priority first.
        let mut candidates: Vec<&PodInfo> =
            cluster.pods_with_affinity().filter(|bound| !required(&bound.pod.pod_anti_affinity).is_empty() && self.considered(bound)).collect();
        candidates.sort_by_key(|bound| (bound.node, bound.pod.priority, bound.id));
        let mut domains = Domains::default();
        let mut evicted: HashSet<PodId> = HashSet::new();
        let mut evictions = Vec::new();
        for candidate in candidates {
            let Some(node) = cluster.node(candidate.node) else { continue };
            let repelled = required(&candidate.pod.pod_anti_affinity).iter().find_map(|term| {
                let domain = domains.of(cluster, node, &term.topology_key);
                let mut neighbours = domain.iter().filter_map(|id| cluster.node(*id)).flat_map(|node| cluster.pods_on(node));
                let other = neighbours.find(|other| {
                    other.id != candidate.id && !evicted.contains(&other.id) && self.considered(other) && cluster.term_selects(term, &candidate.pod, &other.pod)
                })?;
                Some((other, term.topology_key.as_str()))
            });
            if let Some((other, key)) = repelled {
                let reason = format!("its required anti-affinity ({key}) repels {}/{} in the same domain", other.pod.namespace, other.pod.name);
                evictions.push(Eviction::new(candidate.id, reason));
                evicted.insert(candidate.id);
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(RemovePodsViolatingInterPodAntiAffinity);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{affinity_term, NodeBuilder, PodBuilder};

    fn replica(name: &str) -> wasp_sdk::types::Pod {
        PodBuilder::new(name)
            .label("app", "web")
            .owner("ReplicaSet", "web")
            .require_anti_affinity(affinity_term("kubernetes.io/hostname", &[("app", "web")]))
            .running()
            .build()
    }

    #[test]
    fn of_two_replicas_sharing_a_node_one_moves() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingInterPodAntiAffinity>();
        let shared = cluster.add_node(NodeBuilder::new("n1").label("kubernetes.io/hostname", "n1").build());
        let alone = cluster.add_node(NodeBuilder::new("n2").label("kubernetes.io/hostname", "n2").build());
        let first = cluster.bind(replica("web-0"), shared);
        cluster.bind(replica("web-1"), shared);
        cluster.bind(replica("web-2"), alone);
        let proposals = build::<RemovePodsViolatingInterPodAntiAffinity>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1, "{proposals:?}");
        assert_eq!(proposals[0].pod, first);
        assert_eq!(proposals[0].reason, "its required anti-affinity (kubernetes.io/hostname) repels default/web-1 in the same domain");
    }

    #[test]
    fn lowest_priority_goes_first_and_zones_count_as_domains() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingInterPodAntiAffinity>();
        let a1 = cluster.add_node(NodeBuilder::new("a1").label("zone", "a").build());
        let a2 = cluster.add_node(NodeBuilder::new("a2").label("zone", "a").build());
        let zonal = |name: &str, priority: i32| {
            PodBuilder::new(name).label("app", "db").require_anti_affinity(affinity_term("zone", &[("app", "db")])).priority(priority).running().build()
        };
        cluster.bind(zonal("important", 100), a1);
        let low = cluster.bind(zonal("low", 1), a1);
        cluster.bind(zonal("other-node", 50), a2);
        let proposals = build::<RemovePodsViolatingInterPodAntiAffinity>("").unwrap().propose(&cluster, &EvictContext::at(0));
        let ids: Vec<PodId> = proposals.iter().map(|eviction| eviction.pod).collect();
        assert_eq!(ids[0], low);
        assert_eq!(ids.len(), 2, "three db pods in one zone: two must go, {proposals:?}");
    }

    #[test]
    fn pods_outside_the_namespaces_are_left_alone() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingInterPodAntiAffinity>();
        let node = cluster.add_node(NodeBuilder::new("n1").label("kubernetes.io/hostname", "n1").build());
        cluster.bind(replica("web-0"), node);
        cluster.bind(replica("web-1"), node);
        let policy = build::<RemovePodsViolatingInterPodAntiAffinity>(r#"{"namespaces": {"exclude": ["default"]}}"#).unwrap();
        assert!(policy.propose(&cluster, &EvictContext::at(0)).is_empty());
        let error = build::<RemovePodsViolatingInterPodAntiAffinity>(r#"{"namespaces": {"include": ["a"], "exclude": ["b"]}}"#).err().unwrap();
        assert!(error.contains("only one of include and exclude"), "{error}");
    }
}
