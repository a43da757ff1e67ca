//! The autoscaler's metric families, registered on the host's one Prometheus registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecommendationLabels {
    policy: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScaleLabels {
    direction: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: String,
}

/// The APIs metrics are read from.
pub const METRIC_APIS: [&str; 3] = ["metrics.k8s.io", "custom.metrics.k8s.io", "external.metrics.k8s.io"];

#[derive(Clone)]
pub struct AutoscalerMetrics {
    recommendations: Family<RecommendationLabels, Counter>,
    scales: Family<ScaleLabels, Counter>,
    limited: Family<RuleLabels, Counter>,
    metric_errors: Family<ApiLabels, Counter>,
    pass: Histogram,
    autoscalers: Gauge,
}

impl AutoscalerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = AutoscalerMetrics {
            recommendations: Family::default(),
            scales: Family::default(),
            limited: Family::default(),
            metric_errors: Family::default(),
            // 1 ms to ~65 s.
            pass: Histogram::new(exponential_buckets(1e-3, 2.0, 17)),
            autoscalers: Gauge::default(),
        };
        registry.register("wasp_autoscaler_recommendations", "Scale policy calls by policy and result (ok, error)", metrics.recommendations.clone());
        registry.register("wasp_autoscaler_scales", "Replica changes sent, by direction (up, down) and result (ok, conflict, error)", metrics.scales.clone());
        registry.register(
            "wasp_autoscaler_limited",
            "Recommendations the envelope changed, by rule (ScaleUpLimit, ScaleDownLimit, TooManyReplicas, TooFewReplicas, ScaleUpStabilized, ScaleDownStabilized)",
            metrics.limited.clone(),
        );
        registry.register("wasp_autoscaler_metric_errors", "Metric reads that failed, by API", metrics.metric_errors.clone());
        registry.register("wasp_autoscaler_pass_duration_seconds", "Time of one pass over every Autoscaler", metrics.pass.clone());
        registry.register("wasp_autoscaler_autoscalers", "Autoscalers seen in the last pass", metrics.autoscalers.clone());
        // Every series of a known label set exists from the start, at 0: a rate or an increase then counts the
        // first scale or failure.
        for direction in ["up", "down"] {
            for result in ["ok", "conflict", "error"] {
                let _ = metrics.scales.get_or_create(&ScaleLabels { direction: direction.into(), result: result.into() });
            }
        }
        for api in METRIC_APIS {
            let _ = metrics.metric_errors.get_or_create(&ApiLabels { api: api.into() });
        }
        metrics
    }

    /// A scale policy serves: its recommendation series exist from then on, at 0, so a rate or an increase
    /// counts its first call and failure.
    pub fn policy(&self, policy: &str) {
        for result in ["ok", "error"] {
            let _ = self.recommendations.get_or_create(&RecommendationLabels { policy: policy.into(), result: result.into() });
        }
    }

    pub fn recommended(&self, policy: &str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.recommendations.get_or_create(&RecommendationLabels { policy: policy.into(), result: result.into() }).inc();
    }

    pub fn scaled(&self, up: bool, result: &str) {
        let direction = if up { "up" } else { "down" };
        self.scales.get_or_create(&ScaleLabels { direction: direction.into(), result: result.into() }).inc();
    }

    pub fn limited(&self, rule: &str) {
        self.limited.get_or_create(&RuleLabels { rule: rule.into() }).inc();
    }

    /// A read of `api` (one of [`METRIC_APIS`]) failed.
    pub fn metric_error(&self, api: &str) {
        self.metric_errors.get_or_create(&ApiLabels { api: api.into() }).inc();
    }

    pub fn passed(&self, took: Duration, autoscalers: usize) {
        self.pass.observe(took.as_secs_f64());
        self.autoscalers.set(autoscalers as i64);
    }
}
