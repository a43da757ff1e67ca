//! The rescheduler's section: its strategies (evict policies), when it runs, and the safety envelope that no
//! policy can bypass: protections (the descheduler's `DefaultEvictor` defaults), limits per run, pacing per
//! workload and memory across runs.

use anyhow::bail;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use std::time::Duration;

/// kube's `system-cluster-critical` priority: pods at or above it are never evicted unless allowed.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReschedulerSection {
    /// Evict policies, each proposing candidates for one strategy, in order of precedence.
    #[serde(default)]
    pub strategies: Vec<Strategy>,
    /// The scheduler's preemption: when a pod of a wasp profile fits no node, this evict policy (one that
    /// proposes victims with `room-for`, like `make-room-for-pending`) is run at once, alone, for the pods that
    /// wait; its victims pass the same envelope as every eviction. Not run in the periodic runs.
    #[serde(default)]
    pub preemption: Option<Strategy>,
    /// Time between runs; a relevant change (a node tainted, cordoned or relabelled, a pod pending too long)
    /// runs it sooner.
    #[serde(default = "default_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// A pod of ours waiting this long for room triggers a run.
    #[serde(default = "default_pending_trigger", with = "humantime_serde")]
    pub pending_trigger: Duration,
    /// Plan, report and record events, but evict nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Keep each strategy's instances, with their copy of the cluster, between runs: a run then sends them only
    /// what changed (at 50k pods, ~0.4 s less per strategy that keeps pods) at the cost of that copy's memory
    /// (~30 MiB per 50k pods) all the time. Off by default: runs are minutes apart, and a cold strategy is synced
    /// from the run's what-if copy, without holding up the other loops.
    #[serde(default)]
    pub keep_strategies_warm: bool,
    /// The profile that checks where pods of schedulers wasp does not run (say `default-scheduler`) would land;
    /// without it such pods are skipped ("no wasp profile to check the fit with").
    #[serde(default)]
    pub fit_profile: Option<String>,
    #[serde(default)]
    pub protections: Protections,
    #[serde(default)]
    pub limits: EvictionLimits,
    #[serde(default)]
    pub pacing: Pacing,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Strategy {
    pub policy: String,
}

/// Which pods are never evicted. Defaults as the descheduler's `DefaultEvictor`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Protections {
    pub evict_local_storage_pods: bool,
    pub evict_daemon_set_pods: bool,
    pub evict_system_critical_pods: bool,
    /// Protect pods that use PersistentVolumeClaims.
    pub ignore_pvc_pods: bool,
    /// Evict pods no controller recreates (they are gone for good).
    pub evict_bare_pods: bool,
    /// Clear away failed pods that no controller owns (the descheduler's `evictFailedBarePods`).
    pub evict_failed_bare_pods: bool,
    /// Evict pods of `kube-system` and of the host's own namespaces (its `POD_NAMESPACE` and its Lease's): the
    /// cluster's DNS and the host itself. Off by default, whatever a policy proposes.
    pub evict_system_namespace_pods: bool,
    /// Only these namespaces (empty: all but `exclude`).
    pub namespaces: NamespaceFilter,
    /// Only pods matching this selector.
    pub label_selector: Option<LabelSelector>,
    /// Pods younger than this are left alone.
    #[serde(with = "humantime_serde")]
    pub min_pod_age: Option<Duration>,
    /// Pods at or above this priority are left alone.
    pub priority_threshold: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NamespaceFilter {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

/// Evictions allowed per run, in total and per node, namespace and workload (absent: no limit of that kind).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EvictionLimits {
    pub max_per_run: Option<u32>,
    pub max_per_node: Option<u32>,
    pub max_per_namespace: Option<u32>,
    pub max_per_workload: Option<u32>,
}

impl Default for EvictionLimits {
    fn default() -> Self {
        EvictionLimits { max_per_run: Some(10), max_per_node: None, max_per_namespace: None, max_per_workload: Some(1) }
    }
}

/// Across runs: a workload waits for its replacement, and one evicted too often keeps its replacements.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Pacing {
    /// No second eviction from a workload until its replacement is Ready, or this long has passed.
    #[serde(with = "humantime_serde")]
    pub replacement_timeout: Duration,
    /// Once a workload lost this many pods within `window`, its replacements (pods it did not have at the window's
    /// first eviction) are left alone until the window moves on; its other pods may still go, one at a time.
    pub max_evictions_per_workload: u32,
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// After a PodDisruptionBudget refused an eviction (429), the pod is not tried again for this long, doubling
    /// on each refusal up to 16 times as long.
    #[serde(with = "humantime_serde")]
    pub budget_retry: Duration,
}

impl Default for Pacing {
    fn default() -> Self {
        Pacing {
            replacement_timeout: Duration::from_secs(600),
            max_evictions_per_workload: 3,
            window: Duration::from_secs(3600),
            budget_retry: Duration::from_secs(60),
        }
    }
}

fn default_interval() -> Duration {
    Duration::from_secs(300)
}

fn default_pending_trigger() -> Duration {
    Duration::from_secs(60)
}

fn check_range(field: &str, value: Duration, low: Duration, high: Duration) -> anyhow::Result<()> {
    if value < low || value > high {
        bail!("{field}: {} is outside {}..={}", humantime::format_duration(value), humantime::format_duration(low), humantime::format_duration(high));
    }
    Ok(())
}

impl ReschedulerSection {
    /// Every evict policy the section uses: the strategies, then the preemption policy.
    pub fn evict_policies(&self) -> impl Iterator<Item = &str> {
        self.strategies.iter().chain(self.preemption.as_ref()).map(|strategy| strategy.policy.as_str())
    }

    /// These strategies with every other setting at its default.
    pub fn with_strategies(strategies: Vec<Strategy>) -> ReschedulerSection {
        ReschedulerSection {
            strategies,
            preemption: None,
            interval: default_interval(),
            pending_trigger: default_pending_trigger(),
            dry_run: false,
            keep_strategies_warm: false,
            fit_profile: None,
            protections: Protections::default(),
            limits: EvictionLimits::default(),
            pacing: Pacing::default(),
        }
    }

    /// Checks the section; `profiles` are the scheduler's profile names.
    pub fn validate(&self, profiles: &[&str]) -> anyhow::Result<()> {
        if self.strategies.is_empty() && self.preemption.is_none() {
            bail!("rescheduler.strategies: at least one strategy (or preemption) is needed (or leave the rescheduler section out)");
        }
        for (index, strategy) in self.strategies.iter().enumerate() {
            if self.strategies[..index].iter().any(|earlier| earlier.policy == strategy.policy) {
                bail!("rescheduler.strategies[{index}].policy: {} is listed twice", strategy.policy);
            }
        }
        const SECOND: Duration = Duration::from_secs(1);
        const MINUTE: Duration = Duration::from_secs(60);
        const DAY: Duration = Duration::from_secs(86_400);
        check_range("rescheduler.interval", self.interval, SECOND, DAY)?;
        check_range("rescheduler.pendingTrigger", self.pending_trigger, SECOND, DAY)?;
        let pacing = &self.pacing;
        check_range("rescheduler.pacing.replacementTimeout", pacing.replacement_timeout, Duration::ZERO, DAY)?;
        // A zero window counts no eviction against maxEvictionsPerWorkload: two strategies that undo each other's
        // moves would evict the same workload without end.
        check_range("rescheduler.pacing.window", pacing.window, MINUTE, 7 * DAY)?;
        check_range("rescheduler.pacing.budgetRetry", pacing.budget_retry, SECOND, DAY)?;
        if pacing.max_evictions_per_workload == 0 {
            bail!("rescheduler.pacing.maxEvictionsPerWorkload: 0 would forbid every eviction (leave the rescheduler out instead)");
        }
        if let Some(profile) = &self.fit_profile {
            if !profiles.contains(&profile.as_str()) {
                bail!("rescheduler.fitProfile: {profile:?} is not a scheduler profile (known: {})", profiles.join(", "));
            }
        }
        let namespaces = &self.protections.namespaces;
        if !namespaces.include.is_empty() && !namespaces.exclude.is_empty() {
            bail!("rescheduler.protections.namespaces: set include or exclude, not both");
        }
        if let Some(selector) = &self.protections.label_selector {
            crate::cluster::convert::label_selector("the rescheduler's configuration", "rescheduler.protections.labelSelector", selector)?;
        }
        let limits = &self.limits;
        for (name, limit) in [
            ("maxPerRun", limits.max_per_run),
            ("maxPerNode", limits.max_per_node),
            ("maxPerNamespace", limits.max_per_namespace),
            ("maxPerWorkload", limits.max_per_workload),
        ] {
            if limit == Some(0) {
                bail!("rescheduler.limits.{name}: 0 would forbid every eviction (leave it out for no limit, or use dryRun)");
            }
        }
        Ok(())
    }
}
