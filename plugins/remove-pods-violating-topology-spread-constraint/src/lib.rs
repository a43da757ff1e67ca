//! `remove-pods-violating-topology-spread-constraint`: the descheduler's strategy of the same name. Pods spread
//! by a topology constraint drift out of balance as nodes come and go; for each constraint (per namespace,
//! key, skew and selector), while the most crowded domain has more than `maxSkew` matching pods over the
//! emptiest, one pod of the most crowded domain is proposed (youngest first). The scheduler's own
//! pod-topology-spread filter, in the host's fit check, places it where the skew shrinks.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use wasp_sdk::spread::{domain_counts, resolved_selector};
use wasp_sdk::types::{EvictContext, Eviction, PodId, PodPhase, UnsatisfiableAction, ViewScope};
use wasp_sdk::{Cluster, Evict, LabelScope, NodeFacts, PodFacts, Policy};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Also balance `ScheduleAnyway` constraints (by default only `DoNotSchedule` ones).
    pub include_soft_constraints: bool,
}

pub struct RemovePodsViolatingTopologySpreadConstraint {
    settings: Settings,
}

impl Policy for RemovePodsViolatingTopologySpreadConstraint {
    type Settings = Settings;
    const NAME: &'static str = "remove-pods-violating-topology-spread-constraint";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, taints: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { labels: LabelScope::Selected, placement: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "includeSoftConstraints: also balance ScheduleAnyway constraints (default false)";

    fn new(settings: Settings) -> Result<Self, String> {
        Ok(RemovePodsViolatingTopologySpreadConstraint { settings })
    }
}

impl Evict for RemovePodsViolatingTopologySpreadConstraint {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let mut evictions = Vec::new();
        let mut proposed: HashSet<PodId> = HashSet::new();
        // Each distinct constraint once: pods of one workload share it.
        let mut seen: HashSet<String> = HashSet::new();
        for bound in cluster.pods() {
            let pod = &bound.pod;
            for constraint in &pod.topology_spread {
                let hard = constraint.when_unsatisfiable == UnsatisfiableAction::DoNotSchedule;
                if !hard && !self.settings.include_soft_constraints {
                    continue;
                }
                let selector = resolved_selector(pod, constraint);
                if !seen.insert(format!("{}|{:?}|{:?}", pod.namespace, constraint, selector)) {
                    continue;
                }
                let keys = [constraint.topology_key.as_str()];
                let mut counts: BTreeMap<&str, i64> = domain_counts(pod, cluster, constraint, &selector, &keys).into_iter().collect();
                // The matching pods of each domain, youngest first, as candidates to move.
                let mut members: BTreeMap<&str, Vec<(i64, PodId)>> = BTreeMap::new();
                for node in cluster.nodes() {
                    let Some(domain) = node.node.label(&constraint.topology_key).filter(|domain| counts.contains_key(domain)) else { continue };
                    for other in cluster.pods_on(node) {
                        let matches = other.pod.namespace == pod.namespace && !other.pod.terminating && selector.matches(&other.pod.labels);
                        if matches && !matches!(other.pod.phase, PodPhase::Succeeded | PodPhase::Failed) {
                            members.entry(domain).or_default().push((other.pod.created_at, other.id));
                        }
                    }
                }
                for list in members.values_mut() {
                    list.sort_by_key(|(created, id)| (*created, *id));
                }
                while let Some((&fullest, &most)) = counts.iter().max_by_key(|(domain, count)| (**count, std::cmp::Reverse(**domain))) {
                    let (&emptiest, &least) = counts.iter().min_by_key(|(domain, count)| (**count, **domain)).expect("not empty");
                    if most - least <= constraint.max_skew as i64 {
                        break;
                    }
                    let Some((_, id)) = members.get_mut(fullest).and_then(Vec::pop) else { break };
                    *counts.get_mut(fullest).expect("present") -= 1;
                    *counts.get_mut(emptiest).expect("present") += 1;
                    if proposed.insert(id) {
                        let reason = format!(
                            "{}={fullest} has {most} matching pods, {}={emptiest} has {least}: more than maxSkew {}",
                            constraint.topology_key, constraint.topology_key, constraint.max_skew
                        );
                        evictions.push(Eviction::new(id, reason));
                    }
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(RemovePodsViolatingTopologySpreadConstraint);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};
    use wasp_sdk::types::Pod;

    fn spread_pod(name: &str, created: i64, action: UnsatisfiableAction) -> Pod {
        PodBuilder::new(name).label("app", "web").spread("zone", 1, action, &[("app", "web")]).created_at(created).running().build()
    }

    #[test]
    fn the_most_crowded_domain_gives_pods_until_the_skew_is_within_bounds() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingTopologySpreadConstraint>();
        let a = cluster.add_node(NodeBuilder::new("a1").label("zone", "a").build());
        cluster.add_node(NodeBuilder::new("b1").label("zone", "b").build());
        cluster.add_node(NodeBuilder::new("c1").label("zone", "c").build());
        let ids: Vec<PodId> = (0..4).map(|index| cluster.bind(spread_pod(&format!("web-{index}"), index, UnsatisfiableAction::DoNotSchedule), a)).collect();
        let proposals = build::<RemovePodsViolatingTopologySpreadConstraint>("").unwrap().propose(&cluster, &EvictContext::at(0));
        // 4/0/0 with maxSkew 1: two moves make 2/1/1.
        assert_eq!(proposals.iter().map(|eviction| eviction.pod).collect::<Vec<_>>(), [ids[3], ids[2]]);
        assert_eq!(proposals[0].reason, "zone=a has 4 matching pods, zone=b has 0: more than maxSkew 1");
    }

    #[test]
    fn soft_constraints_only_when_asked() {
        let mut cluster = Cluster::for_policy::<RemovePodsViolatingTopologySpreadConstraint>();
        let a = cluster.add_node(NodeBuilder::new("a1").label("zone", "a").build());
        cluster.add_node(NodeBuilder::new("b1").label("zone", "b").build());
        for index in 0..3 {
            cluster.bind(spread_pod(&format!("web-{index}"), index, UnsatisfiableAction::ScheduleAnyway), a);
        }
        assert!(build::<RemovePodsViolatingTopologySpreadConstraint>("").unwrap().propose(&cluster, &EvictContext::at(0)).is_empty());
        let soft = build::<RemovePodsViolatingTopologySpreadConstraint>(r#"{"includeSoftConstraints": true}"#).unwrap();
        assert_eq!(soft.propose(&cluster, &EvictContext::at(0)).len(), 1, "3/0 becomes 2/1");
    }
}
