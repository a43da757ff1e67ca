//! The HorizontalPodAutoscaler's replica calculation (kube-controller-manager's replica calculator), one metric
//! at a time, for scale policies to build on: `hpa` takes the largest proposal as the HPA does, others combine
//! the same proposals their own way or feed it a forecast reading instead of today's.
//!
//! Per metric: `ratio = reading / target`; no change while `1 - scaleDown <= ratio <= 1 + scaleUp` (the
//! [`Tolerance`] on each side of the target, 0.1 by default); else
//! `ceil(ratio * ready pods)`. Pods without a reading count at the target when scaling down and 0 when scaling
//! up, unready pods 0 when scaling up, and a change those assumptions turn around is abandoned. Resource
//! utilization is whole percent of the pods' summed requests, truncated as the HPA truncates it.
//!
//! Like the HPA, the arithmetic is done on whole milli-units (Kubernetes' `MilliValue()`): the contract's
//! values are decimal quantities (CPU in millicores, everything else in its unit), which `f64` cannot divide
//! exactly (`2.1 / 0.3` is `7.000000000000001`, whose ceiling is 8 where the HPA's `2100 / 300` gives 7),
//! and the HPA truncates averages and assumed usage to whole milli-units.

use crate::types::{Metric, MetricProposal, MetricSample, MetricSource, MetricTarget, PodMetric, ScaleDecision, ScaleRequest};
use serde::{Deserialize, Serialize};

/// The HPA's default: a change under 10% of the target is not worth a scale.
pub const DEFAULT_TOLERANCE: f64 = 0.1;

/// How far a reading may stray from its target on each side before the replicas change: the HPA's
/// `Tolerances` (KEP-4951's `behavior.scaleUp.tolerance` and `behavior.scaleDown.tolerance`, each defaulting to
/// the cluster-wide 0.1). As a setting, a number (both sides) or `{scaleUp: 0.05, scaleDown: 0.2}` (a side left
/// out keeps the default); the host hands an Autoscaler's behavior tolerances to its policy this way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ToleranceSetting", into = "ToleranceSetting")]
pub struct Tolerance {
    pub scale_up: f64,
    pub scale_down: f64,
}

impl Tolerance {
    pub const fn both(tolerance: f64) -> Tolerance {
        Tolerance { scale_up: tolerance, scale_down: tolerance }
    }

    /// The replica calculator's `Tolerances.isWithin`: `1 - scaleDown <= ratio <= 1 + scaleUp`. (Not
    /// `|ratio - 1| <= tolerance`, which leaves a ratio of exactly 1.1 outside a 0.1 tolerance: `1.1 - 1.0` is
    /// `0.10000000000000009` in `f64`.)
    fn within(self, ratio: f64) -> bool {
        1.0 - self.scale_down <= ratio && ratio <= 1.0 + self.scale_up
    }
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance::both(DEFAULT_TOLERANCE)
    }
}

impl From<f64> for Tolerance {
    fn from(tolerance: f64) -> Tolerance {
        Tolerance::both(tolerance)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ToleranceSetting {
    Both(f64),
    Each(EachSide),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EachSide {
    #[serde(default = "default_tolerance")]
    scale_up: f64,
    #[serde(default = "default_tolerance")]
    scale_down: f64,
}

fn default_tolerance() -> f64 {
    DEFAULT_TOLERANCE
}

/// One number for both sides is a fraction in [0, 1), as it always was here; a side of its own is checked by
/// [`check_tolerance`] as the HPA checks a behavior's (any number from 0).
impl TryFrom<ToleranceSetting> for Tolerance {
    type Error = String;

    fn try_from(setting: ToleranceSetting) -> Result<Tolerance, String> {
        match setting {
            // The settings' reader names the field.
            ToleranceSetting::Both(tolerance) if !(0.0..1.0).contains(&tolerance) => Err(format!("{tolerance} is outside [0, 1)")),
            ToleranceSetting::Both(tolerance) => Ok(Tolerance::both(tolerance)),
            ToleranceSetting::Each(EachSide { scale_up, scale_down }) => Ok(Tolerance { scale_up, scale_down }),
        }
    }
}

impl From<Tolerance> for ToleranceSetting {
    fn from(tolerance: Tolerance) -> ToleranceSetting {
        if tolerance.scale_up == tolerance.scale_down {
            ToleranceSetting::Both(tolerance.scale_up)
        } else {
            ToleranceSetting::Each(EachSide { scale_up: tolerance.scale_up, scale_down: tolerance.scale_down })
        }
    }
}

/// What one metric wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    pub replicas: u32,
    /// The reading over the target (1.0 on target), after the assumptions for missing and unready pods.
    pub ratio: f64,
    /// The reading in the target's unit: percent of requests, average per pod, or the value.
    pub reading: f64,
}

/// A replica count as the HPA's `int32`: rounded up, saturating at `math.MaxInt32` as
/// `getUsageRatioReplicaCount` and `GetExternalPerPodMetricReplicas` do.
fn ceil_replicas(value: f64) -> u32 {
    value.ceil().clamp(0.0, i32::MAX as f64) as u32
}

/// What one unit of `metric`'s values is worth in the HPA's milli-units: the contract carries CPU in
/// millicores already, every other quantity in its unit.
fn milli_per_unit(metric: &Metric) -> f64 {
    if matches!(metric.source, MetricSource::Resource) && metric.name == "cpu" {
        1.0
    } else {
        1000.0
    }
}

/// A contract value as the HPA's whole milli-value (`i64`, saturating). The host's values are quantities
/// parsed to thousandths, so rounding recovers them exactly.
fn to_milli(value: f64, per_unit: f64) -> i64 {
    (value * per_unit).round() as i64
}

/// A target as a milli-value: at least 1, as `MilliValue()` rounds a positive quantity up.
fn target_milli(target: f64, per_unit: f64) -> f64 {
    to_milli(target, per_unit).max(1) as f64
}

/// How pods' readings compare with a per-pod target.
enum PerPod {
    /// Whole percent of the summed requests, against a percent.
    Utilization(f64),
    /// The pods' average, against an average in milli-units.
    Average(f64),
}

impl PerPod {
    /// (ratio, reading) of these pods' (value, request) pairs in milli-units; the reading is whole percent or
    /// the average in milli-units. `GetResourceUtilizationRatio`: `int32(usage * 100 / requests)`;
    /// `GetMetricUsageRatio`: `usage / len(metrics)`, both in integers.
    fn ratio(&self, readings: &[(i64, i64)]) -> (f64, f64) {
        let usage: i128 = readings.iter().map(|(value, _)| i128::from(*value)).sum();
        match self {
            PerPod::Utilization(target) => {
                let requests: i128 = readings.iter().map(|(_, request)| i128::from(*request)).sum();
                let percent = if requests > 0 { (usage * 100 / requests) as f64 } else { 0.0 };
                (percent / target, percent)
            }
            PerPod::Average(target) => {
                let average = (usage / readings.len().max(1) as i128) as f64;
                (average / target, average)
            }
        }
    }

    /// What a pod without a reading is assumed to use on a scale-down: the request at the target (at least
    /// 100%, `requests[pod] * max(100, target) / 100` in integers), or the target average.
    fn assumed_at_target(&self, request: i64) -> i64 {
        match self {
            PerPod::Utilization(target) => (i128::from(request) * target.max(100.0) as i128 / 100) as i64,
            PerPod::Average(target) => *target as i64,
        }
    }
}

/// The replicas `metric` alone wants for a target now at `current_replicas`.
pub fn propose(metric: &Metric, current_replicas: u32, tolerance: impl Into<Tolerance>) -> Result<Proposal, String> {
    let tolerance = tolerance.into();
    let name = &metric.name;
    if let Some(error) = &metric.error {
        return Err(format!("metric {name}: {error}"));
    }
    let positive = |target: f64| {
        if target.is_finite() && target > 0.0 {
            Ok(target)
        } else {
            Err(format!("metric {name}: the target must be positive, not {target}"))
        }
    };
    match (metric.source, metric.target) {
        (MetricSource::Resource, MetricTarget::Utilization(target)) => per_pod(metric, PerPod::Utilization(positive(target)?), current_replicas, tolerance),
        (MetricSource::Resource | MetricSource::Pods, MetricTarget::AverageValue(target)) => {
            let target = target_milli(positive(target)?, milli_per_unit(metric));
            per_pod(metric, PerPod::Average(target), current_replicas, tolerance)
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
/// reading by it), in milli-units. Also what a forecast of a Value target calls for, see [`replicas_for_load`].
fn whole_value(metric: &Metric, reading: f64, target: f64, current_replicas: u32, tolerance: Tolerance) -> Proposal {
    let per_unit = milli_per_unit(metric);
    let (usage, target) = (to_milli(reading, per_unit) as f64, target_milli(target, per_unit));
    match metric.target {
        MetricTarget::AverageValue(_) => {
            // `usage / (target * statusReplicas)`: from 0 replicas the HPA's ratio is infinite, never within the
            // tolerance, so it scales to `ceil(usage / target)`.
            let ratio = usage / (target * f64::from(current_replicas.max(1)));
            let replicas = if current_replicas > 0 && tolerance.within(ratio) { current_replicas } else { ceil_replicas(usage / target) };
            // The HPA reports `ceil(usage / statusReplicas)`.
            let average = (usage / f64::from(current_replicas.max(1))).ceil();
            Proposal { replicas, ratio, reading: average / per_unit }
        }
        _ => {
            let ratio = usage / target;
            let ready = metric.pods.iter().filter(|pod| pod.ready).count();
            let replicas = match current_replicas {
                0 => ceil_replicas(ratio),
                _ if tolerance.within(ratio) => current_replicas,
                _ => ceil_replicas(ratio * ready as f64),
            };
            Proposal { replicas, ratio, reading }
        }
    }
}

fn per_pod(metric: &Metric, rule: PerPod, current_replicas: u32, tolerance: Tolerance) -> Result<Proposal, String> {
    let name = &metric.name;
    let per_unit = milli_per_unit(metric);
    let (mut measured, mut missing, mut unready) = (Vec::new(), Vec::new(), Vec::new());
    for pod in &metric.pods {
        let request = pod.request.filter(|request| *request > 0.0).map(|request| to_milli(request, per_unit));
        match (pod.ready, pod.value) {
            (false, _) => unready.push((pod, request)),
            (true, None) => missing.push((pod, request)),
            (true, Some(value)) => measured.push((pod, to_milli(value, per_unit), request)),
        }
    }
    if measured.is_empty() {
        return Err(format!("metric {name}: did not receive metrics for targeted pods (pods might be unready)"));
    }
    // `calculatePodRequests`: utilization needs the request of every pod of the target, unready and missing
    // ones included (they are counted at their own request below).
    let request_of = |pod: &PodMetric, request: Option<i64>| match rule {
        PerPod::Utilization(_) => request.ok_or_else(|| format!("metric {name}: missing request for {name} in pod {}", pod.pod)),
        PerPod::Average(_) => Ok(0),
    };
    let measured = measured.into_iter().map(|(pod, value, request)| Ok((value, request_of(pod, request)?))).collect::<Result<Vec<_>, String>>()?;
    let missing = missing.into_iter().map(|(pod, request)| request_of(pod, request)).collect::<Result<Vec<_>, String>>()?;
    let unready = unready.into_iter().map(|(pod, request)| request_of(pod, request)).collect::<Result<Vec<_>, String>>()?;
    let (ratio, reading) = rule.ratio(&measured);
    let reading = match rule {
        PerPod::Utilization(_) => reading,
        PerPod::Average(_) => reading / per_unit,
    };
    let scale_up_with_unready = !unready.is_empty() && ratio > 1.0;
    if !scale_up_with_unready && missing.is_empty() {
        let replicas = if tolerance.within(ratio) { current_replicas } else { ceil_replicas(ratio * measured.len() as f64) };
        return Ok(Proposal { replicas, ratio, reading });
    }
    // Assumptions that dampen the change, then the change is re-checked against them.
    let mut assumed = measured;
    if ratio < 1.0 {
        assumed.extend(missing.iter().map(|request| (rule.assumed_at_target(*request), *request)));
    } else if ratio > 1.0 {
        assumed.extend(missing.iter().map(|request| (0, *request)));
    }
    if scale_up_with_unready {
        // Each unready pod at 0 of its own request (`metrics[pod] = 0` against `requests[pod]`).
        assumed.extend(unready.iter().map(|request| (0, *request)));
    }
    let (adjusted, _) = rule.ratio(&assumed);
    let flipped = (ratio < 1.0 && adjusted > 1.0) || (ratio > 1.0 && adjusted < 1.0);
    if tolerance.within(adjusted) || flipped {
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
pub fn replicas_for_load(metric: &Metric, load: f64, current_replicas: u32, tolerance: impl Into<Tolerance>) -> Option<u32> {
    let tolerance = tolerance.into();
    if !load.is_finite() {
        return None;
    }
    match metric.target {
        MetricTarget::Utilization(target) | MetricTarget::AverageValue(target) if target.is_finite() && target > 0.0 => {
            let ratio = load / (target * current_replicas.max(1) as f64);
            Some(if tolerance.within(ratio) { current_replicas } else { ceil_replicas(load / target) })
        }
        MetricTarget::Value(target) if target.is_finite() && target > 0.0 => Some(whole_value(metric, load, target, current_replicas, tolerance).replicas),
        _ => None,
    }
}

/// A tolerance's sides as the HPA validates a behavior's: any finite number from 0 (a scale-down tolerance of 1
/// or more forbids scaling down). A number for both sides read from settings is also under 1 (see [`Tolerance`]).
pub fn check_tolerance(tolerance: impl Into<Tolerance>) -> Result<(), String> {
    let tolerance = tolerance.into();
    for (side, value) in [("scaleUp", tolerance.scale_up), ("scaleDown", tolerance.scale_down)] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(format!("tolerance.{side}: {value} must be a number from 0"));
        }
    }
    Ok(())
}

impl ScaleDecision {
    /// A decision about replicas alone: every pod's resources stay as they are, and no state is kept.
    pub fn horizontal(desired_replicas: u32, reason: String, proposals: Vec<MetricProposal>) -> ScaleDecision {
        ScaleDecision { desired_replicas, reason, proposals, resources: Vec::new(), state: None }
    }
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
    pub fn of(request: &ScaleRequest, tolerance: impl Into<Tolerance>) -> Proposals {
        let tolerance = tolerance.into();
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
    fn a_tolerance_is_one_number_or_one_per_side() {
        let parse = |json: &str| serde_json::from_str::<Tolerance>(json);
        assert_eq!(parse("0.05").unwrap(), Tolerance::both(0.05));
        assert_eq!(parse(r#"{"scaleUp": 2, "scaleDown": 0.3}"#).unwrap(), Tolerance { scale_up: 2.0, scale_down: 0.3 });
        assert_eq!(parse(r#"{"scaleDown": 0.3}"#).unwrap(), Tolerance { scale_up: DEFAULT_TOLERANCE, scale_down: 0.3 });
        assert!(parse(r#"{"up": 0.3}"#).is_err(), "an unknown side is refused");
        assert!(parse("1.5").unwrap_err().to_string().starts_with("1.5 is outside [0, 1)"));
        assert_eq!(parse(r#"{"scaleUp": 2, "scaleDown": 2}"#).unwrap(), Tolerance::both(2.0), "sides of their own may be 1 or more");
        assert_eq!(check_tolerance(Tolerance { scale_up: 2.0, scale_down: 0.1 }), Ok(()));
        assert!(check_tolerance(Tolerance { scale_up: 0.1, scale_down: -0.1 }).unwrap_err().starts_with("tolerance.scaleDown"));
        // Each side decides its own direction: 8% over holds with a 10% scale-up side, 8% under scales with a 5% scale-down side.
        let asymmetric = Tolerance { scale_up: 0.1, scale_down: 0.05 };
        assert!(asymmetric.within(1.08) && !asymmetric.within(0.92));
    }

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
