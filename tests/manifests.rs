//! The install in manifests/: every document is a valid object, the Deployment mounts the policies as a
//! directory that can update (no subPath) where the configuration expects them, the configuration is valid, the
//! RBAC grants what the host does, and the examples ask for a profile that exists.
//!
//! Then the install at work: the host with the shipped configuration and the `wasp` ServiceAccount's token, on a
//! simulator into which the namespace, CRD, RBAC and webhooks of manifests/ are installed, runs every loop
//! (informers, leader election, scheduler, webhooks, autoscaler, rescheduler) without a refused request; a rule
//! the admin takes away is reported by the host, naming the forbidden action, and the host keeps running.

mod common;

use common::wait_for;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasp::autoscaler::resource::Autoscaler;
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::ApiClient;
use wasp_sim::{Scenario, Simulator, SimulatorOptions};

/// Every document of every YAML file under manifests/, by kind.
fn documents() -> BTreeMap<String, Vec<serde_yaml::Value>> {
    let mut by_kind: BTreeMap<String, Vec<serde_yaml::Value>> = BTreeMap::new();
    let root = common::repo_root().join("manifests");
    let mut files = Vec::new();
    for directory in [root.clone(), root.join("examples"), root.join("cert-manager")] {
        for entry in std::fs::read_dir(&directory).unwrap().flatten() {
            if entry.path().extension().is_some_and(|extension| extension == "yaml") {
                files.push(entry.path());
            }
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let kind = value["kind"].as_str().unwrap_or_else(|| panic!("{}: a document without kind", file.display())).to_string();
            by_kind.entry(kind).or_default().push(value);
        }
    }
    by_kind
}

fn typed<T: serde::de::DeserializeOwned>(value: &serde_yaml::Value) -> T {
    serde_yaml::from_value(value.clone()).unwrap_or_else(|error| panic!("{error}: {value:?}"))
}

fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|rule| {
        rule.api_groups.as_ref().is_some_and(|groups| groups.iter().any(|g| g == group))
            && rule.resources.as_ref().is_some_and(|resources| resources.iter().any(|r| r == resource))
            && rule.verbs.iter().any(|v| v == verb)
    })
}

fn deployment_replicas(documents: &BTreeMap<String, Vec<serde_yaml::Value>>) -> i64 {
    let deployment = documents["Deployment"].iter().find(|d| d["metadata"]["name"] == "wasp-scheduler").unwrap();
    deployment["spec"]["replicas"].as_i64().unwrap()
}

#[test]
fn the_install_is_consistent() {
    let documents = documents();
    let config_maps: Vec<ConfigMap> = documents["ConfigMap"].iter().map(typed).collect();
    let deployment: Deployment = typed(&documents["Deployment"].iter().find(|d| d["metadata"]["name"] == "wasp-scheduler").unwrap().clone());
    let pod_spec = deployment.spec.template.spec.unwrap();
    let container = &pod_spec.containers[0];

    // A graceful stop fits in the grace period: the preStop sleep, then `--shutdown-timeout` (its default when
    // the Deployment does not set it) for the work in flight.
    let args = container.args.as_ref().unwrap();
    let shutdown_timeout = args.iter().position(|arg| arg == "--shutdown-timeout").map_or("20s", |at| args[at + 1].as_str());
    let shutdown_timeout = humantime::parse_duration(shutdown_timeout).unwrap().as_secs() as i64;
    let pre_stop =
        container.lifecycle.as_ref().and_then(|lifecycle| lifecycle.pre_stop.as_ref()).and_then(|hook| hook.sleep.as_ref()).expect("a preStop sleep").seconds;
    assert!(pre_stop + shutdown_timeout < pod_spec.termination_grace_period_seconds.unwrap(), "preStop {pre_stop}s + shutdown {shutdown_timeout}s");
    // The host's own availability: a budget for its two replicas, kept on different nodes.
    let budget =
        documents["PodDisruptionBudget"].iter().find(|budget| budget["metadata"]["name"] == "wasp-scheduler").expect("a PodDisruptionBudget for the host");
    assert_eq!((budget["spec"]["minAvailable"].as_i64(), deployment_replicas(&documents)), (Some(1), 2));
    let spread = pod_spec.topology_spread_constraints.as_ref().expect("the replicas spread over nodes");
    assert!(spread.iter().any(|constraint| constraint.topology_key == "kubernetes.io/hostname" && constraint.max_skew == 1));
    assert!(pod_spec.priority_class_name.is_some());
    // The artifact cache prunes itself to 256 MiB after a write: the emptyDir leaves room over that.
    let cache = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "artifact-cache").unwrap();
    let limit = cache.empty_dir.as_ref().unwrap().size_limit.as_ref().unwrap().0.clone();
    assert!(limit.strip_suffix("Mi").unwrap().parse::<u64>().unwrap() > 256, "{limit}");
    let mounts = container.volume_mounts.as_ref().unwrap();
    assert!(mounts.iter().all(|mount| mount.sub_path.is_none()), "subPath mounts never update");
    let mount_of = |volume: &str| mounts.iter().find(|mount| mount.name == volume).unwrap().mount_path.clone();

    // The configuration is where --config points, valid, and reads policies where they are mounted.
    let args = container.args.as_ref().unwrap();
    let config_arg = &args[args.iter().position(|arg| arg == "--config").unwrap() + 1];
    let config_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "config").unwrap();
    let config_map_name = config_volume.config_map.as_ref().unwrap().name.clone();
    let config_map = config_maps.iter().find(|map| map.metadata.name.as_deref() == Some(config_map_name.as_str())).unwrap();
    let (key, text) = config_map.data.as_ref().unwrap().iter().next().unwrap();
    assert_eq!(config_arg, &format!("{}/{key}", mount_of("config")));
    let config = HostConfig::parse(text).unwrap();
    assert_eq!(config.policy_dir.to_str().unwrap(), mount_of("policies"));

    // The policies volume gathers the bundle `wasp configmap --bundle` prints (the default set in one ConfigMap:
    // tests/cli.rs checks it fits) and the loose files of `--split` or the user's own.
    let policies_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "policies").unwrap();
    let sources = policies_volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let names: Vec<String> = sources.iter().map(|source| source.config_map.as_ref().unwrap().name.clone()).collect();
    assert_eq!(names[..2], ["wasp-policies", "wasp-policies-1"]);

    // RBAC: what the scheduler calls, and the Lease in the namespace the configuration names.
    let cluster_role: ClusterRole = typed(&documents["ClusterRole"][0]);
    let rules = cluster_role.rules.unwrap();
    for (resource, verb) in [
        ("nodes", "list"),
        ("nodes", "watch"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods/binding", "create"),
        ("pods/status", "patch"),
        ("events", "create"),
        ("events", "patch"),
    ] {
        assert!(allows(&rules, "", resource, verb), "the ClusterRole does not allow {verb} {resource}");
    }
    assert!(!allows(&rules, "", "pods", "delete") && !allows(&rules, "", "secrets", "get"), "least privilege");
    // Volume topology: claims, volumes and classes read, claims told the node chosen for them, and volumes the
    // claim given to them.
    let volume_rules = [
        ("", "persistentvolumeclaims", "watch"),
        ("", "persistentvolumeclaims", "patch"),
        ("", "persistentvolumes", "watch"),
        ("", "persistentvolumes", "patch"),
        ("storage.k8s.io", "storageclasses", "watch"),
        ("storage.k8s.io", "csinodes", "watch"),
        // Gangs: pod groups read, their condition set.
        ("scheduling.k8s.io", "podgroups", "watch"),
        ("scheduling.k8s.io", "podgroups/status", "patch"),
    ];
    for (group, resource, verb) in volume_rules {
        assert!(allows(&rules, group, resource, verb), "the ClusterRole does not allow {verb} {resource}");
    }
    if config.rescheduler.is_some() {
        assert!(allows(&rules, "", "pods/eviction", "create"), "the rescheduler evicts through the Eviction API");
        assert!(allows(&rules, "policy", "poddisruptionbudgets", "list"), "the rescheduler plans within the budgets");
    }
    if config.autoscaler.is_some() {
        assert!(allows(&rules, "wasp.dev", "autoscalers", "list") && allows(&rules, "wasp.dev", "autoscalers/status", "patch"));
        for scale in ["deployments/scale", "statefulsets/scale", "replicasets/scale"] {
            assert!(allows(&rules, "apps", scale, "get") && allows(&rules, "apps", scale, "update"), "the autoscaler changes replicas through {scale}");
        }
        assert!(!allows(&rules, "apps", "deployments", "update"), "never the workloads themselves");
        assert!(allows(&rules, "autoscaling", "horizontalpodautoscalers", "list"), "conflicts with HPAs are checked");
        let crd = &documents["CustomResourceDefinition"][0];
        assert_eq!(crd["metadata"]["name"], "autoscalers.wasp.dev");
    }
    let role: Role = typed(&documents["Role"][0]);
    assert_eq!(role.metadata.namespace.as_deref(), Some(config.leader_election.lease_namespace.as_str()));
    let role_rules = role.rules.unwrap();
    for verb in ["create", "get", "update", "watch"] {
        assert!(allows(&role_rules, "coordination.k8s.io", "leases", verb), "the Role does not allow {verb} leases");
    }
    // Named objects only: the host's Lease, and the ConfigMap the rescheduler keeps its evictions in.
    let names: Vec<&String> = role_rules.iter().filter_map(|rule| rule.resource_names.as_ref()).flatten().collect();
    assert!(
        names.iter().all(|name| **name == config.leader_election.lease_name || name.as_str() == wasp::rescheduler::evictor::MEMORY_CONFIG_MAP),
        "{names:?}"
    );
    assert!(allows(&role_rules, "", "configmaps", "update") && !allows(&rules, "", "configmaps", "update"), "configmaps written in the Lease's namespace only");

    // Webhooks: fail open and fast, never sent kube-system or wasp's own pods, called only for pods that may
    // concern them, through the Service onto the container's webhook port, with the certificate mounted where
    // `wasp run` reads it; the host may watch namespaces.
    assert!(allows(&rules, "", "namespaces", "watch"), "the webhooks read namespaces' scheduler choice");
    let service: k8s_openapi::api::core::v1::Service = typed(documents["Service"].iter().find(|d| d["metadata"]["name"] == "wasp-webhook").unwrap());
    let service_port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    let webhook_port = container.ports.as_ref().unwrap().iter().find(|port| port.name.as_deref() == Some("webhook")).unwrap();
    assert_eq!(service_port.target_port, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("webhook".into())));
    let listen = &args[args.iter().position(|arg| arg == "--webhook-listen").unwrap() + 1];
    assert!(listen.ends_with(&format!(":{}", webhook_port.container_port)), "{listen}");
    let tls_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "webhook-tls").unwrap();
    assert_eq!(tls_volume.secret.as_ref().unwrap().secret_name.as_deref(), Some("wasp-webhook-tls"));
    for (flag, file) in [("--tls-cert-file", "tls.crt"), ("--tls-private-key-file", "tls.key")] {
        assert_eq!(args[args.iter().position(|arg| arg == flag).unwrap() + 1], format!("{}/{file}", mount_of("webhook-tls")));
    }
    // Policy signing keys: an optional Secret (installing as shipped verifies nothing and needs no key), mounted
    // where docs/signing-and-registries.md says.
    let keys_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "policy-keys").unwrap();
    let keys_secret = keys_volume.secret.as_ref().unwrap();
    assert_eq!((keys_secret.secret_name.as_deref(), keys_secret.optional), (Some("wasp-policy-keys"), Some(true)));
    assert_eq!(mount_of("policy-keys"), "/etc/wasp/keys");
    assert!(!config.verification.checks(), "the shipped configuration verifies nothing until keys are given");
    let credentials_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "registry-credentials").unwrap();
    let credentials_secret = credentials_volume.secret.as_ref().unwrap();
    assert_eq!((credentials_secret.secret_name.as_deref(), credentials_secret.optional), (Some("wasp-registry-credentials"), Some(true)));
    assert_eq!(mount_of("registry-credentials"), "/etc/wasp/registry");
    for (kind, path) in [("ValidatingWebhookConfiguration", "/validate-pods"), ("MutatingWebhookConfiguration", "/mutate-pods")] {
        let configuration = &documents[kind][0];
        let webhook = &configuration["webhooks"][0];
        assert_eq!(webhook["failurePolicy"], "Ignore", "{kind}: wasp being down must never block pod creation");
        assert_eq!(webhook["sideEffects"], "None", "{kind}");
        assert!(webhook["timeoutSeconds"].as_i64().unwrap() <= 5, "{kind}: a short timeout");
        assert!(webhook["matchConditions"][0]["expression"].as_str().unwrap().contains("schedulerName"), "{kind}");
        let client = &webhook["clientConfig"]["service"];
        assert_eq!(
            (client["name"].as_str(), client["namespace"].as_str(), client["path"].as_str()),
            (Some("wasp-webhook"), service.metadata.namespace.as_deref(), Some(path)),
            "{kind}"
        );
        assert_eq!(client["port"].as_i64(), Some(i64::from(service_port.port)), "{kind}");
        let excluded = &webhook["namespaceSelector"]["matchExpressions"][0];
        assert_eq!((excluded["key"].as_str(), excluded["operator"].as_str()), (Some("kubernetes.io/metadata.name"), Some("NotIn")));
        for namespace in ["kube-system", config.leader_election.lease_namespace.as_str()] {
            assert!(excluded["values"].as_sequence().unwrap().iter().any(|value| value == namespace), "{kind} must not be sent {namespace}'s pods");
        }
        assert_eq!(configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "wasp-system/wasp-webhook");
    }
    let certificate = &documents["Certificate"][0];
    assert_eq!(certificate["spec"]["secretName"], "wasp-webhook-tls");
    assert!(certificate["spec"]["dnsNames"].as_sequence().unwrap().iter().any(|name| name == "wasp-webhook.wasp-system.svc"));

    // The examples ask for a profile of this configuration.
    let profiles: Vec<&str> = config.scheduler.profiles.iter().map(|profile| profile.scheduler_name.as_str()).collect();
    let mut example_scheduler_names = Vec::new();
    for deployment in documents["Deployment"].iter().filter(|d| d["metadata"]["name"] != "wasp-scheduler") {
        let deployment: Deployment = typed(deployment);
        example_scheduler_names.push(deployment.spec.template.spec.unwrap().scheduler_name.unwrap());
    }
    for pod in &documents["Pod"] {
        example_scheduler_names.push(typed::<Pod>(pod).spec.unwrap().scheduler_name.unwrap());
    }
    assert!(!example_scheduler_names.is_empty());
    assert!(example_scheduler_names.iter().all(|name| profiles.contains(&name.as_str())), "{example_scheduler_names:?} vs {profiles:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// The host on the shipped RBAC: every loop runs with the `wasp` ServiceAccount's token against a simulator into
// which manifests/ is installed, and a rule taken away shows up as a clear error while the host keeps running.
// ---------------------------------------------------------------------------------------------------------------

const ACCOUNT: &str = "system:serviceaccount:wasp-system:wasp";

/// The host's logs, captured (the process-wide subscriber, so every host of this binary writes to it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> Logs {
        let logs = Logs::default();
        let writer = logs.clone();
        // A fixed level, whatever RUST_LOG says: the test reads the host's warnings.
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new("wasp=info"))
            .with_writer(move || writer.clone())
            .try_init()
            .expect("the only subscriber of this test binary");
        logs
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Held by every test that runs a host: the RBAC test reads the logs for "forbidden", and another host's
/// expected refusals would land in them (they did, once, in CI).
static ONE_HOST_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Prints the captured logs when the test fails: they say what the host was doing.
struct DumpLogsOnPanic(Logs);

impl Drop for DumpLogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the host's logs ---\n{}", self.0.text());
        }
    }
}

/// One request of the host, as it went over the wire.
#[derive(Debug, Clone)]
struct Exchange {
    method: String,
    path: String,
    query: String,
    token: String,
    status: u16,
}

impl Exchange {
    fn watch(&self) -> bool {
        self.query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1")
    }
}

/// A recording proxy between the host and the simulator: every request the host's API client sends, with the
/// credential it presents and the status it gets back. This is the most reliable record of "no request of the
/// host was refused": the host handles errors loop by loop (the leader election logs a failed attempt only at
/// debug level, the PodDisruptionBudget read falls back to an empty list with a warning, the informers retry),
/// and the simulator keeps no audit log, while every request passes here.
struct Recorder {
    address: SocketAddr,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn forward(
    upstream: SocketAddr,
    request: hyper::Request<hyper::body::Incoming>,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
) -> Result<hyper::Response<hyper::body::Incoming>, BoxError> {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let token = request.headers().get("authorization").and_then(|value| value.to_str().ok()).unwrap_or("").trim_start_matches("Bearer ").to_string();
    let stream = tokio::net::TcpStream::connect(upstream).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    // Watches stream through: the answer's body is handed on as it arrives.
    let response = sender.send_request(request).await?;
    exchanges.lock().unwrap().push(Exchange { method, path, query, token, status: response.status().as_u16() });
    Ok(response)
}

impl Recorder {
    async fn start(upstream: SocketAddr) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let exchanges: Arc<Mutex<Vec<Exchange>>> = Arc::default();
        let kept = exchanges.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let exchanges = kept.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| forward(upstream, request, exchanges.clone()));
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                });
            }
        });
        Recorder { address, exchanges }
    }

    fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }

    fn refused(&self) -> Vec<Exchange> {
        self.exchanges().into_iter().filter(|exchange| exchange.status == 401 || exchange.status == 403).collect()
    }
}

fn admin_client(simulator: &Simulator) -> Client {
    let mut config = kube::Config::new(simulator.url().parse().unwrap());
    config.default_retry = false;
    config.auth_info.token = Some(wasp_sim::auth::ADMIN_TOKEN.to_string().into());
    Client::try_from(config).unwrap()
}

async fn post(client: &Client, path: &str, body: &Value) -> Result<Value, kube::Error> {
    let request = http::Request::post(path).header("content-type", "application/json").body(serde_json::to_vec(body).unwrap()).unwrap();
    client.request::<Value>(request).await
}

/// The collection a manifest's object is created in.
fn collection(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().unwrap();
    let base = if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
    let (plural, namespaced) = match object["kind"].as_str().unwrap() {
        "Namespace" => ("namespaces", false),
        "CustomResourceDefinition" => ("customresourcedefinitions", false),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "ValidatingWebhookConfiguration" => ("validatingwebhookconfigurations", false),
        "MutatingWebhookConfiguration" => ("mutatingwebhookconfigurations", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "Service" => ("services", true),
        "PodDisruptionBudget" => ("poddisruptionbudgets", true),
        kind => panic!("no collection for {kind}"),
    };
    match (namespaced, object.pointer("/metadata/namespace").and_then(Value::as_str)) {
        (true, Some(namespace)) => format!("{base}/namespaces/{namespace}/{plural}"),
        (true, None) => panic!("a namespaced object without a namespace: {object}"),
        (false, _) => format!("{base}/{plural}"),
    }
}

/// Creates every object of `manifests/<file>` as the admin, each changed by `edit` first.
async fn install(admin: &Client, file: &str, edit: impl Fn(&mut Value)) {
    let text = std::fs::read_to_string(common::repo_root().join("manifests").join(file)).unwrap();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let mut object = Value::deserialize(document).unwrap();
        if object.is_null() {
            continue;
        }
        edit(&mut object);
        post(admin, &collection(&object), &object).await.unwrap_or_else(|error| panic!("{file}: {error}"));
    }
}

/// The shipped `config.yaml` (manifests/20-config.yaml), with the policies read from plugins/out.
fn shipped_config() -> HostConfig {
    let text = std::fs::read_to_string(common::repo_root().join("manifests/20-config.yaml")).unwrap();
    let config_map: ConfigMap = serde_yaml::from_str(&text).unwrap();
    let mut config = HostConfig::parse(&config_map.data.unwrap()["config.yaml"]).unwrap();
    config.policy_dir = common::repo_root().join("plugins/out");
    config.validate().unwrap();
    config
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|spec| spec.node_name.clone()).filter(|node| !node.is_empty())
}

async fn events(admin: &Client, namespace: &str, reason: &str) -> Vec<Event> {
    let all = Api::<Event>::namespaced(admin.clone(), namespace).list(&ListParams::default()).await.unwrap().items;
    all.into_iter().filter(|event| event.reason.as_deref() == Some(reason)).collect()
}

/// A counter of the host's `/metrics`: the first series named `name` whose labels contain every one of `labels`.
fn counter(metrics: &str, name: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) && labels.iter().all(|label| line.contains(label)))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// `web` is scheduled by wasp (its PodDisruptionBudget lets the rescheduler evict one pod at a time); `api` is
/// pinned to n-2 by its pod spec, so it runs (and reports metrics) before the host starts, and is scaled by an
/// Autoscaler: its pods use 60% of the memory they request (the load model's default), twice the target.
const SCENARIO: &str = "kubelet: {readyDelay: 100ms}\n\
    nodeGroups: [{name: n, count: 3, cpu: '4', memory: 16Gi}]\n\
    workloads:\n\
    - {name: web, replicas: 2, schedulerName: wasp, cpu: 500m, memory: 256Mi, pdb: {maxUnavailable: 1}}\n\
    - {name: api, replicas: 2, cpu: 100m, memory: 256Mi, podSpec: {nodeName: n-2}}\n";

const AUTOSCALER: &str = "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: api, namespace: default}\nspec:\n  \
    scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}\n  minReplicas: 1\n  maxReplicas: 4\n  \
    metrics:\n  - type: Resource\n    resource: {name: memory, target: {type: Utilization, averageUtilization: 30}}\n";

/// (what, method, path, a watch) of requests every loop must have made, and had answered with a success.
fn expected_calls() -> Vec<(&'static str, &'static str, &'static str, bool)> {
    vec![
        ("informer: list nodes", "GET", "/api/v1/nodes", false),
        ("informer: watch nodes", "GET", "/api/v1/nodes", true),
        ("informer: list pods", "GET", "/api/v1/pods", false),
        ("informer: watch pods", "GET", "/api/v1/pods", true),
        ("informer: list claims", "GET", "/api/v1/persistentvolumeclaims", false),
        ("informer: watch claims", "GET", "/api/v1/persistentvolumeclaims", true),
        ("informer: list volumes", "GET", "/api/v1/persistentvolumes", false),
        ("informer: watch volumes", "GET", "/api/v1/persistentvolumes", true),
        ("informer: list storage classes", "GET", "/apis/storage.k8s.io/v1/storageclasses", false),
        ("informer: watch storage classes", "GET", "/apis/storage.k8s.io/v1/storageclasses", true),
        ("informer: list CSINodes", "GET", "/apis/storage.k8s.io/v1/csinodes", false),
        ("informer: watch CSINodes", "GET", "/apis/storage.k8s.io/v1/csinodes", true),
        ("leader election: create the Lease", "POST", "/apis/coordination.k8s.io/v1/namespaces/wasp-system/leases", false),
        ("leader election: renew the Lease", "PUT", "/apis/coordination.k8s.io/v1/namespaces/wasp-system/leases/wasp-scheduler", false),
        ("scheduler: bind", "POST", "/api/v1/namespaces/default/pods/*/binding", false),
        ("scheduler: PodScheduled=False", "PATCH", "/api/v1/namespaces/default/pods/huge/status", false),
        ("events", "POST", "/api/v1/namespaces/default/events", false),
        ("autoscaler: list Autoscalers", "GET", "/apis/wasp.dev/v1alpha1/autoscalers", false),
        ("autoscaler: list HorizontalPodAutoscalers", "GET", "/apis/autoscaling/v2/horizontalpodautoscalers", false),
        ("autoscaler: read the target's scale", "GET", "/apis/apps/v1/namespaces/default/deployments/api/scale", false),
        ("autoscaler: change the target's scale", "PUT", "/apis/apps/v1/namespaces/default/deployments/api/scale", false),
        ("autoscaler: read pod metrics", "GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", false),
        ("autoscaler: write the status", "PATCH", "/apis/wasp.dev/v1alpha1/namespaces/default/autoscalers/api/status", false),
        ("rescheduler: list PodDisruptionBudgets", "GET", "/apis/policy/v1/poddisruptionbudgets", false),
        ("rescheduler: evict", "POST", "/api/v1/namespaces/default/pods/*/eviction", false),
        ("webhooks: list namespaces", "GET", "/api/v1/namespaces", false),
        ("webhooks: watch namespaces", "GET", "/api/v1/namespaces", true),
    ]
}

fn path_matches(pattern: &str, path: &str) -> bool {
    let (pattern, path): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    pattern.len() == path.len() && pattern.iter().zip(&path).all(|(expected, actual)| *expected == "*" || expected == actual)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_runs_every_loop_with_the_shipped_rbac_and_a_missing_rule_is_reported() {
    let _alone = ONE_HOST_AT_A_TIME.lock().await;
    let started = Instant::now();
    let logs = Logs::capture();
    let _dump = DumpLogsOnPanic(logs.clone());
    let patience = Duration::from_secs(10);

    // 1. The cluster, with the install's namespace, CRD and RBAC created by the admin; requests without a token
    //    are refused, so nothing the host does can pass as anonymous.
    let options = SimulatorOptions { require_auth: true, ..Default::default() };
    let simulator = Simulator::start_with(&Scenario::parse(SCENARIO).unwrap(), "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let admin = admin_client(&simulator);
    for file in ["00-namespace.yaml", "05-crd-autoscaler.yaml", "10-rbac.yaml"] {
        install(&admin, file, |_| {}).await;
    }
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let answer = post(&admin, "/api/v1/namespaces/wasp-system/serviceaccounts/wasp/token", &request).await.unwrap();
    let token = answer.pointer("/status/token").and_then(Value::as_str).unwrap().to_string();
    assert_ne!(token, wasp_sim::auth::ADMIN_TOKEN);
    // What the loops will work on: a namespace that gives its pods the wasp profile (read by the webhooks), and
    // an Autoscaler whose target runs before the host starts (its first pass comes at once, the next 15 s later).
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a", "annotations": {"wasp.dev/scheduler": "wasp"}}})).unwrap();
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let autoscaler: Autoscaler = serde_yaml::from_str(AUTOSCALER).unwrap();
    Api::<Autoscaler>::namespaced(admin.clone(), "default").create(&PostParams::default(), &autoscaler).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    wait_for("the api pods to run", patience, || async {
        let listed = pods.list(&ListParams::default().labels("app=api")).await.map_err(|error| error.to_string())?.items;
        let ready = listed.iter().filter(|pod| is_ready(pod)).count();
        if ready == 2 {
            Ok(())
        } else {
            Err(format!("{ready} of 2 Ready"))
        }
    })
    .await;

    // 2. The host, as `wasp run` starts it from the shipped configuration, with the ServiceAccount's token in its
    //    kube config, through the recording proxy.
    let recorder = Recorder::start(simulator.address).await;
    let kubeconfig = simulator.kubeconfig_with_token(&token, "wasp-system").replace(&simulator.url(), &format!("http://{}", recorder.address));
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let kube_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let api = ApiClient::from_config(kube_config).unwrap();
    let config = shipped_config();
    assert_eq!(config.leader_election.lease_namespace, "wasp-system");
    // Compiled policies persist across runs of this test, as `--cache-dir` keeps them across restarts of the
    // shipped Deployment (keyed by digest and engine): only the first run pays the ~5 s compile.
    let runtime = wasp::runtime::Runtime::new(Some(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("manifests-artifact-cache"))).unwrap();
    let host = Host::with_config(&config, &runtime, api).unwrap();
    let endpoints = host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let tls = tempfile::tempdir().unwrap();
    let mut names = wasp::admission::certs::service_names("wasp-webhook", "wasp-system");
    names.push("127.0.0.1".into());
    let certificate = wasp::admission::certs::generate(&names, 1).unwrap();
    std::fs::write(tls.path().join("tls.key"), &certificate.private_key).unwrap();
    std::fs::write(tls.path().join("tls.crt"), &certificate.certificate).unwrap();
    let serving = wasp::admission::WebhookServing::new("127.0.0.1:0".parse().unwrap(), tls.path().join("tls.crt"), tls.path().join("tls.key"));
    let webhook_address = host.serve_webhooks(serving).await.unwrap();
    // The shipped webhook configurations, with the caBundle `wasp certs` prints; the Service resolves to the host.
    let ca_bundle = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&certificate.ca)
    };
    install(&admin, "40-webhooks.yaml", |object| {
        for webhook in object["webhooks"].as_array_mut().into_iter().flatten() {
            webhook["clientConfig"]["caBundle"] = json!(ca_bundle);
        }
    })
    .await;
    simulator.set_service_endpoint("wasp-system", "wasp-webhook", webhook_address).unwrap();
    let leader = tokio::spawn(host.clone().run_as_leader(config.leader_election.clone()));

    // Informers: nodes and pods listed and watched (readiness says so), and the webhooks' namespaces listed.
    wait_for("/readyz", patience, || async {
        let (status, body) = common::http_get(endpoints, "/readyz").await;
        if status == 200 {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    assert_eq!(host.cluster.read().node_names().count(), 3);
    // Leader election: the Lease in wasp-system names this host.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "wasp-system");
    let holder = || async {
        let lease = leases.get_opt("wasp-scheduler").await.map_err(|error| error.to_string())?.ok_or("no Lease yet")?;
        let spec = lease.spec.clone().unwrap_or_default();
        match spec.holder_identity.as_deref() == Some(host.identity.instance.as_str()) {
            true => Ok(lease),
            false => Err(format!("held by {:?}", spec.holder_identity)),
        }
    };
    let acquired = wait_for("the Lease", patience, holder).await;

    // Scheduler: web's pods bound by the host, with its Scheduled events.
    let web = wait_for("web's pods to be bound and Ready", patience, || async {
        let listed = pods.list(&ListParams::default().labels("app=web")).await.map_err(|error| error.to_string())?.items;
        let placed: Vec<(String, String)> =
            listed.iter().filter(|pod| is_ready(pod)).filter_map(|pod| Some((pod.metadata.name.clone()?, node_of(pod)?))).collect();
        if placed.len() == 2 {
            Ok(placed)
        } else {
            Err(format!("{placed:?}"))
        }
    })
    .await;
    // The event follows the binding: wait for both, counted by the host and written by it.
    wait_for("web's Scheduled events", patience, || async {
        let scheduled = events(&admin, "default", "Scheduled").await;
        let counted = host.scheduler.stats.scheduled.load(Ordering::Relaxed);
        let written = web.iter().all(|(name, node)| {
            let message = format!("Successfully assigned default/{name} to {node}");
            scheduled.iter().any(|event| event.involved_object.name.as_deref() == Some(name) && event.message.as_deref() == Some(message.as_str()))
        });
        if written && counted >= 2 {
            Ok(())
        } else {
            Err(format!("{counted} counted; {scheduled:?}"))
        }
    })
    .await;
    // A pod that fits nowhere: the FailedScheduling event and the PodScheduled=False condition (pods/status).
    let huge: Pod = serde_json::from_value(json!({"metadata": {"name": "huge"}, "spec": {"schedulerName": "wasp", "containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": "64"}}}]}})).unwrap();
    pods.create(&PostParams::default(), &huge).await.unwrap();
    wait_for("huge's PodScheduled=False", patience, || async {
        let pod = pods.get("huge").await.map_err(|error| error.to_string())?;
        let conditions = pod.status.and_then(|status| status.conditions).unwrap_or_default();
        let unschedulable = conditions
            .iter()
            .any(|condition| condition.type_ == "PodScheduled" && condition.status == "False" && condition.reason.as_deref() == Some("Unschedulable"));
        let failed = events(&admin, "default", "FailedScheduling").await.iter().any(|event| event.involved_object.name.as_deref() == Some("huge"));
        if unschedulable && failed {
            Ok(())
        } else {
            Err(format!("{conditions:?}"))
        }
    })
    .await;
    pods.delete("huge", &Default::default()).await.unwrap();

    // Webhooks: a pod that names no scheduler in team-a gets the namespace's profile from the host (its namespace
    // cache came from the ServiceAccount's watch), then the host binds it.
    let probe: Pod = serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "app", "image": "x"}]}})).unwrap();
    let team_pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    let created = team_pods.create(&PostParams::default(), &probe).await.unwrap();
    assert_eq!(created.spec.unwrap().scheduler_name.as_deref(), Some("wasp"), "the mutating webhook gave the pod its namespace's profile");
    wait_for("team-a/probe to be bound", patience, || async {
        let pod = team_pods.get("probe").await.map_err(|error| error.to_string())?;
        node_of(&pod).map(drop).ok_or_else(|| "not bound".to_string())
    })
    .await;

    // Autoscaler: it read the Autoscaler, the target's scale, the pods and their metrics, scaled api from 2 to 4
    // and wrote the status.
    let autoscalers: Api<Autoscaler> = Api::namespaced(admin.clone(), "default");
    // The pass is summed up once its status writes are done: wait for both.
    let (status, last_pass) = wait_for("the Autoscaler's status", patience, || async {
        let autoscaler = autoscalers.get("api").await.map_err(|error| error.to_string())?;
        let status = serde_json::to_value(autoscaler.status.unwrap_or_default()).unwrap();
        match host.autoscaler.last_pass() {
            Some(pass) if status["desiredReplicas"] == 4 => Ok((status, pass)),
            pass => Err(format!("{status}; last pass: {pass:?}")),
        }
    })
    .await;
    assert_eq!(
        (status["currentReplicas"].as_i64(), status["reference"].as_str(), status["policy"].as_str()),
        (Some(2), Some("Deployment/api"), Some("hpa")),
        "{status}"
    );
    let condition = |kind: &str| status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == kind).cloned().unwrap_or_default();
    assert_eq!(condition("AbleToScale")["status"].as_str(), Some("True"), "{status}");
    assert_eq!(
        (condition("ScalingActive")["status"].as_str(), condition("ScalingActive")["reason"].as_str()),
        (Some("True"), Some("ValidMetricFound")),
        "{status}"
    );
    assert!(status["currentMetrics"][0]["resource"]["current"]["averageUtilization"].as_i64().is_some_and(|percent| percent >= 59), "{status}");
    assert_eq!(host.autoscaler.stats.scale_requests.load(Ordering::Relaxed), 1);
    assert_eq!((last_pass.autoscalers, last_pass.scaled, last_pass.failed), (1, 1, 0), "{last_pass:?}");
    let deployment: Deployment = Api::namespaced(admin.clone(), "default").get("api").await.unwrap();
    assert_eq!(deployment.spec.replicas, Some(4));
    let rescaled = events(&admin, "default", "SuccessfulRescale").await;
    assert!(rescaled.iter().any(|event| event.message.as_deref().is_some_and(|message| message.starts_with("New size: 4 (from 2)"))), "{rescaled:?}");

    // Rescheduler: its first run (at the start) read the budgets; a node of web tainted NoSchedule is emptied
    // through the Eviction API once the budget allows a disruption and the host sees both pods Ready.
    let rescheduler = host.rescheduler.clone();
    wait_for("the rescheduler's first run", patience, || async {
        if rescheduler.stats.runs.load(Ordering::Relaxed) >= 1 {
            Ok(())
        } else {
            Err("no run".to_string())
        }
    })
    .await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), "default");
    wait_for("web's budget to allow a disruption", patience, || async {
        let budget = budgets.get("web").await.map_err(|error| error.to_string())?;
        let allowed = budget.status.map_or(0, |status| status.disruptions_allowed.unwrap_or(0));
        if allowed >= 1 {
            Ok(())
        } else {
            Err(format!("{allowed} allowed"))
        }
    })
    .await;
    wait_for("the host to see web Ready", patience, || async {
        let state = host.cluster.read();
        let ready = state.bound_pods().filter(|(pod, _)| pod.ready && pod.labels.iter().any(|(key, value)| key == "app" && value == "web")).count();
        if ready == 2 {
            Ok(())
        } else {
            Err(format!("{ready} Ready"))
        }
    })
    .await;
    // A node of web's, other than api's if it can be.
    let tainted = web.iter().map(|(_, node)| node.clone()).find(|node| node != "n-2").unwrap_or_else(|| web[0].1.clone());
    let taint = json!({"spec": {"taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}});
    Api::<Node>::all(admin.clone()).patch(&tainted, &PatchParams::default(), &Patch::Merge(taint)).await.unwrap();
    // A change to a node runs the rescheduler 5 s after its previous run at the soonest.
    // A change to a node runs the rescheduler 5 s after its previous run at the soonest; a run is summed up
    // once its evictions and their events are done.
    let last_run = wait_for("a run that evicts", Duration::from_secs(15), || async {
        match rescheduler.last_run() {
            Some(run) if run.evicted >= 1 => Ok(run),
            run => Err(format!("last run: {run:?}")),
        }
    })
    .await;
    assert!(!last_run.dry_run && rescheduler.stats.evicted.load(Ordering::Relaxed) >= 1, "{last_run:?}");
    let evicted = events(&admin, "default", "Evicted").await;
    let on_tainted: Vec<&String> = web.iter().filter(|(_, node)| *node == tainted).map(|(name, _)| name).collect();
    let event = evicted
        .iter()
        .find(|event| on_tainted.iter().any(|name| event.involved_object.name.as_deref() == Some(name.as_str())))
        .unwrap_or_else(|| panic!("{evicted:?}"));
    let message = event.message.as_deref().unwrap();
    assert!(message.starts_with(&format!("Evicted from node {tainted} by policy remove-pods-violating-node-taints")), "{message}");
    // The evicted pod's replacement is bound before the binding rule is taken away below (else its binding is the
    // refusal that step counts).
    wait_for("web's replacement to be bound", patience, || async {
        let listed = pods.list(&ListParams::default().labels("app=web")).await.map_err(|error| error.to_string())?.items;
        let live: Vec<&Pod> = listed.iter().filter(|pod| pod.metadata.deletion_timestamp.is_none()).collect();
        match live.len() == 2 && live.iter().all(|pod| node_of(pod).is_some()) {
            true => Ok(()),
            false => Err(format!("{} live, {} bound", live.len(), live.iter().filter(|pod| node_of(pod).is_some()).count())),
        }
    })
    .await;

    // Leader election renews (every 2 s): the Lease changed since it was acquired, still ours.
    wait_for("a renewal of the Lease", patience, || async {
        let lease = holder().await?;
        match lease.metadata.resource_version != acquired.metadata.resource_version {
            true => Ok(()),
            false => Err("not renewed".to_string()),
        }
    })
    .await;

    // Over the wire: every request of the host carried the ServiceAccount's token, none was refused, and each
    // API call of each loop was made and answered with a success.
    let exchanges = recorder.exchanges();
    let strangers: Vec<&Exchange> = exchanges.iter().filter(|exchange| exchange.token != token).collect();
    assert!(strangers.is_empty(), "requests without the ServiceAccount's token: {strangers:?}");
    assert_eq!(recorder.refused().len(), 0, "refused: {:?}", recorder.refused());
    for (what, method, path, watch) in expected_calls() {
        let calls: Vec<&Exchange> =
            exchanges.iter().filter(|exchange| exchange.method == method && path_matches(path, &exchange.path) && exchange.watch() == watch).collect();
        assert!(calls.iter().any(|exchange| (200..300).contains(&exchange.status)), "{what}: {method} {path} (watch: {watch}) never succeeded: {calls:?}");
    }
    assert!(!logs.text().contains("forbidden"), "{}", logs.text());
    // The webhooks' check of their configurations was made and allowed (it may come before they are installed).
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
        let path = format!("/apis/admissionregistration.k8s.io/v1/{kind}/wasp");
        assert!(exchanges.iter().any(|exchange| exchange.method == "GET" && exchange.path == path && exchange.status != 403), "no allowed GET {path}");
    }

    // 3. The admin takes `create pods/binding` away: the host says which action is forbidden, keeps running, and
    //    binds again once the rule is back.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let shipped_role = roles.get("wasp-scheduler").await.unwrap();
    let mut reduced = shipped_role.clone();
    let rules = reduced.rules.as_mut().unwrap();
    let before = rules.len();
    rules.retain(|rule| !rule.resources.as_ref().is_some_and(|resources| resources.iter().any(|resource| resource == "pods/binding")));
    assert_eq!(rules.len(), before - 1);
    let reduced = roles.replace("wasp-scheduler", &PostParams::default(), &reduced).await.unwrap();
    let bind_errors = host.scheduler.stats.bind_errors.load(Ordering::Relaxed);
    let late: Pod =
        serde_json::from_value(json!({"metadata": {"name": "late"}, "spec": {"schedulerName": "wasp", "containers": [{"name": "app", "image": "x"}]}}))
            .unwrap();
    pods.create(&PostParams::default(), &late).await.unwrap();
    let forbidden = format!(r#"pods "late" is forbidden: User "{ACCOUNT}" cannot create resource "pods/binding" in API group "" in the namespace "default""#);
    // The host logs the refusal, then counts it: wait for the line, the counter and the metric.
    let line = wait_for("the host's report of the refused binding", patience, || async {
        let line = logs.text().lines().find(|line| line.contains("binding failed") && line.contains(&forbidden)).map(str::to_string);
        let counted = host.scheduler.stats.bind_errors.load(Ordering::Relaxed) > bind_errors;
        let metrics = common::http_get(endpoints, "/metrics").await.1;
        let errors = counter(&metrics, "wasp_schedule_attempts_total", &[r#"profile="wasp""#, r#"result="error""#]);
        match line {
            Some(line) if counted && errors >= 1 => Ok(line),
            line => Err(format!("logged: {line:?}, counted: {counted}, wasp_schedule_attempts_total{{result=\"error\"}}: {errors}")),
        }
    })
    .await;
    assert!(line.contains("WARN") && line.contains("pod=default/late"), "{line}");
    assert_eq!(node_of(&pods.get("late").await.unwrap()), None);
    let refused_at = leases.get("wasp-scheduler").await.unwrap().metadata.resource_version;
    // Only the bindings were refused, and the host still serves, leads and renews its Lease.
    let refused = recorder.refused();
    assert!(
        !refused.is_empty()
            && refused
                .iter()
                .all(|exchange| exchange.method == "POST" && exchange.path == "/api/v1/namespaces/default/pods/late/binding" && exchange.status == 403),
        "{refused:?}"
    );
    assert!(!leader.is_finished());
    assert_eq!(common::http_get(endpoints, "/healthz").await.0, 200);
    roles.replace("wasp-scheduler", &PostParams::default(), &ClusterRole { metadata: reduced.metadata, ..shipped_role }).await.unwrap();
    wait_for("late to be bound once the rule is back", patience, || async {
        let pod = pods.get("late").await.map_err(|error| error.to_string())?;
        node_of(&pod).map(drop).ok_or_else(|| "not bound".to_string())
    })
    .await;
    wait_for("a renewal of the Lease after the refusal", patience, || async {
        let lease = holder().await?;
        if lease.metadata.resource_version != refused_at {
            Ok(())
        } else {
            Err("not renewed".to_string())
        }
    })
    .await;
    assert!(!leader.is_finished(), "the host still leads");
    leader.abort();
    eprintln!("took {:?}", started.elapsed());
}

/// An install whose RBAC predates volume topology (no rule for claims): the host still schedules pods without
/// claims, and a pod with one waits, saying what the host may not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_claims_rule_only_pods_with_claims_wait_and_say_why() {
    let _alone = ONE_HOST_AT_A_TIME.lock().await;
    let patience = Duration::from_secs(15);
    let options = SimulatorOptions { require_auth: true, ..Default::default() };
    let scenario = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 2, cpu: '4', memory: 16Gi}]\n";
    let simulator = Simulator::start_with(&Scenario::parse(scenario).unwrap(), "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let admin = admin_client(&simulator);
    install(&admin, "00-namespace.yaml", |_| {}).await;
    install(&admin, "05-crd-autoscaler.yaml", |_| {}).await;
    install(&admin, "10-rbac.yaml", |object| {
        if let Some(rules) = object.get_mut("rules").and_then(Value::as_array_mut) {
            rules.retain(|rule| !rule["resources"].as_array().is_some_and(|resources| resources.iter().any(|resource| resource == "persistentvolumeclaims")));
        }
    })
    .await;
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let answer = post(&admin, "/api/v1/namespaces/wasp-system/serviceaccounts/wasp/token", &request).await.unwrap();
    let token = answer.pointer("/status/token").and_then(Value::as_str).unwrap().to_string();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&simulator.kubeconfig_with_token(&token, "wasp-system")).unwrap();
    let api = ApiClient::from_config(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap()).unwrap();
    let host = Host::with_config(&shipped_config(), &wasp::runtime::Runtime::new(None).unwrap(), api).unwrap();
    let loops = tokio::spawn(host.clone().run_loops());

    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod = |name: &str, claim: Option<&str>| {
        let volumes: Vec<Value> = claim.into_iter().map(|claim| json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}})).collect();
        serde_json::from_value::<Pod>(
            json!({"metadata": {"name": name}, "spec": {"schedulerName": "wasp", "volumes": volumes, "containers": [{"name": "app", "image": "x"}]}}),
        )
        .unwrap()
    };
    pods.create(&PostParams::default(), &pod("plain", None)).await.unwrap();
    pods.create(&PostParams::default(), &pod("stateful", Some("data"))).await.unwrap();
    wait_for("the pod without claims to be bound", patience, || async {
        let pod = pods.get("plain").await.map_err(|error| error.to_string())?;
        node_of(&pod).map(drop).ok_or_else(|| "not bound".to_string())
    })
    .await;
    let message = wait_for("the pod with a claim to say why it waits", patience, || async {
        let failed = events(&admin, "default", "FailedScheduling").await;
        failed
            .into_iter()
            .find(|event| event.involved_object.name.as_deref() == Some("stateful"))
            .and_then(|event| event.message)
            .ok_or_else(|| "no event".to_string())
    })
    .await;
    assert!(message.starts_with("0/2 nodes are available: the scheduler cannot read persistentvolumeclaims: "), "{message}");
    assert!(message.contains(r#"cannot list resource "persistentvolumeclaims""#), "{message}");
    assert_eq!(node_of(&pods.get("stateful").await.unwrap()), None);
    // Stopped before the lock is let go, so nothing of this host logs into the next test's capture.
    loops.abort();
    let _ = loops.await;
}
