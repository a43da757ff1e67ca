//! Every object the kubelet-less lifecycle and the scenarios produce carries the fields its OpenAPI schema marks
//! required (typed clients such as the Python client's models refuse nulls there). The required lists come from
//! the served schemas (`wasp_sim::openapi`), so a new gap anywhere in an object is found without naming it here.

use serde_json::json;
use std::time::{Duration, Instant};
use wasp_sim::resources::{self, RESOURCES};
use wasp_sim::{events, openapi, Scenario, Simulator, SimulatorOptions};

const SCENARIO: &str = r#"
kubelet: {readyDelay: 10ms, terminationDelay: 10ms}
nodeGroups: [{name: worker, count: 3, cpu: '4', memory: 16Gi, zones: [a, b]}]
workloads:
- {name: web, replicas: 3, schedulerName: wasp, cpu: 100m, memory: 64Mi, pdb: {minAvailable: 1}}
- {name: db, kind: StatefulSet, replicas: 1, schedulerName: wasp, cpu: 100m, memory: 64Mi}
events:
- {at: 0s, action: cordon, node: worker-0}
- {at: 0s, action: fail-node, node: worker-2}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_object_has_its_required_fields() {
    let scenario = Scenario::parse(SCENARIO).unwrap();
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), SimulatorOptions { history: 1000, ..Default::default() }).await.unwrap();
    let store = &simulator.store;
    // Bind every pod as a scheduler would, and wait until the simulated kubelet has started them all.
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let pods = store.all(resources::pods());
        for pod in pods.iter().filter(|pod| pod.pointer("/spec/nodeName").is_none()) {
            let (namespace, name) = (pod["metadata"]["namespace"].as_str().unwrap(), pod["metadata"]["name"].as_str().unwrap());
            let _ = store.mutate(resources::pods(), Some(namespace), name, |pod| {
                pod["spec"]["nodeName"] = json!("worker-1");
                Ok(())
            });
        }
        if pods.len() == 4 && pods.iter().all(|pod| pod.pointer("/status/phase") == Some(&json!("Running"))) {
            break;
        }
        assert!(Instant::now() < deadline, "pods never all ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
