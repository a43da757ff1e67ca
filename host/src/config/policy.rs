//! How one policy runs: its settings, sandbox limits (a deadline per operation, a memory cap), failure mode and
//! the keys that must have signed it.

use crate::policy::FailureMode;
use crate::runtime::Limits;
use anyhow::bail;
use serde::Deserialize;
use std::time::Duration;

/// A call deadline must leave room for real work and still bound a stall.
const DEADLINE_RANGE: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(60));
/// Per instance; several instances of a policy run at once, so this multiplies.
const MAX_MEMORY_MIB: usize = 4096;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyConfig {
    /// Settings object passed to the policy's `configure`.
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    /// Deadline of every call (default 500 ms), unless `deadlines` names the operation.
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
    /// Deadlines per operation: `propose` over a whole cluster is not a per-pod `filter`.
    #[serde(default)]
    pub deadlines: OperationDeadlines,
    #[serde(default)]
    pub memory_mib: Option<usize>,
    /// What callers see when the policy fails. It decides for filters (fail-closed rejects every node,
    /// fail-open passes them); scores, evictions and scaling take no action on failure in either mode.
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// The keys that must have signed this policy, instead of the general `verification`.
    #[serde(default)]
    pub verification: Option<super::Verification>,
    /// Where the component comes from instead of the policy directory: `oci://REGISTRY/REPOSITORY@sha256:HEX`
    /// (or `:TAG`, resolved once and reported), pulled into the store under the cache directory.
    #[serde(default)]
    pub source: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationDeadlines {
    #[serde(default, with = "humantime_serde")]
    pub filter: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub score: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub evict: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub scale: Option<Duration>,
}

fn check_deadline(field: &str, deadline: Option<Duration>) -> anyhow::Result<()> {
    let (low, high) = DEADLINE_RANGE;
    match deadline {
        Some(value) if value < low || value > high => {
            bail!("{field}: {} is outside {}..={}", humantime::format_duration(value), humantime::format_duration(low), humantime::format_duration(high))
        }
        _ => Ok(()),
    }
}

impl PolicyConfig {
    pub fn validate(&self, field: &str) -> anyhow::Result<()> {
        if let Some(mib) = self.memory_mib {
            if !(1..=MAX_MEMORY_MIB).contains(&mib) {
                bail!("{field}.memoryMib: {mib} is outside 1..={MAX_MEMORY_MIB}");
            }
        }
        check_deadline(&format!("{field}.deadline"), self.deadline)?;
        if let Some(verification) = &self.verification {
            verification.validate(&format!("{field}.verification"))?;
        }
        if let Some(source) = &self.source {
            if !source.starts_with(crate::oci::SCHEME) {
                bail!("{field}.source: {source:?} is not an OCI reference (oci://REGISTRY/REPOSITORY@sha256:HEX)");
            }
            crate::oci::parse_reference(source).map_err(|error| anyhow::anyhow!("{field}.source: {error:#}"))?;
        }
        let per_operation = &self.deadlines;
        for (name, deadline) in
            [("filter", per_operation.filter), ("score", per_operation.score), ("evict", per_operation.evict), ("scale", per_operation.scale)]
        {
            check_deadline(&format!("{field}.deadlines.{name}"), deadline)?;
        }
        Ok(())
    }

    pub fn limits(&self) -> Limits {
        let defaults = Limits::default();
        let deadline = self.deadline.unwrap_or(defaults.deadline);
        let per_operation = &self.deadlines;
        Limits {
            deadline,
            filter_deadline: per_operation.filter.unwrap_or(deadline),
            score_deadline: per_operation.score.unwrap_or(deadline),
            // Unless set, whole-cluster operations get the longer of their default and the general deadline.
            evict_deadline: per_operation.evict.unwrap_or(defaults.evict_deadline.max(deadline)),
            scale_deadline: per_operation.scale.unwrap_or(defaults.scale_deadline.max(deadline)),
            memory_bytes: self.memory_mib.map_or(defaults.memory_bytes, |mib| mib << 20),
        }
    }

    pub fn settings_json(&self) -> String {
        self.settings.as_ref().map(|settings| settings.to_string()).unwrap_or_default()
    }
}
