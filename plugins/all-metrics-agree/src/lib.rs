//! `all-metrics-agree`: change the replicas only in a direction no metric opposes. Up when some metric wants
//! more and none wants fewer (the largest proposal), down only when every metric wants fewer (the smallest cut,
//! so no metric is pushed past its target), and hold when metrics disagree: where the HPA's `max` lets CPU
//! saying up override memory saying down, this holds. With `priority`, such a conflict is settled by the first
//! listed metric that wants a change. A metric that cannot be read cannot agree to a scale-down.

use serde::{Deserialize, Serialize};
use wasp_sdk::autoscaling::{check_tolerance, Proposals, Tolerance};
use wasp_sdk::types::{ScaleDecision, ScaleRequest};
use wasp_sdk::{NodeFacts, Policy, Scale};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Relative change below which a metric wants no change (0.1 = 10%).
    pub tolerance: Tolerance,
    /// Metric names, most important first: the first one that wants a change settles a conflict.
    pub priority: Vec<String>,
}

pub struct AllMetricsAgree {
    settings: Settings,
}

impl Policy for AllMetricsAgree {
    type Settings = Settings;
    const NAME: &'static str = "all-metrics-agree";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "tolerance: relative change ignored, 0 to 1 (default 0.1), or {scaleUp, scaleDown} for each side\n\
        priority: metric names, most important first; settles up-versus-down conflicts (default: a conflict holds)";

    fn new(settings: Settings) -> Result<Self, String> {
        check_tolerance(settings.tolerance)?;
        if let Some(empty) = settings.priority.iter().position(String::is_empty) {
            return Err(format!("priority[{empty}]: a metric name must not be empty"));
        }
        Ok(AllMetricsAgree { settings })
    }
}

impl Scale for AllMetricsAgree {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        if request.metrics.is_empty() {
            return Err(format!("{}: no metrics to scale on", request.workload));
        }
        let current = request.current_replicas;
        let Proposals { proposals, details, failures } = Proposals::of(request, self.settings.tolerance);
        if proposals.is_empty() {
            return Err(failures.join("; "));
        }
        let up = proposals.iter().filter(|proposal| proposal.replicas > current).map(|proposal| proposal.replicas).max();
        let any_down = proposals.iter().any(|proposal| proposal.replicas < current);
        let all_down = failures.is_empty() && proposals.iter().all(|proposal| proposal.replicas < current);
        let ranked = self.settings.priority.iter().find_map(|name| proposals.iter().find(|proposal| &proposal.metric == name && proposal.replicas != current));
        let (desired, verdict) = match (up, any_down, ranked) {
            (Some(_), true, Some(first)) => (first.replicas, format!("metrics disagree; {} has priority", first.metric)),
            (Some(_), true, None) => (current, "holding: metrics disagree on the direction".to_string()),
            (Some(up), false, _) => (up, "a metric wants more replicas and none fewer".to_string()),
            (None, _, _) if all_down => {
                let least_cut = proposals.iter().map(|proposal| proposal.replicas).max().unwrap_or(current);
                (least_cut, "every metric wants fewer replicas".to_string())
            }
            (None, true, _) if !failures.is_empty() => (current, format!("holding: cannot agree to scale down while {}", failures.join("; "))),
            (None, true, _) => (current, "holding: not every metric wants fewer replicas".to_string()),
            (None, false, _) => (current, "every metric is on target".to_string()),
        };
        Ok(ScaleDecision::horizontal(desired, format!("{}; {verdict}", details.join("; ")), proposals))
    }
}

wasp_sdk::export_policy!(AllMetricsAgree);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{scale_request, MetricBuilder};
    use wasp_sdk::types::Metric;

    fn at(name: &str, percent: f64, pods: usize) -> Metric {
        (0..pods).fold(MetricBuilder::utilization(name, 100.0), |builder, _| builder.ready(percent)).build()
    }

    fn decide(policy: &AllMetricsAgree, current: u32, metrics: Vec<Metric>) -> ScaleDecision {
        policy.recommend(&scale_request(current, 1, 20, metrics)).unwrap()
    }

    #[test]
    fn up_when_a_metric_says_up_and_none_says_down() {
        let policy = build::<AllMetricsAgree>("").unwrap();
        let decision = decide(&policy, 4, vec![at("cpu", 150.0, 4), at("memory", 100.0, 4)]);
        assert_eq!(decision.desired_replicas, 6);
        assert!(decision.reason.ends_with("a metric wants more replicas and none fewer"), "{}", decision.reason);
    }

    #[test]
    fn down_only_when_every_metric_says_down_and_by_the_smallest_cut() {
        let policy = build::<AllMetricsAgree>("").unwrap();
        assert_eq!(decide(&policy, 4, vec![at("cpu", 25.0, 4), at("memory", 50.0, 4)]).desired_replicas, 2, "max(1, 2)");
        let held = decide(&policy, 4, vec![at("cpu", 25.0, 4), at("memory", 100.0, 4)]);
        assert_eq!(held.desired_replicas, 4);
        assert!(held.reason.ends_with("holding: not every metric wants fewer replicas"), "{}", held.reason);
    }

    #[test]
    fn a_conflict_holds_unless_a_priority_settles_it() {
        let conflict = || vec![at("cpu", 150.0, 4), at("memory", 25.0, 4)];
        let plain = build::<AllMetricsAgree>("").unwrap();
        let held = decide(&plain, 4, conflict());
        assert_eq!(held.desired_replicas, 4, "the HPA's max would take 6");
        assert!(held.reason.ends_with("holding: metrics disagree on the direction"), "{}", held.reason);
        let memory_first = build::<AllMetricsAgree>(r#"{"priority": ["memory", "cpu"]}"#).unwrap();
        let decision = decide(&memory_first, 4, conflict());
        assert_eq!(decision.desired_replicas, 1);
        assert!(decision.reason.ends_with("metrics disagree; memory has priority"), "{}", decision.reason);
        let cpu_first = build::<AllMetricsAgree>(r#"{"priority": ["cpu"]}"#).unwrap();
        assert_eq!(decide(&cpu_first, 4, conflict()).desired_replicas, 6);
    }

    #[test]
    fn an_unreadable_metric_cannot_agree_to_a_scale_down() {
        let policy = build::<AllMetricsAgree>("").unwrap();
        let broken = MetricBuilder::average("qps", 10.0).error("no data").build();
        let decision = decide(&policy, 4, vec![at("cpu", 25.0, 4), broken.clone()]);
        assert_eq!(decision.desired_replicas, 4);
        assert!(decision.reason.contains("cannot agree to scale down while metric qps: no data"), "{}", decision.reason);
        assert_eq!(decide(&policy, 4, vec![at("cpu", 150.0, 4), broken.clone()]).desired_replicas, 6);
        assert!(policy.recommend(&scale_request(4, 1, 20, vec![broken])).is_err());
    }

    #[test]
    fn settings_are_checked() {
        assert!(build::<AllMetricsAgree>(r#"{"priority": [""]}"#).err().unwrap().contains("priority[0]"));
        assert!(build::<AllMetricsAgree>(r#"{"tolerance": -1}"#).err().unwrap().contains("tolerance"));
    }
}
