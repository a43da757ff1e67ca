//! The host's HTTP endpoints, shared by every loop: Prometheus `/metrics` (one registry; each loop registers
//! its families), `/healthz`, `/readyz` with a named check per part of the host (kube-apiserver's format:
//! `[+]informers ok`), and `/policies` (what the policy registry serves, with digests and last errors, and each loop's section: the
//! rescheduler's last run).

use crate::registry::PolicyRegistry;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;

/// A readiness check: `Ok` when ready, else why not; `None` when it does not apply (a part the host does not run).
pub type ReadinessCheck = Box<dyn Fn() -> Option<Result<(), String>> + Send + Sync>;
/// Brings scrape-time gauges (queue sizes, say) up to date before `/metrics` encodes them.
pub type ScrapeHook = Box<dyn Fn() + Send + Sync>;
/// A loop's part of `/policies` (the rescheduler's last run, say).
pub type StatusSection = Box<dyn Fn() -> serde_json::Value + Send + Sync>;

/// What the endpoints serve; built once, before serving.
pub struct Endpoints {
    pub metrics: Registry,
    scrape_hooks: Vec<ScrapeHook>,
    checks: Vec<(String, ReadinessCheck)>,
    sections: Vec<(String, StatusSection)>,
    policies: Arc<PolicyRegistry>,
}

impl Endpoints {
    pub fn new(policies: Arc<PolicyRegistry>) -> Endpoints {
        let mut metrics = Registry::default();
        policies.register_metrics(&mut metrics);
        let serving = policies.clone();
        let memory: ScrapeHook = Box::new(move || serving.report_memory());
        Endpoints { metrics, scrape_hooks: vec![memory], checks: Vec::new(), sections: Vec::new(), policies }
    }

    pub fn on_scrape(&mut self, hook: ScrapeHook) {
        self.scrape_hooks.push(hook);
    }

    /// Adds `name` to the `/policies` document.
    pub fn status_section(&mut self, name: &str, section: StatusSection) {
        self.sections.push((name.to_string(), section));
    }

    /// What `/policies` serves: the registry's status and each loop's section.
    pub fn policies_document(&self) -> serde_json::Value {
        let mut document = serde_json::to_value(self.policies.status()).unwrap_or_default();
        if let Some(object) = document.as_object_mut() {
            for (name, section) in &self.sections {
                object.insert(name.clone(), section());
            }
        }
        document
    }

    pub fn readiness_check(&mut self, name: &str, check: ReadinessCheck) {
        self.checks.push((name.to_string(), check));
    }

    /// Each check's verdict, in order, and whether all passed.
    pub fn readiness(&self) -> (bool, String) {
        let mut body = String::new();
        let mut ready = true;
        for (name, check) in &self.checks {
            match check() {
                None => {}
                Some(Ok(())) => body.push_str(&format!("[+]{name} ok\n")),
                Some(Err(reason)) => {
                    ready = false;
                    body.push_str(&format!("[-]{name} failed: {reason}\n"));
                }
            }
        }
        body.push_str(if ready { "readyz check passed\n" } else { "readyz check failed\n" });
        (ready, body)
    }
}

async fn metrics(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    for hook in &endpoints.scrape_hooks {
        hook();
    }
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &endpoints.metrics) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], error.to_string()),
    }
}

async fn ready(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    let (ready, body) = endpoints.readiness();
    (if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, body)
}

async fn policies(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    axum::Json(endpoints.policies_document())
}

/// Serves `/metrics`, `/healthz`, `/readyz` and `/policies` on `address` (port 0 picks one); returns the bound
/// address.
pub async fn serve(endpoints: Arc<Endpoints>, address: SocketAddr) -> anyhow::Result<SocketAddr> {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/policies", get(policies))
        .with_state(endpoints);
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "HTTP endpoints stopped");
        }
    });
    Ok(bound)
}
