//! Reload metrics: which policy versions serve (`wasp_policy_info`), reloads by result, when the last one
//! happened and how long it took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyInfoLabels {
    pub policy: String,
    pub version: String,
    pub sha256: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
    /// Why a failed reload was refused ([`super::RefusalReason`]); empty otherwise.
    pub reason: String,
}

#[derive(Clone)]
pub struct ReloadMetrics {
    info: Family<PolicyInfoLabels, Gauge>,
    reloads: Family<ResultLabels, Counter>,
    directory_reads: Counter,
    last_reload: Gauge<f64, AtomicU64>,
    last_refused: Gauge<f64, AtomicU64>,
    duration: Histogram,
    generation: Gauge,
}

impl Default for ReloadMetrics {
    fn default() -> Self {
        ReloadMetrics {
            info: Family::default(),
            reloads: Family::default(),
            directory_reads: Counter::default(),
            last_reload: Gauge::default(),
            last_refused: Gauge::default(),
            // 1 ms to ~16 s.
            duration: Histogram::new(exponential_buckets(1e-3, 2.0, 15)),
            generation: Gauge::default(),
        }
    }
}

impl ReloadMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("wasp_policy_info", "The policy versions serving now (value 1)", self.info.clone());
        // Successes carry no reason: their series exists from the start, at 0, so a rate counts the first reload.
        let _ = self.reloads.get_or_create(&ResultLabels { result: "success".into(), reason: String::new() });
        registry.register(
            "wasp_policy_reloads",
            "Reloads of the policy directory or configuration, by result (success, failure) and, for failures, reason (once per kind of refusal)",
            self.reloads.clone(),
        );
        registry.register(
            "wasp_policy_directory_reads",
            "Reads of the policy directory and configuration, changed or not: one per burst of file changes and one per periodic rescan",
            self.directory_reads.clone(),
        );
        registry.register("wasp_policy_last_reload_timestamp_seconds", "When the last reload that found a change finished", self.last_reload.clone());
        registry.register(
            "wasp_policy_last_refused_reload_timestamp_seconds",
            "When a reload was last refused (0: none since the host started); alert on its age, as a failure count starts at 1",
            self.last_refused.clone(),
        );
        registry.register("wasp_policy_reload_duration_seconds", "From reading the files to the new generation serving", self.duration.clone());
        registry.register("wasp_policy_generation", "Number of the policy generation serving now", self.generation.clone());
    }

    pub fn directory_read(&self) {
        self.directory_reads.inc();
    }

    /// Replaces the info series with the versions that serve now.
    pub fn serving(&self, generation: u64, versions: impl Iterator<Item = PolicyInfoLabels>) {
        self.info.clear();
        for labels in versions {
            self.info.get_or_create(&labels).set(1);
        }
        self.generation.set(generation as i64);
    }

    pub fn reloaded(&self, result: &str, reasons: &[&str], took: Duration) {
        let mut distinct: Vec<&str> = reasons.to_vec();
        distinct.sort();
        distinct.dedup();
        if distinct.is_empty() {
            distinct.push("");
        }
        for reason in distinct {
            self.reloads.get_or_create(&ResultLabels { result: result.into(), reason: reason.into() }).inc();
        }
        self.duration.observe(took.as_secs_f64());
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        self.last_reload.set(now.as_secs_f64());
        if result == "failure" {
            self.last_refused.set(now.as_secs_f64());
        }
    }
}
