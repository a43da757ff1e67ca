//! wasp on a real control plane (controlplane/: etcd, kube-apiserver, kube-controller-manager and kwok in one
//! process): the install exactly as the README gives it (manifests/, the policy bundle ConfigMap, `wasp certs`
//! and its patches), then `wasp run` outside the cluster with a token of the `wasp` ServiceAccount from the
//! TokenRequest API, so that the real authorizer enforces the shipped RBAC and the real kube-apiserver calls the
//! shipped webhooks. Every count comes from what the API server recorded (its audit log, the objects' state), not
//! from wasp's logs.
//!
//! Each test brings up its own control plane (about 3 s) and they run one at a time: two control planes and two
//! hosts at once would share the machine's two cores.

mod common;

use base64::Engine;
use common::atomic_writer::AtomicWriter;
use common::control_plane::{self, wait_for, ControlPlane};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The `wasp` ServiceAccount's user name, as the API server records it.
const WASP_USER: &str = "system:serviceaccount:wasp-system:wasp";

fn wasp(args: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_wasp")).args(args).current_dir(common::repo_root()).output().unwrap();
    assert!(output.status.success(), "wasp {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    output
}

/// A control plane with wasp installed as the README's "Install on a cluster" says, except the in-cluster
/// Deployment, scaled to zero: wasp runs on this machine (there are no kubelets to run its image).
struct Installed {
    cluster: ControlPlane,
    /// ca.crt, tls.crt and tls.key from `wasp certs --out-dir`.
    tls: PathBuf,
    /// The `wasp` ServiceAccount's kubeconfig (a TokenRequest token).
    wasp_kubeconfig: PathBuf,
}

fn install() -> Installed {
    let cluster = ControlPlane::start();
    let manifests = common::repo_root().join("manifests");
    cluster.must(&["apply", "-f", manifests.to_str().unwrap()]);
    let bundle = wasp(&["configmap", "--from-dir", "plugins/out", "--bundle"]);
    let created = cluster.kubectl_input(&["create", "-f", "-"], &String::from_utf8(bundle.stdout).unwrap());
    assert!(created.ok, "the policy bundle ConfigMap: {}", created.stderr);

    // The webhooks' certificate: the Secret from `wasp certs`, then the patches it prints, run as printed.
    let tls = cluster.dir.path().join("wasp-tls");
    let certs = wasp(&["certs", "--out-dir", tls.to_str().unwrap()]);
    let applied = cluster.kubectl_input(&["apply", "-f", "-"], &String::from_utf8(certs.stdout).unwrap());
    assert!(applied.ok, "the webhook Secret: {}", applied.stderr);
    let instructions = String::from_utf8(certs.stderr).unwrap();
    let patches: Vec<&str> = instructions.lines().map(str::trim).filter(|line| line.starts_with("kubectl patch")).collect();
    assert_eq!(patches.len(), 2, "wasp certs prints a patch per webhook configuration: {instructions}");
    for patch in patches {
        let status = Command::new("sh").arg("-c").arg(patch).env("KUBECONFIG", &cluster.kubeconfig).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "{patch}");
    }
    cluster.must(&["scale", "deployment", "wasp-scheduler", "-n", "wasp-system", "--replicas=0"]);
    let wasp_kubeconfig = cluster.service_account_kubeconfig("wasp-system", "wasp");
    Installed { cluster, tls, wasp_kubeconfig }
}

/// `wasp run` on this machine with the installed configuration and policies, as the `wasp` ServiceAccount.
struct Host {
    process: Child,
    /// `--listen`: /healthz, /readyz, /metrics, /policies.
    listen: u16,
    log: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        control_plane::stop(&mut self.process, Duration::from_secs(10));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET http://127.0.0.1:port/path: the status code, or None when nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

impl Installed {
    /// Starts `wasp run` named `name`: the configuration read from the installed `wasp-config` ConfigMap, the
    /// installed `wasp-policies` ConfigMap written into a directory the way the kubelet's atomic writer projects
    /// it, webhooks served on a local port that the `wasp-webhook` Service is annotated with. Returns once the
    /// host is Ready.
    fn start_host(&self, name: &str) -> Host {
        let home = self.cluster.dir.path().join(name);
        std::fs::create_dir_all(&home).unwrap();
        let policies = AtomicWriter::new(&home.join("policies"));
        let bundle = self.cluster.get_json(&["get", "configmap", "wasp-policies", "-n", "wasp-system"]);
        let payload: BTreeMap<String, Vec<u8>> = bundle["binaryData"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(file, data)| (file.clone(), base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap()).unwrap()))
            .collect();
        policies.write(&payload);
        let installed = self.cluster.get_json(&["get", "configmap", "wasp-config", "-n", "wasp-system"]);
        let config = installed["data"]["config.yaml"].as_str().unwrap();
        assert!(config.contains("policyDir: /etc/wasp/policies\n"), "{config}");
        let config = config.replace("policyDir: /etc/wasp/policies\n", &format!("policyDir: {}\n", policies.path().display()));
        std::fs::write(home.join("config.yaml"), config).unwrap();

        let (listen, webhook) = (free_port(), free_port());
        self.cluster.must(&[
            "annotate",
            "--overwrite",
            "service",
            "wasp-webhook",
            "-n",
            "wasp-system",
            &format!("controlplane.wasp.dev/address=127.0.0.1:{webhook}"),
        ]);
        let log = home.join("wasp.log");
        let process = Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["run", "--config"])
            .arg(home.join("config.yaml"))
            .arg("--cache-dir")
            .arg(home.join("cache"))
            .args(["--listen", &format!("127.0.0.1:{listen}"), "--webhook-listen", &format!("127.0.0.1:{webhook}")])
            .arg("--tls-cert-file")
            .arg(self.tls.join("tls.crt"))
            .arg("--tls-private-key-file")
            .arg(self.tls.join("tls.key"))
            .env("KUBECONFIG", &self.wasp_kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(std::fs::File::options().append(true).open(&log).unwrap()))
            .spawn()
            .unwrap();
        let mut host = Host { process, listen, log };
        wait_for(&format!("{name} Ready"), Duration::from_secs(120), || {
            if let Ok(Some(status)) = host.process.try_wait() {
                panic!("wasp run exited ({status}): {}", std::fs::read_to_string(&host.log).unwrap_or_default());
            }
            http_status(host.listen, "/readyz") == Some(200)
        });
        host
    }
}

/// Pods of `namespace` with label selector `selector`.
fn pods(cluster: &ControlPlane, namespace: &str, selector: &str) -> Vec<Value> {
    cluster.get_json(&["get", "pods", "-n", namespace, "-l", selector])["items"].as_array().unwrap().clone()
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|condition| condition["type"] == kind)
}

#[test]
fn the_shipped_install_schedules_a_deployment_under_the_real_rbac() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    let _host = installed.start_host("wasp-0");
    wait_for("wasp to hold its Lease", Duration::from_secs(60), || {
        let lease = cluster.kubectl(&["get", "lease", "wasp-scheduler", "-n", "wasp-system", "-o", "jsonpath={.spec.holderIdentity}"]);
        lease.ok && !lease.stdout.is_empty()
    });

    cluster.create_nodes("worker", 12, &["zone-a", "zone-b", "zone-c"], "4", "16Gi");
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 200
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      schedulerName: wasp
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: web
        image: nginx
        resources: {requests: {cpu: 100m, memory: 64Mi}}
"#;
    let created = cluster.kubectl_input(&["create", "-f", "-"], deployment);
    assert!(created.ok, "{}", created.stderr);
    // Available as the real Deployment controller judges it: 200 pods bound, Running and Ready.
    wait_for("the Deployment's 200 replicas Available", Duration::from_secs(180), || {
        cluster.get_json(&["get", "deployment", "web", "-n", "default"])["status"]["availableReplicas"].as_u64() == Some(200)
    });

    let web = pods(cluster, "default", "app=web");
    assert_eq!(web.len(), 200);
    let nodes = cluster.get_json(&["get", "nodes"]);
    let zone_of: BTreeMap<&str, &str> = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| (node["metadata"]["name"].as_str().unwrap(), node["metadata"]["labels"]["topology.kubernetes.io/zone"].as_str().unwrap()))
        .collect();
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in &web {
        *per_zone.entry(zone_of[pod["spec"]["nodeName"].as_str().unwrap()]).or_default() += 1;
        let scheduled = condition(pod, "PodScheduled").expect("PodScheduled");
        assert_eq!(scheduled["status"], "True", "{pod}");
    }
    let (fewest, most) = (per_zone.values().min().unwrap(), per_zone.values().max().unwrap());
    assert!(most - fewest <= 1, "topology spread maxSkew 1 over zones: {per_zone:?}");

    // What the API server recorded: one binding per pod, each accepted, all by wasp's ServiceAccount.
    let audit = cluster.audit();
    let bindings: Vec<_> = audit.iter().filter(|event| event.subresource() == "binding" && event.verb() == "create").collect();
    assert!(bindings.iter().all(|event| event.user() == WASP_USER), "every binding is wasp's");
    let accepted: Vec<&str> = bindings.iter().filter(|event| event.code() == 201).map(|event| event.name()).collect();
    let distinct: BTreeSet<&str> = accepted.iter().copied().collect();
    let names: BTreeSet<&str> = web.iter().map(|pod| pod["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(accepted.len(), 200, "one accepted binding per pod ({} sent in all)", bindings.len());
    assert_eq!(distinct, names, "each pod bound once");

    // Events as kube-scheduler writes them: a Scheduled event per pod, from the wasp profile.
    let events = cluster.get_json(&["get", "events.v1.events.k8s.io", "-n", "default", "--field-selector", "reason=Scheduled"]);
    let scheduled: Vec<&Value> = events["items"].as_array().unwrap().iter().collect();
    assert!(scheduled.len() >= 200, "{} Scheduled events", scheduled.len());
    let first = scheduled[0];
    assert_eq!(first["reportingController"], "wasp", "{first}");
    assert!(first["note"].as_str().unwrap().starts_with("Successfully assigned default/web-"), "{first}");

    // The shipped RBAC, enforced by the real authorizer: nothing wasp asked for over the whole run was refused...
    let refused: Vec<String> =
        audit.iter().filter(|event| event.user() == WASP_USER && event.code() == 403).map(|event| format!("{} {}", event.verb(), event.uri())).collect();
    assert!(refused.is_empty(), "requests of wasp the RBAC refused: {refused:?}");
    let failed: Vec<String> =
        audit.iter().filter(|event| event.user() == WASP_USER && event.code() >= 500).map(|event| format!("{} {} {}", event.code(), event.verb(), event.uri())).collect();
    assert!(failed.is_empty(), "requests of wasp the API server failed: {failed:?}");
    // ... and what it does not grant is refused: wasp may not delete pods.
    let victim = web[0]["metadata"]["name"].as_str().unwrap();
    let deleted = control_plane::kubectl_with(&installed.wasp_kubeconfig, &["delete", "pod", victim, "-n", "default", "--wait=false"], None);
    assert!(!deleted.ok && deleted.stderr.contains("forbidden"), "{}", deleted.stderr);
    let recorded = cluster.audit();
    assert!(recorded.iter().any(|event| event.user() == WASP_USER && event.verb() == "delete" && event.name() == victim && event.code() == 403));
}

#[test]
fn the_real_api_server_calls_the_shipped_webhooks_and_pod_creation_survives_wasp_stopped() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 3, &["zone-a"], "4", "16Gi");
    cluster.must(&["create", "namespace", "team-a"]);
    cluster.must(&["annotate", "namespace", "team-a", "wasp.dev/scheduler=wasp"]);
    let host = installed.start_host("wasp-0");

    // A typo in schedulerName: refused by the validating webhook, with wasp's message as kubectl prints it.
    let typo = cluster.kubectl(&["run", "typo", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(!typo.ok, "the typo pod was created");
    assert!(
        typo.stderr.contains(r#"admission webhook "scheduler-name.pods.wasp.dev" denied the request: no scheduler named "wsap" runs in this cluster"#),
        "{}",
        typo.stderr
    );
    assert!(typo.stderr.contains(r#"did you mean "wasp"?"#), "{}", typo.stderr);
    assert!(!cluster.kubectl(&["get", "pod", "typo"]).ok, "nothing was stored");

    // A pod that chose no scheduler in a namespace that names one: the mutating webhook gives it wasp, the
    // API server stores that (the audit log names the webhook's patch), and wasp binds it.
    cluster.must(&["run", "web", "-n", "team-a", "--image=nginx"]);
    let pod = cluster.get_json(&["get", "pod", "web", "-n", "team-a"]);
    assert_eq!(pod["spec"]["schedulerName"], "wasp", "{pod}");
    let audit = cluster.audit();
    let creation = audit.iter().find(|event| event.verb() == "create" && event.resource() == "pods" && event.namespace() == "team-a" && event.code() == 201).unwrap();
    let annotations = creation.0["annotations"].to_string();
    assert!(annotations.contains("namespace-scheduler.pods.wasp.dev"), "the audit log does not name wasp's mutation: {annotations}");
    wait_for("team-a/web bound by wasp", Duration::from_secs(60), || {
        cluster.get_json(&["get", "pod", "web", "-n", "team-a"])["spec"]["nodeName"].as_str().is_some()
    });

    // A pod of the default scheduler is not sent to wasp at all (matchConditions, evaluated by the real CEL):
    // it is created even with a name wasp would refuse in an annotation-free spec.
    cluster.must(&["run", "plain", "--image=nginx"]);
    assert_eq!(cluster.get_json(&["get", "pod", "plain"])["spec"]["schedulerName"], "default-scheduler");

    // wasp stopped: the webhooks fail open, pod creation goes on.
    drop(host);
    let slipped = cluster.kubectl(&["run", "slipped", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(slipped.ok, "pod creation failed with wasp stopped: {}", slipped.stderr);
    cluster.must(&["run", "unmutated", "-n", "team-a", "--image=nginx"]);
    assert_eq!(cluster.get_json(&["get", "pod", "unmutated", "-n", "team-a"])["spec"]["schedulerName"], "default-scheduler");
}
