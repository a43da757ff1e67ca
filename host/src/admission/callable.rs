//! Whether the API server can call the webhooks this replica serves. Both fail open (`failurePolicy: Ignore`),
//! so a configuration whose `caBundle` is missing (the `wasp certs` patches never ran, cert-manager's injection is
//! not installed) or does not verify the serving certificate admits every pod unreviewed, and nothing says so.
//! Every serving replica reads the configurations named `wasp` each minute and checks each webhook as the API
//! server will when it dials: the `caBundle` must verify this replica's certificate for the name dialled
//! (`SERVICE.NAMESPACE.svc`, or the URL's host). A webhook that fails is a Warning event `WebhookNotCallable` on its
//! configuration when its state changes, a log line, and `wasp_admission_webhook_callable` at 0.
//!
//! Counting reviews instead cannot tell: behind a Service the API server keeps its connections open to one
//! replica for minutes, so another replica legitimately answers none while pods are created.

use super::metrics::AdmissionMetrics;
use super::tls::ReloadingCertificate;
use crate::kube::{EventRecorder, ObjectRef};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig};
use kube::Api;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The name of both configurations in `manifests/40-webhooks.yaml`.
pub const CONFIGURATION_NAME: &str = "wasp";
/// The reporting component of the events (the stray-pod check's).
const COMPONENT: &str = super::stray::COMPONENT;
const CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// One webhook of a configuration: its client configuration, or why the configuration holds none.
#[derive(Debug, Clone)]
struct Registered {
    configuration: ObjectRef,
    /// Empty for a configuration that does not exist.
    webhook: String,
    client_config: Result<WebhookClientConfig, String>,
}

/// `Ok` when the API server can verify `serving` (this replica's certificate chain, leaf first) at `now` when it
/// dials `client_config`; otherwise why not, in words an operator can act on.
pub fn check(client_config: &WebhookClientConfig, serving: &[CertificateDer<'static>], now: UnixTime) -> Result<(), String> {
    let name = match (&client_config.service, &client_config.url) {
        (Some(service), _) => format!("{}.{}.svc", service.name, service.namespace),
        (None, Some(url)) => {
            url.parse::<http::Uri>().ok().and_then(|uri| uri.host().map(str::to_string)).ok_or_else(|| format!("its URL {url:?} has no host"))?
        }
        (None, None) => return Err("its clientConfig names neither a Service nor a URL".to_string()),
    };
    let bundle = client_config.ca_bundle.as_ref().map(|bundle| bundle.0.as_slice()).unwrap_or_default();
    if bundle.is_empty() {
        return Err("its caBundle is empty, so the API server cannot verify wasp's certificate and (failurePolicy Ignore) admits every pod unreviewed: run the `kubectl patch` commands `wasp certs` prints, or install cert-manager's CA injection".to_string());
    }
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(CertificateDer::pem_slice_iter(bundle).filter_map(Result::ok));
    if added == 0 {
        return Err("its caBundle holds no PEM certificate the API server could trust".to_string());
    }
    let Some((leaf, intermediates)) = serving.split_first() else { return Err("this replica serves no certificate".to_string()) };
    let server_name = ServerName::try_from(name.clone()).map_err(|error| format!("{name:?} is no server name: {error}"))?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::new(rustls::crypto::ring::default_provider()))
        .build()
        .map_err(|error| format!("its caBundle cannot be used: {error}"))?;
    verifier
        .verify_server_cert(leaf, intermediates, &server_name, &[], now)
        .map(|_| ())
        .map_err(|error| format!("its caBundle does not verify the certificate this replica serves for {name}: {error} (the Secret and the caBundle are from different `wasp certs` runs, or the certificate expired)"))
}

/// The webhooks of both configurations, or why they could not be read.
async fn registered(client: &kube::Client) -> Result<Vec<Registered>, kube::Error> {
    let reference = |kind: &str, metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| ObjectRef {
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        namespace: String::new(),
        name: CONFIGURATION_NAME.into(),
        uid: metadata.uid.clone().unwrap_or_default(),
    };
    let missing = |kind: &str| Registered {
        configuration: reference(kind, &Default::default()),
        webhook: String::new(),
        client_config: Err(format!("{kind} {CONFIGURATION_NAME} does not exist, so the API server sends no reviews: apply manifests/40-webhooks.yaml")),
    };
    let mut found = Vec::new();
    match Api::<ValidatingWebhookConfiguration>::all(client.clone()).get_opt(CONFIGURATION_NAME).await? {
        Some(configuration) => found.extend(configuration.webhooks.unwrap_or_default().into_iter().map(|webhook| Registered {
            configuration: reference("ValidatingWebhookConfiguration", &configuration.metadata),
            webhook: webhook.name,
            client_config: Ok(webhook.client_config),
        })),
        None => found.push(missing("ValidatingWebhookConfiguration")),
    }
    match Api::<MutatingWebhookConfiguration>::all(client.clone()).get_opt(CONFIGURATION_NAME).await? {
        Some(configuration) => found.extend(configuration.webhooks.unwrap_or_default().into_iter().map(|webhook| Registered {
            configuration: reference("MutatingWebhookConfiguration", &configuration.metadata),
            webhook: webhook.name,
            client_config: Ok(webhook.client_config),
        })),
        None => found.push(missing("MutatingWebhookConfiguration")),
    }
    Ok(found)
}

/// Checks the configurations now and every [`CHECK_INTERVAL`] until `stop`.
pub async fn watch(client: kube::Client, certificate: Arc<ReloadingCertificate>, events: EventRecorder, metrics: AdmissionMetrics, stop: CancellationToken) {
    let events = events.for_component(COMPONENT);
    // (configuration kind, webhook) → the last verdict: events and log lines on change only.
    let mut last: HashMap<(String, String), Result<(), String>> = HashMap::new();
    let mut unreadable = false;
    while !stop.is_cancelled() {
        match registered(&client).await {
            Ok(webhooks) => {
                unreadable = false;
                for Registered { configuration, webhook, client_config } in webhooks {
                    let verdict = client_config.and_then(|client_config| check(&client_config, &certificate.chain(), UnixTime::now()));
                    metrics.webhook_callable(&configuration.kind, &webhook, verdict.is_ok());
                    let key = (configuration.kind.clone(), webhook.clone());
                    if last.get(&key) == Some(&verdict) {
                        continue;
                    }
                    match &verdict {
                        Ok(()) => tracing::info!(configuration = %configuration.kind, %webhook, "the API server can call this webhook"),
                        Err(reason) => {
                            tracing::warn!(configuration = %configuration.kind, %webhook, %reason, "the API server cannot call this webhook");
                            if !configuration.uid.is_empty() {
                                events.event(&configuration, "Warning", "WebhookNotCallable", &format!("webhook {webhook}: {reason}")).await;
                            }
                        }
                    }
                    last.insert(key, verdict);
                }
            }
            // RBAC may not grant the read (an older install): said once, not every minute.
            Err(error) if !unreadable => {
                unreadable = true;
                tracing::warn!(%error, "could not read the webhook configurations to check the API server can call them");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::certs;
    use k8s_openapi::api::admissionregistration::v1::ServiceReference;
    use k8s_openapi::ByteString;

    fn chain(generated: &certs::ServingCertificate) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_slice_iter(generated.certificate.as_bytes()).collect::<Result<_, _>>().unwrap()
    }

    fn service(bundle: Option<&str>) -> WebhookClientConfig {
        WebhookClientConfig {
            service: Some(ServiceReference {
                name: "wasp-webhook".into(),
                namespace: "wasp-system".into(),
                path: Some("/validate-pods".into()),
                port: Some(443),
            }),
            ca_bundle: bundle.map(|pem| ByteString(pem.as_bytes().to_vec())),
            url: None,
        }
    }

    #[test]
    fn a_bundle_that_verifies_the_served_certificate_for_the_service_name_is_callable() {
        let generated = certs::generate(&certs::service_names("wasp-webhook", "wasp-system"), 1).unwrap();
        assert_eq!(check(&service(Some(&generated.ca)), &chain(&generated), UnixTime::now()), Ok(()));
    }

    #[test]
    fn a_missing_foreign_or_expired_bundle_is_not_callable_and_says_why() {
        let generated = certs::generate(&certs::service_names("wasp-webhook", "wasp-system"), 1).unwrap();
        let served = chain(&generated);
        let empty = check(&service(None), &served, UnixTime::now()).unwrap_err();
        assert!(empty.contains("caBundle is empty") && empty.contains("wasp certs"), "{empty}");
        let other = certs::generate(&certs::service_names("wasp-webhook", "wasp-system"), 1).unwrap();
        let foreign = check(&service(Some(&other.ca)), &served, UnixTime::now()).unwrap_err();
        assert!(foreign.contains("does not verify") && foreign.contains("wasp-webhook.wasp-system.svc"), "{foreign}");
        let garbage = check(&service(Some("not a certificate")), &served, UnixTime::now()).unwrap_err();
        assert!(garbage.contains("no PEM certificate"), "{garbage}");
        let in_two_days = UnixTime::since_unix_epoch(Duration::from_secs(jiff::Timestamp::now().as_second() as u64 + 2 * 86_400));
        assert!(check(&service(Some(&generated.ca)), &served, in_two_days).is_err(), "a certificate valid one day has expired in two");
    }

    #[test]
    fn a_certificate_for_other_names_is_not_callable() {
        let generated = certs::generate(&certs::service_names("another", "wasp-system"), 1).unwrap();
        let wrong_name = check(&service(Some(&generated.ca)), &chain(&generated), UnixTime::now()).unwrap_err();
        assert!(wrong_name.contains("does not verify"), "{wrong_name}");
        let url = WebhookClientConfig { url: Some("https://127.0.0.1:9443/validate-pods".into()), ..service(Some(&generated.ca)) };
        let url = WebhookClientConfig { service: None, ..url };
        let localhost = certs::generate(&["127.0.0.1".to_string()], 1).unwrap();
        let url = WebhookClientConfig { ca_bundle: Some(ByteString(localhost.ca.as_bytes().to_vec())), ..url };
        assert_eq!(check(&url, &chain(&localhost), UnixTime::now()), Ok(()), "a URL webhook is checked against the URL's host");
    }
}
