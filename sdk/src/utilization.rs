//! Node utilization as the descheduler measures it: what pods request (CPU, memory) and how many pods run, in
//! percent of the node's allocatable, against thresholds. Shared by the utilization strategies.

use crate::cluster::NodeInfo;
use serde::{Deserialize, Serialize};

/// Percentages of allocatable per resource: `cpu`, `memory`, `pods`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    pub cpu: f64,
    pub memory: f64,
    pub pods: f64,
}

impl Thresholds {
    /// The same percentage for every resource.
    pub fn uniform(percent: f64) -> Thresholds {
        Thresholds { cpu: percent, memory: percent, pods: percent }
    }

    /// Each value in 0..=100; the error names `field` and the resource.
    pub fn validate(&self, field: &str) -> Result<(), String> {
        for (resource, value) in [("cpu", self.cpu), ("memory", self.memory), ("pods", self.pods)] {
            if !(0.0..=100.0).contains(&value) {
                return Err(format!("{field}.{resource}: {value} is outside 0..100"));
            }
        }
        Ok(())
    }
}

/// A node's utilization in percent: requested CPU and memory, pod count.
#[derive(Debug, Clone, Copy)]
pub struct Utilization {
    pub cpu: f64,
    pub memory: f64,
    pub pods: f64,
}

fn percent(used: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        used as f64 * 100.0 / total as f64
    }
}

impl Utilization {
    /// The node as it is.
    pub fn of(node: &NodeInfo) -> Utilization {
        Self::with(node.usage.requested.cpu_millis, node.usage.requested.memory_bytes, node.usage.pod_count as u64, node)
    }

    /// The node with these requested totals (after planned moves, say).
    pub fn with(cpu_millis: u64, memory_bytes: u64, pods: u64, node: &NodeInfo) -> Utilization {
        let allocatable = &node.node.allocatable;
        Utilization {
            cpu: percent(cpu_millis, allocatable.cpu_millis),
            memory: percent(memory_bytes, allocatable.memory_bytes),
            pods: percent(pods, node.node.allocatable_pods as u64),
        }
    }

    pub fn all_below(&self, limits: &Thresholds) -> bool {
        self.cpu < limits.cpu && self.memory < limits.memory && self.pods < limits.pods
    }

    pub fn any_above(&self, limits: &Thresholds) -> bool {
        self.cpu > limits.cpu || self.memory > limits.memory || self.pods > limits.pods
    }
}
