//! wasp on real nodes: `wasp-controlplane --real-nodes 2` runs two real kubelets (containerd, runc, a CNI bridge
//! each) beside the control plane, in namespaces of their own (controlplane/sandbox.go). wasp's image is assembled
//! from the test build (scripts/build-image.sh) and loaded into the nodes; the install is the README's, and the
//! pods run through the real kubelet: its probes, its mounts, its ConfigMap projection. Every count comes from the
//! API server (pods' status, bindings, events), none from wasp's logs.
//!
//! They need root and the node programs (scripts/build-node.sh); outside CI (no `CI` in the environment) a
//! machine without them skips with a message.

mod common;

use common::control_plane::{wait_for, ControlPlane};
use common::install::readme_install;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Why real nodes cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"));
    if !root {
        return Some("real nodes need root (kubelet and containerd make cgroups, mounts and network namespaces)".into());
    }
    let kubelet = common::repo_root().join("target/node/kubelet");
    if !kubelet.exists() {
        return Some(format!("{} is missing: build the node programs with scripts/build-node.sh", kubelet.display()));
    }
    None
}

/// True when the test can run; in CI a missing prerequisite fails it instead.
fn real_nodes_available(test: &str) -> bool {
    match missing_prerequisite() {
        None => true,
        Some(reason) if std::env::var_os("CI").is_some() => panic!("{test}: {reason}"),
        Some(reason) => {
            eprintln!("{test}: skipped: {reason}");
            false
        }
    }
}

/// wasp's image from this test build, by the script users run.
fn wasp_image(dir: &Path) -> PathBuf {
    let out = dir.join("wasp.tar");
    let built = Command::new(common::repo_root().join("scripts/build-image.sh"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_wasp"))
        .arg("--out")
        .arg(&out)
        .current_dir(common::repo_root())
        .output()
        .unwrap();
    assert!(built.status.success(), "scripts/build-image.sh: {}", String::from_utf8_lossy(&built.stderr));
    out
}

/// The image's config (`ctr`/`docker load`'s tar: manifest.json names it) and the paths in its layer.
fn image_contents(tar: &Path) -> (Value, Vec<String>) {
    let entries = |file: &Path| -> Vec<(String, Vec<u8>)> {
        let mut archive = tar::Archive::new(std::fs::File::open(file).unwrap());
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let path = entry.path().unwrap().to_string_lossy().into_owned();
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
                (path, bytes)
            })
            .collect()
    };
    let outer = entries(tar);
    let find = |name: &str| outer.iter().find(|(path, _)| path == name).map(|(_, bytes)| bytes.clone()).unwrap_or_else(|| panic!("{name} not in the image tar"));
    let manifest: Value = serde_json::from_slice(&find("manifest.json")).unwrap();
    let config: Value = serde_json::from_slice(&find(manifest[0]["Config"].as_str().unwrap())).unwrap();
    // The layer is stored gzip-compressed, as `docker save` stores it.
    let mut gunzip = Command::new("gzip").arg("-dc").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let compressed = find(manifest[0]["Layers"][0].as_str().unwrap());
    let mut input = gunzip.stdin.take().unwrap();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut input, &compressed));
    let layer = gunzip.wait_with_output().unwrap().stdout;
    writer.join().unwrap().unwrap();
    let mut archive = tar::Archive::new(layer.as_slice());
    let paths = archive.entries().unwrap().map(|entry| format!("/{}", entry.unwrap().path().unwrap().display())).collect();
    (config, paths)
}

#[test]
fn the_image_has_the_dockerfiles_contents() {
    let dir = tempfile::tempdir().unwrap();
    let (config, paths) = image_contents(&wasp_image(dir.path()));
    let dockerfile = std::fs::read_to_string(common::repo_root().join("Dockerfile")).unwrap();
    let script = std::fs::read_to_string(common::repo_root().join("scripts/build-image.sh")).unwrap();
    let line = |prefix: &str| dockerfile.lines().rev().find(|line| line.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in the Dockerfile")).to_string();
    // The same program, built the same way, at the same place, run as the same user.
    let entrypoint: Vec<String> = serde_json::from_str(line("ENTRYPOINT ").trim_start_matches("ENTRYPOINT ")).unwrap();
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(entrypoint), "{config}");
    assert_eq!(config["config"]["User"].as_str(), Some(line("USER ").trim_start_matches("USER ")), "{config}");
    let copied = line("COPY --from=build ");
    let destination = copied.split_whitespace().last().unwrap();
    assert_eq!(destination, entrypoint[0]);
    assert!(paths.iter().any(|path| path == destination), "{destination} not in the image: {paths:?}");
    let build = line("RUN cargo build ");
    let build_command = build.trim_start_matches("RUN ");
    assert!(script.contains(build_command), "scripts/build-image.sh does not build as the Dockerfile does ({build_command})");
    // What distroless/cc-debian12:nonroot gives the program: a C library and its loader, the CA bundle, the
    // non-root user, a writable /tmp.
    for needed in ["/etc/passwd", "/etc/group", "/tmp", "/etc/ssl/certs/ca-certificates.crt", "/lib64/ld-linux-x86-64.so.2"] {
        assert!(paths.iter().any(|path| path.trim_end_matches('/') == needed), "{needed} not in the image: {paths:?}");
    }
    assert!(paths.iter().any(|path| path.ends_with("/libc.so.6")), "{paths:?}");
}

/// The wasp pods of the Deployment, as the API server has them.
fn wasp_pods(cluster: &ControlPlane) -> Vec<Value> {
    let pods = cluster.get_json(&["get", "pods", "-n", "wasp-system", "-l", "app.kubernetes.io/name=wasp"]);
    pods["items"].as_array().unwrap().clone()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().into_iter().flatten().any(|condition| condition["type"] == "Ready" && condition["status"] == "True")
}

fn restarts(pod: &Value) -> u64 {
    pod["status"]["containerStatuses"].as_array().into_iter().flatten().map(|status| status["restartCount"].as_u64().unwrap_or(0)).sum()
}

/// What to read when the pods did not come up: their description and the kubelets' logs' tails.
fn diagnosis(cluster: &ControlPlane) -> String {
    let described = cluster.kubectl(&["describe", "pods", "-n", "wasp-system"]).stdout;
    let logs = cluster.kubectl(&["logs", "-n", "wasp-system", "-l", "app.kubernetes.io/name=wasp", "--tail=30"]).stdout;
    format!("{described}\n--- logs\n{logs}")
}

/// Creates a pod that runs the pause image (on every node) with `scheduler`, and returns the node the API server
/// recorded its binding to.
fn bound_node(cluster: &ControlPlane, name: &str, scheduler: &str) -> String {
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: {scheduler}\n  terminationGracePeriodSeconds: 0\n  containers:\n  - {{name: pause, image: 'registry.k8s.io/pause:3.10.2', imagePullPolicy: Never, resources: {{requests: {{cpu: 10m}}}}}}\n"
    );
    let created = cluster.kubectl_input(&["create", "-f", "-"], &pod);
    assert!(created.ok, "{}", created.stderr);
    let mut node = String::new();
    wait_for(&format!("pod {name} bound"), Duration::from_secs(60), || {
        node = cluster.kubectl(&["get", "pod", name, "-o", "jsonpath={.spec.nodeName}"]).stdout;
        !node.is_empty()
    });
    // Bound is what counts; its container need not keep running.
    cluster.kubectl(&["delete", "pod", name, "--wait=false"]);
    node
}

/// A ConfigMap of policy files applied as a user would: server-side (a client-side apply of a component
/// overflows the 256 KiB last-applied annotation).
fn apply_policies(cluster: &ControlPlane, config_map: &str, file: &str, path: &Path) {
    let document = cluster.must(&["create", "configmap", config_map, "-n", "wasp-system", &format!("--from-file={file}={}", path.display()), "--dry-run=client", "-o", "yaml"]);
    let applied = cluster.kubectl_input(&["apply", "--server-side", "-f", "-"], &document);
    assert!(applied.ok, "{}", applied.stderr);
}

#[test]
fn the_readme_install_runs_on_real_nodes_and_a_new_policy_version_comes_through_the_kubelet() {
    const TEST: &str = "the_readme_install_runs_on_real_nodes_and_a_new_policy_version_comes_through_the_kubelet";
    if !real_nodes_available(TEST) {
        return;
    }
    let images = tempfile::tempdir().unwrap();
    let image = wasp_image(images.path());
    // A 10 s kubelet sync (the default is 1 min): how soon a ConfigMap volume follows its ConfigMap.
    let started = Instant::now();
    let cluster = ControlPlane::start_with(&["--real-nodes", "2", "--kube-scheduler", "--kubelet-sync-frequency", "10s", "--image", image.to_str().unwrap()]);
    eprintln!("control plane and 2 real nodes in {:.1}s", started.elapsed().as_secs_f64());
    let nodes = cluster.get_json(&["get", "nodes"]);
    for node in nodes["items"].as_array().unwrap() {
        assert_eq!(node["status"]["nodeInfo"]["containerRuntimeVersion"], "containerd://2.4.2", "{node}");
    }

    // 1. The README's install: two replicas through the real probes, on the real nodes, one per node.
    let installed = Instant::now();
    readme_install(&cluster);
    let mut pods = Vec::new();
    let patience = Duration::from_secs(300);
    while installed.elapsed() < patience {
        pods = wasp_pods(&cluster);
        if pods.len() == 2 && pods.iter().all(ready) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(pods.len() == 2 && pods.iter().all(ready), "wasp's pods not Ready after {patience:?}:\n{}", diagnosis(&cluster));
    eprintln!("both replicas Ready {:.1}s after the install", installed.elapsed().as_secs_f64());
    let mut hosts: Vec<&str> = pods.iter().map(|pod| pod["spec"]["nodeName"].as_str().unwrap()).collect();
    hosts.sort();
    assert_eq!(hosts, ["realnode-1", "realnode-2"], "one replica per node (the Deployment's spread)");
    assert!(pods.iter().all(|pod| restarts(pod) == 0), "{}", diagnosis(&cluster));
    // The host's log, read through the kubelet: one leads, the other stands by.
    let logs: Vec<String> = pods.iter().map(|pod| cluster.must(&["logs", "-n", "wasp-system", pod["metadata"]["name"].as_str().unwrap()])).collect();
    assert!(logs.iter().all(|log| log.contains("connected to the API server")), "{logs:?}");
    assert_eq!(logs.iter().filter(|log| log.contains("became leader")).count(), 1, "{logs:?}");
    let uids: Vec<String> = pods.iter().map(|pod| pod["metadata"]["uid"].as_str().unwrap().to_string()).collect();

    // 2. A policy of the user's own, then a new version of it, through the kubelet's ConfigMap projection.
    cluster.must(&["label", "node", "realnode-1", "topology.kubernetes.io/zone=east"]);
    cluster.must(&["label", "node", "realnode-2", "topology.kubernetes.io/zone=west"]);
    let fixtures = common::repo_root().join("target/wasm-fixtures");
    apply_policies(&cluster, "wasp-policies-1", "zone-pin.wasm", &fixtures.join("zone-pin-east.wasm"));
    let config = cluster.must(&["get", "configmap", "wasp-config", "-n", "wasp-system", "-o", "jsonpath={.data.config\\.yaml}"]);
    assert!(config.contains("  profiles:\n"), "{config}");
    let pinned = config.replace("  profiles:\n", "  profiles:\n  - schedulerName: wasp-pinned\n    filters: [resources-fit, zone-pin]\n");
    let edited = cluster.must(&["create", "configmap", "wasp-config", "-n", "wasp-system", "--from-literal", &format!("config.yaml={pinned}"), "--dry-run=client", "-o", "yaml"]);
    let applied = cluster.kubectl_input(&["apply", "--server-side", "--force-conflicts", "-f", "-"], &edited);
    assert!(applied.ok, "{}", applied.stderr);
    let first = Instant::now();
    assert_eq!(bound_node(&cluster, "pinned-0", "wasp-pinned"), "realnode-1", "the east build places on the east node");
    eprintln!("the new profile and its policy deciding {:.1}s after the apply", first.elapsed().as_secs_f64());

    // The west build: until the kubelet has projected it, the east one keeps deciding; then the west one.
    apply_policies(&cluster, "wasp-policies-1", "zone-pin.wasm", &fixtures.join("zone-pin-west.wasm"));
    let swapped = Instant::now();
    let mut east_after_apply = 0;
    let mut probe = 1;
    loop {
        let node = bound_node(&cluster, &format!("pinned-{probe}"), "wasp-pinned");
        probe += 1;
        if node == "realnode-2" {
            break;
        }
        assert_eq!(node, "realnode-1");
        east_after_apply += 1;
        assert!(swapped.elapsed() < Duration::from_secs(120), "the west build not deciding 120 s after the apply");
    }
    let took = swapped.elapsed();
    eprintln!("ConfigMap apply to the new version deciding: {:.1}s ({east_after_apply} pods placed by the old version meanwhile)", took.as_secs_f64());

    // A broken version is refused where the pods record it, and the last good one keeps deciding.
    let broken = images.path().join("broken.wasm");
    std::fs::write(&broken, b"\0asm not a component").unwrap();
    apply_policies(&cluster, "wasp-policies-1", "zone-pin.wasm", &broken);
    wait_for("a PolicyReloadFailed event", Duration::from_secs(120), || {
        let events = cluster.get_json(&["get", "events", "-n", "wasp-system", "--field-selector", "reason=PolicyReloadFailed"]);
        events["items"].as_array().is_some_and(|items| items.iter().any(|event| event["message"].as_str().is_some_and(|message| message.contains("zone-pin"))))
    });
    assert_eq!(bound_node(&cluster, &format!("pinned-{probe}"), "wasp-pinned"), "realnode-2", "the last good version keeps deciding");

    // The same two processes all along.
    let after = wasp_pods(&cluster);
    assert_eq!(after.iter().map(|pod| pod["metadata"]["uid"].as_str().unwrap().to_string()).collect::<Vec<_>>(), uids);
    assert!(after.iter().all(|pod| restarts(pod) == 0 && ready(pod)), "{}", diagnosis(&cluster));

    // Torn down, nothing is left on the machine: the sandbox's cgroups are gone with it.
    let pid = cluster.pid();
    drop(cluster);
    let left: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .filter_map(|hierarchy| {
            let folder = hierarchy.ok()?.path().join(format!("wasp-controlplane-{pid}"));
            folder.exists().then(|| folder.display().to_string())
        })
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
}
