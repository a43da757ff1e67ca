//! wasp on real nodes: `wasp-controlplane --real-nodes 2` runs two real kubelets (containerd, runc, a CNI bridge
//! each) beside the control plane, in namespaces of their own (controlplane/sandbox.go). wasp's image is assembled
//! from the test build (scripts/build-image.sh) and loaded into the nodes; the install is the README's (the
//! manifests, then the Helm chart in their place), and the pods run through the real kubelet: its probes, its
//! mounts, its ConfigMap projection. Every count comes from the
//! API server (pods' status, bindings, events), none from wasp's logs.
//!
//! They need root and the node programs (scripts/build-node.sh); outside CI (no `CI` in the environment) a
//! machine without them skips with a message.

mod common;

use common::control_plane::{wait_for, wait_for_or_explain, ControlPlane};
use common::install::{create_policy_bundle, readme_install};
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
    common::built("target/node/kubelet", "build the node programs with scripts/build-node.sh")
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
    let find =
        |name: &str| outer.iter().find(|(path, _)| path == name).map(|(_, bytes)| bytes.clone()).unwrap_or_else(|| panic!("{name} not in the image tar"));
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
    let line =
        |prefix: &str| dockerfile.lines().rev().find(|line| line.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in the Dockerfile")).to_string();
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

/// Whether an event `kubectl get events ARGS` lists says `needle`.
fn has_event(cluster: &ControlPlane, args: &[&str], needle: &str) -> bool {
    let events = cluster.get_json(&[&["get", "events"], args].concat());
    events["items"].as_array().is_some_and(|items| items.iter().any(|event| event["message"].as_str().is_some_and(|message| message.contains(needle))))
}

/// A pause pod of the profile `wasp-pinned` (zone-pin's), from the image loaded into the nodes.
fn run_pinned(cluster: &ControlPlane, name: &str) {
    let created = cluster.kubectl(&[
        "run",
        name,
        "--image=registry.k8s.io/pause:3.10.2",
        "--image-pull-policy=Never",
        r#"--overrides={"spec":{"schedulerName":"wasp-pinned"}}"#,
    ]);
    assert!(created.ok, "{}", created.stderr);
}

/// What to read when wasp's pods did not come up: every pod and node, wasp's pods described, their logs' tails.
fn diagnosis(cluster: &ControlPlane) -> String {
    let everything = cluster.kubectl(&["get", "pods,replicasets,nodes", "-A", "-o", "wide"]).stdout;
    let described = everything + &cluster.kubectl(&["describe", "pods", "-n", "wasp-system"]).stdout;
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
    let document = cluster.must(&[
        "create",
        "configmap",
        config_map,
        "-n",
        "wasp-system",
        &format!("--from-file={file}={}", path.display()),
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    let applied = cluster.kubectl_input(&["apply", "--server-side", "-f", "-"], &document);
    assert!(applied.ok, "{}", applied.stderr);
}

/// A busybox image (Debian's static busybox), for workloads with a real readiness probe.
fn busybox_image(dir: &Path) -> PathBuf {
    let out = dir.join("busybox.tar");
    let controlplane = common::control_plane::binary();
    let built = Command::new(controlplane)
        .args(["image", "--tag", BUSYBOX, "--entrypoint", "/bin/busybox", "--user", "65532", "--file", "/bin/busybox=/bin/busybox", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(built.status.success(), "the busybox image: {}", String::from_utf8_lossy(&built.stderr));
    out
}

const BUSYBOX: &str = "wasp.dev/busybox:test";

/// The container `app` of pod `name` as the kubelet reports it: its requested CPU, its allocated CPU, its restarts.
fn reported_cpu(cluster: &ControlPlane, name: &str) -> (Value, Value, u64) {
    let pod = cluster.get_json(&["get", "pod", name, "-n", "default"]);
    let status = &pod["status"]["containerStatuses"][0];
    (status["resources"]["requests"]["cpu"].clone(), status["allocatedResources"]["cpu"].clone(), restarts(&pod))
}

/// The CPU limit of the cgroup of the one process on this machine whose command line is `command`, as cgroup
/// v2's `cpu.max` says it (`QUOTA PERIOD`), read from the machine's side (the image mounts no cgroup file system
/// in the container); on a cgroup v1 machine, from the cpu hierarchy's `cpu.cfs_quota_us` and `cpu.cfs_period_us`.
fn container_cpu_max(command: &[&str]) -> String {
    let wanted = command.join("\0") + "\0";
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok()?.parse::<u32>().ok())
        .find(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| line == wanted.as_bytes()))
        .unwrap_or_else(|| panic!("no process runs {command:?}"));
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path_of = |controller: &str| {
        cgroups.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers.split(',').any(|name| name == controller).then(|| path.to_string())
        })
    };
    let read = |file: String| std::fs::read_to_string(&file).unwrap_or_else(|error| panic!("{file}: {error}")).trim().to_string();
    match path_of("cpu") {
        Some(path) => format!("{} {}", read(format!("/sys/fs/cgroup/cpu{path}/cpu.cfs_quota_us")), read(format!("/sys/fs/cgroup/cpu{path}/cpu.cfs_period_us"))),
        None => read(format!("/sys/fs/cgroup{}/cpu.max", path_of("").unwrap_or_else(|| panic!("process {pid}: no cgroup in {cgroups:?}")))),
    }
}

/// In-place resize through a real kubelet: a resize within the node's room is applied to the running container
/// (its cgroup's CPU limit changes, it does not restart); a resize past what the node has left is `Deferred`, and
/// the node holds it for wasp as for kube-scheduler until it is taken back. (A resize past the node's allocatable
/// is refused by the API server in 1.37, so a real kubelet's `Infeasible` is not reached here; the unit tests of
/// `cluster::convert::resize` and tests/real_cluster.rs cover the counting when the status holds more.)
/// Counted from what the kubelet reported, what the container's cgroup says and the bindings the API server holds.
fn a_pod_is_resized_in_place_by_the_kubelet_and_wasp_counts_what_it_holds(cluster: &ControlPlane) {
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: resizable, namespace: default}}\nspec:\n  schedulerName: wasp\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    command: [/bin/busybox, sleep, '3601']\n    resources: {{requests: {{cpu: 100m, memory: 8Mi}}, limits: {{cpu: 200m}}}}\n"
    );
    let created = cluster.kubectl_input(&["create", "-f", "-"], &manifest);
    assert!(created.ok, "{}", created.stderr);
    let running = || cluster.get_json(&["get", "pod", "resizable", "-n", "default"])["status"]["phase"] == "Running";
    wait_for_or_explain("resizable Running", Duration::from_secs(120), running, || diagnosis(cluster));
    let cpu_max = || container_cpu_max(&["/bin/busybox", "sleep", "3601"]);
    assert_eq!(cpu_max(), "20000 100000", "the 200m limit in the container's cgroup");

    let resize = |cpu: &str, limit: &str| {
        let patch = format!(r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{cpu}"}},"limits":{{"cpu":"{limit}"}}}}}}]}}}}"#);
        cluster.must(&["patch", "pod", "resizable", "-n", "default", "--subresource", "resize", "-p", &patch]);
    };
    resize("200m", "400m");
    wait_for_or_explain(
        "the kubelet reports the resize done",
        Duration::from_secs(60),
        || {
            let (requested, allocated, _) = reported_cpu(cluster, "resizable");
            requested == "200m" && allocated == "200m"
        },
        || cluster.kubectl(&["get", "pod", "resizable", "-n", "default", "-o", "yaml"]).stdout,
    );
    assert_eq!(cpu_max(), "40000 100000", "the new limit in the running container's cgroup");
    assert_eq!(reported_cpu(cluster, "resizable").2, 0, "resized in place, not restarted");

    // Up to the node's whole allocatable CPU, more than the other pods there leave: the kubelet defers it, and
    // the node holds the new spec (kube-scheduler reserves it before the kubelet can apply it). A pinned pod of
    // each scheduler waits; the resize taken back, both are bound.
    resize("2", "2");
    let deferred = || {
        let pod = cluster.get_json(&["get", "pod", "resizable", "-n", "default"]);
        pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|condition| condition["type"] == "PodResizePending" && condition["reason"] == "Deferred")
    };
    wait_for_or_explain("PodResizePending Deferred", Duration::from_secs(60), deferred, || {
        cluster.kubectl(&["get", "pod", "resizable", "-n", "default", "-o", "yaml"]).stdout
    });
    assert_eq!(reported_cpu(cluster, "resizable").1, "200m", "the allocation kept while deferred");
    let node = cluster.get_json(&["get", "pod", "resizable", "-n", "default"])["spec"]["nodeName"].as_str().unwrap().to_string();
    let beside = [("beside-resized", "wasp"), ("ks-beside-resized", "default-scheduler")];
    for (name, scheduler) in beside {
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: {scheduler}\n  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  terminationGracePeriodSeconds: 0\n  containers:\n  - {{name: pause, image: 'registry.k8s.io/pause:3.10.2', imagePullPolicy: Never, resources: {{requests: {{cpu: 100m}}}}}}\n"
        );
        let created = cluster.kubectl_input(&["create", "-f", "-"], &pod);
        assert!(created.ok, "{}", created.stderr);
    }
    for (name, _) in beside {
        let told = || {
            let pod = cluster.get_json(&["get", "pod", name, "-n", "default"]);
            let scheduled = pod["status"]["conditions"].as_array().into_iter().flatten().find(|condition| condition["type"] == "PodScheduled").cloned();
            scheduled.is_some_and(|condition| condition["status"] == "False" && condition["message"].as_str().unwrap_or_default().contains("Insufficient cpu"))
        };
        wait_for_or_explain(&format!("{name} waits for the room the deferred resize holds"), Duration::from_secs(60), told, || {
            cluster.kubectl(&["get", "pod", name, "-n", "default", "-o", "yaml"]).stdout
        });
        assert_eq!(cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"], Value::Null, "{name} bound");
    }
    resize("200m", "400m");
    for (name, _) in beside {
        let bound = || cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"] == node.as_str();
        wait_for_or_explain(&format!("{name} bound once the resize is taken back"), Duration::from_secs(60), bound, || {
            cluster.kubectl(&["get", "pod", name, "-n", "default", "-o", "yaml"]).stdout
        });
    }
    assert_eq!(reported_cpu(cluster, "resizable").2, 0, "never restarted");
    cluster.kubectl(&["delete", "pod", "resizable", "beside-resized", "ks-beside-resized", "-n", "default", "--wait=false"]);
}

/// The users' Deployment: `replicas` busybox web servers scheduled by `scheduler`, Ready once their HTTP
/// readiness probe answers (a second or two after the container starts), with a PodDisruptionBudget allowing one
/// of them down.
fn web_deployment(name: &str, replicas: u32, scheduler: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      schedulerName: {scheduler}
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: {BUSYBOX}
        imagePullPolicy: Never
        command: [/bin/busybox, httpd, -f, -p, "8080", -h, /]
        resources: {{requests: {{cpu: 10m, memory: 8Mi}}}}
        readinessProbe: {{httpGet: {{path: /etc/passwd, port: 8080}}, initialDelaySeconds: 1, periodSeconds: 1}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {name}, namespace: default}}
spec:
  maxUnavailable: 1
  selector: {{matchLabels: {{app: {name}}}}}
"#
    )
}

fn available(cluster: &ControlPlane, deployment: &str, namespace: &str) -> u64 {
    let found = cluster.get_json(&["get", "deployment", deployment, "-n", namespace]);
    found["status"]["availableReplicas"].as_u64().unwrap_or(0)
}

/// `wasp ARGS` inside the sandbox's mount and network namespaces (where the pods' addresses are), as the
/// sandbox's admin.
fn wasp_in_sandbox(cluster: &ControlPlane, args: &[&str]) -> std::process::Output {
    let sandbox = cluster.printed("sandbox pid").expect("wasp-controlplane printed its sandbox");
    let kubeconfig = cluster.printed("sandbox admin kubeconfig").expect("wasp-controlplane printed the sandbox's kubeconfig");
    Command::new("nsenter").args(["-t", sandbox, "-m", "-n", "--"]).arg(env!("CARGO_BIN_EXE_wasp")).args(args).env("KUBECONFIG", kubeconfig).output().unwrap()
}

#[test]
fn wasp_runs_on_real_nodes_as_the_readme_installs_it() {
    if !common::can_run(&[missing_prerequisite(), common::control_plane::missing()]) {
        return;
    }
    let images = tempfile::tempdir().unwrap();
    let (wasp, busybox) = (wasp_image(images.path()), busybox_image(images.path()));
    // A 10 s kubelet sync (the default is 1 min): how soon a ConfigMap volume follows its ConfigMap.
    let started = Instant::now();
    let flags =
        ["--real-nodes", "2", "--kube-scheduler", "--kubelet-sync-frequency", "10s", "--image", wasp.to_str().unwrap(), "--image", busybox.to_str().unwrap()];
    let cluster = ControlPlane::start_with(&flags);
    eprintln!("control plane and 2 real nodes in {:.1}s", started.elapsed().as_secs_f64());
    let nodes = cluster.get_json(&["get", "nodes"]);
    for node in nodes["items"].as_array().unwrap() {
        assert_eq!(node["status"]["nodeInfo"]["containerRuntimeVersion"], "containerd://2.4.2", "{node}");
    }

    let uids = the_readme_install_runs_two_ready_replicas(&cluster);
    the_api_server_calls_the_webhooks_through_their_service(&cluster);
    let placed = a_policy_version_comes_through_the_kubelets_projection(&cluster, images.path(), &uids);
    explain_answers_from_the_pod_network(&cluster, &placed);
    a_pod_is_resized_in_place_by_the_kubelet_and_wasp_counts_what_it_holds(&cluster);
    the_rescheduler_drains_a_real_node_within_its_budget(&cluster);
    the_standby_leads_at_once_on_a_rollout_and_a_drain(&cluster, |cluster| replicas_started_beside_a_broken_policy_serve_the_rest(cluster, &uids));
    the_webhooks_fail_open_without_replicas(&cluster);
    the_helm_chart_runs_two_ready_replicas_in_place_of_the_manifests(&cluster);

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

/// The README's install: two replicas through the real probes, on the real nodes, one per node; the host's log
/// through the kubelet. Returns the pods' UIDs.
fn the_readme_install_runs_two_ready_replicas(cluster: &ControlPlane) -> Vec<String> {
    let installed = Instant::now();
    readme_install(cluster);
    let mut pods = Vec::new();
    let both_ready = || {
        pods = wasp_pods(cluster);
        pods.len() == 2 && pods.iter().all(ready)
    };
    wait_for_or_explain("both wasp replicas Ready", Duration::from_secs(300), both_ready, || diagnosis(cluster));
    eprintln!("both replicas Ready {:.1}s after the install", installed.elapsed().as_secs_f64());
    let mut hosts: Vec<&str> = pods.iter().map(|pod| pod["spec"]["nodeName"].as_str().unwrap()).collect();
    hosts.sort();
    assert_eq!(hosts, ["realnode-1", "realnode-2"], "one replica per node (the Deployment's spread)");
    assert!(pods.iter().all(|pod| restarts(pod) == 0), "{}", diagnosis(cluster));
    // One leads, the other stands by.
    let logs: Vec<String> = pods.iter().map(|pod| cluster.must(&["logs", "-n", "wasp-system", pod["metadata"]["name"].as_str().unwrap()])).collect();
    assert!(logs.iter().all(|log| log.contains("connected to the API server")), "{logs:?}");
    assert_eq!(logs.iter().filter(|log| log.contains("became leader")).count(), 1, "{logs:?}");
    pods.iter().map(|pod| pod["metadata"]["uid"].as_str().unwrap().to_string()).collect()
}

/// The webhooks, served by the pods: the API server reaches them through their Service's endpoints.
fn the_api_server_calls_the_webhooks_through_their_service(cluster: &ControlPlane) {
    let typo = cluster.kubectl(&["run", "typo", "--image=registry.k8s.io/pause:3.10.2", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(!typo.ok, "the typo pod was created");
    assert!(typo.stderr.contains(r#"denied the request: no scheduler named "wsap" runs in this cluster"#), "{}", typo.stderr);
    cluster.must(&["create", "namespace", "team-a"]);
    cluster.must(&["annotate", "namespace", "team-a", "wasp.dev/scheduler=wasp"]);
    cluster.must(&["run", "chosen", "-n", "team-a", "--image=registry.k8s.io/pause:3.10.2", "--image-pull-policy=Never"]);
    let pod = cluster.get_json(&["get", "pod", "chosen", "-n", "team-a"]);
    assert_eq!(pod["spec"]["schedulerName"], "wasp", "the namespace's scheduler, given by the mutating webhook: {pod}");
    wait_for("team-a/chosen Running on a real node", Duration::from_secs(60), || {
        cluster.get_json(&["get", "pod", "chosen", "-n", "team-a"])["status"]["phase"] == "Running"
    });
}

/// A policy of the user's own, then a new version of it, through the kubelet's ConfigMap projection; a broken
/// version refused, the last good one deciding; the same two processes all along. Returns a pod the last good
/// version placed (default/NAME).
fn a_policy_version_comes_through_the_kubelets_projection(cluster: &ControlPlane, dir: &Path, uids: &[String]) -> String {
    cluster.must(&["label", "node", "realnode-1", "topology.kubernetes.io/zone=east"]);
    cluster.must(&["label", "node", "realnode-2", "topology.kubernetes.io/zone=west"]);
    let fixtures = common::repo_root().join("target/wasm-fixtures");
    apply_policies(cluster, "wasp-policies-1", "zone-pin.wasm", &fixtures.join("zone-pin-east.wasm"));
    let config = cluster.must(&["get", "configmap", "wasp-config", "-n", "wasp-system", "-o", "jsonpath={.data.config\\.yaml}"]);
    assert!(config.contains("  profiles:\n"), "{config}");
    let pinned = config.replace("  profiles:\n", "  profiles:\n  - schedulerName: wasp-pinned\n    filters: [resources-fit, zone-pin]\n");
    let edited = cluster.must(&[
        "create",
        "configmap",
        "wasp-config",
        "-n",
        "wasp-system",
        "--from-literal",
        &format!("config.yaml={pinned}"),
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    let applied = cluster.kubectl_input(&["apply", "--server-side", "--force-conflicts", "-f", "-"], &edited);
    assert!(applied.ok, "{}", applied.stderr);
    let first = Instant::now();
    assert_eq!(bound_node(cluster, "pinned-0", "wasp-pinned"), "realnode-1", "the east build places on the east node");
    eprintln!("the new profile and its policy deciding {:.1}s after the apply", first.elapsed().as_secs_f64());

    // The west build: until the kubelet has projected it, the east one keeps deciding; then the west one.
    apply_policies(cluster, "wasp-policies-1", "zone-pin.wasm", &fixtures.join("zone-pin-west.wasm"));
    let swapped = Instant::now();
    let mut east_after_apply = 0;
    let mut probe = 1;
    loop {
        let node = bound_node(cluster, &format!("pinned-{probe}"), "wasp-pinned");
        probe += 1;
        if node == "realnode-2" {
            break;
        }
        assert_eq!(node, "realnode-1");
        east_after_apply += 1;
        assert!(swapped.elapsed() < Duration::from_secs(120), "the west build not deciding 120 s after the apply");
    }
    eprintln!(
        "ConfigMap apply to the new version deciding: {:.1}s ({east_after_apply} pods placed by the old version meanwhile)",
        swapped.elapsed().as_secs_f64()
    );

    // A broken version is refused where the pods record it, and the last good one keeps deciding.
    let broken = dir.join("broken.wasm");
    std::fs::write(&broken, b"\0asm not a component").unwrap();
    apply_policies(cluster, "wasp-policies-1", "zone-pin.wasm", &broken);
    wait_for("a PolicyReloadFailed event", Duration::from_secs(120), || {
        has_event(cluster, &["-n", "wasp-system", "--field-selector", "reason=PolicyReloadFailed"], "zone-pin")
    });
    let kept = "kept-west";
    run_pinned(cluster, kept);
    wait_for("the pod placed by the last good version", Duration::from_secs(60), || {
        cluster.kubectl(&["get", "pod", kept, "-o", "jsonpath={.spec.nodeName}"]).stdout == "realnode-2"
    });

    // The broken version stays in the ConfigMap for the rollout below: replicas that start beside it must serve.
    let after = wasp_pods(cluster);
    assert_eq!(after.iter().map(|pod| pod["metadata"]["uid"].as_str().unwrap().to_string()).collect::<Vec<_>>(), uids);
    assert!(after.iter().all(|pod| restarts(pod) == 0 && ready(pod)), "{}", diagnosis(cluster));
    format!("default/{kept}")
}

/// `wasp explain` finds the leader by its Lease and asks it at its pod's address, reachable inside the sandbox.
fn explain_answers_from_the_pod_network(cluster: &ControlPlane, pod: &str) {
    let explained = wasp_in_sandbox(cluster, &["explain", "pod", pod]);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(explained.status.success(), "wasp explain: {}{}", text, String::from_utf8_lossy(&explained.stderr));
    assert!(text.contains("realnode-2"), "{text}");
    assert!(text.contains("node(s) not in zone west"), "the other node's refusal, by the policy version that placed it: {text}");
}

/// wasp's maintenance drain of a real node: one pod of the workload at a time, the next once the replacement
/// is Ready through its probe, never past the PodDisruptionBudget; the node ends up empty of the workload.
fn the_rescheduler_drains_a_real_node_within_its_budget(cluster: &ControlPlane) {
    let created = cluster.kubectl_input(&["create", "-f", "-"], &web_deployment("web", 4, "wasp"));
    assert!(created.ok, "{}", created.stderr);
    wait_for("web available", Duration::from_secs(120), || available(cluster, "web", "default") == 4);
    let on = |node: &str| {
        let pods = cluster.get_json(&["get", "pods", "-l", "app=web"]);
        pods["items"].as_array().unwrap().iter().filter(|pod| pod["spec"]["nodeName"] == node && pod["metadata"]["deletionTimestamp"].is_null()).count()
    };
    let (drained, before) = if on("realnode-1") >= on("realnode-2") { ("realnode-1", on("realnode-1")) } else { ("realnode-2", on("realnode-2")) };
    assert!(before > 0);
    let least_ready = LeastReady::watch(cluster, &["-n", "default", "-l", "app=web"]);
    let started = Instant::now();
    cluster.must(&["label", "node", drained, "wasp.dev/maintenance=test"]);
    wait_for(&format!("{drained} emptied of web"), Duration::from_secs(180), || on(drained) == 0 && available(cluster, "web", "default") == 4);
    let least = least_ready.stop();
    eprintln!("wasp drained {before} web pods from {drained} in {:.1}s", started.elapsed().as_secs_f64());
    assert!(least >= 3, "the budget allows one web pod down; {least} of 4 were Ready at one time");
    // Every eviction went through the Eviction API, one per pod, from wasp.
    let evictions: Vec<_> =
        cluster.audit().into_iter().filter(|event| event.subresource() == "eviction" && event.verb() == "create" && event.code() == 201).collect();
    assert_eq!(evictions.len(), before, "{:?}", evictions.iter().map(|event| event.name().to_string()).collect::<Vec<_>>());
    assert!(evictions.iter().all(|event| event.user() == WASP_USER), "evictions by someone else");
    cluster.must(&["label", "node", drained, "wasp.dev/maintenance-"]);
}

/// The fewest Ready pods (not being deleted) of a selection that a poller of the API server saw, from `watch` to
/// `stop`.
struct LeastReady {
    least: std::sync::Arc<std::sync::atomic::AtomicU64>,
    watching: std::sync::Arc<std::sync::atomic::AtomicBool>,
    poller: std::thread::JoinHandle<()>,
}

impl LeastReady {
    /// `selection`: kubectl's namespace and label selector arguments.
    fn watch(cluster: &ControlPlane, selection: &[&str]) -> LeastReady {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let least = std::sync::Arc::new(AtomicU64::new(u64::MAX));
        let watching = std::sync::Arc::new(AtomicBool::new(true));
        let args: Vec<String> = ["get", "pods", "-o", "json"].iter().chain(selection).map(|arg| arg.to_string()).collect();
        let (kubeconfig, seen, still) = (cluster.kubeconfig.clone(), least.clone(), watching.clone());
        let poller = std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            while still.load(Ordering::Relaxed) {
                let pods = common::control_plane::kubectl_with(&kubeconfig, &args, None);
                if let Ok(pods) = serde_json::from_str::<Value>(&pods.stdout) {
                    let count = pods["items"].as_array().unwrap().iter().filter(|pod| ready(pod) && pod["metadata"]["deletionTimestamp"].is_null()).count();
                    seen.fetch_min(count as u64, Ordering::Relaxed);
                }
            }
        });
        LeastReady { least, watching, poller }
    }

    fn stop(self) -> u64 {
        self.watching.store(false, std::sync::atomic::Ordering::Relaxed);
        self.poller.join().unwrap();
        self.least.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The `wasp` ServiceAccount's user name, as the API server records it.
const WASP_USER: &str = "system:serviceaccount:wasp-system:wasp";

/// A rollout restart, then `kubectl drain` of the leader's node: the leader stops on the real SIGTERM after its
/// preStop and releases the Lease, the standby takes it within 2 s, no pod is bound by two replicas, and wasp's
/// own budget keeps a replica Ready throughout. `between` runs after the rollout, before the drain.
fn the_standby_leads_at_once_on_a_rollout_and_a_drain(cluster: &ControlPlane, between: impl FnOnce(&ControlPlane)) {
    // Scheduling work through both handovers.
    let created = cluster.kubectl_input(&["create", "-f", "-"], &web_deployment("work", 2, "wasp"));
    assert!(created.ok, "{}", created.stderr);
    wait_for("work available", Duration::from_secs(120), || available(cluster, "work", "default") == 2);
    let least_ready = LeastReady::watch(cluster, &["-n", "wasp-system", "-l", "app.kubernetes.io/name=wasp"]);
    cluster.must(&["rollout", "restart", "deployment/wasp-scheduler", "-n", "wasp-system"]);
    cluster.must(&["scale", "deployment/work", "--replicas=6"]);
    let rolled = cluster.kubectl(&["rollout", "status", "deployment/wasp-scheduler", "-n", "wasp-system", "--timeout=300s"]);
    assert!(rolled.ok, "the rollout: {}\n{}", rolled.stderr, diagnosis(cluster));
    wait_for("work scaled to 6", Duration::from_secs(120), || available(cluster, "work", "default") == 6);
    between(cluster);

    let holder = cluster.must(&["get", "lease", "wasp-scheduler", "-n", "wasp-system", "-o", "jsonpath={.spec.holderIdentity}"]);
    let leader = holder.split('_').next().unwrap().to_string();
    let node = cluster.must(&["get", "pod", &leader, "-n", "wasp-system", "-o", "jsonpath={.spec.nodeName}"]);
    cluster.must(&["scale", "deployment/work", "--replicas=10"]);
    let drained = cluster.kubectl(&["drain", &node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=300s"]);
    assert!(drained.ok, "kubectl drain {node}: {}", drained.stderr);
    cluster.must(&["uncordon", &node]);
    wait_for("two wasp replicas Ready", Duration::from_secs(300), || {
        let pods = wasp_pods(cluster);
        pods.len() == 2 && pods.iter().all(ready)
    });
    wait_for("work scaled to 10", Duration::from_secs(180), || available(cluster, "work", "default") == 10);
    let least = least_ready.stop();
    assert!(least >= 1, "no wasp replica was Ready at one time (its PodDisruptionBudget keeps one)");

    // From the audit log: who wrote the Lease, from which pod address, and when.
    let audit = cluster.audit();
    let source = |event: &common::control_plane::AuditEvent| event.0["sourceIPs"][0].as_str().unwrap_or("").to_string();
    let at = |event: &common::control_plane::AuditEvent| event.0["stageTimestamp"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    let writes: Vec<_> = audit
        .iter()
        .filter(|event| {
            event.resource() == "leases" && event.name() == "wasp-scheduler" && ["update", "create", "patch"].contains(&event.verb()) && event.code() < 300
        })
        .collect();
    let mut handovers = Vec::new();
    for pair in writes.windows(2) {
        if source(pair[0]) != source(pair[1]) {
            handovers.push(at(pair[1]).duration_since(at(pair[0])).as_secs_f64());
        }
    }
    eprintln!("Lease handovers (s): {handovers:?}");
    assert!(handovers.len() >= 2, "the rollout and the drain each moved the Lease: {handovers:?}");
    assert!(handovers.iter().all(|gap| *gap < 2.0), "a standby took more than 2 s to lead: {handovers:?}");
    // No pod was bound by two replicas: each pod's binding requests came from one address.
    let mut binders: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for event in audit.iter().filter(|event| event.subresource() == "binding" && event.user() == WASP_USER) {
        binders.entry(format!("{}/{}", event.namespace(), event.name())).or_default().insert(source(event));
    }
    assert!(binders.len() >= 10, "{binders:?}");
    let twice: Vec<_> = binders.iter().filter(|(_, sources)| sources.len() > 1).collect();
    assert!(twice.is_empty(), "pods bound by two replicas: {twice:?}");
}

/// After the rollout with the broken zone-pin in the ConfigMap (the replicas turned Ready: the rollout finished):
/// the start-up refusal is an event, the profile that uses zone-pin waits on its failure mode with the reason,
/// and the first good version to come through the projection places that pod, without a restart.
fn replicas_started_beside_a_broken_policy_serve_the_rest(cluster: &ControlPlane, old_uids: &[String]) {
    // The old replicas may still be finishing their grace period.
    let serving: Vec<Value> = wasp_pods(cluster).into_iter().filter(|pod| pod["metadata"]["deletionTimestamp"].is_null()).collect();
    assert!(serving.iter().all(|pod| !old_uids.contains(&pod["metadata"]["uid"].as_str().unwrap().to_string())), "the rollout replaced both replicas");
    wait_for("a PolicyRefusedAtStart event naming zone-pin", Duration::from_secs(60), || {
        has_event(cluster, &["-n", "wasp-system", "--field-selector", "reason=PolicyRefusedAtStart"], "zone-pin.wasm: does not compile")
    });
    // An old replica leads through its 5 s preStop, serving the good version it had: the pod waits for a new leader.
    let new_names: Vec<String> = serving.iter().map(|pod| pod["metadata"]["name"].as_str().unwrap().to_string()).collect();
    wait_for("a new replica holding the Lease", Duration::from_secs(60), || {
        let holder = cluster.kubectl(&["get", "lease", "wasp-scheduler", "-n", "wasp-system", "-o", "jsonpath={.spec.holderIdentity}"]).stdout;
        new_names.iter().any(|name| holder.split('_').next() == Some(name.as_str()))
    });
    let waiting = "waits-for-zone-pin";
    run_pinned(cluster, waiting);
    let failed_by_stand_in =
        || has_event(cluster, &["--field-selector", &format!("involvedObject.name={waiting},reason=FailedScheduling")], "policy zone-pin failed");
    let explain = || {
        let pod = cluster.kubectl(&["describe", "pod", waiting]).stdout;
        let lease = cluster.kubectl(&["get", "lease", "wasp-scheduler", "-n", "wasp-system", "-o", "yaml"]).stdout;
        format!("--- the pinned pod\n{pod}\n--- the Lease\n{lease}\n{}", diagnosis(cluster))
    };
    wait_for_or_explain("the pinned pod's FailedScheduling by the stand-in's failure mode", Duration::from_secs(60), failed_by_stand_in, explain);
    let fixed = Instant::now();
    apply_policies(cluster, "wasp-policies-1", "zone-pin.wasm", &common::repo_root().join("target/wasm-fixtures/zone-pin-west.wasm"));
    wait_for("the pinned pod placed by the first good version", Duration::from_secs(120), || {
        cluster.kubectl(&["get", "pod", waiting, "-o", "jsonpath={.spec.nodeName}"]).stdout == "realnode-2"
    });
    eprintln!("a good version placed the waiting pod {:.1}s after the apply", fixed.elapsed().as_secs_f64());
    assert!(wasp_pods(cluster).iter().all(|pod| restarts(pod) == 0 && ready(pod)), "{}", diagnosis(cluster));
}

/// Both replicas gone: the webhooks fail open, pod creation goes on.
fn the_webhooks_fail_open_without_replicas(cluster: &ControlPlane) {
    cluster.must(&["scale", "deployment/wasp-scheduler", "-n", "wasp-system", "--replicas=0"]);
    wait_for("no wasp pod left", Duration::from_secs(120), || wasp_pods(cluster).is_empty());
    let slipped = cluster.kubectl(&["run", "slipped", "--image=registry.k8s.io/pause:3.10.2", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(slipped.ok, "pod creation failed with wasp gone: {}", slipped.stderr);
}

/// The README's "Install with Helm" on the same nodes, once the manifests' install is deleted: the namespace and the
/// policy bundle first, then `helm install --wait`, which returns once both replicas are Ready through the real
/// probes; the chart's own webhook certificate is the one the API server checks. Uninstalled, no pod of it is left.
fn the_helm_chart_runs_two_ready_replicas_in_place_of_the_manifests(cluster: &ControlPlane) {
    let manifests = common::repo_root().join("manifests");
    cluster.must(&["delete", "-f", manifests.to_str().unwrap(), "--wait=true", "--timeout=180s"]);
    cluster.must(&["create", "namespace", "wasp-system"]);
    create_policy_bundle(cluster);
    let installed = Instant::now();
    let home = cluster.dir.path().join("helm");
    let chart = common::helm::chart();
    let helm = |args: &[&str]| {
        let done = common::helm::run(&home, Some(&cluster.kubeconfig), args);
        assert!(done.ok, "helm {}: {}\n{}", args.join(" "), done.stderr, diagnosis(cluster));
    };
    helm(&["install", "wasp", chart.to_str().unwrap(), "--namespace", "wasp-system", "--wait", "--timeout", "300s"]);
    eprintln!("helm install --wait returned {:.1}s after it began", installed.elapsed().as_secs_f64());
    let pods = wasp_pods(cluster);
    assert!(pods.len() == 2 && pods.iter().all(|pod| ready(pod) && restarts(pod) == 0), "{}", diagnosis(cluster));
    // A server-side dry run: the webhooks are called, nothing is created.
    wait_for("the webhook refusing a misspelled scheduler name", Duration::from_secs(60), || {
        let typo =
            cluster.kubectl(&["run", "typo", "--dry-run=server", "--image=registry.k8s.io/pause:3.10.2", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
        !typo.ok && typo.stderr.contains(r#"no scheduler named "wsap" runs in this cluster"#)
    });
    let node = bound_node(cluster, "placed-by-the-chart", "wasp");
    assert!(node.starts_with("realnode-"), "{node}");
    helm(&["uninstall", "wasp", "--namespace", "wasp-system", "--wait", "--timeout", "120s"]);
    wait_for("no wasp pod left after the uninstall", Duration::from_secs(120), || wasp_pods(cluster).is_empty());
}
