//! The two webhooks over HTTPS: `POST /validate-pods` refuses (or warns about) pods that name a scheduler nobody
//! runs or that contradict their namespace, `POST /mutate-pods` gives a pod its namespace's scheduler. Each
//! answer reads the live configuration, so a profile added by hot reload admits its pods from that moment.
//!
//! A body that is no AdmissionReview of a pod gets a 400 that says what is wrong; the API server then applies
//! the webhook's failure policy (`Ignore` in the shipped manifests).

use super::metrics::AdmissionMetrics;
use super::review::{self, KnownSchedulers, NamespaceChoice, Verdict};
use super::tls::ReloadingCertificate;
use crate::cluster::SharedCluster;
use crate::registry::PolicyRegistry;
use crate::serve::client_certs::PeerCertificates;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Api;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The API server sends objects of up to 3 MiB (its request limit); an AdmissionReview carries one, plus
/// some metadata. Anything larger is not from the API server.
pub const MAX_REVIEW_BYTES: usize = 4 << 20;
/// A larger body is read to its end (up to this much, discarded) before the 400, so the client has finished
/// sending when the answer comes and reads it instead of failing on a closed connection.
const MAX_DRAINED_BYTES: usize = 64 << 20;
/// Each body's first bytes are read without asking the shared budget: a pod's review is a few KiB, so ordinary
/// reviews are answered whatever large bodies are being read meanwhile.
const REVIEW_BYTES_FREE: usize = 16 << 10;
/// A review costs several times its body once parsed (kube's `DynamicObject` keeps every field as a JSON value):
/// each byte of a body's buffer past the free ones takes this many from the budget, until the answer is sent.
const BUDGET_PER_BODY_BYTE: usize = 4;
/// What the reviews past their free bytes may take together, bodies and parsed forms. Past it a body is refused
/// at once (503), so that many connections sending large bodies cost their own
/// reviews, never the host's memory.
const REVIEW_MEMORY_SHARED: usize = 256 << 20;
/// A body not received whole within this is refused (the API server's own webhook timeout is at most 30 s).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the webhooks read: the live configuration, the namespaces' choices, and the schedulers seen binding pods.
pub struct Webhooks {
    pub policies: Arc<PolicyRegistry>,
    pub namespaces: Store<Namespace>,
    pub metrics: AdmissionMetrics,
    pub cluster: Arc<SharedCluster>,
    /// For a namespace the cache has not seen yet.
    pub client: kube::Client,
    /// The shared memory of the reviews being answered, in KiB ([`REVIEW_MEMORY_SHARED`]).
    review_memory: Semaphore,
}

/// A namespace the cache does not have is read from the API server within this, or taken as having no rules.
const NAMESPACE_READ_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Webhook {
    Validate,
    Mutate,
}

impl Webhook {
    fn name(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
        }
    }
}

/// Why a body is refused with a 400.
fn malformed(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message).into_response()
}

/// Why a body was not read.
enum Unread {
    /// Not an AdmissionReview the API server would send: a 400.
    Malformed(String),
    /// The bodies being read hold the shared budget, or this one came too slowly: a 503, the API server applies
    /// the webhook's failure policy.
    Busy(String),
}

impl Webhooks {
    pub fn new(
        policies: Arc<PolicyRegistry>,
        namespaces: Store<Namespace>,
        metrics: AdmissionMetrics,
        cluster: Arc<SharedCluster>,
        client: kube::Client,
    ) -> Webhooks {
        Webhooks { policies, namespaces, metrics, cluster, client, review_memory: Semaphore::new(REVIEW_MEMORY_SHARED >> 10) }
    }

    /// The body if it is at most [`MAX_REVIEW_BYTES`], with the share of the budget it holds.
    async fn read_bounded(&self, body: Body) -> Result<(Vec<u8>, Option<SemaphorePermit<'_>>), Unread> {
        match tokio::time::timeout(BODY_READ_TIMEOUT, self.read_body(body)).await {
            Ok(read) => read,
            Err(_) => Err(Unread::Busy(format!("the body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs()))),
        }
    }

    async fn read_body(&self, mut body: Body) -> Result<(Vec<u8>, Option<SemaphorePermit<'_>>), Unread> {
        use http_body_util::BodyExt;
        let (mut bytes, mut total, mut held): (Vec<u8>, usize, Option<SemaphorePermit<'_>>) = (Vec::new(), 0, None);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| Unread::Malformed(format!("reading the body: {error}")))?;
            let Ok(data) = frame.into_data() else { continue };
            total += data.len();
            if total > MAX_DRAINED_BYTES {
                break;
            }
            // Past the limit: what was kept goes with its share, the rest is read and discarded so the client has
            // sent everything when the answer comes.
            if total > MAX_REVIEW_BYTES {
                (bytes, held) = (Vec::new(), None);
                continue;
            }
            bytes.extend_from_slice(&data);
            // The buffer's capacity, which grows by doubling, is what it holds.
            let wanted_kib = (bytes.capacity().saturating_sub(REVIEW_BYTES_FREE) * BUDGET_PER_BODY_BYTE).div_ceil(1024) as u32;
            let held_kib = held.as_ref().map_or(0, |permit| permit.num_permits() as u32);
            if wanted_kib > held_kib {
                match (self.review_memory.try_acquire_many(wanted_kib - held_kib), held.as_mut()) {
                    (Ok(more), Some(permit)) => permit.merge(more),
                    (Ok(more), None) => held = Some(more),
                    // Refused at once, unread: a client that holds its body open must not keep the connection
                    // busy. (The API server applies its failure policy to the 503 or to the closed connection
                    // alike.)
                    (Err(_), _) => {
                        return Err(Unread::Busy(format!(
                            "other reviews being answered hold the {} MiB this webhook gives them; try again",
                            REVIEW_MEMORY_SHARED >> 20
                        )));
                    }
                }
            }
        }
        if total > MAX_REVIEW_BYTES {
            return Err(Unread::Malformed(format!("the body is larger than {MAX_REVIEW_BYTES} bytes: not an AdmissionReview from the API server")));
        }
        Ok((bytes, held))
    }

    /// The namespace's choice, from the cache; a namespace created a moment ago (Helm and Argo CD create pods right
    /// after their namespace) may not be there yet, so it is read from the API server.
    async fn namespace(&self, name: Option<&str>) -> NamespaceChoice {
        let Some(name) = name else { return NamespaceChoice::default() };
        if let Some(namespace) = self.namespaces.get(&ObjectRef::new(name)) {
            return NamespaceChoice::of(&namespace);
        }
        let read = tokio::time::timeout(NAMESPACE_READ_TIMEOUT, Api::<Namespace>::all(self.client.clone()).get_opt(name)).await;
        match read {
            Ok(Ok(Some(namespace))) => NamespaceChoice::of(&namespace),
            Ok(Ok(None)) => NamespaceChoice { namespace: name.to_string(), ..Default::default() },
            Ok(Err(error)) => {
                tracing::warn!(namespace = name, %error, "reading a namespace the cache has not seen failed; judging the pod without its rules");
                NamespaceChoice { namespace: name.to_string(), ..Default::default() }
            }
            Err(_) => {
                tracing::warn!(namespace = name, "reading a namespace the cache has not seen timed out; judging the pod without its rules");
                NamespaceChoice { namespace: name.to_string(), ..Default::default() }
            }
        }
    }

    /// The AdmissionRequest for a pod in `body` with the share of the budget it holds, or why there is none.
    async fn read(&self, body: Body) -> Result<(AdmissionRequest<DynamicObject>, Option<Pod>, Option<SemaphorePermit<'_>>), Unread> {
        let (bytes, share) = self.read_bounded(body).await?;
        let (request, pod) = parse_review(&bytes).map_err(Unread::Malformed)?;
        Ok((request, pod, share))
    }

    async fn answer(&self, webhook: Webhook, body: Body) -> Response {
        let started = Instant::now();
        // The share is held until the answer is made: the parsed review lives until then.
        let (request, pod, _share) = match self.read(body).await {
            Ok(read) => read,
            Err(Unread::Malformed(message)) => {
                tracing::warn!(webhook = webhook.name(), %message, "malformed AdmissionReview");
                self.metrics.reviewed(webhook.name(), "malformed", started.elapsed());
                return malformed(message);
            }
            Err(Unread::Busy(message)) => {
                tracing::debug!(webhook = webhook.name(), %message, "review refused unread");
                self.metrics.reviewed(webhook.name(), "busy", started.elapsed());
                return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
            }
        };
        let response = AdmissionResponse::from(&request);
        let (response, result) = match pod {
            None => (response, "allowed"),
            Some(pod) => {
                let namespace = self.namespace(request.namespace.as_deref()).await;
                let name = pod.metadata.name.as_deref().or(pod.metadata.generate_name.as_deref()).unwrap_or("");
                let pod_name = format!("{}/{name}", request.namespace.as_deref().unwrap_or(""));
                match webhook {
                    Webhook::Mutate => self.mutate(response, &pod, &namespace, &pod_name),
                    Webhook::Validate => self.validate(response, &pod, &namespace, &pod_name),
                }
            }
        };
        self.metrics.reviewed(webhook.name(), result, started.elapsed());
        axum::Json(review_json(response)).into_response()
    }

    /// The namespace's scheduler for a pod that chose none, as a JSON Patch.
    fn mutate(&self, response: AdmissionResponse, pod: &Pod, namespace: &NamespaceChoice, pod_name: &str) -> (AdmissionResponse, &'static str) {
        let Some(scheduler) = review::namespace_default(pod, namespace) else { return (response, "allowed") };
        let operation = serde_json::json!([{"op": "add", "path": "/spec/schedulerName", "value": scheduler}]);
        let patched = serde_json::from_value::<json_patch::Patch>(operation)
            .map_err(|error| error.to_string())
            .and_then(|patch| response.clone().with_patch(patch).map_err(|error| error.to_string()));
        match patched {
            Ok(patched) => {
                tracing::debug!(pod = %pod_name, %scheduler, namespace = %namespace.namespace, "scheduler set from the namespace");
                (patched, "mutated")
            }
            // Not expected: the patch is built here. The pod is admitted unchanged, as a down webhook would.
            Err(error) => {
                tracing::warn!(pod = %pod_name, %error, "could not encode the patch");
                (response, "allowed")
            }
        }
    }

    /// Refused or admitted with a warning when the pod names a scheduler nobody runs or contradicts its namespace
    /// ([`review::validate`]); the live configuration and the schedulers seen binding pods say which run.
    fn validate(&self, response: AdmissionResponse, pod: &Pod, namespace: &NamespaceChoice, pod_name: &str) -> (AdmissionResponse, &'static str) {
        let generation = self.policies.current();
        let known = KnownSchedulers::of(&generation.config, self.cluster.binding_schedulers());
        match review::validate(pod, namespace, &known, generation.config.admission.mode) {
            Verdict::Admit => (response, "allowed"),
            Verdict::Deny(message) => {
                tracing::info!(pod = %pod_name, %message, "pod refused");
                let mut denied = response.deny(&message);
                denied.result.code = 403;
                denied.result.reason = "Forbidden".into();
                (denied, "denied")
            }
            Verdict::Warn(message) => {
                tracing::info!(pod = %pod_name, %message, "pod admitted with a warning");
                let mut warned = response;
                warned.warnings = Some(vec![message]);
                (warned, "warned")
            }
        }
    }
}

/// The answer as kube-apiserver reads it. kube's type writes the patch as an array of numbers, which Go's JSON
/// decoder accepts; every Go webhook sends the base64 string a `[]byte` encodes to, and so does this one.
fn review_json(response: AdmissionResponse) -> serde_json::Value {
    use base64::Engine;
    let mut review = serde_json::to_value(response.into_review()).unwrap_or_default();
    if let Some(patch) = review.pointer_mut("/response/patch") {
        let bytes: Vec<u8> = serde_json::from_value(patch.take()).unwrap_or_default();
        *patch = serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    review
}

async fn validate_pods(State(webhooks): State<Arc<Webhooks>>, body: Body) -> Response {
    webhooks.answer(Webhook::Validate, body).await
}

async fn mutate_pods(State(webhooks): State<Arc<Webhooks>>, body: Body) -> Response {
    webhooks.answer(Webhook::Mutate, body).await
}

/// The AdmissionRequest in a webhook request's body, with the pod a CREATE carries; why not, for a 400.
pub fn parse_review(bytes: &[u8]) -> Result<(AdmissionRequest<DynamicObject>, Option<Pod>), String> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(bytes).map_err(|error| format!("not an AdmissionReview: {error}"))?;
    if review.types.api_version != "admission.k8s.io/v1" || review.types.kind != "AdmissionReview" {
        return Err(format!("expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got {:?}, {:?}", review.types.api_version, review.types.kind));
    }
    let request: AdmissionRequest<DynamicObject> = review.try_into().map_err(|_| "the AdmissionReview has no request".to_string())?;
    if !request.kind.group.is_empty() || request.kind.kind != "Pod" {
        return Err(format!("this webhook reviews pods, not {}/{} (check the webhook configuration's rules)", request.kind.group, request.kind.kind));
    }
    if request.operation != Operation::Create {
        return Ok((request, None));
    }
    let object = request.object.as_ref().ok_or("the request has no object")?;
    let value = serde_json::to_value(object).map_err(|error| error.to_string())?;
    let pod: Pod = serde_json::from_value(value).map_err(|error| format!("request.object is not a Pod: {error}"))?;
    Ok((request, Some(pod)))
}

pub fn router(webhooks: Arc<Webhooks>) -> Router {
    Router::new()
        .route("/validate-pods", post(validate_pods))
        .route("/mutate-pods", post(mutate_pods))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(webhooks)
}

/// What one TLS listener lets its clients hold, so that a flood of connections costs that listener's clients
/// (refused, or closed when they idle) and never the process: its file descriptors, its other listener (the
/// probes are served apart from the webhooks, each with its own cap).
#[derive(Debug, Clone, Copy)]
pub struct ServingLimits {
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Connections one address may hold, when set: on the probes' and metrics' port, so that one pod cannot take
    /// the slots the kubelet's probes need. (Not on the webhooks' port, whose one client opens as many as its
    /// burst of reviews needs.)
    pub max_connections_per_peer: Option<usize>,
    /// A request's headers must arrive within this; it is also how long a kept-alive connection may idle.
    pub header_read_timeout: Duration,
}

impl Default for ServingLimits {
    fn default() -> ServingLimits {
        ServingLimits { max_connections: 1000, max_connections_per_peer: None, header_read_timeout: Duration::from_secs(30) }
    }
}

/// A bound TLS listener; [`serve`](Self::serve) answers on it.
pub struct TlsListener {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    limits: ServingLimits,
}

impl TlsListener {
    /// Binds `address` (port 0 picks one) with `certificate`; connections wait in the backlog until served.
    pub async fn bind(certificate: &Arc<ReloadingCertificate>, address: SocketAddr) -> anyhow::Result<TlsListener> {
        Self::bind_with(certificate, None, address).await
    }

    /// [`bind`](Self::bind), asking clients for a certificate when `client_certificates` is given; each request
    /// then carries the chain its connection presented ([`PeerCertificates`]).
    pub async fn bind_with(
        certificate: &Arc<ReloadingCertificate>,
        client_certificates: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
        address: SocketAddr,
    ) -> anyhow::Result<TlsListener> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(certificate.server_config(client_certificates)?));
        let listener = tokio::net::TcpListener::bind(address).await.map_err(|error| anyhow::anyhow!("binding the webhook address {address}: {error}"))?;
        Ok(TlsListener { listener, acceptor, limits: ServingLimits::default() })
    }

    pub fn with_limits(self, limits: ServingLimits) -> TlsListener {
        TlsListener { limits, ..self }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `router` until `stop` is cancelled, then stops accepting, lets each connection finish the request
    /// it is answering (idle keep-alive connections close at once) and returns when every connection is closed.
    /// A failed handshake or connection costs only that connection.
    pub async fn serve(self, router: Router, stop: CancellationToken) {
        let connections = TaskTracker::new();
        let open = Arc::new(Semaphore::new(self.limits.max_connections));
        let peers = Arc::new(PeerConnections::default());
        let mut warned_full: Option<Instant> = None;
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                accepted = self.listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(%error, "webhook: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let peer_slot = match self.limits.max_connections_per_peer {
                Some(limit) => peers.take(peer.ip(), limit),
                None => Some(PeerSlot(None)),
            };
            let (Ok(slot), Some(peer_slot)) = (open.clone().try_acquire_owned(), peer_slot) else {
                // Closed at once rather than left in the backlog: the API server applies the failure policy now,
                // not after its timeout.
                drop(stream);
                if warned_full.is_none_or(|at| at.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(%peer, max_connections = self.limits.max_connections, "too many connections: new ones are closed until some end (said once a minute)");
                    warned_full = Some(Instant::now());
                }
                continue;
            };
            let (acceptor, router, stop, limits) = (self.acceptor.clone(), router.clone(), stop.clone(), self.limits);
            connections.spawn(async move {
                let _slots = (slot, peer_slot);
                let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(error)) => return tracing::debug!(%peer, %error, "webhook: TLS handshake failed"),
                    Err(_) => return tracing::debug!(%peer, "webhook: TLS handshake timed out"),
                };
                let router = match tls.get_ref().1.peer_certificates() {
                    Some(chain) => {
                        router.layer(axum::Extension(PeerCertificates(Arc::new(chain.iter().map(|certificate| certificate.clone().into_owned()).collect()))))
                    }
                    None => router,
                };
                let service = hyper_util::service::TowerToHyperService::new(router);
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(limits.header_read_timeout)
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
                tokio::pin!(connection);
                let served = tokio::select! {
                    served = connection.as_mut() => served,
                    _ = stop.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(error) = served {
                    tracing::debug!(%peer, %error, "webhook: connection ended with an error");
                }
            });
        }
        drop(self.listener);
        tracing::info!(connections = connections.len(), "webhook server stopping; finishing the reviews in flight");
        connections.close();
        connections.wait().await;
    }
}

/// Connections open by address, for [`ServingLimits::max_connections_per_peer`].
#[derive(Default)]
struct PeerConnections(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

impl PeerConnections {
    /// A slot for one more connection from `peer`, if it holds fewer than `limit`.
    fn take(self: &Arc<Self>, peer: std::net::IpAddr, limit: usize) -> Option<PeerSlot> {
        let mut open = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(peer).or_default();
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(PeerSlot(Some((self.clone(), peer))))
    }
}

/// One connection's place in its address's count, given back when dropped.
struct PeerSlot(Option<(Arc<PeerConnections>, std::net::IpAddr)>);

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some((peers, peer)) = self.0.take() else { return };
        let mut open = peers.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&peer);
            }
        }
    }
}
