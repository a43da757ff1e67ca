//! Shared by the integration tests: a simulator whose pods all run.

use serde_json::json;
use std::time::{Duration, Instant};
use wasp_sim::resources;
use wasp_sim::{Scenario, Simulator, SimulatorOptions};

/// Running pods of a Deployment (with a PDB) and a StatefulSet, a cordoned and a failed node: every kind the
/// scenarios make. Makes `EVERY_KIND_PODS` pods.
pub const EVERY_KIND: &str = r#"
kubelet: {readyDelay: 10ms, terminationDelay: 10ms}
nodeGroups: [{name: worker, count: 3, cpu: '4', memory: 16Gi, zones: [a, b]}]
storageClasses: [{name: standard, default: true}]
workloads:
- {name: web, replicas: 3, schedulerName: wasp, cpu: 100m, memory: 64Mi, pdb: {minAvailable: 1}}
- {name: db, kind: StatefulSet, replicas: 1, schedulerName: wasp, cpu: 100m, memory: 64Mi, volumes: [{name: data}]}
events:
- {at: 0s, action: cordon, node: worker-0}
- {at: 0s, action: fail-node, node: worker-2}
"#;
pub const EVERY_KIND_PODS: usize = 4;

/// Starts `scenario`, binds every pod to `node` as a scheduler would, and waits until the simulated kubelet has
/// started all `pods` of them.
pub async fn start_running(scenario: &str, node: &str, pods: usize) -> Simulator {
    let scenario = Scenario::parse(scenario).unwrap();
    let options = SimulatorOptions { history: 1000, ..Default::default() };
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let store = &simulator.store;
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let all = store.all(resources::pods());
        for pod in all.iter().filter(|pod| pod.pointer("/spec/nodeName").is_none()) {
            let (namespace, name) = (pod["metadata"]["namespace"].as_str().unwrap(), pod["metadata"]["name"].as_str().unwrap());
            let _ = store.mutate(resources::pods(), Some(namespace), name, |pod| {
                pod["spec"]["nodeName"] = json!(node);
                Ok(())
            });
        }
        if all.len() == pods && all.iter().all(|pod| pod.pointer("/status/phase") == Some(&json!("Running"))) {
            return simulator;
        }
        assert!(Instant::now() < deadline, "{} of {pods} pods exist and not all run", all.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
