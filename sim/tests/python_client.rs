//! The Python client's typed models read every kind the simulator serves, with running pods, cordoned and
//! failed nodes, and events made through both event APIs. Skipped, with the reason printed, unless a Python with
//! the `kubernetes` package is found (`WASP_SIM_PYTHON`, else `python3`).

mod common;

use serde_json::json;
use std::process::Command;
use wasp_sim::resources;

fn python() -> Option<String> {
    let chosen = std::env::var("WASP_SIM_PYTHON").ok();
    let python = chosen.clone().unwrap_or_else(|| "python3".into());
    let found = Command::new(&python).args(["-c", "import kubernetes"]).output().is_ok_and(|output| output.status.success());
    // Chosen on purpose (as .ci/run does), a Python without the client is an error, not a reason to skip.
    assert!(found || chosen.is_none(), "WASP_SIM_PYTHON={python} cannot import kubernetes");
    if !found {
        eprintln!("skipped: {python} cannot import kubernetes (set WASP_SIM_PYTHON to a Python that has the client)");
    }
    found.then_some(python)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_models_accept_every_served_object() {
    let Some(python) = python() else { return };
    let simulator = common::start_running(common::EVERY_KIND, "worker-1", common::EVERY_KIND_PODS).await;
    let store = simulator.store.clone();
    let core_events = resources::find("", "v1", "events").unwrap();
    store
        .create(core_events, Some("default"), json!({"metadata": {"name": "core"}, "involvedObject": {"kind": "Pod", "name": "web"}, "reason": "Scheduled", "message": "m", "type": "Normal", "source": {"component": "wasp"}, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1}))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("wasp-sim-python-{}", simulator.address.port()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    simulator.write_kubeconfig(&kubeconfig).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/typed_models.py");
    let output = tokio::task::spawn_blocking(move || Command::new(python).arg(script).env("KUBECONFIG", &kubeconfig).output().unwrap()).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    for expected in
        ["pods 4", "nodes 3", "events 1", "events.k8s.io 1", "statefulsets 1", "persistentvolumeclaims 1", "persistentvolumes 1", "storageclasses 1"]
    {
        assert!(stdout.lines().any(|line| line == expected), "{expected:?} not in\n{stdout}");
    }
}
