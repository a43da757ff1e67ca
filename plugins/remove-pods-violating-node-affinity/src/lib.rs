//! `remove-pods-violating-node-affinity`: the descheduler's RemovePodsViolatingNodeAffinity. Proposes pods whose
//! node no longer satisfies their `nodeSelector` and required node affinity (the node was relabelled after they
//! started: "IgnoredDuringExecution"), and, when enabled, pods whose node now matches fewer preferred terms
//! than some other node that satisfies their requirements. The host's fit check decides whether they land
//! elsewhere.

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{EvictContext, Eviction, Node, Pod, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, PodFacts, Policy};

const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Which affinity to enforce: `requiredDuringSchedulingIgnoredDuringExecution` and/or
    /// `preferredDuringSchedulingIgnoredDuringExecution`.
    pub node_affinity_type: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { node_affinity_type: vec![REQUIRED.into()] }
    }
}

pub struct RemovePodsViolatingNodeAffinity {
    required: bool,
    preferred: bool,
}

/// Sum of the weights of the pod's preferred terms that `node` matches.
fn preferred_weight(pod: &Pod, node: &Node) -> i64 {
    let terms = pod.node_affinity.iter().flat_map(|affinity| affinity.preferred.iter());
    terms.filter(|preferred| preferred.term.matches(node)).map(|preferred| preferred.weight as i64).sum()
}

impl Policy for RemovePodsViolatingNodeAffinity {
    type Settings = Settings;
    const NAME: &'static str = "remove-pods-violating-node-affinity";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "nodeAffinityType: list of requiredDuringSchedulingIgnoredDuringExecution (default) \
        and/or preferredDuringSchedulingIgnoredDuringExecution";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.node_affinity_type.is_empty() {
            return Err(format!("nodeAffinityType: name at least one of {REQUIRED}, {PREFERRED}"));
        }
        if let Some(unknown) = settings.node_affinity_type.iter().find(|kind| *kind != REQUIRED && *kind != PREFERRED) {
            return Err(format!("nodeAffinityType: {unknown:?} is neither {REQUIRED} nor {PREFERRED}"));
        }
        let has = |kind: &str| settings.node_affinity_type.iter().any(|entry| entry == kind);
        Ok(RemovePodsViolatingNodeAffinity { required: has(REQUIRED), preferred: has(PREFERRED) })
    }
}

impl Evict for RemovePodsViolatingNodeAffinity {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let mut evictions = Vec::new();
        for node in cluster.nodes() {
            for bound in cluster.pods_on(node) {
                let pod = &bound.pod;
                if matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
                    continue;
                }
                if self.required && !pod.matches_node_selector_and_required_affinity(&node.node) {
                    evictions
                        .push(Eviction::new(bound.id, format!("node {} no longer matches the pod's node selector or required node affinity", node.name())));
                    continue;
                }
                let has_preferences = pod.node_affinity.as_ref().is_some_and(|affinity| !affinity.preferred.is_empty());
                if self.preferred && has_preferences {
                    let here = preferred_weight(pod, &node.node);
                    let best = cluster
                        .nodes()
                        .filter(|other| other.id != node.id && !other.node.unschedulable && pod.matches_node_selector_and_required_affinity(&other.node))
                        .map(|other| (preferred_weight(pod, &other.node), other.name()))
                        .max_by_key(|(weight, _)| *weight);
                    if let Some((weight, better)) = best.filter(|(weight, _)| *weight > here) {
                        evictions.push(Eviction::new(
                            bound.id,
                            format!("node {} matches preferred node affinity weight {here}; node {better} matches {weight}", node.name()),
                        ));
                    }
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(RemovePodsViolatingNodeAffinity);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};
    use wasp_sdk::types::{SelectorOperator, SelectorRequirement};

    fn zone_is(zone: &str) -> Vec<SelectorRequirement> {
        vec![SelectorRequirement { key: "zone".into(), operator: SelectorOperator::In, values: vec![zone.into()] }]
    }

    #[test]
    fn pods_whose_node_no_longer_matches_are_proposed() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingNodeAffinity>();
        let relabelled = cluster.add_node(NodeBuilder::new("n1").label("zone", "b").build());
        let matching = cluster.add_node(NodeBuilder::new("n2").label("zone", "a").build());
        let stale = cluster.bind(PodBuilder::new("stale").require_node_term(zone_is("a")).running().build(), relabelled);
        cluster.bind(PodBuilder::new("fine").require_node_term(zone_is("a")).running().build(), matching);
        cluster.bind(PodBuilder::new("selector").node_selector("zone", "b").running().build(), relabelled);
        cluster.bind(PodBuilder::new("free").running().build(), relabelled);
        let proposals = build::<RemovePodsViolatingNodeAffinity>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1, "{proposals:?}");
        assert_eq!(proposals[0].pod, stale);
        assert_eq!(proposals[0].reason, "node n1 no longer matches the pod's node selector or required node affinity");
    }

    #[test]
    fn preferred_affinity_only_when_enabled_and_a_better_node_exists() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingNodeAffinity>();
        let worse = cluster.add_node(NodeBuilder::new("n1").label("zone", "b").build());
        cluster.add_node(NodeBuilder::new("n2").label("zone", "a").build());
        let pod = cluster.bind(PodBuilder::new("p").prefer_node_term(10, zone_is("a")).running().build(), worse);
        assert!(build::<RemovePodsViolatingNodeAffinity>("").unwrap().propose(&cluster, &EvictContext::at(0)).is_empty(), "required only by default");
        let both = build::<RemovePodsViolatingNodeAffinity>(&format!(r#"{{"nodeAffinityType": ["{REQUIRED}", "{PREFERRED}"]}}"#)).unwrap();
        let proposals = both.propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1);
        assert_eq!(proposals[0].pod, pod);
        assert_eq!(proposals[0].reason, "node n1 matches preferred node affinity weight 0; node n2 matches 10");
    }

    #[test]
    fn settings_are_validated() {
        assert!(build::<RemovePodsViolatingNodeAffinity>(r#"{"nodeAffinityType": []}"#).err().unwrap().contains("name at least one"));
        assert!(build::<RemovePodsViolatingNodeAffinity>(r#"{"nodeAffinityType": ["required"]}"#).err().unwrap().contains("\"required\" is neither"));
    }
}
