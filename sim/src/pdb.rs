//! PodDisruptionBudget arithmetic: how many matching pods are healthy, how many must stay, how many may go.

use crate::selectors_k8s::label_selector_matches;
use serde_json::{json, Value};

pub struct Budget {
    pub expected: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub disruptions_allowed: i64,
}

/// Called for every write of an owned pod (the store's owner index), so fields are read directly rather than with
/// `Value::pointer`, which allocates two strings per path segment.
pub fn is_ready(pod: &Value) -> bool {
    pod.get("status")
        .and_then(|status| status.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|conditions| conditions.iter().any(|condition| condition["type"] == "Ready" && condition["status"] == "True"))
        && pod.get("metadata").and_then(|metadata| metadata.get("deletionTimestamp")).is_none()
}

/// An int-or-percent value against a total; percentages round up, as the disruption controller does.
fn int_or_percent(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

/// The pod's controller (an owner reference with `controller: true`) and the replicas it wants, as the
/// disruption controller's `getExpectedScale` reads them from the store: ReplicaSets, StatefulSets,
/// ReplicationControllers.
pub fn controller_scale(store: &crate::store::Store, pod: &Value) -> Option<(String, i64)> {
    let owner = pod.pointer("/metadata/ownerReferences")?.as_array()?.iter().find(|owner| owner["controller"] == true)?;
    let (group, plural) = match owner["kind"].as_str()? {
        "ReplicaSet" => ("apps", "replicasets"),
        "StatefulSet" => ("apps", "statefulsets"),
        "ReplicationController" => ("", "replicationcontrollers"),
        _ => return None,
    };
    let resource = crate::resources::find(group, "v1", plural)?;
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str);
    let controller = store.get(resource, namespace, owner["name"].as_str()?).ok()?;
    let replicas = controller.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    Some((owner["uid"].as_str().unwrap_or_default().to_string(), replicas))
}

/// The budget of `pdb` over the pods of its namespace. With `maxUnavailable` or a percentage `minAvailable`, the
/// pods expected are what their controllers want (`scale_of`, summed once per controller), as the disruption
/// controller counts them: counting the pods themselves would count an evicted pod that is still terminating
/// beside its replacement, and refuse the next eviction a real API server allows.
pub fn budget<'a>(pdb: &Value, pods: impl Iterator<Item = &'a Value>, scale_of: impl Fn(&Value) -> Option<(String, i64)>) -> Budget {
    let namespace = pdb.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let selector = pdb.pointer("/spec/selector").cloned().unwrap_or(json!({}));
    let matching: Vec<&Value> = pods
        .filter(|pod| pod.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
        .filter(|pod| label_selector_matches(&selector, pod))
        .filter(|pod| !matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed")))
        .collect();
    let by_scale = pdb.pointer("/spec/maxUnavailable").is_some() || pdb.pointer("/spec/minAvailable").is_some_and(Value::is_string);
    let scales: std::collections::HashMap<String, i64> = if by_scale { matching.iter().filter_map(|pod| scale_of(pod)).collect() } else { Default::default() };
    // Pods without a controller: the disruption controller cannot judge such a budget; counting the pods keeps
    // the simulator's answers for them as they were.
    let expected = if scales.is_empty() { matching.len() as i64 } else { scales.values().sum() };
    let current_healthy = matching.iter().filter(|pod| is_ready(pod)).count() as i64;
    let desired_healthy = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        int_or_percent(min, expected).unwrap_or(expected)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        expected - int_or_percent(max, expected).unwrap_or(0)
    } else {
        expected
    };
    Budget { expected, current_healthy, desired_healthy, disruptions_allowed: (current_healthy - desired_healthy).max(0) }
}

pub fn status_of(budget: &Budget, generation: &Value) -> Value {
    json!({
        "currentHealthy": budget.current_healthy,
        "desiredHealthy": budget.desired_healthy,
        "disruptionsAllowed": budget.disruptions_allowed,
        "expectedPods": budget.expected,
        "observedGeneration": generation,
    })
}
