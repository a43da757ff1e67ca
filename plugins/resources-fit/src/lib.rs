//! `resources-fit`: kube-scheduler's NodeResourcesFit filter. A node fits when it has room for one more pod and
//! its allocatable minus what is already requested covers the pod's effective requests (containers, the largest
//! init step, sidecars and overhead) for CPU, memory, ephemeral storage and every extended resource.

use serde::{Deserialize, Serialize};
use wasp_sdk::policy::verdicts_for;
use wasp_sdk::resources::ResourceVector;
use wasp_sdk::types::{FilterResult, NodeId, Pod};
use wasp_sdk::{Cluster, Filter, NodeFacts, NodeInfo, Policy, Verdict};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Extended resources the filter does not check (kube-scheduler's `ignoredResources`).
    pub ignored_resources: Vec<String>,
    /// Resource groups (the part before `/`) the filter does not check (`ignoredResourceGroups`).
    pub ignored_resource_groups: Vec<String>,
}

pub struct ResourcesFit {
    settings: Settings,
}

impl ResourcesFit {
    fn ignores(&self, resource: &str) -> bool {
        self.settings.ignored_resources.iter().any(|name| name == resource)
            || resource.split_once('/').is_some_and(|(group, _)| self.settings.ignored_resource_groups.iter().any(|name| name == group))
    }
}

impl Policy for ResourcesFit {
    type Settings = Settings;
    const NAME: &'static str = "resources-fit";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "ignoredResources: extended resources not checked\n\
        ignoredResourceGroups: resource groups (prefix before '/') not checked";

    fn new(settings: Settings) -> Result<Self, String> {
        if settings.ignored_resources.iter().any(|name| name.is_empty()) {
            return Err("ignoredResources: empty resource name".into());
        }
        if let Some(group) = settings.ignored_resource_groups.iter().find(|group| group.is_empty() || group.contains('/')) {
            return Err(format!("ignoredResourceGroups: {group:?} is not a group name (no '/', not empty)"));
        }
        Ok(ResourcesFit { settings })
    }
}

impl ResourcesFit {
    /// The check itself, with the pod's requests computed once by the caller.
    fn fits(&self, wanted: &ResourceVector, node: &NodeInfo) -> Verdict {
        let mut reasons = Vec::new();
        if node.usage.pod_count + 1 > node.node.allocatable_pods {
            reasons.push("Too many pods".into());
        }
        let (allocatable, requested) = (&node.node.allocatable, &node.usage.requested);
        let free = |capacity: u64, used: u64| capacity.saturating_sub(used);
        if wanted.cpu_millis > free(allocatable.cpu_millis, requested.cpu_millis) {
            reasons.push("Insufficient cpu".into());
        }
        if wanted.memory_bytes > free(allocatable.memory_bytes, requested.memory_bytes) {
            reasons.push("Insufficient memory".into());
        }
        if wanted.ephemeral_storage_bytes > free(allocatable.ephemeral_storage_bytes, requested.ephemeral_storage_bytes) {
            reasons.push("Insufficient ephemeral-storage".into());
        }
        for (resource, amount) in &wanted.scalar {
            if *amount > free(allocatable.scalar(resource), requested.scalar(resource)) && !self.ignores(resource) {
                reasons.push(format!("Insufficient {resource}").into());
            }
        }
        if reasons.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Reject(reasons)
        }
    }
}

impl Filter for ResourcesFit {
    fn filter(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {
        self.fits(&pod.requests(), node)
    }

    fn filter_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> FilterResult {
        let wanted = pod.requests();
        verdicts_for(cluster, candidates, |node| self.fits(&wanted, node))
    }
}

wasp_sdk::export_policy!(ResourcesFit);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    fn fit(settings: Settings, cluster: &Cluster, pod: Pod, node: u32) -> Verdict {
        ResourcesFit::new(settings).unwrap().filter(&pod, cluster.node(node).unwrap(), cluster)
    }

    #[test]
    fn rejects_each_insufficient_resource_by_name() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("2").memory("4Gi").build());
        cluster.bind(PodBuilder::new("existing").cpu("1500m").memory("1Gi").build(), node);
        assert!(fit(Settings::default(), &cluster, PodBuilder::new("p").cpu("500m").build(), node).is_pass());
        assert_eq!(
            fit(Settings::default(), &cluster, PodBuilder::new("p").cpu("501m").memory("4Gi").build(), node),
            Verdict::Reject(vec!["Insufficient cpu".into(), "Insufficient memory".into()])
        );
    }

    #[test]
    fn counts_the_largest_init_step_and_overhead() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("1").build());
        let init_heavy = PodBuilder::new("p").cpu("100m").init_container("setup", &[("cpu", "1100m")]).build();
        assert_eq!(fit(Settings::default(), &cluster, init_heavy, node), Verdict::reject("Insufficient cpu"));
        let with_overhead = PodBuilder::new("p").cpu("950m").overhead("cpu", "100m").build();
        assert_eq!(fit(Settings::default(), &cluster, with_overhead, node), Verdict::reject("Insufficient cpu"));
    }

    #[test]
    fn pod_count_limit() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").max_pods(1).build());
        assert!(fit(Settings::default(), &cluster, PodBuilder::new("a").build(), node).is_pass());
        cluster.bind(PodBuilder::new("a").build(), node);
        assert_eq!(fit(Settings::default(), &cluster, PodBuilder::new("b").build(), node), Verdict::reject("Too many pods"));
    }

    #[test]
    fn extended_resources_and_ignore_lists() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").allocatable("nvidia.com/gpu", "1").build());
        let pod = || PodBuilder::new("p").request("nvidia.com/gpu", "2").request("example.com/foo", "1").build();
        assert_eq!(
            fit(Settings::default(), &cluster, pod(), node),
            Verdict::Reject(vec!["Insufficient example.com/foo".into(), "Insufficient nvidia.com/gpu".into()])
        );
        let settings = Settings { ignored_resources: vec!["nvidia.com/gpu".into()], ignored_resource_groups: vec!["example.com".into()] };
        assert!(fit(settings, &cluster, pod(), node).is_pass());
    }

    #[test]
    fn settings_are_validated() {
        let error = ResourcesFit::new(Settings { ignored_resource_groups: vec!["a/b".into()], ..Default::default() });
        assert!(error.err().unwrap().contains("ignoredResourceGroups"));
        let error = wasp_sdk::guest::build::<ResourcesFit>(r#"{"ignoredResource": []}"#).err().unwrap();
        assert!(error.contains("unknown field `ignoredResource`"), "{error}");
    }
}
