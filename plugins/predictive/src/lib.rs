//! `predictive`: scale ahead of a rising trend. Each metric's whole load over its recent readings (the host keeps
//! them; a reading times the pods it averages over, so adding replicas does not look like a falling load) is
//! extrapolated `horizon` ahead, by a least-squares line or Holt's double exponential smoothing, and the
//! replicas that forecast calls for are added before the target is exceeded; the HPA's proposal for today's
//! reading is the floor. A trend counts only when the rise it forecasts stands out of the readings' noise (the
//! method's typical error one reading ahead): replicas bought on noise sit idle, and the stabilization window
//! then holds them for its whole length. A falling trend never scales down early: scale-down follows the
//! readings, through the host's stabilization window.

use serde::{Deserialize, Serialize};
use wasp_sdk::autoscaling::{check_tolerance, describe, load_of, propose, replicas_for_load, Tolerance};
use wasp_sdk::types::{Metric, MetricProposal, ScaleDecision, ScaleRequest};
use wasp_sdk::{NodeFacts, Policy, Scale};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Linear,
    Holt,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    pub method: Method,
    /// How far ahead to look, in seconds: about the time a new pod takes to become Ready and useful.
    pub horizon_seconds: u32,
    /// Holt's smoothing of the level and of the trend, each in (0, 1].
    pub alpha: f64,
    pub beta: f64,
    /// Readings needed before any forecast.
    pub min_samples: u32,
    /// How many times the readings' noise a forecast rise must exceed to count; 0 trusts every rising trend.
    pub trend_over_noise: f64,
    pub tolerance: Tolerance,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { method: Method::Holt, horizon_seconds: 120, alpha: 0.5, beta: 0.5, min_samples: 3, trend_over_noise: 1.0, tolerance: Tolerance::default() }
    }
}

pub struct Predictive {
    settings: Settings,
}

impl Policy for Predictive {
    type Settings = Settings;
    const NAME: &'static str = "predictive";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "method: holt (default) or linear\n\
        horizonSeconds: how far ahead to forecast (default 120, at most 3600)\n\
        alpha, beta: Holt's level and trend smoothing, in (0, 1] (default 0.5, 0.5)\n\
        minSamples: readings needed before forecasting, at least 2 (default 3)\n\
        trendOverNoise: how many times the readings' noise a forecast rise must exceed, 0 for none (default 1)\n\
        tolerance: relative change ignored, 0 to 1 (default 0.1), or {scaleUp, scaleDown} for each side";

    fn new(settings: Settings) -> Result<Self, String> {
        for (field, value) in [("alpha", settings.alpha), ("beta", settings.beta)] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(format!("{field}: {value} is outside (0, 1]"));
            }
        }
        if !(1..=3600).contains(&settings.horizon_seconds) {
            return Err(format!("horizonSeconds: {} is outside 1..3600", settings.horizon_seconds));
        }
        if settings.min_samples < 2 {
            return Err(format!("minSamples: {} is too few to see a trend (at least 2)", settings.min_samples));
        }
        if !(settings.trend_over_noise.is_finite() && settings.trend_over_noise >= 0.0) {
            return Err(format!("trendOverNoise: {} must be a number from 0", settings.trend_over_noise));
        }
        check_tolerance(settings.tolerance)?;
        Ok(Predictive { settings })
    }
}

/// A method's view of the readings: the load it expects at the horizon, how fast the load is rising, and how far
/// the readings stray from what the method expects of them (the same units as the load).
struct Forecast {
    load: f64,
    per_second: f64,
    noise: f64,
}

/// A least-squares line through (time, load), oldest first; its noise is the root mean square of the residuals.
fn linear(samples: &[(i64, f64)], at: i64) -> Forecast {
    let count = samples.len() as f64;
    let mean_t = samples.iter().map(|(time, _)| *time as f64).sum::<f64>() / count;
    let mean_v = samples.iter().map(|(_, load)| load).sum::<f64>() / count;
    let covariance: f64 = samples.iter().map(|(time, load)| (*time as f64 - mean_t) * (load - mean_v)).sum();
    let variance: f64 = samples.iter().map(|(time, _)| (*time as f64 - mean_t).powi(2)).sum();
    let slope = if variance > 0.0 { covariance / variance } else { 0.0 };
    let line = |time: i64| mean_v + slope * (time as f64 - mean_t);
    let squares: f64 = samples.iter().map(|(time, load)| (load - line(*time)).powi(2)).sum();
    Forecast { load: line(at), per_second: slope, noise: (squares / count).sqrt() }
}

/// Holt's double exponential smoothing over (time, load), oldest first. Its noise is the error of each
/// one-reading-ahead forecast, squared and smoothed like the level, so a step ages out in a few readings as the
/// level absorbs it.
fn holt(samples: &[(i64, f64)], at: i64, alpha: f64, beta: f64) -> Forecast {
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    let step = ((last.0 - first.0) as f64 / (samples.len() - 1) as f64).max(1.0);
    let mut level = first.1;
    let mut trend = samples[1].1 - first.1;
    let mut squared_error = 0.0;
    // The first trend is the first difference itself: its own forecast is exact, not evidence of calm.
    for (index, (_, load)) in samples.iter().enumerate().skip(1) {
        if index > 1 {
            squared_error = alpha * (load - (level + trend)).powi(2) + (1.0 - alpha) * squared_error;
        }
        let previous = level;
        level = alpha * load + (1.0 - alpha) * (level + trend);
        trend = beta * (level - previous) + (1.0 - beta) * trend;
    }
    let steps_ahead = (at - last.0) as f64 / step;
    Forecast { load: level + trend * steps_ahead, per_second: trend / step, noise: squared_error.sqrt() }
}

impl Predictive {
    /// What `metric` wants now and, with a rising trend, ahead; with the words for the reason.
    fn metric_proposal(&self, metric: &Metric, request: &ScaleRequest) -> Result<(u32, String), String> {
        let current = request.current_replicas;
        let now = propose(metric, current, self.settings.tolerance)?;
        let samples: Vec<(i64, f64)> = metric.history.iter().map(|sample| (sample.at, load_of(sample))).collect();
        let today = describe(metric, &now);
        if samples.len() < self.settings.min_samples as usize {
            return Ok((now.replicas, format!("{today} ({} of {} readings for a forecast)", samples.len(), self.settings.min_samples)));
        }
        let ahead = request.now + i64::from(self.settings.horizon_seconds);
        let Forecast { load: forecast, per_second, noise } = match self.settings.method {
            Method::Linear => linear(&samples, ahead),
            Method::Holt => holt(&samples, ahead, self.settings.alpha, self.settings.beta),
        };
        if per_second <= 0.0 {
            return Ok((now.replicas, format!("{today}; not rising")));
        }
        let rise = per_second * (ahead - samples[samples.len() - 1].0) as f64;
        if rise <= self.settings.trend_over_noise * noise {
            return Ok((now.replicas, format!("{today}; load rising {per_second:.3}/s, within the readings' noise (±{noise:.3})")));
        }
        let Some(ahead_replicas) = replicas_for_load(metric, forecast, current, self.settings.tolerance) else {
            return Ok((now.replicas, today));
        };
        let replicas = now.replicas.max(ahead_replicas);
        let horizon = self.settings.horizon_seconds;
        Ok((replicas, format!("{today}; load rising {per_second:.3}/s, {forecast:.3} in {horizon}s wants {ahead_replicas}")))
    }
}

impl Scale for Predictive {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        if request.metrics.is_empty() {
            return Err(format!("{}: no metrics to scale on", request.workload));
        }
        let (mut proposals, mut details, mut failures) = (Vec::new(), Vec::new(), Vec::new());
        for metric in &request.metrics {
            match self.metric_proposal(metric, request) {
                Ok((replicas, detail)) => {
                    details.push(detail);
                    proposals.push(MetricProposal { metric: metric.name.clone(), replicas });
                }
                Err(error) => failures.push(error),
            }
        }
        let Some(chosen) = proposals.iter().map(|proposal| proposal.replicas).max() else { return Err(failures.join("; ")) };
        let current = request.current_replicas;
        let desired = if !failures.is_empty() && chosen < current { current } else { chosen };
        let mut reason = details.join("; ");
        if desired != chosen {
            reason = format!("{reason}; not scaling down while {}", failures.join("; "));
        }
        Ok(ScaleDecision::horizontal(desired, reason, proposals))
    }
}

wasp_sdk::export_policy!(Predictive);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{scale_request, MetricBuilder};

    /// Two pods serving `per_pod` requests per second each now (target 10), after `history` (per pod, 2 pods).
    fn qps(per_pod: f64, history: &[(i64, f64)]) -> Metric {
        let samples: Vec<(i64, f64, u32)> = history.iter().map(|(at, value)| (*at, *value, 2)).collect();
        MetricBuilder::average("qps", 10.0).ready(per_pod).ready(per_pod).history(&samples).build()
    }

    fn at_time(now: i64, metric: Metric) -> ScaleRequest {
        let mut request = scale_request(2, 1, 20, vec![metric]);
        request.now = now;
        request
    }

    /// A ramp of 0.1 per pod per second, read every 15 s, reaching `per_pod` now at t = 60.
    fn ramp(per_pod: f64) -> Vec<(i64, f64)> {
        (0..5).map(|step| (step * 15, per_pod - 0.1 * (60 - step * 15) as f64)).collect()
    }

    #[test]
    fn a_steady_ramp_is_met_before_the_target_is_exceeded() {
        for method in ["linear", "holt"] {
            let policy = build::<Predictive>(&format!(r#"{{"method": "{method}", "horizonSeconds": 120}}"#)).unwrap();
            // 9.5 per pod is within the target: the HPA would keep 2. In 120 s the ramp reaches 21.5 per pod,
            // 43 in all: 5 pods.
            let decision = policy.recommend(&at_time(60, qps(9.5, &ramp(9.5)))).unwrap();
            assert_eq!(decision.desired_replicas, 5, "{method}: {}", decision.reason);
            assert!(decision.reason.contains("load rising 0.200/s"), "{method}: {}", decision.reason);
        }
    }

    #[test]
    fn an_average_that_falls_because_replicas_were_added_is_not_a_falling_load() {
        let policy = build::<Predictive>(r#"{"method": "linear"}"#).unwrap();
        // 18 req/s in all, steady: 9 per pod on 2 pods, then 6 per pod on 3.
        let samples = [(0, 9.0, 2), (15, 9.0, 2), (30, 6.0, 3), (45, 6.0, 3)];
        let metric = MetricBuilder::average("qps", 10.0).ready(6.0).ready(6.0).ready(6.0).history(&samples).build();
        let mut request = scale_request(3, 1, 20, vec![metric]);
        request.now = 45;
        let decision = policy.recommend(&request).unwrap();
        assert!(decision.reason.ends_with("not rising"), "{}", decision.reason);
        assert_eq!(decision.desired_replicas, 2, "the HPA's rule today: ceil(0.6 * 3)");
    }

    #[test]
    fn flat_or_falling_readings_change_nothing_early() {
        let policy = build::<Predictive>("").unwrap();
        let flat: Vec<(i64, f64)> = (0..5).map(|step| (step * 15, 9.5)).collect();
        assert_eq!(policy.recommend(&at_time(60, qps(9.5, &flat))).unwrap().desired_replicas, 2);
        let falling: Vec<(i64, f64)> = (0..5).map(|step| (step * 15, 9.5 + 0.1 * (60 - step * 15) as f64)).collect();
        let decision = policy.recommend(&at_time(60, qps(9.5, &falling))).unwrap();
        assert_eq!(decision.desired_replicas, 2);
        assert!(decision.reason.ends_with("not rising"), "{}", decision.reason);
    }

    /// Readings every 15 s ending at t = 15 * (len - 1), per pod on 2 pods.
    fn every_15s(per_pod: &[f64]) -> Vec<(i64, f64)> {
        per_pod.iter().enumerate().map(|(step, value)| (step as i64 * 15, *value)).collect()
    }

    #[test]
    fn a_rise_within_the_readings_noise_buys_no_replicas() {
        // Swinging between 8 and 10 per pod, Holt's trend ends slightly up: 20.3 in all in 120 s, 3 pods at a
        // tolerance of 0. One reading ahead it errs by about 4, far more than that rise.
        let swinging = every_15s(&[8.0, 10.0, 8.0, 10.0, 8.0, 10.0]);
        let trusting = build::<Predictive>(r#"{"tolerance": 0, "trendOverNoise": 0}"#).unwrap();
        assert_eq!(trusting.recommend(&at_time(75, qps(10.0, &swinging))).unwrap().desired_replicas, 3);
        let policy = build::<Predictive>(r#"{"tolerance": 0}"#).unwrap();
        let decision = policy.recommend(&at_time(75, qps(10.0, &swinging))).unwrap();
        assert_eq!(decision.desired_replicas, 2, "{}", decision.reason);
        assert!(decision.reason.contains("within the readings' noise (±3.9"), "{}", decision.reason);
        // A ramp as noisy still counts: it rises about 14 in 120 s against the same noise.
        let noisy_ramp = every_15s(&[4.0, 6.5, 6.0, 8.5, 8.0, 9.9]);
        let decision = policy.recommend(&at_time(75, qps(9.9, &noisy_ramp))).unwrap();
        assert_eq!(decision.desired_replicas, 4, "{}", decision.reason);
    }

    #[test]
    fn too_few_readings_fall_back_to_the_hpa_rule() {
        let policy = build::<Predictive>("").unwrap();
        let decision = policy.recommend(&at_time(60, qps(20.0, &[(45, 15.0), (60, 20.0)]))).unwrap();
        assert_eq!(decision.desired_replicas, 4, "ceil(2.0 * 2) today");
        assert!(decision.reason.contains("(2 of 3 readings for a forecast)"), "{}", decision.reason);
    }

    #[test]
    fn settings_are_checked() {
        assert!(build::<Predictive>(r#"{"alpha": 0}"#).err().unwrap().contains("alpha"));
        assert!(build::<Predictive>(r#"{"horizonSeconds": 0}"#).err().unwrap().contains("horizonSeconds"));
        assert!(build::<Predictive>(r#"{"minSamples": 1}"#).err().unwrap().contains("minSamples"));
        assert!(build::<Predictive>(r#"{"trendOverNoise": -1}"#).err().unwrap().contains("trendOverNoise"));
        assert!(build::<Predictive>(r#"{"method": "arima"}"#).is_err());
    }
}
