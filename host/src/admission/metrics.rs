//! The admission webhooks' and the stray-pod check's metric families.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    webhook: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SchedulerLabels {
    scheduler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigurationLabels {
    configuration: String,
    webhook: String,
}

#[derive(Clone)]
pub struct AdmissionMetrics {
    reviews: Family<ReviewLabels, Counter>,
    duration: Family<WebhookLabels, Histogram>,
    stray_pods: Family<SchedulerLabels, Gauge>,
    callable: Family<ConfigurationLabels, Gauge>,
}

impl AdmissionMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = AdmissionMetrics {
            reviews: Family::default(),
            // 50 µs to ~0.8 s.
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(5e-5, 2.0, 15))),
            stray_pods: Family::default(),
            callable: Family::default(),
        };
        registry.register(
            "wasp_admission_reviews",
            "AdmissionReviews answered, by webhook (validate, mutate) and result (allowed, denied, warned, mutated, malformed)",
            metrics.reviews.clone(),
        );
        registry.register("wasp_admission_review_duration_seconds", "Time to answer one AdmissionReview, by webhook", metrics.duration.clone());
        // Every review series exists from the start, at 0: a rate or an increase then counts the first of each.
        for webhook in ["validate", "mutate"] {
            for result in ["allowed", "denied", "warned", "mutated", "malformed", "busy"] {
                let _ = metrics.reviews.get_or_create(&ReviewLabels { webhook: webhook.into(), result: result.into() });
            }
        }
        registry.register(
            "wasp_stray_pods",
            "Pending pods that name a scheduler nobody runs (created while the webhook was down or warned only), by the name",
            metrics.stray_pods.clone(),
        );
        registry.register(
            "wasp_admission_webhook_callable",
            "1 when the webhook's configuration lets the API server verify this replica's certificate, 0 when not (or the configuration is missing: webhook \"\"), by configuration kind and webhook",
            metrics.callable.clone(),
        );
        metrics
    }

    pub fn reviewed(&self, webhook: &str, result: &str, took: Duration) {
        self.reviews.get_or_create(&ReviewLabels { webhook: webhook.into(), result: result.into() }).inc();
        self.duration.get_or_create(&WebhookLabels { webhook: webhook.into() }).observe(took.as_secs_f64());
    }

    pub fn webhook_callable(&self, configuration: &str, webhook: &str, callable: bool) {
        self.callable.get_or_create(&ConfigurationLabels { configuration: configuration.into(), webhook: webhook.into() }).set(i64::from(callable));
    }

    /// Sets the count of stray pods per scheduler name; a name with none left is no longer reported.
    pub fn stray_pods(&self, counts: &std::collections::BTreeMap<String, i64>) {
        self.stray_pods.clear();
        for (scheduler, count) in counts {
            self.stray_pods.get_or_create(&SchedulerLabels { scheduler: scheduler.clone() }).set(*count);
        }
    }
}
