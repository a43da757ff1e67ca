//! Admission latency at a steady 500 requests per second over HTTPS, as the API server calls the webhook: an
//! open loop (each request has its scheduled time; latency counts from then, so a slow answer delays the ones
//! behind it and shows up), 16 kept-alive connections. Side by side on the same connections: `GET /healthz`
//! (TLS and HTTP only, the baseline) and `POST /validate-pods` with a pod naming an unknown scheduler (the
//! whole review: parse, decide, deny). Target: p99 under 5 ms.
//!
//! `cargo bench -p wasp --bench admission` (after scripts/build-policies.sh).

mod support;

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp::admission::{certs, WebhookServing};
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::runtime::Runtime;

const RATE: u32 = 500;
const SECONDS: u32 = 10;
const CONNECTIONS: usize = 16;
const TARGET_P99: Duration = Duration::from_millis(5);

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>;

async fn connect(address: SocketAddr, ca: &str) -> Sender {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(ServerName::IpAddress(address.ip().into()), stream).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
    tokio::spawn(connection);
    sender
}

fn review() -> Bytes {
    let gvk = serde_json::json!({"group": "", "version": "v1", "kind": "Pod"});
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-7d4b9c-x2x7q", "namespace": "shop", "labels": {"app": "web", "pod-template-hash": "7d4b9c"}},
        "spec": {"schedulerName": "wsap", "containers": [{"name": "web", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
    });
    let request = serde_json::json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": gvk, "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "shop", "operation": "CREATE", "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": pod, "oldObject": null, "dryRun": false,
    });
    Bytes::from(serde_json::to_vec(&serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})).unwrap())
}

/// Latencies of `RATE` requests per second for `SECONDS`, each from its scheduled time.
async fn open_loop(address: SocketAddr, ca: &str, validate: bool) -> Vec<Duration> {
    let (free_tx, free_rx) = async_channel();
    for _ in 0..CONNECTIONS {
        free_tx.send(connect(address, ca).await).await.unwrap();
    }
    let body = review();
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for index in 0..RATE * SECONDS {
        let scheduled = started + Duration::from_secs(1) * index / RATE;
        tokio::time::sleep_until(scheduled).await;
        let (free_tx, free_rx, body) = (free_tx.clone(), free_rx.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = free_rx.recv().await.unwrap();
            let request = if validate {
                hyper::Request::post("/validate-pods").header("content-type", "application/json").body(http_body_util::Full::new(body)).unwrap()
            } else {
                hyper::Request::get("/healthz").body(http_body_util::Full::new(Bytes::new())).unwrap()
            };
            let response = sender.send_request(request).await.unwrap();
            let status = response.status();
            let answer = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            assert!(status.is_success(), "{status}: {}", String::from_utf8_lossy(&answer));
            let took = scheduled.elapsed();
            free_tx.send(sender).await.unwrap();
            took
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.push(task.await.unwrap());
    }
    latencies.sort();
    latencies
}

/// A pool of connections: a task takes a free one and gives it back.
fn async_channel() -> (tokio::sync::mpsc::Sender<Sender>, SharedReceiver) {
    let (sender, receiver) = tokio::sync::mpsc::channel(CONNECTIONS);
    (sender, SharedReceiver(Arc::new(tokio::sync::Mutex::new(receiver))))
}

#[derive(Clone)]
struct SharedReceiver(Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Sender>>>);

impl SharedReceiver {
    async fn recv(&self) -> Option<Sender> {
        self.0.lock().await.recv().await
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    sorted[((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1)]
}

fn line(label: &str, latencies: &[Duration], baseline: Option<&[Duration]>) -> String {
    let (p50, p99, max) = (percentile(latencies, 0.5), percentile(latencies, 0.99), *latencies.last().unwrap());
    let ratio =
        baseline.map(|baseline| format!("  {:.2}x the baseline's p99", p99.as_secs_f64() / percentile(baseline, 0.99).as_secs_f64())).unwrap_or_default();
    format!(
        "{label:<32} p50 {:>6.3} ms  p99 {:>6.3} ms  max {:>6.3} ms  ({:.2}x the 5 ms target){ratio}",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        p99.as_secs_f64() / TARGET_P99.as_secs_f64()
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (_simulator, api) = support::pending_pods_cluster(3, 0).await;
        let policy_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/out");
        let config = HostConfig::parse(&format!("policyDir: {}\nscheduler: {{profiles: [{{schedulerName: wasp, filters: [resources-fit]}}, {{schedulerName: wasp-batch, filters: [resources-fit]}}]}}", policy_dir.display())).unwrap();
        let host = Host::with_config(&config, &Runtime::new(None).unwrap(), api).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let generated = certs::generate(&["127.0.0.1".to_string()], 1).unwrap();
        std::fs::write(dir.path().join("tls.crt"), &generated.certificate).unwrap();
        std::fs::write(dir.path().join("tls.key"), &generated.private_key).unwrap();
        let address = host.serve_webhooks(WebhookServing::new("127.0.0.1:0".parse().unwrap(), dir.path().join("tls.crt"), dir.path().join("tls.key"))).await.unwrap();
        // Serving starts once the namespaces are listed: the first handshake waits for it.
        let started = Instant::now();
        let mut warm = connect(address, &generated.ca).await;
        warm.send_request(hyper::Request::get("/healthz").body(http_body_util::Full::new(Bytes::new())).unwrap()).await.unwrap();
        println!("serving after {:.2} s", started.elapsed().as_secs_f64());
        println!("{RATE} requests/s for {SECONDS} s over {CONNECTIONS} kept-alive TLS connections, latency from each request's scheduled time");
        let baseline = open_loop(address, &generated.ca, false).await;
        println!("{}", line("GET /healthz (baseline)", &baseline, None));
        let reviews = open_loop(address, &generated.ca, true).await;
        println!("{}", line("POST /validate-pods (deny)", &reviews, Some(&baseline)));
        println!("resident memory {:.0} MiB (simulator included)", support::resident_mib());
    });
}
