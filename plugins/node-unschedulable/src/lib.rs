//! `node-unschedulable`: kube-scheduler's NodeUnschedulable. Cordoned nodes (`spec.unschedulable`) are rejected
//! unless the pod tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint. Nodes labelled for
//! maintenance (`wasp.dev/maintenance` by default, what `drain-for-maintenance` empties) are treated as cordoned,
//! so the pods a drain moves, and new ones, do not land back on them.

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{Pod, Taint, TaintEffect};
use wasp_sdk::{Cluster, Filter, NodeFacts, NodeInfo, Policy, Verdict};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Nodes with this label (any value) take no new pods; empty: only cordoned nodes are rejected.
    pub maintenance_label: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { maintenance_label: "wasp.dev/maintenance".into() }
    }
}

pub struct NodeUnschedulable {
    settings: Settings,
}

impl Policy for NodeUnschedulable {
    type Settings = Settings;
    const NAME: &'static str = "node-unschedulable";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, ..NodeFacts::NONE };
    const SETTINGS_DOC: &'static str = "maintenanceLabel: nodes with this label take no new pods, as if cordoned (default wasp.dev/maintenance; empty: off)";

    fn new(settings: Settings) -> Result<Self, String> {
        Ok(NodeUnschedulable { settings })
    }
}

impl Filter for NodeUnschedulable {
    fn filter(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {
        let key = &self.settings.maintenance_label;
        let reason = if node.node.unschedulable {
            "node(s) were unschedulable"
        } else if !key.is_empty() && node.node.label(key).is_some() {
            "node(s) were marked for maintenance"
        } else {
            return Verdict::Pass;
        };
        let cordon = Taint { key: "node.kubernetes.io/unschedulable".into(), value: String::new(), effect: TaintEffect::NoSchedule };
        if pod.tolerations.iter().any(|toleration| toleration.tolerates(&cordon)) {
            Verdict::Pass
        } else {
            Verdict::reject(reason)
        }
    }
}

wasp_sdk::export_policy!(NodeUnschedulable);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn cordoned_nodes_need_a_toleration() {
        let mut cluster = Cluster::new();
        let cordoned = cluster.add_node(NodeBuilder::new("n1").unschedulable().build());
        let open = cluster.add_node(NodeBuilder::new("n2").build());
        let pod = PodBuilder::new("p").build();
        let policy = NodeUnschedulable::new(Settings::default()).unwrap();
        let result = policy.filter_all(&pod, &cluster, &[cordoned, open]);
        assert_eq!(result.verdicts, vec![1, 0]);
        assert_eq!(result.rejections, vec![vec!["node(s) were unschedulable".to_string()]]);
        let tolerant = PodBuilder::new("p").toleration("node.kubernetes.io/unschedulable", None, Some(TaintEffect::NoSchedule)).build();
        assert!(policy.filter(&tolerant, cluster.node(cordoned).unwrap(), &cluster).is_pass());
    }

    #[test]
    fn a_node_labelled_for_maintenance_takes_no_new_pods_unless_the_label_is_off() {
        let mut cluster = Cluster::new();
        let marked = cluster.add_node(NodeBuilder::new("old").label("wasp.dev/maintenance", "kernel-upgrade").build());
        let open = cluster.add_node(NodeBuilder::new("new").build());
        let pod = PodBuilder::new("p").build();
        let policy = NodeUnschedulable::new(Settings::default()).unwrap();
        let result = policy.filter_all(&pod, &cluster, &[marked, open]);
        assert_eq!(result.rejections, vec![vec!["node(s) were marked for maintenance".to_string()]]);
        let off = NodeUnschedulable::new(Settings { maintenance_label: String::new() }).unwrap();
        assert!(off.filter(&pod, cluster.node(marked).unwrap(), &cluster).is_pass());
    }
}
