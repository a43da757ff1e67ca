//! Client certificates on the secure port, accepted as kube-scheduler's delegated authentication accepts them
//! (the admin kubeconfigs of kubeadm, kind and most installers hold one, not a token). The TLS handshake asks for
//! a certificate, optionally (probes and token holders send none), and checks only that the client holds its key.
//! Whether the cluster's client CA signed it is decided per request, against the CA the API server publishes
//! (`kube-system/extension-apiserver-authentication`, key `client-ca-file`, read again each minute): a certificate
//! from elsewhere gets a 401 that says so rather than a failed handshake. The user is the subject's common name and
//! the groups its organizations, as kube-apiserver's x509 authenticator reads them.

use super::auth::{Refusal, User};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where kube-apiserver publishes the CA of the client certificates it accepts.
const AUTHENTICATION_CONFIG_MAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");
const CLIENT_CA_KEY: &str = "client-ca-file";
const REREAD_AFTER: Duration = Duration::from_secs(60);
/// A read of the CA that takes longer is given up (the CA read before keeps serving).
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The certificate chain a connection's client presented (leaf first), proven to hold the leaf's key; added to
/// each of its requests.
#[derive(Clone)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// The handshake's side: asks for a client certificate without requiring one, and checks the client's signature
/// with it (possession of the key). The chain is judged later, by [`ClientCa`].
#[derive(Debug)]
pub struct RequestClientCertificate {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl RequestClientCertificate {
    pub fn new(provider: &rustls::crypto::CryptoProvider) -> RequestClientCertificate {
        RequestClientCertificate { algorithms: provider.signature_verification_algorithms }
    }
}

impl ClientCertVerifier for RequestClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hint: a client with one certificate configured (kubectl, kube-rs) sends it whatever the hints say only
    /// if they are empty or name its issuer, and the issuer is only known per request.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(&self, _: &CertificateDer<'_>, _: &[CertificateDer<'_>], _: UnixTime) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
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

/// The cluster's client CA as last read: a verifier of client chains, or why there is none.
type Verifier = Result<Arc<dyn ClientCertVerifier>, String>;

/// Judges client certificates against the CA the API server publishes.
pub struct ClientCa {
    client: kube::Client,
    /// The CA as last read, and when.
    read: arc_swap::ArcSwapOption<(Instant, Verifier)>,
    /// Held by the one request that reads the CA again; the others go on with the CA read before.
    reading: tokio::sync::Mutex<()>,
}

impl ClientCa {
    pub fn new(client: kube::Client) -> ClientCa {
        ClientCa { client, read: arc_swap::ArcSwapOption::empty(), reading: tokio::sync::Mutex::new(()) }
    }

    /// The user of `chain` if the cluster's client CA signed it for client authentication and it is valid now.
    pub async fn authenticate(&self, chain: &[CertificateDer<'static>]) -> Result<User, Refusal> {
        let verifier = self.verifier().await.map_err(Refusal::Unauthenticated)?;
        let (leaf, intermediates) = chain.split_first().ok_or_else(|| Refusal::Unauthenticated("no client certificate".into()))?;
        verifier.verify_client_cert(leaf, intermediates, UnixTime::now()).map_err(|error| {
            Refusal::Unauthenticated(format!("the client certificate is not one the cluster's client CA signed for client authentication, valid now: {error}"))
        })?;
        user_of(leaf).map_err(Refusal::Unauthenticated)
    }

    /// The CA as last read; read again when a minute old, by one request at a time, within [`READ_TIMEOUT`]. While
    /// one request reads, the others use the CA read before: a slow API server never holds them up once a CA is
    /// known.
    async fn verifier(&self) -> Verifier {
        let current = self.read.load_full();
        if let Some(current) = current.as_ref().filter(|current| current.0.elapsed() < REREAD_AFTER) {
            return current.1.clone();
        }
        let _reading = match (self.reading.try_lock(), current.as_ref()) {
            (Ok(reading), _) => reading,
            (Err(_), Some(current)) => return current.1.clone(),
            // Nothing read yet: wait for the read under way.
            (Err(_), None) => {
                let reading = self.reading.lock().await;
                if let Some(current) = self.read.load_full() {
                    return current.1.clone();
                }
                reading
            }
        };
        let fresh = tokio::time::timeout(READ_TIMEOUT, self.read_ca())
            .await
            .unwrap_or_else(|_| Err(format!("the cluster's client CA could not be read within {READ_TIMEOUT:?}")));
        // A failed read keeps the CA read before: the API server's hiccup does not lock the on-call engineer out.
        let verifier = match (fresh, current.as_ref().map(|current| &current.1)) {
            (Err(why), Some(Ok(previous))) => {
                tracing::warn!(error = %why, "reading the cluster's client CA again failed; keeping the one read before");
                Ok(previous.clone())
            }
            (fresh, _) => fresh,
        };
        self.read.store(Some(Arc::new((Instant::now(), verifier.clone()))));
        verifier
    }

    async fn read_ca(&self) -> Verifier {
        let (namespace, name) = AUTHENTICATION_CONFIG_MAP;
        let config_map = Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await
            .map_err(|error| format!("the cluster's client CA could not be read from {namespace}/{name} ({error}): the Role extension-apiserver-authentication-reader in {namespace} grants it"))?;
        let bundle = config_map
            .data
            .unwrap_or_default()
            .remove(CLIENT_CA_KEY)
            .ok_or_else(|| format!("{namespace}/{name} has no {CLIENT_CA_KEY}: the API server accepts no client certificate"))?;
        // webpki does not check a root's own dates (Go's x509 does): an expired CA is left out here.
        let valid_now =
            |certificate: &CertificateDer<'_>| x509_parser::parse_x509_certificate(certificate).is_ok_and(|(_, parsed)| parsed.validity().is_valid());
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(CertificateDer::pem_slice_iter(bundle.as_bytes()).filter_map(Result::ok).filter(valid_now));
        if added == 0 {
            return Err(format!("{namespace}/{name}'s {CLIENT_CA_KEY} holds no certificate valid now"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map(|verifier| verifier as Arc<dyn ClientCertVerifier>)
            .map_err(|error| format!("{namespace}/{name}'s {CLIENT_CA_KEY}: {error}"))
    }
}

/// The user a client certificate names: its subject's one common name, and its organizations as groups. A
/// subject with several common names (Go keeps the last, this parser would see the first) or a name this parser
/// cannot read is refused rather than read differently from kube-apiserver.
fn user_of(leaf: &CertificateDer<'_>) -> Result<User, String> {
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf).map_err(|error| format!("the client certificate does not parse: {error}"))?;
    let subject = certificate.subject();
    let names: Vec<_> = subject.iter_common_name().collect();
    let [name] = names.as_slice() else {
        return Err(format!("the client certificate's subject has {} common names; the user name is exactly one", names.len()));
    };
    let name =
        name.as_str().ok().filter(|name| !name.is_empty()).ok_or("the client certificate's common name (the user name) is empty or not a readable string")?;
    let groups = subject
        .iter_organization()
        .map(|group| group.as_str().map(str::to_string))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "the client certificate names an organization (a group) that is not a readable string")?;
    Ok(User { name: name.to_string(), groups, uid: None, extra: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_the_common_name_and_the_groups_the_organizations() {
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "oncall");
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let user = user_of(certificate.der()).unwrap();
        assert_eq!((user.name.as_str(), user.groups), ("alice", vec!["oncall".to_string()]));

        params.distinguished_name = rcgen::DistinguishedName::new();
        let nameless = params.self_signed(&key).unwrap();
        assert!(user_of(nameless.der()).unwrap_err().contains("has 0 common names"));
    }
}
