//! Every object the kubelet-less lifecycle and the scenarios produce carries the fields its OpenAPI schema marks
//! required (typed clients such as the Python client's models refuse nulls there). The required lists come from
//! the served schemas (`wasp_sim::openapi`), so a new gap anywhere in an object is found without naming it here.

mod common;

use serde_json::json;
use wasp_sim::resources::{self, RESOURCES};
use wasp_sim::{events, openapi};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_object_has_its_required_fields() {
    let simulator = common::start_running(common::EVERY_KIND, "worker-1", common::EVERY_KIND_PODS).await;
    let store = simulator.store.clone();
    // An event written through events.k8s.io/v1 with only what that API requires, read back through both APIs.
    let v1 = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Node", "name": "worker-0"}, "reason": "Cordoned", "note": "n",
        "type": "Normal", "reportingController": "test", "reportingInstance": "test-1", "action": "Cordon", "eventTime": "2026-01-01T00:00:00.000000Z"});
    store.create(events::storage(resources::find("events.k8s.io", "v1", "events").unwrap()), Some("default"), events::to_core(&v1)).unwrap();
    let mut checked = 0;
    let mut gaps = Vec::new();
    for resource in RESOURCES.iter().filter(|resource| !resource.read_only) {
        for object in store.all(events::storage(resource)) {
            let object = events::view(resource, &object);
            for field in openapi::missing_required(&resource.api_version(), resource.kind, &object) {
                gaps.push(format!("{} {}: {field}", resource.id(), object["metadata"]["name"]));
            }
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} objects checked");
    assert!(gaps.is_empty(), "required fields missing:\n{}", gaps.join("\n"));
}
