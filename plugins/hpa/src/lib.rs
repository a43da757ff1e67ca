//! `hpa`: the HorizontalPodAutoscaler's decision. Each metric proposes replicas by the HPA's replica calculator
//! ([`wasp_sdk::autoscaling`]: tolerance, missing metrics, unready pods, the direction-flip guard) and the
//! largest proposal wins, or the smallest if configured. A metric that could not be read blocks a scale-down, as
//! in the HPA; if none could be read the call fails and the host keeps the replicas (or, after the Autoscaler's
//! `fallback.failureThreshold` such runs, applies its fallback). Stabilization, rate limits and min/max are the
//! host's job.

use serde::{Deserialize, Serialize};
use wasp_sdk::autoscaling::{check_tolerance, Proposals, Tolerance};
use wasp_sdk::types::{ScaleDecision, ScaleRequest};
use wasp_sdk::{NodeFacts, Policy, Scale};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    Max,
    Min,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Relative change below which nothing happens (0.1 = 10%).
    pub tolerance: Tolerance,
    /// How proposals of several metrics combine.
    pub combine: Combine,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { tolerance: Tolerance::default(), combine: Combine::Max }
    }
}

pub struct Hpa {
    settings: Settings,
}

impl Policy for Hpa {
    type Settings = Settings;
    const NAME: &'static str = "hpa";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "tolerance: relative change ignored, 0 to 1 (default 0.1), or {scaleUp, scaleDown} for each side\n\
        combine: max (default, the HPA's rule) or min across metrics";

    fn new(settings: Settings) -> Result<Self, String> {
        check_tolerance(settings.tolerance)?;
        Ok(Hpa { settings })
    }
}

impl Scale for Hpa {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        if request.metrics.is_empty() {
            return Err(format!("{}: no metrics to scale on", request.workload));
        }
        let current = request.current_replicas;
        let Proposals { proposals, details, failures } = Proposals::of(request, self.settings.tolerance);
        let replicas = proposals.iter().map(|proposal| proposal.replicas);
        let chosen = match self.settings.combine {
            Combine::Max => replicas.max(),
            Combine::Min => replicas.min(),
        };
        let Some(chosen) = chosen else { return Err(failures.join("; ")) };
        let mut reason = details.join("; ");
        let desired = if !failures.is_empty() && chosen < current {
            reason = format!("{reason}; not scaling down while {}", failures.join("; "));
            current
        } else {
            chosen
        };
        Ok(ScaleDecision::horizontal(desired, reason, proposals))
    }
}

wasp_sdk::export_policy!(Hpa);

#[cfg(test)]
mod upstream;

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{scale_request, MetricBuilder};
    use wasp_sdk::types::{MetricProposal, MetricTarget};

    fn hpa() -> Hpa {
        build::<Hpa>("").unwrap()
    }

    /// CPU held to 100% of requests; each value is the pod's percent.
    fn cpu(values: &[f64]) -> MetricBuilder {
        values.iter().fold(MetricBuilder::utilization("cpu", 100.0), |builder, value| builder.ready(*value))
    }

    fn desired(current: u32, metrics: Vec<wasp_sdk::types::Metric>) -> u32 {
        hpa().recommend(&scale_request(current, 1, 100, metrics)).unwrap().desired_replicas
    }

    // Cases from the Kubernetes documentation's algorithm section and the replica calculator's tests.
    #[test]
    fn ratio_times_ready_pods_rounded_up() {
        // "if the current metric value is 200m, and the desired value is 100m, the number of replicas will be doubled"
        assert_eq!(desired(3, vec![cpu(&[200.0, 200.0, 200.0]).build()]), 6);
        // "if the current value is instead 50m, you'll halve the number of replicas"
        assert_eq!(desired(4, vec![cpu(&[50.0, 50.0, 50.0, 50.0]).build()]), 2);
        let decision = hpa().recommend(&scale_request(3, 1, 10, vec![cpu(&[150.0, 150.0, 150.0]).build()])).unwrap();
        assert_eq!(decision.desired_replicas, 5, "ceil(1.5 * 3)");
        assert!(decision.reason.contains("cpu at 150% of requests (target 100%) wants 5"), "{}", decision.reason);
        assert_eq!(decision.proposals, vec![MetricProposal { metric: "cpu".into(), replicas: 5 }]);
    }

    #[test]
    fn no_change_within_tolerance() {
        // "if the ratio is sufficiently close to 1.0 (within a globally-configurable tolerance, 0.1 by default)"
        assert_eq!(desired(4, vec![cpu(&[108.0, 108.0, 108.0, 108.0]).build()]), 4);
        assert_eq!(desired(4, vec![cpu(&[111.0, 111.0, 111.0, 111.0]).build()]), 5);
        let strict = build::<Hpa>(r#"{"tolerance": 0.05}"#).unwrap();
        let request = scale_request(4, 1, 10, vec![cpu(&[108.0, 108.0, 108.0, 108.0]).build()]);
        assert_eq!(strict.recommend(&request).unwrap().desired_replicas, 5);
    }

    #[test]
    fn missing_metrics_dampen_scale_down_and_abandon_flips() {
        // Two ready pods at 50%, two missing: scale-down assumes the missing ones at 100% -> 75% -> 3.
        assert_eq!(desired(4, vec![cpu(&[50.0, 50.0]).missing().missing().build()]), 3);
        // One pod at 120%, three missing: scale-up assumes 0 -> 30% flips direction -> no change.
        assert_eq!(desired(4, vec![cpu(&[120.0]).missing().missing().missing().build()]), 4);
    }

    #[test]
    fn unready_pods_count_zero_when_scaling_up_and_are_ignored_when_scaling_down() {
        // Two ready at 200%, two unready: (200 + 200 + 0 + 0) / 4 = 100% -> within tolerance -> keep 4.
        assert_eq!(desired(4, vec![cpu(&[200.0, 200.0]).unready(500.0).unready(500.0).build()]), 4);
        assert_eq!(desired(3, vec![cpu(&[300.0, 300.0]).unready(0.0).build()]), 6, "(300 + 300 + 0) / 3 = 200% of 3");
        assert_eq!(desired(3, vec![cpu(&[20.0, 20.0]).unready(900.0).build()]), 1, "ceil(0.2 * 2 ready)");
    }

    #[test]
    fn several_metrics_take_the_largest_and_a_missing_one_blocks_only_scale_down() {
        let memory = MetricBuilder::utilization("memory", 100.0).ready(50.0).ready(50.0).build();
        let busy_cpu = cpu(&[300.0, 300.0]).build();
        let request = scale_request(2, 1, 100, vec![busy_cpu.clone(), memory.clone()]);
        assert_eq!(hpa().recommend(&request).unwrap().desired_replicas, 6, "max(6, 1)");
        let min = build::<Hpa>(r#"{"combine": "min"}"#).unwrap();
        assert_eq!(min.recommend(&request).unwrap().desired_replicas, 1);
        let unreadable = MetricBuilder::average("qps", 10.0).error("custom.metrics.k8s.io: 503").build();
        assert_eq!(desired(2, vec![busy_cpu, unreadable.clone()]), 6, "a scale-up goes on");
        let decision = hpa().recommend(&scale_request(2, 1, 100, vec![memory, unreadable.clone()])).unwrap();
        assert_eq!(decision.desired_replicas, 2, "{}", decision.reason);
        assert!(decision.reason.contains("not scaling down while metric qps: custom.metrics.k8s.io: 503"), "{}", decision.reason);
        let error = hpa().recommend(&scale_request(2, 1, 100, vec![unreadable])).unwrap_err();
        assert_eq!(error, "metric qps: custom.metrics.k8s.io: 503");
    }

    #[test]
    fn external_metrics_use_the_object_rules() {
        let queue = MetricBuilder::external("queue_depth", MetricTarget::AverageValue(20.0), 130.0).ready_pods(3).build();
        assert_eq!(desired(3, vec![queue]), 7, "ceil(130 / 20)");
    }

    #[test]
    fn invalid_input_is_an_error() {
        assert!(build::<Hpa>(r#"{"tolerance": 1.5}"#).err().unwrap().contains("tolerance"));
        let no_values = MetricBuilder::average("qps", 10.0).missing().build();
        let error = hpa().recommend(&scale_request(2, 1, 5, vec![no_values])).unwrap_err();
        assert!(error.contains("did not receive metrics for targeted pods"), "{error}");
        assert!(hpa().recommend(&scale_request(2, 1, 5, vec![])).unwrap_err().contains("no metrics"));
    }
}
