//! What the API server fills in or refuses on create, for the fields schedulers and controllers depend on.

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::name_of;
use serde_json::{json, Value};

pub fn apply(resource: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    let name = name_of(object).to_string();
    match (resource.group, resource.kind) {
        ("", "Pod") => {
            let containers = object.pointer("/spec/containers").and_then(Value::as_array);
            if containers.is_none_or(|containers| containers.is_empty()) {
                return Err(ApiError::invalid("Pod", &name, "spec.containers", "Required value"));
            }
            let spec = &mut object["spec"];
            if spec.get("schedulerName").is_none_or(Value::is_null) {
                spec["schedulerName"] = json!("default-scheduler");
            }
            if spec.get("priority").is_none() {
                spec["priority"] = json!(0);
            }
            if object.pointer("/status/phase").is_none() {
                object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet") => {
            if object.pointer("/spec/selector").is_none() {
                return Err(ApiError::invalid(resource.kind, &name, "spec.selector", "Required value"));
            }
            if object.pointer("/spec/template").is_none() {
                return Err(ApiError::invalid(resource.kind, &name, "spec.template", "Required value"));
            }
            if object.pointer("/spec/replicas").is_none_or(Value::is_null) {
                object["spec"]["replicas"] = json!(1);
            }
            if object.get("status").is_none() {
                object["status"] = json!({"replicas": 0});
            }
        }
        ("policy", "PodDisruptionBudget") => {
            let spec = object.get("spec");
            let has_min = spec.and_then(|spec| spec.get("minAvailable")).is_some();
            let has_max = spec.and_then(|spec| spec.get("maxUnavailable")).is_some();
            if has_min && has_max {
                return Err(ApiError::invalid("PodDisruptionBudget", &name, "spec", "minAvailable and maxUnavailable cannot be both set"));
            }
        }
        ("", "Node") if object.get("status").is_none() => object["status"] = json!({}),
        _ => {}
    }
    Ok(())
}
