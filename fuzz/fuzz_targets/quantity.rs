//! Kubernetes quantities as tenants write them (requests, limits, overhead) and as nodes report them
//! (allocatable): the SDK's parser and the host's conversion of a pod or a node carrying one answer with a value
//! or an error naming the field, and never panic.
#![no_main]

use k8s_openapi::api::core::v1::{Node, Pod};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|text: &str| {
    let _ = wasp_sdk::quantity::parse_milli(text);
    let resources = json!({"cpu": text, "memory": text, "ephemeral-storage": text, "nvidia.com/gpu": text, "hugepages-2Mi": text});
    let pod = json!({
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {
            "containers": [{"name": "a", "resources": {"requests": resources, "limits": resources}}],
            "overhead": resources,
            "resources": {"requests": resources, "limits": resources},
        },
    });
    if let Ok(pod) = serde_json::from_value::<Pod>(pod) {
        let _ = wasp::cluster::convert::pod(&pod);
    }
    let node = json!({"metadata": {"name": "n"}, "status": {"allocatable": resources, "capacity": resources}});
    if let Ok(node) = serde_json::from_value::<Node>(node) {
        let _ = wasp::cluster::convert::node(&node);
    }
});
