//! `remove-failed-pods`: the descheduler's RemoveFailedPods. Pods in phase Failed still on their node (rejected
//! by the kubelet, evicted for pressure, crashed with `restartPolicy: Never`) are cleared away once old enough,
//! optionally only for given reasons or exit codes. The host keeps bare failed pods unless
//! `protections.evictFailedBarePods` is set.

use serde::{Deserialize, Serialize};
use wasp_sdk::selection::{Namespaces, PodFilter, Selector};
use wasp_sdk::types::{ContainerState, EvictContext, Eviction, Pod};
use wasp_sdk::{Cluster, Evict, NodeFacts, Policy};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Only pods created at least this long ago.
    pub min_pod_lifetime_seconds: u64,
    /// Only pods with one of these reasons (the pod's `status.reason` or a container's waiting or terminated
    /// reason); empty: any.
    pub reasons: Vec<String>,
    /// Only pods with a container terminated with one of these exit codes; empty: any.
    pub exit_codes: Vec<i32>,
    /// Pods owned by these kinds are kept (say `Job`, whose failed pods carry its history).
    pub exclude_owner_kinds: Vec<String>,
    /// Also read the init containers' reasons and exit codes.
    pub including_init_containers: bool,
    pub namespaces: Namespaces,
    pub label_selector: Option<Selector>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            min_pod_lifetime_seconds: 3600,
            reasons: Vec::new(),
            exit_codes: Vec::new(),
            exclude_owner_kinds: Vec::new(),
            including_init_containers: false,
            namespaces: Namespaces::default(),
            label_selector: None,
        }
    }
}

pub struct RemoveFailedPods {
    settings: Settings,
    filter: PodFilter,
}

impl Policy for RemoveFailedPods {
    type Settings = Settings;
    const NAME: &'static str = "remove-failed-pods";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "minPodLifetimeSeconds: only pods created at least this long ago (default 3600)\n\
        reasons: only pods with one of these reasons, pod or container (default any)\n\
        exitCodes: only pods with a container terminated with one of these codes (default any)\n\
        excludeOwnerKinds: owner kinds whose failed pods are kept (default none)\n\
        includingInitContainers: also read init containers (default false)\n\
        namespaces: {include: [...]} or {exclude: [...]} (default all)\n\
        labelSelector: only pods matching it (default all)";

    fn new(settings: Settings) -> Result<Self, String> {
        let filter = PodFilter::new(&settings.namespaces, settings.label_selector.as_ref())?;
        Ok(RemoveFailedPods { settings, filter })
    }
}

impl RemoveFailedPods {
    fn states<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = &'a ContainerState> + 'a {
        let init = pod.init_containers.iter().filter(|_| self.settings.including_init_containers);
        pod.containers.iter().chain(init).map(|container| &container.state)
    }

    /// Why the pod is cleared, or None when a setting keeps it.
    fn verdict(&self, pod: &Pod, now: i64) -> Option<String> {
        let settings = &self.settings;
        if !self.filter.admits(pod) {
            return None;
        }
        if pod.owner.as_ref().is_some_and(|owner| settings.exclude_owner_kinds.contains(&owner.kind)) {
            return None;
        }
        let age = now.saturating_sub(pod.created_at);
        if age < settings.min_pod_lifetime_seconds as i64 {
            return None;
        }
        let mut reasons: Vec<&str> = self
            .states(pod)
            .filter_map(|state| match state {
                ContainerState::Waiting(reason) => Some(reason.as_str()),
                ContainerState::Terminated(termination) => Some(termination.reason.as_str()),
                _ => None,
            })
            .collect();
        reasons.push(&pod.status_reason);
        reasons.retain(|reason| !reason.is_empty());
        if !settings.reasons.is_empty() && !reasons.iter().any(|reason| settings.reasons.iter().any(|wanted| wanted == reason)) {
            return None;
        }
        let codes: Vec<i32> = self
            .states(pod)
            .filter_map(|state| match state {
                ContainerState::Terminated(termination) => Some(termination.exit_code),
                _ => None,
            })
            .collect();
        if !settings.exit_codes.is_empty() && !codes.iter().any(|code| settings.exit_codes.contains(code)) {
            return None;
        }
        let why = if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) };
        Some(format!("failed{why} {age}s after its creation"))
    }
}

impl Evict for RemoveFailedPods {
    fn propose(&self, _cluster: &Cluster, context: &EvictContext) -> Vec<Eviction> {
        context.failed.iter().filter_map(|failed| Some(Eviction::new(failed.id, self.verdict(&failed.pod, context.now)?))).collect()
    }
}

wasp_sdk::export_policy!(RemoveFailedPods);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::PodBuilder;
    use wasp_sdk::types::FailedPod;

    const NOW: i64 = 100_000;

    fn context(pods: Vec<Pod>) -> EvictContext {
        let failed = pods.into_iter().enumerate().map(|(id, pod)| FailedPod { id: id as u32, node: "n1".into(), pod }).collect();
        EvictContext { failed, ..EvictContext::at(NOW) }
    }

    fn proposed(settings: &str, pods: Vec<Pod>) -> Vec<(u32, String)> {
        let policy = build::<RemoveFailedPods>(settings).unwrap();
        policy.propose(&Cluster::new(), &context(pods)).into_iter().map(|eviction| (eviction.pod, eviction.reason)).collect()
    }

    fn failed(name: &str, reason: &str, container_reason: &str, code: i32) -> Pod {
        PodBuilder::new(name).owner("ReplicaSet", "web").created_at(NOW - 7200).failed(reason, container_reason, code).build()
    }

    #[test]
    fn old_failed_pods_are_cleared_young_ones_wait() {
        let young = PodBuilder::new("young").created_at(NOW - 60).failed("", "Error", 1).build();
        let proposals = proposed("", vec![failed("old", "", "Error", 1), young]);
        assert_eq!(proposals, vec![(0, "failed (Error) 7200s after its creation".to_string())]);
        assert_eq!(proposed(r#"{"minPodLifetimeSeconds": 0}"#, vec![PodBuilder::new("y").failed("", "Error", 1).build()]).len(), 1);
    }

    #[test]
    fn reasons_and_exit_codes_select() {
        let pods = || vec![failed("rejected", "NodeAffinity", "", 0), failed("oom", "", "OOMKilled", 137), failed("crash", "", "Error", 1)];
        let ids = |settings: &str| proposed(settings, pods()).into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(r#"{"reasons": ["NodeAffinity"]}"#), [0], "the pod's status.reason counts");
        assert_eq!(ids(r#"{"reasons": ["OOMKilled", "Error"]}"#), [1, 2]);
        assert_eq!(ids(r#"{"exitCodes": [137]}"#), [1]);
        assert_eq!(ids(r#"{"reasons": ["Error"], "exitCodes": [137]}"#), Vec::<u32>::new(), "every criterion must hold");
        assert_eq!(ids(r#"{"excludeOwnerKinds": ["ReplicaSet"]}"#), Vec::<u32>::new());
    }

    #[test]
    fn init_containers_only_when_asked() {
        let pod = PodBuilder::new("init-failed")
            .created_at(NOW - 7200)
            .init_container("setup", &[])
            .failed("", "", 0)
            .with(|pod| {
                pod.containers[0].state = ContainerState::Waiting(String::new());
                pod.init_containers[0].state = ContainerState::Terminated(wasp_sdk::types::Termination { reason: "Error".into(), exit_code: 2 });
            })
            .build();
        assert!(proposed(r#"{"exitCodes": [2]}"#, vec![pod.clone()]).is_empty());
        assert_eq!(proposed(r#"{"exitCodes": [2], "includingInitContainers": true}"#, vec![pod]).len(), 1);
    }
}
