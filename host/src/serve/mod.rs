//! The host's HTTP endpoints, shared by every loop: Prometheus `/metrics` (one registry; each loop registers
//! its families), `/healthz` (liveness: `ok`, or the loops that are wedged), `/readyz` with a named check per part
//! of the host (kube-apiserver's format: `[+]informers ok`), `/policies` (what the policy registry serves, with digests and last errors, and each loop's section: the
//! rescheduler's last run), and `/explain/{pods,evictions,autoscalers}/NAMESPACE/NAME` (the loops' last decision
//! record for the object, see [`crate::explain`]).

pub mod auth;
pub mod client_certs;

use crate::explain::{DecisionRecords, Kind};
use crate::registry::PolicyRegistry;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;

/// A readiness or liveness check: `Ok` when it passes, else why not; `None` when it does not apply (a part the
/// host does not run).
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
    liveness: Vec<(String, ReadinessCheck)>,
    sections: Vec<(String, StatusSection)>,
    policies: Arc<PolicyRegistry>,
    records: Arc<DecisionRecords>,
}

impl Endpoints {
    pub fn new(policies: Arc<PolicyRegistry>, records: Arc<DecisionRecords>) -> Endpoints {
        let mut metrics = Registry::default();
        policies.register_metrics(&mut metrics);
        let serving = policies.clone();
        let memory: ScrapeHook = Box::new(move || serving.refresh_gauges());
        Endpoints { metrics, scrape_hooks: vec![memory], checks: Vec::new(), liveness: Vec::new(), sections: Vec::new(), policies, records }
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

    /// A liveness check: failing, `/healthz` answers 500 and the kubelet restarts the process. Only for what a
    /// restart mends (a wedged loop), never for a dependency that is down.
    pub fn liveness_check(&mut self, name: &str, check: ReadinessCheck) {
        self.liveness.push((name.to_string(), check));
    }

    /// Each readiness check's verdict, in order, and whether all passed.
    pub fn readiness(&self) -> (bool, String) {
        verdicts(&self.checks, "readyz")
    }

    /// Whether every liveness check passes: `ok`, or each check's verdict.
    pub fn liveness(&self) -> (bool, String) {
        liveness_of(&self.liveness)
    }
}

/// `ok`, or each liveness check's verdict when one fails.
fn liveness_of(checks: &[(String, ReadinessCheck)]) -> (bool, String) {
    match verdicts(checks, "healthz") {
        (true, _) => (true, "ok".into()),
        failed => failed,
    }
}

/// kube-apiserver's format: `[+]name ok` or `[-]name failed: reason` per check, then `<what> check passed|failed`.
fn verdicts(checks: &[(String, ReadinessCheck)], what: &str) -> (bool, String) {
    let mut body = String::new();
    let mut passed = true;
    for (name, check) in checks {
        match check() {
            None => {}
            Some(Ok(())) => body.push_str(&format!("[+]{name} ok\n")),
            Some(Err(reason)) => {
                passed = false;
                body.push_str(&format!("[-]{name} failed: {reason}\n"));
            }
        }
    }
    body.push_str(&format!("{what} check {}\n", if passed { "passed" } else { "failed" }));
    (passed, body)
}

/// When a loop last moved, for its liveness check: a loop that has work and has not moved for longer than its
/// limit is wedged (a restart is the cure).
#[derive(Debug)]
pub struct Heartbeat {
    last: std::sync::Mutex<std::time::Instant>,
    /// Since when a unit of work (a pass, a run) is under way, if one is.
    busy_since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat { last: std::sync::Mutex::new(std::time::Instant::now()), busy_since: std::sync::Mutex::new(None) }
    }
}

impl Heartbeat {
    /// The loop made progress now.
    pub fn beat(&self) {
        *self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = std::time::Instant::now();
    }

    /// How long since the last beat.
    pub fn quiet_for(&self) -> std::time::Duration {
        self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).elapsed()
    }

    /// A unit of work begins; the guard ends it (and beats) when dropped, however the work ends.
    pub fn busy(&self) -> Busy<'_> {
        *self.busy_since.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(std::time::Instant::now());
        Busy(self)
    }

    /// How long the unit of work under way has taken, if one is.
    pub fn busy_for(&self) -> Option<std::time::Duration> {
        self.busy_since.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).map(|since| since.elapsed())
    }
}

/// See [`Heartbeat::busy`].
pub struct Busy<'a>(&'a Heartbeat);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.busy_since.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        self.0.beat();
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

async fn healthy(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    let (healthy, body) = endpoints.liveness();
    (if healthy { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR }, body)
}

async fn ready(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    let (ready, body) = endpoints.readiness();
    (if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, body)
}

async fn policies(State(endpoints): State<Arc<Endpoints>>) -> impl IntoResponse {
    axum::Json(endpoints.policies_document())
}

/// The last decision record of a pod, an eviction or an Autoscaler: 200 with the record as JSON, 404 saying why
/// there is none.
async fn explain(State(endpoints): State<Arc<Endpoints>>, Path((kind, namespace, name)): Path<(String, String, String)>) -> axum::response::Response {
    let Some(kind) = Kind::from_path(&kind) else {
        return (StatusCode::NOT_FOUND, format!("{kind:?} is not a kind of record: pods, evictions or autoscalers")).into_response();
    };
    match endpoints.records.lookup(kind, &format!("{namespace}/{name}")) {
        Some(record) => axum::Json(record).into_response(),
        None => {
            (StatusCode::NOT_FOUND, format!("no {} record for {namespace}/{name} here: {}", kind.path().trim_end_matches('s'), kind.why_none())).into_response()
        }
    }
}

/// The endpoints' routes: the probes always open; `/metrics`, `/policies` (which shows the configuration) and
/// `/explain` only for who `auth` lets in, when given (the path is what is authorized: `/explain/*` in a
/// ClusterRole's `nonResourceURLs` grants every record).
pub fn router(endpoints: Arc<Endpoints>, auth: Option<Arc<auth::Delegated>>) -> Router {
    let open = Router::new().route("/healthz", get(healthy)).route("/readyz", get(ready));
    let mut protected =
        Router::new().route("/metrics", get(metrics)).route("/policies", get(policies)).route("/explain/{kind}/{namespace}/{name}", get(explain));
    if let Some(auth) = auth {
        protected = protected.route_layer(axum::middleware::from_fn_with_state(auth, require_access));
    }
    open.merge(protected).with_state(endpoints)
}

/// 401 without a token the API server knows or a client certificate its client CA signed, 403 when the user may
/// not GET the path.
async fn require_access(State(auth): State<Arc<auth::Delegated>>, request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let authorization = request.headers().get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    match auth.check(authorization, request.extensions().get::<client_certs::PeerCertificates>(), request.uri().path()).await {
        Ok(()) => next.run(request).await,
        Err(auth::Refusal::Unauthenticated(why)) => (StatusCode::UNAUTHORIZED, why).into_response(),
        Err(auth::Refusal::Forbidden(why)) => (StatusCode::FORBIDDEN, why).into_response(),
    }
}

/// Serves `/metrics`, `/healthz`, `/readyz` and `/policies` on `address` over plain HTTP, to anyone (port 0 picks
/// one); returns the bound address.
pub async fn serve(endpoints: Arc<Endpoints>, address: SocketAddr) -> anyhow::Result<SocketAddr> {
    let router = router(endpoints, None);
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "HTTP endpoints stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_says_ok_or_names_the_wedged_loop() {
        let check = |verdict: Option<Result<(), String>>| -> ReadinessCheck { Box::new(move || verdict.clone()) };
        let mut checks = vec![("scheduler".to_string(), check(Some(Ok(())))), ("standby-only".to_string(), check(None))];
        assert_eq!(liveness_of(&checks), (true, "ok".to_string()));
        checks.push(("autoscaler".to_string(), check(Some(Err("its pass has been under way for 601s".into())))));
        assert_eq!(
            liveness_of(&checks),
            (false, "[+]scheduler ok\n[-]autoscaler failed: its pass has been under way for 601s\nhealthz check failed\n".to_string())
        );
    }
}
