//! How `wasp explain` reaches the host that leads: its Lease names the holder and carries the address of its
//! secure port and the SHA-256 of the certificate it serves. The API server vouches for both (only who may write
//! the Lease in wasp's namespace can change them, and that one could lead anyway), so the client pins that exact
//! certificate instead of trusting a CA, and authenticates as the kubeconfig's user (a token, an exec plugin),
//! whom the host checks with a TokenReview and a SubjectAccessReview on the path.

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use kube::client::ConfigExt;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;
use std::time::Duration;

/// `https://HOST:PORT` of the holder's secure port.
pub const ENDPOINT_ANNOTATION: &str = "wasp.dev/explain-endpoint";
/// SHA-256 (hex) of the certificate the holder's secure port serves.
pub const CERTIFICATE_ANNOTATION: &str = "wasp.dev/serving-certificate-sha256";

/// An explanation should answer in milliseconds; this bounds a host that does not.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The host that leads, as its Lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub holder: String,
    pub endpoint: String,
    pub certificate_sha256: String,
}

/// Reads the Lease `namespace/name` and the holder's endpoint from it.
pub async fn find_leader(client: kube::Client, namespace: &str, name: &str) -> anyhow::Result<Leader> {
    let lease = kube::Api::<Lease>::namespaced(client, namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("reading the Lease {namespace}/{name}"))?
        .with_context(|| format!("Lease {namespace}/{name} not found: is wasp running with leader election here (--lease-namespace, --lease-name)?"))?;
    leader_of(&lease).with_context(|| format!("Lease {namespace}/{name}"))
}

fn leader_of(lease: &Lease) -> anyhow::Result<Leader> {
    let holder =
        lease.spec.as_ref().and_then(|spec| spec.holder_identity.clone()).filter(|holder| !holder.is_empty()).context("no host holds it now (none leads)")?;
    let annotation = |key: &str| lease.metadata.annotations.as_ref().and_then(|annotations| annotations.get(key)).cloned();
    let endpoint = annotation(ENDPOINT_ANNOTATION)
        .with_context(|| format!("its holder {holder} does not say where it serves ({ENDPOINT_ANNOTATION}): a wasp older than `wasp explain`?"))?;
    let certificate_sha256 = annotation(CERTIFICATE_ANNOTATION)
        .with_context(|| format!("its holder {holder} does not say which certificate it serves ({CERTIFICATE_ANNOTATION})"))?;
    Ok(Leader { holder, endpoint, certificate_sha256 })
}

/// What the leader answered.
#[derive(Debug)]
pub enum Answer {
    Record(serde_json::Value),
    /// 404: the host keeps no such record, and says why.
    NoRecord(String),
}

/// GETs `path` from the leader's secure port as `config`'s user, over TLS pinned to the certificate the Lease names.
pub async fn ask(config: &kube::Config, leader: &Leader, path: &str) -> anyhow::Result<Answer> {
    let mut tls = config.rustls_client_config().context("the kubeconfig's TLS settings")?;
    tls.dangerous().set_certificate_verifier(Arc::new(Pinned::new(&leader.certificate_sha256)?));
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnector::from((http, Arc::new(tls)));
    let mut to_leader = config.clone();
    to_leader.cluster_url = leader.endpoint.parse().with_context(|| format!("the leader's endpoint {:?}", leader.endpoint))?;
    let service = tower::ServiceBuilder::new()
        .layer(to_leader.base_uri_layer())
        .option_layer(to_leader.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(https));
    let client = kube::Client::new(service, "default");
    let request = http::Request::get(path).body(Vec::new())?;
    let answered =
        tokio::time::timeout(TIMEOUT, client.request_text(request)).await.with_context(|| format!("{} did not answer within {TIMEOUT:?}", leader.endpoint))?;
    match answered {
        Ok(text) => {
            Ok(Answer::Record(serde_json::from_str(&text).with_context(|| format!("{}{path} answered something other than a record", leader.endpoint))?))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Answer::NoRecord(status.message)),
        Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
            anyhow::bail!("{} refused {path} ({}): {}; the kubeconfig's user needs a token the API server knows (or a client certificate its client CA signed) and `get` on the non-resource URL {path} (a ClusterRole's nonResourceURLs: [\"/explain/*\"])", leader.holder, status.code, status.message)
        }
        Err(error) => Err(anyhow::Error::new(error).context(format!("asking {} ({}) for {path}", leader.holder, leader.endpoint))),
    }
}

/// Accepts exactly the certificate whose SHA-256 the Lease names, whatever names it holds or who signed it; the
/// handshake's signatures are checked as usual.
#[derive(Debug)]
struct Pinned {
    sha256: Vec<u8>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl Pinned {
    fn new(hex_sha256: &str) -> anyhow::Result<Pinned> {
        let sha256 = hex::decode(hex_sha256)
            .ok()
            .filter(|bytes| bytes.len() == 32)
            .with_context(|| format!("{CERTIFICATE_ANNOTATION} {hex_sha256:?} is not a SHA-256 in hex"))?;
        Ok(Pinned { sha256, algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms })
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use sha2::Digest;
        match sha2::Sha256::digest(end_entity.as_ref()).as_slice() == self.sha256.as_slice() {
            true => Ok(ServerCertVerified::assertion()),
            false => Err(rustls::Error::General(
                "the server's certificate is not the one its Lease names (a new leader, or a certificate rotated since: try again)".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, certificate, signature, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, certificate, signature, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, annotations: &[(&str, &str)]) -> Lease {
        let source = serde_json::json!({
            "metadata": {"name": "wasp-scheduler", "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>()},
            "spec": {"holderIdentity": holder},
        });
        serde_json::from_value(source).unwrap()
    }

    #[test]
    fn the_leader_is_the_holder_with_its_advertised_endpoint_or_a_clear_error() {
        let full = lease("wasp-0_1", &[(ENDPOINT_ANNOTATION, "https://10.0.0.5:10259"), (CERTIFICATE_ANNOTATION, "ab")]);
        assert_eq!(leader_of(&full).unwrap(), Leader { holder: "wasp-0_1".into(), endpoint: "https://10.0.0.5:10259".into(), certificate_sha256: "ab".into() });
        let released = lease("", &[(ENDPOINT_ANNOTATION, "https://10.0.0.5:10259")]);
        assert_eq!(leader_of(&released).unwrap_err().to_string(), "no host holds it now (none leads)");
        let old = lease("wasp-0_1", &[]);
        assert!(leader_of(&old).unwrap_err().to_string().starts_with("its holder wasp-0_1 does not say where it serves"));
        assert!(Pinned::new("zz").unwrap_err().to_string().contains("is not a SHA-256 in hex"));
    }
}
