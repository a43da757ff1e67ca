//! `image-locality`: kube-scheduler's ImageLocality score. A node that already has the pod's images scores higher,
//! so the pod starts sooner: the sum over the pod's containers and init containers of each image's size on the
//! node, scaled by the share of nodes that have it (an image every node has says nothing about this one), clamped
//! to [23 MiB, 1000 MiB x containers] and mapped onto 0..=100. Image names are normalized as kube-scheduler does
//! (`nginx` is `nginx:latest`) and compared with the names the kubelet reports in `status.images`.

use wasp_sdk::policy::{scores_for, Normalization};
use wasp_sdk::types::{NodeId, Pod};
use wasp_sdk::{Cluster, NoSettings, NodeFacts, NodeInfo, Policy, Score};

const MIB: i64 = 1024 * 1024;
/// Below this, an image's presence is worth nothing (kube-scheduler's `minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MIB;
/// The most one container's image counts for (kube-scheduler's `maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MIB;

pub struct ImageLocality;

impl Policy for ImageLocality {
    type Settings = NoSettings;
    const NAME: &'static str = "image-locality";
    const NODE_FACTS: NodeFacts = NodeFacts { images: true, ..NodeFacts::NONE };

    fn new(_: NoSettings) -> Result<Self, String> {
        Ok(ImageLocality)
    }
}

/// `nginx` -> `nginx:latest`; a name with a tag or digest stays as it is.
fn normalized(image: &str) -> std::borrow::Cow<'_, str> {
    let tag = image.rfind(':');
    let path = image.rfind('/');
    match (tag, path) {
        (Some(tag), Some(path)) if tag > path => image.into(),
        (Some(_), None) => image.into(),
        _ => format!("{image}:latest").into(),
    }
}

/// The pod's images as every node's score reads them: each name normalized and the share of nodes that have it,
/// computed once per pod rather than once per node.
struct PodImages {
    images: Vec<(String, f64)>,
    max_threshold: i64,
}

impl PodImages {
    fn of(pod: &Pod, cluster: &Cluster) -> PodImages {
        let total_nodes = cluster.node_count().max(1) as f64;
        let containers = pod.init_containers.iter().chain(&pod.containers);
        let images = containers
            .map(|container| {
                let name = normalized(&container.image).into_owned();
                let spread = f64::from(cluster.nodes_with_image(&name)) / total_nodes;
                (name, spread)
            })
            .collect::<Vec<_>>();
        let max_threshold = MAX_CONTAINER_THRESHOLD * (images.len() as i64).max(1);
        PodImages { images, max_threshold }
    }

    fn score(&self, node: &NodeInfo) -> i64 {
        // Most nodes in a large cluster have none of the pod's images: the score is the floor's, 0.
        if node.node.images.is_empty() {
            return 0;
        }
        let sum: i64 = self
            .images
            .iter()
            .filter_map(|(name, spread)| {
                let image = node.node.images.iter().find(|image| image.names.iter().any(|listed| listed == name))?;
                Some((image.size_bytes as f64 * spread) as i64)
            })
            .sum();
        100 * (sum.clamp(MIN_THRESHOLD, self.max_threshold) - MIN_THRESHOLD) / (self.max_threshold - MIN_THRESHOLD)
    }
}

impl Score for ImageLocality {
    fn score(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> i64 {
        PodImages::of(pod, cluster).score(node)
    }

    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        let images = PodImages::of(pod, cluster);
        scores_for(cluster, candidates, Normalization::None, |node| images.score(node))
    }
}

wasp_sdk::export_policy!(ImageLocality);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn names_are_normalized_as_kube_scheduler_does() {
        assert_eq!(normalized("nginx"), "nginx:latest");
        assert_eq!(normalized("nginx:1.25"), "nginx:1.25");
        assert_eq!(normalized("registry:5000/team/app"), "registry:5000/team/app:latest");
        assert_eq!(normalized("registry:5000/team/app:2"), "registry:5000/team/app:2");
    }

    #[test]
    fn a_node_with_the_image_scores_by_size_and_spread() {
        // 300 MiB on one of two nodes counts 150 MiB: 100 x (150 - 23) / (1000 - 23) = 12, in whole numbers.
        let mut cluster = Cluster::for_policy::<ImageLocality>();
        let with = cluster.add_node(NodeBuilder::new("with").image(&["registry.example/app:1", "registry.example/app@sha256:ab"], 300 * MIB as u64).build());
        let without = cluster.add_node(NodeBuilder::new("without").image(&["registry.example/other:1"], 900 * MIB as u64).build());
        let pod = PodBuilder::new("p").image("registry.example/app:1").build();
        assert_eq!(ImageLocality.score_all(&pod, &cluster, &[with, without]), vec![12, 0]);
        // On both nodes it is worth twice as much on each.
        let mut both = Cluster::for_policy::<ImageLocality>();
        let a = both.add_node(NodeBuilder::new("a").image(&["registry.example/app:1"], 300 * MIB as u64).build());
        let b = both.add_node(NodeBuilder::new("b").image(&["registry.example/app:1"], 300 * MIB as u64).build());
        assert_eq!(ImageLocality.score_all(&pod, &both, &[a, b]), vec![28, 28], "(300 - 23) / 977");
    }

    #[test]
    fn small_images_count_for_nothing_and_the_sum_is_capped_by_the_number_of_containers() {
        let mut cluster = Cluster::for_policy::<ImageLocality>();
        let small = cluster.add_node(NodeBuilder::new("small").image(&["tiny:1"], 10 * MIB as u64).build());
        let mid = cluster.add_node(NodeBuilder::new("mid").image(&["app:1"], 1800 * MIB as u64).build());
        let huge = cluster.add_node(NodeBuilder::new("huge").image(&["big:1"], 90_000 * MIB as u64).build());
        let score = |pod: &Pod, node| ImageLocality.score_all(pod, &cluster, &[node])[0];
        assert_eq!(score(&PodBuilder::new("p").image("tiny:1").build(), small), 0, "under 23 MiB");
        assert_eq!(score(&PodBuilder::new("p").image("big:1").build(), huge), 100, "30000 MiB is past 1000 MiB");
        // 1800 MiB on one node of three: 600 MiB. One container: (600 - 23) / 977; two: (600 - 23) / 1977.
        assert_eq!(score(&PodBuilder::new("p").image("app:1").build(), mid), 59);
        assert_eq!(score(&PodBuilder::new("p").image("app:1").container("sidecar", &[]).build(), mid), 29);
    }

    #[test]
    fn a_view_without_node_images_is_what_other_policies_get() {
        // The fact is declared: views built for this policy keep the images, a view that declares nothing drops them.
        let mut plain = Cluster::keeping(wasp_sdk::PodFacts::NONE);
        let id = plain.add_node(NodeBuilder::new("n").image(&["app:1"], 300 * MIB as u64).build());
        assert_eq!(plain.node(id).unwrap().node.images.len(), 1, "Cluster::keeping keeps every node fact");
        struct Nothing;
        impl Policy for Nothing {
            type Settings = NoSettings;
            const NAME: &'static str = "nothing";
            fn new(_: NoSettings) -> Result<Self, String> {
                Ok(Nothing)
            }
        }
        let mut view = Cluster::for_policy::<Nothing>();
        let id = view.add_node(NodeBuilder::new("n").image(&["app:1"], 300 * MIB as u64).build());
        assert!(view.node(id).unwrap().node.images.is_empty());
        assert_eq!(view.nodes_with_image("app:1"), 0);
    }
}
