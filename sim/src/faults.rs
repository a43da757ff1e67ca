//! Fault injection: error responses and latency per verb and resource, and watch streams cut short.

use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

const VERBS: [&str; 8] = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FaultRule {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; empty: every verb.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// `pods`, `pods/binding`, `deployments.apps`, ...; empty: every resource.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Share of matching requests that fail, 0 to 1.
    #[serde(default)]
    pub error_rate: f64,
    /// Status code of a failure: 409 (a write conflict), 429, 500, 503 or 504.
    #[serde(default = "default_status")]
    pub status: u16,
    /// Added to every matching request.
    #[serde(default, with = "humantime_serde")]
    pub latency: Option<Duration>,
}

fn default_status() -> u16 {
    500
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FaultSpec {
    #[serde(default)]
    pub rules: Vec<FaultRule>,
    /// Every watch stream ends after this long (clients must resume from their last resource version).
    #[serde(default, with = "humantime_serde")]
    pub drop_watches_after: Option<Duration>,
    /// Seed of the error draws: the same scenario fails the same requests, run after run.
    #[serde(default)]
    pub seed: u64,
}

impl FaultSpec {
    pub fn validate(&self) -> Result<(), String> {
        for (index, rule) in self.rules.iter().enumerate() {
            if let Some(verb) = rule.verbs.iter().find(|verb| !VERBS.contains(&verb.as_str())) {
                return Err(format!("faults.rules[{index}].verbs: {verb:?} is not one of {}", VERBS.join(", ")));
            }
            if !(0.0..=1.0).contains(&rule.error_rate) {
                return Err(format!("faults.rules[{index}].errorRate: {} is outside 0..1", rule.error_rate));
            }
            if ![409, 429, 500, 503, 504].contains(&rule.status) {
                return Err(format!("faults.rules[{index}].status: {} is not one of 409, 429, 500, 503, 504", rule.status));
            }
        }
        Ok(())
    }
}

/// What to do to one request.
pub struct Fault {
    pub delay: Duration,
    pub status: Option<u16>,
}

/// Requests a rule matched and errors it injected, counted where the requests arrive: tests count what a
/// client sent from these, not from what the store accepted.
#[derive(Debug, Default)]
pub struct RuleCounts {
    pub matched: AtomicU64,
    pub injected: AtomicU64,
}

pub struct FaultPlan {
    /// The rules and their counts, replaced together.
    spec: RwLock<(FaultSpec, Vec<RuleCounts>)>,
    draws: Mutex<fastrand::Rng>,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan::new(FaultSpec::default())
    }
}

impl FaultPlan {
    pub fn new(spec: FaultSpec) -> Self {
        let counts = spec.rules.iter().map(|_| RuleCounts::default()).collect();
        FaultPlan { draws: Mutex::new(fastrand::Rng::with_seed(spec.seed)), spec: RwLock::new((spec, counts)) }
    }

    /// Replaces the faults from now on (a test cutting a watch off for a while, say); counts start again.
    pub fn replace(&self, spec: FaultSpec) {
        let counts = spec.rules.iter().map(|_| RuleCounts::default()).collect();
        *self.spec.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = (spec, counts);
    }

    /// (requests matched, errors injected) by the rule at `index` so far.
    pub fn counts(&self, index: usize) -> (u64, u64) {
        let spec = self.spec.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        spec.1.get(index).map_or((0, 0), |counts| (counts.matched.load(Ordering::Relaxed), counts.injected.load(Ordering::Relaxed)))
    }

    pub fn decide(&self, verb: &str, resource: &str) -> Option<Fault> {
        let guard = self.spec.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (spec, counts) = &*guard;
        let mut fault = Fault { delay: Duration::ZERO, status: None };
        let mut matched = false;
        for (index, rule) in spec.rules.iter().enumerate() {
            let verb_matches = rule.verbs.is_empty() || rule.verbs.iter().any(|candidate| candidate == verb);
            let resource_matches = rule.resources.is_empty() || rule.resources.iter().any(|candidate| candidate == resource);
            if !(verb_matches && resource_matches) {
                continue;
            }
            matched = true;
            let counts = &counts[index];
            counts.matched.fetch_add(1, Ordering::Relaxed);
            fault.delay += rule.latency.unwrap_or_default();
            let draw = || self.draws.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).f64();
            if fault.status.is_none() && rule.error_rate > 0.0 && draw() < rule.error_rate {
                fault.status = Some(rule.status);
                counts.injected.fetch_add(1, Ordering::Relaxed);
            }
        }
        matched.then_some(fault)
    }

    pub fn watch_lifetime(&self) -> Option<Duration> {
        self.spec.read().unwrap_or_else(|poisoned| poisoned.into_inner()).0.drop_watches_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_by_verb_and_resource() {
        let plan = FaultPlan::new(FaultSpec {
            rules: vec![FaultRule { verbs: vec!["create".into()], resources: vec!["pods/binding".into()], error_rate: 1.0, status: 503, latency: None }],
            ..Default::default()
        });
        assert_eq!(plan.decide("create", "pods/binding").unwrap().status, Some(503));
        assert!(plan.decide("create", "pods").is_none());
        assert!(plan.decide("get", "pods/binding").is_none());
        assert_eq!(plan.counts(0), (1, 1));
    }

    #[test]
    fn a_seed_fails_the_same_requests_every_run() {
        let spec = FaultSpec { rules: vec![FaultRule { error_rate: 0.5, status: 500, ..Default::default() }], seed: 7, ..Default::default() };
        let run = || {
            let plan = FaultPlan::new(spec.clone());
            (0..64).map(|_| plan.decide("get", "pods").unwrap().status.is_some()).collect::<Vec<bool>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn validation_names_the_field() {
        let spec = FaultSpec { rules: vec![FaultRule { error_rate: 2.0, status: 500, ..Default::default() }], ..Default::default() };
        assert_eq!(spec.validate().unwrap_err(), "faults.rules[0].errorRate: 2 is outside 0..1");
        let spec = FaultSpec { rules: vec![FaultRule { verbs: vec!["creat".into()], ..Default::default() }], ..Default::default() };
        assert!(spec.validate().unwrap_err().starts_with("faults.rules[0].verbs: \"creat\" is not one of get, list"));
    }
}
