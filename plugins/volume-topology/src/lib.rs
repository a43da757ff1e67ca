//! `volume-topology`: kube-scheduler's VolumeBinding filter. A pod whose
//! PersistentVolumeClaims are bound to volumes with node affinity goes only where every such volume can be
//! attached; a `WaitForFirstConsumer` claim goes only where an existing volume that fits it can be attached or
//! its StorageClass's `allowedTopologies` allow a volume to be made (the host unions the two into the claim's
//! terms). The host resolves the claims against the cluster's claims, volumes and classes before the call, and
//! gives or provisions `WaitForFirstConsumer` claims their volumes on the chosen node before it binds the pod.
//!
//! It is kube-scheduler's NodeVolumeLimits for CSI volumes too, checked first as kube-scheduler orders the two: a
//! node whose CSINode limits how many volumes a driver attaches takes the pod only if the pod's volumes not yet
//! attached there (another pod on the node may already use one) keep each driver within its limit.

use wasp_sdk::policy::verdicts_for;
use wasp_sdk::types::{AttachedVolume, ClaimRequirement, FilterResult, Node, NodeId, NodeSelectorTerm, Pod, ViewScope};
use wasp_sdk::{Cluster, Filter, NoSettings, NodeFacts, NodeInfo, PodFacts, Policy, Verdict};

/// kube-scheduler's `ErrReasonNodeConflict`.
pub const NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// kube-scheduler's `ErrReasonBindConflict`: no volume can be provisioned (or found) for the node.
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// kube-scheduler's NodeVolumeLimits `ErrReasonMaxVolumeCountExceeded`.
pub const MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

pub struct VolumeTopology;

impl Policy for VolumeTopology {
    type Settings = NoSettings;
    const NAME: &'static str = "volume-topology";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, ..NodeFacts::NONE };
    const VIEW: ViewScope = ViewScope::Nodes;
    const POD_FACTS: PodFacts = PodFacts::NONE;

    fn new(_: NoSettings) -> Result<Self, String> {
        Ok(VolumeTopology)
    }
}

/// ORed terms, as a volume's node affinity and a class's allowed topologies are read.
fn any_term_matches(terms: &[NodeSelectorTerm], node: &Node) -> bool {
    terms.iter().any(|term| term.matches(node))
}

/// Whether attaching the pod's volumes that the node does not have yet would take a driver past the node's limit.
fn exceeds_volume_limits(pod: &Pod, node: &NodeInfo) -> bool {
    if node.node.volume_limits.is_empty() {
        return false;
    }
    let attached = &node.usage.attached_volumes;
    let mut new: Vec<&AttachedVolume> =
        pod.volume_claims.iter().filter_map(|claim| claim.attachment.as_ref()).filter(|volume| !attached.contains(volume)).collect();
    new.sort_by(|a, b| (&a.driver, &a.handle).cmp(&(&b.driver, &b.handle)));
    new.dedup();
    node.node.volume_limits.iter().any(|(driver, limit)| {
        let adding = new.iter().filter(|volume| volume.driver == *driver).count();
        adding > 0 && attached.iter().filter(|volume| volume.driver == *driver).count() + adding > *limit as usize
    })
}

impl Filter for VolumeTopology {
    fn filter(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {
        if exceeds_volume_limits(pod, node) {
            return Verdict::reject(MAX_VOLUME_COUNT);
        }
        for claim in &pod.volume_claims {
            match &claim.requirement {
                ClaimRequirement::Anywhere => {}
                ClaimRequirement::Unresolvable(reason) => return Verdict::reject(reason.clone()),
                ClaimRequirement::Bound(terms) if !any_term_matches(terms, &node.node) => return Verdict::reject(NODE_CONFLICT),
                ClaimRequirement::ToProvision(terms) if !terms.is_empty() && !any_term_matches(terms, &node.node) => return Verdict::reject(BIND_CONFLICT),
                ClaimRequirement::Bound(_) | ClaimRequirement::ToProvision(_) => {}
            }
        }
        Verdict::Pass
    }

    fn filter_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> FilterResult {
        verdicts_for(cluster, candidates, |node| self.filter(pod, node, cluster))
    }
}

wasp_sdk::export_policy!(VolumeTopology);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{verdicts, NodeBuilder, PodBuilder};
    use wasp_sdk::types::{SelectorOperator, SelectorRequirement};

    fn zone(zone: &str) -> Vec<NodeSelectorTerm> {
        let requirement = SelectorRequirement { key: "topology.kubernetes.io/zone".into(), operator: SelectorOperator::In, values: vec![zone.into()] };
        vec![NodeSelectorTerm { match_expressions: vec![requirement], match_fields: Vec::new() }]
    }

    fn cluster() -> Cluster {
        let mut cluster = Cluster::for_policy::<VolumeTopology>();
        for (name, zone) in [("a-1", "a"), ("a-2", "a"), ("b-1", "b")] {
            cluster.add_node(NodeBuilder::new(name).label("topology.kubernetes.io/zone", zone).build());
        }
        cluster
    }

    fn outcome(pod: &Pod) -> Vec<(String, Option<String>)> {
        verdicts(&VolumeTopology, pod, &cluster())
            .into_iter()
            .map(|(node, verdict)| {
                (
                    node,
                    match verdict {
                        Verdict::Pass => None,
                        Verdict::Reject(reasons) => Some(reasons.join(", ")),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_bound_zonal_volume_pins_the_pod_to_its_zone() {
        let pod = PodBuilder::new("db").claim("data", ClaimRequirement::Bound(zone("b"))).claim("logs", ClaimRequirement::Anywhere).build();
        let conflict = Some(NODE_CONFLICT.to_string());
        assert_eq!(outcome(&pod), [("a-1".into(), conflict.clone()), ("a-2".into(), conflict), ("b-1".into(), None)]);
    }

    #[test]
    fn two_volumes_in_different_zones_fit_nowhere() {
        let pod = PodBuilder::new("db").claim("one", ClaimRequirement::Bound(zone("a"))).claim("two", ClaimRequirement::Bound(zone("b"))).build();
        assert!(outcome(&pod).iter().all(|(_, reason)| reason.as_deref() == Some(NODE_CONFLICT)));
    }

    #[test]
    fn a_claim_to_provision_goes_where_its_class_allows() {
        let anywhere = PodBuilder::new("web").claim("cache", ClaimRequirement::ToProvision(Vec::new())).build();
        assert!(outcome(&anywhere).iter().all(|(_, reason)| reason.is_none()));
        let only_a = PodBuilder::new("web").claim("cache", ClaimRequirement::ToProvision(zone("a"))).build();
        let passing: Vec<String> = outcome(&only_a).into_iter().filter(|(_, reason)| reason.is_none()).map(|(node, _)| node).collect();
        assert_eq!(passing, ["a-1", "a-2"]);
        assert_eq!(outcome(&only_a)[2].1.as_deref(), Some(BIND_CONFLICT));
    }

    #[test]
    fn an_unresolvable_claim_rejects_every_node_with_its_reason() {
        let reason = "persistentvolumeclaim \"data\" not found";
        let pod = PodBuilder::new("db").claim("data", ClaimRequirement::Unresolvable(reason.into())).build();
        assert!(outcome(&pod).iter().all(|(_, rejected)| rejected.as_deref() == Some(reason)));
    }

    #[test]
    fn a_node_at_its_drivers_volume_limit_takes_only_volumes_already_attached_there() {
        const DISK: &str = "disk.csi.example.com";
        let mut cluster = Cluster::for_policy::<VolumeTopology>();
        let full = cluster.add_node(NodeBuilder::new("full").volume_limit(DISK, 2).volume_limit("files.csi.example.com", 0).build());
        let roomy = cluster.add_node(NodeBuilder::new("roomy").volume_limit(DISK, 3).build());
        cluster.add_node(NodeBuilder::new("unlimited").build());
        for node in [full, roomy] {
            cluster.bind(PodBuilder::new("db-0").attached_claim("data", DISK, &format!("vol-{node}-1")).build(), node);
            cluster.bind(PodBuilder::new("db-1").attached_claim("data", DISK, &format!("vol-{node}-2")).build(), node);
        }
        let outcome = |pod: &Pod| -> Vec<Option<String>> {
            verdicts(&VolumeTopology, pod, &cluster)
                .into_iter()
                .map(|(_, verdict)| match verdict {
                    Verdict::Pass => None,
                    Verdict::Reject(reasons) => Some(reasons.join(", ")),
                })
                .collect()
        };
        let exceeds = Some(MAX_VOLUME_COUNT.to_string());
        let new_disk = PodBuilder::new("db-2").attached_claim("data", DISK, "vol-new").build();
        assert_eq!(outcome(&new_disk), [exceeds.clone(), None, None], "2 of 2 attached on full, 2 of 3 on roomy");
        // A volume already attached to the node (shared with a pod there) costs nothing more.
        let shared = PodBuilder::new("reader").attached_claim("data", DISK, &format!("vol-{full}-1")).build();
        assert_eq!(outcome(&shared), [None, None, None]);
        // Two new volumes: roomy has room for one only.
        let two = PodBuilder::new("db-3").attached_claim("a", DISK, "vol-x").attached_claim("b", DISK, "vol-y").build();
        assert_eq!(outcome(&two), [exceeds.clone(), exceeds.clone(), None]);
        // The same new volume through two claims counts once; another driver's limit is its own.
        let same_twice = PodBuilder::new("db-4").attached_claim("a", DISK, "vol-z").attached_claim("b", DISK, "vol-z").build();
        assert_eq!(outcome(&same_twice), [exceeds.clone(), None, None]);
        let files = PodBuilder::new("share").attached_claim("files", "files.csi.example.com", "share-1").build();
        assert_eq!(outcome(&files), [exceeds, None, None], "a limit of 0 takes none");
        assert_eq!(outcome(&PodBuilder::new("plain").build()), [None, None, None]);
    }

    #[test]
    fn a_pod_without_claims_passes_everywhere() {
        assert!(outcome(&PodBuilder::new("plain").build()).iter().all(|(_, reason)| reason.is_none()));
    }
}
