//! Scheduler configuration: profiles (one per `schedulerName`), each an ordered chain of filter policies and
//! weighted score policies, plus how each policy runs. Validated as a whole, with errors that name the field.

use crate::policy::FailureMode;
use crate::runtime::Limits;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Works out of the box with the default policy set in `plugins/out`.
pub const DEFAULT_CONFIG: &str = include_str!("default-config.yaml");

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchedulerConfig {
    /// Directory with the policy components (`<name>.wasm`).
    pub policy_dir: PathBuf,
    pub profiles: Vec<Profile>,
    /// Per-policy settings and limits; policies not listed run with their defaults.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Share of nodes to find feasible before scoring, 0 for kube-scheduler's adaptive rule.
    #[serde(default)]
    pub percentage_of_nodes_to_score: u32,
    /// Leader election for `wasp run` (on by default there; `wasp simulate` runs a single scheduler).
    #[serde(default)]
    pub leader_election: super::leader::LeaderElection,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Profile {
    pub scheduler_name: String,
    #[serde(default)]
    pub filters: Vec<String>,
    #[serde(default)]
    pub scores: Vec<WeightedPolicy>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WeightedPolicy {
    pub policy: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyConfig {
    /// Settings object passed to the policy's `configure`.
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
    #[serde(default)]
    pub memory_mib: Option<usize>,
    #[serde(default)]
    pub failure_mode: FailureMode,
}

impl PolicyConfig {
    pub fn limits(&self) -> Limits {
        let defaults = Limits::default();
        Limits {
            deadline: self.deadline.unwrap_or(defaults.deadline),
            memory_bytes: self.memory_mib.map_or(defaults.memory_bytes, |mib| mib << 20),
        }
    }

    pub fn settings_json(&self) -> String {
        self.settings.as_ref().map(|settings| settings.to_string()).unwrap_or_default()
    }
}

impl SchedulerConfig {
    pub fn parse(text: &str) -> anyhow::Result<SchedulerConfig> {
        let config: SchedulerConfig = serde_yaml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    pub fn load(path: &Path) -> anyhow::Result<SchedulerConfig> {
        use anyhow::Context;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("scheduler config {}", path.display()))
    }

    /// Every policy a profile uses, once.
    pub fn policy_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for profile in &self.profiles {
            for name in profile.filters.iter().chain(profile.scores.iter().map(|score| &score.policy)) {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
        names
    }

    fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self.profiles.is_empty() {
            bail!("profiles: at least one profile is needed");
        }
        self.leader_election.validate()?;
        if self.percentage_of_nodes_to_score > 100 {
            bail!("percentageOfNodesToScore: {} is more than 100", self.percentage_of_nodes_to_score);
        }
        for (index, profile) in self.profiles.iter().enumerate() {
            let field = format!("profiles[{index}]");
            if profile.scheduler_name.is_empty() {
                bail!("{field}.schedulerName: must not be empty");
            }
            if self.profiles[..index].iter().any(|earlier| earlier.scheduler_name == profile.scheduler_name) {
                bail!("{field}.schedulerName: {:?} is used by two profiles", profile.scheduler_name);
            }
            for (position, score) in profile.scores.iter().enumerate() {
                if !(1..=100).contains(&score.weight) {
                    bail!("{field}.scores[{position}].weight: {} is outside 1..100", score.weight);
                }
            }
        }
        let used = self.policy_names();
        if let Some(unused) = self.policies.keys().find(|name| !used.contains(name)) {
            bail!("policies.{unused}: no profile uses this policy");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        let config = SchedulerConfig::parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(config.profiles[0].scheduler_name, "wasp");
        assert!(config.policy_names().contains(&"resources-fit".to_string()));
    }

    #[test]
    fn errors_name_the_field() {
        let error = SchedulerConfig::parse("policyDir: x\nprofiles: [{schedulerName: a, scores: [{policy: p, weight: 0}]}]").unwrap_err();
        assert_eq!(error.to_string(), "profiles[0].scores[0].weight: 0 is outside 1..100");
        let error = SchedulerConfig::parse("policyDir: x\nprofiles: [{schedulerName: a}, {schedulerName: a}]").unwrap_err();
        assert!(error.to_string().contains("profiles[1].schedulerName: \"a\" is used by two profiles"));
        let error = SchedulerConfig::parse("policyDir: x\nprofiles: [{schedulerName: a, filtres: []}]").unwrap_err();
        assert!(error.to_string().contains("unknown field `filtres`"), "{error}");
        let error = SchedulerConfig::parse("policyDir: x\nprofiles: [{schedulerName: a}]\npolicies: {ghost: {}}").unwrap_err();
        assert_eq!(error.to_string(), "policies.ghost: no profile uses this policy");
    }
}
