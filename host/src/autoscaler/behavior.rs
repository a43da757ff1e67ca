//! The HPA's `behavior`, applied by the host to whatever a policy recommends: stabilization windows over
//! recent recommendations, then scaling policies (Pods or Percent per period, `selectPolicy`) over recent scale
//! events, then `[minReplicas, maxReplicas]`. Defaults, reasons and messages are kube-controller-manager's.

use super::resource::{ScaleEvent, TimedRecommendation};
use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Max,
    Min,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Pods(i32),
    Percent(i32),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub stabilization_seconds: i64,
    pub select: Select,
    /// (step, period in seconds)
    pub policies: Vec<(Step, i64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub up: Rules,
    pub down: Rules,
}

impl Behavior {
    /// The spec's behavior over the HPA's defaults (up: no window, 4 pods or 100% per 15 s; down: a 300 s
    /// window, 100% per 15 s); errors name the field.
    pub fn from_spec(spec: Option<&HorizontalPodAutoscalerBehavior>) -> Result<Behavior, String> {
        let up_default = Rules { stabilization_seconds: 0, select: Select::Max, policies: vec![(Step::Percent(100), 15), (Step::Pods(4), 15)] };
        let down_default = Rules { stabilization_seconds: 300, select: Select::Max, policies: vec![(Step::Percent(100), 15)] };
        let up = rules(spec.and_then(|behavior| behavior.scale_up.as_ref()), up_default, "spec.behavior.scaleUp")?;
        let down = rules(spec.and_then(|behavior| behavior.scale_down.as_ref()), down_default, "spec.behavior.scaleDown")?;
        Ok(Behavior { up, down })
    }

    fn longest_memory(&self) -> i64 {
        let periods = self.up.policies.iter().chain(&self.down.policies).map(|(_, period)| *period);
        periods.chain([self.up.stabilization_seconds, self.down.stabilization_seconds]).max().unwrap_or(0)
    }
}

fn rules(spec: Option<&HPAScalingRules>, default: Rules, field: &str) -> Result<Rules, String> {
    let Some(spec) = spec else { return Ok(default) };
    let stabilization_seconds = i64::from(spec.stabilization_window_seconds.map_or(Ok(default.stabilization_seconds as i32), |seconds| {
        if (0..=3600).contains(&seconds) {
            Ok(seconds)
        } else {
            Err(format!("{field}.stabilizationWindowSeconds: {seconds} is outside 0..3600"))
        }
    })?);
    let select = match spec.select_policy.as_deref() {
        None | Some("Max") => Select::Max,
        Some("Min") => Select::Min,
        Some("Disabled") => Select::Disabled,
        Some(other) => return Err(format!("{field}.selectPolicy: {other:?} is not Max, Min or Disabled")),
    };
    let policies = match &spec.policies {
        None => default.policies,
        Some(policies) => {
            let mut parsed = Vec::new();
            for (index, policy) in policies.iter().enumerate() {
                let at = format!("{field}.policies[{index}]");
                if !(1..=1800).contains(&policy.period_seconds) {
                    return Err(format!("{at}.periodSeconds: {} is outside 1..1800", policy.period_seconds));
                }
                if policy.value <= 0 {
                    return Err(format!("{at}.value: {} must be positive", policy.value));
                }
                let step = match policy.type_.as_str() {
                    "Pods" => Step::Pods(policy.value),
                    "Percent" => Step::Percent(policy.value),
                    other => return Err(format!("{at}.type: {other:?} is not Pods or Percent")),
                };
                parsed.push((step, i64::from(policy.period_seconds)));
            }
            if parsed.is_empty() && select != Select::Disabled {
                return Err(format!("{field}.policies: at least one policy is needed unless selectPolicy is Disabled"));
            }
            parsed
        }
    };
    Ok(Rules { stabilization_seconds, select, policies })
}

/// A condition as the envelope sets it: (status, reason, message).
pub type Verdict = (bool, &'static str, &'static str);

#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    pub replicas: i32,
    /// AbleToScale: `ScaleUpStabilized`, `ScaleDownStabilized` or `ReadyForNewScale`.
    pub able_to_scale: Verdict,
    /// ScalingLimited: true with `ScaleUpLimit`, `ScaleDownLimit`, `TooManyReplicas` or `TooFewReplicas`.
    pub limited: Verdict,
}

/// What the host remembers of an Autoscaler between syncs (in memory) and across restarts (in its status).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The latest time each replica count was recommended. One entry per count loses nothing: a window holds
    /// a count exactly when it holds the latest time it was recommended.
    pub recommendations: Vec<TimedRecommendation>,
    pub scale_events: Vec<ScaleEvent>,
}

/// How far behind the status may let a recommendation's time fall before it is written again. An Autoscaler
/// that keeps recommending the same count then changes nothing in its status for this long, and its status is
/// not written (a thousand steady Autoscalers cost no writes); a restart reads the times back this much later,
/// so it can only make a window hold a count longer, never shorter.
pub const STATUS_TIME_SLACK: i64 = 60;

impl History {
    /// From an Autoscaler's status, after a restart or a failover (see [`STATUS_TIME_SLACK`]).
    pub fn restored(recommendations: &[TimedRecommendation], scale_events: &[ScaleEvent]) -> History {
        let later = |time: &Time| Time(time.0.checked_add(jiff::SignedDuration::from_secs(STATUS_TIME_SLACK)).unwrap_or(time.0));
        History {
            recommendations: recommendations
                .iter()
                .map(|recommendation| TimedRecommendation { time: later(&recommendation.time), replicas: recommendation.replicas })
                .collect(),
            scale_events: scale_events.to_vec(),
        }
    }

    /// The recommendations as the status keeps them: a time the status already has stands while it is less than
    /// [`STATUS_TIME_SLACK`] behind the one in memory.
    pub fn persisted_recommendations(&self, written: &[TimedRecommendation]) -> Vec<TimedRecommendation> {
        self.recommendations
            .iter()
            .map(|recommendation| {
                let kept = written.iter().find(|old| {
                    let behind = recommendation.time.0.as_second() - old.time.0.as_second();
                    old.replicas == recommendation.replicas && (0..STATUS_TIME_SLACK).contains(&behind)
                });
                kept.unwrap_or(recommendation).clone()
            })
            .collect()
    }

    fn recommend(&mut self, replicas: i32, now: Timestamp) {
        self.recommendations.retain(|earlier| earlier.replicas != replicas);
        self.recommendations.push(TimedRecommendation { time: Time(now), replicas });
    }
}

/// Whether `time` lies within the last `seconds` before `now`, as the HPA's `timestamp.After(now - window)`: a
/// recommendation made exactly one window ago (a 60 s window, a 15 s sync) no longer counts. A time read back
/// from the status has lost its fraction of a second: a time in whole seconds counts a second longer, so a
/// restart never shortens a window or a rate limit's period (and nothing is shifted, so nothing drifts).
fn within(time: &Time, now: Timestamp, seconds: i64) -> bool {
    let whole = i64::from(time.0.subsec_nanosecond() == 0);
    seconds > 0 && now.duration_since(time.0) < jiff::SignedDuration::from_secs(seconds + whole)
}

impl History {
    /// Replicas added (`up`) or removed within the last `period` seconds.
    fn changed_within(&self, period: i64, now: Timestamp, up: bool) -> i32 {
        let recent = self.scale_events.iter().filter(|event| within(&event.time, now, period));
        recent.map(|event| event.change).filter(|change| (*change > 0) == up).map(i32::abs).sum()
    }

    pub fn record_scale(&mut self, change: i32, now: Timestamp) {
        self.scale_events.push(ScaleEvent { time: Time(now), change });
    }

    /// Forgets what no window or period looks at any more.
    fn prune(&mut self, behavior: &Behavior, now: Timestamp) {
        let memory = behavior.longest_memory();
        self.recommendations.retain(|recommendation| within(&recommendation.time, now, memory));
        self.scale_events.retain(|event| within(&event.time, now, memory));
    }
}

/// kube-controller-manager's `normalizeDesiredReplicasWithBehaviors`: stabilize `recommended` over the
/// windows, record it, then hold it to the rate limits and to `[min, max]`.
pub fn normalize(behavior: &Behavior, history: &mut History, now: Timestamp, current: i32, recommended: i32, min: i32, max: i32) -> Normalized {
    history.prune(behavior, now);
    if history.recommendations.is_empty() && behavior.down.stabilization_seconds > 0 {
        // A fresh Autoscaler does not scale down at once: it starts with the current size as a recommendation.
        history.recommend(current, now);
    }
    let (mut up_floor, mut down_ceiling) = (recommended, recommended);
    for earlier in &history.recommendations {
        if within(&earlier.time, now, behavior.up.stabilization_seconds) {
            up_floor = up_floor.min(earlier.replicas);
        }
        if within(&earlier.time, now, behavior.down.stabilization_seconds) {
            down_ceiling = down_ceiling.max(earlier.replicas);
        }
    }
    let stabilized = current.max(up_floor).min(down_ceiling);
    history.recommend(recommended, now);
    let able_to_scale = if stabilized != recommended {
        if recommended >= current {
            (true, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation")
        } else {
            (true, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation")
        }
    } else {
        (true, "ReadyForNewScale", "recommended size matches current size")
    };
    let (replicas, reason, message) = rate_limited(behavior, history, now, current, stabilized, min, max);
    Normalized { replicas, able_to_scale, limited: (replicas != stabilized, reason, message) }
}

/// The largest (or, with `Min`, smallest) change the rules allow from the size at the start of each period.
fn limit(rules: &Rules, history: &History, now: Timestamp, current: i32, up: bool) -> i32 {
    if rules.select == Select::Disabled {
        return current;
    }
    let proposals = rules.policies.iter().map(|(step, period)| {
        let start = current - history.changed_within(*period, now, true) + history.changed_within(*period, now, false);
        let start = i64::from(start);
        let proposal = match (step, up) {
            (Step::Pods(pods), true) => start + i64::from(*pods),
            (Step::Pods(pods), false) => start - i64::from(*pods),
            // Rounded up: a small percentage of a few pods must still add one.
            (Step::Percent(percent), true) => (start as f64 * (1.0 + f64::from(*percent) / 100.0)).ceil() as i64,
            (Step::Percent(percent), false) => (start as f64 * (1.0 - f64::from(*percent) / 100.0)) as i64,
        };
        proposal.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    });
    // Max picks the biggest change: the highest ceiling up, the lowest floor down.
    match (rules.select, up) {
        (Select::Min, true) | (Select::Max, false) => proposals.min(),
        _ => proposals.max(),
    }
    .unwrap_or(current)
}

/// kube-controller-manager's `convertDesiredReplicasWithBehaviorRate`.
fn rate_limited(behavior: &Behavior, history: &History, now: Timestamp, current: i32, desired: i32, min: i32, max: i32) -> (i32, &'static str, &'static str) {
    if desired > current {
        let up_limit = limit(&behavior.up, history, now, current, true).max(current);
        let (ceiling, reason, message) = if max > up_limit {
            (up_limit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
        } else {
            (max, "TooManyReplicas", "the desired replica count is more than the maximum replica count")
        };
        if desired > ceiling {
            return (ceiling, reason, message);
        }
    } else if desired < current {
        let down_limit = limit(&behavior.down, history, now, current, false).min(current);
        let (floor, reason, message) = if min < down_limit {
            (down_limit, "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate")
        } else {
            (min, "TooFewReplicas", "the desired replica count is less than the minimum replica count")
        };
        if desired < floor {
            return (floor, reason, message);
        }
    }
    (desired, "DesiredWithinRange", "the desired count is within the acceptable range")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::autoscaling::v2::HPAScalingPolicy;

    /// A time as the host takes it (with a fraction of a second; a whole-second one reads as restored from a
    /// status).
    fn at(seconds: i64) -> Timestamp {
        Timestamp::new(1_800_000_000 + seconds, 250_000_000).unwrap()
    }

    fn defaults() -> Behavior {
        Behavior::from_spec(None).unwrap()
    }

    #[test]
    fn scale_up_by_default_is_at_most_four_pods_or_double_per_fifteen_seconds() {
        let mut history = History::default();
        let normalized = normalize(&defaults(), &mut history, at(0), 2, 20, 1, 100);
        assert_eq!(normalized.replicas, 6, "max(2 + 4, 2 * 2)");
        assert_eq!(normalized.limited, (true, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"));
        history.record_scale(4, at(0));
        // Within the same 15 s the period started at 2: nothing more.
        assert_eq!(normalize(&defaults(), &mut history, at(10), 6, 20, 1, 100).replicas, 6);
        assert_eq!(normalize(&defaults(), &mut history, at(14), 6, 20, 1, 100).replicas, 6);
        // Exactly one period later (the HPA's `timestamp.After(now - period)`) a new period starts from 6: 12.
        assert_eq!(normalize(&defaults(), &mut history, at(15), 6, 20, 1, 100).replicas, 12);
        assert_eq!(normalize(&defaults(), &mut History::default(), at(0), 8, 20, 1, 10).limited.1, "TooManyReplicas");
    }

    #[test]
    fn a_time_read_back_in_whole_seconds_counts_a_second_longer_and_is_not_moved() {
        let event = ScaleEvent { time: Time(Timestamp::from_second(1_800_000_000).unwrap()), change: 4 };
        let restored = History::restored(&[], std::slice::from_ref(&event));
        assert_eq!(restored.scale_events, std::slice::from_ref(&event), "not moved: restarts add no drift");
        // It may have happened up to a second later than it says.
        assert!(within(&event.time, Timestamp::new(1_800_000_015, 500_000_000).unwrap(), 15));
        assert!(!within(&event.time, Timestamp::from_second(1_800_000_016).unwrap(), 15));
        assert!(!within(&Time(at(0)), at(15), 15), "a time taken here: exactly one period later it is out");
    }

    #[test]
    fn scale_down_waits_for_the_highest_recommendation_of_five_minutes() {
        let mut history = History::default();
        let first = normalize(&defaults(), &mut history, at(0), 10, 2, 1, 100);
        assert_eq!(first.replicas, 10, "a fresh Autoscaler remembers the current size");
        assert_eq!(first.able_to_scale.1, "ScaleDownStabilized");
        assert_eq!(normalize(&defaults(), &mut history, at(100), 10, 3, 1, 100).replicas, 10);
        assert_eq!(normalize(&defaults(), &mut history, at(299), 10, 2, 1, 100).replicas, 10);
        // At 300 s the initial 10 left the window (a recommendation exactly one window old no longer counts, as in
        // the HPA: with a 15 s sync and a 60 s window, it holds four syncs, not five); the highest since is 3.
        assert_eq!(normalize(&defaults(), &mut history, at(300), 10, 2, 1, 100).replicas, 3);
    }

    #[test]
    fn the_status_keeps_one_time_per_count_and_a_restart_never_shortens_a_window() {
        let mut history = History::default();
        for (second, wanted) in [(0, 10), (15, 4), (30, 10), (45, 4)] {
            normalize(&defaults(), &mut history, at(second), 10, wanted, 1, 100);
        }
        let counts: Vec<(i32, i64)> = history.recommendations.iter().map(|r| (r.replicas, r.time.0.as_second() - at(0).as_second())).collect();
        assert_eq!(counts, [(10, 30), (4, 45)], "the latest time of each count");
        // Written at 45 s; 55 s later the same counts still stand in the status, at 61 s behind they are renewed.
        let written = history.persisted_recommendations(&[]);
        normalize(&defaults(), &mut history, at(100), 10, 4, 1, 100);
        assert_eq!(history.persisted_recommendations(&written), written, "nothing to write");
        normalize(&defaults(), &mut history, at(106), 10, 4, 1, 100);
        let renewed = history.persisted_recommendations(&written);
        assert_eq!(renewed[0], written[0], "10 was last recommended at 30 s: unchanged");
        assert_eq!(renewed[1].time.0, at(106), "4 was 61 s behind");
        // A restart at 300 s reads 10 as recommended at 90 s, not 30 s: the 300 s window still holds it at 330 s.
        let mut restored = History::restored(&written, &[]);
        assert_eq!(normalize(&defaults(), &mut restored, at(331), 10, 4, 1, 100).replicas, 10);
        assert_eq!(normalize(&defaults(), &mut history, at(331), 10, 4, 1, 100).replicas, 4, "in memory: exact");
    }

    #[test]
    fn a_noisy_recommendation_does_not_flap() {
        let mut history = History::default();
        let mut replicas = 5;
        for (step, wanted) in [5, 8, 3, 7, 4, 8, 3, 6].into_iter().enumerate() {
            let normalized = normalize(&defaults(), &mut history, at(15 * step as i64), replicas, wanted, 1, 100);
            assert!(normalized.replicas >= replicas, "step {step}: never down within the window ({} -> {})", replicas, normalized.replicas);
            replicas = normalized.replicas;
        }
        assert_eq!(replicas, 8);
    }

    #[test]
    fn percent_steps_round_up_going_up_and_down_going_down_and_min_max_clamp() {
        let spec: HorizontalPodAutoscalerBehavior = serde_json::from_value(serde_json::json!({
            "scaleUp": {"policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]},
            "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}], "selectPolicy": "Min"}
        }))
        .unwrap();
        let behavior = Behavior::from_spec(Some(&spec)).unwrap();
        assert_eq!(normalize(&behavior, &mut History::default(), at(0), 3, 10, 1, 100).replicas, 4, "ceil(3 * 1.1)");
        assert_eq!(normalize(&behavior, &mut History::default(), at(0), 9, 1, 1, 100).replicas, 4, "floor(9 * 0.5)");
        let floor = normalize(&behavior, &mut History::default(), at(0), 9, 1, 6, 100);
        assert_eq!((floor.replicas, floor.limited.1), (6, "TooFewReplicas"));
    }

    #[test]
    fn disabled_direction_never_moves_and_bad_specs_name_the_field() {
        let spec = HorizontalPodAutoscalerBehavior {
            scale_down: Some(HPAScalingRules { select_policy: Some("Disabled".into()), stabilization_window_seconds: Some(0), ..Default::default() }),
            ..Default::default()
        };
        let behavior = Behavior::from_spec(Some(&spec)).unwrap();
        assert_eq!(normalize(&behavior, &mut History::default(), at(0), 9, 1, 1, 100).replicas, 9);
        let bad = HorizontalPodAutoscalerBehavior {
            scale_up: Some(HPAScalingRules {
                policies: Some(vec![HPAScalingPolicy { type_: "Pods".into(), value: 0, period_seconds: 15 }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(Behavior::from_spec(Some(&bad)).unwrap_err(), "spec.behavior.scaleUp.policies[0].value: 0 must be positive");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

        fn rules(longest_window: i64) -> impl Strategy<Value = Rules> {
            let step = prop_oneof![(1..6i32).prop_map(Step::Pods), (10..200i32).prop_map(Step::Percent)];
            let select = prop_oneof![4 => Just(Select::Max), 4 => Just(Select::Min), 1 => Just(Select::Disabled)];
            (0..=longest_window, select, prop::collection::vec((step, 5..60i64), 1..3)).prop_map(|(stabilization_seconds, select, policies)| Rules {
                stabilization_seconds,
                select,
                policies,
            })
        }

        /// A behavior, bounds, a starting size within them, and syncs: (seconds since the last, recommendation).
        fn scenario() -> impl Strategy<Value = (Behavior, i32, i32, i32, Vec<(i64, i32)>)> {
            (rules(60), rules(120), 1..4i32, 0..40i32, 0..40i32, prop::collection::vec((1..30i64, 0..45i32), 1..40)).prop_map(
                |(up, down, min, span, start, syncs)| {
                    let max = min + span;
                    (Behavior { up, down }, min, max, min + start % (span + 1), syncs)
                },
            )
        }

        /// Whether a policy allows reaching `replicas` given the scale events (time, change) within its period, this
        /// one included: a Pods step bounds the net change over any period, a Percent step the size against the size
        /// at the period's start.
        fn allows(step: Step, period: i64, now: i64, replicas: i32, events: &[(i64, i32)], up: bool) -> bool {
            let net: i32 = events.iter().filter(|(time, _)| now - time < period).map(|(_, change)| change).sum();
            let start = f64::from(replicas - net);
            match (step, up) {
                (Step::Pods(pods), true) => net <= pods,
                (Step::Pods(pods), false) => -net <= pods,
                (Step::Percent(percent), true) => f64::from(replicas) <= (start * (1.0 + f64::from(percent) / 100.0)).ceil(),
                (Step::Percent(percent), false) => f64::from(replicas) >= (start * (1.0 - f64::from(percent) / 100.0)).floor(),
            }
        }

        /// HPA behavior as a property: whatever a policy recommends, sync after sync, the size stays within
        /// `[min, max]`, moves only towards the recommendation, never in a disabled direction, never past a
        /// recommendation its stabilization window holds, and never faster than its rules allow (Max: some policy
        /// allows the move; Min: every policy does), counted from the sizes reached, not from the host's history.
        #[test]
        fn no_sequence_of_recommendations_moves_replicas_faster_than_the_behavior_allows() {
            let config = Config { cases: 512, failure_persistence: None, ..Config::default() };
            let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]));
            runner
                .run(&scenario(), |(behavior, min, max, start, syncs)| {
                    let mut history = History::default();
                    let (mut now, mut current) = (0i64, start);
                    let mut events: Vec<(i64, i32)> = Vec::new();
                    let mut recommended_at: Vec<(i64, i32)> = Vec::new();
                    for (elapsed, recommended) in syncs {
                        now += elapsed;
                        let replicas = normalize(&behavior, &mut history, at(now), current, recommended, min, max).replicas;
                        recommended_at.push((now, recommended));
                        let sync =
                            format!("at {now}s: {current} -> {replicas}, recommended {recommended}, bounds [{min}, {max}], {behavior:?}, events {events:?}");
                        prop_assert!((min..=max).contains(&replicas), "out of bounds {sync}");
                        let goal = recommended.clamp(min, max);
                        prop_assert!(
                            replicas.min(current) >= goal.min(current) && replicas.max(current) <= goal.max(current),
                            "not towards the recommendation {sync}"
                        );
                        if replicas != current {
                            let up = replicas > current;
                            let rules = if up { &behavior.up } else { &behavior.down };
                            prop_assert!(rules.select != Select::Disabled, "moved in a disabled direction {sync}");
                            let window = recommended_at.iter().filter(|(time, _)| now - time < rules.stabilization_seconds || *time == now);
                            let held = window.map(|(_, held)| *held);
                            let past_held =
                                if up { held.min().is_some_and(|lowest| replicas > lowest) } else { held.max().is_some_and(|highest| replicas < highest) };
                            prop_assert!(!past_held, "past a recommendation the stabilization window holds {sync}");
                            events.push((now, replicas - current));
                            let mut verdicts = rules.policies.iter().map(|(step, period)| allows(*step, *period, now, replicas, &events, up));
                            let allowed = match rules.select {
                                Select::Min => verdicts.all(|allowed| allowed),
                                Select::Max | Select::Disabled => verdicts.any(|allowed| allowed),
                            };
                            prop_assert!(allowed, "faster than the rules allow {sync}");
                            history.record_scale(replicas - current, at(now));
                        }
                        current = replicas;
                    }
                    Ok(())
                })
                .unwrap();
        }
    }
}
