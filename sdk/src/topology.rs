//! Topology domains as small integers. A topology key (`kubernetes.io/hostname`, `topology.kubernetes.io/zone`)
//! splits the nodes into domains, one per value of that label. Policies that count pods per domain and then read
//! the count of each candidate node's domain (inter-pod affinity, topology spread) would otherwise find the node's
//! label and hash its value once per node, per pod: in the sandbox, where string compares and hashing run several
//! times slower than natively, that was the costliest part of inter-pod-affinity. Here each node's domain is
//! looked up once, when the key is first asked for or the node changes, and a count per domain is a vector.
//!
//! [`Cluster::topology`](crate::Cluster::topology) keeps one [`TopologyDomains`] per key asked for, between calls,
//! and keeps it current as nodes are added, relabelled and removed.

use crate::collections::FastHashMap;
use crate::matching::{label, same_text};
use crate::types::{Node, NodeId};
use std::sync::Arc;

/// A topology domain of one key: an index into a per-domain vector such as [`DomainCounts`].
pub type DomainId = u32;

/// The domain of each node for one topology key.
#[derive(Debug, Clone)]
pub struct TopologyDomains {
    key: String,
    /// Indexed by node id: the node's domain, or [`NO_DOMAIN`] for a node without the label (or no node).
    of_node: Vec<DomainId>,
    /// Every value seen, with its id. Ids are not reused while the domains are kept: a value whose last node left
    /// keeps its id, so the ids stay below `ids.len()`. [`Topologies::of`] builds them afresh once such stale
    /// values outnumber the nodes (hostnames of nodes replaced, over weeks of autoscaling).
    ids: FastHashMap<String, DomainId>,
    /// Nodes with a domain.
    nodes_placed: usize,
}

const NO_DOMAIN: DomainId = DomainId::MAX;

impl TopologyDomains {
    /// The domains of `nodes` (id and node) for `key`.
    pub(crate) fn new<'a>(key: &str, nodes: impl Iterator<Item = (NodeId, &'a Node)>) -> Self {
        let mut domains = TopologyDomains { key: key.to_string(), of_node: Vec::new(), ids: FastHashMap::default(), nodes_placed: 0 };
        for (id, node) in nodes {
            domains.set_node(id, Some(node));
        }
        domains
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The node's domain: None when the node lacks the label.
    #[inline]
    pub fn of(&self, node: NodeId) -> Option<DomainId> {
        self.of_node.get(node as usize).copied().filter(|&domain| domain != NO_DOMAIN)
    }

    /// How many domain ids there are: every [`TopologyDomains::of`] is below it.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Records the node's domain as it is now; `None` for a node removed.
    pub(crate) fn set_node(&mut self, id: NodeId, node: Option<&Node>) {
        let domain = match node.and_then(|node| label(&node.labels, &self.key)) {
            Some(value) => match self.ids.get(value) {
                Some(&domain) => domain,
                None => {
                    let next = self.ids.len() as DomainId;
                    self.ids.insert(value.to_string(), next);
                    next
                }
            },
            None => NO_DOMAIN,
        };
        let index = id as usize;
        if index >= self.of_node.len() {
            if domain == NO_DOMAIN {
                return;
            }
            self.of_node.resize(index + 1, NO_DOMAIN);
        }
        let previous = std::mem::replace(&mut self.of_node[index], domain);
        match (previous == NO_DOMAIN, domain == NO_DOMAIN) {
            (true, false) => self.nodes_placed += 1,
            (false, true) => self.nodes_placed -= 1,
            _ => {}
        }
    }

    /// Whether most ids name values no node has any more.
    fn mostly_stale(&self) -> bool {
        self.ids.len() > 2 * self.nodes_placed + 64
    }
}

/// Topology keys kept at most: each costs a label lookup per node change. Pods name a few (hostname, zone,
/// region); past this many, the keys are forgotten and built again as they are asked for.
const MAX_KEYS: usize = 16;

/// The topology keys a view was asked for, each kept current as nodes change.
#[derive(Debug, Default)]
pub(crate) struct Topologies {
    kept: Vec<Arc<TopologyDomains>>,
    /// Set by the first key asked for, so that a component whose policy never asks links none of this.
    follow: Option<fn(&mut [Arc<TopologyDomains>], NodeId, Option<&Node>)>,
}

impl Topologies {
    /// The domains of `key`, built over `nodes` when the key is new.
    pub(crate) fn of<'a, I: Iterator<Item = (NodeId, &'a Node)>>(&mut self, key: &str, nodes: impl FnOnce() -> I) -> Arc<TopologyDomains> {
        if let Some(index) = self.kept.iter().position(|domains| same_text(domains.key(), key)) {
            if !self.kept[index].mostly_stale() {
                return Arc::clone(&self.kept[index]);
            }
            self.kept.swap_remove(index);
        }
        if self.kept.len() == MAX_KEYS {
            self.kept.clear();
        }
        let domains = Arc::new(TopologyDomains::new(key, nodes()));
        self.kept.push(Arc::clone(&domains));
        self.follow = Some(follow_node);
        domains
    }

    /// Records a node's new labels (or its removal, `None`) in every key kept.
    pub(crate) fn follow(&mut self, id: NodeId, node: Option<&Node>) {
        if let Some(follow) = self.follow {
            follow(&mut self.kept, id, node);
        }
    }
}

/// A copy still held by a call's counts (none between calls) is left as it was: the node is recorded in a new one.
fn follow_node(kept: &mut [Arc<TopologyDomains>], id: NodeId, node: Option<&Node>) {
    for domains in kept {
        Arc::make_mut(domains).set_node(id, node);
    }
}

/// A number per domain of one topology key: pods counted there, or a score summed there.
#[derive(Debug, Clone)]
pub struct DomainCounts {
    pub domains: Arc<TopologyDomains>,
    counts: Vec<i64>,
    /// Whether anything was added, even if the amounts cancelled out.
    added: bool,
}

impl DomainCounts {
    pub fn new(domains: Arc<TopologyDomains>) -> Self {
        let counts = vec![0; domains.len()];
        DomainCounts { domains, counts, added: false }
    }

    /// Adds `amount` to the node's domain; nothing when the node has none.
    #[inline]
    pub fn add(&mut self, node: NodeId, amount: i64) {
        if let Some(domain) = self.domains.of(node) {
            self.counts[domain as usize] += amount;
            self.added = true;
        }
    }

    /// The count of the node's domain; None when the node has none.
    #[inline]
    pub fn at(&self, node: NodeId) -> Option<i64> {
        self.domains.of(node).map(|domain| self.counts[domain as usize])
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        !self.added
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::NodeBuilder;
    use crate::Cluster;

    #[test]
    fn nodes_sharing_a_value_share_a_domain_and_a_node_without_the_label_has_none() {
        let mut cluster = Cluster::new();
        let a1 = cluster.add_node(NodeBuilder::new("a1").label("zone", "a").build());
        let a2 = cluster.add_node(NodeBuilder::new("a2").label("zone", "a").build());
        let b = cluster.add_node(NodeBuilder::new("b").label("zone", "b").build());
        let bare = cluster.add_node(NodeBuilder::new("bare").build());
        let zones = cluster.topology("zone");
        assert_eq!(zones.of(a1), zones.of(a2));
        assert_ne!(zones.of(a1), zones.of(b));
        assert_eq!(zones.of(bare), None);
        assert_eq!(zones.len(), 2);
        assert_eq!(zones.of(99), None, "an unknown node");
    }

    #[test]
    fn domains_follow_nodes_added_relabelled_and_removed_after_the_key_was_asked_for() {
        use crate::types::ClusterDelta;
        let mut cluster = Cluster::new();
        let a = cluster.add_node(NodeBuilder::new("a").label("zone", "a").build());
        let before = cluster.topology("zone");
        let b = cluster.add_node(NodeBuilder::new("b").label("zone", "b").build());
        let zones = cluster.topology("zone");
        assert_eq!(before.of(b), None, "a copy taken before is not changed under its holder");
        assert!(zones.of(b).is_some() && zones.of(b) != zones.of(a));
        let moved = NodeBuilder::new("a").label("zone", "b").build();
        cluster.apply(ClusterDelta::NodeUpsert((a, moved, crate::cluster::empty_usage())));
        let zones = cluster.topology("zone");
        assert_eq!(zones.of(a), zones.of(b), "relabelled into b's zone");
        cluster.apply(ClusterDelta::NodeRemove(b));
        assert_eq!(cluster.topology("zone").of(b), None);
        cluster.apply(ClusterDelta::Reset);
        assert_eq!(cluster.topology("zone").of(a), None, "a reset forgets the nodes");
    }

    #[test]
    fn hostnames_of_nodes_replaced_over_time_do_not_grow_the_domains_without_bound() {
        use crate::types::ClusterDelta;
        let mut cluster = Cluster::new();
        let host = |name: &str| NodeBuilder::new(name).label("kubernetes.io/hostname", name).build();
        let first = cluster.add_node(host("n-0"));
        let mut largest = 0;
        // One node at a time, each replaced by a node of a new name (an autoscaled group over weeks).
        let mut current = first;
        for generation in 1..1000 {
            cluster.apply(ClusterDelta::NodeRemove(current));
            current = cluster.add_node(host(&format!("n-{generation}")));
            let hostnames = cluster.topology("kubernetes.io/hostname");
            assert!(hostnames.of(current).is_some());
            largest = largest.max(hostnames.len());
        }
        assert!(largest <= 2 + 64 + 1, "domain ids are renumbered once most are stale: {largest}");
    }

    #[test]
    fn keys_past_the_bound_are_forgotten_and_built_again() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n").label("zone", "a").build());
        let zone = cluster.topology("zone");
        for key in 0..super::MAX_KEYS {
            cluster.topology(&format!("tenant-key-{key}"));
        }
        let again = cluster.topology("zone");
        assert!(!std::sync::Arc::ptr_eq(&zone, &again), "built again");
        assert_eq!(again.of(node), zone.of(node));
    }
}
