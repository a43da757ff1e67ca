//! The traits a policy implements. [`Policy`] says what it is and how it is configured; [`Filter`], [`Score`],
//! [`Evict`] and [`Scale`] are the four kinds of decision, and a policy may implement several:
//! `export_policy!` exports each one the type implements.

use crate::cluster::{Cluster, NodeFacts, NodeInfo, PodFacts};
use crate::types::{Eviction, FilterResult, NodeId, Placement, Pod, PodId, ScaleDecision, ScaleRequest, ViewScope};
use serde::{de::DeserializeOwned, Serialize};
use std::borrow::Cow;

/// The settings of a policy that has none: `{}` or nothing is accepted, any field is an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

pub trait Policy: Sized + 'static {
    /// Settings as JSON; missing fields take their defaults (`Default` is what `describe` shows; `new` may still
    /// refuse it, for a setting that must be given).
    type Settings: Serialize + DeserializeOwned + Default;

    /// The name profiles refer to, e.g. `resources-fit`.
    const NAME: &'static str;
    /// What the host keeps in this policy's cluster view. Ask for pods only if you need them: with 50k pods they
    /// dominate the memory of every instance.
    const VIEW: ViewScope = ViewScope::Nodes;
    /// With pods in the view: what of each pod the instances keep (see [`PodFacts`]). Everything unless said;
    /// declare what the policy reads and build test clusters with [`Cluster::for_policy`], which keeps the same.
    const POD_FACTS: PodFacts = PodFacts::ALL;
    /// What of each node the instances keep beyond name, schedulability, allocatable and usage (see
    /// [`NodeFacts`]): labels, taints and conditions unless said, images only when asked for.
    /// [`Pod::may_run_on`] reads labels and taints; [`Node::is_ready`](crate::types::Node) reads conditions.
    const NODE_FACTS: NodeFacts = NodeFacts::DEFAULT;
    /// One line per setting: what it means and its unit.
    const SETTINGS_DOC: &'static str = "";

    /// Builds the policy from validated settings; return a readable error naming the setting that is wrong.
    fn new(settings: Self::Settings) -> Result<Self, String>;

    /// With pods in the view: whether the instances keep this bound pod at all (and then only its
    /// [`POD_FACTS`](Policy::POD_FACTS)). Every pod unless said; a policy that reads only some pods keeps only
    /// those (`node-ports`: the few with host ports, out of 50k).
    fn keeps_pod(_pod: &Pod) -> bool {
        true
    }

    /// The label keys these settings name (a label selector in them, say): a view whose
    /// [`POD_FACTS`](Policy::POD_FACTS) keep [`LabelScope::Selected`](crate::LabelScope) labels keeps these keys
    /// besides those the pods' own selectors name. None unless said.
    fn label_keys(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The reason given for a candidate id the policy's cluster view does not hold.
pub const UNKNOWN_NODE: &str = "node(s) were unknown to the policy";

/// A filter's answer for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Reasons in kube-scheduler's wording (`Insufficient cpu`, `node(s) had untolerated taint {k: v}`); the
    /// scheduler counts them across nodes for the `0/N nodes are available: ...` message.
    Reject(Vec<Cow<'static, str>>),
}

impl Verdict {
    pub fn reject(reason: impl Into<Cow<'static, str>>) -> Self {
        Verdict::Reject(vec![reason.into()])
    }

    pub fn is_pass(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
}

pub trait Filter {
    /// Decides whether `pod` may run on `node`.
    fn filter(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> Verdict;

    /// Decides for every candidate. Override it to compute something once per pod (see `pod-topology-spread`).
    fn filter_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> FilterResult {
        verdicts_for(cluster, candidates, |node| self.filter(pod, node, cluster))
    }
}

/// Runs `decide` on every candidate node and collects the verdicts; ids the view does not hold are rejected.
#[inline]
pub fn verdicts_for(cluster: &Cluster, candidates: &[NodeId], mut decide: impl FnMut(&NodeInfo) -> Verdict) -> FilterResult {
    let mut result = FilterResultBuilder::with_capacity(candidates.len());
    for &id in candidates {
        result.push(match cluster.node(id) {
            Some(node) => decide(node),
            None => Verdict::reject(UNKNOWN_NODE),
        });
    }
    result.finish()
}

/// Collects verdicts into the contract's compact form: distinct reason sets are stored once.
pub struct FilterResultBuilder {
    verdicts: Vec<u32>,
    rejections: Vec<Vec<Cow<'static, str>>>,
}

impl FilterResultBuilder {
    pub fn with_capacity(candidates: usize) -> Self {
        FilterResultBuilder { verdicts: Vec::with_capacity(candidates), rejections: Vec::new() }
    }

    /// Most nodes pass: that path is a single store, inlined into the policy's loop.
    #[inline]
    pub fn push(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Pass => self.verdicts.push(0),
            Verdict::Reject(reasons) => self.push_rejection(reasons),
        }
    }

    #[cold]
    fn push_rejection(&mut self, reasons: Vec<Cow<'static, str>>) {
        // Few distinct reason sets per pod: a linear scan beats hashing. Reasons are mostly a policy's constants,
        // so the same reason is mostly the same pointer: compared before the text (in the sandbox, `memcmp` goes
        // byte by byte, and this ran once per rejected node).
        let same = |known: &Vec<Cow<'static, str>>| {
            known.len() == reasons.len() && known.iter().zip(&reasons).all(|(known, reason)| std::ptr::eq(known.as_ref(), reason.as_ref()) || known == reason)
        };
        let index = match self.rejections.iter().position(same) {
            Some(index) => index,
            None => {
                self.rejections.push(reasons);
                self.rejections.len() - 1
            }
        };
        self.verdicts.push(index as u32 + 1);
    }

    pub fn finish(self) -> FilterResult {
        FilterResult {
            verdicts: self.verdicts,
            rejections: self.rejections.into_iter().map(|reasons| reasons.into_iter().map(Cow::into_owned).collect()).collect(),
        }
    }
}

/// How raw scores become 0..=100, as kube-scheduler's NormalizeScore extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalization {
    /// Raw scores are already 0..=100; values outside are clamped.
    None,
    /// Scale so the highest raw score becomes 100 (`DefaultNormalizeScore`, not reversed).
    MaxTo100,
    /// Scale so the highest raw score becomes 0 and a raw 0 becomes 100 (`DefaultNormalizeScore`, reversed).
    ReverseMaxTo100,
}

pub trait Score {
    /// A raw score for `pod` on `node`; see [`Score::normalization`].
    fn score(&self, pod: &Pod, node: &NodeInfo, cluster: &Cluster) -> i64;

    fn normalization(&self) -> Normalization {
        Normalization::None
    }

    /// Scores every candidate and normalizes. Override it to compute something once per pod (with
    /// [`scores_for`]).
    fn score_all(&self, pod: &Pod, cluster: &Cluster, candidates: &[NodeId]) -> Vec<u32> {
        scores_for(cluster, candidates, self.normalization(), |node| self.score(pod, node, cluster))
    }
}

/// Runs `score` on every candidate node and normalizes; ids the view does not hold score 0.
#[inline]
pub fn scores_for(cluster: &Cluster, candidates: &[NodeId], normalization: Normalization, mut score: impl FnMut(&NodeInfo) -> i64) -> Vec<u32> {
    let raw: Vec<i64> = candidates.iter().map(|&id| cluster.node(id).map_or(0, &mut score)).collect();
    normalize(&raw, normalization)
}

/// kube-scheduler's `DefaultNormalizeScore` with a maximum of 100.
pub fn normalize(raw: &[i64], normalization: Normalization) -> Vec<u32> {
    const MAX: i64 = 100;
    let clamp = |value: i64| value.clamp(0, MAX) as u32;
    let highest = raw.iter().copied().max().unwrap_or(0);
    match normalization {
        Normalization::None => raw.iter().map(|&value| clamp(value)).collect(),
        Normalization::MaxTo100 | Normalization::ReverseMaxTo100 => {
            let reverse = normalization == Normalization::ReverseMaxTo100;
            raw.iter()
                .map(|&value| {
                    if highest <= 0 {
                        return if reverse { MAX as u32 } else { 0 };
                    }
                    let scaled = MAX * value.max(0) / highest;
                    clamp(if reverse { MAX - scaled } else { scaled })
                })
                .collect()
        }
    }
}

pub trait Evict {
    /// Pods to move and why. The host applies the safety rules (DaemonSet, mirror, critical and local-storage
    /// pods are never evicted by default) and the disruption limits; propose what your strategy wants.
    /// `context` has the time now and the pods waiting for room.
    fn propose(&self, cluster: &Cluster, context: &EvictContext) -> Vec<Eviction>;
}

impl Eviction {
    /// Move `pod`, wherever the scheduler places its replacement.
    pub fn new(pod: PodId, reason: impl Into<String>) -> Eviction {
        Eviction { pod, reason: reason.into(), room_for: None, placement: None }
    }

    /// Evicted to make room for the pending pod with `uid` (preemption: the host checks the victims let it fit).
    pub fn room_for(self, uid: &str) -> Eviction {
        Eviction { room_for: Some(uid.to_string()), ..self }
    }

    /// Where the replacement should go.
    pub fn placement(self, placement: Placement) -> Eviction {
        Eviction { placement: Some(placement), ..self }
    }
}

/// What an evict policy is told besides its cluster view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictContext {
    /// Seconds since the Unix epoch (a guest's own clocks are stopped, for determinism).
    pub now: i64,
    /// Pods of wasp profiles waiting for room, highest priority first.
    pub pending: Vec<PendingPod>,
    /// Pods in phase Failed still on a node: not in the view (they hold no resources), proposable by id.
    pub failed: Vec<FailedPod>,
}

/// A pod of a wasp profile waiting for room.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingPod {
    pub pod: Pod,
    /// Why the scheduler could not place it (kube-scheduler's `0/5 nodes are available: ...`); empty when it
    /// has not been tried yet.
    pub reason: String,
}

/// A failed pod still on its node.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedPod {
    pub id: PodId,
    pub node: String,
    pub pod: Pod,
}

impl EvictContext {
    /// A context at `now` (seconds since the Unix epoch) with no pending pods: for tests.
    pub fn at(now: i64) -> EvictContext {
        EvictContext { now, ..EvictContext::default() }
    }
}

pub trait Scale {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_matches_kube_scheduler() {
        assert_eq!(normalize(&[0, 5, 10], Normalization::MaxTo100), vec![0, 50, 100]);
        assert_eq!(normalize(&[0, 5, 10], Normalization::ReverseMaxTo100), vec![100, 50, 0]);
        assert_eq!(normalize(&[0, 0], Normalization::ReverseMaxTo100), vec![100, 100]);
        assert_eq!(normalize(&[0, 0], Normalization::MaxTo100), vec![0, 0]);
        assert_eq!(normalize(&[-5, 150], Normalization::None), vec![0, 100]);
    }

    #[test]
    fn builder_stores_each_reason_set_once() {
        let mut builder = FilterResultBuilder::with_capacity(4);
        builder.push(Verdict::Pass);
        builder.push(Verdict::reject("Insufficient cpu"));
        builder.push(Verdict::Reject(vec!["Insufficient cpu".into(), "Insufficient memory".into()]));
        builder.push(Verdict::reject("Insufficient cpu"));
        let result = builder.finish();
        assert_eq!(result.verdicts, vec![0, 1, 2, 1]);
        assert_eq!(result.rejections.len(), 2);
        assert_eq!(result.rejections[1], vec!["Insufficient cpu", "Insufficient memory"]);
    }
}
