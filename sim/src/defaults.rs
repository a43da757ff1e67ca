//! What the API server fills in or refuses on create, for the fields schedulers and controllers depend on.

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::name_of;
use serde_json::{json, Value};

/// The pod's QoS class, by kube-apiserver's rule (`GetPodQOS`): of CPU and memory, non-zero requests and limits
/// summed over the containers and init containers; none at all is BestEffort; limits for both in every container,
/// equal to the requests (a request left out defaults to its limit), is Guaranteed; anything else Burstable.
fn qos_class(spec: &Value) -> &'static str {
    const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];
    // A quantity may come as a JSON number (`cpu: 1` in YAML).
    let amount = |value: &Value| match value {
        Value::Number(_) => wasp_sdk::quantity::parse_milli(&value.to_string()).unwrap_or(0),
        _ => value.as_str().and_then(|text| wasp_sdk::quantity::parse_milli(text).ok()).unwrap_or(0),
    };
    let (mut requests, mut limits) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"].into_iter().filter_map(|list| spec.get(list).and_then(Value::as_array)).flatten();
    for container in containers {
        let resources = &container["resources"];
        let mut limited = 0;
        for name in QOS_RESOURCES {
            let limit = amount(&resources["limits"][name]);
            // Defaulting copies a limit into a missing request.
            let request = resources["requests"].get(name).map_or(limit, amount);
            if request > 0 {
                *requests.entry(name).or_insert(0) += request;
            }
            if limit > 0 {
                *limits.entry(name).or_insert(0) += limit;
                limited += 1;
            }
        }
        guaranteed &= limited == QOS_RESOURCES.len();
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

pub fn apply(resource: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    let name = name_of(object).to_string();
    validate_metadata(resource.kind, &name, object)?;
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
                let qos_class = qos_class(&object["spec"]);
                object["status"] = json!({"phase": "Pending", "qosClass": qos_class});
            }
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet") => {
            if object.pointer("/spec/selector").is_none() {
                return Err(ApiError::invalid(resource.kind, &name, "spec.selector", "Required value"));
            }
            let Some(template) = object.pointer("/spec/template") else {
                return Err(ApiError::invalid(resource.kind, &name, "spec.template", "Required value"));
            };
            // A workload whose selector does not select its own pods would create them without end.
            if !crate::selectors_k8s::label_selector_matches(&object["spec"]["selector"], template) {
                let labels = template.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
                return Err(ApiError::invalid(
                    resource.kind,
                    &name,
                    "spec.template.metadata.labels",
                    &format!("Invalid value: {labels}: `selector` does not match template `labels`"),
                ));
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
        ("", "PersistentVolumeClaim") => {
            if object.pointer("/spec/accessModes").is_none() {
                return Err(ApiError::invalid("PersistentVolumeClaim", &name, "spec.accessModes", "Required value: at least 1 access mode is required"));
            }
            if object.pointer("/spec/volumeMode").is_none() {
                object["spec"]["volumeMode"] = json!("Filesystem");
            }
            object["status"] = json!({"phase": "Pending"});
        }
        ("", "PersistentVolume") => {
            if object.pointer("/spec/persistentVolumeReclaimPolicy").is_none() {
                object["spec"]["persistentVolumeReclaimPolicy"] = json!("Retain");
            }
            if object.pointer("/spec/volumeMode").is_none() {
                object["spec"]["volumeMode"] = json!("Filesystem");
            }
            if object.pointer("/status/phase").is_none() {
                object["status"] = json!({"phase": "Available"});
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            if object.get("provisioner").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(ApiError::invalid("StorageClass", &name, "provisioner", "Required value"));
            }
            if object.get("reclaimPolicy").is_none() {
                object["reclaimPolicy"] = json!("Delete");
            }
            if object.get("volumeBindingMode").is_none() {
                object["volumeBindingMode"] = json!("Immediate");
            }
        }
        // Every namespace carries its name as a label (kube-apiserver since 1.21), which is what webhooks'
        // namespaceSelectors usually select on.
        ("", "Namespace") => {
            if !object.pointer("/metadata/labels").is_some_and(Value::is_object) {
                object["metadata"]["labels"] = json!({});
            }
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        ("admissionregistration.k8s.io", kind @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration")) => {
            webhook_defaults(kind, object);
            crate::webhooks::validate_configuration(kind, object)?;
        }
        ("", "Secret") => {
            // stringData is write-only: merged into data, base64-encoded, as the API server does.
            if let Some(Value::Object(strings)) = object.as_object_mut().and_then(|map| map.remove("stringData")) {
                for (key, value) in strings {
                    object["data"][key] = json!(base64(value.as_str().unwrap_or("").as_bytes()));
                }
            }
            if object.get("type").is_none_or(Value::is_null) {
                object["type"] = json!("Opaque");
            }
        }
        ("", "Service") => {
            let spec = &mut object["spec"];
            if spec.get("type").is_none_or(Value::is_null) {
                spec["type"] = json!("ClusterIP");
            }
            if spec.get("clusterIP").is_none_or(Value::is_null) && spec["type"] != "ExternalName" {
                let ip = format!("10.96.{}.{}", fastrand::u8(..), fastrand::u8(1..255));
                spec["clusterIP"] = json!(ip);
                spec["clusterIPs"] = json!([ip]);
            }
            for port in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                if port.get("protocol").is_none() {
                    port["protocol"] = json!("TCP");
                }
                if port.get("targetPort").is_none() {
                    port["targetPort"] = port["port"].clone();
                }
            }
            if object.get("status").is_none() {
                object["status"] = json!({"loadBalancer": {}});
            }
        }
        _ => {}
    }
    Ok(())
}

/// What updates keep as creates make it: a Namespace's name label, webhook configurations' defaults and
/// validity.
pub fn apply_on_update(resource: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    match (resource.group, resource.kind) {
        ("", "Namespace") | ("admissionregistration.k8s.io", _) => apply(resource, object),
        _ => validate_metadata(resource.kind, name_of(object), object),
    }
}

/// kube-apiserver's total for an object's annotations.
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, empty allowed when `may_be_empty`.
fn is_name_part(text: &str, may_be_empty: bool) -> bool {
    if text.is_empty() {
        return may_be_empty;
    }
    text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Why a label or annotation key is not a qualified name (`prefix/name`), as kube-apiserver words it.
fn qualified_name_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let subdomain = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && prefix.starts_with(|c: char| c.is_ascii_alphanumeric())
            && prefix.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !subdomain {
            return Some("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into());
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    (!is_name_part(name, false)).then(|| NAME_PART.to_string())
}

/// Label keys and values, annotation keys and the annotations' total size, as kube-apiserver checks them on
/// every write: a tenant cannot store what a real cluster would refuse.
fn validate_metadata(kind: &str, name: &str, object: &Value) -> Result<(), ApiError> {
    let invalid = |field: &str, value: &str, why: &str| {
        let shown: String = value.chars().take(80).collect();
        Err(ApiError::invalid(kind, name, field, &format!("Invalid value: {shown:?}: {why}")))
    };
    for (key, value) in object.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten() {
        if let Some(why) = qualified_name_error(key) {
            return invalid("metadata.labels", key, &why);
        }
        // `app: true` in YAML is a boolean, which kube-apiserver cannot decode into a label.
        let Some(value) = value.as_str() else {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.labels of type string",
                json_type(value)
            )));
        };
        if value.len() > 63 {
            return invalid("metadata.labels", value, "must be no more than 63 characters");
        }
        if !is_name_part(value, true) {
            return invalid("metadata.labels", value, LABEL_VALUE);
        }
    }
    let mut annotation_bytes = 0;
    for (key, value) in object.pointer("/metadata/annotations").and_then(Value::as_object).into_iter().flatten() {
        if let Some(why) = qualified_name_error(key) {
            return invalid("metadata.annotations", key, &why);
        }
        annotation_bytes += key.len() + value.as_str().map_or(0, str::len);
    }
    if annotation_bytes > MAX_ANNOTATION_BYTES {
        return Err(ApiError::invalid(kind, name, "metadata.annotations", &format!("Too long: must have at most {MAX_ANNOTATION_BYTES} bytes")));
    }
    Ok(())
}

/// The name Go's JSON decoder gives a value's type in its errors.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
        Value::String(_) => "string",
    }
}

/// kube-apiserver's defaults for each webhook of a configuration, stored as it stores them.
fn webhook_defaults(kind: &str, configuration: &mut Value) {
    for hook in configuration.get_mut("webhooks").and_then(Value::as_array_mut).into_iter().flatten() {
        let mut defaults = vec![
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(10)),
        ];
        if kind == "MutatingWebhookConfiguration" {
            defaults.push(("reinvocationPolicy", json!("Never")));
        }
        for (field, value) in defaults {
            if hook.get(field).is_none_or(Value::is_null) {
                hook[field] = value;
            }
        }
        if let Some(service) = hook.pointer_mut("/clientConfig/service").filter(|service| service.is_object()) {
            if service.get("port").is_none_or(Value::is_null) {
                service["port"] = json!(443);
            }
        }
        for rule in hook.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
            if rule.get("scope").is_none_or(Value::is_null) {
                rule["scope"] = json!("*");
            }
        }
    }
}

/// Standard base64 with padding.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let value = (u32::from(chunk[0]) << 16) | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8) | u32::from(*chunk.get(2).unwrap_or(&0));
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(ALPHABET[(value >> (18 - 6 * index) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 (padding optional) to text; None if it is not base64 of UTF-8.
pub(crate) fn base64_decode(text: &str) -> Option<String> {
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for byte in text.bytes().filter(|byte| *byte != b'=') {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = bits << 6 | u32::from(value);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b"wasp"), "d2FzcA==");
        assert_eq!(base64(b"was"), "d2Fz");
        assert_eq!(base64(b"wa"), "d2E=");
        assert_eq!(base64_decode("d2FzcA==").as_deref(), Some("wasp"));
        assert_eq!(base64_decode("d2Fz").as_deref(), Some("was"));
    }

    #[test]
    fn the_qos_class_follows_kube_apiservers_rule() {
        let pod = |resources: Value| json!({"containers": [{"name": "a", "resources": resources}]});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(qos_class(&pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"}}))), "Burstable");
        assert_eq!(qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))), "Guaranteed", "requests default to limits");
        assert_eq!(qos_class(&pod(json!({"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}))), "Guaranteed");
        assert_eq!(qos_class(&pod(json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}))), "Burstable");
        assert_eq!(qos_class(&pod(json!({"limits": {"cpu": "1"}}))), "Burstable", "no memory limit");
        assert_eq!(qos_class(&pod(json!({"limits": {"cpu": 1, "memory": "1Gi"}}))), "Guaranteed", "a number is a quantity");
        assert_eq!(qos_class(&pod(json!({"requests": {"nvidia.com/gpu": "1"}}))), "BestEffort", "only CPU and memory count");
        let mixed = json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"name": "b"}]});
        assert_eq!(qos_class(&mixed), "Burstable", "one container without limits");
    }
}
