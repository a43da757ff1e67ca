//! The webhook's serving certificate, read from files (a mounted Secret) and re-read when they change, so a
//! rotation by cert-manager (or `wasp certs` and a `kubectl apply`) takes effect without a restart. New TLS
//! handshakes get the new certificate; connections already open keep theirs.

use anyhow::{bail, Context};
use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A PEM file larger than this is no certificate or key.
const MAX_PEM_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct CertificateFiles {
    pub certificate: PathBuf,
    pub private_key: PathBuf,
}

impl CertificateFiles {
    fn read(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        Ok((read_bounded(&self.certificate)?, read_bounded(&self.private_key)?))
    }
}

fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    crate::registry::source::read_regular(path, MAX_PEM_BYTES).with_context(|| format!("reading {} (a PEM certificate or key)", path.display()))
}

/// The certificate chain and key in `pem` files, checked to belong together.
fn certified_key(files: &CertificateFiles, certificate: &[u8], key: &[u8]) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(certificate)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not a PEM certificate chain", files.certificate.display()))?;
    if chain.is_empty() {
        bail!("{}: no certificate in it", files.certificate.display());
    }
    let key = PrivateKeyDer::from_pem_slice(key).with_context(|| format!("{}: not a PEM private key", files.private_key.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).with_context(|| format!("{}: unsupported private key", files.private_key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().with_context(|| format!("{} does not match the certificate in {}", files.private_key.display(), files.certificate.display()))?;
    Ok(certified)
}

/// Serves the last good certificate of its files to every handshake.
#[derive(Debug)]
pub struct ReloadingCertificate {
    files: CertificateFiles,
    current: ArcSwap<CertifiedKey>,
    /// The bytes the current certificate was made from: a rescan that reads the same bytes does nothing.
    loaded_from: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl ReloadingCertificate {
    /// Fails when the files do not hold a certificate and its key: a webhook must not start without one.
    pub fn load(files: CertificateFiles) -> anyhow::Result<Arc<ReloadingCertificate>> {
        let (certificate, key) = files.read()?;
        let certified = certified_key(&files, &certificate, &key)?;
        Ok(Arc::new(ReloadingCertificate { files, current: ArcSwap::from_pointee(certified), loaded_from: Mutex::new((certificate, key)) }))
    }

    /// A certificate made in memory (`certificate` and `key` PEM), never reloaded: the secure endpoints' own
    /// when no certificate files are given, as kube-scheduler makes one for its secure port.
    pub fn in_memory(certificate: &str, key: &str) -> anyhow::Result<Arc<ReloadingCertificate>> {
        let files = CertificateFiles { certificate: PathBuf::from("(generated certificate)"), private_key: PathBuf::from("(generated key)") };
        let certified = certified_key(&files, certificate.as_bytes(), key.as_bytes())?;
        let loaded_from = (certificate.as_bytes().to_vec(), key.as_bytes().to_vec());
        Ok(Arc::new(ReloadingCertificate { files, current: ArcSwap::from_pointee(certified), loaded_from: Mutex::new(loaded_from) }))
    }

    /// The SHA-256 (hex) of the certificate serving now (the chain's first): what a client pins.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        self.current.load().cert.first().map(|certificate| hex::encode(sha2::Sha256::digest(certificate.as_ref()))).unwrap_or_default()
    }

    /// Re-reads the files: Ok(true) when a new certificate now serves, Ok(false) when they did not change. On
    /// error (a rotation half written, a wrong key), the previous certificate keeps serving.
    pub fn reload(&self) -> anyhow::Result<bool> {
        let read = self.files.read()?;
        let mut loaded_from = self.loaded_from.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if *loaded_from == read {
            return Ok(false);
        }
        let certified = certified_key(&self.files, &read.0, &read.1)?;
        self.current.store(Arc::new(certified));
        *loaded_from = read;
        Ok(true)
    }

    /// Re-reads the files every `interval` while the task lives. A Secret volume changes by swapping a symlink,
    /// which file notifications report unreliably; reading two small files is cheap.
    pub async fn keep_current(self: Arc<Self>, interval: Duration) {
        let mut failing = false;
        loop {
            tokio::time::sleep(interval).await;
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    tracing::info!(certificate = %self.files.certificate.display(), "webhook serving certificate reloaded");
                }
                Ok(false) => failing = false,
                // Said once per failure, not every interval: a Secret being rewritten fails for a moment.
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(error = format!("{error:#}"), "webhook serving certificate not reloaded; the previous one keeps serving");
                }
                Err(_) => {}
            }
        }
    }

    /// The chain served now, leaf first.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current.load().cert.clone()
    }

    /// Serving this certificate; asking clients for theirs when `client_certificates` is given.
    pub fn server_config(
        self: &Arc<Self>,
        client_certificates: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> anyhow::Result<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
        let builder = match client_certificates {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_is_taken_and_a_mismatched_pair_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let files = CertificateFiles { certificate: dir.path().join("tls.crt"), private_key: dir.path().join("tls.key") };
        let write = |generated: &crate::admission::certs::ServingCertificate| {
            std::fs::write(&files.certificate, &generated.certificate).unwrap();
            std::fs::write(&files.private_key, &generated.private_key).unwrap();
        };
        let first = crate::admission::certs::generate(&["127.0.0.1".to_string()], 1).unwrap();
        write(&first);
        let certificate = ReloadingCertificate::load(files.clone()).unwrap();
        let serving = || certificate.current.load_full().cert[0].clone();
        let original = serving();
        assert!(!certificate.reload().unwrap(), "same files: nothing to do");
        let second = crate::admission::certs::generate(&["127.0.0.1".to_string()], 1).unwrap();
        std::fs::write(&files.private_key, &second.private_key).unwrap();
        let error = format!("{:#}", certificate.reload().unwrap_err());
        assert!(error.contains("does not match the certificate"), "{error}");
        assert_eq!(serving(), original, "the previous pair keeps serving");
        write(&second);
        assert!(certificate.reload().unwrap());
        assert_ne!(serving(), original);
        std::fs::write(&files.certificate, b"not pem").unwrap();
        assert!(certificate.reload().is_err());
        assert!(ReloadingCertificate::load(files).is_err(), "a host does not start without a certificate");
    }
}
