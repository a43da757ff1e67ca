//! Admission webhooks against real HTTPS servers run inside the test (tokio-rustls, certificates from rcgen): what
//! a create answers when a webhook denies, warns, mutates, cannot be reached or is too slow, which webhooks a
//! request reaches (rules, selectors, matchConditions), Service references resolved through Endpoints, and the
//! configurations themselves through kube-rs and kubectl.

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasp_sim::{resources, Scenario, Simulator, SimulatorOptions};

const SCENARIO: &str = "kubelet: {readyDelay: 50ms, terminationDelay: 50ms}\nnodeGroups: [{name: worker, count: 1, cpu: '4', memory: 16Gi}]\n";

/// A CA and a serving certificate it signed for `hook.default.svc` and 127.0.0.1.
struct Pki {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key_der: Vec<u8>,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "wasp-sim test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["hook.default.svc".to_string(), "127.0.0.1".to_string()]).unwrap();
    let certificate = params.signed_by(&key, &ca).unwrap();
    Pki { ca_pem: ca.pem(), chain: vec![certificate.der().clone()], key_der: key.serialize_der() }
}

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// How the test webhook answers a review: the `response` (uid filled in), after `delay`.
type Answer = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// An HTTPS webhook server that records every review it is sent.
struct HookServer {
    address: SocketAddr,
    /// (request path, review) of every call that reached the handler.
    received: Arc<Mutex<Vec<(String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HookServer {
    async fn start(pki: &Pki, delay: Duration, answer: Answer) -> HookServer {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(pki.chain.clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key_der.clone())))
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, log, answer) = (acceptor.clone(), log.clone(), answer.clone());
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to serve.
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let (log, answer) = (log.clone(), answer.clone());
                        async move {
                            let path = request.uri().path_and_query().map(ToString::to_string).unwrap_or_default();
                            let body = request.into_body().collect().await?.to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            log.lock().unwrap().push((path, review.clone()));
                            // The slow webhook under test (timeouts), not a wait for a condition.
                            tokio::time::sleep(delay).await;
                            let mut response = answer(&review);
                            response["uid"] = review["request"]["uid"].clone();
                            let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
                            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(body.to_string()))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        HookServer { address, received, task }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }

    /// Calls received on `path`.
    fn calls(&self, path: &str) -> Vec<Value> {
        self.received.lock().unwrap().iter().filter(|(called, _)| called.split('?').next() == Some(path)).map(|(_, review)| review.clone()).collect()
    }
}

fn allow() -> Answer {
    Arc::new(|_| json!({"allowed": true}))
}

async fn simulator() -> Simulator {
    let scenario = Scenario::parse(SCENARIO).unwrap();
    let options = SimulatorOptions { history: 1000, ..Default::default() };
    Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap()
}

/// One request to the simulator over plain HTTP, as the admin.
async fn send(simulator: &Simulator, method: Method, path: &str, body: Option<&Value>, accept: &str) -> (StatusCode, HeaderMap, Value) {
    let tcp = tokio::net::TcpStream::connect(simulator.address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(connection);
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", simulator.address.to_string())
        .header("authorization", "Bearer wasp-sim")
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn post(simulator: &Simulator, path: &str, body: &Value) -> (StatusCode, HeaderMap, Value) {
    send(simulator, Method::POST, path, Some(body), "application/json").await
}

/// Registers a configuration through the API, as a user would.
async fn configure(simulator: &Simulator, kind: &str, name: &str, webhooks: Value) {
    let plural = if kind == "ValidatingWebhookConfiguration" { "validatingwebhookconfigurations" } else { "mutatingwebhookconfigurations" };
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": webhooks});
    let (status, _, answer) = post(simulator, &format!("/apis/admissionregistration.k8s.io/v1/{plural}"), &body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
}

/// A webhook on pod creates calling `url`, with `extra` fields merged in.
fn pod_hook(name: &str, url: &str, pki: &Pki, extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64(&pki.ca_pem)},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    json_patch::merge(&mut hook, &extra);
    hook
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": {"schedulerName": "wsap", "containers": [{"name": "app", "image": "nginx"}]}})
}

async fn create_pod(simulator: &Simulator, namespace: &str, pod: &Value) -> (StatusCode, HeaderMap, Value) {
    post(simulator, &format!("/api/v1/namespaces/{namespace}/pods"), pod).await
}

fn stored_pod(simulator: &Simulator, namespace: &str, name: &str) -> Option<Arc<Value>> {
    simulator.store.get(resources::pods(), Some(namespace), name).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_refuses_the_create_with_the_webhooks_status() {
    let pki = pki();
    let answer: Answer = Arc::new(|review: &Value| {
        let scheduler = review.pointer("/request/object/spec/schedulerName").and_then(Value::as_str).unwrap_or("").to_string();
        match review.pointer("/request/object/metadata/name").and_then(Value::as_str) {
            Some("quiet") => json!({"allowed": false, "status": {"code": 200}}),
            _ => json!({"allowed": false, "status": {"code": 403, "message": format!("no running scheduler is named {scheduler:?}")}}),
        }
    });
    let server = HookServer::start(&pki, Duration::ZERO, answer).await;
    let simulator = simulator().await;
    configure(&simulator, "ValidatingWebhookConfiguration", "schedulers", json!([pod_hook("schedulers.wasp.dev", &server.url("/validate"), &pki, json!({}))]))
        .await;

    let (status, _, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["message"], "admission webhook \"schedulers.wasp.dev\" denied the request: no running scheduler is named \"wsap\"");
    assert_eq!(answer["code"], 403);
    assert!(answer.get("reason").is_none(), "the webhook gave no reason: {answer}");
    assert!(stored_pod(&simulator, "default", "x").is_none(), "a denied pod was stored");

    // What the webhook was sent: a v1 AdmissionReview of the defaulted pod.
    let calls = server.calls("/validate");
    assert_eq!(calls.len(), 1);
    let request = &calls[0]["request"];
    assert_eq!(calls[0]["apiVersion"], "admission.k8s.io/v1");
    assert!(request["uid"].as_str().is_some_and(|uid| uid.len() == 36), "{request}");
    assert_eq!(request["kind"], json!({"group": "", "version": "v1", "kind": "Pod"}));
    assert_eq!(request["resource"], json!({"group": "", "version": "v1", "resource": "pods"}));
    assert_eq!(request["requestKind"], request["kind"]);
    assert_eq!(request["requestResource"], request["resource"]);
    assert_eq!((request["name"].as_str(), request["namespace"].as_str(), request["operation"].as_str()), (Some("x"), Some("default"), Some("CREATE")));
    assert_eq!(request["userInfo"]["username"], "wasp-sim-admin");
    assert_eq!(request["oldObject"], Value::Null);
    assert_eq!(request["dryRun"], false);
    assert_eq!(request["options"]["kind"], "CreateOptions");
    assert_eq!(request["object"]["metadata"]["namespace"], "default");
    assert_eq!(request["object"]["spec"]["priority"], 0, "webhooks see the defaulted object");

    // A code under 400 becomes 400; no message nor reason: "without explanation".
    let (status, _, answer) = create_pod(&simulator, "default", &pod("quiet", json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["message"], "admission webhook \"schedulers.wasp.dev\" denied the request without explanation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_come_back_as_warning_headers() {
    let pki = pki();
    let server =
        HookServer::start(&pki, Duration::ZERO, Arc::new(|_| json!({"allowed": true, "warnings": ["scheduler \"wsap\" looks like a typo", "second"]}))).await;
    let simulator = simulator().await;
    configure(&simulator, "ValidatingWebhookConfiguration", "warn", json!([pod_hook("warn.wasp.dev", &server.url("/warn"), &pki, json!({}))])).await;
    let (status, headers, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let warnings: Vec<&str> = headers.get_all("warning").iter().map(|value| value.to_str().unwrap()).collect();
    // Quoted as kube-apiserver's NewWarningHeader quotes (kubectl unquotes them back).
    assert_eq!(warnings, [r#"299 - "scheduler \"wsap\" looks like a typo""#, r#"299 - "second""#]);
    assert!(stored_pod(&simulator, "default", "x").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutating_webhooks_patch_is_stored_and_validating_webhooks_see_it() {
    let pki = pki();
    let patch = base64(
        r#"[{"op": "replace", "path": "/spec/schedulerName", "value": "wasp"}, {"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}]"#,
    );
    let server = HookServer::start(
        &pki,
        Duration::ZERO,
        Arc::new(move |review: &Value| {
            if review.pointer("/request/object/spec/schedulerName") == Some(&json!("wsap")) {
                json!({"allowed": true, "patchType": "JSONPatch", "patch": patch})
            } else {
                json!({"allowed": true})
            }
        }),
    )
    .await;
    let simulator = simulator().await;
    configure(&simulator, "MutatingWebhookConfiguration", "scheduler-name", json!([pod_hook("mutate.wasp.dev", &server.url("/mutate"), &pki, json!({}))]))
        .await;
    configure(&simulator, "ValidatingWebhookConfiguration", "check", json!([pod_hook("check.wasp.dev", &server.url("/validate"), &pki, json!({}))])).await;
    let (status, _, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["spec"]["schedulerName"], "wasp");
    let stored = stored_pod(&simulator, "default", "x").unwrap();
    assert_eq!(stored["spec"]["schedulerName"], "wasp");
    assert_eq!(stored["metadata"]["annotations"]["mutated"], "yes");
    let validated = server.calls("/validate");
    assert_eq!(validated.len(), 1);
    assert_eq!(validated[0]["request"]["object"]["spec"]["schedulerName"], "wasp", "validation runs after mutation");
    assert_eq!(server.calls("/mutate").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_match_conditions_decide_which_webhooks_are_called() {
    let pki = pki();
    let server = HookServer::start(&pki, Duration::ZERO, allow()).await;
    let simulator = simulator().await;
    let (status, _, answer) = post(&simulator, "/api/v1/namespaces", &json!({"metadata": {"name": "team-a"}})).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a", "namespaces are labelled with their name");
    let hooks = json!([
        pod_hook(
            "team-a-only.wasp.dev",
            &server.url("/namespace"),
            &pki,
            json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}})
        ),
        pod_hook(
            "web-only.wasp.dev",
            &server.url("/object"),
            &pki,
            json!({"objectSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}})
        ),
        pod_hook(
            "cel.wasp.dev",
            &server.url("/cel"),
            &pki,
            json!({"matchConditions": [
                {"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"},
                {"name": "wasp-scheduled", "expression": "object.spec.schedulerName == 'wasp' && oldObject == null"},
            ]})
        ),
        pod_hook(
            "deployments-only.wasp.dev",
            &server.url("/deployments"),
            &pki,
            json!({"rules": [{"operations": ["*"], "apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["deployments"]}]})
        ),
        pod_hook(
            "cluster-scope.wasp.dev",
            &server.url("/cluster"),
            &pki,
            json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"}]})
        ),
    ]);
    configure(&simulator, "ValidatingWebhookConfiguration", "selective", hooks).await;

    assert_eq!(create_pod(&simulator, "default", &pod("plain", json!({}))).await.0, StatusCode::CREATED);
    assert_eq!(server.calls("/namespace").len() + server.calls("/object").len() + server.calls("/cel").len(), 0, "no webhook matches a plain pod in default");
    assert_eq!(create_pod(&simulator, "team-a", &pod("in-team-a", json!({}))).await.0, StatusCode::CREATED);
    assert_eq!(server.calls("/namespace").len(), 1);
    assert_eq!(create_pod(&simulator, "default", &pod("web", json!({"app": "web"}))).await.0, StatusCode::CREATED);
    assert_eq!(server.calls("/object").len(), 1);
    assert_eq!(server.calls("/object")[0]["request"]["name"], "web");
    let mut scheduled = pod("scheduled", json!({}));
    scheduled["spec"]["schedulerName"] = json!("wasp");
    assert_eq!(create_pod(&simulator, "default", &scheduled).await.0, StatusCode::CREATED);
    assert_eq!(server.calls("/cel").len(), 1, "all conditions true: called");
    assert_eq!(server.calls("/cel")[0]["request"]["name"], "scheduled");
    assert_eq!(server.calls("/namespace").len(), 1);
    assert_eq!(server.calls("/deployments").len() + server.calls("/cluster").len(), 0, "rules exclude pods");
    // A namespace is cluster-scoped: the Cluster-scope rule matches it.
    assert_eq!(post(&simulator, "/api/v1/namespaces", &json!({"metadata": {"name": "team-b"}})).await.0, StatusCode::CREATED);
    assert_eq!(server.calls("/cluster").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_match_condition_that_errs_follows_the_failure_policy() {
    let pki = pki();
    let server = HookServer::start(&pki, Duration::ZERO, allow()).await;
    let simulator = simulator().await;
    let condition = json!({"matchConditions": [{"name": "team", "expression": "object.metadata.labels.team == 'a'"}]});
    let mut ignore = pod_hook("ignore.wasp.dev", &server.url("/ignore"), &pki, condition.clone());
    ignore["failurePolicy"] = json!("Ignore");
    configure(&simulator, "ValidatingWebhookConfiguration", "ignore", json!([ignore])).await;
    // No `team` label: the condition cannot be evaluated; Ignore skips the webhook.
    assert_eq!(create_pod(&simulator, "default", &pod("unlabelled", json!({"app": "x"}))).await.0, StatusCode::CREATED);
    assert_eq!(server.calls("/ignore").len(), 0);
    configure(&simulator, "ValidatingWebhookConfiguration", "fail", json!([pod_hook("fail.wasp.dev", &server.url("/fail"), &pki, condition)])).await;
    let (status, _, answer) = create_pod(&simulator, "default", &pod("refused", json!({"app": "x"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.starts_with("pods \"refused\" is forbidden: expression 'object.metadata.labels.team == 'a'' resulted in error"), "{message}");
    assert!(stored_pod(&simulator, "default", "refused").is_none());
    // Labelled: both conditions are true and both webhooks are called.
    assert_eq!(create_pod(&simulator, "default", &pod("labelled", json!({"team": "a"}))).await.0, StatusCode::CREATED);
    assert_eq!((server.calls("/ignore").len(), server.calls("/fail").len()), (1, 1));
    // A condition that does not compile makes the configuration invalid.
    let broken = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "broken"},
        "webhooks": [pod_hook("broken.wasp.dev", &server.url("/broken"), &pki, json!({"matchConditions": [{"name": "x", "expression": "object.("}]}))]});
    let (status, _, answer) = post(&simulator, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", &broken).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("webhooks[0].matchConditions[0].expression"), "{answer}");
}

/// A loopback port with nothing listening.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_webhooks_follow_the_failure_policy() {
    let pki = pki();
    let simulator = simulator().await;
    let port = closed_port().await;
    let url = format!("https://127.0.0.1:{port}/validate");
    configure(&simulator, "ValidatingWebhookConfiguration", "ignored", json!([pod_hook("ignored.wasp.dev", &url, &pki, json!({"failurePolicy": "Ignore"}))]))
        .await;
    let (status, _, answer) = create_pod(&simulator, "default", &pod("proceeds", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "Ignore: the create proceeds: {answer}");

    configure(&simulator, "ValidatingWebhookConfiguration", "required", json!([pod_hook("required.wasp.dev", &url, &pki, json!({}))])).await;
    let (status, _, answer) = create_pod(&simulator, "default", &pod("refused", json!({}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{answer}");
    assert_eq!(answer["reason"], "InternalError");
    assert_eq!(
        answer["message"],
        format!("Internal error occurred: failed calling webhook \"required.wasp.dev\": failed to call webhook: Post \"https://127.0.0.1:{port}/validate?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused")
    );
    assert!(stored_pod(&simulator, "default", "refused").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_seconds_bounds_the_call() {
    let pki = pki();
    let server = HookServer::start(&pki, Duration::from_secs(5), allow()).await;
    let simulator = simulator().await;
    let hook = pod_hook("slow.wasp.dev", &server.url("/slow"), &pki, json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"}));
    configure(&simulator, "ValidatingWebhookConfiguration", "slow", json!([hook])).await;
    let started = Instant::now();
    let (status, _, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(server.calls("/slow").len(), 1, "the webhook was reached");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2500), "the create took {took:?} with a 1s webhook timeout");

    let mut hook = pod_hook("slow-fail.wasp.dev", &server.url("/slow-fail"), &pki, json!({"timeoutSeconds": 1}));
    hook["failurePolicy"] = json!("Fail");
    configure(&simulator, "ValidatingWebhookConfiguration", "slow-fail", json!([hook])).await;
    let started = Instant::now();
    let (status, _, answer) = create_pod(&simulator, "default", &pod("y", json!({}))).await;
    assert!(started.elapsed() < Duration::from_millis(2500), "took {:?}", started.elapsed());
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.ends_with(&format!("Post \"{}?timeout=1s\": context deadline exceeded", server.url("/slow-fail"))), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_ca_bundle_does_not_trust_is_a_failed_call() {
    let (pki, other) = (pki(), pki());
    let server = HookServer::start(&pki, Duration::ZERO, allow()).await;
    let simulator = simulator().await;
    // Trusts another CA than the one that signed the server's certificate.
    configure(
        &simulator,
        "ValidatingWebhookConfiguration",
        "mistrusted",
        json!([pod_hook("mistrusted.wasp.dev", &server.url("/validate"), &other, json!({}))]),
    )
    .await;
    let (status, _, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.contains("failed calling webhook \"mistrusted.wasp.dev\": failed to call webhook: Post")
            && message.contains("tls: failed to verify certificate"),
        "{message}"
    );
    assert_eq!(server.calls("/validate").len(), 0, "no request gets past the handshake");
    assert!(stored_pod(&simulator, "default", "x").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_references_resolve_through_endpoints() {
    let pki = pki();
    let server = HookServer::start(&pki, Duration::ZERO, Arc::new(|_| json!({"allowed": false, "status": {"message": "via the service"}}))).await;
    let simulator = simulator().await;
    let mut hook = pod_hook("service.wasp.dev", "", &pki, json!({}));
    hook["clientConfig"] = json!({"service": {"namespace": "default", "name": "hook", "path": "/validate"}, "caBundle": base64(&pki.ca_pem)});
    configure(&simulator, "ValidatingWebhookConfiguration", "service", json!([hook])).await;

    // No Endpoints yet: a failed call.
    let (status, _, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{answer}");
    assert_eq!(
        answer["message"],
        "Internal error occurred: failed calling webhook \"service.wasp.dev\": failed to call webhook: Post \"https://hook.default.svc:443/validate?timeout=10s\": no endpoints available for service \"hook\""
    );

    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hook"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": server.address.port(), "protocol": "TCP"}]}]});
    let (status, _, answer) = post(&simulator, "/api/v1/namespaces/default/endpoints", &endpoints).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (status, _, answer) = create_pod(&simulator, "default", &pod("x", json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["message"], "admission webhook \"service.wasp.dev\" denied the request: via the service");
    assert_eq!(server.calls("/validate").len(), 1, "the certificate for hook.default.svc was accepted");

    // The Rust helper replaces the Endpoints: a server elsewhere is now called instead.
    let moved = HookServer::start(&pki, Duration::ZERO, allow()).await;
    simulator.set_service_endpoint("default", "hook", moved.address).unwrap();
    assert_eq!(create_pod(&simulator, "default", &pod("x", json!({}))).await.0, StatusCode::CREATED);
    assert_eq!((server.calls("/validate").len(), moved.calls("/validate").len()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_are_served_to_kube_rs_with_tables() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
    let pki = pki();
    let simulator = simulator().await;
    let client = kube::Client::try_from(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "schedulers"},
        "webhooks": [pod_hook("schedulers.wasp.dev", "https://127.0.0.1:1/validate", &pki, json!({}))],
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &configuration).await.unwrap();
    let webhook = &created.webhooks.as_ref().unwrap()[0];
    assert_eq!((webhook.failure_policy.as_deref(), webhook.timeout_seconds), (Some("Fail"), Some(10)), "kube-apiserver's defaults");
    assert_eq!(api.list(&ListParams::default()).await.unwrap().items.len(), 1);
    let patch = json!({"webhooks": [pod_hook("schedulers.wasp.dev", "https://127.0.0.1:1/validate", &pki, json!({"failurePolicy": "Ignore"}))]});
    let patched = api.patch("schedulers", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(patched.webhooks.unwrap()[0].failure_policy.as_deref(), Some("Ignore"));

    let (status, _, table) = send(
        &simulator,
        Method::GET,
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        None,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let columns: Vec<&str> = table["columnDefinitions"].as_array().unwrap().iter().map(|column| column["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["Name", "Webhooks", "Age"]);
    assert_eq!(table["rows"][0]["cells"].as_array().unwrap()[0..2], [json!("schedulers"), json!(1)]);

    api.delete("schedulers", &DeleteParams::default()).await.unwrap();
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
}

/// kubectl against the simulator, with a home of its own; None (test skipped) when kubectl is not installed.
struct Kubectl {
    home: std::path::PathBuf,
}

impl Kubectl {
    fn new(simulator: &Simulator, name: &str) -> Option<Kubectl> {
        if !Command::new("kubectl").args(["version", "--client"]).output().is_ok_and(|output| output.status.success()) {
            eprintln!("skipped: kubectl is not installed");
            return None;
        }
        let home = std::env::temp_dir().join(format!("wasp-sim-webhooks-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        simulator.write_kubeconfig(&home.join("kubeconfig")).unwrap();
        Some(Kubectl { home })
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        let home = self.home.clone();
        let args: Vec<String> = args.iter().map(ToString::to_string).collect();
        tokio::task::spawn_blocking(move || Command::new("kubectl").args(&args).env("HOME", &home).env("KUBECONFIG", home.join("kubeconfig")).output().unwrap())
            .await
            .unwrap()
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_denials_and_warnings() {
    let pki = pki();
    let server = HookServer::start(
        &pki,
        Duration::ZERO,
        Arc::new(|review: &Value| {
            let scheduler = review.pointer("/request/object/spec/schedulerName").and_then(Value::as_str).unwrap_or("");
            if scheduler == "wsap" {
                json!({"allowed": false, "status": {"code": 403, "message": "no running scheduler is named \"wsap\""}})
            } else {
                json!({"allowed": true, "warnings": [format!("scheduled by {scheduler}")]})
            }
        }),
    )
    .await;
    let simulator = simulator().await;
    let Some(kubectl) = Kubectl::new(&simulator, "print") else { return };
    // The configuration through `kubectl apply -f` with default (strict) validation, listed with its columns.
    let manifest = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: schedulers\nwebhooks:\n- {}\n",
        pod_hook("schedulers.wasp.dev", &server.url("/validate"), &pki, json!({}))
    );
    let path = kubectl.home.join("webhook.yaml");
    std::fs::write(&path, manifest).unwrap();
    let applied = kubectl.run(&["apply", "-f", path.to_str().unwrap()]).await;
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let listed = kubectl.run(&["get", "validatingwebhookconfigurations"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.starts_with("NAME         WEBHOOKS   AGE\nschedulers   1  "), "{listed}");

    let denied = kubectl.run(&["run", "x", "--image=nginx", "--overrides={\"spec\":{\"schedulerName\":\"wsap\"}}"]).await;
    assert!(!denied.status.success());
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert_eq!(stderr.trim_end(), "Error from server: admission webhook \"schedulers.wasp.dev\" denied the request: no running scheduler is named \"wsap\"");

    let warned = kubectl.run(&["run", "y", "--image=nginx", "--overrides={\"spec\":{\"schedulerName\":\"wasp\"}}"]).await;
    assert!(warned.status.success(), "{}", String::from_utf8_lossy(&warned.stderr));
    assert_eq!(String::from_utf8_lossy(&warned.stderr).trim_end(), "Warning: scheduled by wasp");
    assert_eq!(String::from_utf8_lossy(&warned.stdout).trim_end(), "pod/y created");
}

/// Polls the store every 20 ms until `found` returns something (a condition, not a fixed wait), for at most 10 s.
async fn eventually<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pods_labelled(simulator: &Simulator, app: &str) -> Vec<Arc<Value>> {
    simulator.store.all_in(resources::pods(), "default").into_iter().filter(|pod| pod["metadata"]["labels"]["app"] == app).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_pods_go_through_admission_and_a_refusal_is_an_event_on_the_owner() {
    let pki = pki();
    let patch = base64(r#"[{"op": "add", "path": "/metadata/labels/admitted", "value": "yes"}]"#);
    let mutator = HookServer::start(&pki, Duration::ZERO, Arc::new(move |_: &Value| json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}))).await;
    let validator = HookServer::start(
        &pki,
        Duration::ZERO,
        Arc::new(|review: &Value| {
            if review.pointer("/request/object/metadata/labels/app") == Some(&json!("refused")) {
                json!({"allowed": false, "status": {"code": 403, "message": "app refused is not welcome"}})
            } else {
                json!({"allowed": true})
            }
        }),
    )
    .await;
    let simulator = simulator().await;
    configure(&simulator, "MutatingWebhookConfiguration", "label", json!([pod_hook("label.wasp.dev", &mutator.url("/mutate"), &pki, json!({}))])).await;
    configure(&simulator, "ValidatingWebhookConfiguration", "check", json!([pod_hook("check.wasp.dev", &validator.url("/validate"), &pki, json!({}))])).await;
    let workload = |kind: &str, app: &str, replicas: u32| {
        let template = json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": app}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": template, "serviceName": app}})
    };
    let (status, _, answer) = post(&simulator, "/apis/apps/v1/namespaces/default/deployments", &workload("Deployment", "web", 2)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (status, _, answer) = post(&simulator, "/apis/apps/v1/namespaces/default/replicasets", &workload("ReplicaSet", "refused", 2)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (status, _, answer) = post(&simulator, "/apis/apps/v1/namespaces/default/statefulsets", &workload("StatefulSet", "refused", 1)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    // The Deployment's pods were mutated.
    let web = eventually("the Deployment's two pods", || Some(pods_labelled(&simulator, "web")).filter(|pods| pods.len() == 2)).await;
    assert!(web.iter().all(|pod| pod["metadata"]["labels"]["admitted"] == "yes"), "{web:?}");

    // The refused pods do not exist; each owner says why, as kube-controller-manager's controllers do.
    let events = resources::find("", "v1", "events").unwrap();
    let warning = |kind: &str| {
        simulator
            .store
            .all_in(events, "default")
            .into_iter()
            .find(|event| event["involvedObject"]["kind"] == kind && event["involvedObject"]["name"] == "refused")
    };
    let replica_set = eventually("the ReplicaSet's FailedCreate event", || warning("ReplicaSet")).await;
    assert_eq!(replica_set["reason"], "FailedCreate");
    assert_eq!(replica_set["type"], "Warning");
    assert_eq!(replica_set["message"], "Error creating: admission webhook \"check.wasp.dev\" denied the request: app refused is not welcome");
    assert_eq!(replica_set["source"]["component"], "replicaset-controller");
    let stateful_set = eventually("the StatefulSet's FailedCreate event", || warning("StatefulSet")).await;
    assert_eq!(
        stateful_set["message"],
        "create Pod refused-0 in StatefulSet refused failed error: admission webhook \"check.wasp.dev\" denied the request: app refused is not welcome"
    );
    assert!(pods_labelled(&simulator, "refused").is_empty());
    // The webhooks were told which controller created each pod.
    let users: HashSet<String> =
        validator.calls("/validate").iter().map(|review| review["request"]["userInfo"]["username"].as_str().unwrap().to_string()).collect();
    assert!(users.contains("system:serviceaccount:kube-system:replicaset-controller"), "{users:?}");
    assert!(users.contains("system:serviceaccount:kube-system:statefulset-controller"), "{users:?}");
    let failures = simulator.store.all_in(events, "default").into_iter().filter(|event| event["reason"] == "FailedCreate").count();
    assert_eq!(failures, 2, "a repeated refusal counts up on its owner's one event");
}
