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
use common::control_plane::{self, wait_for, AuditEvent, ControlPlane};
use common::install::{create_policy_bundle, readme_install, wasp};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The `wasp` ServiceAccount's user name, as the API server records it.
const WASP_USER: &str = "system:serviceaccount:wasp-system:wasp";

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
    install_with(&[])
}

/// [`install`] on a control plane started with more of wasp-controlplane's `flags` (`--kube-scheduler`).
fn install_with(flags: &[&str]) -> Installed {
    let cluster = ControlPlane::start_with(flags);
    let tls = readme_install(&cluster);
    cluster.must(&["scale", "deployment", "wasp-scheduler", "-n", "wasp-system", "--replicas=0"]);
    let wasp_kubeconfig = cluster.service_account_kubeconfig("wasp-system", "wasp");
    Installed { cluster, tls, wasp_kubeconfig }
}

/// `helm ARGS` as the admin; its stdout.
fn helm(cluster: &ControlPlane, args: &[&str]) -> String {
    let done = common::helm::run(&cluster.dir.path().join("helm"), Some(&cluster.kubeconfig), args);
    assert!(done.ok, "helm {}: {}", args.join(" "), done.stderr);
    done.stdout
}

/// A control plane with wasp installed by the chart (docs/install.md, "Install with Helm") with its default values, but no
/// replica (there are no kubelets to run its image: wasp runs on this machine), and no policy bundle yet.
fn install_with_helm() -> Installed {
    let cluster = ControlPlane::start();
    let chart = common::helm::chart();
    helm(&cluster, &["install", "wasp", chart.to_str().unwrap(), "--namespace", "wasp-system", "--create-namespace", "--set", "replicas=0"]);
    // The certificate the chart made, where the Deployment mounts it.
    let tls = cluster.dir.path().join("wasp-tls");
    assert!(write_secret(&cluster, "wasp-webhook-tls", &tls), "the chart made no Secret wasp-webhook-tls");
    let wasp_kubeconfig = cluster.service_account_kubeconfig("wasp-system", "wasp");
    Installed { cluster, tls, wasp_kubeconfig }
}

/// Writes the files of Secret `name` (wasp-system) into `folder`, as the kubelet mounts it; false if there is no
/// such Secret.
fn write_secret(cluster: &ControlPlane, name: &str, folder: &Path) -> bool {
    std::fs::create_dir_all(folder).unwrap();
    let found = cluster.kubectl(&["get", "secret", name, "-n", "wasp-system", "-o", "json"]);
    if found.ok {
        let found: Value = serde_json::from_str(&found.stdout).unwrap();
        for (file, data) in found["data"].as_object().into_iter().flatten() {
            std::fs::write(folder.join(file), base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap()).unwrap()).unwrap();
        }
    }
    found.ok
}

/// `wasp run` on this machine with the installed configuration and policies, as the `wasp` ServiceAccount.
struct Host {
    process: Child,
    /// `--insecure-listen` (plain HTTP, the test's own reads): /healthz, /readyz, /metrics, /policies.
    listen: u16,
    /// `--listen`: the same over HTTPS, /metrics and /policies for authorized users only.
    secure: u16,
    log: PathBuf,
    /// Where its configuration, policies and cache are.
    home: PathBuf,
    /// The policy directory, as the kubelet projects the policy ConfigMaps into the pod.
    policies: AtomicWriter,
}

impl Drop for Host {
    fn drop(&mut self) {
        control_plane::stop(&mut self.process, Duration::from_secs(10));
    }
}

/// A starting `wasp run`, stopped when dropped unless taken.
struct Starting(Option<Child>);

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(process) = self.0.as_mut() {
            control_plane::stop(process, Duration::from_secs(10));
        }
    }
}

/// `N` distinct free ports: every listener is held until all are chosen, or the kernel may hand out one port
/// twice. Another process can still take one before wasp binds it; `start_host` retries then.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<_> = (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// GET http://127.0.0.1:port/path: the status code and the body, or None when nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Some((status, body))
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
        self.project_policies(&policies);
        self.project_config(&home, policies.path());
        let mut policies = Some(policies);
        for attempt in 1.. {
            match self.spawn_host(name, &home, &mut policies) {
                Ok(host) => return host,
                // The test binary runs in parallel with others that pick ports too.
                Err(log) if log.contains("Address already in use") && attempt < 3 => continue,
                Err(log) => panic!("wasp run {name} exited: {log}"),
            }
        }
        unreachable!()
    }

    /// One start of `wasp run` on fresh ports: the Ready host, or its log if it exited first.
    fn spawn_host(&self, name: &str, home: &Path, policies: &mut Option<AtomicWriter>) -> Result<Host, String> {
        let [listen, secure, webhook] = free_ports();
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
            .args([
                "--listen",
                &format!("127.0.0.1:{secure}"),
                "--insecure-listen",
                &format!("127.0.0.1:{listen}"),
                "--webhook-listen",
                &format!("127.0.0.1:{webhook}"),
            ])
            .arg("--tls-cert-file")
            .arg(self.tls.join("tls.crt"))
            .arg("--tls-private-key-file")
            .arg(self.tls.join("tls.key"))
            .env("KUBECONFIG", &self.wasp_kubeconfig)
            // The Lease holder's identity starts with it.
            .env("HOSTNAME", name)
            .env("RUST_LOG", "info")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(std::fs::File::options().append(true).open(&log).unwrap()))
            .spawn()
            .unwrap();
        // Stopped if the wait panics: no `wasp run` outlives its test.
        let mut starting = Starting(Some(process));
        let mut exited = None;
        wait_for(&format!("{name} Ready"), Duration::from_secs(120), || {
            if let Ok(Some(status)) = starting.0.as_mut().unwrap().try_wait() {
                exited = Some(format!("({status}) {}", std::fs::read_to_string(&log).unwrap_or_default()));
                return true;
            }
            http_get(listen, "/readyz").is_some_and(|(status, _)| status == 200)
        });
        match exited {
            Some(log) => Err(log),
            None => Ok(Host { process: starting.0.take().unwrap(), listen, secure, log, home: home.to_path_buf(), policies: policies.take().unwrap() }),
        }
    }

    /// Writes the installed `wasp-config` into `home`/config.yaml, as the kubelet updates the mounted ConfigMap
    /// (one rename), with the Deployment's mount paths made this machine's: the policy directory `policies`, and
    /// the optional Secrets' folders, their files written if they exist.
    fn project_config(&self, home: &Path, policies: &Path) {
        let installed = self.cluster.get_json(&["get", "configmap", "wasp-config", "-n", "wasp-system"]);
        let config = installed["data"]["config.yaml"].as_str().unwrap();
        assert!(config.contains("policyDir: /etc/wasp/policies\n"), "{config}");
        let mut config = config.replace("policyDir: /etc/wasp/policies\n", &format!("policyDir: {}\n", policies.display()));
        for (secret, mount, folder) in [("wasp-policy-keys", "/etc/wasp/keys/", "keys"), ("wasp-registry-credentials", "/etc/wasp/registry/", "registry")] {
            let folder = home.join(folder);
            write_secret(&self.cluster, secret, &folder);
            config = config.replace(mount, &format!("{}/", folder.display()));
        }
        let staged = home.join(".config.yaml.new");
        std::fs::write(&staged, config).unwrap();
        std::fs::rename(staged, home.join("config.yaml")).unwrap();
    }
}

/// The ConfigMaps the Deployment projects into the policy directory (manifests/30-deployment.yaml), all optional.
const POLICY_CONFIG_MAPS: [&str; 9] = [
    "wasp-policies",
    "wasp-policies-1",
    "wasp-policies-2",
    "wasp-policies-3",
    "wasp-policies-4",
    "wasp-policies-5",
    "wasp-policies-6",
    "wasp-policies-7",
    "wasp-policies-8",
];

impl Installed {
    /// Writes the policy ConfigMaps that exist into `volume` as the kubelet updates a projected volume (there is
    /// no kubelet here): one atomic swap of the whole payload.
    fn project_policies(&self, volume: &AtomicWriter) {
        let mut payload: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for name in POLICY_CONFIG_MAPS {
            let found = self.cluster.kubectl(&["get", "configmap", name, "-n", "wasp-system", "-o", "json"]);
            if !found.ok {
                continue;
            }
            let config_map: Value = serde_json::from_str(&found.stdout).unwrap();
            for (file, data) in config_map["binaryData"].as_object().into_iter().flatten() {
                payload.insert(file.clone(), base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap()).unwrap());
            }
            for (file, data) in config_map["data"].as_object().into_iter().flatten() {
                payload.insert(file.clone(), data.as_str().unwrap().as_bytes().to_vec());
            }
        }
        volume.write(&payload);
    }

    /// Edits the installed `wasp-config` as `kubectl edit` would: the API server stores the new text.
    fn edit_config(&self, edit: impl FnOnce(&str) -> String) {
        let installed = self.cluster.get_json(&["get", "configmap", "wasp-config", "-n", "wasp-system"]);
        let edited = edit(installed["data"]["config.yaml"].as_str().unwrap());
        let mut config_map = installed.clone();
        config_map["data"]["config.yaml"] = Value::String(edited);
        let replaced = self.cluster.kubectl_input(&["replace", "-f", "-"], &config_map.to_string());
        assert!(replaced.ok, "{}", replaced.stderr);
    }

    /// Stores a ConfigMap of loose policy files (`kubectl create configmap NAME --from-file=...`), replacing it
    /// if it exists.
    fn put_policies(&self, config_map: &str, files: &[(&str, PathBuf)]) {
        let mut args = vec![
            "create".to_string(),
            "configmap".into(),
            config_map.into(),
            "-n".into(),
            "wasp-system".into(),
            "--dry-run=client".into(),
            "-o".into(),
            "json".into(),
        ];
        for (name, path) in files {
            args.push(format!("--from-file={name}={}", path.display()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let document = self.cluster.must(&args);
        let verb = if self.cluster.kubectl(&["get", "configmap", config_map, "-n", "wasp-system"]).ok { "replace" } else { "create" };
        let stored = self.cluster.kubectl_input(&[verb, "-f", "-"], &document);
        assert!(stored.ok, "{}", stored.stderr);
    }

    /// The Lease's holder identity (`NAME_xxxxxxxx` for the host started as NAME), if held.
    fn lease_holder(&self) -> Option<String> {
        let lease = self.cluster.kubectl(&["get", "lease", "wasp-scheduler", "-n", "wasp-system", "-o", "jsonpath={.spec.holderIdentity}"]);
        Some(lease.stdout).filter(|holder| lease.ok && !holder.is_empty())
    }
}

/// Creates `manifest` (YAML) as the admin.
fn create(cluster: &ControlPlane, manifest: &str) {
    let created = cluster.kubectl_input(&["create", "-f", "-"], manifest);
    assert!(created.ok, "{}", created.stderr);
}

/// A Deployment of `replicas` pods scheduled by wasp, each requesting `cpu`, labelled app=NAME.
fn deployment(name: &str, replicas: u32, cpu: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      schedulerName: wasp\n      containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: '{cpu}', memory: 64Mi}}}}}}]\n"
    )
}

fn wait_available(cluster: &ControlPlane, name: &str, replicas: u64, patience: Duration) {
    wait_for(&format!("Deployment {name}: {replicas} replicas Available"), patience, || {
        let status = &cluster.get_json(&["get", "deployment", name, "-n", "default"])["status"];
        status["availableReplicas"].as_u64() == Some(replicas)
            && status["updatedReplicas"].as_u64() == Some(replicas)
            && status["replicas"].as_u64() == Some(replicas)
    });
}

/// Pod name -> node name of the bound pods of `namespace` with label selector `selector`.
fn placements(cluster: &ControlPlane, namespace: &str, selector: &str) -> BTreeMap<String, String> {
    pods(cluster, namespace, selector)
        .iter()
        .filter_map(|pod| Some((pod["metadata"]["name"].as_str()?.to_string(), pod["spec"]["nodeName"].as_str()?.to_string())))
        .collect()
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
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    let host = installed.start_host("wasp-0");
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
    let agents: BTreeSet<&str> = bindings.iter().map(|event| event.0["userAgent"].as_str().unwrap_or("")).collect();
    assert_eq!(agents, BTreeSet::from([wasp::kube::client::USER_AGENT]), "wasp names itself to the API server");
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
    let failed: Vec<String> = audit
        .iter()
        .filter(|event| event.user() == WASP_USER && event.code() >= 500)
        .map(|event| format!("{} {} {}", event.code(), event.verb(), event.uri()))
        .collect();
    assert!(failed.is_empty(), "requests of wasp the API server failed: {failed:?}");
    // ... and what it does not grant is refused: wasp may not delete pods.
    let victim = web[0]["metadata"]["name"].as_str().unwrap();
    let deleted = control_plane::kubectl_with(&installed.wasp_kubeconfig, &["delete", "pod", victim, "-n", "default", "--wait=false"], None);
    assert!(!deleted.ok && deleted.stderr.contains("forbidden"), "{}", deleted.stderr);
    let recorded = cluster.audit();
    assert!(recorded.iter().any(|event| event.user() == WASP_USER && event.verb() == "delete" && event.name() == victim && event.code() == 403));

    // The secure port, as kube-scheduler's: the probes open; /metrics only for a token the API server
    // authenticates (TokenReview) whose user may get the path (SubjectAccessReview).
    let https = |path: &str, token: Option<&str>| -> String {
        let mut curl = Command::new("curl");
        curl.args(["-k", "-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("https://127.0.0.1:{}{path}", host.secure)]);
        if let Some(token) = token {
            curl.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        String::from_utf8(curl.output().unwrap().stdout).unwrap()
    };
    assert_eq!(https("/healthz", None), "200");
    assert_eq!(https("/readyz", None), "200");
    assert_eq!(https("/metrics", None), "401");
    assert_eq!(https("/metrics", Some("not-a-token")), "401");
    cluster.must(&["create", "serviceaccount", "scraper", "-n", "default"]);
    let token = cluster.must(&["create", "token", "scraper", "-n", "default"]).trim().to_string();
    assert_eq!(https("/metrics", Some(&token)), "403");
    // The role the install ships for a Prometheus; the refusal above is cached for up to 10 s.
    cluster.must(&["create", "clusterrolebinding", "scraper", "--clusterrole=wasp-metrics-reader", "--serviceaccount=default:scraper"]);
    wait_for("the scraper to be let in", Duration::from_secs(30), || https("/metrics", Some(&token)) == "200");
    assert_eq!(https("/policies", Some(&token)), "403", "the metrics role does not show the configuration");
    let audit = cluster.audit();
    let reviews = |resource: &str| audit.iter().filter(|event| event.user() == WASP_USER && event.resource() == resource && event.code() == 201).count();
    assert!(reviews("tokenreviews") >= 2 && reviews("subjectaccessreviews") >= 2, "decided by the API server, through system:auth-delegator");
}

#[test]
fn the_real_api_server_calls_the_shipped_webhooks_and_pod_creation_survives_wasp_stopped() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 3, &["zone-a"], "4", "16Gi");
    cluster.must(&["create", "namespace", "team-a"]);
    cluster.must(&["annotate", "namespace", "team-a", "wasp.dev/scheduler=wasp"]);
    let host = installed.start_host("wasp-0");
    // The configurations as `wasp certs`' patches left them: the host finds both webhooks callable.
    wait_for("both webhooks callable", Duration::from_secs(30), || {
        let metrics = http_get(host.listen, "/metrics").map(|(_, body)| body).unwrap_or_default();
        CALLABLE_WEBHOOKS.iter().all(|(configuration, webhook)| webhook_callable(&metrics, configuration, webhook) == Some(1))
    });

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
    let creation =
        audit.iter().find(|event| event.verb() == "create" && event.resource() == "pods" && event.namespace() == "team-a" && event.code() == 201).unwrap();
    let annotations = creation.0["annotations"].to_string();
    assert!(annotations.contains("namespace-scheduler.pods.wasp.dev"), "the audit log does not name wasp's mutation: {annotations}");
    wait_for("team-a/web bound by wasp", Duration::from_secs(60), || {
        cluster.get_json(&["get", "pod", "web", "-n", "team-a"])["spec"]["nodeName"].as_str().is_some()
    });

    // A pod of the default scheduler in a namespace that names none: matchConditions (the real CEL) keep it from
    // the validating webhook, and the mutating one leaves it as it is.
    cluster.must(&["run", "plain", "--image=nginx"]);
    assert_eq!(cluster.get_json(&["get", "pod", "plain"])["spec"]["schedulerName"], "default-scheduler");
    let audit = cluster.audit();
    let plain = audit
        .iter()
        .find(|event| event.verb() == "create" && event.resource() == "pods" && event.name() == "plain" && event.code() == 201)
        .expect("plain's creation in the audit log");
    let plain = plain.0["annotations"].to_string();
    // The mutating webhook is asked (the API server has already written default-scheduler) and changes nothing
    // in a namespace that names no scheduler; the validating one is not asked.
    assert!(plain.contains(r#"\"webhook\":\"namespace-scheduler.pods.wasp.dev\",\"mutated\":false"#), "{plain}");
    assert!(!plain.contains("scheduler-name.pods.wasp.dev"), "the validating webhook was called for a default-scheduler pod: {plain}");

    // wasp stopped: the webhooks fail open, pod creation goes on.
    drop(host);
    let slipped = cluster.kubectl(&["run", "slipped", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(slipped.ok, "pod creation failed with wasp stopped: {}", slipped.stderr);
    cluster.must(&["run", "unmutated", "-n", "team-a", "--image=nginx"]);
    assert_eq!(cluster.get_json(&["get", "pod", "unmutated", "-n", "team-a"])["spec"]["schedulerName"], "default-scheduler");

    // The validating webhook's caBundle gone (as when the patches never ran): the API server cannot call it and
    // admits a typo unreviewed; the host says so with an event the API server stores and its metric.
    cluster.must(&["patch", "validatingwebhookconfiguration", "wasp", "--type=json", "-p", r#"[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"}]"#]);
    let host = installed.start_host("wasp-1");
    wait_for("the WebhookNotCallable event", Duration::from_secs(30), || {
        let events = cluster.get_json(&["get", "events", "-n", "default", "--field-selector", "reason=WebhookNotCallable"]);
        events["items"].as_array().unwrap().iter().any(|event| {
            event["involvedObject"]["kind"] == "ValidatingWebhookConfiguration"
                && event["involvedObject"]["name"] == "wasp"
                && event["message"].as_str().unwrap_or_default().contains("caBundle is empty")
        })
    });
    let metrics = http_get(host.listen, "/metrics").unwrap().1;
    assert_eq!(webhook_callable(&metrics, CALLABLE_WEBHOOKS[0].0, CALLABLE_WEBHOOKS[0].1), Some(0), "{metrics}");
    assert_eq!(webhook_callable(&metrics, CALLABLE_WEBHOOKS[1].0, CALLABLE_WEBHOOKS[1].1), Some(1), "{metrics}");
    let unreviewed = cluster.kubectl(&["run", "unreviewed", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(unreviewed.ok, "the API server called a webhook without a caBundle: {}", unreviewed.stderr);
}

/// The shipped webhooks, by configuration kind.
const CALLABLE_WEBHOOKS: [(&str, &str); 2] =
    [("ValidatingWebhookConfiguration", "scheduler-name.pods.wasp.dev"), ("MutatingWebhookConfiguration", "namespace-scheduler.pods.wasp.dev")];

/// `wasp_admission_webhook_callable` for one webhook in a `/metrics` text.
fn webhook_callable(metrics: &str, configuration: &str, webhook: &str) -> Option<i64> {
    let series = format!("wasp_admission_webhook_callable{{configuration=\"{configuration}\",webhook=\"{webhook}\"}} ");
    metrics.lines().find_map(|line| line.strip_prefix(&series)).and_then(|value| value.trim().parse().ok())
}

/// The chart (docs/install.md, "Install with Helm"), installed by helm with its defaults, before the policies (the host
/// waits for them): the certificate it made is the one
/// the real API server verifies when it calls the webhooks, and the shipped RBAC refuses nothing. An upgrade with
/// new values reaches the running host without a restart (a second profile places pods, admission warns instead
/// of refusing) and keeps the certificate. Uninstalled, it leaves the CRD and what wasp placed.
#[test]
fn the_helm_chart_installs_and_an_upgrade_reconfigures_the_running_host() {
    if !common::can_run(&[common::control_plane::missing(), common::helm::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install_with_helm();
    let cluster = &installed.cluster;
    let chart = common::helm::chart();
    let chart = chart.to_str().unwrap();
    cluster.must(&["get", "crd", "autoscalers.wasp.dev"]);
    cluster.create_nodes("worker", 4, &["zone-a", "zone-b"], "4", "16Gi");
    // Installed before its policies (the chart cannot carry them): the host waits for them, not Ready, and starts
    // once the bundle's ConfigMap is projected into its volume.
    let log = cluster.dir.path().join("wasp-0/wasp.log");
    let host = std::thread::scope(|scope| {
        let starting = scope.spawn(|| installed.start_host("wasp-0"));
        wait_for("the host to wait for its policies", Duration::from_secs(60), || {
            std::fs::read_to_string(&log)
                .is_ok_and(|log| log.contains("waiting for a configuration and policies") && log.contains("node-unschedulable.wasm does not exist"))
        });
        assert!(!starting.is_finished(), "the host was Ready without its policies");
        create_policy_bundle(cluster);
        installed.project_policies(&AtomicWriter::new(&cluster.dir.path().join("wasp-0/policies")));
        starting.join().unwrap()
    });
    wait_for("both webhooks callable with the chart's certificate", Duration::from_secs(30), || {
        let metrics = http_get(host.listen, "/metrics").map(|(_, body)| body).unwrap_or_default();
        CALLABLE_WEBHOOKS.iter().all(|(configuration, webhook)| webhook_callable(&metrics, configuration, webhook) == Some(1))
    });
    let typo = cluster.kubectl(&["run", "typo", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(
        !typo.ok && typo.stderr.contains(r#"no scheduler named "wsap" runs in this cluster"#),
        "the real API server did not call the webhook: {}",
        typo.stderr
    );
    create(cluster, &deployment("web", 6, "100m"));
    wait_available(cluster, "web", 6, Duration::from_secs(60));

    // The upgrade: a profile that packs pods, no rescheduler, admission that only warns.
    let secret_before = cluster.get_json(&["get", "secret", "wasp-webhook-tls", "-n", "wasp-system"])["data"].clone();
    let values = cluster.dir.path().join("upgrade.yaml");
    std::fs::write(
        &values,
        "scheduler:\n  profiles:\n  - schedulerName: wasp\n    filters: [node-unschedulable, taint-toleration, resources-fit]\n    scores: [{policy: least-allocated, weight: 1}, {policy: balanced-allocation, weight: 1}]\n  - schedulerName: wasp-pack\n    filters: [node-unschedulable, taint-toleration, resources-fit]\n    scores: [{policy: most-allocated, weight: 1}]\nrescheduler: {enabled: false}\nadmission: {mode: warn}\n",
    )
    .unwrap();
    helm(cluster, &["upgrade", "wasp", chart, "--namespace", "wasp-system", "--set", "replicas=0", "-f", values.to_str().unwrap()]);
    // What the kubelet does with the updated ConfigMap; the host reloads on its own.
    installed.project_config(&host.home, host.policies.path());
    wait_for("the upgraded configuration serving", Duration::from_secs(60), || {
        http_get(host.listen, "/policies").is_some_and(|(status, body)| status == 200 && body.contains("wasp-pack"))
    });
    create(cluster, &deployment("packed", 4, "100m").replace("schedulerName: wasp\n", "schedulerName: wasp-pack\n"));
    wait_available(cluster, "packed", 4, Duration::from_secs(60));
    let packed: BTreeSet<String> = placements(cluster, "default", "app=packed").into_values().collect();
    assert_eq!(packed.len(), 1, "most-allocated packs the 4 pods onto one node: {packed:?}");
    let warned = cluster.kubectl(&["run", "warned", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]);
    assert!(warned.ok, "admission still refuses after the upgrade: {}", warned.stderr);
    assert!(warned.stderr.contains("Warning:") && warned.stderr.contains(r#"no scheduler named "wsap""#), "{}", warned.stderr);
    // The certificate kept: the Secret as it was, and both caBundles its CA.
    let secret_after = cluster.get_json(&["get", "secret", "wasp-webhook-tls", "-n", "wasp-system"])["data"].clone();
    assert_eq!(secret_after, secret_before, "the upgrade made a new certificate");
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let configuration = cluster.get_json(&["get", kind, "wasp"]);
        assert_eq!(configuration["webhooks"][0]["clientConfig"]["caBundle"], secret_after["ca.crt"], "{kind}");
    }
    let mut host = host;
    assert!(host.process.try_wait().unwrap().is_none(), "the host exited");
    let history = helm(cluster, &["history", "wasp", "--namespace", "wasp-system", "-o", "json"]);
    let history: Value = serde_json::from_str(&history).unwrap();
    let statuses: Vec<&str> = history.as_array().unwrap().iter().map(|revision| revision["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["superseded", "deployed"]);
    let audit = cluster.audit();
    let refused: Vec<String> =
        audit.iter().filter(|event| event.user() == WASP_USER && event.code() == 403).map(|event| format!("{} {}", event.verb(), event.uri())).collect();
    assert!(refused.is_empty(), "requests of wasp the chart's RBAC refused: {refused:?}");

    // Uninstalled: the CRD stays (Helm never deletes crds/), what wasp placed stays, pods are created unreviewed.
    drop(host);
    helm(cluster, &["uninstall", "wasp", "--namespace", "wasp-system"]);
    cluster.must(&["get", "crd", "autoscalers.wasp.dev"]);
    for gone in [["clusterrole", "wasp-scheduler"], ["validatingwebhookconfiguration", "wasp"], ["mutatingwebhookconfiguration", "wasp"]] {
        assert!(!cluster.kubectl(&["get", gone[0], gone[1]]).ok, "{} {} outlived the release", gone[0], gone[1]);
    }
    assert_eq!(placements(cluster, "default", "app=web").len(), 6);
    cluster.must(&["run", "after", "--image=nginx"]);

    // A certificate the release does not own (`wasp certs`'s) is not overwritten: the install stops, saying what
    // to do, and leaves it as it was.
    let certs = wasp(&["certs"]);
    let applied = cluster.kubectl_input(&["apply", "-f", "-"], &String::from_utf8(certs.stdout).unwrap());
    assert!(applied.ok, "{}", applied.stderr);
    let theirs = cluster.get_json(&["get", "secret", "wasp-webhook-tls", "-n", "wasp-system"])["data"].clone();
    let refused = common::helm::run(&cluster.dir.path().join("helm"), Some(&cluster.kubeconfig), &["install", "wasp", chart, "--namespace", "wasp-system"]);
    assert!(!refused.ok && refused.stderr.contains("the Secret wasp-system/wasp-webhook-tls exists and is not this release's"), "{}", refused.stderr);
    assert_eq!(cluster.get_json(&["get", "secret", "wasp-webhook-tls", "-n", "wasp-system"])["data"], theirs);
}

/// Follows the pods of `selector` through a watch (`kubectl get -w`, every change the API server sends) and keeps
/// the fewest Ready and not deleted at any moment, once all `replicas` were Ready.
struct FewestReady {
    watch: Child,
    fewest: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FewestReady {
    fn start(cluster: &ControlPlane, selector: &str, replicas: usize) -> FewestReady {
        let mut watch = Command::new("kubectl")
            .args(["get", "pods", "-n", "default", "-l", selector, "-w", "--output-watch-events", "-o", "json"])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let fewest = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        let stream = watch.stdout.take().unwrap();
        let record = fewest.clone();
        std::thread::spawn(move || {
            let mut ready: BTreeMap<String, bool> = BTreeMap::new();
            let mut counting = false;
            for event in serde_json::Deserializer::from_reader(stream).into_iter::<Value>() {
                let Ok(event) = event else { return };
                let pod = &event["object"];
                let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let is_ready = event["type"] != "DELETED"
                    && pod["metadata"]["deletionTimestamp"].is_null()
                    && condition(pod, "Ready").is_some_and(|ready| ready["status"] == "True");
                ready.insert(name, is_ready);
                let now = ready.values().filter(|ready| **ready).count();
                counting |= now == replicas;
                if counting {
                    record.fetch_min(now, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
        wait_for(&format!("the watch of {selector} to see {replicas} Ready"), Duration::from_secs(30), || {
            fewest.load(std::sync::atomic::Ordering::SeqCst) != usize::MAX
        });
        FewestReady { watch, fewest }
    }

    fn fewest(&self) -> usize {
        self.fewest.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for FewestReady {
    fn drop(&mut self) {
        let _ = self.watch.kill();
        let _ = self.watch.wait();
    }
}

#[test]
fn a_node_labelled_for_maintenance_is_drained_one_pod_at_a_time_within_a_real_budget() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    // The shipped rescheduler (its maintenance drain included), with an interval longer than the test, so that
    // the runs are the ones a node's change triggers.
    installed.edit_config(|config| {
        assert!(config.contains("  interval: 5m\n  strategies:\n") && config.contains("- {policy: drain-for-maintenance}"), "{config}");
        config.replace("  interval: 5m\n  strategies:\n", "  interval: 1h\n  strategies:\n")
    });
    cluster.create_nodes("worker", 3, &["zone-a"], "4", "16Gi");
    let host = installed.start_host("wasp-0");
    create(cluster, &deployment("web", 6, "500m"));
    // The budget would allow two web pods down at once; its status is the real disruption controller's.
    create(cluster, "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec:\n  maxUnavailable: 2\n  selector: {matchLabels: {app: web}}\n");
    wait_available(cluster, "web", 6, Duration::from_secs(60));
    wait_for("the disruption controller to count 6 healthy web pods", Duration::from_secs(60), || {
        let status = &cluster.get_json(&["get", "pdb", "web", "-n", "default"])["status"];
        status["currentHealthy"].as_u64() == Some(6) && status["disruptionsAllowed"].as_u64() == Some(2)
    });
    let before = placements(cluster, "default", "app=web");
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for node in before.values() {
        *per_node.entry(node.as_str()).or_default() += 1;
    }
    let (marked, moving) = per_node.iter().max_by_key(|(_, count)| **count).map(|(node, count)| (node.to_string(), *count)).unwrap();
    assert!(moving >= 2, "six pods over three nodes: {before:?}");
    let fewest_ready = FewestReady::start(cluster, "app=web", 6);

    cluster.must(&["label", "node", &marked, "wasp.dev/maintenance=kernel-upgrade"]);
    wait_for(&format!("no web pod left on {marked}"), Duration::from_secs(120), || {
        let now = placements(cluster, "default", "app=web");
        now.len() == 6 && !now.values().any(|node| *node == marked)
    });
    wait_available(cluster, "web", 6, Duration::from_secs(60));

    // What the API server recorded: one accepted eviction per pod that was on the node, all through the
    // Eviction API by wasp, none refused by the budget (the host paces itself: a 429 would mean it asked for more
    // than the budget allowed at that moment).
    let audit = cluster.audit();
    let evictions: Vec<_> = audit.iter().filter(|event| event.subresource() == "eviction" && event.verb() == "create").collect();
    assert!(evictions.iter().all(|event| event.user() == WASP_USER));
    let evicted: BTreeSet<&str> = evictions.iter().filter(|event| event.code() == 201).map(|event| event.name()).collect();
    let were_there: BTreeSet<&str> = before.iter().filter(|(_, node)| **node == marked).map(|(pod, _)| pod.as_str()).collect();
    assert_eq!(evicted, were_there, "each web pod on {marked} evicted, and only those");
    assert_eq!(evictions.iter().filter(|event| event.code() == 201).count(), moving, "each evicted once");
    let refused: Vec<u64> = evictions.iter().map(|event| event.code()).filter(|code| *code != 201).collect();
    assert!(refused.is_empty(), "evictions the API server refused: {refused:?}");
    // The budget allowed two at once; wasp waited for each replacement to be Ready before the next.
    assert_eq!(fewest_ready.fewest(), 5, "never more than one web pod down at a time");
    assert!(!audit.iter().any(|event| event.user() == WASP_USER && event.code() == 403), "a request of wasp refused by RBAC");
    // What `wasp explain eviction` reads for each of them: the drain proposed it, every check passed, evicted.
    for pod in &were_there {
        let (status, body) = http_get(host.listen, &format!("/explain/evictions/default/{pod}")).unwrap();
        assert_eq!(status, 200, "{body}");
        let record: Value = serde_json::from_str(&body).unwrap();
        let said = (record["policy"].as_str(), record["decision"].as_str(), record["outcome"].as_str(), record["node"].as_str());
        assert_eq!(said, (Some("drain-for-maintenance"), Some("evict"), Some("evicted"), Some(marked.as_str())), "{record}");
        assert!(record["checks"].as_array().unwrap().iter().all(|check| check["verdict"] == "passed"), "{record}");
        assert_ne!(record["target"].as_str(), Some(marked.as_str()), "{record}");
    }
}

#[test]
fn the_standby_takes_the_real_lease_when_the_leader_dies_and_no_pod_is_bound_twice() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 6, &["zone-a", "zone-b"], "8", "32Gi");
    let mut hosts = vec![installed.start_host("wasp-0"), installed.start_host("wasp-1")];
    wait_for("a host to hold the Lease", Duration::from_secs(60), || installed.lease_holder().is_some());
    create(cluster, &deployment("web", 40, "100m"));
    wait_available(cluster, "web", 40, Duration::from_secs(120));

    // The leader dies without letting go of the Lease (SIGKILL); the standby takes over once it has expired.
    let holder = installed.lease_holder().unwrap();
    let leader = if holder.starts_with("wasp-0_") { 0 } else { 1 };
    assert!(holder.starts_with(&format!("wasp-{leader}_")), "{holder}");
    let mut dead = hosts.remove(leader);
    dead.process.kill().unwrap();
    dead.process.wait().unwrap();
    let standby = format!("wasp-{}_", 1 - leader);
    cluster.must(&["scale", "deployment", "web", "--replicas=80"]);
    wait_for("the standby to hold the Lease", Duration::from_secs(60), || installed.lease_holder().is_some_and(|holder| holder.starts_with(&standby)));
    wait_available(cluster, "web", 80, Duration::from_secs(120));

    // Every binding request the API server received: each pod exactly once, across both leaders.
    let audit = cluster.audit();
    assert_each_pod_bound_once(cluster, &audit, "app=web", 80);
    // The Lease changed hands through the API: the new holder's update is recorded.
    assert!(audit.iter().any(|event| event.resource() == "leases" && event.name() == "wasp-scheduler" && event.verb() == "update" && event.code() == 200));
}

#[test]
fn a_leader_sent_sigterm_releases_the_real_lease_and_the_standby_leads_within_two_seconds() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 6, &["zone-a", "zone-b"], "8", "32Gi");
    let mut hosts = vec![installed.start_host("wasp-0"), installed.start_host("wasp-1")];
    wait_for("a host to hold the Lease", Duration::from_secs(60), || installed.lease_holder().is_some());
    let holder = installed.lease_holder().unwrap();
    let leader = if holder.starts_with("wasp-0_") { 0 } else { 1 };
    let standby = format!("wasp-{}_", 1 - leader);

    // SIGTERM in the middle of a burst, as the kubelet sends it on a rollout.
    create(cluster, &deployment("web", 120, "100m"));
    wait_for("the leader's first binding", Duration::from_secs(60), || {
        cluster.audit().iter().any(|event| event.subresource() == "binding" && event.verb() == "create")
    });
    let mut stopping = hosts.remove(leader);
    let signalled = std::time::Instant::now();
    assert!(Command::new("kill").arg("-TERM").arg(stopping.process.id().to_string()).status().unwrap().success());
    wait_for("the standby to hold the Lease", Duration::from_secs(30), || installed.lease_holder().is_some_and(|holder| holder.starts_with(&standby)));
    let took_over = signalled.elapsed();
    let status = stopping.process.wait().unwrap();
    let log = std::fs::read_to_string(&stopping.log).unwrap_or_default();
    assert!(status.success(), "wasp run exits 0 after a graceful stop ({status}): {log}");
    assert!(log.contains("released the lease"), "{log}");
    // The kubectl reads of the Lease add their own latency: the handover itself is shorter.
    assert!(took_over < Duration::from_secs(2), "the standby led {took_over:?} after the SIGTERM");
    wait_available(cluster, "web", 120, Duration::from_secs(120));

    // Every binding the API server received: each pod exactly once, none refused, across both leaders.
    let audit = cluster.audit();
    assert_each_pod_bound_once(cluster, &audit, "app=web", 120);
    // The release is an update of the Lease by the stopping leader, answered before it exited.
    let lease_updates = audit.iter().filter(|event| event.resource() == "leases" && event.verb() == "update" && event.code() == 200).count();
    assert!(lease_updates >= 2, "a release and the standby's acquisition");
}

/// Every binding the API server recorded was wasp's, answered 201, and bound a pod never bound before; the
/// `expected` pods now matching `selector` are all among them. A pod bound and then gone must have left through
/// an eviction or a deletion the API server accepted (the new leader's first rescheduler run may rebalance a
/// burst still being placed, and the ReplicaSet replaces what it evicts).
fn assert_each_pod_bound_once(cluster: &ControlPlane, audit: &[AuditEvent], selector: &str, expected: usize) {
    let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
    for event in audit.iter().filter(|event| event.subresource() == "binding" && event.verb() == "create") {
        assert_eq!(event.user(), WASP_USER);
        assert_eq!(event.code(), 201, "a binding refused: {}", event.0);
        *per_pod.entry(event.name()).or_default() += 1;
    }
    assert!(per_pod.values().all(|count| *count == 1), "a pod bound twice: {per_pod:?}");
    // Pods still terminating after an eviction are not among the workload's pods.
    let current: BTreeMap<String, String> = pods(cluster, "default", selector)
        .iter()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|pod| Some((pod["metadata"]["name"].as_str()?.to_string(), pod["spec"]["nodeName"].as_str()?.to_string())))
        .collect();
    assert_eq!(current.len(), expected, "{current:?}");
    let unbound: Vec<&String> = current.keys().filter(|pod| !per_pod.contains_key(pod.as_str())).collect();
    assert!(unbound.is_empty(), "pods placed without a binding recorded: {unbound:?}");
    let gone_legitimately = |pod: &str| {
        audit.iter().any(|event| {
            event.resource() == "pods"
                && event.name() == pod
                && ((event.subresource() == "eviction" && event.verb() == "create" && event.code() == 201)
                    || (event.subresource().is_empty() && event.verb() == "delete" && event.code() == 200))
        })
    };
    let (gone, vanished): (Vec<&str>, Vec<&str>) = per_pod.keys().filter(|pod| !current.contains_key(**pod)).partition(|pod| gone_legitimately(pod));
    assert!(vanished.is_empty(), "pods bound, then gone without an eviction or deletion recorded: {vanished:?}");
    if !gone.is_empty() {
        println!("bound, then evicted or deleted: {gone:?}");
    }
}

/// Asks the real Eviction API whether `pod` may be evicted now, without evicting it (`dryRun: All`): true for
/// 201, false for 429; anything else fails the test.
fn eviction_allowed(cluster: &ControlPlane, pod: &str) -> bool {
    let eviction = format!(
        r#"{{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {{"name": "{pod}", "namespace": "default"}}, "deleteOptions": {{"dryRun": ["All"]}}}}"#
    );
    let answer = cluster.kubectl_input(&["create", "--raw", &format!("/api/v1/namespaces/default/pods/{pod}/eviction"), "-f", "-"], &eviction);
    match answer.ok {
        true => true,
        false if answer.stderr.contains("TooManyRequests") => false,
        false => panic!("eviction of {pod}: {}", answer.stderr),
    }
}

#[test]
fn the_plan_judges_an_unready_pod_by_its_budget_as_the_real_eviction_api_does() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = ControlPlane::start();
    cluster.create_nodes("worker", 3, &["zone-a"], "8", "32Gi");
    // Three web pods of wasp's profile on worker-0 (named in the template: no scheduler runs), the node marked
    // for maintenance.
    create(
        &cluster,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      nodeName: worker-0\n      schedulerName: wasp\n      containers: [{name: app, image: web, resources: {requests: {cpu: 100m}}}]\n",
    );
    create(&cluster, "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec:\n  minAvailable: 3\n  selector: {matchLabels: {app: web}}\n");
    wait_available(&cluster, "web", 3, Duration::from_secs(60));
    let web: Vec<String> = pods(&cluster, "default", "app=web").iter().map(|pod| pod["metadata"]["name"].as_str().unwrap().to_string()).collect();
    let (unready, ready) = (web[0].clone(), web[1].clone());
    // One pod stops being Ready (its readiness probe fails); the disruption controller counts it.
    let not_ready = r#"{"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ProbeFailed"}]}}"#;
    cluster.must(&["patch", "pod", &unready, "--subresource=status", "--type=strategic", "-p", not_ready]);
    let budget_is = |current: u64, desired: u64| {
        let status = &cluster.get_json(&["get", "pdb", "web", "-n", "default"])["status"];
        status["currentHealthy"].as_u64() == Some(current) && status["desiredHealthy"].as_u64() == Some(desired)
    };
    wait_for("the budget to count 2 healthy of 3 desired", Duration::from_secs(60), || budget_is(2, 3));
    cluster.must(&["label", "node", "worker-0", "wasp.dev/maintenance=now"]);
    let plan = || {
        let output = Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["reschedule", "--dry-run", "--strategy", "drain-for-maintenance", "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .current_dir(common::repo_root())
            .output()
            .unwrap();
        assert!(output.status.success(), "wasp reschedule: {}", String::from_utf8_lossy(&output.stderr));
        let table = String::from_utf8(output.stdout).unwrap();
        let verdict = |pod: &str| table.lines().find(|line| line.contains(pod)).unwrap_or_else(|| panic!("{pod} not in the plan: {table}")).to_string();
        (verdict(&unready), verdict(&ready))
    };

    // The budget is short of healthy pods (IfHealthyBudget, the default): the real API refuses both pods.
    assert!(!eviction_allowed(&cluster, &unready), "the API server lets the unready pod go from a short budget");
    assert!(!eviction_allowed(&cluster, &ready));
    let (unready_line, ready_line) = plan();
    assert!(unready_line.contains("skip: pdb") && unready_line.contains("the pod is not Ready"), "{unready_line}");
    assert!(ready_line.contains("skip: pdb"), "{ready_line}");

    // With two desired, the budget is healthy: the unready pod may go without spending, the Ready ones may not.
    cluster.must(&["patch", "pdb", "web", "--type=merge", "-p", r#"{"spec": {"minAvailable": 2}}"#]);
    wait_for("the budget to count 2 healthy of 2 desired", Duration::from_secs(60), || budget_is(2, 2));
    assert!(eviction_allowed(&cluster, &unready), "the API server refuses the unready pod from a healthy budget");
    assert!(!eviction_allowed(&cluster, &ready));
    let (unready_line, ready_line) = plan();
    assert!(!unready_line.contains("skip:"), "{unready_line}");
    // Left in place, by the budget, or by the per-workload limit when the unready pod was planned first.
    assert!(ready_line.contains("skip: pdb") || ready_line.contains("skip: limit"), "{ready_line}");

    // A host leads (its Lease is fresh): a run that would evict is refused, and nothing is evicted.
    let renewed = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.000000Z").to_string();
    create(
        &cluster,
        &format!("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: wasp-scheduler, namespace: kube-system}}\nspec: {{holderIdentity: wasp-0_abc, leaseDurationSeconds: 15, renewTime: '{renewed}'}}\n"),
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(["reschedule", "--strategy", "drain-for-maintenance", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .current_dir(common::repo_root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("the Lease kube-system/wasp-scheduler is held by wasp-0_abc"), "{stderr}");
    // The test's own dry-run evictions come from kubectl; wasp's client is not kubectl.
    let by_wasp =
        cluster.audit().iter().filter(|event| event.subresource() == "eviction" && !event.0["userAgent"].as_str().unwrap_or("").starts_with("kubectl")).count();
    assert_eq!(by_wasp, 0, "an eviction was sent beside the leader");
}

#[test]
fn a_new_policy_version_in_the_configmap_is_served_without_a_restart() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    let fixtures = common::repo_root().join("target/wasm-fixtures");
    // A profile of the user's own, its filter a loose component beside the default bundle.
    installed.put_policies("wasp-policies-1", &[("zone-pin.wasm", fixtures.join("zone-pin-east.wasm"))]);
    installed.edit_config(|config| {
        assert!(config.contains("  profiles:\n"), "{config}");
        config.replace("  profiles:\n", "  profiles:\n  - schedulerName: wasp-pinned\n    filters: [resources-fit, zone-pin]\n")
    });
    cluster.create_nodes("east", 2, &["east"], "8", "32Gi");
    cluster.create_nodes("west", 2, &["west"], "8", "32Gi");
    let host = installed.start_host("wasp-0");
    let zone_of = |node: &str| if node.starts_with("east-") { "east" } else { "west" };
    let pinned = |name: &str| deployment(name, 4, "100m").replace("schedulerName: wasp\n", "schedulerName: wasp-pinned\n");

    create(cluster, &pinned("first"));
    wait_available(cluster, "first", 4, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=first").values().all(|node| zone_of(node) == "east"));

    // The west build replaces it in the ConfigMap; the volume is updated as the kubelet would.
    let west = std::fs::read(fixtures.join("zone-pin-west.wasm")).unwrap();
    let west_digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&west));
    installed.put_policies("wasp-policies-1", &[("zone-pin.wasm", fixtures.join("zone-pin-west.wasm"))]);
    installed.project_policies(&host.policies);
    wait_for("the west build serving", Duration::from_secs(60), || {
        http_get(host.listen, "/policies").is_some_and(|(status, body)| status == 200 && body.contains(&west_digest))
    });
    create(cluster, &pinned("second"));
    wait_available(cluster, "second", 4, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=second").values().all(|node| zone_of(node) == "west"));
    // The same process: the first pods stay where they were, and the host never restarted.
    assert!(placements(cluster, "default", "app=first").values().all(|node| zone_of(node) == "east"));
    let mut process = host;
    assert!(process.process.try_wait().unwrap().is_none(), "the host exited");
}

#[test]
fn a_policy_signed_with_cosign_serves_from_the_configmap_and_an_update_it_did_not_sign_is_refused() {
    if !common::can_run(&[common::control_plane::missing(), common::cosign::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    let fixtures = common::repo_root().join("target/wasm-fixtures");
    // The team's key pair and signature, made by cosign; the public key installed as the README says.
    let signing = cluster.dir.path().join("signing");
    std::fs::create_dir_all(&signing).unwrap();
    common::cosign::generate_key_pair(&signing);
    for zone in ["east", "west"] {
        std::fs::copy(fixtures.join(format!("zone-pin-{zone}.wasm")), signing.join(format!("{zone}.wasm"))).unwrap();
        common::cosign::sign(&signing, "cosign.key", &format!("{zone}.wasm"), &format!("{zone}.wasm.sig"));
    }
    cluster.must(&[
        "create",
        "secret",
        "generic",
        "wasp-policy-keys",
        "-n",
        "wasp-system",
        &format!("--from-file=cosign.pub={}", signing.join("cosign.pub").display()),
    ]);
    let put = |component: &str, signature: &str| {
        installed.put_policies("wasp-policies-1", &[("zone-pin.wasm", signing.join(component)), ("zone-pin.wasm.sig", signing.join(signature))])
    };
    put("east.wasm", "east.wasm.sig");
    installed.edit_config(|config| {
        assert!(config.contains("\npolicies:\n"), "{config}");
        config
            .replace("  profiles:\n", "  profiles:\n  - schedulerName: wasp-pinned\n    filters: [resources-fit, zone-pin]\n")
            .replace("\npolicies:\n", "\npolicies:\n  zone-pin:\n    verification: {keys: [/etc/wasp/keys/cosign.pub], require: true}\n")
    });
    cluster.create_nodes("east", 2, &["east"], "8", "32Gi");
    cluster.create_nodes("west", 2, &["west"], "8", "32Gi");
    let host = installed.start_host("wasp-0");
    let zone_of = |node: &str| if node.starts_with("east-") { "east" } else { "west" };
    let pinned = |name: &str| deployment(name, 2, "100m").replace("schedulerName: wasp\n", "schedulerName: wasp-pinned\n");
    let zone_pin = || {
        let (_, body) = http_get(host.listen, "/policies").expect("/policies answers");
        let status: Value = serde_json::from_str(&body).unwrap();
        status["policies"].as_array().unwrap().iter().find(|policy| policy["name"] == "zone-pin").cloned().unwrap()
    };
    assert!(zone_pin()["signedBy"].as_str().is_some_and(|key| key.ends_with("keys/cosign.pub")), "{}", zone_pin());
    create(cluster, &pinned("first"));
    wait_available(cluster, "first", 2, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=first").values().all(|node| zone_of(node) == "east"));

    // West with east's signature: refused before it is compiled; the signed east keeps deciding.
    put("west.wasm", "east.wasm.sig");
    installed.project_policies(&host.policies);
    wait_for("the update east did not sign refused", Duration::from_secs(60), || {
        zone_pin()["lastError"].as_str().is_some_and(|error| error.contains("refused before it was compiled: its signature is not by any of the keys"))
    });
    let (_, metrics) = http_get(host.listen, "/metrics").unwrap();
    assert!(metrics.lines().any(|line| line.starts_with("wasp_policy_reloads_total{result=\"failure\",reason=\"signature\"}")), "{metrics}");
    create(cluster, &pinned("second"));
    wait_available(cluster, "second", 2, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=second").values().all(|node| zone_of(node) == "east"), "the last good version decided");

    // West with its own signature: it serves, without a restart.
    put("west.wasm", "west.wasm.sig");
    installed.project_policies(&host.policies);
    let west_digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(signing.join("west.wasm")).unwrap()));
    wait_for("the signed west serving", Duration::from_secs(60), || zone_pin()["sha256"] == west_digest.as_str());
    assert_eq!(zone_pin()["lastError"], Value::Null);
    create(cluster, &pinned("third"));
    wait_available(cluster, "third", 2, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=third").values().all(|node| zone_of(node) == "west"));
}

#[test]
fn a_policy_pulled_from_a_registry_places_pods_and_keeps_placing_them_with_the_registry_down() {
    if !common::can_run(&[common::control_plane::missing(), common::cosign::missing(), common::oci_registry::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut registry = common::oci_registry::Registry::start();
    let installed = install();
    let cluster = &installed.cluster;
    let signing = cluster.dir.path().join("signing");
    std::fs::create_dir_all(&signing).unwrap();
    common::cosign::generate_key_pair(&signing);
    std::fs::copy(common::repo_root().join("target/wasm-fixtures/zone-pin-east.wasm"), signing.join("east.wasm")).unwrap();
    let pushed = Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(["policy", "push", "east.wasm", &format!("{}:east", registry.reference("team/zone-pin")), "--sign-key", "cosign.key"])
        .args(["--registry-config", registry.credentials.to_str().unwrap(), "--registry-ca", registry.ca_file.to_str().unwrap()])
        .current_dir(&signing)
        .env("COSIGN_PASSWORD", common::cosign::PASSWORD)
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{}", String::from_utf8_lossy(&pushed.stderr));
    let source = String::from_utf8(pushed.stdout).unwrap().lines().find_map(|line| line.strip_prefix("pinned: ").map(str::to_string)).unwrap();
    // The credentials as a dockerconfigjson Secret, the CA and the key beside them, as the README says.
    cluster.must(&[
        "create",
        "secret",
        "generic",
        "wasp-registry-credentials",
        "-n",
        "wasp-system",
        "--type=kubernetes.io/dockerconfigjson",
        &format!("--from-file=.dockerconfigjson={}", registry.credentials.display()),
        &format!("--from-file=ca.crt={}", registry.ca_file.display()),
    ]);
    cluster.must(&[
        "create",
        "secret",
        "generic",
        "wasp-policy-keys",
        "-n",
        "wasp-system",
        &format!("--from-file=cosign.pub={}", signing.join("cosign.pub").display()),
    ]);
    installed.edit_config(|config| {
        config
            .replace("  profiles:\n", "  profiles:\n  - schedulerName: wasp-pinned\n    filters: [resources-fit, zone-pin]\n")
            .replace("\npolicies:\n", &format!("\nregistries: {{credentials: /etc/wasp/registry/.dockerconfigjson, caFile: /etc/wasp/registry/ca.crt}}\npolicies:\n  zone-pin:\n    source: {source}\n    verification: {{keys: [/etc/wasp/keys/cosign.pub], require: true}}\n"))
    });
    cluster.create_nodes("east", 2, &["east"], "8", "32Gi");
    cluster.create_nodes("west", 2, &["west"], "8", "32Gi");
    let pinned = |name: &str| deployment(name, 2, "100m").replace("schedulerName: wasp\n", "schedulerName: wasp-pinned\n");
    let host = installed.start_host("wasp-0");
    let (_, status) = http_get(host.listen, "/policies").unwrap();
    assert!(status.contains(&source), "{status}");
    create(cluster, &pinned("first"));
    wait_available(cluster, "first", 2, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=first").values().all(|node| node.starts_with("east-")));

    // The registry goes away; the pulled policy keeps deciding, and a restarted host serves it from its store.
    registry.stop();
    drop(host);
    let host = installed.start_host("wasp-0");
    create(cluster, &pinned("second"));
    wait_available(cluster, "second", 2, Duration::from_secs(60));
    assert!(placements(cluster, "default", "app=second").values().all(|node| node.starts_with("east-")));
    drop(host);
}

/// The pod's PodScheduled condition.
fn scheduled_condition(cluster: &ControlPlane, namespace: &str, pod: &str) -> Option<Value> {
    condition(&cluster.get_json(&["get", "pod", pod, "-n", namespace]), "PodScheduled").cloned()
}

#[test]
fn the_default_profile_places_pods_by_kube_schedulers_rules_and_says_why_it_cannot() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 4, &["zone-a", "zone-b"], "4", "16Gi");
    cluster.must(&["taint", "node", "worker-3", "dedicated=gpu:NoSchedule"]);
    cluster.must(&["label", "node", "worker-0", "disk=ssd"]);
    // A zonal volume (zone-b) bound to its claim by the real persistent-volume controller.
    create(
        cluster,
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: data-b}\nspec:\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteOnce]\n  storageClassName: ''\n  hostPath: {path: /tmp/data-b}\n  nodeAffinity:\n    required:\n      nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}]}]\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: ''\n  volumeName: data-b\n  resources: {requests: {storage: 1Gi}}\n",
    );
    wait_for("the claim Bound by the persistent-volume controller", Duration::from_secs(60), || {
        cluster.get_json(&["get", "pvc", "data", "-n", "default"])["status"]["phase"] == "Bound"
    });
    let _host = installed.start_host("wasp-0");

    let pod = |name: &str, spec: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: {name}}}}}\nspec:\n  schedulerName: wasp\n{spec}")
    };
    let container = "  containers: [{name: app, image: nginx, resources: {requests: {cpu: 100m}}}]\n";
    create(cluster, &pod("ssd", &format!("  affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{{matchExpressions: [{{key: disk, operator: In, values: [ssd]}}]}}]}}}}}}\n{container}")));
    create(cluster, &pod("gpu", &format!("  nodeSelector: {{kubernetes.io/hostname: worker-3}}\n  tolerations: [{{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}}]\n{container}")));
    create(cluster, &pod("with-data", &format!("  volumes: [{{name: data, persistentVolumeClaim: {{claimName: data}}}}]\n{container}")));
    for index in 0..2 {
        create(cluster, &pod(&format!("port-{index}"), "  containers: [{name: app, image: nginx, ports: [{containerPort: 80, hostPort: 8080}]}]\n"));
    }
    create(cluster, &pod("gated", &format!("  schedulingGates: [{{name: example.com/quota}}]\n{container}")));
    // Four replicas, one per node, of which only three nodes take them (the fourth is tainted).
    create(cluster, &deployment("spread", 4, "100m").replace(
        "      containers:",
        "      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: spread}}, topologyKey: kubernetes.io/hostname}]}}\n      containers:",
    ));

    let node_of = |name: &str| cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"].as_str().map(str::to_string);
    for name in ["ssd", "gpu", "with-data", "port-0", "port-1"] {
        wait_for(&format!("{name} bound"), Duration::from_secs(60), || node_of(name).is_some());
    }
    assert_eq!(node_of("ssd").unwrap(), "worker-0", "required node affinity");
    assert_eq!(node_of("gpu").unwrap(), "worker-3", "tolerated taint");
    assert!(["worker-1", "worker-3"].contains(&node_of("with-data").unwrap().as_str()), "the volume's zone (zone-b: worker-1, worker-3)");
    assert_ne!(node_of("port-0"), node_of("port-1"), "one host port 8080 per node");
    wait_for("three spread replicas bound", Duration::from_secs(60), || placements(cluster, "default", "app=spread").len() == 3);
    let spread = placements(cluster, "default", "app=spread");
    let nodes: BTreeSet<&String> = spread.values().collect();
    assert_eq!(nodes.len(), 3, "one replica per node: {spread:?}");
    assert!(!nodes.contains(&"worker-3".to_string()), "the untolerated taint: {spread:?}");

    // The fourth replica: Unschedulable, in kube-scheduler's words, on its condition and in an event.
    let pending = pods(cluster, "default", "app=spread").into_iter().find(|pod| pod["spec"]["nodeName"].is_null()).unwrap();
    let pending = pending["metadata"]["name"].as_str().unwrap().to_string();
    let expected = "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 3 node(s) didn't match pod anti-affinity rules.";
    wait_for("the fourth replica's PodScheduled=False", Duration::from_secs(30), || {
        scheduled_condition(cluster, "default", &pending).is_some_and(|condition| condition["status"] == "False")
    });
    let condition = scheduled_condition(cluster, "default", &pending).unwrap();
    assert_eq!(condition["reason"], "Unschedulable", "{condition}");
    assert!(condition["message"].as_str().unwrap().starts_with(expected), "{condition}");
    let events = cluster.get_json(&["get", "events", "-n", "default", "--field-selector", &format!("reason=FailedScheduling,involvedObject.name={pending}")]);
    assert!(events["items"].as_array().unwrap().iter().any(|event| event["message"].as_str().unwrap().starts_with(expected)), "{events}");

    // Attempts that fail for the same reason write the condition once, as kube-scheduler does (each attempt
    // still counts in the event): a node change that does not help retries the pod three times.
    let by_wasp = |audit: &[control_plane::AuditEvent], resource: &str, subresource: &str, prefix: &str| {
        audit
            .iter()
            .filter(|event| {
                event.user() == WASP_USER
                    && event.resource() == resource
                    && event.subresource() == subresource
                    && event.name().starts_with(prefix)
                    && event.code() < 300
            })
            .count()
    };
    let event_writes = || by_wasp(&cluster.audit(), "events", "", &format!("{pending}."));
    for attempt in 0..3 {
        let before = event_writes();
        cluster.must(&["label", "node", "worker-3", &format!("retry={attempt}"), "--overwrite"]);
        wait_for("the pod attempted again", Duration::from_secs(30), || event_writes() > before);
    }
    let status_writes = by_wasp(&cluster.audit(), "pods", "status", &pending);
    assert_eq!(status_writes, 1, "PodScheduled=False written once for four attempts that failed alike");
    assert_eq!(scheduled_condition(cluster, "default", &pending).unwrap()["lastTransitionTime"], condition["lastTransitionTime"]);

    // The gated pod waits, bound by nobody, with kube-scheduler's condition; with its gate removed it is bound.
    let gated = scheduled_condition(cluster, "default", "gated").unwrap();
    assert_eq!(gated["reason"], "SchedulingGated", "{gated}");
    assert!(!cluster.audit().iter().any(|event| event.subresource() == "binding" && event.name() == "gated"), "a binding was sent for a gated pod");
    cluster.must(&["patch", "pod", "gated", "--type=json", "-p", r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#]);
    wait_for("the ungated pod bound", Duration::from_secs(60), || node_of("gated").is_some());

    // Pod-level resources (on by default since 1.34): the pod's request, not its container's, decides the fit.
    create(cluster, &pod("pod-level", "  resources: {requests: {cpu: '5'}}\n  containers: [{name: app, image: nginx, resources: {requests: {cpu: 100m}}}]\n"));
    wait_for("pod-level's PodScheduled=False", Duration::from_secs(30), || {
        scheduled_condition(cluster, "default", "pod-level").is_some_and(|condition| condition["status"] == "False")
    });
    let condition = scheduled_condition(cluster, "default", "pod-level").unwrap();
    assert!(condition["message"].as_str().unwrap().contains("3 Insufficient cpu"), "{condition}");

    // Devices (dynamic resource allocation, GA since 1.34): one GPU on worker-0 in a ResourceSlice, a claim
    // template, a pod that asks for the GPU. wasp allocates no devices, so it binds no such pod: the pod waits
    // with the reason on its condition and in an event, its claim (made by the real resourceclaim controller)
    // stays unallocated and no binding is sent.
    create(
        cluster,
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\nspec:\n  selectors: [{cel: {expression: \"device.driver == 'gpu.example.com'\"}}]\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: worker-0-gpu}\nspec:\n  driver: gpu.example.com\n  nodeName: worker-0\n  pool: {name: worker-0, generation: 1, resourceSliceCount: 1}\n  devices: [{name: gpu-0}]\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: one-gpu, namespace: default}\nspec:\n  spec:\n    devices:\n      requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]\n",
    );
    let with_gpu = pod(
        "with-gpu",
        "  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]\n  containers: [{name: app, image: nginx, resources: {claims: [{name: gpu}]}}]\n",
    );
    let created = cluster.kubectl_input(&["create", "-f", "-"], &with_gpu);
    let devices = "pod has resource claims (gpu), and wasp does not allocate devices (dynamic resource allocation) yet";
    // The validating webhook, called by the real API server, admits it with a warning kubectl prints.
    assert!(created.ok && created.stderr.contains(&format!("Warning: {devices}")), "{}", created.stderr);
    wait_for("with-gpu's PodScheduled=False", Duration::from_secs(30), || {
        scheduled_condition(cluster, "default", "with-gpu").is_some_and(|condition| condition["status"] == "False")
    });
    let condition = scheduled_condition(cluster, "default", "with-gpu").unwrap();
    assert_eq!(condition["reason"], "Unschedulable", "{condition}");
    assert!(condition["message"].as_str().unwrap().starts_with(&format!("0/4 nodes are available: {devices}")), "{condition}");
    let events = cluster.get_json(&["get", "events", "-n", "default", "--field-selector", "reason=FailedScheduling,involvedObject.name=with-gpu"]);
    assert!(events["items"].as_array().unwrap().iter().any(|event| event["message"].as_str().unwrap().contains(devices)), "{events}");
    let claims_of_the_pod = || {
        let claims = cluster.get_json(&["get", "resourceclaims", "-n", "default"]);
        let items = claims["items"].as_array().cloned().unwrap_or_default();
        items.into_iter().filter(|claim| claim["metadata"]["ownerReferences"][0]["name"] == "with-gpu").collect::<Vec<Value>>()
    };
    wait_for("the resourceclaim controller's claim for with-gpu", Duration::from_secs(30), || !claims_of_the_pod().is_empty());
    // Another node change retries the pod: it still waits.
    let before = by_wasp(&cluster.audit(), "events", "", "with-gpu.");
    cluster.must(&["label", "node", "worker-0", "gpu=one", "--overwrite"]);
    wait_for("with-gpu attempted again", Duration::from_secs(30), || by_wasp(&cluster.audit(), "events", "", "with-gpu.") > before);
    assert!(node_of("with-gpu").is_none(), "a pod with resource claims was bound");
    assert!(claims_of_the_pod().iter().all(|claim| claim["status"]["allocation"].is_null()), "{:?}", claims_of_the_pod());
    let audit = cluster.audit();
    assert!(!audit.iter().any(|event| event.subresource() == "binding" && event.name() == "with-gpu"), "a binding was sent for a pod with resource claims");
    assert!(!audit.iter().any(|event| event.user() == WASP_USER && event.code() == 403));
}

#[test]
fn a_high_priority_pod_preempts_through_the_eviction_api_and_is_nominated() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 2, &["zone-a"], "2", "8Gi");
    create(cluster, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n");
    let _host = installed.start_host("wasp-0");
    // The two nodes full of low-priority pods (1 CPU each, 2 per node).
    create(cluster, &deployment("low", 4, "1"));
    wait_available(cluster, "low", 4, Duration::from_secs(60));
    let low_before = placements(cluster, "default", "app=low");

    create(cluster, "apiVersion: v1\nkind: Pod\nmetadata: {name: urgent, namespace: default}\nspec:\n  schedulerName: wasp\n  priorityClassName: high\n  containers: [{name: app, image: nginx, resources: {requests: {cpu: '1'}}}]\n");
    wait_for("urgent bound", Duration::from_secs(90), || cluster.get_json(&["get", "pod", "urgent", "-n", "default"])["spec"]["nodeName"].as_str().is_some());
    let urgent = cluster.get_json(&["get", "pod", "urgent", "-n", "default"]);
    let node = urgent["spec"]["nodeName"].as_str().unwrap();

    // What the API server recorded: exactly one low pod evicted through the Eviction API, from the node urgent
    // went to, and urgent nominated to that node (its status written by wasp) before it was bound there.
    let audit = cluster.audit();
    let evicted: Vec<&str> = audit.iter().filter(|event| event.subresource() == "eviction" && event.code() == 201).map(|event| event.name()).collect();
    // One victim is enough. (A second used to be evicted now and then: a preemption run that came after urgent
    // was assumed on its node, before the informer saw the binding, still counted it as waiting.)
    assert_eq!(evicted.len(), 1, "victims: {evicted:?}");
    assert_eq!(low_before.get(evicted[0]).map(String::as_str), Some(node), "the victim was on urgent's node");
    assert!(audit.iter().filter(|event| event.subresource() == "eviction").all(|event| event.user() == WASP_USER));
    // The audit log keeps the body of status writes (controlplane/apiserver.go's policy).
    let nominated = audit.iter().position(|event| {
        event.name() == "urgent"
            && event.subresource() == "status"
            && event.user() == WASP_USER
            && event.code() == 200
            && event.0["requestObject"].to_string().contains(&format!(r#""nominatedNodeName":"{node}""#))
    });
    let bound = audit.iter().position(|event| event.name() == "urgent" && event.subresource() == "binding" && event.code() == 201);
    assert!(nominated.is_some() && nominated < bound, "urgent's status.nominatedNodeName = {node} written before its binding");
    // No low pod that was not a victim was moved.
    let low_after = placements(cluster, "default", "app=low");
    assert!(low_before.iter().filter(|(pod, _)| !evicted.contains(&pod.as_str())).all(|(pod, node)| low_after.get(pod) == Some(node)), "{low_after:?}");
}

/// Sets the control plane's load model (controlplane/metrics.go): what the metrics APIs serve.
fn set_load(cluster: &ControlPlane, load: &str) {
    let config_map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "wasp-controlplane-load", "namespace": "kube-system"},
        "data": {"load.yaml": load},
    });
    let applied = cluster.kubectl_input(&["apply", "-f", "-"], &config_map.to_string());
    assert!(applied.ok, "{}", applied.stderr);
}

fn status_condition(object: &Value, kind: &str) -> Option<Value> {
    condition(object, kind).cloned()
}

/// A validating webhook of the test's own, registered for wasp's updates of one Deployment's `scale`: the first
/// one it is asked about is held while a user (the admin) scales the Deployment to `user_replicas`, then allowed.
/// So wasp's write reaches the API server's storage after the object changed under it, on the resourceVersion it
/// read: what a user's `kubectl scale` between wasp's read and write looks like, made certain.
struct ScaleChangedMeanwhile {
    /// Runs the webhook's server while this lives.
    _runtime: tokio::runtime::Runtime,
    /// What went wrong with the user's scale, if anything (a panic in the server's task would be lost).
    failure: std::sync::Arc<Mutex<Option<String>>>,
    stop: tokio_util::sync::CancellationToken,
}

impl ScaleChangedMeanwhile {
    fn register(cluster: &ControlPlane, deployment: &str, user_replicas: u32) -> ScaleChangedMeanwhile {
        use wasp::admission::{certs, tls::ReloadingCertificate, webhook::TlsListener};
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let generated = certs::generate(&certs::service_names("scale-changed-meanwhile", "default"), 1).unwrap();
        let certificate = ReloadingCertificate::in_memory(&generated.certificate, &generated.private_key).unwrap();
        let listener = runtime.block_on(TlsListener::bind(&certificate, "127.0.0.1:0".parse().unwrap())).unwrap();
        let address = listener.local_addr().unwrap();
        let held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failure = std::sync::Arc::new(Mutex::new(None));
        let (kubeconfig, deployment_name, failed) = (cluster.kubeconfig.clone(), deployment.to_string(), failure.clone());
        let review = move |axum::Json(review): axum::Json<Value>| {
            let (held, kubeconfig, deployment, failed) = (held.clone(), kubeconfig.clone(), deployment_name.clone(), failed.clone());
            async move {
                if !held.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let scaled = tokio::task::spawn_blocking(move || {
                        control_plane::kubectl_with(
                            &kubeconfig,
                            &["scale", "deployment", &deployment, "-n", "default", &format!("--replicas={user_replicas}")],
                            None,
                        )
                    })
                    .await
                    .unwrap();
                    if !scaled.ok {
                        *failed.lock().unwrap() = Some(scaled.stderr);
                    }
                }
                axum::Json(serde_json::json!({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": true},
                }))
            }
        };
        let stop = tokio_util::sync::CancellationToken::new();
        runtime.spawn(listener.serve(axum::Router::new().route("/review", axum::routing::post(review)), stop.clone()));
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&generated.ca);
        create(
            cluster,
            &format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: scale-changed-meanwhile\n  namespace: default\n  annotations: {{controlplane.wasp.dev/address: '{address}'}}\nspec: {{ports: [{{port: 443}}]}}\n---\n\
                 apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: scale-changed-meanwhile}}\nwebhooks:\n\
                 - name: scale-changed-meanwhile.wasp.dev\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n  timeoutSeconds: 30\n\
                 \x20 clientConfig: {{service: {{name: scale-changed-meanwhile, namespace: default, path: /review}}, caBundle: {ca_bundle}}}\n\
                 \x20 rules: [{{apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [deployments/scale]}}]\n\
                 \x20 matchConditions:\n  - {{name: wasp-on-{deployment}, expression: \"request.userInfo.username == '{WASP_USER}' && request.name == '{deployment}'\"}}\n"
            ),
        );
        ScaleChangedMeanwhile { _runtime: runtime, failure, stop }
    }
}

impl ScaleChangedMeanwhile {
    fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap().clone()
    }
}

impl Drop for ScaleChangedMeanwhile {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[test]
fn an_autoscaler_scales_through_the_real_scale_subresource_on_aggregated_metrics_and_yields_to_an_hpa() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 4, &["zone-a"], "8", "32Gi");
    let host = installed.start_host("wasp-0");
    create(cluster, &deployment("web", 2, "200m"));
    wait_available(cluster, "web", 2, Duration::from_secs(60));
    // Each web pod uses 400m of its 200m request: 200% against a 50% target, so 2 replicas want 8 (capped at 6).
    set_load(cluster, "pods:\n- {namespace: default, selector: app=web, cpu: 400m, memory: 100Mi}\n");
    create(
        cluster,
        "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: web, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  minReplicas: 2\n  maxReplicas: 6\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}\n",
    );
    wait_available(cluster, "web", 6, Duration::from_secs(90));

    // Through the API server: the metrics read from the aggregated metrics.k8s.io, the replicas written through
    // the scale subresource only, never the Deployment itself.
    let audit = cluster.audit();
    let by_wasp = |event: &&control_plane::AuditEvent| event.user() == WASP_USER;
    assert!(
        audit.iter().filter(by_wasp).any(|event| event.uri().starts_with("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods") && event.code() == 200),
        "no metrics read through the aggregation layer"
    );
    let scales: Vec<_> =
        audit.iter().filter(by_wasp).filter(|event| event.resource() == "deployments" && ["update", "patch"].contains(&event.verb())).collect();
    assert!(
        !scales.is_empty() && scales.iter().all(|event| event.subresource() == "scale" && event.code() == 200),
        "{:?}",
        scales.iter().map(|event| event.uri()).collect::<Vec<_>>()
    );
    let autoscaler = cluster.get_json(&["get", "autoscaler", "web", "-n", "default"]);
    assert_eq!(autoscaler["status"]["desiredReplicas"], 6, "{autoscaler}");
    // What `wasp explain autoscaler` reads: the metric as read, the policy's answer above the maximum, held to it.
    wait_for("a sync at 6 replicas recorded", Duration::from_secs(60), || {
        let (_, body) = http_get(host.listen, "/explain/autoscalers/default/web").unwrap();
        serde_json::from_str::<Value>(&body).is_ok_and(|record| record["current"] == 6)
    });
    let (_, body) = http_get(host.listen, "/explain/autoscalers/default/web").unwrap();
    let record: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((record["metrics"][0]["metric"].as_str(), record["metrics"][0]["source"].as_str()), (Some("cpu"), Some("Resource")), "{record}");
    assert!(record["metrics"][0]["reading"].as_str().unwrap().starts_with("200%/50%"), "{record}");
    assert!(record["recommended"].as_i64().unwrap() > 6 && record["desired"] == 6 && record["outcome"] == "unchanged", "{record}");
    assert!(!record["limitedBy"].as_array().unwrap().is_empty(), "{record}");
    // The pods come from the host's pod informer (one cluster-wide list and watch), not a list per pass.
    let pod_lists: Vec<&str> = audit
        .iter()
        .filter(by_wasp)
        .filter(|event| event.verb() == "list" && event.uri().starts_with("/api/v1/namespaces/") && event.resource() == "pods")
        .map(|event| event.uri())
        .collect();
    assert!(pod_lists.is_empty(), "the autoscaler listed pods per namespace: {pod_lists:?}");

    // A user scales a Deployment between wasp's read of its scale and wasp's write: the real API server refuses
    // wasp's write on the stale resourceVersion (409), the user's replicas stand, and wasp's next sync starts
    // from them.
    create(cluster, &deployment("shop", 2, "200m"));
    wait_available(cluster, "shop", 2, Duration::from_secs(60));
    let meanwhile = ScaleChangedMeanwhile::register(cluster, "shop", 3);
    set_load(
        cluster,
        "pods:\n- {namespace: default, selector: app=web, cpu: 400m, memory: 100Mi}\n- {namespace: default, selector: app=shop, cpu: 400m, memory: 100Mi}\n",
    );
    create(
        cluster,
        "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: shop, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: shop}\n  minReplicas: 2\n  maxReplicas: 6\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}\n",
    );
    wait_available(cluster, "shop", 6, Duration::from_secs(90));
    assert_eq!(meanwhile.failure(), None, "the user's kubectl scale failed");
    let shop_scales: Vec<(String, u64)> = cluster
        .audit()
        .iter()
        .filter(|event| {
            event.resource() == "deployments" && event.name() == "shop" && event.subresource() == "scale" && ["update", "patch"].contains(&event.verb())
        })
        .map(|event| (if event.user() == WASP_USER { "wasp" } else { "user" }.to_string(), event.code()))
        .collect();
    let expected_start = [("user".to_string(), 200), ("wasp".to_string(), 409), ("wasp".to_string(), 200)];
    assert!(
        shop_scales.starts_with(&expected_start) && shop_scales[3..].iter().all(|(user, code)| user == "wasp" && *code == 200),
        "updates of shop's scale, in order: {shop_scales:?}"
    );
    let rescales: Vec<String> =
        cluster.get_json(&["get", "events", "-n", "default", "--field-selector", "involvedObject.kind=Autoscaler,involvedObject.name=shop"])["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| format!("{}: {}", event["reason"].as_str().unwrap(), event["message"].as_str().unwrap()))
            .collect();
    assert!(
        rescales
            .iter()
            .any(|event| event.starts_with("FailedRescale: New size: ") && event.contains("(from 2)") && event.contains("changed since it was read")),
        "{rescales:?}"
    );
    let first_rescale = rescales.iter().find(|event| event.starts_with("SuccessfulRescale"));
    assert!(first_rescale.is_some_and(|event| event.contains("(from 3)")), "{rescales:?}");

    // A Deployment an HPA owns: wasp's Autoscaler for it, whose load asks for more replicas, is refused with a
    // reason and sends no scale update; the real HPA controller reads the same metrics the same way (its status
    // shows the 200% utilization wasp saw) and scales it itself.
    create(cluster, &deployment("api", 2, "200m"));
    wait_available(cluster, "api", 2, Duration::from_secs(60));
    set_load(
        cluster,
        "pods:\n- {namespace: default, selector: app=web, cpu: 400m, memory: 100Mi}\n- {namespace: default, selector: app=api, cpu: 400m, memory: 100Mi}\n",
    );
    create(
        cluster,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: api, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}\n  minReplicas: 2\n  maxReplicas: 3\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}\n",
    );
    create(
        cluster,
        "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: api, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}\n  minReplicas: 2\n  maxReplicas: 6\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}\n",
    );
    wait_for("wasp to yield to the HPA", Duration::from_secs(60), || {
        let autoscaler = cluster.get_json(&["get", "autoscaler", "api", "-n", "default"]);
        status_condition(&autoscaler, "AbleToScale").is_some_and(|able| able["status"] == "False" && able["reason"] == "ConflictingHorizontalPodAutoscaler")
    });
    wait_for("the HPA controller to scale api to its maximum, 3", Duration::from_secs(90), || {
        let hpa = cluster.get_json(&["get", "hpa", "api", "-n", "default"]);
        hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"].as_u64() == Some(200)
            && cluster.get_json(&["get", "deployment", "api", "-n", "default"])["spec"]["replicas"] == 3
    });
    let api_scales: Vec<String> = cluster
        .audit()
        .iter()
        .filter(|event| {
            event.resource() == "deployments" && event.name() == "api" && event.subresource() == "scale" && ["update", "patch"].contains(&event.verb())
        })
        .map(|event| event.user().to_string())
        .collect();
    assert!(!api_scales.is_empty() && api_scales.iter().all(|user| user != WASP_USER), "scale writes of api: {api_scales:?}");
    let (_, body) = http_get(host.listen, "/explain/autoscalers/default/api").unwrap();
    assert!(
        serde_json::from_str::<Value>(&body).unwrap()["outcome"]
            .as_str()
            .unwrap()
            .starts_with("not scaled: ConflictingHorizontalPodAutoscaler: HorizontalPodAutoscaler api also scales"),
        "{body}"
    );

    // A custom resource whose scale subresource has no labelSelectorPath: its scale reports no selector, which
    // would select every pod of the namespace. Refused as the HPA refuses it; its scale is read, never written.
    create(
        cluster,
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n    subresources:\n      status: {}\n      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}\n",
    );
    cluster.must(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=60s"]);
    // What a user grants wasp for a custom target's scale.
    create(
        cluster,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: wasp-widgets}\nrules:\n- {apiGroups: [example.com], resources: [widgets/scale], verbs: [get, update]}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: wasp-widgets}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasp-widgets}\nsubjects: [{kind: ServiceAccount, name: wasp, namespace: wasp-system}]\n",
    );
    create(cluster, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: gadget, namespace: default}\nspec: {replicas: 2}\n");
    create(
        cluster,
        "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: gadget, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: example.com/v1, kind: Widget, name: gadget}\n  minReplicas: 1\n  maxReplicas: 10\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}\n",
    );
    wait_for("the selector-less target refused", Duration::from_secs(60), || {
        let autoscaler = cluster.get_json(&["get", "autoscaler", "gadget", "-n", "default"]);
        status_condition(&autoscaler, "ScalingActive").is_some_and(|active| active["status"] == "False" && active["reason"] == "InvalidSelector")
    });
    let widget_scale = |verbs: &[&str]| {
        cluster
            .audit()
            .iter()
            .filter(|event| event.user() == WASP_USER && event.resource() == "widgets" && event.subresource() == "scale" && verbs.contains(&event.verb()))
            .map(|event| event.code())
            .collect::<Vec<_>>()
    };
    assert!(widget_scale(&["get"]).contains(&200), "the scale was read");
    assert!(widget_scale(&["update", "patch"]).is_empty(), "a selector-less target's scale was written");
    assert_eq!(cluster.get_json(&["get", "widget", "gadget", "-n", "default"])["spec"]["replicas"], 2);
}

/// What `wasp-controlplane check-placements` says of the bindings of `pods` (`namespace/name`, in the order they
/// were bound): each checked with kube-scheduler's own filters against the cluster as it was then.
fn check_placements(cluster: &ControlPlane, pods: &[&str]) -> String {
    let order = cluster.dir.path().join("order");
    std::fs::write(&order, pods.iter().map(|pod| format!("{pod}\n")).collect::<String>()).unwrap();
    let output =
        Command::new(control_plane::binary()).args(["check-placements", "--kubeconfig"]).arg(&cluster.kubeconfig).arg("--order").arg(&order).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_placement_check_names_the_bindings_kube_schedulers_filters_refuse() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = ControlPlane::start();
    cluster.create_nodes("small", 1, &["zone-a"], "1", "4Gi");
    cluster.create_nodes("tainted", 1, &["zone-a"], "8", "32Gi");
    cluster.must(&["taint", "node", "tainted-0", "dedicated=gpu:NoSchedule"]);
    // Bound by whoever created them (spec.nodeName), in this order: the second does not fit beside the first,
    // the third does not tolerate the taint, the fourth does.
    let pod = |name: &str, node: &str, cpu: &str, tolerates: bool| {
        let tolerations = if tolerates { "\n  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]" } else { "" };
        format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  nodeName: {node}\n  containers: [{{name: app, image: app, resources: {{requests: {{cpu: {cpu}}}}}}}]{tolerations}\n")
    };
    let manifest = [
        pod("first", "small-0", "600m", false),
        pod("second", "small-0", "600m", false),
        pod("untolerated", "tainted-0", "100m", false),
        pod("tolerated", "tainted-0", "100m", true),
    ]
    .concat();
    create(&cluster, &manifest);
    let stdout = check_placements(&cluster, &["default/first", "default/second", "default/untolerated", "default/tolerated"]);
    let violations: Vec<&str> = stdout.lines().filter(|line| line.starts_with("violation ")).collect();
    assert_eq!(
        violations,
        [
            "violation default/second on small-0: NodeResourcesFit: Insufficient cpu",
            "violation default/untolerated on tainted-0: TaintToleration: node(s) had untolerated taint(s)"
        ],
        "{stdout}"
    );
    assert!(stdout.lines().any(|line| line == "checked 4 gone 0 violations 2 out-of-order 0"), "{stdout}");
}

#[test]
fn node_metrics_are_listed_by_label_selector_with_idle_nodes_at_zero() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = ControlPlane::start();
    cluster.create_nodes("worker", 3, &["zone-a", "zone-a", "zone-b"], "8", "32Gi");
    create(&cluster, "apiVersion: v1\nkind: Pod\nmetadata: {name: busy, namespace: default, labels: {app: busy}}\nspec:\n  nodeName: worker-0\n  containers: [{name: app, image: app}]\n");
    wait_for("the pod Running", Duration::from_secs(60), || cluster.get_json(&["get", "pod", "busy"])["status"]["phase"] == "Running");
    set_load(&cluster, "pods: [{namespace: default, selector: app=busy, cpu: 300m, memory: 100Mi}]");
    let usage = |path: &str| -> BTreeMap<String, String> {
        let answer: Value = serde_json::from_str(&cluster.must(&["get", "--raw", path])).unwrap();
        answer["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| (item["metadata"]["name"].as_str().unwrap().to_string(), item["usage"]["cpu"].as_str().unwrap().to_string()))
            .collect()
    };
    // What metrics-server lists: the nodes the selector matches, an idle one among them.
    wait_for("worker-0's usage from the load model", Duration::from_secs(30), || {
        usage("/apis/metrics.k8s.io/v1beta1/nodes").get("worker-0").is_some_and(|cpu| cpu == "300m")
    });
    let zone_a = usage("/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=topology.kubernetes.io%2Fzone%3Dzone-a");
    assert_eq!(zone_a.keys().collect::<Vec<_>>(), ["worker-0", "worker-1"], "{zone_a:?}");
    assert_eq!(zone_a["worker-1"], "0", "an idle node is listed at zero");
    let all = usage("/apis/metrics.k8s.io/v1beta1/nodes");
    assert_eq!(all.len(), 3, "{all:?}");
    // kubectl's own selector flag, through the aggregation layer.
    let top = cluster.must(&["top", "nodes", "-l", "topology.kubernetes.io/zone=zone-b", "--no-headers"]);
    assert!(top.lines().count() == 1 && top.starts_with("worker-2 "), "{top}");

    // A total shared by the Running pods a rule matches (the autoscaling side by side's load): 900m over three.
    for name in ["shared-0", "shared-1", "shared-2"] {
        create(&cluster, &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: shared}}}}\nspec:\n  nodeName: worker-1\n  containers: [{{name: app, image: app}}]\n"));
    }
    set_load(&cluster, "pods: [{namespace: default, selector: app=shared, totalCpu: 900m}]");
    wait_for("each shared pod's third of 900m", Duration::from_secs(60), || {
        let answer: Value =
            serde_json::from_str(&cluster.must(&["get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dshared"])).unwrap();
        let shares: Vec<&Value> = answer["items"].as_array().unwrap().iter().map(|pod| &pod["containers"][0]["usage"]["cpu"]).collect();
        shares.len() == 3 && shares.iter().all(|cpu| *cpu == "300m")
    });
}

/// `wasp explain` (and `kubectl wasp explain`, the same binary as kubectl's plugin) as an on-call engineer runs it:
/// a ServiceAccount granted the shipped `wasp-explain-reader` roles, the leader found through the real Lease, its
/// certificate pinned from it. What it prints is checked against what the API server recorded.
#[test]
fn wasp_explain_says_why_a_pod_is_pending_and_why_another_went_where_it_did() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 3, &["zone-a", "zone-b"], "4", "16Gi");
    cluster.must(&["taint", "node", "worker-2", "dedicated=gpu:NoSchedule"]);
    let host = installed.start_host("wasp-0");
    let pod = |name: &str, cpu: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: wasp\n  containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: '{cpu}'}}}}}}]\n")
    };
    create(cluster, &pod("big", "5"));
    create(cluster, &pod("small", "100m"));
    wait_for("big's PodScheduled=False", Duration::from_secs(60), || {
        scheduled_condition(cluster, "default", "big").is_some_and(|condition| condition["status"] == "False")
    });
    wait_for("small bound", Duration::from_secs(60), || !cluster.get_json(&["get", "pod", "small", "-n", "default"])["spec"]["nodeName"].is_null());
    let small_node = cluster.get_json(&["get", "pod", "small", "-n", "default"])["spec"]["nodeName"].as_str().unwrap().to_string();

    // The on-call engineer: the shipped roles, bound to a ServiceAccount whose token the kubeconfig holds.
    create(
        cluster,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: oncall, namespace: default}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: oncall-explain}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasp-explain-reader}\nsubjects: [{kind: ServiceAccount, name: oncall, namespace: default}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: oncall-explain, namespace: wasp-system}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: wasp-explain-reader}\nsubjects: [{kind: ServiceAccount, name: oncall, namespace: default}]\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: nosy, namespace: default}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: nosy-lease, namespace: wasp-system}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: wasp-explain-reader}\nsubjects: [{kind: ServiceAccount, name: nosy, namespace: default}]\n",
    );
    let oncall = cluster.service_account_kubeconfig("default", "oncall");
    let explain = |kubeconfig: &Path, args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_wasp")).arg("explain").args(args).env("KUBECONFIG", kubeconfig).output().unwrap();
        (output.status.success(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
    };

    let (ok, json, stderr) = explain(&oncall, &["pod", "default/big", "-o", "json"]);
    assert!(ok, "{stderr}");
    let record: Value = serde_json::from_str(&json).unwrap();
    assert!(record["node"].is_null(), "{record}");
    let condition = scheduled_condition(cluster, "default", "big").unwrap();
    assert_eq!(record["message"], condition["message"], "the record says what the pod's condition says");
    assert_eq!(record["nodes"], 3);
    let step = |policy: &str| {
        record["filters"].as_array().unwrap().iter().find(|step| step["policy"] == policy).cloned().unwrap_or_else(|| panic!("no {policy} in {record}"))
    };
    assert_eq!((step("taint-toleration")["evaluated"].as_u64(), step("taint-toleration")["rejected"].as_u64()), (Some(3), Some(1)), "{record}");
    assert_eq!(step("taint-toleration")["reasons"][0]["reason"], "node(s) had untolerated taint {dedicated: gpu}");
    assert_eq!((step("resources-fit")["evaluated"].as_u64(), step("resources-fit")["rejected"].as_u64()), (Some(2), Some(2)), "{record}");
    assert_eq!(step("resources-fit")["reasons"], serde_json::json!([{"reason": "Insufficient cpu", "nodes": 2}]));
    assert_eq!(step("pod-topology-spread")["evaluated"], 0, "after every node was rejected, no filter is asked");

    // The pod that was placed: the chosen node is the one the API server bound it to, first among the scores.
    let (ok, table, stderr) = explain(&oncall, &["pod", "small", "-n", "default"]);
    assert!(ok, "{stderr}");
    assert!(table.contains(&format!("Result:  placed on {small_node} (the highest score of 2 feasible nodes")), "{table}");
    let chosen_row = table.lines().find(|line| line.starts_with(&format!("{small_node} *"))).unwrap_or_else(|| panic!("{table}"));
    let header = table.lines().find(|line| line.starts_with("NODE")).unwrap();
    assert!(header.contains("least-allocated (x1)") && header.contains("taint-toleration (x3)"), "{header}");
    assert!(!chosen_row.is_empty());

    // kubectl's plugin: the same binary as kubectl-wasp on the PATH.
    let plugins = cluster.dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_wasp"), plugins.join("kubectl-wasp")).unwrap();
    let path = format!("{}:{}", plugins.display(), std::env::var("PATH").unwrap_or_default());
    let plugin = Command::new("kubectl").args(["wasp", "explain", "pod", "default/big"]).env("KUBECONFIG", &oncall).env("PATH", path).output().unwrap();
    let plugin_out = String::from_utf8_lossy(&plugin.stdout);
    assert!(plugin.status.success(), "{}", String::from_utf8_lossy(&plugin.stderr));
    assert!(
        plugin_out.contains("Result:  unschedulable: 0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu."),
        "{plugin_out}"
    );
    assert!(plugin_out.contains("resources-fit") && plugin_out.contains("2 Insufficient cpu"), "{plugin_out}");

    // Who may read the Lease but was not granted /explain/*: the host refuses, after asking the API server.
    let nosy = cluster.service_account_kubeconfig("default", "nosy");
    let (ok, _, stderr) = explain(&nosy, &["pod", "default/big"]);
    assert!(!ok);
    assert!(stderr.contains("refused /explain/pods/default/big (403)") && stderr.contains("nonResourceURLs"), "{stderr}");
    let reviews = cluster.audit().iter().filter(|event| event.user() == WASP_USER && event.resource() == "subjectaccessreviews").count();
    assert!(reviews >= 2, "each user's access was decided by the API server: {reviews} SubjectAccessReviews");
    // Client certificates, as most installers' admin kubeconfigs hold: the admin's (kubernetes-admin, group
    // system:masters) reads every record; alice's, issued through a CertificateSigningRequest, is refused until
    // her certificate's group is granted the role; one the cluster's CA did not sign is not even a user.
    let (ok, table, stderr) = explain(&cluster.kubeconfig, &["pod", "default/big"]);
    assert!(ok && table.contains("Result:  unschedulable: 0/3 nodes are available"), "the admin's client certificate: {stderr}");
    let alice = cluster.client_certificate_kubeconfig("alice", &["oncall"]);
    cluster.must(&["create", "rolebinding", "oncall-group-explain", "-n", "wasp-system", "--role=wasp-explain-reader", "--group=oncall"]);
    let (ok, _, stderr) = explain(&alice, &["pod", "default/big"]);
    assert!(!ok && stderr.contains("(403)") && stderr.contains(r#"User "alice" cannot get path"#), "{stderr}");
    cluster.must(&["create", "clusterrolebinding", "oncall-group-explain", "--clusterrole=wasp-explain-reader", "--group=oncall"]);
    // The refusal above is cached for up to 10 s.
    wait_for("alice's group let in", Duration::from_secs(30), || explain(&alice, &["pod", "default/big"]).0);
    // A certificate naming the admin, signed by nobody the cluster trusts (the API server would refuse it too, so
    // the host is asked directly).
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "kubernetes-admin");
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
    let forged = params.self_signed(&key).unwrap();
    let (certificate, private_key) = (cluster.dir.path().join("forged.crt"), cluster.dir.path().join("forged.key"));
    std::fs::write(&certificate, forged.pem()).unwrap();
    std::fs::write(&private_key, key.serialize_pem()).unwrap();
    let curl = Command::new("curl")
        .args(["-k", "-s", "-w", "\n%{http_code}", "--cert"])
        .arg(&certificate)
        .arg("--key")
        .arg(&private_key)
        .arg(format!("https://127.0.0.1:{}/explain/pods/default/big", host.secure))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&curl.stdout).into_owned();
    assert!(answer.ends_with("\n401") && answer.contains("not one the cluster's client CA signed"), "{answer}");
    // A pod nobody asked wasp to place: said so, not an empty record.
    let (ok, _, stderr) = explain(&oncall, &["pod", "default/nobody"]);
    assert!(!ok && stderr.contains("no pod record for default/nobody here"), "{stderr}");

    // Answered from the record, not by scheduling again: fast whatever the cluster's size.
    let mut took: Vec<Duration> = (0..5)
        .map(|_| {
            let started = std::time::Instant::now();
            let (status, _) = http_get(host.listen, "/explain/pods/default/big").unwrap();
            assert_eq!(status, 200);
            started.elapsed()
        })
        .collect();
    took.sort();
    assert!(took[2] < Duration::from_millis(100), "median {:?}", took[2]);
}

#[test]
fn a_gang_is_bound_whole_or_not_at_all_and_its_pod_group_says_so() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install_with(&["--kube-scheduler"]);
    let cluster = &installed.cluster;
    // Three nodes, each with room for one member (1500m of 2 CPUs).
    cluster.create_nodes("worker", 3, &["zone-a"], "2", "8Gi");
    let _host = installed.start_host("wasp-0");
    let pod = |name: &str, scheduler: &str, group: Option<&str>| {
        let group = group.map(|group| format!("  schedulingGroup: {{podGroupName: {group}}}\n")).unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: gang}}}}\nspec:\n  schedulerName: {scheduler}\n{group}  containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: 1500m}}}}}}]\n"
        )
    };
    let pod_group = |name: &str| {
        format!("apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulingPolicy: {{gang: {{minCount: 3}}}}\n")
    };
    let node_of = |name: &str| cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"].as_str().map(str::to_string);
    let group_condition = |group: &str| status_condition(&cluster.get_json(&["get", "podgroup", group, "-n", "default"]), "PodGroupInitiallyScheduled");
    // A gang of three of which two fit: what its PodGroup and its members are told, once they are.
    let told = |group: &str, members: &[String]| {
        wait_for(&format!("PodGroup {group}'s condition False"), Duration::from_secs(60), || {
            group_condition(group).is_some_and(|condition| condition["status"] == "False")
        });
        wait_for("every member's PodScheduled=False", Duration::from_secs(30), || {
            members.iter().all(|member| scheduled_condition(cluster, "default", member).is_some_and(|condition| condition["status"] == "False"))
        });
        let condition = group_condition(group).unwrap();
        assert_eq!(condition["reason"], "Unschedulable", "{condition}");
        let mut messages: Vec<String> =
            members.iter().map(|member| scheduled_condition(cluster, "default", member).unwrap()["message"].as_str().unwrap().to_string()).collect();
        messages.sort();
        (condition["message"].as_str().unwrap().to_string(), messages)
    };

    // Two members before their PodGroup exists, and a pod of no group that takes one node: the members are held
    // (as kube-scheduler's PreEnqueue holds them: no condition, no binding) while the other pod is bound.
    create(cluster, &pod("train-0", "wasp", Some("train")));
    create(cluster, &pod("train-1", "wasp", Some("train")));
    create(cluster, &pod("blocker", "wasp", None));
    wait_for("blocker bound", Duration::from_secs(60), || node_of("blocker").is_some());
    // The API server kept spec.schedulingGroup: GenericWorkload is on in this control plane.
    assert_eq!(cluster.get_json(&["get", "pod", "train-0", "-n", "default"])["spec"]["schedulingGroup"]["podGroupName"], "train");
    create(cluster, &pod_group("train"));
    // The third member: the group cycle finds room for two, so it binds none of them.
    create(cluster, &pod("train-2", "wasp", Some("train")));
    let members: Vec<String> = (0..3).map(|index| format!("train-{index}")).collect();
    let (group_message, messages) = told("train", &members);
    let short = "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining";
    assert_eq!(group_message, short);
    let fit = messages.iter().filter(|message| **message == format!("pod group is unschedulable, {short}")).count();
    let did_not = messages.iter().filter(|message| message.starts_with("0/3 nodes are available: 3 Insufficient cpu")).count();
    assert_eq!((fit, did_not), (2, 1), "{messages:?}");
    let bindings_of = |name: &str| cluster.audit().iter().filter(|event| event.subresource() == "binding" && event.name() == name).count();
    for member in &members {
        assert_eq!(bindings_of(member), 0, "{member} bound while its gang did not fit");
    }

    // Room for the third: the whole gang is bound, each member once, one per node, and the PodGroup says so.
    cluster.must(&["delete", "pod", "blocker", "--wait=false"]);
    wait_for("the gang bound", Duration::from_secs(60), || members.iter().all(|member| node_of(member).is_some()));
    let nodes: BTreeSet<String> = members.iter().map(|member| node_of(member).unwrap()).collect();
    assert_eq!(nodes.len(), 3, "one member per node: {nodes:?}");
    wait_for("the PodGroup's condition True", Duration::from_secs(30), || group_condition("train").is_some_and(|condition| condition["status"] == "True"));
    assert_eq!(group_condition("train").unwrap()["reason"], "Scheduled");
    let audit = cluster.audit();
    for member in &members {
        let by_wasp = audit.iter().filter(|event| event.subresource() == "binding" && event.name() == member && event.user() == WASP_USER);
        assert_eq!(by_wasp.count(), 1, "{member}");
    }
    assert!(!audit.iter().any(|event| event.user() == WASP_USER && event.code() == 403), "every write allowed by the shipped RBAC");

    // kube-scheduler on the same gang tells the same, and adds what its group preemption found (nothing here: no
    // pod of lower priority; wasp's preemption says so in its plan, not in the pods' messages).
    cluster.must(&["delete", "pods", "-l", "app=gang", "-n", "default", "--wait=true"]);
    create(cluster, &pod("ks-blocker", "default-scheduler", None));
    wait_for("ks-blocker bound", Duration::from_secs(60), || node_of("ks-blocker").is_some());
    create(cluster, &pod_group("ks-train"));
    let members: Vec<String> = (0..3).map(|index| format!("ks-train-{index}")).collect();
    for member in &members {
        create(cluster, &pod(member, "default-scheduler", Some("ks-train")));
    }
    let (reference_group_message, reference_messages) = told("ks-train", &members);
    assert!(reference_group_message.starts_with(&group_message), "kube-scheduler: {reference_group_message:?}, wasp: {group_message:?}");
    for (reference, ours) in reference_messages.iter().zip(&messages) {
        assert!(reference.starts_with(ours.trim_end_matches('.')), "kube-scheduler: {reference:?}, wasp: {ours:?}");
    }

    // A group whose members name two schedulers: wasp binds none of its own and says why.
    create(cluster, &pod_group("mixed"));
    for (member, scheduler) in [("mixed-0", "wasp"), ("mixed-1", "wasp"), ("mixed-2", "default-scheduler")] {
        create(cluster, &pod(member, scheduler, Some("mixed")));
    }
    wait_for("mixed-0's SchedulerError", Duration::from_secs(60), || {
        scheduled_condition(cluster, "default", "mixed-0").is_some_and(|condition| condition["reason"] == "SchedulerError")
    });
    let message = scheduled_condition(cluster, "default", "mixed-0").unwrap()["message"].as_str().unwrap().to_string();
    assert!(message.starts_with("pods of pod group \"mixed\" must have the same scheduler name and priority"), "{message}");
    assert!(!cluster.audit().iter().any(|event| event.subresource() == "binding" && event.name().starts_with("mixed-") && event.user() == WASP_USER));
}

/// Gang-aware preemption on the real control plane: a high-priority gang gets room from lower-priority pods only
/// when the room for all it needs can be made. Three nodes each hold one low pod; the one on worker-2 is held by a
/// PodDisruptionBudget. A gang of three would need all three nodes: no eviction is even requested. A gang of two
/// gets the rooms on worker-0 and worker-1, through the Eviction API, and is bound whole. Counted from the API
/// server's audit log.
#[test]
fn a_gang_preempts_only_when_all_the_room_it_needs_can_be_made() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install();
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 3, &["zone-a"], "2", "8Gi");
    create(cluster, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n");
    let host = installed.start_host("wasp-0");
    // One low pod (1 CPU of 2) per node, each its own Deployment; low-2's budget allows no disruption.
    for index in 0..3 {
        create(
            cluster,
            &format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: low-{index}, namespace: default}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: low-{index}}}}}\n  template:\n    metadata: {{labels: {{app: low-{index}, tier: low}}}}\n    spec:\n      schedulerName: wasp\n      nodeSelector: {{kubernetes.io/hostname: worker-{index}}}\n      containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: '1', memory: 64Mi}}}}}}]\n"
            ),
        );
    }
    create(cluster, "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: low-2, namespace: default}\nspec:\n  minAvailable: 1\n  selector: {matchLabels: {app: low-2}}\n");
    for index in 0..3 {
        wait_available(cluster, &format!("low-{index}"), 1, Duration::from_secs(60));
    }
    wait_for("low-2's budget counts its pod", Duration::from_secs(60), || {
        cluster.get_json(&["get", "pdb", "low-2", "-n", "default"])["status"]["currentHealthy"].as_u64() == Some(1)
    });
    let low_before = placements(cluster, "default", "tier=low");
    let gang = |group: &str, size: usize| {
        create(cluster, &format!("apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: {group}, namespace: default}}\nspec:\n  schedulingPolicy: {{gang: {{minCount: {size}}}}}\n"));
        let members: Vec<String> = (0..size).map(|index| format!("{group}-{index}")).collect();
        for member in &members {
            create(cluster, &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {member}, namespace: default, labels: {{gang: {group}}}}}\nspec:\n  schedulerName: wasp\n  priorityClassName: high\n  schedulingGroup: {{podGroupName: {group}}}\n  containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: 1500m}}}}}}]\n"
            ));
        }
        members
    };
    let evictions = || cluster.audit().into_iter().filter(|event| event.subresource() == "eviction" && event.user() == WASP_USER).count();

    // A gang of three: the rooms on worker-0 and worker-1 could be made, worker-2's not, so none is.
    let members = gang("big", 3);
    wait_for("big's members told they do not fit", Duration::from_secs(60), || {
        members.iter().all(|member| scheduled_condition(cluster, "default", member).is_some_and(|condition| condition["status"] == "False"))
    });
    // The host's own record of the preemption it considered (what `wasp explain eviction` reads).
    let low_0 = low_before.iter().find(|(_, node)| *node == "worker-0").map(|(pod, _)| pod.clone()).unwrap();
    let refused = || {
        let Some((200, body)) = http_get(host.listen, &format!("/explain/evictions/default/{low_0}")) else { return false };
        body.contains("pod group default/big would still not be placed: minCount (3) cannot be satisfied")
    };
    wait_for("the preemption for big decided", Duration::from_secs(60), || refused() || evictions() > 0);
    assert_eq!(evictions(), 0, "no eviction requested for a gang that would still not fit");
    assert!(refused());
    assert!(members.iter().all(|member| cluster.get_json(&["get", "pod", member, "-n", "default"])["spec"]["nodeName"].is_null()));
    cluster.must(&["delete", "pods", "-l", "gang=big", "-n", "default", "--wait=true"]);

    // A gang of two: both rooms are made, and it is bound whole on worker-0 and worker-1.
    let members = gang("pair", 2);
    let node_of = |name: &str| cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"].as_str().map(str::to_string);
    wait_for("pair bound", Duration::from_secs(90), || members.iter().all(|member| node_of(member).is_some()));
    let nodes: BTreeSet<String> = members.iter().map(|member| node_of(member).unwrap()).collect();
    assert_eq!(nodes, BTreeSet::from(["worker-0".to_string(), "worker-1".to_string()]));
    let audit = cluster.audit();
    let evicted: BTreeSet<&str> =
        audit.iter().filter(|event| event.subresource() == "eviction" && event.user() == WASP_USER && event.code() == 201).map(|event| event.name()).collect();
    let expected: BTreeSet<&str> = low_before.iter().filter(|(_, node)| *node != "worker-2").map(|(pod, _)| pod.as_str()).collect();
    assert_eq!(evicted, expected, "the low pods of worker-0 and worker-1, once each");
    assert_eq!(evictions(), 2, "no other eviction requested");
    for member in &members {
        let bindings = audit.iter().filter(|event| event.subresource() == "binding" && event.name() == member && event.user() == WASP_USER).count();
        assert_eq!(bindings, 1, "{member}");
    }

    // Two more nodes: spare-0 empty, spare-1 holding a low pod. Of a gang of two, one member fits as things are
    // and the other needs spare-1's low pod gone: that one eviction is made, and the gang is bound whole.
    cluster.create_nodes("spare", 2, &["zone-a"], "2", "8Gi");
    create(
        cluster,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: low-spare, namespace: default}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: low-spare}}\n  template:\n    metadata: {labels: {app: low-spare}}\n    spec:\n      schedulerName: wasp\n      nodeSelector: {kubernetes.io/hostname: spare-1}\n      containers: [{name: app, image: nginx, resources: {requests: {cpu: '1', memory: 64Mi}}}]\n",
    );
    wait_available(cluster, "low-spare", 1, Duration::from_secs(60));
    let low_spare: Vec<String> = placements(cluster, "default", "app=low-spare").into_keys().collect();
    let members = gang("duo", 2);
    wait_for("duo bound", Duration::from_secs(90), || members.iter().all(|member| node_of(member).is_some()));
    let nodes: BTreeSet<String> = members.iter().map(|member| node_of(member).unwrap()).collect();
    assert_eq!(nodes, BTreeSet::from(["spare-0".to_string(), "spare-1".to_string()]));
    let evicted: Vec<String> = cluster
        .audit()
        .iter()
        .filter(|event| event.subresource() == "eviction" && event.user() == WASP_USER && event.code() == 201)
        .map(|event| event.name().to_string())
        .filter(|name| !expected.contains(name.as_str()))
        .collect();
    assert_eq!(evicted, low_spare, "spare-1's low pod only");
}

/// The Job controller's own integration (`WorkloadWithJob`, alpha in 1.37, on for this test): a Job with a gang
/// policy gets its Workload and PodGroup from the real controller manager, its pods name the PodGroup, and wasp
/// binds none of them while the gang does not fit and all of them once it does. Counted from the audit log.
#[test]
fn a_jobs_gang_from_the_job_controller_is_bound_whole_by_wasp() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install_with(&["--feature-gates=GenericWorkload=true,WorkloadWithJob=true"]);
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 3, &["zone-a"], "2", "8Gi");
    let _host = installed.start_host("wasp-0");
    let node_of = |name: &str| cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"].as_str().map(str::to_string);
    // A pod of no group takes half of one node: the gang (1500m a member) does not fit.
    create(cluster, "apiVersion: v1\nkind: Pod\nmetadata: {name: blocker, namespace: default}\nspec:\n  schedulerName: wasp\n  containers: [{name: app, image: nginx, resources: {requests: {cpu: '1'}}}]\n");
    wait_for("blocker bound", Duration::from_secs(60), || node_of("blocker").is_some());
    create(
        cluster,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train, namespace: default}\nspec:\n  parallelism: 3\n  completions: 3\n  scheduling:\n    schedulingPolicy: {gang: {minCount: 3}}\n  template:\n    spec:\n      schedulerName: wasp\n      restartPolicy: Never\n      containers: [{name: app, image: nginx, resources: {requests: {cpu: 1500m}}}]\n",
    );
    // The controller's PodGroup, owned by the Job, and its three pods naming it.
    let pod_groups = || cluster.get_json(&["get", "podgroups", "-n", "default"])["items"].as_array().unwrap().clone();
    wait_for("the Job controller's PodGroup", Duration::from_secs(60), || !pod_groups().is_empty());
    let pod_group = pod_groups().remove(0);
    let group = pod_group["metadata"]["name"].as_str().unwrap().to_string();
    let owner = &pod_group["metadata"]["ownerReferences"].as_array().unwrap().iter().find(|owner| owner["controller"] == true).unwrap().clone();
    assert_eq!((owner["kind"].as_str(), owner["name"].as_str()), (Some("Job"), Some("train")), "{pod_group}");
    assert_eq!(pod_group["spec"]["schedulingPolicy"]["gang"]["minCount"], 3, "{pod_group}");
    let members = || pods(cluster, "default", "job-name=train");
    wait_for("the Job's three pods", Duration::from_secs(60), || members().len() == 3);
    let names: Vec<String> = members().iter().map(|pod| pod["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert!(members().iter().all(|pod| pod["spec"]["schedulingGroup"]["podGroupName"] == group.as_str()), "{:?}", members());
    let group_condition = || status_condition(&cluster.get_json(&["get", "podgroup", &group, "-n", "default"]), "PodGroupInitiallyScheduled");
    wait_for("the PodGroup's condition False", Duration::from_secs(60), || group_condition().is_some_and(|condition| condition["status"] == "False"));
    let bindings = |name: &str| cluster.audit().iter().filter(|event| event.subresource() == "binding" && event.name() == name).count();
    for name in &names {
        assert_eq!(bindings(name), 0, "{name} bound while its gang did not fit");
    }

    // Room for the third member: the whole gang is bound, once each, and the PodGroup says so.
    cluster.must(&["delete", "pod", "blocker", "--wait=false"]);
    wait_for("the Job's gang bound", Duration::from_secs(60), || names.iter().all(|name| node_of(name).is_some()));
    wait_for("the PodGroup's condition True", Duration::from_secs(30), || group_condition().is_some_and(|condition| condition["status"] == "True"));
    let audit = cluster.audit();
    for name in &names {
        let by_wasp = audit.iter().filter(|event| event.subresource() == "binding" && event.name() == name && event.user() == WASP_USER).count();
        assert_eq!(by_wasp, 1, "{name}");
    }
    assert!(!audit.iter().any(|event| event.user() == WASP_USER && event.code() == 403), "every write allowed by the shipped RBAC");
}

/// What a kubelet reports of `pod`'s only container `app` during an in-place resize, written as a kubelet writes
/// it (the status subresource): `allocated` and `actuated` CPU, and the pod's resize condition (`PodResizePending`
/// with a reason, or `PodResizeInProgress`) if any. kwok reports none of this: it does not resize.
fn report_resize(cluster: &ControlPlane, pod: &str, allocated: &str, actuated: &str, condition: Option<(&str, &str)>) {
    let current = cluster.get_json(&["get", "pod", pod, "-n", "default"]);
    let mut statuses = current["status"]["containerStatuses"].clone();
    statuses[0]["allocatedResources"] = serde_json::json!({"cpu": allocated});
    statuses[0]["resources"] = serde_json::json!({"requests": {"cpu": actuated}});
    let mut conditions: Vec<Value> = current["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|condition| !condition["type"].as_str().unwrap().starts_with("PodResize"))
        .cloned()
        .collect();
    if let Some((kind, reason)) = condition {
        let mut written = serde_json::json!({"type": kind, "status": "True", "lastTransitionTime": "2026-12-07T00:00:00Z"});
        if !reason.is_empty() {
            written["reason"] = reason.into();
        }
        conditions.push(written);
    }
    let patch = serde_json::json!({"status": {"containerStatuses": statuses, "conditions": conditions}}).to_string();
    cluster.must(&["patch", "pod", pod, "-n", "default", "--subresource", "status", "--type", "merge", "-p", &patch]);
}

/// In-place resize on the real control plane: a pod resized down through the `resize` subresource keeps holding
/// what its container runs with until the kubelet reports the resize done, so wasp, like kube-scheduler, leaves a
/// pod that needs that room Pending, and binds it once the status says the room is free. Counted from the API
/// server's audit log and the pods' conditions; the final placements checked with kube-scheduler's own filters.
#[test]
fn a_pod_resized_down_in_place_holds_its_room_until_the_kubelet_reports_it_as_kube_scheduler_counts_it() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let installed = install_with(&["--kube-scheduler"]);
    let cluster = &installed.cluster;
    cluster.create_nodes("worker", 1, &["zone-a"], "2", "8Gi");
    let _host = installed.start_host("wasp-0");
    let pod = |name: &str, scheduler: &str, cpu: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: {scheduler}\n  containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: {cpu}}}}}}}]\n")
    };
    let node_of = |name: &str| cluster.get_json(&["get", "pod", name, "-n", "default"])["spec"]["nodeName"].as_str().map(str::to_string);
    let bindings_of = |name: &str| cluster.audit().iter().filter(|event| event.subresource() == "binding" && event.name() == name).count();

    create(cluster, &pod("resized", "wasp", "1500m"));
    wait_for("resized Running", Duration::from_secs(60), || cluster.get_json(&["get", "pod", "resized", "-n", "default"])["status"]["phase"] == "Running");
    // What a kubelet reports of a running pod, then the resize down: the spec asks 500m, the container still runs
    // with 1500m.
    report_resize(cluster, "resized", "1500m", "1500m", None);
    cluster.must(&[
        "patch",
        "pod",
        "resized",
        "-n",
        "default",
        "--subresource",
        "resize",
        "-p",
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"500m"}}}]}}"#,
    ]);
    assert_eq!(cluster.get_json(&["get", "pod", "resized", "-n", "default"])["spec"]["containers"][0]["resources"]["requests"]["cpu"], "500m");
    report_resize(cluster, "resized", "500m", "1500m", Some(("PodResizeInProgress", "")));

    // A pod of 1 CPU for each scheduler: 500m by the spec would leave room, 1500m held does not.
    create(cluster, &pod("wanted", "wasp", "1"));
    create(cluster, &pod("ks-wanted", "default-scheduler", "1"));
    for name in ["wanted", "ks-wanted"] {
        wait_for(&format!("{name} PodScheduled=False"), Duration::from_secs(60), || {
            scheduled_condition(cluster, "default", name).is_some_and(|condition| condition["status"] == "False")
        });
        let message = scheduled_condition(cluster, "default", name).unwrap()["message"].as_str().unwrap().to_string();
        assert!(message.starts_with("0/1 nodes are available: 1 Insufficient cpu"), "{name}: {message}");
        assert_eq!(bindings_of(name), 0, "{name} bound beside a pod still running with 1500m");
    }

    // The kubelet reports the resize done: the room is free, and wasp binds its pod (kube-scheduler's is gone).
    cluster.must(&["delete", "pod", "ks-wanted", "-n", "default", "--wait=true"]);
    report_resize(cluster, "resized", "500m", "500m", None);
    wait_for("wanted bound", Duration::from_secs(60), || node_of("wanted").is_some());
    assert_eq!(node_of("wanted").as_deref(), Some("worker-0"));
    assert_eq!(bindings_of("wanted"), 1);
    let stdout = check_placements(cluster, &["default/resized", "default/wanted"]);
    assert!(stdout.lines().any(|line| line == "checked 2 gone 0 violations 0 out-of-order 0"), "{stdout}");
}
