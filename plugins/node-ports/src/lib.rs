//! `node-ports`: kube-scheduler's NodePorts. A pod asking for host ports goes only where no pod already bound
//! holds one of them: same protocol and port, on the same address or where either side binds every address
//! (`0.0.0.0`).

use wasp_sdk::policy::verdicts_for;
use wasp_sdk::types::{FilterResult, HostPort, NodeId, Pod, ViewScope};
use wasp_sdk::{Cluster, Filter, NoSettings, NodeFacts, NodeInfo, PodFacts, Policy, Verdict};

const PORTS_TAKEN: &str = "node(s) didn't have free ports for the requested pod ports";
const ANY_ADDRESS: &str = "0.0.0.0";

pub struct NodePorts;

impl Policy for NodePorts {
    type Settings = NoSettings;
    const NAME: &'static str = "node-ports";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const VIEW: ViewScope = ViewScope::NodesAndPods;
    const POD_FACTS: PodFacts = PodFacts { host_ports: true, ..PodFacts::NONE };

    fn new(_: NoSettings) -> Result<Self, String> {
        Ok(NodePorts)
    }

    /// Only pods holding host ports can conflict: a few of a cluster's pods, where the rest would be most of the
    /// view's memory.
    fn keeps_pod(pod: &Pod) -> bool {
        !pod.host_ports.is_empty()
    }
}

/// kube-scheduler's `HostPortInfo.CheckConflict`, for one wanted port against one port in use.
fn conflicts(wanted: &HostPort, used: &HostPort) -> bool {
    wanted.port == used.port && wanted.protocol == used.protocol && (wanted.ip == ANY_ADDRESS || used.ip == ANY_ADDRESS || wanted.ip == used.ip)
}

impl Filter for NodePorts {
    fn filter(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> Verdict {
        let taken = cluster.pods_on(node).flat_map(|bound| bound.pod.host_ports.iter()).any(|used| pod.host_ports.iter().any(|wanted| conflicts(wanted, used)));
        if taken {
            Verdict::reject(PORTS_TAKEN)
        } else {
            Verdict::Pass
        }
    }

    fn filter_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> FilterResult {
        if pod.host_ports.is_empty() {
            return verdicts_for(cluster, candidates, |_| Verdict::Pass);
        }
        verdicts_for(cluster, candidates, |node| self.filter(pod, node, cluster))
    }
}

wasp_sdk::export_policy!(NodePorts);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{verdicts, NodeBuilder, PodBuilder};

    fn passing(pod: &Pod, cluster: &Cluster) -> Vec<String> {
        verdicts(&NodePorts, pod, cluster).into_iter().filter(|(_, verdict)| verdict.is_pass()).map(|(node, _)| node).collect()
    }

    #[test]
    fn a_taken_port_rejects_by_protocol_and_address() {
        let mut cluster = Cluster::for_policy::<NodePorts>();
        let any = cluster.add_node(NodeBuilder::new("any").build());
        let one_ip = cluster.add_node(NodeBuilder::new("one-ip").build());
        cluster.add_node(NodeBuilder::new("free").build());
        cluster.bind(PodBuilder::new("dns").host_port(53, "UDP").build(), any);
        cluster.bind(PodBuilder::new("proxy").host_port_on(8080, "TCP", "10.0.0.1").build(), one_ip);

        assert_eq!(passing(&PodBuilder::new("dns-2").host_port(53, "UDP").build(), &cluster), ["one-ip", "free"]);
        assert_eq!(passing(&PodBuilder::new("tcp-53").host_port(53, "TCP").build(), &cluster).len(), 3, "another protocol");
        assert_eq!(
            passing(&PodBuilder::new("on-ip").host_port_on(53, "UDP", "10.0.0.9").build(), &cluster),
            ["one-ip", "free"],
            "0.0.0.0 in use conflicts with any address"
        );
        assert_eq!(
            passing(&PodBuilder::new("all").host_port(8080, "TCP").build(), &cluster),
            ["any", "free"],
            "0.0.0.0 wanted conflicts with any address in use"
        );
        assert_eq!(passing(&PodBuilder::new("other-ip").host_port_on(8080, "TCP", "10.0.0.2").build(), &cluster).len(), 3);
        let result = NodePorts.filter_all(&PodBuilder::new("dns-3").host_port(53, "UDP").build(), &cluster, &[any]);
        assert_eq!(result.rejections, vec![vec![PORTS_TAKEN.to_string()]]);
    }

    #[test]
    fn pods_without_host_ports_pass_everywhere() {
        let mut cluster = Cluster::for_policy::<NodePorts>();
        let node = cluster.add_node(NodeBuilder::new("n").build());
        cluster.bind(PodBuilder::new("dns").host_port(53, "UDP").build(), node);
        assert_eq!(passing(&PodBuilder::new("web").build(), &cluster), ["n"]);
    }
}
