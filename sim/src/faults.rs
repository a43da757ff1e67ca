//! Fault injection: error responses and latency per verb and resource, and watch streams cut short.

use serde::Deserialize;
use std::sync::RwLock;
use std::time::Duration;

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
    /// Status code of a failure: 429, 500, 503 or 504.
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
}

impl FaultSpec {
    pub fn validate(&self) -> Result<(), String> {
        for (index, rule) in self.rules.iter().enumerate() {
            if !(0.0..=1.0).contains(&rule.error_rate) {
                return Err(format!("faults.rules[{index}].errorRate: {} is outside 0..1", rule.error_rate));
            }
            if ![429, 500, 503, 504].contains(&rule.status) {
                return Err(format!("faults.rules[{index}].status: {} is not one of 429, 500, 503, 504", rule.status));
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

#[derive(Default)]
pub struct FaultPlan {
    spec: RwLock<FaultSpec>,
}

impl FaultPlan {
    pub fn new(spec: FaultSpec) -> Self {
        FaultPlan { spec: RwLock::new(spec) }
    }

    pub fn decide(&self, verb: &str, resource: &str) -> Option<Fault> {
        let spec = self.spec.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut fault = Fault { delay: Duration::ZERO, status: None };
        let mut matched = false;
        for rule in &spec.rules {
            let verb_matches = rule.verbs.is_empty() || rule.verbs.iter().any(|candidate| candidate == verb);
            let resource_matches = rule.resources.is_empty() || rule.resources.iter().any(|candidate| candidate == resource);
            if !(verb_matches && resource_matches) {
                continue;
            }
            matched = true;
            fault.delay += rule.latency.unwrap_or_default();
            if fault.status.is_none() && rule.error_rate > 0.0 && fastrand::f64() < rule.error_rate {
                fault.status = Some(rule.status);
            }
        }
        matched.then_some(fault)
    }

    pub fn watch_lifetime(&self) -> Option<Duration> {
        self.spec.read().unwrap_or_else(|poisoned| poisoned.into_inner()).drop_watches_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_by_verb_and_resource() {
        let plan = FaultPlan::new(FaultSpec {
            rules: vec![FaultRule { verbs: vec!["create".into()], resources: vec!["pods/binding".into()], error_rate: 1.0, status: 503, latency: None }],
            drop_watches_after: None,
        });
        assert_eq!(plan.decide("create", "pods/binding").unwrap().status, Some(503));
        assert!(plan.decide("create", "pods").is_none());
        assert!(plan.decide("get", "pods/binding").is_none());
    }

    #[test]
    fn validation_names_the_field() {
        let spec = FaultSpec { rules: vec![FaultRule { error_rate: 2.0, status: 500, ..Default::default() }], drop_watches_after: None };
        assert_eq!(spec.validate().unwrap_err(), "faults.rules[0].errorRate: 2 is outside 0..1");
    }
}
