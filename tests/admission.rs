//! Admission: the webhooks over real HTTPS with a certificate made by `wasp certs`' code, the host on the
//! simulated API server (namespaces, pods, events), the configuration reloaded from its file; then the whole
//! path: kubectl creating pods through the simulator, which calls the webhooks as kube-apiserver does, from the
//! webhook configurations shipped in manifests/.

mod common;

use bytes::Bytes;
use common::repo_root;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wasp::admission::certs;
use wasp::admission::webhook::ServingLimits;
use wasp::admission::WebhookServing;
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::{ApiClient, HostIdentity};
use wasp::registry::PolicyRegistry;
use wasp::runtime::Runtime;
use wasp_sim::{Scenario, Simulator};

/// Two profiles; `extra` is appended (an admission section, say).
fn config_text(profiles: &[&str], extra: &str) -> String {
    let policy_dir = repo_root().join("plugins/out");
    let profiles: Vec<String> = profiles.iter().map(|name| format!("{{schedulerName: {name}, filters: [resources-fit]}}")).collect();
    format!("policyDir: {}\nscheduler: {{profiles: [{}]}}\n{extra}", policy_dir.display(), profiles.join(", "))
}

struct Harness {
    simulator: Simulator,
    api: ApiClient,
    host: Arc<Host>,
    registry: Arc<PolicyRegistry>,
    config_path: PathBuf,
    tls_dir: tempfile::TempDir,
    address: SocketAddr,
    ca: String,
}

fn write_certificate(dir: &Path) -> String {
    // The names the API server checks for the shipped Service, and the address the tests call directly.
    let mut names = certs::service_names("wasp-webhook", "wasp-system");
    names.push("127.0.0.1".into());
    let generated = certs::generate(&names, 30).unwrap();
    // Key first: a reader between the two writes sees the old pair or a mismatch, which it must survive.
    std::fs::write(dir.join("tls.key"), &generated.private_key).unwrap();
    std::fs::write(dir.join("tls.crt"), &generated.certificate).unwrap();
    generated.ca
}

async fn start(config: &str) -> Harness {
    start_limited(config, ServingLimits::default()).await
}

async fn start_limited(config: &str, limits: ServingLimits) -> Harness {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).try_init();
    let simulator =
        Simulator::start(&Scenario::parse("nodeGroups: [{name: n, count: 2, cpu: '4', memory: 8Gi}]").unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let tls_dir = tempfile::tempdir().unwrap();
    let config_path = tls_dir.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let registry = Arc::new(PolicyRegistry::new(&Runtime::new(None).unwrap(), HostConfig::load(&config_path).unwrap(), Some(config_path.clone())).unwrap());
    let host = Host::new(api.clone(), registry.clone(), HostIdentity::named("wasp", None));
    host.start_informers();
    let ca = write_certificate(tls_dir.path());
    let mut serving = WebhookServing::new("127.0.0.1:0".parse().unwrap(), tls_dir.path().join("tls.crt"), tls_dir.path().join("tls.key"));
    serving.reload_interval = Duration::from_millis(50);
    serving.limits = limits;
    let address = host.serve_webhooks(serving).await.unwrap();
    Harness { simulator, api, host, registry, config_path, tls_dir, address, ca }
}

/// An AdmissionReview as kube-apiserver sends it for a pod created in `namespace`.
fn review(namespace: &str, pod: Value) -> Vec<u8> {
    let gvk = json!({"group": "", "version": "v1", "kind": "Pod"});
    let gvr = json!({"group": "", "version": "v1", "resource": "pods"});
    let request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": pod["metadata"]["name"], "namespace": namespace, "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": pod, "oldObject": null, "dryRun": false, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    });
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})).unwrap()
}

fn pod(name: &str, scheduler: Option<&str>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx"}], "schedulerName": "default-scheduler"}});
    if let Some(scheduler) = scheduler {
        pod["spec"]["schedulerName"] = json!(scheduler);
    }
    pod
}

/// A TLS connection to the webhook, trusting only `ca`.
async fn tls_connect(address: SocketAddr, ca: &str) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(address).await.map_err(|error| error.to_string())?;
    let name = ServerName::IpAddress(address.ip().into());
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, stream).await.map_err(|error| error.to_string())
}

/// POSTs `body` over HTTPS trusting only `ca`: (status, body), or why the connection failed.
async fn https_post(address: SocketAddr, ca: &str, path: &str, body: Vec<u8>) -> Result<(u16, String), String> {
    let tls = tls_connect(address, ca).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|error| error.to_string())?;
    tokio::spawn(connection);
    let request = hyper::Request::post(format!("https://{address}{path}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.map_err(|error| error.to_string())?;
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body()).await.map_err(|error| error.to_string())?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

impl Harness {
    /// The webhook's `response` for `body`, after checking it is a 200 AdmissionReview for the request's uid.
    async fn answer(&self, path: &str, body: Vec<u8>) -> Value {
        let (status, text) = https_post(self.address, &self.ca, path, body).await.unwrap();
        assert_eq!(status, 200, "{text}");
        let review: Value = serde_json::from_str(&text).unwrap();
        assert_eq!((review["apiVersion"].as_str(), review["kind"].as_str()), (Some("admission.k8s.io/v1"), Some("AdmissionReview")), "{text}");
        assert_eq!(review["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        review["response"].clone()
    }

    async fn create_namespace(&self, name: &str, annotations: Value) {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}})).unwrap();
        Api::<Namespace>::all(self.api.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    fn rewrite_config(&self, text: &str) {
        std::fs::write(&self.config_path, text).unwrap();
        let report = self.registry.reload();
        assert!(report.errors.is_empty(), "{:?}", report.error_messages());
    }
}

/// The JSON Patch a mutating answer carries.
fn patch_of(response: &Value) -> Value {
    use base64::Engine;
    let encoded = response["patch"].as_str().expect("a patch");
    assert_eq!(response["patchType"], "JSONPatch");
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_naming_no_running_scheduler_are_denied_or_warned_and_a_reload_admits_a_new_profile() {
    let harness = start(&config_text(&["wasp", "wasp-batch"], "")).await;
    let denied = harness.answer("/validate-pods", review("default", pod("typo", Some("wsap")))).await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(
        denied["status"]["message"],
        r#"no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp, wasp-batch; did you mean "wasp"?"#
    );
    assert_eq!((denied["status"]["code"].as_i64(), denied["status"]["reason"].as_str()), (Some(403), Some("Forbidden")));
    for admitted in ["wasp", "wasp-batch", "default-scheduler"] {
        let answer = harness.answer("/validate-pods", review("default", pod("ok", Some(admitted)))).await;
        assert_eq!(answer["allowed"], true, "{admitted}: {answer}");
        assert!(answer.get("warnings").is_none());
    }
    let conflicting = json!({"metadata": {"name": "legacy", "annotations": {"scheduler.alpha.kubernetes.io/name": "wasp-batch"}}, "spec": {"containers": [], "schedulerName": "wasp"}});
    let answer = harness.answer("/validate-pods", review("default", conflicting)).await;
    assert_eq!(answer["allowed"], false);
    assert!(answer["status"]["message"].as_str().unwrap().contains("in its annotation scheduler.alpha.kubernetes.io/name"), "{answer}");

    // A profile added by hot reload admits its pods from that moment; warn mode admits with a warning.
    harness.rewrite_config(&config_text(&["wasp", "wasp-batch", "gpu"], ""));
    assert_eq!(harness.answer("/validate-pods", review("default", pod("gpu-job", Some("gpu")))).await["allowed"], true);
    harness.rewrite_config(&config_text(&["wasp"], "admission: {mode: warn, otherSchedulers: [default-scheduler, volcano]}"));
    let warned = harness.answer("/validate-pods", review("default", pod("typo", Some("wsap")))).await;
    assert_eq!(warned["allowed"], true);
    assert_eq!(warned["warnings"], json!([r#"no scheduler named "wsap" runs in this cluster; known: default-scheduler, volcano, wasp; did you mean "wasp"?"#]));
    assert_eq!(harness.answer("/validate-pods", review("default", pod("v", Some("volcano")))).await["allowed"], true, "listed as another scheduler");

    let metrics = common::http_get(harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap(), "/metrics").await.1;
    assert!(metrics.contains(r#"wasp_admission_reviews_total{webhook="validate",result="denied"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"wasp_admission_reviews_total{webhook="validate",result="warned"} 1"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_as_shipped_an_unknown_scheduler_is_warned_not_refused_and_one_seen_binding_pods_is_known() {
    let harness = start(&config_text(&["wasp"], "admission: {strayPodGrace: 0s}")).await;
    // Volcano is not in otherSchedulers and resembles no known name: admitted, with a warning kubectl prints.
    let warned = harness.answer("/validate-pods", review("default", pod("job-0", Some("volcano")))).await;
    assert_eq!(warned["allowed"], true, "{warned}");
    assert_eq!(
        warned["warnings"],
        json!([
            r#"no scheduler named "volcano" runs in this cluster; known: default-scheduler, wasp; admitted: the pod waits until a scheduler of that name runs (list it in admission.otherSchedulers to silence this)"#
        ])
    );
    // The strict mode refuses it, as every unknown name.
    harness.rewrite_config(&config_text(&["wasp"], "admission: {mode: strict, strayPodGrace: 0s}"));
    assert_eq!(harness.answer("/validate-pods", review("default", pod("job-0", Some("volcano")))).await["allowed"], false);

    // Volcano binds a pod that waited (here the test, through pods/binding as its scheduler would): from then on
    // the name is known, in strict mode too, and its waiting pods are not reported as stray.
    let pods: Api<Pod> = Api::namespaced(harness.api.client.clone(), "default");
    for name in ["job-0", "job-1"] {
        pods.create(&PostParams::default(), &serde_json::from_value(pod(name, Some("volcano"))).unwrap()).await.unwrap();
    }
    harness.host.cluster.wait_until_ready().await;
    let cluster = harness.host.cluster.clone();
    common::eventually("the informer sees both pods waiting", move || cluster.pending_pods().len() == 2).await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "job-0"}, "target": {"kind": "Node", "name": "n-0"}});
    let request = http::Request::post("/api/v1/namespaces/default/pods/job-0/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    harness.api.client.request::<Value>(request).await.unwrap();
    let cluster = harness.host.cluster.clone();
    common::eventually("the host sees volcano bind", move || cluster.binding_schedulers().contains(&"volcano".to_string())).await;
    let answer = harness.answer("/validate-pods", review("default", pod("job-2", Some("volcano")))).await;
    assert_eq!((answer["allowed"].as_bool(), answer.get("warnings")), (Some(true), None), "{answer}");
    assert_eq!(harness.host.stray_pods.check(jiff::Timestamp::now().as_second() + 60).await, 0, "job-1 waits for a scheduler that runs");
    let events: Api<Event> = Api::namespaced(harness.api.client.clone(), "default");
    let stray = events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|event| event.reason.as_deref() == Some("NoSuchScheduler")).count();
    assert_eq!(stray, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_right_after_its_namespace_gets_the_namespaces_rules() {
    let harness = start(&config_text(&["wasp", "wasp-batch"], "")).await;
    // As Helm or Argo CD do: the namespace, then at once its pods; the webhook's cache may not have it yet.
    for index in 0..20 {
        let name = format!("fresh-{index}");
        harness.create_namespace(&name, json!({"wasp.dev/scheduler": "wasp", "wasp.dev/scheduler-policy": "enforce"})).await;
        let mutated = harness.answer("/mutate-pods", review(&name, pod("p", None))).await;
        assert_eq!(patch_of(&mutated), json!([{"op": "add", "path": "/spec/schedulerName", "value": "wasp"}]), "{name}");
        let refused = harness.answer("/validate-pods", review(&name, pod("p", Some("wasp-batch")))).await;
        assert_eq!(refused["allowed"], false, "{name}: {refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_gives_its_scheduler_to_pods_that_name_none_and_may_enforce_it() {
    let harness = start(&config_text(&["wasp", "wasp-batch"], "")).await;
    harness.create_namespace("team-a", json!({"wasp.dev/scheduler": "wasp-batch"})).await;
    harness.create_namespace("team-b", json!({"wasp.dev/scheduler": "wasp", "wasp.dev/scheduler-policy": "enforce"})).await;
    // The namespace cache follows the watch: wait until it has both.
    let mut mutated = Value::Null;
    for _ in 0..200 {
        mutated = harness.answer("/mutate-pods", review("team-b", pod("p", None))).await;
        if mutated.get("patch").is_some() {
            break;
        }
        // The poll interval of a condition wait bounded by the loop's count (10 s), not a fixed wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(patch_of(&mutated), json!([{"op": "add", "path": "/spec/schedulerName", "value": "wasp"}]));
    let mutated = harness.answer("/mutate-pods", review("team-a", pod("p", None))).await;
    assert_eq!(patch_of(&mutated), json!([{"op": "add", "path": "/spec/schedulerName", "value": "wasp-batch"}]));
    let own_choice = harness.answer("/mutate-pods", review("team-a", pod("p", Some("wasp")))).await;
    assert_eq!((own_choice["allowed"].as_bool(), own_choice.get("patch")), (Some(true), None), "a pod's own choice is kept");
    let elsewhere = harness.answer("/mutate-pods", review("default", pod("p", None))).await;
    assert_eq!(elsewhere.get("patch"), None);
    // team-b enforces: a pod naming another (running) scheduler is refused; team-a only suggests.
    let refused = harness.answer("/validate-pods", review("team-b", pod("p", Some("wasp-batch")))).await;
    assert_eq!(refused["status"]["message"], r#"namespace team-b requires scheduler "wasp" (wasp.dev/scheduler-policy: enforce); the pod names "wasp-batch""#);
    assert_eq!(harness.answer("/validate-pods", review("team-a", pod("p", Some("wasp")))).await["allowed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_reviews_get_a_clear_400_and_the_webhook_keeps_serving() {
    let harness = start(&config_text(&["wasp"], "")).await;
    let post = |body: Vec<u8>| https_post(harness.address, &harness.ca, "/validate-pods", body);
    let (status, message) = post(b"{not json".to_vec()).await.unwrap();
    assert_eq!(status, 400);
    assert!(message.starts_with("not an AdmissionReview: key must be a string at line 1"), "{message}");
    let mut wrong_kind: Value = serde_json::from_slice(&review("default", pod("p", None))).unwrap();
    wrong_kind["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let (status, message) = post(serde_json::to_vec(&wrong_kind).unwrap()).await.unwrap();
    assert_eq!((status, message.as_str()), (400, "this webhook reviews pods, not apps/Deployment (check the webhook configuration's rules)"));
    let mut missing: Value = serde_json::from_slice(&review("default", pod("p", None))).unwrap();
    missing["request"].as_object_mut().unwrap().remove("uid");
    let (status, message) = post(serde_json::to_vec(&missing).unwrap()).await.unwrap();
    assert_eq!(status, 400);
    assert!(message.contains("missing field `uid`"), "{message}");
    let (status, message) = post(serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"})).unwrap()).await.unwrap();
    assert_eq!(
        (status, message.as_str()),
        (400, r#"expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got "admission.k8s.io/v1beta1", "AdmissionReview""#)
    );
    let mut not_a_pod: Value = serde_json::from_slice(&review("default", pod("p", None))).unwrap();
    not_a_pod["request"]["object"]["spec"] = json!("a string");
    let (status, message) = post(serde_json::to_vec(&not_a_pod).unwrap()).await.unwrap();
    assert_eq!(status, 400);
    assert!(message.starts_with("request.object is not a Pod: invalid type: string"), "{message}");
    let huge = vec![b' '; 10 << 20];
    let (status, message) = post(huge).await.unwrap();
    assert_eq!((status, message.as_str()), (400, "the body is larger than 4194304 bytes: not an AdmissionReview from the API server"));
    // Still serving, and the failures are counted.
    assert_eq!(harness.answer("/validate-pods", review("default", pod("p", Some("wsap")))).await["allowed"], false);
    let metrics = common::http_get(harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap(), "/metrics").await.1;
    assert!(metrics.contains(r#"wasp_admission_reviews_total{webhook="validate",result="malformed"} 6"#), "{metrics}");
}

/// True when the server closed `connection` (end of stream or reset) within `patience`.
async fn closed_by_the_server(connection: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>, patience: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 1024];
    matches!(tokio::time::timeout(patience, connection.read(&mut buffer)).await, Ok(Ok(0) | Err(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed_and_past_the_cap_new_ones_are_refused_while_reviews_go_on() {
    // Long enough for twenty handshakes on a slow machine, short enough for the test.
    let limits = ServingLimits { max_connections: 20, max_connections_per_peer: None, header_read_timeout: Duration::from_secs(4) };
    let harness = start_limited(&config_text(&["wasp"], ""), limits).await;
    // Twenty connections that never send a request hold every slot; the next is closed unserved.
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(tls_connect(harness.address, &harness.ca).await.unwrap());
    }
    assert!(https_post(harness.address, &harness.ca, "/validate-pods", review("default", pod("p", None))).await.is_err(), "a 21st connection was served");
    // Idle past the header timeout: closed by the server, and the slots are free again.
    for connection in &mut idle {
        assert!(closed_by_the_server(connection, Duration::from_secs(10)).await, "an idle connection was kept past the header timeout");
    }
    assert_eq!(harness.answer("/validate-pods", review("default", pod("p", Some("wasp")))).await["allowed"], true);
    // A slowloris: one header line a second never finishes the request.
    use tokio::io::AsyncWriteExt;
    let mut slow = tls_connect(harness.address, &harness.ca).await.unwrap();
    slow.write_all(b"POST /validate-pods HTTP/1.1\r\nHost: wasp\r\n").await.unwrap();
    let started = std::time::Instant::now();
    let mut closed = false;
    for line in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if slow.write_all(format!("X-Slow-{line}: 1\r\n").as_bytes()).await.is_err() || slow.flush().await.is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed || closed_by_the_server(&mut slow, Duration::from_secs(1)).await, "a request whose headers never end was kept");
    assert!(started.elapsed() < Duration::from_secs(8), "closed after {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_the_connections() {
    let limits = ServingLimits { max_connections: 20, max_connections_per_peer: Some(3), header_read_timeout: Duration::from_secs(30) };
    let harness = start_limited(&config_text(&["wasp"], ""), limits).await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(tls_connect(harness.address, &harness.ca).await.unwrap());
    }
    assert!(
        https_post(harness.address, &harness.ca, "/validate-pods", review("default", pod("p", None))).await.is_err(),
        "a fourth connection from one address was served"
    );
    // One goes, and its place is free again.
    drop(idle.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while https_post(harness.address, &harness.ca, "/validate-pods", review("default", pod("p", None))).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the closed connection's place was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_read_at_once_are_bounded_and_ordinary_reviews_are_answered_meanwhile() {
    use tokio::io::AsyncWriteExt;
    let harness = start(&config_text(&["wasp"], "")).await;
    // Twenty clients each send all but the last byte of a body just under the 4 MiB limit, and wait: 80 MiB
    // if the host kept them all, 320 MiB parsed. It gives them 256 MiB (4 per byte past each body's first
    // 16 KiB): sixteen fit, the others are refused at once.
    let length = (4 << 20) - 1;
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut connection = tls_connect(harness.address, &harness.ca).await.unwrap();
        let head = format!("POST /validate-pods HTTP/1.1\r\nHost: wasp\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n");
        connection.write_all(head.as_bytes()).await.unwrap();
        // A refused client may find its connection closed before it has written everything.
        let _ = connection.write_all(&vec![b' '; length - 1]).await;
        let _ = connection.flush().await;
        held.push(connection);
    }
    let metrics_address = harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let busy = r#"wasp_admission_reviews_total{webhook="validate",result="busy"} "#;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while counter(&common::http_get(metrics_address, "/metrics").await.1, busy) < 4 {
        assert!(std::time::Instant::now() < deadline, "the bodies past the budget were not refused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Meanwhile an ordinary review is answered.
    assert_eq!(harness.answer("/validate-pods", review("default", pod("p", Some("wsap")))).await["allowed"], false);
    // The held bodies' share comes back when their clients go: a review of 3 MiB is read and answered.
    drop(held);
    let mut large = pod("large", Some("wasp"));
    large["metadata"]["annotations"] = json!({"padding": "x".repeat(3 << 20)});
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !https_post(harness.address, &harness.ca, "/validate-pods", review("default", large.clone())).await.is_ok_and(|(status, _)| status == 200) {
        assert!(std::time::Instant::now() < deadline, "a large review was not answered once the held bodies were gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let harness = start(&config_text(&["wasp"], "")).await;
    let old_ca = harness.ca.clone();
    let body = || review("default", pod("p", Some("wasp")));
    assert!(https_post(harness.address, &old_ca, "/validate-pods", body()).await.is_ok());
    // A half-written rotation (a key that does not match) keeps the old certificate serving.
    let unrelated = certs::generate(&["127.0.0.1".to_string()], 30).unwrap();
    std::fs::write(harness.tls_dir.path().join("tls.key"), &unrelated.private_key).unwrap();
    // (That the broken pair is never taken is checked deterministically in admission::tls's unit test.)
    assert!(https_post(harness.address, &old_ca, "/validate-pods", body()).await.is_ok());
    let new_ca = write_certificate(harness.tls_dir.path());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while https_post(harness.address, &new_ca, "/validate-pods", body()).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the new certificate is not served");
        // The poll interval of a deadline-bounded condition wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let error = https_post(harness.address, &old_ca, "/validate-pods", body()).await.unwrap_err();
    assert!(error.contains("invalid peer certificate"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_slipped_through_gets_one_event_and_is_counted() {
    let harness = start(&config_text(&["wasp"], "admission: {strayPodGrace: 0s}")).await;
    let pods: Api<Pod> = Api::namespaced(harness.api.client.clone(), "default");
    for (name, scheduler) in [("typo", "wsap"), ("other", "wasp")] {
        let pod: Pod = serde_json::from_value(pod(name, Some(scheduler))).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    harness.host.cluster.wait_until_ready().await;
    let cluster = harness.host.cluster.clone();
    common::eventually("the informer sees both pods", move || cluster.pending_pods().len() == 2).await;
    let now = jiff::Timestamp::now().as_second();
    assert_eq!(harness.host.stray_pods.check(now).await, 1);
    assert_eq!(harness.host.stray_pods.check(now + 60).await, 0, "once per pod");
    let events: Api<Event> = Api::namespaced(harness.api.client.clone(), "default");
    let stray: Vec<Event> =
        events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|event| event.reason.as_deref() == Some("NoSuchScheduler")).collect();
    assert_eq!(stray.len(), 1);
    assert_eq!(stray[0].involved_object.name.as_deref(), Some("typo"));
    assert_eq!(stray[0].type_.as_deref(), Some("Warning"));
    assert_eq!(stray[0].message.as_deref(), Some(r#"no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp; did you mean "wasp"?"#));
    let metrics = common::http_get(harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap(), "/metrics").await.1;
    assert!(metrics.contains(r#"wasp_stray_pods{scheduler="wsap"} 1"#), "{metrics}");
    // Deleted, it is no longer counted.
    pods.delete("typo", &Default::default()).await.unwrap();
    let cluster = harness.host.cluster.clone();
    common::eventually("the informer sees the deletion", move || cluster.pending_pods().len() == 1).await;
    harness.host.stray_pods.check(now + 120).await;
    let metrics = common::http_get(harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap(), "/metrics").await.1;
    assert!(!metrics.contains("wasp_stray_pods{"), "{metrics}");
}

/// kubectl, with default flags, against the simulator: (success, stdout, stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let (kubeconfig, args) = (kubeconfig.to_path_buf(), args.iter().map(ToString::to_string).collect::<Vec<_>>());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl").args(&args).env("KUBECONFIG", &kubeconfig).output().expect("kubectl is installed")
    })
    .await
    .unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A counter of `/metrics`, 0 when absent.
fn counter(metrics: &str, series: &str) -> u64 {
    metrics.lines().find_map(|line| line.strip_prefix(series)).and_then(|value| value.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_api_server_kubectl_prints_the_denial_and_a_namespace_gets_its_profile() {
    let harness = start(&config_text(&["wasp", "wasp-batch"], "admission: {strayPodGrace: 0s}")).await;
    let kubeconfig = harness.tls_dir.path().join("kubeconfig");
    harness.simulator.write_kubeconfig(&kubeconfig).unwrap();
    let metrics_address = harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let reviews = |webhook: &'static str, result: &'static str| async move {
        counter(&common::http_get(metrics_address, "/metrics").await.1, &format!("wasp_admission_reviews_total{{webhook=\"{webhook}\",result=\"{result}\"}}"))
    };
    // The shipped Service and webhook configurations, with the caBundle `wasp certs` would print; the Service
    // resolves to the host's webhook port.
    harness.create_namespace("wasp-system", json!({})).await;
    harness.simulator.set_service_endpoint("wasp-system", "wasp-webhook", harness.address).unwrap();
    let shipped = std::fs::read_to_string(repo_root().join("manifests/40-webhooks.yaml")).unwrap();
    let ca_bundle = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&harness.ca)
    };
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&shipped) {
        let mut value: Value = serde::Deserialize::deserialize(document).unwrap();
        if let Some(webhooks) = value["webhooks"].as_array_mut() {
            webhooks.iter_mut().for_each(|webhook| webhook["clientConfig"]["caBundle"] = json!(ca_bundle));
        }
        documents.push(serde_yaml::to_string(&value).unwrap());
    }
    let manifest = harness.tls_dir.path().join("webhooks.yaml");
    std::fs::write(&manifest, documents.join("---\n")).unwrap();
    let (applied, _, stderr) = kubectl(&kubeconfig, &["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(applied, "{stderr}");

    // A typo is refused at creation, with the host's message, and nothing is stored.
    let (created, _, stderr) = kubectl(&kubeconfig, &["run", "typo", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]).await;
    assert!(!created);
    assert_eq!(
        stderr.trim_end(),
        r#"Error from server (Forbidden): admission webhook "scheduler-name.pods.wasp.dev" denied the request: no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp, wasp-batch; did you mean "wasp"?"#
    );
    assert_eq!(reviews("validate", "denied").await, 1);
    let pods: Api<Pod> = Api::namespaced(harness.api.client.clone(), "default");
    assert!(pods.get_opt("typo").await.unwrap().is_none());
    // A pod of the default scheduler is not even sent to the validating webhook (matchConditions).
    let sent_before = reviews("validate", "allowed").await;
    let (created, _, stderr) = kubectl(&kubeconfig, &["run", "plain", "--image=nginx"]).await;
    assert!(created, "{stderr}");
    let (created, _, stderr) = kubectl(&kubeconfig, &["run", "batch", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wasp-batch"}}"#]).await;
    assert!(created, "{stderr}");
    assert_eq!(reviews("validate", "allowed").await, sent_before + 1, "only the pod naming wasp-batch was sent");

    // One line opts a namespace in; its pods that name no scheduler land with the profile.
    for args in [&["create", "namespace", "team-a"][..], &["annotate", "namespace", "team-a", "wasp.dev/scheduler=wasp"]] {
        let (ok, _, stderr) = kubectl(&kubeconfig, args).await;
        assert!(ok, "{stderr}");
    }
    // The host's namespace cache follows a watch: wait until it answers with the profile.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while harness.answer("/mutate-pods", review("team-a", pod("probe", None))).await.get("patch").is_none() {
        assert!(std::time::Instant::now() < deadline, "the namespace's annotation never reached the webhook");
        // The poll interval of a deadline-bounded condition wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (created, _, stderr) = kubectl(&kubeconfig, &["run", "web", "-n", "team-a", "--image=nginx"]).await;
    assert!(created, "{stderr}");
    let (_, scheduler, _) = kubectl(&kubeconfig, &["get", "pod", "web", "-n", "team-a", "-o", "jsonpath={.spec.schedulerName}"]).await;
    assert_eq!(scheduler, "wasp");

    // In warn mode the pod is created and kubectl prints the host's message as a warning.
    harness.rewrite_config(&config_text(&["wasp", "wasp-batch"], "admission: {mode: warn, strayPodGrace: 0s}"));
    let (created, stdout, stderr) = kubectl(&kubeconfig, &["run", "warned", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]).await;
    assert!(created, "{stderr}");
    assert_eq!(stdout.trim_end(), "pod/warned created");
    assert_eq!(
        stderr.trim_end(),
        r#"Warning: no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp, wasp-batch; did you mean "wasp"?"#
    );
    pods.delete("warned", &Default::default()).await.unwrap();

    // wasp unreachable (its Service points nowhere): pods are still created, and the one with a typo is reported
    // by the running host once it waits.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    harness.simulator.set_service_endpoint("wasp-system", "wasp-webhook", closed).unwrap();
    let (created, _, stderr) = kubectl(&kubeconfig, &["run", "slipped", "--image=nginx", r#"--overrides={"spec":{"schedulerName":"wsap"}}"#]).await;
    assert!(created, "failurePolicy Ignore: {stderr}");
    let cluster = harness.host.cluster.clone();
    common::eventually("the host sees the stray pod", move || cluster.pending_pods().iter().any(|pod| pod.name == "slipped")).await;
    harness.host.stray_pods.check(jiff::Timestamp::now().as_second()).await;
    let (_, events, _) = kubectl(&kubeconfig, &["get", "events", "--field-selector", "reason=NoSuchScheduler", "-o", "jsonpath={.items[*].message}"]).await;
    assert_eq!(events, r#"no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp, wasp-batch; did you mean "wasp"?"#);
}
