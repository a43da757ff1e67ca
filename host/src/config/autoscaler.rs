//! The autoscaler's section: the scale policies Autoscalers may name, how often every Autoscaler is
//! reconciled, and the HPA's timing rules for pods that are starting.

use anyhow::bail;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AutoscalerSection {
    /// Scale policies that Autoscalers may name.
    pub policies: Vec<String>,
    /// Time between two reconciliations of every Autoscaler (the HPA's `--horizontal-pod-autoscaler-sync-period`).
    #[serde(default = "default_sync_period", with = "humantime_serde")]
    pub sync_period: Duration,
    /// A pod's CPU is not trusted this long after it started unless it was Ready for a full metrics window.
    #[serde(default = "default_cpu_initialization_period", with = "humantime_serde")]
    pub cpu_initialization_period: Duration,
    /// A pod that turned unready within this long of starting was never ready: its CPU is not counted.
    #[serde(default = "default_initial_readiness_delay", with = "humantime_serde")]
    pub initial_readiness_delay: Duration,
    /// Decide and report, but change no replica count.
    #[serde(default)]
    pub dry_run: bool,
}

fn default_sync_period() -> Duration {
    Duration::from_secs(15)
}

fn default_cpu_initialization_period() -> Duration {
    Duration::from_secs(300)
}

fn default_initial_readiness_delay() -> Duration {
    Duration::from_secs(30)
}

impl AutoscalerSection {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.policies.is_empty() {
            bail!("autoscaler.policies: at least one policy is needed (or leave the autoscaler section out)");
        }
        if self.sync_period < Duration::from_millis(100) || self.sync_period > Duration::from_secs(3600) {
            bail!("autoscaler.syncPeriod: {} is outside 100ms..1h", humantime::format_duration(self.sync_period));
        }
        for (field, value) in [("cpuInitializationPeriod", self.cpu_initialization_period), ("initialReadinessDelay", self.initial_readiness_delay)] {
            if value > Duration::from_secs(3600) {
                bail!("autoscaler.{field}: {} is more than 1h", humantime::format_duration(value));
            }
        }
        Ok(())
    }
}
