//! [`View`]: what one policy's instances receive of the cluster. Pods only in views with pods, and of each pod
//! and node only the facts the policy declares in its descriptor (`pod-facts`, `node-facts`): a cold strategy
//! that keeps 50k pods for their placement alone is synced without their containers and labels, and a node's
//! images (kilobytes each) reach only the policies that read them. Of a pod's labels, a view that keeps
//! `selected` ones gets those whose keys some pod's selector ([`SelectedKeys`]) or the policy's own settings
//! name. Pods of calls (the pod to place, pending and failed pods) are not views: they go whole.

use super::SelectedKeys;
use crate::contract::types::{ClusterDelta, Descriptor, LabelScope, Node, NodeFacts, Pod, PodFacts, PodPlace, Resources, ViewScope};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View<'a> {
    pub scope: ViewScope,
    pub pod_facts: PodFacts,
    pub node_facts: NodeFacts,
    /// The label keys the policy's settings name (its `configure` answer), kept beside the selected ones.
    pub settings_keys: &'a [String],
}

const ALL_POD_FACTS: PodFacts = PodFacts { labels: LabelScope::All, containers: true, images: true, placement: true, pod_affinity: true, host_ports: true };

impl<'a> View<'a> {
    /// What the policy `descriptor` describes declares, and the label keys its settings name.
    pub fn of(descriptor: &Descriptor, settings_keys: &'a [String]) -> View<'a> {
        View { scope: descriptor.view, pod_facts: descriptor.pod_facts, node_facts: descriptor.node_facts, settings_keys }
    }

    /// The copy of `delta` this view receives: upserts keep only the declared facts.
    pub fn delta(&self, delta: &ClusterDelta, selected: &SelectedKeys) -> ClusterDelta {
        match delta {
            ClusterDelta::NodeUpsert((id, node, usage)) => ClusterDelta::NodeUpsert((*id, self.node(node), usage.clone())),
            ClusterDelta::PodUpsert((id, place @ PodPlace::Bound(_), pod)) => ClusterDelta::PodUpsert((*id, place.clone(), self.pod(pod, selected))),
            other => other.clone(),
        }
    }

    fn labels(&self, labels: &[(String, String)], selected: &SelectedKeys) -> Vec<(String, String)> {
        match self.pod_facts.labels {
            LabelScope::None => Vec::new(),
            LabelScope::All => labels.to_vec(),
            LabelScope::Selected => labels.iter().filter(|(key, _)| selected.contains(key) || self.settings_keys.contains(key)).cloned().collect(),
        }
    }

    pub fn node(&self, node: &Node) -> Node {
        Node {
            name: node.name.clone(),
            labels: keep(self.node_facts.labels, &node.labels),
            taints: keep(self.node_facts.taints, &node.taints),
            unschedulable: node.unschedulable,
            allocatable: node.allocatable.clone(),
            allocatable_pods: node.allocatable_pods,
            conditions: keep(self.node_facts.conditions, &node.conditions),
            images: keep(self.node_facts.images, &node.images),
            volume_limits: node.volume_limits.clone(),
        }
    }

    /// A copy of a bound pod with the declared facts only; what is not kept is not copied either.
    pub fn pod(&self, pod: &Pod, selected: &SelectedKeys) -> Pod {
        let facts = self.pod_facts;
        fn keep_some<T: Clone>(kept: bool, value: &Option<T>) -> Option<T> {
            if kept {
                value.clone()
            } else {
                None
            }
        }
        let containers = |list: &[crate::contract::types::Container]| {
            let mut list = keep(facts.containers, list);
            if !facts.images {
                list.iter_mut().for_each(|container| container.image = String::new());
            }
            list
        };
        Pod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            labels: self.labels(&pod.labels, selected),
            scheduler_name: pod.scheduler_name.clone(),
            priority: pod.priority,
            phase: pod.phase,
            containers: containers(&pod.containers),
            init_containers: containers(&pod.init_containers),
            sidecar_init_containers: keep(facts.containers, &pod.sidecar_init_containers),
            overhead: if facts.containers {
                pod.overhead.clone()
            } else {
                Resources { cpu_millis: 0, memory_bytes: 0, ephemeral_storage_bytes: 0, scalar: Vec::new() }
            },
            node_selector: keep(facts.placement, &pod.node_selector),
            node_affinity: keep_some(facts.placement, &pod.node_affinity),
            tolerations: keep(facts.placement, &pod.tolerations),
            topology_spread: keep(facts.placement, &pod.topology_spread),
            owner: pod.owner.clone(),
            created_at: pod.created_at,
            terminating: pod.terminating,
            mirror: pod.mirror,
            local_storage: pod.local_storage,
            pvc: pod.pvc,
            ready: pod.ready,
            nominated_node: keep_some(facts.placement, &pod.nominated_node),
            pod_affinity: keep_some(facts.pod_affinity, &pod.pod_affinity),
            pod_anti_affinity: keep_some(facts.pod_affinity, &pod.pod_anti_affinity),
            host_ports: keep(facts.host_ports, &pod.host_ports),
            status_reason: pod.status_reason.clone(),
            // Views never carry annotations or claims (see the contract).
            annotations: Vec::new(),
            volume_claims: Vec::new(),
        }
    }
}

fn keep<T: Clone>(kept: bool, list: &[T]) -> Vec<T> {
    if kept {
        list.to_vec()
    } else {
        Vec::new()
    }
}

/// A view with every fact (natively compiled policies, tests).
impl From<ViewScope> for View<'static> {
    fn from(scope: ViewScope) -> View<'static> {
        View { scope, pod_facts: ALL_POD_FACTS, node_facts: NodeFacts { labels: true, taints: true, conditions: true, images: true }, settings_keys: &[] }
    }
}
