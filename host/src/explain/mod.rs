//! Why the host decided what it did, kept for people to ask: the last decision record per pod it tried to place,
//! per pod the rescheduler evicted or left, and per Autoscaler it synced, bounded in memory ([`store`]), served on
//! the secure port as `/explain/{pods,evictions,autoscalers}/NAMESPACE/NAME`, and printed by `wasp explain`, `wasp
//! policy eval` and `wasp simulate` in one format ([`render`]). Nothing is written into the objects.
//!
//! - [`store`]: the bounded store.
//! - [`render`]: the records as text for people (JSON is the records themselves).
//! - [`client`]: how `wasp explain` finds the leader (its Lease) and asks it.

pub mod client;
pub mod render;
pub mod store;

use serde::{Deserialize, Serialize};
use std::time::Duration;
use store::{Bounds, Records, Weighed};

/// The placements kept: a pod's last attempt each, for the pods of a large cluster's pending backlog.
const PLACEMENT_BOUNDS: Bounds = Bounds { count: 20_000, bytes: 32 << 20, age: None };
/// Evictions outlive their pods (the question comes after the pod is gone), for an hour.
const EVICTION_BOUNDS: Bounds = Bounds { count: 5_000, bytes: 8 << 20, age: Some(Duration::from_secs(3600)) };
const SCALE_BOUNDS: Bounds = Bounds { count: 5_000, bytes: 8 << 20, age: None };

/// The nodes a placement record keeps scores for: the best few, and the chosen one.
pub const TOP_NODES: usize = 3;
/// Reasons kept per filter, the most frequent first.
pub const MAX_REASONS: usize = 8;

/// Every loop's records.
pub struct DecisionRecords {
    pub placements: Records<PlacementRecord>,
    pub evictions: Records<EvictionRecord>,
    pub scales: Records<ScaleRecord>,
}

impl Default for DecisionRecords {
    fn default() -> Self {
        DecisionRecords { placements: Records::new(PLACEMENT_BOUNDS), evictions: Records::new(EVICTION_BOUNDS), scales: Records::new(SCALE_BOUNDS) }
    }
}

/// The kinds of record `wasp explain` asks for, as they appear in its command line and the endpoint's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Pod,
    Eviction,
    Autoscaler,
}

impl Kind {
    /// The endpoint's path segment.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::Eviction => "evictions",
            Kind::Autoscaler => "autoscalers",
        }
    }

    pub fn from_path(segment: &str) -> Option<Kind> {
        [Kind::Pod, Kind::Eviction, Kind::Autoscaler].into_iter().find(|kind| kind.path() == segment)
    }

    /// Why a host may have no record of this kind for an object.
    pub fn why_none(self) -> &'static str {
        match self {
            Kind::Pod => {
                "this host has not tried to place the pod since it started leading (another scheduler's pod, one bound before, or a name that does not exist)"
            }
            Kind::Eviction => "no strategy of this host proposed the pod in the last hour",
            Kind::Autoscaler => "this host has not synced the Autoscaler since it started leading",
        }
    }
}

impl DecisionRecords {
    /// The record of `kind` for `namespace/name`, as JSON.
    pub fn lookup(&self, kind: Kind, key: &str) -> Option<serde_json::Value> {
        match kind {
            Kind::Pod => self.placements.get(key).and_then(|record| serde_json::to_value(record).ok()),
            Kind::Eviction => self.evictions.get(key).and_then(|record| serde_json::to_value(record).ok()),
            Kind::Autoscaler => self.scales.get(key).and_then(|record| serde_json::to_value(record).ok()),
        }
    }
}

/// How many nodes one reason rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasonCount {
    pub reason: String,
    pub nodes: usize,
}

/// One filter policy's part of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterStep {
    pub policy: String,
    /// Nodes it was asked about (those the filters before it let through).
    pub evaluated: usize,
    pub rejected: usize,
    /// The most frequent reasons, most frequent first.
    pub reasons: Vec<ReasonCount>,
}

impl FilterStep {
    /// A step from its reason counts, keeping the most frequent.
    pub fn new(policy: &str, evaluated: usize, rejected: usize, reasons: impl IntoIterator<Item = (String, usize)>) -> FilterStep {
        let mut reasons: Vec<ReasonCount> = reasons.into_iter().map(|(reason, nodes)| ReasonCount { reason, nodes }).collect();
        reasons.sort_by(|a, b| b.nodes.cmp(&a.nodes).then_with(|| a.reason.cmp(&b.reason)));
        reasons.truncate(MAX_REASONS);
        FilterStep { policy: policy.to_string(), evaluated, rejected, reasons }
    }
}

/// A score policy of the profile and its weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScorePolicy {
    pub policy: String,
    pub weight: u32,
}

/// One node's scores: each score policy's normalized score (0-100), in the order of [`PlacementRecord::score_policies`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoredNode {
    pub node: String,
    pub scores: Vec<u32>,
    /// The weighted sum.
    pub total: u64,
    pub chosen: bool,
}

/// One attempt to place a pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    pub profile: String,
    /// When the decision was made (RFC 3339).
    pub at: String,
    pub duration_micros: u64,
    /// Nodes in the cluster, nodes the filters ran on (the search stops at `percentageOfNodesToScore`), and
    /// nodes that passed every filter.
    pub nodes: usize,
    pub evaluated: usize,
    pub feasible: usize,
    /// The node chosen, if any, and how.
    pub node: Option<String>,
    pub chosen_by: Option<String>,
    /// Why it was not placed: kube-scheduler's `0/N nodes are available: ...`.
    pub message: Option<String>,
    pub filters: Vec<FilterStep>,
    pub score_policies: Vec<ScorePolicy>,
    /// The best few nodes, best first, and the chosen one.
    pub top_nodes: Vec<ScoredNode>,
}

/// One envelope check on a candidate for eviction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckStep {
    pub check: String,
    /// `passed`, `refused` or `not reached`.
    pub verdict: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A pod a strategy proposed to evict, and what the host did with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionRecord {
    pub pod: String,
    pub uid: String,
    pub node: String,
    pub at: String,
    /// The strategy that proposed it, and why.
    pub policy: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// `evict`, `preempt`, `clear` (a failed pod) or `skip`.
    pub decision: String,
    /// Where the fit check placed the pod's replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The pending pod the eviction makes room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_for: Option<String>,
    /// The envelope's checks in order; a skip names the check that decided it.
    pub checks: Vec<CheckStep>,
    /// What the Eviction API said (`evicted`, `refused-by-pdb`, ...), or `dry-run`; none for a skip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// One metric as the autoscaler read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricLine {
    pub metric: String,
    pub source: String,
    /// The reading against its target, as the status's `targets` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The replicas the policy said this metric asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<u32>,
}

/// One sync of an Autoscaler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleRecord {
    pub autoscaler: String,
    pub uid: String,
    pub at: String,
    /// `Kind/name` of the scaled workload.
    pub target: String,
    pub policy: String,
    pub current: i32,
    pub min: i32,
    pub max: i32,
    pub metrics: Vec<MetricLine>,
    /// The policy's answer, before the behavior rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended: Option<i32>,
    pub reason: String,
    /// The behavior rules that held the answer back (`ScaleDownStabilized`, `ScaleUpLimit: ...`).
    pub limited_by: Vec<String>,
    pub desired: i32,
    /// `scaled`, `unchanged`, `dry-run`, or why nothing was decided (`refused: InvalidSpec: ...`).
    pub outcome: String,
}

/// Strings dominate every record's size; the rest is a fixed overhead.
fn text_weight<'a>(texts: impl IntoIterator<Item = &'a String>) -> usize {
    texts.into_iter().map(|text| text.len() + 24).sum::<usize>() + 128
}

impl Weighed for PlacementRecord {
    fn weight(&self) -> usize {
        let reasons = self.filters.iter().flat_map(|step| std::iter::once(&step.policy).chain(step.reasons.iter().map(|reason| &reason.reason)));
        let scores = self.top_nodes.iter().map(|node| &node.node).chain(self.score_policies.iter().map(|policy| &policy.policy));
        let fixed = [&self.pod, &self.uid, &self.profile, &self.at].into_iter().chain(self.node.iter()).chain(self.chosen_by.iter()).chain(self.message.iter());
        text_weight(fixed.chain(reasons).chain(scores)) + self.top_nodes.len() * self.score_policies.len() * 4
    }
}

impl Weighed for EvictionRecord {
    fn weight(&self) -> usize {
        let checks = self.checks.iter().flat_map(|step| std::iter::once(&step.check).chain(step.detail.iter()));
        let fixed = [&self.pod, &self.uid, &self.node, &self.at, &self.policy, &self.reason, &self.decision].into_iter();
        text_weight(fixed.chain(self.workload.iter()).chain(self.target.iter()).chain(self.room_for.iter()).chain(self.outcome.iter()).chain(checks))
    }
}

impl Weighed for ScaleRecord {
    fn weight(&self) -> usize {
        let metrics = self.metrics.iter().flat_map(|line| [&line.metric, &line.source].into_iter().chain(line.reading.iter()).chain(line.error.iter()));
        let fixed = [&self.autoscaler, &self.uid, &self.at, &self.target, &self.policy, &self.reason, &self.outcome].into_iter();
        text_weight(fixed.chain(metrics).chain(self.limited_by.iter()))
    }
}

/// Now, as records say it.
pub fn now() -> String {
    let now = crate::clock::now();
    now.round(jiff::Unit::Millisecond).unwrap_or(now).to_string()
}
