//! The guest-side cluster view: nodes with their usage totals and, for policies that ask for them, the pods bound
//! to each node, with only the [`PodFacts`] the policy reads. The host keeps it current with [`ClusterDelta`]s;
//! tests fill it with [`Cluster::add_node`] and [`Cluster::bind`], which keep the usage totals exactly as the host
//! does (build it with [`Cluster::for_policy`] so tests see the pods as the policy's instances will).

use crate::collections::FastHashMap;
use crate::index::{PodIndex, TermGroup};
use crate::resources::ResourceVector;
use crate::topology::{Topologies, TopologyDomains};
use crate::types::{ClusterDelta, LabelSelector, Node, NodeId, NodeUsage, Pod, PodId, PodPlace, Resources};
use std::collections::HashMap;
use std::sync::Arc;

/// A node and what is placed on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: NodeId,
    pub node: Node,
    pub usage: NodeUsage,
    /// Pods bound to this node (empty unless the policy's view includes pods).
    pub pods: Vec<PodId>,
}

impl NodeInfo {
    pub fn name(&self) -> &str {
        &self.node.name
    }

    /// Allocatable minus requested: what a new pod can still get.
    pub fn free(&self) -> ResourceVector {
        let mut free = ResourceVector::from(&self.node.allocatable);
        free.subtract(&ResourceVector::from(&self.usage.requested));
        free
    }

    /// Whether `pod` could be placed here now: allowed (see [`Pod::may_run_on`]), with room for its requests
    /// and a pod slot free.
    pub fn has_room_for(&self, pod: &Pod) -> bool {
        let (free, wants) = (self.free(), pod.requests());
        pod.may_run_on(&self.node)
            && self.usage.pod_count < self.node.allocatable_pods
            && free.cpu_millis >= wants.cpu_millis
            && free.memory_bytes >= wants.memory_bytes
            && free.ephemeral_storage_bytes >= wants.ephemeral_storage_bytes
            && wants.scalar.iter().all(|(name, amount)| free.get(name) >= *amount)
    }

    /// Requested CPU in thousandths of allocatable: how full the node is, for packing or spreading.
    pub fn cpu_share_per_mille(&self) -> u64 {
        (self.usage.requested.cpu_millis * 1000).checked_div(self.node.allocatable.cpu_millis).unwrap_or(1000)
    }
}

/// A pod bound to a node.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub id: PodId,
    pub node: NodeId,
    pub pod: Pod,
}

/// What a view keeps of each bound pod besides its identity and state (namespace, name, uid, scheduler name,
/// priority, phase, owner, creation time, ready, terminating, mirror, storage flags, status reason), which every
/// view keeps: the contract's `pod-facts`, declared by [`Policy::POD_FACTS`](crate::Policy::POD_FACTS). The host
/// sends only these in a view's pods: with 50k pods in every instance of every policy that keeps pods, a pod's
/// containers, tolerations and labels are most of a view's memory and of the time a view takes to sync, and a
/// tenant's pod with a large label set costs only the policies that read labels. Annotations are never in views.
pub use crate::types::PodFacts;

/// Which labels of each pod a view keeps ([`PodFacts::labels`]). `Selected` is what a policy that reads labels
/// only through label selectors (topology spread, pod affinity) declares: the host then sends only the labels
/// whose keys some pod's selector, or the policy's own settings ([`Policy::label_keys`](crate::Policy::label_keys)),
/// names, so labels a tenant puts on its pods for its own use cost no guest memory. A test view built with
/// [`Cluster::for_policy`] keeps every label of a `Selected` policy: a selector only matches keys it names.
pub use crate::types::LabelScope;

/// What a view keeps of each node besides its name, schedulability, allocatable and usage: the contract's
/// `node-facts`, declared by [`Policy::NODE_FACTS`](crate::Policy::NODE_FACTS). A policy that only counts
/// resources keeps a few hundred bytes a node instead of kilobytes.
pub use crate::types::NodeFacts;

impl NodeFacts {
    pub const NONE: NodeFacts = NodeFacts { labels: false, taints: false, conditions: false, images: false };
    /// What a policy that declares nothing keeps: everything but images.
    pub const DEFAULT: NodeFacts = NodeFacts { labels: true, taints: true, conditions: true, images: false };
    pub const ALL: NodeFacts = NodeFacts { labels: true, taints: true, conditions: true, images: true };

    /// Drops from `node` what these facts do not keep (what the host does not send).
    pub fn keep_only(&self, node: &mut Node) {
        if !self.labels {
            node.labels = Vec::new();
        }
        if !self.taints {
            node.taints = Vec::new();
        }
        if !self.conditions {
            node.conditions = Vec::new();
        }
        if !self.images {
            node.images = Vec::new();
        }
    }
}

impl PodFacts {
    pub const NONE: PodFacts =
        PodFacts { labels: LabelScope::None, containers: false, images: false, placement: false, pod_affinity: false, host_ports: false };
    pub const ALL: PodFacts = PodFacts { labels: LabelScope::All, containers: true, images: true, placement: true, pod_affinity: true, host_ports: true };

    /// Drops from `pod` what these facts do not keep (what the host does not send).
    pub fn keep_only(&self, pod: &mut Pod) {
        pod.annotations = Vec::new();
        if self.labels == LabelScope::None {
            pod.labels = Vec::new();
        }
        if !self.containers {
            pod.containers = Vec::new();
            pod.init_containers = Vec::new();
            pod.sidecar_init_containers = Vec::new();
            pod.overhead = zero_resources();
        } else if !self.images {
            for container in pod.containers.iter_mut().chain(pod.init_containers.iter_mut()) {
                container.image = String::new();
            }
        }
        if !self.placement {
            pod.node_selector = Vec::new();
            pod.node_affinity = None;
            pod.tolerations = Vec::new();
            pod.topology_spread = Vec::new();
            pod.nominated_node = None;
        }
        if !self.pod_affinity {
            pod.pod_affinity = None;
            pod.pod_anti_affinity = None;
        }
        if !self.host_ports {
            pod.host_ports = Vec::new();
        }
    }
}

impl Default for PodFacts {
    fn default() -> Self {
        PodFacts::ALL
    }
}

/// How a view keeps its [`PodIndex`]; a function pointer that [`Cluster::for_policy`] sets only for policies
/// that read it, so a component of any other policy links none of its code.
#[derive(Debug, Clone, Copy)]
struct Indexing {
    insert: fn(&mut PodIndex, PodId, &Pod),
    remove: fn(&mut PodIndex, PodId, &Pod),
}

const INDEXING: Indexing = Indexing { insert: PodIndex::insert, remove: PodIndex::remove };

/// Counts a node's image names in or out of the view's image counts (by `change`): set only for views that keep
/// node images, so that the others' components leave the counting and its map out.
type ImageCounting = fn(&mut HashMap<String, u32>, &Node, i32);

fn indexing_for(facts: PodFacts) -> Option<Indexing> {
    (facts.labels != LabelScope::None || facts.pod_affinity).then_some(INDEXING)
}

#[derive(Debug)]
pub struct Cluster {
    /// Indexed by node id: the host hands out dense ids, so a vector beats a map on the hot path.
    nodes: Vec<Option<NodeInfo>>,
    node_count: usize,
    /// Boxed: the table then holds pointers, so growing it copies a pointer a pod instead of the whole record, and
    /// the guest's memory (which never shrinks) is not sized by the table's slack.
    pods: FastHashMap<PodId, Box<PodInfo>>,
    keeps: PodFacts,
    node_keeps: NodeFacts,
    /// Which bound pods the view keeps at all (every pod when None).
    keeps_pod: Option<fn(&Pod) -> bool>,
    /// Pods with pod affinity or anti-affinity terms: few in most clusters, and every scheduling decision of
    /// `inter-pod-affinity` reads them.
    with_affinity: std::collections::BTreeSet<PodId>,
    index: PodIndex,
    /// Whether the index is kept: only by views whose policy reads labels or affinity terms, which then pay for it
    /// in memory and, through [`Cluster::for_policy`], in component size (the others' components leave its code out).
    indexing: Option<Indexing>,
    /// Namespace labels, for pod affinity's namespace selectors (views with pods only).
    namespaces: HashMap<String, Vec<(String, String)>>,
    /// How many nodes list each image name (views that keep node images only).
    image_nodes: HashMap<String, u32>,
    image_counting: Option<ImageCounting>,
    /// The topology keys asked for through [`Cluster::topology`], kept current as nodes change. Behind a cell:
    /// policies read the view through `&Cluster`, and the first read of a key builds its domains.
    topologies: std::cell::RefCell<Topologies>,
    next_test_id: u32,
}

/// A view that keeps every pod and node fact, as [`Cluster::new`].
impl Default for Cluster {
    fn default() -> Self {
        Cluster::new()
    }
}

impl Cluster {
    /// A view that keeps every pod and node fact.
    pub fn new() -> Self {
        Self::keeping(PodFacts::ALL)
    }

    /// A view that keeps only `facts` of each pod (and every node fact).
    pub fn keeping(facts: PodFacts) -> Self {
        Self::empty(facts, NodeFacts::ALL, None, indexing_for(facts), Some(count_images), 0)
    }

    fn empty(
        keeps: PodFacts,
        node_keeps: NodeFacts,
        keeps_pod: Option<fn(&Pod) -> bool>,
        indexing: Option<Indexing>,
        image_counting: Option<ImageCounting>,
        next_test_id: u32,
    ) -> Self {
        Cluster {
            nodes: Vec::new(),
            node_count: 0,
            pods: FastHashMap::default(),
            keeps,
            node_keeps,
            keeps_pod,
            with_affinity: std::collections::BTreeSet::new(),
            index: PodIndex::default(),
            indexing,
            namespaces: HashMap::new(),
            image_nodes: HashMap::new(),
            image_counting,
            topologies: Default::default(),
            next_test_id,
        }
    }

    /// The view `P`'s instances keep: the pods [`Policy::keeps_pod`](crate::Policy::keeps_pod) chooses, with
    /// their [`Policy::POD_FACTS`](crate::Policy::POD_FACTS).
    pub fn for_policy<P: crate::Policy>() -> Self {
        let reads_index = matches!(P::VIEW, crate::types::ViewScope::NodesAndPods) && (P::POD_FACTS.labels != LabelScope::None || P::POD_FACTS.pod_affinity);
        let indexing = if reads_index { Some(INDEXING) } else { None };
        let image_counting: Option<ImageCounting> = if P::NODE_FACTS.images { Some(count_images) } else { None };
        Self::empty(P::POD_FACTS, P::NODE_FACTS, Some(P::keeps_pod), indexing, image_counting, 0)
    }

    pub fn apply(&mut self, delta: ClusterDelta) {
        self.apply_to_view::<true>(delta)
    }

    /// As [`Cluster::apply`]. The host sends bound pods and namespaces only to views with pods, so for a view
    /// without (`KEEPS_PODS` false) their bookkeeping (indexes, affinity sets) is left out of the component.
    pub(crate) fn apply_to_view<const KEEPS_PODS: bool>(&mut self, delta: ClusterDelta) {
        match delta {
            ClusterDelta::PodUpsert(_) | ClusterDelta::PodRemove(_) | ClusterDelta::NamespaceUpsert(_) | ClusterDelta::NamespaceRemove(_) if !KEEPS_PODS => {}
            ClusterDelta::NodeUpsert((id, node, usage)) => self.upsert_node(id, node, usage),
            ClusterDelta::NodeUsageUpdate((id, usage)) => {
                if let Some(info) = self.node_mut(id) {
                    info.usage = usage;
                }
            }
            ClusterDelta::NodeRemove(id) => self.remove_node(id),
            ClusterDelta::PodUpsert((id, PodPlace::Bound(node), pod)) => self.upsert_pod(id, node, pod),
            // Pods a call is about are kept by the guest glue, not in the view.
            ClusterDelta::PodUpsert(_) => {}
            ClusterDelta::PodRemove(id) => self.remove_pod(id),
            ClusterDelta::NamespaceUpsert((name, labels)) => {
                self.namespaces.insert(name, labels);
            }
            ClusterDelta::NamespaceRemove(name) => {
                self.namespaces.remove(&name);
            }
            ClusterDelta::Reset => *self = Self::empty(self.keeps, self.node_keeps, self.keeps_pod, self.indexing, self.image_counting, self.next_test_id),
        }
    }

    #[inline]
    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.nodes.get(id as usize).and_then(Option::as_ref)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.iter().flatten()
    }

    pub fn node_count(&self) -> usize {
        self.node_count
    }

    pub fn node_by_name(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes().find(|info| info.node.name == name)
    }

    pub fn pod(&self, id: PodId) -> Option<&PodInfo> {
        self.pods.get(&id).map(Box::as_ref)
    }

    pub fn pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values().map(Box::as_ref)
    }

    pub fn pods_on<'a>(&'a self, node: &'a NodeInfo) -> impl Iterator<Item = &'a PodInfo> + 'a {
        node.pods.iter().filter_map(|id| self.pod(*id))
    }

    /// Pods that have pod affinity or anti-affinity terms, in id order.
    pub fn pods_with_affinity(&self) -> impl Iterator<Item = &PodInfo> {
        self.with_affinity.iter().filter_map(|id| self.pod(*id))
    }

    /// Bound pods whose labels `selector` matches. A selector that names a value (`matchLabels`, `In`) reads
    /// only the pods with that value, through the view's label index; any other reads every pod.
    pub fn pods_matching<'a>(&'a self, selector: &'a LabelSelector) -> Box<dyn Iterator<Item = &'a PodInfo> + 'a> {
        match self.index.candidates(selector) {
            Some(ids) => Box::new(ids.into_iter().filter_map(|id| self.pod(id)).filter(|info| selector.matches(&info.pod.labels))),
            None => Box::new(self.pods().filter(|info| selector.matches(&info.pod.labels))),
        }
    }

    /// Each node's domain for a topology key, as small integers (see [`crate::topology`]). Built on the first
    /// call for a key, over the nodes of the view (their labels: views that keep [`NodeFacts::labels`]), then
    /// kept current between calls; the copy returned does not change while it is held.
    pub fn topology(&self, key: &str) -> Arc<TopologyDomains> {
        self.topologies.borrow_mut().of(key, || self.nodes().map(|info| (info.id, &info.node)))
    }

    /// Records a node's new labels (or its removal, `None`) in the topologies kept.
    fn update_topologies(&mut self, id: NodeId, node: Option<&Node>) {
        self.topologies.get_mut().follow(id, node);
    }

    /// The affinity terms of the bound pods, each distinct term once with the pods that carry it.
    pub fn affinity_term_groups(&self) -> impl Iterator<Item = &TermGroup> {
        self.index.term_groups()
    }

    /// A namespace's labels; empty for a namespace the view does not know (yet).
    pub fn namespace_labels(&self, namespace: &str) -> &[(String, String)] {
        self.namespaces.get(namespace).map_or(&[], Vec::as_slice)
    }

    /// Test helper: sets a namespace's labels.
    pub fn set_namespace(&mut self, name: &str, labels: &[(&str, &str)]) {
        let labels = labels.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
        self.namespaces.insert(name.to_string(), labels);
    }

    /// Test helper: adds a node with no pods and returns its id.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        let id = self.fresh_id();
        self.upsert_node(id, node, empty_usage());
        id
    }

    /// Test helper: binds a pod to a node, updating the node's usage totals as the host would.
    pub fn bind(&mut self, pod: Pod, node: NodeId) -> PodId {
        let id = self.fresh_id();
        if let Some(info) = self.node_mut(node) {
            add_pod_to_usage(&mut info.usage, &pod);
        }
        self.upsert_pod(id, node, pod);
        id
    }

    fn fresh_id(&mut self) -> u32 {
        self.next_test_id += 1;
        self.next_test_id - 1
    }

    fn node_mut(&mut self, id: NodeId) -> Option<&mut NodeInfo> {
        self.nodes.get_mut(id as usize).and_then(Option::as_mut)
    }

    fn upsert_node(&mut self, id: NodeId, mut node: Node, usage: NodeUsage) {
        self.node_keeps.keep_only(&mut node);
        let index = id as usize;
        if index >= self.nodes.len() {
            self.nodes.resize_with(index + 1, || None);
        }
        let pods = match self.nodes[index].take() {
            Some(previous) => {
                self.count_images(&previous.node, -1);
                previous.pods
            }
            None => {
                self.node_count += 1;
                Vec::new()
            }
        };
        self.count_images(&node, 1);
        self.update_topologies(id, Some(&node));
        self.nodes[index] = Some(NodeInfo { id, node, usage, pods });
    }

    fn count_images(&mut self, node: &Node, change: i32) {
        if let Some(count) = self.image_counting {
            count(&mut self.image_nodes, node, change);
        }
    }

    /// How many nodes list an image by this name (in `status.images`; views that keep
    /// [`NodeFacts::images`] only): kube-scheduler's ImageLocality spreads an image's score by it.
    pub fn nodes_with_image(&self, name: &str) -> u32 {
        self.image_nodes.get(name).copied().unwrap_or(0)
    }

    fn remove_node(&mut self, id: NodeId) {
        if let Some(slot) = self.nodes.get_mut(id as usize) {
            if let Some(info) = slot.take() {
                self.update_topologies(id, None);
                self.node_count -= 1;
                self.count_images(&info.node, -1);
                for pod in info.pods {
                    self.with_affinity.remove(&pod);
                    if let Some(removed) = self.pods.remove(&pod) {
                        self.unindex(pod, &removed.pod);
                    }
                }
            }
        }
    }

    fn upsert_pod(&mut self, id: PodId, node: NodeId, mut pod: Pod) {
        if self.keeps_pod.is_some_and(|keeps| !keeps(&pod)) {
            self.remove_pod(id);
            return;
        }
        self.keeps.keep_only(&mut pod);
        if pod.pod_affinity.is_some() || pod.pod_anti_affinity.is_some() {
            self.with_affinity.insert(id);
        } else {
            self.with_affinity.remove(&id);
        }
        if let Some(previous) = self.pods.get(&id) {
            if let Some(indexing) = self.indexing.filter(|_| !PodIndex::unchanged(&previous.pod, &pod)) {
                (indexing.remove)(&mut self.index, id, &previous.pod);
                (indexing.insert)(&mut self.index, id, &pod);
            }
            if previous.node != node {
                let previous_node = previous.node;
                self.detach(previous_node, id);
            } else {
                self.pods.insert(id, Box::new(PodInfo { id, node, pod }));
                return;
            }
        } else {
            self.reindex(id, &pod);
        }
        if let Some(info) = self.node_mut(node) {
            info.pods.push(id);
        }
        self.pods.insert(id, Box::new(PodInfo { id, node, pod }));
    }

    fn remove_pod(&mut self, id: PodId) {
        self.with_affinity.remove(&id);
        if let Some(info) = self.pods.remove(&id) {
            self.unindex(id, &info.pod);
            self.detach(info.node, id);
        }
    }

    fn reindex(&mut self, id: PodId, pod: &Pod) {
        if let Some(indexing) = self.indexing {
            (indexing.insert)(&mut self.index, id, pod);
        }
    }

    fn unindex(&mut self, id: PodId, pod: &Pod) {
        if let Some(indexing) = self.indexing {
            (indexing.remove)(&mut self.index, id, pod);
        }
    }

    fn detach(&mut self, node: NodeId, pod: PodId) {
        if let Some(info) = self.node_mut(node) {
            info.pods.retain(|candidate| *candidate != pod);
        }
    }
}

fn count_images(image_nodes: &mut HashMap<String, u32>, node: &Node, change: i32) {
    for name in node.images.iter().flat_map(|image| &image.names) {
        let count = image_nodes.entry(name.clone()).or_default();
        *count = count.saturating_add_signed(change);
        if *count == 0 {
            image_nodes.remove(name);
        }
    }
}

pub fn empty_usage() -> NodeUsage {
    NodeUsage { requested: zero_resources(), non_zero_requested: zero_resources(), pod_count: 0, attached_volumes: Vec::new() }
}

fn zero_resources() -> Resources {
    Resources { cpu_millis: 0, memory_bytes: 0, ephemeral_storage_bytes: 0, scalar: Vec::new() }
}

fn add_pod_to_usage(usage: &mut NodeUsage, pod: &Pod) {
    let mut requested = ResourceVector::from(&usage.requested);
    requested.add(&pod.requests());
    let mut non_zero = ResourceVector::from(&usage.non_zero_requested);
    non_zero.add(&pod.non_zero_requests());
    usage.requested = Resources::from(&requested);
    usage.non_zero_requested = Resources::from(&non_zero);
    usage.pod_count += 1;
    for volume in pod.volume_claims.iter().filter_map(|claim| claim.attachment.as_ref()) {
        if !usage.attached_volumes.contains(volume) {
            usage.attached_volumes.push(volume.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn deltas_keep_nodes_and_pods_consistent() {
        let mut cluster = Cluster::new();
        cluster.apply(ClusterDelta::NodeUpsert((3, NodeBuilder::new("n3").build(), empty_usage())));
        cluster.apply(ClusterDelta::NodeUpsert((7, NodeBuilder::new("n7").build(), empty_usage())));
        cluster.apply(ClusterDelta::PodUpsert((1, PodPlace::Bound(3), PodBuilder::new("a").build())));
        cluster.apply(ClusterDelta::PodUpsert((2, PodPlace::Bound(3), PodBuilder::new("b").build())));
        assert_eq!(cluster.node_count(), 2);
        assert_eq!(cluster.node(3).unwrap().pods, vec![1, 2]);

        cluster.apply(ClusterDelta::PodUpsert((1, PodPlace::Bound(7), PodBuilder::new("a").build())));
        assert_eq!(cluster.node(3).unwrap().pods, vec![2], "a moved pod leaves its old node");
        assert_eq!(cluster.node(7).unwrap().pods, vec![1]);

        cluster.apply(ClusterDelta::NodeUpsert((3, NodeBuilder::new("n3").label("x", "y").build(), empty_usage())));
        assert_eq!(cluster.node(3).unwrap().pods, vec![2], "a node update keeps its pods");

        cluster.apply(ClusterDelta::NodeRemove(3));
        assert!(cluster.pod(2).is_none(), "pods go with their node");
        assert_eq!(cluster.node_count(), 1);
        cluster.apply(ClusterDelta::Reset);
        assert_eq!(cluster.nodes().count(), 0);
    }

    #[test]
    fn a_view_keeps_only_its_pod_facts_and_a_reset_keeps_the_choice() {
        let facts = PodFacts { labels: LabelScope::All, ..PodFacts::NONE };
        let mut cluster = Cluster::keeping(facts);
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").build());
        let pod = PodBuilder::new("a")
            .label("app", "web")
            .cpu("1")
            .toleration("dedicated", None, None)
            .annotation("note", "x")
            .host_port(80, "TCP")
            .owner("ReplicaSet", "web")
            .build();
        let id = cluster.bind(pod, node);
        let kept = &cluster.pod(id).unwrap().pod;
        assert_eq!((kept.name.as_str(), kept.labels.len(), kept.owner.as_ref().map(|owner| owner.name.as_str())), ("a", 1, Some("web")));
        assert!(kept.containers.is_empty() && kept.tolerations.is_empty() && kept.annotations.is_empty() && kept.host_ports.is_empty());
        assert_eq!(cluster.node(node).unwrap().usage.requested.cpu_millis, 1000, "usage counts the whole pod");
        cluster.apply(ClusterDelta::Reset);
        cluster.apply(ClusterDelta::NodeUpsert((node, NodeBuilder::new("n1").build(), empty_usage())));
        cluster.apply(ClusterDelta::PodUpsert((id, PodPlace::Bound(node), PodBuilder::new("a").cpu("1").build())));
        assert!(cluster.pod(id).unwrap().pod.containers.is_empty());
    }

    #[test]
    fn a_policy_view_keeps_only_the_pods_its_policy_chooses() {
        struct PortsOnly;
        impl crate::Policy for PortsOnly {
            type Settings = crate::NoSettings;
            const NAME: &'static str = "ports-only";
            fn new(_: crate::NoSettings) -> Result<Self, String> {
                Ok(PortsOnly)
            }
            fn keeps_pod(pod: &Pod) -> bool {
                !pod.host_ports.is_empty()
            }
        }
        let mut cluster = Cluster::for_policy::<PortsOnly>();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").build());
        let proxy = cluster.bind(PodBuilder::new("proxy").host_port(80, "TCP").cpu("1").build(), node);
        cluster.bind(PodBuilder::new("web").cpu("1").build(), node);
        let kept: Vec<&str> = cluster.pods().map(|info| info.pod.name.as_str()).collect();
        assert_eq!(kept, ["proxy"]);
        assert_eq!(cluster.node(node).unwrap().usage.pod_count, 2, "usage still counts every pod");
        cluster.apply(ClusterDelta::PodUpsert((proxy, PodPlace::Bound(node), PodBuilder::new("proxy").build())));
        assert_eq!(cluster.pods().count(), 0, "a pod the policy no longer keeps leaves the view");
        assert!(cluster.node(node).unwrap().pods.is_empty());
        cluster.apply(ClusterDelta::Reset);
        cluster.apply(ClusterDelta::NodeUpsert((node, NodeBuilder::new("n1").build(), empty_usage())));
        cluster.apply(ClusterDelta::PodUpsert((7, PodPlace::Bound(node), PodBuilder::new("web").build())));
        assert_eq!(cluster.pods().count(), 0, "a reset keeps the choice");
    }

    #[test]
    fn bind_updates_usage_like_the_host() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("8Gi").build());
        cluster.bind(PodBuilder::new("a").cpu("500m").build(), node);
        cluster.bind(PodBuilder::new("b").build(), node);
        let usage = &cluster.node(node).unwrap().usage;
        assert_eq!(usage.requested.cpu_millis, 500);
        assert_eq!(usage.non_zero_requested.cpu_millis, 600);
        assert_eq!(usage.pod_count, 2);
        assert_eq!(cluster.node(node).unwrap().free().cpu_millis, 3500);
    }
}
