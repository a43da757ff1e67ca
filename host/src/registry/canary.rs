//! The canary: before a new policy version may serve, it answers every call its kinds define over a small sample
//! cluster. A version that traps, times out, runs out of memory or answers malformed results here never sees a
//! real decision. An error the policy itself returns is its opinion of the sample (an autoscaling policy may
//! refuse a workload without the metric it wants), not a defect: it is logged, not refused.
//!
//! The sample is the live cluster when the host has one (a what-if fork of it, with one of its pending pods, or
//! a copy of a running one): a policy cannot tell its canary from real traffic by names. Before the informers
//! have listed anything (at start, in `wasp policy` commands) a small built-in sample stands in.
//!
//! The canary runs on the policy's own pool, so `configure` runs once per new version; the pooled instance
//! follows the sample's log afterwards and is resynced from the live cluster on its first real call (epochs).

use crate::cluster::{convert, ClusterState, SharedCluster};
use crate::contract::types::{Metric, MetricSample, MetricSource, MetricTarget, Pod, PodMetric, PolicyKind, Recommendation, ScaleRequest};
use crate::contract::{EvictContext, PendingPod};
use crate::policy::LoadedPolicy;
use crate::runtime::CallError;
use k8s_openapi::api::core::v1 as core;
use serde_json::json;

/// A fork of the live cluster and a pod to place: one that waits, else a copy of one that runs.
fn live_sample(live: &SharedCluster) -> Option<(ClusterState, Pod)> {
    let state = live.read();
    if state.node_ids().is_empty() {
        return None;
    }
    let pod = live.pending_pods().into_iter().next().or_else(|| {
        let uid = state.pod_uids().next()?;
        let mut copy = state.pod(uid)?.0.clone();
        copy.phase = crate::contract::types::PodPhase::Pending;
        copy.uid = format!("{}-next", copy.uid);
        Some(copy)
    })?;
    Some((state.fork(), pod))
}

/// Two Ready nodes, a bound pod, and a pending pod to place.
fn sample() -> (ClusterState, Pod) {
    let node = |name: &str, zone: &str| -> core::Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("static sample node")
    };
    let pod = |name: &str| -> core::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("sample-{name}"), "labels": {"app.kubernetes.io/name": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f8", "uid": "sample-rs", "controller": true}]},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("static sample pod")
    };
    let mut cluster = ClusterState::new();
    for (name, zone) in [("node-a", "zone-a"), ("node-b", "zone-b")] {
        cluster.upsert_node(convert::node(&node(name, zone)).expect("sample node converts"));
    }
    cluster.upsert_pod(convert::pod(&pod("web-1")).expect("sample pod converts"), "node-a");
    let mut pending = convert::pod(&pod("web-2")).expect("sample pod converts");
    pending.phase = crate::contract::types::PodPhase::Pending;
    (cluster, pending)
}

fn scale_sample() -> ScaleRequest {
    let now = jiff::Timestamp::now().as_second();
    let metric = Metric {
        name: "cpu".into(),
        source: MetricSource::Resource,
        target: MetricTarget::Utilization(50.0),
        pods: vec![PodMetric { pod: "web-1".into(), ready: true, started: now - 600, value: Some(60.0), request: Some(100.0) }],
        value: None,
        error: None,
        history: vec![MetricSample { at: now - 15, value: 55.0, pods: 1 }, MetricSample { at: now, value: 60.0, pods: 1 }],
    };
    let recommendations = vec![Recommendation { at: now - 15, replicas: 1 }];
    ScaleRequest {
        workload: "default/Deployment/web".into(),
        now,
        current_replicas: 1,
        min_replicas: 1,
        max_replicas: 3,
        metrics: vec![metric],
        recommendations,
        containers: Vec::new(),
        state: None,
    }
}

/// Calls each kind the policy declares once. Fails with the kind and the error on a trap, timeout, out of
/// memory or malformed answer.
pub fn check(policy: &LoadedPolicy, live: Option<&SharedCluster>) -> Result<(), (PolicyKind, CallError)> {
    let (cluster, pod) = live.and_then(live_sample).unwrap_or_else(sample);
    let candidates = cluster.node_ids();
    for kind in &policy.descriptor.kinds {
        let result = match kind {
            PolicyKind::Filter => policy.filter(&cluster, &pod, &candidates).map(drop),
            PolicyKind::Score => policy.score(&cluster, &pod, &candidates).map(drop),
            PolicyKind::Evict => {
                let pending = vec![PendingPod { pod: pod.clone(), reason: String::new() }];
                policy.propose(&cluster, &EvictContext { now: jiff::Timestamp::now().as_second(), pending, failed: cluster.failed_pods() }).map(drop)
            }
            PolicyKind::Scale => policy.recommend(&cluster, &scale_sample()).map(drop),
        };
        match result {
            Ok(()) => {}
            Err(CallError::Guest(message)) => {
                tracing::debug!(policy = policy.name(), %kind, %message, "the policy declined the canary's sample");
            }
            Err(error) => return Err((*kind, error)),
        }
    }
    Ok(())
}
