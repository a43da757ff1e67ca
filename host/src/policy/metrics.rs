//! What policy calls report: latency histograms and error counts by policy and operation, calls a circuit
//! breaker answered without the policy, and each breaker trip (for the host's events).

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

/// A policy's circuit breaker opened: the policy, and why in words for an event.
#[derive(Debug, Clone)]
pub struct Trip {
    pub policy: String,
    pub message: String,
    /// How long it stays open.
    pub cooldown: Duration,
}

pub struct PolicyMetrics {
    calls: Family<CallLabels, Histogram, fn() -> Histogram>,
    errors: Family<CallLabels, Counter>,
    short_circuited: Family<CallLabels, Counter>,
    trips_total: Family<PolicyLabels, Counter>,
    open: Family<PolicyLabels, Gauge>,
    memory: Family<PolicyLabels, Gauge>,
    trips: tokio::sync::broadcast::Sender<Trip>,
}

impl Default for PolicyMetrics {
    fn default() -> Self {
        PolicyMetrics {
            calls: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            errors: Family::default(),
            short_circuited: Family::default(),
            trips_total: Family::default(),
            open: Family::default(),
            memory: Family::default(),
            trips: tokio::sync::broadcast::channel(64).0,
        }
    }
}

impl PolicyMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("wasp_policy_call_duration_seconds", "Time of one call into a policy", self.calls.clone());
        registry.register("wasp_policy_call_errors", "Policy calls that failed (trap, timeout, out of memory, error, malformed answer)", self.errors.clone());
        registry.register(
            "wasp_policy_short_circuited_calls",
            "Calls answered by the policy's failure mode without calling it, while its circuit breaker is open",
            self.short_circuited.clone(),
        );
        registry.register("wasp_policy_circuit_trips", "Times a policy's circuit breaker opened (failures in a row)", self.trips_total.clone());
        registry.register("wasp_policy_circuit_open", "1 while a policy's circuit breaker refuses its calls", self.open.clone());
        registry.register("wasp_policy_memory_bytes", "Guest memory (linear memories and tables) of each serving policy's live instances", self.memory.clone());
    }

    /// Sets the memory series to the serving policies' (at scrape time).
    pub fn memory_in_use(&self, serving: impl Iterator<Item = (String, u64)>) {
        self.memory.clear();
        for (policy, bytes) in serving {
            self.memory.get_or_create(&PolicyLabels { policy }).set(bytes as i64);
        }
    }

    /// Sets the open-breaker series to the serving policies' (at scrape time).
    pub fn circuits_open(&self, serving: impl Iterator<Item = (String, bool)>) {
        self.open.clear();
        for (policy, open) in serving {
            self.open.get_or_create(&PolicyLabels { policy }).set(i64::from(open));
        }
    }

    pub fn short_circuited(&self, policy: &str, operation: &str) {
        self.short_circuited.get_or_create(&CallLabels { policy: policy.to_string(), operation: operation.to_string() }).inc();
    }

    pub fn tripped(&self, trip: Trip) {
        self.trips_total.get_or_create(&PolicyLabels { policy: trip.policy.clone() }).inc();
        // Nobody listening (no host, a command) is fine.
        let _ = self.trips.send(trip);
    }

    /// Breaker trips from now on.
    pub fn subscribe_trips(&self) -> tokio::sync::broadcast::Receiver<Trip> {
        self.trips.subscribe()
    }

    pub fn observe(&self, policy: &str, operation: &str, elapsed: Duration, failed: bool) {
        let labels = CallLabels { policy: policy.to_string(), operation: operation.to_string() };
        self.calls.get_or_create(&labels).observe(elapsed.as_secs_f64());
        // The error series exists from the first call, at 0: a rate or an increase then counts the first failure.
        let errors = self.errors.get_or_create(&labels);
        if failed {
            errors.inc();
        }
    }
}
