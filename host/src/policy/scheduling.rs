//! The scheduler's view of a policy: verdicts and scores that never fail, with the failure mode applied.

use super::LoadedPolicy;
use crate::cluster::ClusterState;
use crate::contract::types::{FilterResult, NodeId, Pod, ViewScope};

/// What a scheduling decision needs of a policy: verdicts and scores that never fail (the policy's failure mode
/// applies inside). Implemented by sandboxed components ([`LoadedPolicy`]); the scheduling benchmark implements
/// it with the same policy crates compiled natively, for its side-by-side run.
pub trait SchedulingPolicy: Send + Sync {
    fn name(&self) -> &str;
    /// Whether it sees bound pods (then a pod bound elsewhere may change its verdicts).
    fn view(&self) -> ViewScope;
    fn filter_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> FilterResult;
    fn score_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> Vec<u32>;
    /// Readies `count` copies of the policy's view at `cluster`'s head before a fork of it is used (see
    /// [`LoadedPolicy::warm`]); a policy without copies to ready does nothing.
    fn warm(&self, _cluster: &ClusterState, _count: usize) {}
    /// Keeps at most `count` copies of the policy's view (see [`LoadedPolicy::keep_at_most`]).
    fn keep_at_most(&self, _count: usize) {}
}

impl SchedulingPolicy for LoadedPolicy {
    fn name(&self) -> &str {
        LoadedPolicy::name(self)
    }

    fn view(&self) -> ViewScope {
        self.descriptor.view
    }

    fn filter_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> FilterResult {
        LoadedPolicy::filter_or_failure_mode(self, cluster, pod, candidates)
    }

    fn score_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> Vec<u32> {
        LoadedPolicy::score_or_failure_mode(self, cluster, pod, candidates)
    }

    fn warm(&self, cluster: &ClusterState, count: usize) {
        LoadedPolicy::warm(self, cluster, count)
    }

    fn keep_at_most(&self, count: usize) {
        LoadedPolicy::keep_at_most(self, count)
    }
}
