//! The scheduler's HTTP endpoints: Prometheus `/metrics`, `/healthz`, `/readyz` (ready once the informers have
//! listed the cluster) and `/policies` (what the policy registry serves, with digests and last errors, as JSON).

use super::Scheduler;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub profile: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms to ~4 min.
    Histogram::new(exponential_buckets(1e-3, 2.0, 18))
}

pub struct SchedulerMetrics {
    attempts: Family<AttemptLabels, Counter>,
    e2e: Family<ProfileLabels, Histogram, fn() -> Histogram>,
    pending: Family<QueueLabels, Gauge>,
}

impl SchedulerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = SchedulerMetrics {
            attempts: Family::default(),
            e2e: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            pending: Family::default(),
        };
        registry.register("wasp_schedule_attempts", "Scheduling attempts by profile and result (scheduled, unschedulable, error)", metrics.attempts.clone());
        registry.register("wasp_scheduling_e2e_duration_seconds", "From first queued to bound", metrics.e2e.clone());
        registry.register("wasp_pending_pods", "Pods waiting, by queue (active, backoff, unschedulable)", metrics.pending.clone());
        metrics
    }

    pub fn attempt(&self, profile: &str, result: &str) {
        self.attempts.get_or_create(&AttemptLabels { profile: profile.into(), result: result.into() }).inc();
    }

    pub fn bound(&self, profile: &str, latency: Duration) {
        self.e2e.get_or_create(&ProfileLabels { profile: profile.into() }).observe(latency.as_secs_f64());
    }

    fn pending(&self, queue: &str, count: usize) {
        self.pending.get_or_create(&QueueLabels { queue: queue.into() }).set(count as i64);
    }
}

async fn metrics(State(scheduler): State<Arc<Scheduler>>) -> impl IntoResponse {
    let sizes = scheduler.queue.sizes();
    scheduler.metrics.pending("active", sizes.active);
    scheduler.metrics.pending("backoff", sizes.backoff);
    scheduler.metrics.pending("unschedulable", sizes.unschedulable);
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &scheduler.registry) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], error.to_string()),
    }
}

async fn ready(State(scheduler): State<Arc<Scheduler>>) -> impl IntoResponse {
    if scheduler.is_synced() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "waiting for the node and pod informers") }
}

async fn policies(State(scheduler): State<Arc<Scheduler>>) -> impl IntoResponse {
    axum::Json(scheduler.policies().status())
}

/// Serves the endpoints on `address` (port 0 picks one); returns the bound address.
pub async fn serve(scheduler: Arc<Scheduler>, address: SocketAddr) -> anyhow::Result<SocketAddr> {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/policies", get(policies))
        .with_state(scheduler);
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "metrics server stopped");
        }
    });
    Ok(bound)
}
