//! The scheduler's metric families, registered on the host's one Prometheus registry.

use super::queue::QueueSizes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    profile: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProfileLabels {
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms to ~4 min.
    Histogram::new(exponential_buckets(1e-3, 2.0, 18))
}

#[derive(Clone)]
pub struct SchedulerMetrics {
    attempts: Family<AttemptLabels, Counter>,
    e2e: Family<ProfileLabels, Histogram, fn() -> Histogram>,
    pending: Family<QueueLabels, Gauge>,
    longest_wait: Gauge<f64, std::sync::atomic::AtomicU64>,
    leader: Gauge,
    deferred: Gauge,
}

impl SchedulerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = SchedulerMetrics {
            attempts: Family::default(),
            e2e: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            pending: Family::default(),
            longest_wait: Gauge::default(),
            leader: Gauge::default(),
            deferred: Gauge::default(),
        };
        registry.register("wasp_schedule_attempts", "Scheduling attempts by profile and result (scheduled, unschedulable, error)", metrics.attempts.clone());
        registry.register("wasp_scheduling_e2e_duration_seconds", "From first queued to bound", metrics.e2e.clone());
        registry.register("wasp_pending_pods", "Pods waiting, by queue (active, backoff, unschedulable)", metrics.pending.clone());
        registry.register(
            "wasp_pending_pod_longest_wait_seconds",
            "How long the pod waiting longest has waited since it was first queued",
            metrics.longest_wait.clone(),
        );
        registry.register(
            "wasp_leader",
            "1 while this replica runs the loops: it holds the Lease and its informers have synced (or it runs without leader election), until a stop begins",
            metrics.leader.clone(),
        );
        registry.register(
            "wasp_waiting_pods_deferred",
            "Pods not kept waiting because their namespace's waiting pods hold its budget (scheduler.waitingPodsMibPerNamespace)",
            metrics.deferred.clone(),
        );
        metrics
    }

    pub fn attempt(&self, profile: &str, result: &str) {
        self.attempts.get_or_create(&AttemptLabels { profile: profile.into(), result: result.into() }).inc();
    }

    pub fn bound(&self, profile: &str, latency: Duration) {
        self.e2e.get_or_create(&ProfileLabels { profile: profile.into() }).observe(latency.as_secs_f64());
    }

    /// Scrape-time state: whether this replica leads, the longest wait in its queue, the pods deferred by
    /// namespace budgets; and each profile's attempt series, at 0 until its first attempt of each result (so a
    /// rate counts the first error).
    pub fn state(&self, leading: bool, longest_wait: Duration, deferred: usize, profiles: &[String]) {
        self.leader.set(i64::from(leading));
        self.longest_wait.set(longest_wait.as_secs_f64());
        self.deferred.set(deferred as i64);
        for profile in profiles {
            for result in ["scheduled", "unschedulable", "error"] {
                let _ = self.attempts.get_or_create(&AttemptLabels { profile: profile.clone(), result: result.into() });
            }
        }
    }

    pub fn queue_sizes(&self, sizes: QueueSizes) {
        for (queue, count) in [("active", sizes.active), ("backoff", sizes.backoff), ("unschedulable", sizes.unschedulable)] {
            self.pending.get_or_create(&QueueLabels { queue: queue.into() }).set(count as i64);
        }
    }
}
