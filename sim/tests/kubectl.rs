//! The simulator through kubectl itself, with default flags (`--validate=strict`, server-side printing), the way
//! a user who knows kubectl drives it. Skipped, with the reason printed, when kubectl is not installed.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use wasp_sim::{resources, Scenario, Simulator, SimulatorOptions};

const SCENARIO: &str = "kubelet: {readyDelay: 50ms, terminationDelay: 50ms}\nnodeGroups: [{name: worker, count: 2, cpu: '4', memory: 16Gi}]\n";

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: solo}\nspec:\n  containers: [{name: app, image: nginx}]\n";

struct Cluster {
    simulator: Simulator,
    home: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn kubectl_missing() -> bool {
    if Command::new("kubectl").args(["version", "--client"]).output().is_ok_and(|output| output.status.success()) {
        return false;
    }
    eprintln!("skipped: kubectl is not installed");
    true
}

async fn start() -> Cluster {
    let scenario = Scenario::parse(SCENARIO).unwrap();
    let options = SimulatorOptions { history: 1000, ..Default::default() };
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    // A home of its own: kubectl's discovery and OpenAPI caches start empty.
    let home = std::env::temp_dir().join(format!("wasp-sim-kubectl-{}", uuid_like()));
    std::fs::create_dir_all(&home).unwrap();
    simulator.write_kubeconfig(&home.join("kubeconfig")).unwrap();
    Cluster { simulator, home }
}

fn uuid_like() -> String {
    format!("{}-{:x}", std::process::id(), Instant::now().elapsed().as_nanos() ^ (fastrand_seed() as u128))
}

fn fastrand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    hasher.finish()
}

impl Cluster {
    async fn run(&self, args: &[&str]) -> Output {
        let home = self.home.clone();
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        tokio::task::spawn_blocking(move || Command::new("kubectl").args(&args).env("HOME", &home).env("KUBECONFIG", home.join("kubeconfig")).output().unwrap())
            .await
            .unwrap()
    }

    /// Runs kubectl and returns its stdout; fails the test with stderr if kubectl fails.
    async fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "kubectl {} failed: {stderr}", args.join(" "));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs kubectl expecting failure and returns its stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(!output.status.success(), "kubectl {} succeeded: {}", args.join(" "), String::from_utf8_lossy(&output.stdout));
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.home.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Polls kubectl until its output satisfies `done`.
    async fn until(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(4);
        loop {
            let output = self.ok(args).await;
            if done(&output) {
                return output;
            }
            assert!(Instant::now() < deadline, "kubectl {} never satisfied the condition; last output:\n{output}", args.join(" "));
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn bind(&self, pod: &str, node: &str) {
        self.simulator
            .store
            .mutate(resources::pods(), Some("default"), pod, |pod| {
                pod["spec"]["nodeName"] = json!(node);
                Ok(())
            })
            .unwrap();
    }
}

fn line_of<'a>(output: &'a str, name: &str) -> &'a str {
    output.lines().find(|line| line.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("no row {name} in\n{output}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_apply_validate_against_the_servers_openapi() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    let pod = cluster.file("pod.yaml", POD);
    assert_eq!(cluster.ok(&["create", "-f", &pod]).await.trim(), "pod/solo created");
    let deployment = cluster.file(
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n",
    );
    assert_eq!(cluster.ok(&["apply", "-f", &deployment]).await.trim(), "deployment.apps/web created");
    assert_eq!(cluster.ok(&["apply", "-f", &deployment]).await.trim(), "deployment.apps/web unchanged");
    let scaled = cluster.file("deploy.yaml", &std::fs::read_to_string(&deployment).unwrap().replace("replicas: 1", "replicas: 2"));
    assert_eq!(cluster.ok(&["apply", "-f", &scaled]).await.trim(), "deployment.apps/web configured");
    cluster.until(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"], |replicas| replicas == "2").await;
    let server_side = cluster.file("ssa.yaml", &std::fs::read_to_string(&deployment).unwrap().replace("name: web}", "name: ssa}"));
    assert_eq!(cluster.ok(&["apply", "--server-side", "-f", &server_side]).await.trim(), "deployment.apps/ssa serverside-applied");
    assert_eq!(cluster.ok(&["apply", "--server-side", "-f", &server_side]).await.trim(), "deployment.apps/ssa serverside-applied");
    // Unknown fields: the server validates (strict by default in kubectl), as it says in its OpenAPI.
    let typo = cluster.file("typo.yaml", &POD.replace("name: solo}", "name: typo}\nspecc: {}"));
    let error = cluster.fails(&["create", "-f", &typo]).await;
    assert!(error.contains("unknown field \"specc\""), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_prints_the_api_servers_columns() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    cluster.ok(&["create", "-f", &cluster.file("pod.yaml", POD)]).await;
    let pending = cluster.ok(&["get", "pods"]).await;
    assert_eq!(pending.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(line_of(&pending, "solo").split_whitespace().collect::<Vec<_>>()[..4], ["solo", "0/1", "Pending", "0"]);
    cluster.bind("solo", "worker-1");
    let wide = cluster.until(&["get", "pods", "-o", "wide"], |output| line_of(output, "solo").contains("Running")).await;
    let header: Vec<&str> = wide.lines().next().unwrap().split("  ").map(str::trim).filter(|cell| !cell.is_empty()).collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"]);
    let row: Vec<&str> = line_of(&wide, "solo").split_whitespace().collect();
    assert_eq!((row[1], row[2], row[6], row[7]), ("1/1", "Running", "worker-1", "<none>"));

    let nodes = cluster.ok(&["get", "nodes"]).await;
    assert_eq!(nodes.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(line_of(&nodes, "worker-0").split_whitespace().nth(1), Some("Ready"));
    assert_eq!(cluster.ok(&["cordon", "worker-0"]).await.trim(), "node/worker-0 cordoned");
    let nodes = cluster.ok(&["get", "nodes", "-o", "wide"]).await;
    assert_eq!(line_of(&nodes, "worker-0").split_whitespace().nth(1), Some("Ready,SchedulingDisabled"));
    assert!(nodes.lines().next().unwrap().contains("CONTAINER-RUNTIME"), "{nodes}");
    let deployments = cluster.ok(&["get", "deploy,rs,sts,pdb,leases,cm,ns"]).await;
    assert!(deployments.contains("kube-root-ca.crt") || deployments.contains("namespace/default"), "{deployments}");
}

/// Storage as a user applies and reads it: a default WaitForFirstConsumer class and a claim, provisioned once a
/// node is chosen; `kubectl get sc,pvc,pv` with kube-apiserver's columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_apply_and_print_like_kube_apiserver() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    let storage =
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: zonal\n  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}\n\
        provisioner: disk.csi.example.com\nvolumeBindingMode: WaitForFirstConsumer\n---\n\
        apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 5Gi}}\n";
    cluster.ok(&["apply", "-f", &cluster.file("storage.yaml", storage)]).await;
    let classes = cluster.ok(&["get", "storageclass"]).await;
    let header: Vec<&str> = classes.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]);
    assert_eq!(
        line_of(&classes, "zonal").split_whitespace().collect::<Vec<_>>()[..5],
        ["zonal", "(default)", "disk.csi.example.com", "Delete", "WaitForFirstConsumer"]
    );
    let pending = cluster.ok(&["get", "pvc"]).await;
    assert_eq!(
        pending.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"]
    );
    assert_eq!(line_of(&pending, "data").split_whitespace().collect::<Vec<_>>()[..4], ["data", "Pending", "zonal", "<unset>"]);
    cluster.ok(&["annotate", "pvc", "data", "volume.kubernetes.io/selected-node=worker-1"]).await;
    let bound = cluster.until(&["get", "pvc"], |output| line_of(output, "data").contains("Bound")).await;
    let row: Vec<&str> = line_of(&bound, "data").split_whitespace().collect();
    assert_eq!((row[1], row[3], row[4], row[5]), ("Bound", "5Gi", "RWO", "zonal"));
    assert!(row[2].starts_with("pvc-"), "{bound}");
    let volumes = cluster.ok(&["get", "pv"]).await;
    let row: Vec<&str> = volumes.lines().find(|line| line.starts_with("pvc-")).expect("a provisioned volume").split_whitespace().collect();
    assert_eq!(row[1..6], ["5Gi", "RWO", "Delete", "Bound", "default/data"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_the_served_schemas() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    let explained = cluster.ok(&["explain", "pod.spec"]).await;
    assert!(explained.contains("KIND:       Pod"), "{explained}");
    assert!(explained.contains("containers\t<[]Container> -required-") || explained.contains("containers"), "{explained}");
    let field = cluster.ok(&["explain", "deployment.spec.replicas"]).await;
    assert!(field.contains("FIELD: replicas <integer>"), "{field}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_exec_say_no_containers_run() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    cluster.ok(&["create", "-f", &cluster.file("pod.yaml", POD)]).await;
    let error = cluster.fails(&["logs", "solo"]).await;
    assert!(error.contains("container \"app\" in pod \"solo\" is waiting to start") && error.contains("runs no containers"), "{error}");
    let error = cluster.fails(&["exec", "solo", "--", "true"]).await;
    assert!(error.contains("runs no containers"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_served_by_both_apis() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    let core = "apiVersion: v1\nkind: Event\nmetadata: {name: core-made}\ninvolvedObject: {kind: Pod, name: solo, namespace: default}\nreason: Scheduled\nmessage: assigned to worker-0\ntype: Normal\nsource: {component: wasp}\nfirstTimestamp: '2026-01-01T00:00:00Z'\nlastTimestamp: '2026-01-01T00:00:00Z'\ncount: 1\n";
    cluster.ok(&["create", "-f", &cluster.file("core.yaml", core)]).await;
    let v1 = "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: v1-made}\nregarding: {kind: Node, name: worker-0}\nreason: Cordoned\nnote: cordoned by test\ntype: Warning\nreportingController: test\nreportingInstance: test-1\naction: Cordon\neventTime: '2026-01-01T00:00:00.000000Z'\n";
    cluster.ok(&["create", "-f", &cluster.file("v1.yaml", v1)]).await;
    let listed: Value = serde_json::from_str(&cluster.ok(&["get", "events.v1.events.k8s.io", "-o", "json"]).await).unwrap();
    let notes: Vec<(&str, &str)> =
        listed["items"].as_array().unwrap().iter().map(|event| (event["metadata"]["name"].as_str().unwrap(), event["note"].as_str().unwrap())).collect();
    assert_eq!(notes, [("core-made", "assigned to worker-0"), ("v1-made", "cordoned by test")]);
    let core_view: Value = serde_json::from_str(&cluster.ok(&["get", "events", "v1-made", "-o", "json"]).await).unwrap();
    assert_eq!((core_view["message"].as_str(), core_view["involvedObject"]["name"].as_str()), (Some("cordoned by test"), Some("worker-0")));
    let selected = cluster.ok(&["get", "events.v1.events.k8s.io", "--field-selector", "regarding.kind=Node", "-o", "name"]).await;
    assert_eq!(selected.trim(), "event.events.k8s.io/v1-made");
    let table = cluster.ok(&["get", "events.v1.events.k8s.io"]).await;
    assert_eq!(table.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert!(table.lines().any(|line| line.contains("Warning") && line.contains("Cordoned") && line.contains("node/worker-0")), "{table}");
    assert!(table.contains("pod/solo") && table.contains("assigned to worker-0"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_manifests_apply() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    let applied = cluster.ok(&["apply", "-f", manifests.to_str().unwrap()]).await;
    for created in [
        "customresourcedefinition.apiextensions.k8s.io/autoscalers.wasp.dev created",
        "namespace/wasp-system created",
        "serviceaccount/wasp created",
        "clusterrole.rbac.authorization.k8s.io/wasp-scheduler created",
        "clusterrolebinding.rbac.authorization.k8s.io/wasp-scheduler created",
        "role.rbac.authorization.k8s.io/wasp-leader-election created",
        "rolebinding.rbac.authorization.k8s.io/wasp-leader-election created",
        "configmap/wasp-config created",
        "deployment.apps/wasp-scheduler created",
    ] {
        assert!(applied.contains(created), "{created:?} missing from\n{applied}");
    }
    let again = cluster.ok(&["apply", "-f", manifests.to_str().unwrap()]).await;
    assert!(!again.contains("created"), "{again}");
    let listed = cluster.ok(&["get", "sa,role,rolebinding,svc,secrets", "-n", "wasp-system"]).await;
    assert!(listed.contains("serviceaccount/wasp"), "{listed}");
    // The CRD is served at once: Autoscalers apply (validated by the server) and print their columns.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/autoscalers.yaml");
    let applied = cluster.ok(&["apply", "-f", examples.to_str().unwrap()]).await;
    assert!(applied.contains("autoscaler.wasp.dev/web created"), "{applied}");
    let status = json!({"status": {"reference": "Deployment/web", "policy": "hpa", "targets": "cpu: 45%/50%", "currentReplicas": 3}});
    cluster.ok(&["patch", "autoscaler", "web", "--subresource=status", "--type=merge", "-p", &status.to_string()]).await;
    let printed = cluster.ok(&["get", "autoscalers"]).await;
    let header: Vec<&str> = printed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "REFERENCE", "POLICY", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"], "{printed}");
    let web = printed.lines().find(|line| line.starts_with("web ")).unwrap();
    assert_eq!(web.split_whitespace().take(8).collect::<Vec<_>>()[..7], ["web", "Deployment/web", "hpa", "cpu:", "45%/50%", "2", "20"], "{printed}");
    let short = cluster.ok(&["get", "was", "-o", "name"]).await;
    assert!(short.contains("autoscaler.wasp.dev/api"), "{short}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_rows_as_they_change() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    cluster.ok(&["create", "-f", &cluster.file("pod.yaml", POD)]).await;
    let mut watch = Command::new("kubectl")
        .args(["get", "pods", "-w"])
        .env("HOME", &cluster.home)
        .env("KUBECONFIG", cluster.home.join("kubeconfig"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (lines, mut received) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    let mut bound = false;
    while !seen.iter().any(|line: &String| line.contains("1/1") && line.contains("Running")) {
        let line = tokio::time::timeout_at(deadline, received.recv()).await;
        let Ok(Some(line)) = line else {
            let _ = watch.kill();
            panic!("kubectl get -w never showed the pod running; it printed:\n{}", seen.join("\n"));
        };
        if !bound && line.contains("Pending") {
            cluster.bind("solo", "worker-0");
            bound = true;
        }
        seen.push(line);
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(seen[0].split_whitespace().collect::<Vec<_>>(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(seen.iter().filter(|line| line.starts_with("NAME")).count(), 1, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generators_send_protobuf_which_is_decoded() {
    if kubectl_missing() {
        return;
    }
    let cluster = start().await;
    assert_eq!(cluster.ok(&["create", "namespace", "generated"]).await.trim(), "namespace/generated created");
    for (args, created) in [
        (&["create", "deployment", "web", "--image=nginx", "--replicas=2", "--port=8080"][..], "deployment.apps/web created"),
        (&["create", "configmap", "settings", "--from-literal=mode=fast"][..], "configmap/settings created"),
        (&["create", "secret", "generic", "token", "--from-literal=key=s3cret"][..], "secret/token created"),
        (&["create", "pdb", "web", "--selector=app=web", "--min-available=1"][..], "poddisruptionbudget.policy/web created"),
        (&["create", "serviceaccount", "robot"][..], "serviceaccount/robot created"),
        (&["create", "service", "clusterip", "web", "--tcp=80:8080"][..], "service/web created"),
        (&["create", "role", "reader", "--verb=get", "--resource=pods"][..], "role.rbac.authorization.k8s.io/reader created"),
        (&["create", "rolebinding", "reader", "--role=reader", "--serviceaccount=generated:robot"][..], "rolebinding.rbac.authorization.k8s.io/reader created"),
        (&["create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes"][..], "clusterrole.rbac.authorization.k8s.io/node-reader created"),
        (&["autoscale", "deployment", "web", "--max=5", "--cpu-percent=60"][..], "horizontalpodautoscaler.autoscaling/web autoscaled"),
    ] {
        let mut args = args.to_vec();
        if !created.starts_with("clusterrole") {
            args.extend(["-n", "generated"]);
        }
        assert_eq!(cluster.ok(&args).await.trim(), created);
    }
    let what = ["deployment/web", "configmap/settings", "secret/token", "pdb/web", "service/web", "rolebinding/reader"];
    let listed: Value = serde_json::from_str(&cluster.ok(&[&["get", "-n", "generated", "-o", "json"][..], &what[..]].concat()).await).unwrap();
    let [deployment, config_map, secret, pdb, service, binding] = &listed["items"].as_array().unwrap()[..] else { panic!("{listed}") };
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"], 8080);
    assert_eq!(deployment["metadata"]["labels"]["app"], "web");
    assert_eq!(config_map["data"]["mode"], "fast");
    assert_eq!(secret["data"]["key"], "czNjcmV0");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(binding["subjects"][0]["name"], "robot");
    cluster.until(&["get", "pods", "-n", "generated", "-l", "app=web", "-o", "name"], |pods| pods.lines().count() == 2).await;
}
