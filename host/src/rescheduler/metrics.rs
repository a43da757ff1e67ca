//! The rescheduler's metric families, registered on the host's one Prometheus registry (named like the
//! descheduler's where it has them).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    policy: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabels {
    policy: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConflictLabels {
    evicted_by: String,
    proposed_by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(1e-3, 2.0, 17))
}

#[derive(Clone)]
pub struct ReschedulerMetrics {
    evictions: Family<EvictionLabels, Counter>,
    skipped: Family<SkipLabels, Counter>,
    conflicts: Family<ConflictLabels, Counter>,
    propose: Family<PolicyLabels, Histogram, fn() -> Histogram>,
    run: Histogram,
    plan_size: Gauge,
}

impl ReschedulerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = ReschedulerMetrics {
            evictions: Family::default(),
            skipped: Family::default(),
            conflicts: Family::default(),
            propose: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            run: duration_histogram(),
            plan_size: Gauge::default(),
        };
        registry.register(
            "wasp_rescheduler_evictions",
            "Planned evictions by policy and result (evicted, refused-by-pdb, gone, error, dry-run)",
            metrics.evictions.clone(),
        );
        registry.register(
            "wasp_rescheduler_skipped",
            "Proposed pods left in place, by policy and reason (protected, pdb, backoff, pacing, limit, no-fit)",
            metrics.skipped.clone(),
        );
        registry.register(
            "wasp_rescheduler_strategy_conflicts",
            "A strategy proposed a pod that replaced one another strategy evicted within the pacing window (once per workload and pair per window), by the two policies",
            metrics.conflicts.clone(),
        );
        registry.register("wasp_rescheduler_propose_duration_seconds", "Time of each strategy's propose call", metrics.propose.clone());
        registry.register("wasp_rescheduler_run_duration_seconds", "Time of a whole run: plan, checks and evictions", metrics.run.clone());
        registry.register("wasp_rescheduler_plan_evictions", "Evictions in the last plan", metrics.plan_size.clone());
        metrics
    }

    /// A strategy runs: its eviction series exist from then on, at 0, so a rate or an increase counts its first
    /// eviction, refusal or error.
    pub fn strategy(&self, policy: &str) {
        for result in ["evicted", "refused-by-pdb", "error"] {
            let _ = self.evictions.get_or_create(&EvictionLabels { policy: policy.into(), result: result.into() });
        }
    }

    pub fn eviction(&self, policy: &str, result: &str) {
        self.evictions.get_or_create(&EvictionLabels { policy: policy.into(), result: result.into() }).inc();
    }

    pub fn skipped(&self, policy: &str, reason: &str) {
        self.skipped.get_or_create(&SkipLabels { policy: policy.into(), reason: reason.into() }).inc();
    }

    pub fn conflict(&self, evicted_by: &str, proposed_by: &str) {
        self.conflicts.get_or_create(&ConflictLabels { evicted_by: evicted_by.into(), proposed_by: proposed_by.into() }).inc();
    }

    pub fn proposed(&self, policy: &str, took: Duration) {
        self.propose.get_or_create(&PolicyLabels { policy: policy.into() }).observe(took.as_secs_f64());
    }

    pub fn ran(&self, took: Duration, planned: usize) {
        self.run.observe(took.as_secs_f64());
        self.plan_size.set(planned as i64);
    }
}
