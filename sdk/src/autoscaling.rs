//! The HorizontalPodAutoscaler's replica calculation (kube-controller-manager's replica calculator), one metric
//! at a time, for scale policies to build on: `hpa` takes the largest proposal as the HPA does, others combine
//! the same proposals their own way or feed it a forecast reading instead of today's.
//!
//! Per metric: `ratio = reading / target`; no change while `|ratio - 1| <= tolerance`; else
//! `ceil(ratio * ready pods)`. Pods without a reading count at the target when scaling down and 0 when scaling
//! up, unready pods 0 when scaling up, and a change those assumptions turn around is abandoned. Resource
//! utilization is whole percent of the pods' summed requests, truncated as the HPA truncates it.

use crate::types::{Metric, MetricProposal, MetricSample, MetricSource, MetricTarget, PodMetric, ScaleRequest};

/// The HPA's default: a change under 10% of the target is not worth a scale.
pub const DEFAULT_TOLERANCE: f64 = 0.1;

/// What one metric wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    pub replicas: u32,
    /// The reading over the target (1.0 on target), after the assumptions for missing and unready pods.
    pub ratio: f64,
    /// The reading in the target's unit: percent of requests, average per pod, or the value.
    pub reading: f64,
}

fn within(ratio: f64, tolerance: f64) -> bool {
    (ratio - 1.0).abs() <= tolerance
}

fn ceil_replicas(value: f64) -> u32 {
    value.ceil().clamp(0.0, u32::MAX as f64) as u32
}

/// How pods' readings compare with a per-pod target.
enum PerPod {
    /// Whole percent of the summed requests, against a percent.
    Utilization(f64),
    /// The pods' average, against an average.
    Average(f64),
}

impl PerPod {
    /// (ratio, reading) of these pods' (value, request) pairs.
    fn ratio(&self, readings: &[(f64, f64)]) -> (f64, f64) {
        match self {
            PerPod::Utilization(target) => {
                let usage: f64 = readings.iter().map(|(value, _)| value).sum();
                let requests: f64 = readings.iter().map(|(_, request)| request).sum();
                let percent = if requests > 0.0 { (usage * 100.0 / requests).floor() } else { 0.0 };
                (percent / target, percent)
            }
            PerPod::Average(target) => {
                let average = readings.iter().map(|(value, _)| value).sum::<f64>() / readings.len() as f64;
                (average / target, average)
            }
        }
    }

    /// What a pod without a reading is assumed to use on a scale-down: the request at the target (at least
    /// 100%), or the target average.
    fn assumed_at_target(&self, request: f64) -> f64 {
        match self {
            PerPod::Utilization(target) => request * target.max(100.0) / 100.0,
            PerPod::Average(target) => *target,
        }
    }
}

/// The replicas `metric` alone wants for a target now at `current_replicas`.
pub fn propose(metric: &Metric, current_replicas: u32, tolerance: f64) -> Result<Proposal, String> {
    let name = &metric.name;
    if let Some(error) = &metric.error {
        return Err(format!("metric {name}: {error}"));
    }
    let positive = |target: f64| {
        if target.is_finite() && target > 0.0 { Ok(target) } else { Err(format!("metric {name}: the target must be positive, not {target}")) }
    };
    match (metric.source, metric.target) {
        (MetricSource::Resource, MetricTarget::Utilization(target)) => per_pod(metric, PerPod::Utilization(positive(target)?), current_replicas, tolerance),
        (MetricSource::Resource | MetricSource::Pods, MetricTarget::AverageValue(target)) => {
            per_pod(metric, PerPod::Average(positive(target)?), current_replicas, tolerance)
        }
        (MetricSource::Object | MetricSource::External, MetricTarget::Value(target) | MetricTarget::AverageValue(target)) => {
            let target = positive(target)?;
            let reading = metric.value.ok_or_else(|| format!("metric {name}: no value was read"))?;
            Ok(whole_value(metric, reading, target, current_replicas, tolerance))
        }
        (source, target) => Err(format!("metric {name}: a {} metric cannot be held to a {} target", source_name(source), target_name(target))),
    }
}

/// The replicas an Object or External `reading` calls for: the HPA's `GetObjectMetricReplicas` (a Value target
/// scales the ready pods by the ratio) and `GetObjectPerPodMetricReplicas` (an AverageValue target divides the
/// reading by it). Also what a forecast reading of any metric calls for, see [`replicas_for_reading`].
fn whole_value(metric: &Metric, reading: f64, target: f64, current_replicas: u32, tolerance: f64) -> Proposal {
    match metric.target {
        MetricTarget::AverageValue(_) => {
            let ratio = reading / (target * current_replicas.max(1) as f64);
            let replicas = if within(ratio, tolerance) { current_replicas } else { ceil_replicas(reading / target) };
            Proposal { replicas, ratio, reading: reading / current_replicas.max(1) as f64 }
        }
        _ => {
            let ratio = reading / target;
            let ready = metric.pods.iter().filter(|pod| pod.ready).count();
            let replicas = match current_replicas {
                0 => ceil_replicas(ratio),
                _ if within(ratio, tolerance) => current_replicas,
                _ => ceil_replicas(ratio * ready as f64),
            };
            Proposal { replicas, ratio, reading }
        }
    }
}

fn per_pod(metric: &Metric, rule: PerPod, current_replicas: u32, tolerance: f64) -> Result<Proposal, String> {
    let name = &metric.name;
    let request_of = |pod: &PodMetric| match rule {
        PerPod::Utilization(_) => pod.request.filter(|request| *request > 0.0).ok_or_else(|| format!("metric {name}: missing request for {name} in pod {}", pod.pod)),
        PerPod::Average(_) => Ok(0.0),
    };
    let (mut measured, mut missing, mut unready) = (Vec::new(), Vec::new(), 0usize);
    for pod in &metric.pods {
        match (pod.ready, pod.value) {
            (false, _) => unready += 1,
            (true, None) => missing.push(request_of(pod)?),
            (true, Some(value)) => measured.push((value, request_of(pod)?)),
        }
    }
    if measured.is_empty() {
        return Err(format!("metric {name}: did not receive metrics for targeted pods (pods might be unready)"));
    }
    let (ratio, reading) = rule.ratio(&measured);
    let scale_up_with_unready = unready > 0 && ratio > 1.0;
    if !scale_up_with_unready && missing.is_empty() {
        let replicas = if within(ratio, tolerance) { current_replicas } else { ceil_replicas(ratio * measured.len() as f64) };
        return Ok(Proposal { replicas, ratio, reading });
    }
    // Assumptions that dampen the change, then the change is re-checked against them.
    let mut assumed = measured;
    if ratio < 1.0 {
        assumed.extend(missing.iter().map(|request| (rule.assumed_at_target(*request), *request)));
    } else if ratio > 1.0 {
        assumed.extend(missing.iter().map(|request| (0.0, *request)));
    }
    if scale_up_with_unready {
        let typical_request = assumed.iter().map(|(_, request)| request).sum::<f64>() / assumed.len() as f64;
        assumed.extend(std::iter::repeat_n((0.0, typical_request), unready));
    }
    let (adjusted, _) = rule.ratio(&assumed);
    let flipped = (ratio < 1.0 && adjusted > 1.0) || (ratio > 1.0 && adjusted < 1.0);
    if within(adjusted, tolerance) || flipped {
        return Ok(Proposal { replicas: current_replicas, ratio: adjusted, reading });
    }
    let replicas = ceil_replicas(adjusted * assumed.len() as f64);
    let turned = (adjusted < 1.0 && replicas > current_replicas) || (adjusted > 1.0 && replicas < current_replicas);
    Ok(Proposal { replicas: if turned { current_replicas } else { replicas }, ratio: adjusted, reading })
}

/// The HPA's name of a metric type: `Resource`, `Pods`, `Object`, `External`.
pub fn source_name(source: MetricSource) -> &'static str {
    match source {
        MetricSource::Resource => "Resource",
        MetricSource::Pods => "Pods",
        MetricSource::Object => "Object",
        MetricSource::External => "External",
    }
}

/// The HPA's name of a target type: `Utilization`, `AverageValue`, `Value`.
pub fn target_name(target: MetricTarget) -> &'static str {
    match target {
        MetricTarget::Utilization(_) => "Utilization",
        MetricTarget::AverageValue(_) => "AverageValue",
        MetricTarget::Value(_) => "Value",
    }
}

/// The whole load of a reading: the reading times the pods it averages over (the value itself for a Value
/// target). A trend must follow this, not the average, which falls whenever replicas are added.
pub fn load_of(sample: &MetricSample) -> f64 {
    sample.value * f64::from(sample.pods.max(1))
}

/// The replicas a whole `load` (a forecast, say; see [`load_of`]) calls for: enough pods to bring the average to
/// the target, or for a Value target the HPA's rule for the reading.
pub fn replicas_for_load(metric: &Metric, load: f64, current_replicas: u32, tolerance: f64) -> Option<u32> {
    if !load.is_finite() {
        return None;
    }
    match metric.target {
        MetricTarget::Utilization(target) | MetricTarget::AverageValue(target) if target.is_finite() && target > 0.0 => {
            let ratio = load / (target * current_replicas.max(1) as f64);
            Some(if within(ratio, tolerance) { current_replicas } else { ceil_replicas(load / target) })
        }
        MetricTarget::Value(target) if target.is_finite() && target > 0.0 => Some(whole_value(metric, load, target, current_replicas, tolerance).replicas),
        _ => None,
    }
}

/// A `tolerance` setting as the HPA allows it: a fraction in [0, 1).
pub fn check_tolerance(tolerance: f64) -> Result<(), String> {
    if (0.0..1.0).contains(&tolerance) { Ok(()) } else { Err(format!("tolerance: {tolerance} is outside [0, 1)")) }
}

/// What every metric of a request wants, by [`propose`]: the proposals of the metrics that could be read, their
/// descriptions for a reason, and the errors of those that could not.
#[derive(Debug, Default)]
pub struct Proposals {
    pub proposals: Vec<MetricProposal>,
    pub details: Vec<String>,
    pub failures: Vec<String>,
}

impl Proposals {
    pub fn of(request: &ScaleRequest, tolerance: f64) -> Proposals {
        let mut all = Proposals::default();
        for metric in &request.metrics {
            match propose(metric, request.current_replicas, tolerance) {
                Ok(proposal) => {
                    all.details.push(describe(metric, &proposal));
                    all.proposals.push(MetricProposal { metric: metric.name.clone(), replicas: proposal.replicas });
                }
                Err(error) => all.failures.push(error),
            }
        }
        all
    }
}

/// `cpu at 150% of 50% wants 5`, `queue at 30 of 10 per pod wants 3`: a proposal for a reason.
pub fn describe(metric: &Metric, proposal: &Proposal) -> String {
    let name = &metric.name;
    let wants = proposal.replicas;
    match metric.target {
        MetricTarget::Utilization(target) => format!("{name} at {}% of requests (target {target}%) wants {wants}", proposal.reading),
        MetricTarget::AverageValue(target) => format!("{name} at {:.3} per pod (target {target}) wants {wants}", proposal.reading),
        MetricTarget::Value(target) => format!("{name} at {:.3} (target {target}) wants {wants}", proposal.reading),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MetricBuilder;

    #[test]
    fn utilization_is_truncated_whole_percent_of_summed_requests() {
        // 3 pods requesting 100m use 70m, 70m, 71m: 211 * 100 / 300 = 70.33 -> 70%, target 50% -> ratio 1.4.
        let metric = MetricBuilder::utilization("cpu", 50.0).ready(70.0).ready(70.0).ready(71.0).build();
        let proposal = propose(&metric, 3, DEFAULT_TOLERANCE).unwrap();
        assert_eq!(proposal.reading, 70.0);
        assert_eq!(proposal.replicas, 5, "ceil(1.4 * 3) = ceil(4.2)");
    }

    #[test]
    fn missing_pods_count_at_least_their_request_on_a_scale_down() {
        // Target 50%: two pods at 10%, one missing. Scale-down fills the missing one at max(100, 50)% = 100.
        let metric = MetricBuilder::utilization("cpu", 50.0).ready(10.0).ready(10.0).missing().build();
        let proposal = propose(&metric, 3, DEFAULT_TOLERANCE).unwrap();
        // (10 + 10 + 100) / 300 = 40% -> ratio 0.8 -> ceil(0.8 * 3) = 3: no change.
        assert_eq!(proposal.replicas, 3);
        assert!((proposal.ratio - 0.8).abs() < 1e-9);
    }

    #[test]
    fn object_and_external_targets_follow_their_rules() {
        let external = MetricBuilder::external("queue", MetricTarget::Value(100.0), 250.0).ready_pods(2).build();
        assert_eq!(propose(&external, 2, DEFAULT_TOLERANCE).unwrap().replicas, 5, "ceil(2.5 * 2 ready)");
        let per_pod = MetricBuilder::external("queue", MetricTarget::AverageValue(30.0), 250.0).ready_pods(2).build();
        assert_eq!(propose(&per_pod, 2, DEFAULT_TOLERANCE).unwrap().replicas, 9, "ceil(250 / 30)");
        let on_target = MetricBuilder::external("queue", MetricTarget::AverageValue(30.0), 62.0).ready_pods(2).build();
        assert_eq!(propose(&on_target, 2, DEFAULT_TOLERANCE).unwrap().replicas, 2, "62 / 60 is within 10%");
    }

    #[test]
    fn mismatched_targets_and_failed_reads_are_errors_naming_the_metric() {
        let mut metric = MetricBuilder::average("qps", 10.0).ready(5.0).build();
        metric.target = MetricTarget::Utilization(50.0);
        metric.source = MetricSource::Pods;
        assert!(propose(&metric, 1, DEFAULT_TOLERANCE).unwrap_err().starts_with("metric qps: a Pods metric cannot be held to a Utilization target"));
        let failed = MetricBuilder::average("qps", 10.0).error("the custom metrics API is unavailable").build();
        assert_eq!(propose(&failed, 1, DEFAULT_TOLERANCE).unwrap_err(), "metric qps: the custom metrics API is unavailable");
        let no_request = MetricBuilder::utilization("cpu", 50.0).ready(5.0).request(0.0).build();
        assert!(propose(&no_request, 1, DEFAULT_TOLERANCE).unwrap_err().contains("missing request for cpu in pod pod-0"));
    }

    #[test]
    fn a_whole_load_calls_for_enough_pods_to_reach_the_target() {
        let metric = MetricBuilder::average("qps", 10.0).ready(10.0).ready(10.0).build();
        assert_eq!(load_of(&MetricSample { at: 0, value: 20.0, pods: 2 }), 40.0);
        assert_eq!(replicas_for_load(&metric, 40.0, 2, DEFAULT_TOLERANCE), Some(4));
        assert_eq!(replicas_for_load(&metric, 21.0, 2, DEFAULT_TOLERANCE), Some(2), "5% over the target");
        assert_eq!(replicas_for_load(&metric, f64::NAN, 2, DEFAULT_TOLERANCE), None);
        let external = MetricBuilder::external("queue", MetricTarget::Value(100.0), 100.0).ready_pods(2).build();
        assert_eq!(replicas_for_load(&external, 300.0, 2, DEFAULT_TOLERANCE), Some(6), "ceil(3.0 * 2 ready)");
    }
}
