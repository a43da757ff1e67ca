//! `remove-pods-violating-node-taints`: the descheduler's RemovePodsViolatingNodeTaints. Proposes evicting pods
//! that run on a node with a `NoSchedule` taint (and, if enabled, `PreferNoSchedule`) they do not tolerate, e.g.
//! after the node was tainted. The host applies the eviction safety rules and limits.

use serde::{Deserialize, Serialize};
use wasp_sdk::matching::first_untolerated_taint;
use wasp_sdk::types::{EvictContext, Eviction, PodPhase, Taint, TaintEffect, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, PodFacts, Policy};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Taints to ignore: `key` (any value) or `key=value`.
    pub excluded_taints: Vec<String>,
    /// Only these taints count (same forms); empty: every taint not excluded.
    pub included_taints: Vec<String>,
    /// Also evict for untolerated `PreferNoSchedule` taints.
    pub include_prefer_no_schedule: bool,
}

pub struct RemovePodsViolatingNodeTaints {
    settings: Settings,
}

/// Whether `taint` is one of `entries` (`key`, any value, or `key=value`).
fn listed(entries: &[String], taint: &Taint) -> bool {
    entries.iter().any(|entry| match entry.split_once('=') {
        Some((key, value)) => taint.key == key && taint.value == value,
        None => taint.key == *entry,
    })
}

impl RemovePodsViolatingNodeTaints {
    /// The descheduler's rule: excluded taints never count; with `includedTaints`, only those do.
    fn counts(&self, taint: &Taint) -> bool {
        let settings = &self.settings;
        !listed(&settings.excluded_taints, taint) && (settings.included_taints.is_empty() || listed(&settings.included_taints, taint))
    }
}

impl Policy for RemovePodsViolatingNodeTaints {
    type Settings = Settings;
    const NAME: &'static str = "remove-pods-violating-node-taints";
    const NODE_FACTS: NodeFacts = NodeFacts { taints: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "excludedTaints: taints ignored, as key or key=value\n\
        includedTaints: only these taints count, as key or key=value (default all)\n\
        includePreferNoSchedule: also act on PreferNoSchedule taints (default false)";

    fn new(settings: Settings) -> Result<Self, String> {
        for (field, entries) in [("excludedTaints", &settings.excluded_taints), ("includedTaints", &settings.included_taints)] {
            if let Some(bad) = entries.iter().find(|entry| entry.is_empty() || entry.starts_with('=')) {
                return Err(format!("{field}: {bad:?} has no taint key"));
            }
        }
        Ok(RemovePodsViolatingNodeTaints { settings })
    }
}

impl Evict for RemovePodsViolatingNodeTaints {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let mut effects = vec![TaintEffect::NoSchedule];
        if self.settings.include_prefer_no_schedule {
            effects.push(TaintEffect::PreferNoSchedule);
        }
        let mut evictions = Vec::new();
        for node in cluster.nodes() {
            let taints: Vec<Taint> = node.node.taints.iter().filter(|taint| self.counts(taint)).cloned().collect();
            for bound in cluster.pods_on(node) {
                if matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
                    continue;
                }
                if let Some(taint) = first_untolerated_taint(&taints, &bound.pod.tolerations, &effects) {
                    evictions
                        .push(Eviction::new(bound.id, format!("node {} has taint {{{}: {}}} the pod does not tolerate", node.name(), taint.key, taint.value)));
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(RemovePodsViolatingNodeTaints);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn proposes_pods_on_nodes_with_untolerated_taints() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingNodeTaints>();
        let tainted = cluster.add_node(NodeBuilder::new("n1").taint("maintenance", "true", TaintEffect::NoSchedule).build());
        let clean = cluster.add_node(NodeBuilder::new("n2").build());
        let victim = cluster.bind(PodBuilder::new("victim").running().build(), tainted);
        cluster.bind(PodBuilder::new("tolerant").toleration("maintenance", None, None).running().build(), tainted);
        cluster.bind(PodBuilder::new("elsewhere").running().build(), clean);
        let proposals = build::<RemovePodsViolatingNodeTaints>("").unwrap().propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1);
        assert_eq!(proposals[0].pod, victim);
        assert_eq!(proposals[0].reason, "node n1 has taint {maintenance: true} the pod does not tolerate");
    }

    #[test]
    fn excluded_and_soft_taints() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingNodeTaints>();
        let node = cluster
            .add_node(NodeBuilder::new("n1").taint("maintenance", "true", TaintEffect::NoSchedule).taint("spot", "yes", TaintEffect::PreferNoSchedule).build());
        cluster.bind(PodBuilder::new("p").running().build(), node);
        let excluded = build::<RemovePodsViolatingNodeTaints>(r#"{"excludedTaints": ["maintenance=true"]}"#).unwrap();
        assert!(excluded.propose(&cluster, &EvictContext::at(0)).is_empty());
        let soft = build::<RemovePodsViolatingNodeTaints>(r#"{"excludedTaints": ["maintenance"], "includePreferNoSchedule": true}"#).unwrap();
        assert_eq!(soft.propose(&cluster, &EvictContext::at(0)).len(), 1);
        let only_spot = build::<RemovePodsViolatingNodeTaints>(r#"{"includedTaints": ["spot=yes"], "includePreferNoSchedule": true}"#).unwrap();
        let proposals = only_spot.propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1);
        assert!(proposals[0].reason.contains("{spot: yes}"), "maintenance is not included: {}", proposals[0].reason);
        let only_other = build::<RemovePodsViolatingNodeTaints>(r#"{"includedTaints": ["gpu"]}"#).unwrap();
        assert!(only_other.propose(&cluster, &EvictContext::at(0)).is_empty());
        assert!(build::<RemovePodsViolatingNodeTaints>(r#"{"includedTaints": ["=x"]}"#).err().unwrap().contains("includedTaints"));
        assert!(build::<RemovePodsViolatingNodeTaints>(r#"{"excludedTaints": ["=x"]}"#).is_err());
    }
}
