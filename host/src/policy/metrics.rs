//! Per-policy call metrics: latency histograms and error counts by policy and operation.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub policy: String,
    pub operation: String,
}

fn latency_histogram() -> Histogram {
    // 10 µs to ~2.6 s.
    Histogram::new(exponential_buckets(1e-5, 4.0, 10))
}

pub struct PolicyMetrics {
    calls: Family<CallLabels, Histogram, fn() -> Histogram>,
    errors: Family<CallLabels, Counter>,
}

impl Default for PolicyMetrics {
    fn default() -> Self {
        PolicyMetrics { calls: Family::new_with_constructor(latency_histogram as fn() -> Histogram), errors: Family::default() }
    }
}

impl PolicyMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("wasp_policy_call_duration_seconds", "Time of one call into a policy", self.calls.clone());
        registry.register("wasp_policy_call_errors", "Policy calls that failed (trap, timeout, out of memory, error, malformed answer)", self.errors.clone());
    }

    pub fn observe(&self, policy: &str, operation: &str, elapsed: Duration, failed: bool) {
        let labels = CallLabels { policy: policy.to_string(), operation: operation.to_string() };
        self.calls.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if failed {
            self.errors.get_or_create(&labels).inc();
        }
    }
}
