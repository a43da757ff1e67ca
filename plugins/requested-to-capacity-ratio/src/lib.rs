//! `requested-to-capacity-ratio`: kube-scheduler's NodeResourcesFit score with the RequestedToCapacityRatio
//! strategy. Each resource's utilization after placing the pod (percent of allocatable) maps through a
//! piecewise-linear `shape` of `{utilization, score}` points (scores 0-10, scaled to 0-100); the node's score is
//! the weighted mean over resources that score above 0, rounded. A rising shape bin-packs, a falling one spreads,
//! and any other curve (pack up to 70%, then avoid) is a setting.

use serde::{Deserialize, Serialize};
use wasp_sdk::allocation::{percent_of, requested_and_allocatable, PodRequests, WeightedResources};
use wasp_sdk::policy::{scores_for, Normalization};
use wasp_sdk::resources::{validate_resource_weights, ResourceWeight};
use wasp_sdk::types::{NodeId, Pod};
use wasp_sdk::{Cluster, NodeFacts, NodeInfo, Policy, Score};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub utilization: i64,
    pub score: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub shape: Vec<Point>,
    pub resources: Vec<ResourceWeight>,
}

impl Default for Settings {
    /// Bin-packing: empty scores 0, full scores 10 (kube-scheduler has no default shape; this is the one its
    /// documentation shows).
    fn default() -> Self {
        Settings {
            shape: vec![Point { utilization: 0, score: 0 }, Point { utilization: 100, score: 10 }],
            resources: wasp_sdk::resources::ResourceWeightSettings::default().resources,
        }
    }
}

pub struct RequestedToCapacityRatio {
    /// The shape with scores scaled to 0-100.
    shape: Vec<(i64, i64)>,
    resources: WeightedResources,
}

impl Policy for RequestedToCapacityRatio {
    type Settings = Settings;
    const NAME: &'static str = "requested-to-capacity-ratio";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "shape: [{utilization 0-100, score 0-10}], utilization increasing (default 0->0, 100->10)\n\
        resources: [{name, weight 1-100}], default cpu and memory with weight 1";

    fn new(settings: Settings) -> Result<Self, String> {
        validate_resource_weights("resources", &settings.resources)?;
        if settings.shape.is_empty() {
            return Err("shape: at least one point must be specified".into());
        }
        for (index, point) in settings.shape.iter().enumerate() {
            if !(0..=100).contains(&point.utilization) {
                return Err(format!("shape[{index}].utilization: {} is outside 0..100", point.utilization));
            }
            if !(0..=10).contains(&point.score) {
                return Err(format!("shape[{index}].score: {} is outside 0..10", point.score));
            }
            if index > 0 && point.utilization <= settings.shape[index - 1].utilization {
                return Err(format!("shape[{index}].utilization: utilization values must be sorted in increasing order"));
            }
        }
        let shape = settings.shape.iter().map(|point| (point.utilization, point.score * 10)).collect();
        Ok(RequestedToCapacityRatio { shape, resources: settings.resources.into() })
    }
}

impl RequestedToCapacityRatio {
    /// The shape at `utilization`: linear between points, flat before the first and after the last (integer
    /// arithmetic truncating toward zero, as kube-scheduler's).
    fn shape_at(&self, utilization: i64) -> i64 {
        for (index, &(at, score)) in self.shape.iter().enumerate() {
            if utilization <= at {
                if index == 0 {
                    return score;
                }
                let (previous_at, previous_score) = self.shape[index - 1];
                return previous_score + (score - previous_score) * (utilization - previous_at) / (at - previous_at);
            }
        }
        self.shape.last().map_or(0, |&(_, score)| score)
    }
}

impl RequestedToCapacityRatio {
    fn score_with(&self, wanted: &PodRequests, node: &NodeInfo) -> i64 {
        let (mut total, mut weights) = (0, 0);
        for (resource, weight) in self.resources.iter() {
            let Some((requested, allocatable)) = requested_and_allocatable(wanted, node, resource) else { continue };
            let utilization = if requested > allocatable { 100 } else { percent_of(requested, allocatable) };
            let score = self.shape_at(utilization);
            if score > 0 {
                total += score * weight;
                weights += weight;
            }
        }
        if weights == 0 {
            0
        } else {
            (total as f64 / weights as f64).round() as i64
        }
    }
}

impl Score for RequestedToCapacityRatio {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        self.score_with(&PodRequests::of(pod), node)
    }

    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        let wanted = PodRequests::of(pod);
        scores_for(cluster, candidates, Normalization::None, |node| self.score_with(&wanted, node))
    }
}

wasp_sdk::export_policy!(RequestedToCapacityRatio);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn the_shape_interpolates_and_packs_by_default() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("10000").build());
        let pod = PodBuilder::new("p").cpu("3").memory("5000").build();
        let policy = build::<RequestedToCapacityRatio>("").unwrap();
        // cpu 75% -> 75, memory 50% -> 50: (75 + 50) / 2 = 62.5, rounded half away from zero.
        assert_eq!(policy.score(&pod, cluster.node(node).unwrap(), &cluster), 63);
        let spreading = build::<RequestedToCapacityRatio>(r#"{"shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]}"#).unwrap();
        assert_eq!(spreading.score(&pod, cluster.node(node).unwrap(), &cluster), 38);
    }

    #[test]
    fn flat_outside_the_points_and_zero_scores_do_not_weigh() {
        let policy = build::<RequestedToCapacityRatio>(r#"{"shape": [{"utilization": 20, "score": 2}, {"utilization": 70, "score": 10}]}"#).unwrap();
        assert_eq!(policy.shape_at(0), 20);
        assert_eq!(policy.shape_at(45), 60);
        assert_eq!(policy.shape_at(90), 100);
        let zero_at_start = build::<RequestedToCapacityRatio>(r#"{"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}], "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 3}]}"#).unwrap();
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").cpu("4").memory("1Ti").build());
        // Memory is ~0% used: its score 0 leaves the mean (cpu's 50 alone) instead of pulling it down.
        let pod = PodBuilder::new("p").cpu("2").memory("1Mi").build();
        assert_eq!(zero_at_start.score(&pod, cluster.node(node).unwrap(), &cluster), 50);
    }

    #[test]
    fn settings_are_checked_like_kube_scheduler() {
        let error = |json: &str| build::<RequestedToCapacityRatio>(json).err().unwrap();
        assert!(error(r#"{"shape": []}"#).contains("at least one point"));
        assert!(error(r#"{"shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}"#).contains("increasing order"));
        assert!(error(r#"{"shape": [{"utilization": 10, "score": 11}]}"#).contains("shape[0].score: 11 is outside 0..10"));
    }
}
