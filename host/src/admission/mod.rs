//! Admission: a pod that names a scheduler nobody runs is refused at creation instead of waiting forever in
//! silence, and a namespace can give its pods a wasp profile.
//!
//! - [`review`]: the rules, as pure functions (known schedulers, conflicts, the namespace's choice).
//! - [`webhook`]: the validating and mutating webhooks over HTTPS, answering from the live configuration.
//! - [`tls`]: the serving certificate from a mounted Secret, reloaded when it rotates; [`certs`] makes one.
//! - [`stray`]: pods that slipped past the webhook get one `NoSuchScheduler` event and are counted.
//! - [`callable`]: whether the API server can call the webhooks (their `caBundle` verifies the certificate served).
//! - [`metrics`]: the metric families of all three.
//!
//! Every replica serves the webhooks (the Service spreads the API server's calls); only the leader reports
//! stray pods, so each gets one event.

pub mod callable;
pub mod certs;
pub mod metrics;
pub mod review;
pub mod stray;
pub mod tls;
pub mod webhook;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where `wasp run` serves the webhooks, and with which certificate.
#[derive(Debug, Clone)]
pub struct WebhookServing {
    pub address: SocketAddr,
    pub certificate: tls::CertificateFiles,
    /// How often the certificate files are re-read.
    pub reload_interval: Duration,
    pub limits: webhook::ServingLimits,
}

impl WebhookServing {
    pub fn new(address: SocketAddr, certificate: PathBuf, private_key: PathBuf) -> WebhookServing {
        WebhookServing {
            address,
            certificate: tls::CertificateFiles { certificate, private_key },
            reload_interval: Duration::from_secs(10),
            limits: Default::default(),
        }
    }
}

/// A cache of the cluster's namespaces (their annotations and labels say which scheduler their pods get),
/// kept by a watch while the task lives; ready after the first list.
pub fn watch_namespaces(client: kube::Client) -> Store<Namespace> {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(Api::<Namespace>::all(client), watcher::Config::default()).default_backoff());
    tokio::spawn(async move {
        stream
            .applied_objects()
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::warn!(%error, "namespace watch failed; retrying (namespaces' scheduler choices may be stale meanwhile)");
                }
            })
            .await;
    });
    reader
}
