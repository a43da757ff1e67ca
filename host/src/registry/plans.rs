//! Plans: what each loop runs, resolved from the configuration against the loaded policies, each policy checked
//! to implement the kind its user needs. A loop reads the plan of the generation it took, once per decision.

use crate::config::{HostConfig, PolicyUser};
use crate::contract::types::PolicyKind;
use crate::policy::{LoadedPolicy, SchedulingPolicy};
use anyhow::{bail, Context};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A profile's policies, resolved.
pub struct ProfilePolicies {
    pub scheduler_name: String,
    pub filters: Vec<Arc<dyn SchedulingPolicy>>,
    pub scores: Vec<(Arc<dyn SchedulingPolicy>, u32)>,
}

/// Every loop's policies in one generation.
#[derive(Default)]
pub struct Plans {
    /// Scheduler profiles by scheduler name.
    pub scheduling: HashMap<String, Arc<ProfilePolicies>>,
    /// The rescheduler's strategies, in configuration order.
    pub eviction: Vec<Arc<LoadedPolicy>>,
    /// The evict policy the scheduler's preemption runs (`rescheduler.preemption`).
    pub preemption: Option<Arc<LoadedPolicy>>,
    /// Scale policies by name, for the autoscaler's targets.
    pub scaling: BTreeMap<String, Arc<LoadedPolicy>>,
}

impl Plans {
    /// Every scheduling policy of every profile, once each.
    pub fn scheduling_policies(&self) -> Vec<Arc<dyn SchedulingPolicy>> {
        let mut seen = std::collections::HashSet::new();
        let profiles = self.scheduling.values();
        let all = profiles.flat_map(|profile| profile.filters.iter().chain(profile.scores.iter().map(|(policy, _)| policy)));
        all.filter(|policy| seen.insert(policy.name().to_string())).cloned().collect()
    }
}

/// Why `policy` cannot serve `users` (the kinds it lacks), if it cannot.
pub fn kinds_missing(policy: &LoadedPolicy, users: &[PolicyUser]) -> Option<String> {
    let missing: Vec<String> = users.iter().filter(|user| !policy.implements(user.kind())).map(|user| format!("{user} needs {}", user.kind())).collect();
    if missing.is_empty() {
        return None;
    }
    let kinds: Vec<&str> = policy.descriptor.kinds.iter().map(|kind| kind.as_str()).collect();
    Some(format!("it implements [{}], but {}", kinds.join(", "), missing.join("; ")))
}

/// Resolves every loop's plan; fails naming the field when a policy is missing or lacks the kind it is used as.
pub fn resolve(config: &HostConfig, policies: &BTreeMap<String, Arc<LoadedPolicy>>) -> anyhow::Result<Plans> {
    let lookup = |name: &str, kind: PolicyKind, field: &str| -> anyhow::Result<Arc<LoadedPolicy>> {
        let policy = policies.get(name).with_context(|| format!("{field}: policy {name} is not loaded"))?;
        if !policy.implements(kind) {
            bail!("{field}: policy {name} does not implement {kind}");
        }
        Ok(policy.clone())
    };
    let mut plans = Plans::default();
    for (index, profile) in config.scheduler.profiles.iter().enumerate() {
        let field = |part: &str, position: usize| format!("scheduler.profiles[{index}].{part}[{position}]");
        let filters = profile
            .filters
            .iter()
            .enumerate()
            .map(|(position, name)| Ok(lookup(name, PolicyKind::Filter, &field("filters", position))? as Arc<dyn SchedulingPolicy>))
            .collect::<anyhow::Result<_>>()?;
        let scores = profile
            .scores
            .iter()
            .enumerate()
            .map(|(position, score)| Ok((lookup(&score.policy, PolicyKind::Score, &field("scores", position))? as Arc<dyn SchedulingPolicy>, score.weight)))
            .collect::<anyhow::Result<_>>()?;
        let resolved = ProfilePolicies { scheduler_name: profile.scheduler_name.clone(), filters, scores };
        plans.scheduling.insert(profile.scheduler_name.clone(), Arc::new(resolved));
    }
    for (index, strategy) in config.rescheduler.iter().flat_map(|section| section.strategies.iter()).enumerate() {
        plans.eviction.push(lookup(&strategy.policy, PolicyKind::Evict, &format!("rescheduler.strategies[{index}].policy"))?);
    }
    if let Some(preemption) = config.rescheduler.as_ref().and_then(|section| section.preemption.as_ref()) {
        plans.preemption = Some(lookup(&preemption.policy, PolicyKind::Evict, "rescheduler.preemption.policy")?);
    }
    for (index, name) in config.autoscaler.iter().flat_map(|section| section.policies.iter()).enumerate() {
        plans.scaling.insert(name.clone(), lookup(name, PolicyKind::Scale, &format!("autoscaler.policies[{index}]"))?);
    }
    Ok(plans)
}
