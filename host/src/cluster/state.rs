//! [`ClusterState`]: nodes and the pods bound to them, with per-node usage totals, and an append-only log of
//! [`ClusterDelta`]s. Each policy instance remembers the log position it has applied; [`ClusterState::sync`]
//! sends it what it missed (only node deltas to instances whose view is nodes-only), or a full snapshot if it
//! fell behind the retained part of the log.

use crate::runtime::bindings::types::{ClusterDelta, Node, NodeId, NodeUsage, Pod, PodId, Resources, ViewScope};
use crate::runtime::{CallError, PolicyInstance};
use std::collections::{BTreeSet, HashMap, VecDeque};
use wasp_sdk::resources::ResourceVector;

/// Deltas per `apply` call: bounds the time of one call so it stays well inside the policy's deadline.
const SYNC_CHUNK: usize = 1024;
/// Deltas kept for lagging instances; one further behind gets a full resync. Pod deltas carry whole pods, so
/// a long log costs as much memory as the pods themselves: keep it to a few seconds of binding traffic.
const RETAINED_DELTAS: usize = 16_384;

#[derive(Default, Clone)]
struct Usage {
    requested: ResourceVector,
    non_zero_requested: ResourceVector,
    pod_count: u32,
}

impl Usage {
    fn to_contract(&self) -> NodeUsage {
        NodeUsage {
            requested: to_resources(&self.requested),
            non_zero_requested: to_resources(&self.non_zero_requested),
            pod_count: self.pod_count,
        }
    }
}

fn to_resources(vector: &ResourceVector) -> Resources {
    Resources {
        cpu_millis: vector.cpu_millis,
        memory_bytes: vector.memory_bytes,
        ephemeral_storage_bytes: vector.ephemeral_storage_bytes,
        scalar: vector.scalar.iter().map(|(name, value)| (name.clone(), *value)).collect(),
    }
}

fn to_vector(resources: &Resources) -> ResourceVector {
    ResourceVector {
        cpu_millis: resources.cpu_millis,
        memory_bytes: resources.memory_bytes,
        ephemeral_storage_bytes: resources.ephemeral_storage_bytes,
        scalar: resources.scalar.iter().cloned().collect(),
    }
}

/// What a pod takes from its node, computed with the SDK's kube-scheduler arithmetic.
fn pod_requests(pod: &Pod) -> (ResourceVector, ResourceVector) {
    let compute = |non_zero| {
        wasp_sdk::resources::effective_requests(
            pod.containers.iter().map(|container| to_vector(&container.requests)),
            pod.init_containers.iter().map(|container| wasp_sdk::resources::ContainerRequest {
                requests: to_vector(&container.requests),
                sidecar: pod.sidecar_init_containers.contains(&container.name),
            }),
            &to_vector(&pod.overhead),
            non_zero,
        )
    };
    (compute(false), compute(true))
}

/// A node name the state knows, from the node itself or from pods bound to it (informers deliver in any order).
struct NodeSlot {
    id: NodeId,
    node: Option<Node>,
    usage: Usage,
    pods: BTreeSet<String>,
}

struct BoundPod {
    id: PodId,
    node: String,
    pod: Pod,
    requests: ResourceVector,
    non_zero_requests: ResourceVector,
}

#[derive(Default)]
pub struct ClusterState {
    slots: HashMap<String, NodeSlot>,
    /// Node names by id (ids are never reused).
    names: Vec<String>,
    /// Ids of the nodes present, kept ordered: every scheduling cycle asks for them.
    present: BTreeSet<NodeId>,
    pods: HashMap<String, BoundPod>,
    next_pod_id: PodId,
    log: VecDeque<ClusterDelta>,
    /// Sequence number of `log[0]`.
    log_start: u64,
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sequence number the next delta will get: an instance synced to it is current.
    pub fn head(&self) -> u64 {
        self.log_start + self.log.len() as u64
    }

    /// Ids of the nodes present, in id order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.present.iter().copied().collect()
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.slots.get(name).filter(|slot| slot.node.is_some()).map(|slot| slot.id)
    }

    pub fn node_name(&self, id: NodeId) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }

    /// The bound pod with this id and its node's name.
    pub fn pod_by_id(&self, id: PodId) -> Option<(&Pod, &str)> {
        self.pods.values().find(|bound| bound.id == id).map(|bound| (&bound.pod, bound.node.as_str()))
    }

    fn slot(&mut self, name: &str) -> &mut NodeSlot {
        if !self.slots.contains_key(name) {
            let id = self.names.len() as NodeId;
            self.names.push(name.to_string());
            let slot = NodeSlot { id, node: None, usage: Usage::default(), pods: BTreeSet::new() };
            self.slots.insert(name.to_string(), slot);
        }
        self.slots.get_mut(name).expect("inserted above")
    }

    fn record(&mut self, delta: ClusterDelta) {
        self.log.push_back(delta);
        if self.log.len() > RETAINED_DELTAS {
            self.log.pop_front();
            self.log_start += 1;
        }
    }

    /// Adds or updates a node; returns false, recording nothing, when nothing a policy sees changed (a status
    /// heartbeat, say).
    pub fn upsert_node(&mut self, node: Node) -> bool {
        let name = node.name.clone();
        let slot = self.slot(&name);
        if slot.node.as_ref() == Some(&node) {
            return false;
        }
        let first_appearance = slot.node.is_none();
        slot.node = Some(node.clone());
        let (id, usage) = (slot.id, slot.usage.to_contract());
        let pods: Vec<String> = if first_appearance { slot.pods.iter().cloned().collect() } else { Vec::new() };
        self.present.insert(id);
        self.record(ClusterDelta::NodeUpsert((id, node, usage)));
        // Pods that arrived before their node become visible with it.
        for uid in pods {
            let bound = &self.pods[&uid];
            let delta = ClusterDelta::PodUpsert((bound.id, id, bound.pod.clone()));
            self.record(delta);
        }
        true
    }

    pub fn remove_node(&mut self, name: &str) {
        if let Some(slot) = self.slots.get_mut(name) {
            if slot.node.take().is_some() {
                let id = slot.id;
                self.present.remove(&id);
                self.record(ClusterDelta::NodeRemove(id));
            }
        }
    }

    /// Adds or updates a pod bound to `node_name` (moving it if it was bound elsewhere); returns false, recording
    /// nothing, when it is already there as it is.
    pub fn upsert_pod(&mut self, pod: Pod, node_name: &str) -> bool {
        if self.pods.get(&pod.uid).is_some_and(|bound| bound.node == node_name && bound.pod == pod) {
            return false;
        }
        let uid = pod.uid.clone();
        if self.pods.get(&uid).is_some_and(|bound| bound.node != node_name) {
            self.remove_pod(&uid);
        }
        let (requests, non_zero_requests) = pod_requests(&pod);
        let previous = self.pods.get(&uid).map(|bound| (bound.id, bound.requests.clone(), bound.non_zero_requests.clone()));
        let id = match previous {
            Some((id, old, old_non_zero)) => {
                let usage = &mut self.slot(node_name).usage;
                usage.requested.subtract(&old);
                usage.non_zero_requested.subtract(&old_non_zero);
                usage.pod_count -= 1;
                id
            }
            None => {
                self.next_pod_id += 1;
                self.next_pod_id - 1
            }
        };
        let slot = self.slot(node_name);
        slot.usage.requested.add(&requests);
        slot.usage.non_zero_requested.add(&non_zero_requests);
        slot.usage.pod_count += 1;
        slot.pods.insert(uid.clone());
        let (node_id, node_present, usage) = (slot.id, slot.node.is_some(), slot.usage.to_contract());
        if node_present {
            self.record(ClusterDelta::NodeUsageUpdate((node_id, usage)));
            self.record(ClusterDelta::PodUpsert((id, node_id, pod.clone())));
        }
        let bound = BoundPod { id, node: node_name.to_string(), pod, requests, non_zero_requests };
        self.pods.insert(uid, bound);
        true
    }

    pub fn remove_pod(&mut self, uid: &str) {
        let Some(bound) = self.pods.remove(uid) else { return };
        let slot = self.slot(&bound.node);
        slot.usage.requested.subtract(&bound.requests);
        slot.usage.non_zero_requested.subtract(&bound.non_zero_requests);
        slot.usage.pod_count -= 1;
        slot.pods.remove(uid);
        let (node_id, node_present, usage) = (slot.id, slot.node.is_some(), slot.usage.to_contract());
        if node_present {
            self.record(ClusterDelta::NodeUsageUpdate((node_id, usage)));
            self.record(ClusterDelta::PodRemove(bound.id));
        }
    }

    /// Brings an instance up to [`head`](Self::head): the deltas it missed, or a full snapshot.
    pub fn sync(&self, instance: &mut impl DeltaSink, scope: ViewScope) -> Result<(), CallError> {
        let head = self.head();
        match instance.synced_to() {
            Some(position) if position == head => {}
            Some(position) if position >= self.log_start => {
                let missed = self.log.range((position - self.log_start) as usize..);
                let relevant = missed.filter(|delta| scope == ViewScope::NodesAndPods || !is_pod_delta(delta));
                send_in_chunks(instance, relevant.cloned())?;
            }
            _ => send_in_chunks(instance, self.snapshot(scope))?,
        }
        instance.set_synced_to(head);
        Ok(())
    }

    /// A reset followed by every node (and, for views with pods, every bound pod).
    fn snapshot(&self, scope: ViewScope) -> impl Iterator<Item = ClusterDelta> + '_ {
        let present = || self.slots.values().filter_map(|slot| slot.node.as_ref().map(|node| (slot, node)));
        let nodes = present().map(|(slot, node)| ClusterDelta::NodeUpsert((slot.id, node.clone(), slot.usage.to_contract())));
        let pods = present()
            .filter(move |_| scope == ViewScope::NodesAndPods)
            .flat_map(move |(slot, _)| slot.pods.iter().map(move |uid| (slot.id, &self.pods[uid])))
            .map(|(node_id, bound)| ClusterDelta::PodUpsert((bound.id, node_id, bound.pod.clone())));
        std::iter::once(ClusterDelta::Reset).chain(nodes).chain(pods)
    }
}

fn is_pod_delta(delta: &ClusterDelta) -> bool {
    matches!(delta, ClusterDelta::PodUpsert(_) | ClusterDelta::PodRemove(_))
}

/// Keeps its own copy of the cluster, fed from the delta log: a policy instance, or a policy compiled natively.
pub trait DeltaSink {
    /// The position in the log it has applied up to; None before its first sync.
    fn synced_to(&self) -> Option<u64>;
    fn set_synced_to(&mut self, position: u64);
    fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), CallError>;
}

impl DeltaSink for PolicyInstance {
    fn synced_to(&self) -> Option<u64> {
        self.synced_to
    }

    fn set_synced_to(&mut self, position: u64) {
        self.synced_to = Some(position);
    }

    fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), CallError> {
        PolicyInstance::apply(self, deltas)
    }
}

fn send_in_chunks(instance: &mut impl DeltaSink, deltas: impl Iterator<Item = ClusterDelta>) -> Result<(), CallError> {
    let mut chunk = Vec::with_capacity(SYNC_CHUNK);
    for delta in deltas {
        chunk.push(delta);
        if chunk.len() == SYNC_CHUNK {
            instance.apply(&chunk)?;
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        instance.apply(&chunk)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::convert;

    fn node(cpu: &str) -> Node {
        let source = serde_json::json!({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": cpu, "pods": "110"}}});
        convert::node(&serde_json::from_value(source).unwrap()).unwrap()
    }

    fn pod(label: &str) -> Pod {
        let source = serde_json::json!({"metadata": {"name": "p", "namespace": "d", "uid": "u", "labels": {"l": label}}, "spec": {"containers": []}});
        convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn identical_updates_record_nothing() {
        let mut cluster = ClusterState::new();
        assert!(cluster.upsert_node(node("4")));
        assert!(cluster.upsert_pod(pod("a"), "n"));
        let head = cluster.head();
        assert!(!cluster.upsert_node(node("4")), "a heartbeat changes nothing policies see");
        assert!(!cluster.upsert_pod(pod("a"), "n"));
        assert_eq!(cluster.head(), head);
        assert!(cluster.upsert_node(node("8")));
        assert!(cluster.upsert_pod(pod("b"), "n"));
        assert!(cluster.head() > head);
    }
}
