//! `taint-toleration`: kube-scheduler's TaintToleration. The filter rejects nodes with a `NoSchedule` or
//! `NoExecute` taint the pod does not tolerate; the score prefers nodes with fewer untolerated
//! `PreferNoSchedule` taints.

use wasp_sdk::matching::first_untolerated_taint;
use wasp_sdk::types::{Pod, TaintEffect};
use wasp_sdk::{Cluster, Filter, NoSettings, NodeFacts, NodeInfo, Normalization, Policy, Score, Verdict};

pub struct TaintToleration;

impl Policy for TaintToleration {
    type Settings = NoSettings;
    const NAME: &'static str = "taint-toleration";
    const NODE_FACTS: NodeFacts = NodeFacts { taints: true, ..NodeFacts::NONE };

    fn new(_: NoSettings) -> Result<Self, String> {
        Ok(TaintToleration)
    }
}

impl Filter for TaintToleration {
    fn filter(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {
        let effects = [TaintEffect::NoSchedule, TaintEffect::NoExecute];
        match first_untolerated_taint(&node.node.taints, &pod.tolerations, &effects) {
            None => Verdict::Pass,
            Some(taint) => Verdict::reject(format!("node(s) had untolerated taint {{{}: {}}}", taint.key, taint.value)),
        }
    }
}

impl Score for TaintToleration {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        // Only tolerations that can apply to PreferNoSchedule count, as in kube-scheduler's PreScore.
        let tolerations: Vec<_> =
            pod.tolerations.iter().filter(|toleration| toleration.effect.is_none_or(|effect| effect == TaintEffect::PreferNoSchedule)).collect();
        node.node
            .taints
            .iter()
            .filter(|taint| taint.effect == TaintEffect::PreferNoSchedule)
            .filter(|taint| !tolerations.iter().any(|toleration| toleration.tolerates(taint)))
            .count() as i64
    }

    fn normalization(&self) -> Normalization {
        Normalization::ReverseMaxTo100
    }
}

wasp_sdk::export_policy!(TaintToleration);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter_uses_kube_scheduler_wording() {
        let mut cluster = Cluster::for_policy::<TaintToleration>();
        let tainted = cluster.add_node(NodeBuilder::new("n1").taint("dedicated", "gpu", TaintEffect::NoSchedule).build());
        let soft = cluster.add_node(NodeBuilder::new("n2").taint("spot", "true", TaintEffect::PreferNoSchedule).build());
        let plain = PodBuilder::new("p").build();
        let result = TaintToleration.filter_all(&plain, &cluster, &[tainted, soft]);
        assert_eq!(result.verdicts, vec![1, 0]);
        assert_eq!(result.rejections, vec![vec!["node(s) had untolerated taint {dedicated: gpu}".to_string()]]);

        let tolerant = PodBuilder::new("p").toleration("dedicated", Some("gpu"), Some(TaintEffect::NoSchedule)).build();
        assert_eq!(TaintToleration.filter_all(&tolerant, &cluster, &[tainted]).verdicts, vec![0]);
    }

    #[test]
    fn no_execute_taints_filter_too() {
        let mut cluster = Cluster::for_policy::<TaintToleration>();
        let node = cluster.add_node(NodeBuilder::new("n1").taint("node.kubernetes.io/not-ready", "", TaintEffect::NoExecute).build());
        let pod = PodBuilder::new("p").build();
        assert!(!TaintToleration.filter(&pod, cluster.node(node).unwrap(), &cluster).is_pass());
    }

    #[test]
    fn score_prefers_fewer_untolerated_prefer_no_schedule_taints() {
        let mut cluster = Cluster::for_policy::<TaintToleration>();
        let two =
            cluster.add_node(NodeBuilder::new("n1").taint("a", "1", TaintEffect::PreferNoSchedule).taint("b", "1", TaintEffect::PreferNoSchedule).build());
        let one = cluster.add_node(NodeBuilder::new("n2").taint("a", "1", TaintEffect::PreferNoSchedule).build());
        let none = cluster.add_node(NodeBuilder::new("n3").build());
        let pod = PodBuilder::new("p").build();
        assert_eq!(TaintToleration.score_all(&pod, &cluster, &[two, one, none]), vec![0, 50, 100]);
        // A toleration restricted to NoSchedule does not count for PreferNoSchedule taints.
        let pod = PodBuilder::new("p").toleration("a", None, Some(TaintEffect::NoSchedule)).build();
        assert_eq!(TaintToleration.score_all(&pod, &cluster, &[two, one, none]), vec![0, 50, 100]);
        let pod = PodBuilder::new("p").toleration("a", None, None).build();
        assert_eq!(TaintToleration.score_all(&pod, &cluster, &[two, one, none]), vec![0, 100, 100]);
    }
}
