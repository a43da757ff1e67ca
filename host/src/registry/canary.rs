//! The canary: before a new policy version may serve, one fresh instance answers every call its kinds define
//! over a small sample cluster. A version that traps, times out or answers malformed results here never sees
//! a real decision.

use crate::cluster::{convert, ClusterState};
use crate::policy::LoadedPolicy;
use crate::runtime::bindings::types::{PolicyKind, ScaleRequest};
use k8s_openapi::api::core::v1 as core;
use serde_json::json;

/// One Ready node with a bound pod, and a pending pod to place.
fn sample() -> (ClusterState, crate::runtime::bindings::types::Pod) {
    let node: core::Node = serde_json::from_value(json!({
        "metadata": {"name": "canary-node", "labels": {"kubernetes.io/hostname": "canary-node", "topology.kubernetes.io/zone": "canary"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("static sample node");
    let pod = |name: &str| -> core::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "canary", "uid": format!("canary-{name}"), "labels": {"name": name}},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
        }))
        .expect("static sample pod")
    };
    let mut cluster = ClusterState::new();
    cluster.upsert_node(convert::node(&node).expect("sample node converts"));
    cluster.upsert_pod(convert::pod(&pod("running")).expect("sample pod converts"), "canary-node");
    (cluster, convert::pod(&pod("pending")).expect("sample pod converts"))
}

/// Runs each call of the policy's kinds once on a fresh instance, which is then dropped (it never joins the
/// pool, whose instances follow the real cluster).
pub fn smoke_test(policy: &LoadedPolicy) -> Result<(), String> {
    let (cluster, pod) = sample();
    let mut instance = policy.new_instance().map_err(|error| format!("canary instance: {error}"))?;
    cluster.sync(&mut instance, policy.descriptor.view).map_err(|error| format!("canary sync: {error}"))?;
    let candidates = cluster.node_ids();
    for kind in &policy.descriptor.kinds {
        let result = match kind {
            PolicyKind::Filter => instance.filter(&pod, &candidates).map(drop),
            PolicyKind::Score => instance.score(&pod, &candidates).map(drop),
            PolicyKind::Evict => instance.propose().map(drop),
            PolicyKind::Scale => {
                let request = ScaleRequest {
                    workload: "canary/app".into(),
                    current_replicas: 1,
                    min_replicas: 1,
                    max_replicas: 3,
                    metrics: Vec::new(),
                };
                instance.recommend(&request).map(drop)
            }
        };
        result.map_err(|error| format!("canary {} call failed: {error}", crate::cli::kind_name(*kind)))?;
    }
    Ok(())
}
