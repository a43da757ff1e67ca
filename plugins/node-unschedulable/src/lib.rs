//! `node-unschedulable`: kube-scheduler's NodeUnschedulable. Cordoned nodes (`spec.unschedulable`) are rejected
//! unless the pod tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use wasp_sdk::types::{Pod, Taint, TaintEffect};
use wasp_sdk::{Cluster, Filter, NodeInfo, NoSettings, Policy, Verdict, NodeFacts};

pub struct NodeUnschedulable;

impl Policy for NodeUnschedulable {
    type Settings = NoSettings;
    const NAME: &'static str = "node-unschedulable";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;

    fn new(_: NoSettings) -> Result<Self, String> {
        Ok(NodeUnschedulable)
    }
}

impl Filter for NodeUnschedulable {
    fn filter(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {
        if !node.node.unschedulable {
            return Verdict::Pass;
        }
        let cordon = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        };
        if pod.tolerations.iter().any(|toleration| toleration.tolerates(&cordon)) {
            Verdict::Pass
        } else {
            Verdict::reject("node(s) were unschedulable")
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
        let result = NodeUnschedulable.filter_all(&pod, &cluster, &[cordoned, open]);
        assert_eq!(result.verdicts, vec![1, 0]);
        assert_eq!(result.rejections, vec![vec!["node(s) were unschedulable".to_string()]]);
        let tolerant = PodBuilder::new("p")
            .toleration("node.kubernetes.io/unschedulable", None, Some(TaintEffect::NoSchedule))
            .build();
        assert!(NodeUnschedulable.filter(&tolerant, cluster.node(cordoned).unwrap(), &cluster).is_pass());
    }
}
