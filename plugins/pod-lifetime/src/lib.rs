//! `pod-lifetime`: the descheduler's PodLifeTime. Pods older than `maxPodLifeTimeSeconds` are proposed, oldest
//! first, so long-running pods are recycled (credentials, leaks, drift). Age is from the host's clock, passed in
//! the context (a policy's own clock is stopped).

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{EvictContext, Eviction, PodPhase, ViewScope};
use wasp_sdk::{Cluster, Evict, NodeFacts, PodFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    pub max_pod_life_time_seconds: u64,
    /// Pod phases to act on (`Pending`, `Running`, `Unknown`); empty: any.
    pub states: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { max_pod_life_time_seconds: 7 * 86_400, states: Vec::new() }
    }
}

pub struct PodLifetime {
    settings: Settings,
}

fn phase_name(phase: PodPhase) -> &'static str {
    match phase {
        PodPhase::Pending => "Pending",
        PodPhase::Running => "Running",
        PodPhase::Succeeded => "Succeeded",
        PodPhase::Failed => "Failed",
        PodPhase::Unknown => "Unknown",
    }
}

impl Policy for PodLifetime {
    type Settings = Settings;
    const NAME: &'static str = "pod-lifetime";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts::NONE;
    const SETTINGS_DOC: &'static str = "maxPodLifeTimeSeconds: pods older than this are proposed (default 604800, a week)\n\
        states: pod phases to act on: Pending, Running, Unknown (default any)";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.max_pod_life_time_seconds == 0 {
            return Err("maxPodLifeTimeSeconds: must be at least 1".into());
        }
        if let Some(unknown) = settings.states.iter().find(|state| !["Pending", "Running", "Unknown"].contains(&state.as_str())) {
            return Err(format!("states: {unknown:?} is not Pending, Running or Unknown"));
        }
        Ok(PodLifetime { settings })
    }
}

impl Evict for PodLifetime {
    fn propose(&self, cluster: &Cluster, context: &EvictContext) -> Vec<Eviction> {
        let limit = self.settings.max_pod_life_time_seconds as i64;
        let states = &self.settings.states;
        let mut old: Vec<_> = cluster
            .pods()
            .filter(|bound| states.is_empty() || states.iter().any(|state| state == phase_name(bound.pod.phase)))
            .filter(|bound| !matches!(bound.pod.phase, PodPhase::Succeeded | PodPhase::Failed))
            .map(|bound| (context.now.saturating_sub(bound.pod.created_at), bound.id))
            .filter(|(age, _)| *age > limit)
            .collect();
        old.sort_by_key(|(age, id)| (std::cmp::Reverse(*age), *id));
        old.into_iter().map(|(age, id)| Eviction::new(id, format!("running for {age}s, longer than maxPodLifeTimeSeconds {limit}"))).collect()
    }
}

wasp_sdk::export_policy!(PodLifetime);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn pods_older_than_the_limit_are_proposed_oldest_first() {
        let mut cluster = Cluster::for_policy::<PodLifetime>();
        let node = cluster.add_node(NodeBuilder::new("n").build());
        let old = cluster.bind(PodBuilder::new("old").created_at(1_000).running().build(), node);
        let older = cluster.bind(PodBuilder::new("older").created_at(500).running().build(), node);
        cluster.bind(PodBuilder::new("young").created_at(9_000).running().build(), node);
        let policy = build::<PodLifetime>(r#"{"maxPodLifeTimeSeconds": 3600}"#).unwrap();
        let proposals = policy.propose(&cluster, &EvictContext::at(10_000));
        assert_eq!(proposals.iter().map(|eviction| eviction.pod).collect::<Vec<_>>(), [older, old]);
        assert_eq!(proposals[0].reason, "running for 9500s, longer than maxPodLifeTimeSeconds 3600");
        let pending_only = build::<PodLifetime>(r#"{"maxPodLifeTimeSeconds": 3600, "states": ["Pending"]}"#).unwrap();
        assert!(pending_only.propose(&cluster, &EvictContext::at(10_000)).is_empty());
        assert!(build::<PodLifetime>(r#"{"states": ["Sleeping"]}"#).is_err());
    }
}
