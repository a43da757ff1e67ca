//! Per-policy call metrics: latency histograms and error counts by policy and operation.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

pub struct PolicyMetrics {
    calls: Family<CallLabels, Histogram, fn() -> Histogram>,
    errors: Family<CallLabels, Counter>,
    memory: Family<PolicyLabels, Gauge>,
}

impl Default for PolicyMetrics {
    fn default() -> Self {
        PolicyMetrics { calls: Family::new_with_constructor(latency_histogram as fn() -> Histogram), errors: Family::default(), memory: Family::default() }
    }
}

impl PolicyMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("wasp_policy_call_duration_seconds", "Time of one call into a policy", self.calls.clone());
        registry.register("wasp_policy_call_errors", "Policy calls that failed (trap, timeout, out of memory, error, malformed answer)", self.errors.clone());
        registry.register("wasp_policy_memory_bytes", "Guest memory (linear memories and tables) of each serving policy's live instances", self.memory.clone());
    }

    /// Sets the memory series to the serving policies' (at scrape time).
    pub fn memory_in_use(&self, serving: impl Iterator<Item = (String, u64)>) {
        self.memory.clear();
        for (policy, bytes) in serving {
            self.memory.get_or_create(&PolicyLabels { policy }).set(bytes as i64);
        }
    }

    pub fn observe(&self, policy: &str, operation: &str, elapsed: Duration, failed: bool) {
        let labels = CallLabels { policy: policy.to_string(), operation: operation.to_string() };
        self.calls.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if failed {
            self.errors.get_or_create(&labels).inc();
        }
    }
}
