//! Subresources and deletion semantics: `pods/binding`, `pods/eviction` (with PodDisruptionBudgets), `*/status`,
//! `*/scale`, and graceful deletion of running pods.

use crate::api::{json_response, parse_body, restore, PatchBody};
use crate::error::ApiError;
use crate::pdb;
use crate::resources::{self, ResourceType};
use crate::selectors_k8s::selector_string;
use crate::store::{check_resource_version, now_rfc3339, Store};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

fn is_finished(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

/// Deletes an object. A pod running on a node is only marked (`deletionTimestamp`): the simulated kubelet
/// removes it after its grace period, so watchers see it terminating first, as in a cluster.
pub fn delete(store: &Store, resource: &'static ResourceType, namespace: Option<&str>, name: &str, grace: Option<i64>) -> Result<Arc<Value>, ApiError> {
    if std::ptr::eq(resource, resources::pods()) {
        let pod = store.get(resource, namespace, name)?;
        let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|node| !node.is_empty());
        let grace = grace.or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64)).unwrap_or(30);
        if bound && grace > 0 && !is_finished(&pod) {
            if pod.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(pod);
            }
            return store.mutate(resource, namespace, name, |pod| {
                pod["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                Ok(())
            });
        }
    }
    store.remove(resource, namespace, name)
}

#[allow(clippy::too_many_arguments)]
pub fn serve(
    store: &Store,
    method: &Method,
    resource: &'static ResourceType,
    namespace: Option<&str>,
    name: &str,
    sub: &str,
    headers: &HeaderMap,
    body: &Bytes,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    if !resource.subresources.contains(&sub) {
        return Err(ApiError::not_found(&format!("{}/{sub}", resource.plural), resource.group, name));
    }
    match (method.clone(), sub) {
        (Method::POST, "binding") => bind(store, namespace, name, parse_body(body)?),
        (Method::POST, "token") => {
            let answer = crate::auth::token_request(store, namespace.unwrap_or("default"), name, &parse_body(body)?)?;
            Ok(json_response(StatusCode::CREATED, &answer))
        }
        (Method::POST, "eviction") => evict(store, namespace, name, body),
        (Method::GET, "log") | (Method::GET | Method::POST, "exec") => Err(no_containers(store, namespace, name, query)),
        (Method::GET, "status") => store.get(resource, namespace, name).map(|object| json_response(StatusCode::OK, &object)),
        (Method::PUT, "status") => {
            let update = parse_body(body)?;
            let updated = store.mutate(resource, namespace, name, |current| {
                check_resource_version(resource, current, &update)?;
                current["status"] = update.get("status").cloned().unwrap_or(Value::Null);
                Ok(())
            })?;
            Ok(json_response(StatusCode::OK, &updated))
        }
        (Method::PATCH, "status") => {
            let patch = PatchBody::parse(headers, body)?;
            let updated = store.mutate(resource, namespace, name, |current| {
                let mut patched = current.clone();
                patch.apply(&mut patched)?;
                restore(current, "status", patched.get("status").cloned());
                Ok(())
            })?;
            Ok(json_response(StatusCode::OK, &updated))
        }
        (Method::GET, "scale") => store.get(resource, namespace, name).map(|object| json_response(StatusCode::OK, &scale_of(&object))),
        (Method::PUT | Method::PATCH, "scale") => {
            let updated = store.mutate(resource, namespace, name, |current| {
                let mut scale = scale_of(current);
                if *method == Method::PUT {
                    let update = parse_body(body)?;
                    check_resource_version(resource, current, &update)?;
                    scale["spec"] = update.get("spec").cloned().unwrap_or(json!({}));
                } else {
                    PatchBody::parse(headers, body)?.apply(&mut scale)?;
                }
                let replicas = scale.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
                if replicas < 0 {
                    return Err(ApiError::invalid(
                        "Scale",
                        crate::store::name_of(current),
                        "spec.replicas",
                        "Invalid value: must be greater than or equal to 0",
                    ));
                }
                current["spec"]["replicas"] = json!(replicas);
                Ok(())
            })?;
            Ok(json_response(StatusCode::OK, &scale_of(&updated)))
        }
        (method, sub) => Err(ApiError::method_not_allowed(format!("{method} is not supported on {}/{sub}", resource.plural))),
    }
}

/// The `autoscaling/v1` Scale view of a workload.
fn scale_of(workload: &Value) -> Value {
    let metadata = &workload["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"], "creationTimestamp": metadata["creationTimestamp"],
        },
        "spec": {"replicas": workload.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": workload.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector_string(workload.pointer("/spec/selector").unwrap_or(&Value::Null)),
        },
    })
}

fn bind(store: &Store, namespace: Option<&str>, name: &str, binding: Value) -> Result<Response, ApiError> {
    let node = binding.pointer("/target/name").and_then(Value::as_str).filter(|node| !node.is_empty());
    let node = node.ok_or_else(|| ApiError::invalid("Binding", name, "target.name", "Required value"))?.to_string();
    store.mutate(resources::pods(), namespace, name, |pod| {
        if let Some(existing) = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|existing| !existing.is_empty()) {
            return Err(ApiError::conflict("pods/binding", "", name, &format!("pod {name} is already assigned to node \"{existing}\"")));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict("pods/binding", "", name, &format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        pod["spec"]["nodeName"] = json!(node);
        let scheduled = json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()});
        let conditions = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conditions: Vec<Value> = conditions.into_iter().filter(|condition| condition["type"] != "PodScheduled").collect();
        conditions.push(scheduled);
        pod["status"]["conditions"] = json!(conditions);
        Ok(())
    })?;
    Ok(json_response(StatusCode::CREATED, &success(201)))
}

fn evict(store: &Store, namespace: Option<&str>, name: &str, body: &Bytes) -> Result<Response, ApiError> {
    let options: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let grace = options.pointer("/deleteOptions/gracePeriodSeconds").and_then(Value::as_i64);
    evict_with_grace(store, namespace, name, grace)?;
    Ok(json_response(StatusCode::CREATED, &success(201)))
}

/// Evicts a pod unless a PodDisruptionBudget forbids it (429), as `POST pods/{name}/eviction` does.
pub fn evict_pod(store: &Store, namespace: Option<&str>, name: &str) -> Result<(), ApiError> {
    evict_with_grace(store, namespace, name, None)
}

fn evict_with_grace(store: &Store, namespace: Option<&str>, name: &str, grace: Option<i64>) -> Result<(), ApiError> {
    let pod = store.get(resources::pods(), namespace, name)?;
    let namespace_name = namespace.unwrap_or("default");
    let pdbs_type = resources::find("policy", "v1", "poddisruptionbudgets").expect("served");
    let covering: Vec<Arc<Value>> = store
        .all(pdbs_type)
        .into_iter()
        .filter(|pdb| pdb.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace_name))
        .filter(|pdb| crate::selectors_k8s::label_selector_matches(pdb.pointer("/spec/selector").unwrap_or(&Value::Null), &pod))
        .collect();
    if covering.len() > 1 {
        return Err(ApiError {
            code: 500,
            reason: "InternalError",
            message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
            details: None,
        });
    }
    // An unready or finished pod does not count toward the budget, so evicting it never violates it.
    if let (Some(pdb), true) = (covering.first(), pdb::is_ready(&pod)) {
        // Only the pods the budget selects, parsed one at a time: a parsed copy of every pod per eviction made the
        // simulator's memory jump by ~500 MB for each eviction in a 50k-pod scenario.
        let selector = pdb.pointer("/spec/selector").unwrap_or(&Value::Null);
        let selected =
            store.list(resources::pods(), Some(namespace_name), 0, None, |candidate| crate::selectors_k8s::label_selector_matches(selector, candidate))?.items;
        let budget = pdb::budget(pdb, selected.iter().map(|pod| pod.as_ref()), |pod| pdb::controller_scale(store, pod));
        if budget.disruptions_allowed < 1 {
            let pdb_name = crate::store::name_of(pdb);
            return Err(ApiError::too_many_requests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
                json!([{"reason": "DisruptionBudget", "message": format!(
                    "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                    budget.desired_healthy, budget.current_healthy)}]),
            ));
        }
        let after = pdb::Budget { current_healthy: budget.current_healthy - 1, disruptions_allowed: budget.disruptions_allowed - 1, ..budget };
        let generation = pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1));
        let pdb_name = crate::store::name_of(pdb).to_string();
        store.mutate(pdbs_type, Some(namespace_name), &pdb_name, |pdb| {
            pdb["status"] = pdb::status_of(&after, &generation);
            Ok(())
        })?;
    }
    delete(store, resources::pods(), namespace, name, grace)?;
    Ok(())
}

/// `pods/log` and `pods/exec`: what kube-apiserver answers for a container that is not running (400), since the
/// simulated cluster runs no containers.
fn no_containers(store: &Store, namespace: Option<&str>, name: &str, query: &HashMap<String, String>) -> ApiError {
    let pod = match store.get(resources::pods(), namespace, name) {
        Ok(pod) => pod,
        Err(error) => return error,
    };
    let containers: Vec<&str> =
        pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten().filter_map(|container| container["name"].as_str()).collect();
    let container = match query.get("container").map(String::as_str).filter(|container| !container.is_empty()) {
        Some(container) if containers.contains(&container) => container,
        Some(container) => return ApiError::bad_request(format!("container {container} is not valid for pod {name}")),
        None if containers.len() == 1 => containers[0],
        None => return ApiError::bad_request(format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "))),
    };
    ApiError::bad_request(format!(
        "container \"{container}\" in pod \"{name}\" is waiting to start: wasp-sim is a simulated cluster and runs no containers (no logs, no exec)"
    ))
}
