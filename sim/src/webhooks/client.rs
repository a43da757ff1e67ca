//! Calling one webhook: where its `clientConfig` points (a URL, or a Service resolved through the simulator's
//! Endpoints, since the simulator has no cluster network), HTTPS verified against the webhook's `caBundle`, one
//! POST of an `AdmissionReview` bounded by `timeoutSeconds`. Failures are worded as kube-apiserver (Go's HTTP
//! client) words them, because they end up in the `Status` message the user reads.

use crate::resources;
use crate::store::Store;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::{Request, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Where a webhook is reached: the TCP address, the name its certificate must carry, and what the error
/// messages call the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub connect: String,
    pub server_name: String,
    /// `https://host:port/path?timeout=10s`, as kube-apiserver's REST client posts it.
    pub url: String,
    /// Path and query sent on the request line.
    pub path: String,
    /// The Host header.
    pub authority: String,
}

/// A failure to get an answer from a webhook (never a denial): subject to the webhook's failurePolicy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError(pub String);

/// Resolves `clientConfig` to a destination. A Service reference `{namespace, name, port}` is looked up in the
/// Endpoints object of the same namespace and name: the first ready address, and the endpoint port that the
/// Service maps `port` to (the only port when there is one); the certificate is checked for
/// `<name>.<namespace>.svc`, the name kube-apiserver verifies.
pub fn destination(store: &Store, client_config: &Value, timeout: Duration) -> Result<Destination, CallError> {
    let timeout_query = format!("timeout={}s", timeout.as_secs().max(1));
    if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        let uri: Uri = url.parse().map_err(|error| CallError(format!("invalid webhook URL {url:?}: {error}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(CallError(format!("webhook URL {url:?} must use the https scheme")));
        }
        let host = uri.host().ok_or_else(|| CallError(format!("webhook URL {url:?} has no host")))?;
        let port = uri.port_u16().unwrap_or(443);
        let path = with_query(uri.path(), uri.query(), &timeout_query);
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let authority = if host.contains(':') && !host.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        return Ok(Destination { connect: authority.clone(), server_name: bare_host.to_string(), url: format!("https://{authority}{path}"), path, authority });
    }
    let service =
        client_config.get("service").filter(|service| service.is_object()).ok_or_else(|| CallError("clientConfig has neither url nor service".to_string()))?;
    let namespace = service["namespace"].as_str().unwrap_or("");
    let name = service["name"].as_str().unwrap_or("");
    let port = service["port"].as_u64().and_then(|port| u16::try_from(port).ok()).unwrap_or(443);
    let path = with_query(service["path"].as_str().unwrap_or("/"), None, &timeout_query);
    let host = format!("{name}.{namespace}.svc");
    let url = format!("https://{host}:{port}{path}");
    let address = endpoint_address(store, namespace, name, port).map_err(|why| CallError(format!("Post {url:?}: {why}")))?;
    Ok(Destination { connect: address, server_name: host.clone(), url, path, authority: format!("{host}:{port}") })
}

fn with_query(path: &str, query: Option<&str>, extra: &str) -> String {
    let path = if path.is_empty() { "/" } else { path };
    match query {
        Some(query) if !query.is_empty() => format!("{path}?{query}&{extra}"),
        _ => format!("{path}?{extra}"),
    }
}

/// `ip:port` of the first ready address of the Service's Endpoints.
fn endpoint_address(store: &Store, namespace: &str, name: &str, service_port: u16) -> Result<String, String> {
    let endpoints_type = resources::find("", "v1", "endpoints").expect("endpoints are served");
    let no_endpoints = || format!("no endpoints available for service \"{name}\"");
    let endpoints = store.get(endpoints_type, Some(namespace), name).map_err(|_| no_endpoints())?;
    // The Service's port named N forwards to the endpoint port named N; unnamed single ports pair up directly.
    let port_name = resources::find("", "v1", "services").and_then(|services| store.get(services, Some(namespace), name).ok()).and_then(|service| {
        service
            .pointer("/spec/ports")?
            .as_array()?
            .iter()
            .find(|port| port["port"].as_u64() == Some(u64::from(service_port)))
            .map(|port| port["name"].as_str().unwrap_or("").to_string())
    });
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let Some(ip) = subset["addresses"].as_array().and_then(|addresses| addresses.iter().find_map(|address| address["ip"].as_str())) else {
            continue;
        };
        let ports = subset["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
        let port = match &port_name {
            // An Endpoints written by hand (or by `Simulator::set_service_endpoint`) may leave its one port unnamed.
            Some(wanted) => ports.iter().find(|port| port["name"].as_str().unwrap_or("") == wanted).or_else(|| ports.first().filter(|_| ports.len() == 1)),
            None if ports.len() == 1 => ports.first(),
            None => ports.iter().find(|port| port["port"].as_u64() == Some(u64::from(service_port))),
        };
        let port = port.and_then(|port| port["port"].as_u64()).unwrap_or(u64::from(service_port));
        return Ok(if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") });
    }
    Err(no_endpoints())
}

/// The PEM certificates of a base64 `caBundle`.
fn trust_roots(ca_bundle: &str) -> Result<rustls::RootCertStore, CallError> {
    let mut roots = rustls::RootCertStore::empty();
    if ca_bundle.is_empty() {
        // kube-apiserver would fall back to its system roots; the simulator trusts none, so such a webhook
        // fails verification (documented in sim/README.md).
        return Ok(roots);
    }
    let pem = crate::defaults::base64_decode(ca_bundle).ok_or_else(|| CallError("clientConfig.caBundle is not base64 of PEM text".into()))?;
    for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let certificate = certificate.map_err(|error| CallError(format!("clientConfig.caBundle: {error}")))?;
        roots.add(certificate).map_err(|error| CallError(format!("clientConfig.caBundle: {error}")))?;
    }
    if roots.is_empty() {
        return Err(CallError("clientConfig.caBundle holds no PEM certificate".into()));
    }
    Ok(roots)
}

/// POSTs `review` to `destination` and returns the decoded answer; the whole exchange (connect, handshake,
/// request, body) must fit in `timeout`.
pub async fn post(destination: &Destination, ca_bundle: &str, review: &Value, timeout: Duration) -> Result<Value, CallError> {
    let url = &destination.url;
    let exchange = exchange(destination, ca_bundle, review);
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(why)) => Err(CallError(format!("Post {url:?}: {why}"))),
        Err(_) => Err(CallError(format!("Post {url:?}: context deadline exceeded"))),
    }
}

async fn exchange(destination: &Destination, ca_bundle: &str, review: &Value) -> Result<Value, String> {
    let roots = trust_roots(ca_bundle).map_err(|CallError(why)| why)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("tls: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name =
        ServerName::try_from(destination.server_name.clone()).map_err(|error| format!("invalid server name {:?}: {error}", destination.server_name))?;
    let tcp = tokio::net::TcpStream::connect(&destination.connect).await.map_err(|error| dial_error(&destination.connect, &error))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(server_name, tcp).await.map_err(|error| tls_error(&error))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|error| error.to_string())?;
    // Ends with the exchange: dropped with the sender when the response is read or the call times out.
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "webhook connection closed");
        }
    });
    let body = serde_json::to_vec(review).map_err(|error| error.to_string())?;
    let request = Request::post(&destination.path)
        .header("host", &destination.authority)
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| error.to_string())?;
    let result = async {
        let response = sender.send_request(request).await.map_err(|error| error.to_string())?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|error| error.to_string())?.to_bytes();
        if !status.is_success() {
            // client-go's wording for an error answer that is not a Status.
            let text = String::from_utf8_lossy(&bytes);
            return Err(format!("an error on the server ({:?}) has prevented the request from succeeding (status {})", text.trim(), status.as_u16()));
        }
        serde_json::from_slice(&bytes).map_err(|error| format!("the webhook's answer is not JSON: {error}"))
    }
    .await;
    driver.abort();
    result
}

fn dial_error(address: &str, error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::ConnectionRefused => format!("dial tcp {address}: connect: connection refused"),
        _ => format!("dial tcp {address}: {error}"),
    }
}

fn tls_error(error: &std::io::Error) -> String {
    let inner = error.get_ref().map_or_else(|| error.to_string(), ToString::to_string);
    if inner.contains("certificate") || inner.contains("Certificate") {
        format!("tls: failed to verify certificate: {inner}")
    } else {
        format!("tls: {inner}")
    }
}
