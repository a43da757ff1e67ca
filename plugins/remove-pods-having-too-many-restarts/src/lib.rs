//! `remove-pods-having-too-many-restarts`: the descheduler's RemovePodsHavingTooManyRestarts. A pod whose
//! containers restarted at least `podRestartThreshold` times is proposed: on another node it may do better
//! (a noisy neighbour, a bad disk), and if not, its restarts start counting again.

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{EvictContext, Eviction, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    pub pod_restart_threshold: u32,
    /// Count the init containers' restarts too.
    pub including_init_containers: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { pod_restart_threshold: 100, including_init_containers: false }
    }
}

pub struct RemovePodsHavingTooManyRestarts {
    settings: Settings,
}

impl Policy for RemovePodsHavingTooManyRestarts {
    type Settings = Settings;
    const NAME: &'static str = "remove-pods-having-too-many-restarts";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { containers: true, ..PodFacts::NONE };
    const SETTINGS_DOC: &'static str = "podRestartThreshold: restarts (summed over containers) at which a pod is proposed (default 100)\n\
        includingInitContainers: count init containers' restarts too (default false)";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.pod_restart_threshold == 0 {
            return Err("podRestartThreshold: must be at least 1".into());
        }
        Ok(RemovePodsHavingTooManyRestarts { settings })
    }
}

impl Evict for RemovePodsHavingTooManyRestarts {
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {
        let threshold = self.settings.pod_restart_threshold;
        let mut evictions = Vec::new();
        for node in cluster.nodes() {
            for bound in cluster.pods_on(node).filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed)) {
                let pod = &bound.pod;
                let init = pod.init_containers.iter().filter(|_| self.settings.including_init_containers);
                let restarts: u32 = pod.containers.iter().chain(init).map(|container| container.restart_count).fold(0, u32::saturating_add);
                if restarts >= threshold {
                    evictions.push(Eviction::new(bound.id, format!("{restarts} container restarts on node {} (threshold {threshold})", node.name())));
                }
            }
        }
        evictions
    }
}

wasp_sdk::export_policy!(RemovePodsHavingTooManyRestarts);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn pods_at_the_threshold_are_proposed() {
        let mut cluster = Cluster::for_policy::<RemovePodsHavingTooManyRestarts>();
        let node = cluster.add_node(NodeBuilder::new("n").build());
        let crashing = cluster.bind(PodBuilder::new("crashing").restarts(12).running().build(), node);
        cluster.bind(PodBuilder::new("steady").restarts(2).running().build(), node);
        let init_heavy =
            cluster.bind(PodBuilder::new("init").init_container("setup", &[]).with(|pod| pod.init_containers[0].restart_count = 20).running().build(), node);
        let policy = build::<RemovePodsHavingTooManyRestarts>(r#"{"podRestartThreshold": 10}"#).unwrap();
        let proposals = policy.propose(&cluster, &EvictContext::at(0));
        assert_eq!(proposals.len(), 1);
        assert_eq!(proposals[0].pod, crashing);
        assert_eq!(proposals[0].reason, "12 container restarts on node n (threshold 10)");
        let with_init = build::<RemovePodsHavingTooManyRestarts>(r#"{"podRestartThreshold": 10, "includingInitContainers": true}"#).unwrap();
        let proposed: Vec<_> = with_init.propose(&cluster, &EvictContext::at(0)).into_iter().map(|eviction| eviction.pod).collect();
        assert!(proposed.contains(&init_heavy) && proposed.contains(&crashing));
        assert!(build::<RemovePodsHavingTooManyRestarts>(r#"{"podRestartThreshold": 0}"#).is_err());
    }
}
