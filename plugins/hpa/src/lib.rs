//! `hpa`: the Horizontal Pod Autoscaler's replica calculation, per metric `desired = ceil(ratio * pods)` with
//! `ratio = average / target`, no change within the tolerance, missing metrics assumed at 100% of target when
//! scaling down and 0 when scaling up, unready pods counted as 0 when scaling up, and a change abandoned when those
//! assumptions flip its direction. Metrics are combined with `max` (the HPA's rule) or, if configured, `min`.
//! Stabilization windows and rate policies over time are the autoscaler's job.

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{Metric, ScaleDecision, ScaleRequest};
use wasp_sdk::{Policy, Scale};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    Max,
    Min,
}

impl Combine {
    fn name(self) -> &'static str {
        match self {
            Combine::Max => "max",
            Combine::Min => "min",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Relative change below which nothing happens (0.1 = 10%).
    pub tolerance: f64,
    /// How proposals of several metrics combine.
    pub combine: Combine,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { tolerance: 0.1, combine: Combine::Max }
    }
}

pub struct Hpa {
    settings: Settings,
}

impl Policy for Hpa {
    type Settings = Settings;
    const NAME: &'static str = "hpa";
    const SETTINGS_DOC: &'static str = "tolerance: relative change ignored, 0 to 1 (default 0.1)\n\
        combine: max (default, the HPA's rule) or min across metrics";

    fn new(settings: Settings) -> Result<Self, String> {
        if !(0.0..1.0).contains(&settings.tolerance) {
            return Err(format!("tolerance: {} is outside [0, 1)", settings.tolerance));
        }
        Ok(Hpa { settings })
    }

    fn as_scale(&self) -> Option<&dyn Scale> {
        Some(self)
    }
}

fn average_ratio(values: &[f64], target: f64) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64 / target
}

impl Hpa {
    /// Replicas proposed by one metric, following the HPA's `calcPlainMetricReplicas`.
    fn proposal(&self, metric: &Metric, current: u32) -> Result<(u32, f64), String> {
        if metric.target_average <= 0.0 {
            return Err(format!("metric {}: target must be positive", metric.name));
        }
        let measured: Vec<f64> = metric.pods.iter().filter(|pod| pod.ready).filter_map(|pod| pod.value).collect();
        if measured.is_empty() {
            return Err(format!("metric {}: no ready pod reported a value", metric.name));
        }
        let missing = metric.pods.iter().filter(|pod| pod.ready && pod.value.is_none()).count();
        let unready = metric.pods.iter().filter(|pod| !pod.ready).count();
        let ratio = average_ratio(&measured, metric.target_average);
        let within_tolerance = |ratio: f64| (ratio - 1.0).abs() <= self.settings.tolerance;
        let scale_up_with_unready = unready > 0 && ratio > 1.0;
        if !scale_up_with_unready && missing == 0 {
            if within_tolerance(ratio) {
                return Ok((current, ratio));
            }
            return Ok(((ratio * measured.len() as f64).ceil() as u32, ratio));
        }
        // Fill in assumptions that dampen the change, then re-check its direction.
        let mut assumed = measured.clone();
        let missing_value = if ratio < 1.0 { metric.target_average } else { 0.0 };
        assumed.extend(std::iter::repeat_n(missing_value, missing));
        if scale_up_with_unready {
            assumed.extend(std::iter::repeat_n(0.0, unready));
        }
        let adjusted = average_ratio(&assumed, metric.target_average);
        if within_tolerance(adjusted) || (ratio < 1.0 && adjusted > 1.0) || (ratio > 1.0 && adjusted < 1.0) {
            return Ok((current, adjusted));
        }
        let desired = (adjusted * assumed.len() as f64).ceil() as u32;
        if (adjusted < 1.0 && desired > current) || (adjusted > 1.0 && desired < current) {
            return Ok((current, adjusted));
        }
        Ok((desired, adjusted))
    }
}

impl Scale for Hpa {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        if request.metrics.is_empty() {
            return Err(format!("{}: no metrics to scale on", request.workload));
        }
        let mut proposals = Vec::new();
        for metric in &request.metrics {
            let (replicas, ratio) = self.proposal(metric, request.current_replicas)?;
            proposals.push((metric.name.as_str(), replicas, ratio));
        }
        let chosen = match self.settings.combine {
            Combine::Max => proposals.iter().max_by_key(|(_, replicas, _)| *replicas),
            Combine::Min => proposals.iter().min_by_key(|(_, replicas, _)| *replicas),
        }
        .expect("at least one metric");
        let desired = chosen.1.clamp(request.min_replicas, request.max_replicas);
        let details: Vec<String> =
            proposals.iter().map(|(name, replicas, ratio)| format!("{name} at {:.0}% of target wants {replicas}", ratio * 100.0)).collect();
        let clamp_note = if desired != chosen.1 { format!(", clamped to [{}, {}]", request.min_replicas, request.max_replicas) } else { String::new() };
        Ok(ScaleDecision {
            desired_replicas: desired,
            reason: format!("{} ({} of metrics{clamp_note})", details.join("; "), self.settings.combine.name()),
        })
    }
}

wasp_sdk::export_policy!(Hpa);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{scale_request, MetricBuilder};

    fn hpa() -> Hpa {
        build::<Hpa>("").unwrap()
    }

    fn cpu(values: &[f64]) -> MetricBuilder {
        values.iter().fold(MetricBuilder::new("cpu", 100.0), |builder, value| builder.ready(*value))
    }

    #[test]
    fn ratio_times_ready_pods_rounded_up() {
        let decision = hpa().recommend(&scale_request(3, 1, 10, vec![cpu(&[150.0, 150.0, 150.0]).build()])).unwrap();
        assert_eq!(decision.desired_replicas, 5, "ceil(1.5 * 3)");
        assert!(decision.reason.contains("cpu at 150% of target wants 5"), "{}", decision.reason);
        let decision = hpa().recommend(&scale_request(4, 1, 10, vec![cpu(&[20.0, 20.0, 20.0, 20.0]).build()])).unwrap();
        assert_eq!(decision.desired_replicas, 1);
    }

    #[test]
    fn no_change_within_tolerance() {
        let decision = hpa().recommend(&scale_request(4, 1, 10, vec![cpu(&[108.0, 108.0, 108.0, 108.0]).build()])).unwrap();
        assert_eq!(decision.desired_replicas, 4);
    }

    #[test]
    fn missing_metrics_dampen_scale_down_and_abandon_flips() {
        // Two ready pods at 50%, two missing: scale-down assumes the missing ones at 100% -> ratio 0.75 -> 3.
        let metric = cpu(&[50.0, 50.0]).missing().missing().build();
        assert_eq!(hpa().recommend(&scale_request(4, 1, 10, vec![metric])).unwrap().desired_replicas, 3);
        // One pod at 120%, three missing: scale-up assumes 0 -> ratio 0.3 flips direction -> no change.
        let metric = cpu(&[120.0]).missing().missing().missing().build();
        assert_eq!(hpa().recommend(&scale_request(4, 1, 10, vec![metric])).unwrap().desired_replicas, 4);
    }

    #[test]
    fn unready_pods_count_zero_when_scaling_up() {
        // Two ready at 200%, two unready: (200 + 200 + 0 + 0) / 4 = 100% -> within tolerance -> keep 4.
        let metric = cpu(&[200.0, 200.0]).unready(500.0).unready(500.0).build();
        assert_eq!(hpa().recommend(&scale_request(4, 1, 10, vec![metric])).unwrap().desired_replicas, 4);
        let metric = cpu(&[300.0, 300.0]).unready(0.0).build();
        assert_eq!(hpa().recommend(&scale_request(3, 1, 10, vec![metric])).unwrap().desired_replicas, 6);
    }

    #[test]
    fn several_metrics_combine_and_bounds_clamp() {
        let memory = MetricBuilder::new("memory", 100.0).ready(50.0).ready(50.0).build();
        let busy_cpu = cpu(&[300.0, 300.0]).build();
        let request = scale_request(2, 1, 5, vec![busy_cpu, memory]);
        let decision = hpa().recommend(&request).unwrap();
        assert_eq!(decision.desired_replicas, 5, "max(6, 1) clamped to 5");
        assert!(decision.reason.contains("clamped to [1, 5]"), "{}", decision.reason);
        let min = build::<Hpa>(r#"{"combine": "min"}"#).unwrap();
        assert_eq!(min.recommend(&request).unwrap().desired_replicas, 1);
    }

    #[test]
    fn invalid_input_is_an_error() {
        assert!(build::<Hpa>(r#"{"tolerance": 1.5}"#).err().unwrap().contains("tolerance"));
        let no_values = MetricBuilder::new("qps", 10.0).missing().build();
        let error = hpa().recommend(&scale_request(2, 1, 5, vec![no_values])).unwrap_err();
        assert!(error.contains("no ready pod reported a value"), "{error}");
    }
}
