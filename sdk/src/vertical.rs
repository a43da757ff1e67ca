//! The Vertical Pod Autoscaler's recommender, per container, for scale policies that size pods: what
//! `k8s.io/autoscaler/vertical-pod-autoscaler` v1.8.1 computes (`pkg/recommender/{util,model,logic}`), with its
//! constants. CPU usage goes into a decaying histogram (weight 0.1 a sample, half-life 24 h); memory into one of
//! peaks, one per container and 24 h window, an out-of-memory kill adding a bumped peak; a recommendation is a
//! percentile of each (target 0.9, bounds 0.5 and 0.95) plus a 15% margin, the bounds widened while the history
//! is short, and at least 25 millicores and 250 MiB per pod shared among its containers.
//!
//! What the recommender keeps in memory and in its `VerticalPodAutoscalerCheckpoint` objects is a [`Recommender`]
//! here: a policy answers it as its `state`, and the host hands it back at the next call. Unlike a checkpoint,
//! which rounds the weights to integers, the state keeps them exactly, since it is written at every call.

use crate::types::{ContainerRecommendation, ContainerUsage, ResourceAmounts, ScaleRequest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `epsilon = 0.001 * minSampleWeight` (`model/aggregations_config.go`): a bucket lighter than this is empty.
const EPSILON: f64 = 1e-4;
/// The weight of each CPU sample (`minSampleWeight`; v1.8 no longer weighs samples by the request).
const CPU_SAMPLE_WEIGHT: f64 = 0.1;
/// The weight of each memory peak.
const MEMORY_PEAK_WEIGHT: f64 = 1.0;
/// Both histograms' half-life (`DefaultCPUHistogramDecayHalfLife`, `DefaultMemoryHistogramDecayHalfLife`).
pub const HALF_LIFE_SECONDS: i64 = 24 * 3600;
/// One memory peak per container per interval (`DefaultMemoryAggregationInterval`).
pub const MEMORY_INTERVAL_SECONDS: i64 = 24 * 3600;
/// Eight intervals: a container with no sample for this long is forgotten (`MemoryAggregationWindowLength`).
const AGGREGATION_WINDOW_SECONDS: i64 = 8 * MEMORY_INTERVAL_SECONDS;
/// The weights are rescaled once a sample is this many half-lives past the reference (`maxDecayExponent`).
const MAX_DECAY_EXPONENT: i64 = 100;
/// `MaxResourceAmount` (`model/types.go`): no amount is larger.
const MAX_AMOUNT: f64 = 1e14;
/// The state's format: an unknown one starts over.
const STATE_VERSION: u32 = 1;

/// Exponential buckets (`util/histogram_options.go`): bucket `n` starts at `first * (ratio^n - 1) / (ratio - 1)`.
#[derive(Debug, Clone, Copy)]
struct Buckets {
    first: f64,
    ratio: f64,
    count: usize,
}

impl Buckets {
    /// `NewExponentialHistogramOptions(maxValue, firstBucketSize, 1.05, epsilon)`.
    fn exponential(max: f64, first: f64) -> Buckets {
        let ratio = 1.05;
        let count = ((max * (ratio - 1.0) / first + 1.0).ln() / ratio.ln()).ceil() as usize + 1;
        Buckets { first, ratio, count }
    }

    /// CPU in cores: 0.01 to 1000 (176 buckets).
    fn cpu() -> Buckets {
        Buckets::exponential(1000.0, 0.01)
    }

    /// Memory in bytes: 10 MB to 1 TB (176 buckets).
    fn memory() -> Buckets {
        Buckets::exponential(1e12, 1e7)
    }

    fn find(&self, value: f64) -> usize {
        if value < self.first {
            return 0;
        }
        let bucket = ((value * (self.ratio - 1.0) / self.first + 1.0).ln() / self.ratio.ln()) as usize;
        bucket.min(self.count - 1)
    }

    fn start(&self, bucket: usize) -> f64 {
        if bucket == 0 {
            return 0.0;
        }
        self.first * (self.ratio.powi(bucket as i32) - 1.0) / (self.ratio - 1.0)
    }
}

/// A histogram whose samples weigh `2^((t - reference) / halfLife)` (`util/decaying_histogram.go`): newer samples
/// weigh more, which is the same as older ones decaying. Stored as its non-empty buckets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct DecayingHistogram {
    /// Seconds since the Unix epoch, a multiple of the half-life; None before the first sample.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    reference: Option<i64>,
    #[serde(rename = "w", default)]
    weights: BTreeMap<usize, f64>,
    #[serde(rename = "t", default)]
    total: f64,
}

impl DecayingHistogram {
    fn decay_factor(&mut self, at: i64) -> f64 {
        let shifted = match self.reference {
            Some(reference) => at > reference + MAX_DECAY_EXPONENT * HALF_LIFE_SECONDS,
            None => true,
        };
        if shifted {
            // `t.Round(halfLife)` from Go's zero time, which is a whole number of days before the epoch.
            let new_reference = (at as f64 / HALF_LIFE_SECONDS as f64 + 0.5).floor() as i64 * HALF_LIFE_SECONDS;
            if let Some(old) = self.reference {
                let exponent = ((old - new_reference) as f64 / HALF_LIFE_SECONDS as f64 + 0.5).floor() as i32;
                let factor = 2f64.powi(exponent);
                self.weights.values_mut().for_each(|weight| *weight *= factor);
                self.total *= factor;
                self.weights.retain(|_, weight| *weight >= EPSILON);
            }
            self.reference = Some(new_reference);
        }
        let reference = self.reference.unwrap_or(at);
        ((at - reference) as f64 / HALF_LIFE_SECONDS as f64).exp2()
    }

    fn add(&mut self, buckets: Buckets, value: f64, weight: f64, at: i64) {
        let weight = weight * self.decay_factor(at);
        *self.weights.entry(buckets.find(value)).or_default() += weight;
        self.total += weight;
    }

    fn subtract(&mut self, buckets: Buckets, value: f64, weight: f64, at: i64) {
        let weight = weight * self.decay_factor(at);
        let bucket = buckets.find(value);
        let safe = |from: f64| if from - weight < EPSILON { 0.0 } else { from - weight };
        if let Some(existing) = self.weights.get_mut(&bucket) {
            *existing = safe(*existing);
        }
        self.total = safe(self.total);
        self.weights.retain(|_, weight| *weight >= EPSILON);
    }

    /// The end of the bucket in which the running sum reaches `percentile` of the total (the start of the last
    /// bucket, which has no end); 0 when empty (`util/histogram.go` `Percentile`).
    fn percentile(&self, buckets: Buckets, percentile: f64) -> f64 {
        let mut kept = self.weights.iter().filter(|(_, weight)| **weight >= EPSILON).map(|(bucket, _)| *bucket);
        let Some(min) = kept.next() else { return 0.0 };
        let max = kept.next_back().unwrap_or(min);
        let threshold = percentile * self.total;
        let mut partial = 0.0;
        let mut bucket = min;
        while bucket < max {
            partial += self.weights.get(&bucket).copied().unwrap_or(0.0);
            if partial >= threshold {
                break;
            }
            bucket += 1;
        }
        if bucket < buckets.count - 1 {
            buckets.start(bucket + 1)
        } else {
            buckets.start(bucket)
        }
    }
}

/// One container of one pod (`model/container.go`): its last samples and the memory peak of its current window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ContainerWindow {
    #[serde(rename = "cpu", default, skip_serializing_if = "Option::is_none")]
    last_cpu_sample: Option<i64>,
    #[serde(rename = "mem", default, skip_serializing_if = "Option::is_none")]
    last_memory_sample: Option<i64>,
    #[serde(rename = "end", default, skip_serializing_if = "Option::is_none")]
    window_end: Option<i64>,
    #[serde(rename = "peak", default)]
    memory_peak: f64,
    #[serde(rename = "oom", default)]
    oom_peak: f64,
}

/// A container of the workload, over all its pods (`model/aggregate_container_state.go`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Aggregate {
    cpu: DecayingHistogram,
    memory: DecayingHistogram,
    #[serde(rename = "first", default, skip_serializing_if = "Option::is_none")]
    first_sample: Option<i64>,
    #[serde(rename = "last", default, skip_serializing_if = "Option::is_none")]
    last_sample: Option<i64>,
    #[serde(rename = "n", default)]
    samples: u64,
}

impl Aggregate {
    fn add_cpu(&mut self, cores: f64, at: i64) {
        self.cpu.add(Buckets::cpu(), cores, CPU_SAMPLE_WEIGHT, at);
        self.first_sample = Some(self.first_sample.map_or(at, |first| first.min(at)));
        self.last_sample = Some(self.last_sample.map_or(at, |last| last.max(at)));
        self.samples += 1;
    }

    /// `GetConfidence`: the history's length in days, or its samples in days of one a minute, whichever is less.
    fn confidence(&self) -> f64 {
        let (Some(first), Some(last)) = (self.first_sample, self.last_sample) else { return 0.0 };
        let lifespan = (last - first) as f64 / 86400.0;
        let samples = self.samples as f64 / (60.0 * 24.0);
        lifespan.min(samples)
    }
}

/// How the recommender turns histograms into requests: the flags of `pkg/recommender/config` with their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Estimation {
    pub target_cpu_percentile: f64,
    pub lower_bound_cpu_percentile: f64,
    pub upper_bound_cpu_percentile: f64,
    pub target_memory_percentile: f64,
    pub lower_bound_memory_percentile: f64,
    pub upper_bound_memory_percentile: f64,
    /// `--recommendation-margin-fraction`.
    pub safety_margin_fraction: f64,
    /// `--pod-recommendation-min-cpu-millicores`, shared evenly by the pod's containers.
    pub pod_min_cpu_millicores: f64,
    /// `--pod-recommendation-min-memory-mb` (mebibytes), shared evenly by the pod's containers.
    pub pod_min_memory_mb: f64,
    /// `--oom-bump-up-ratio`.
    pub oom_bump_up_ratio: f64,
    /// `--oom-min-bump-up-bytes`.
    pub oom_min_bump_up_bytes: f64,
}

impl Default for Estimation {
    fn default() -> Self {
        Estimation {
            target_cpu_percentile: 0.9,
            lower_bound_cpu_percentile: 0.5,
            upper_bound_cpu_percentile: 0.95,
            target_memory_percentile: 0.9,
            lower_bound_memory_percentile: 0.5,
            upper_bound_memory_percentile: 0.95,
            safety_margin_fraction: 0.15,
            pod_min_cpu_millicores: 25.0,
            pod_min_memory_mb: 250.0,
            oom_bump_up_ratio: 1.2,
            oom_min_bump_up_bytes: 100.0 * 1024.0 * 1024.0,
        }
    }
}

impl Estimation {
    pub fn check(&self) -> Result<(), String> {
        let percentiles = [
            ("targetCpuPercentile", self.target_cpu_percentile),
            ("lowerBoundCpuPercentile", self.lower_bound_cpu_percentile),
            ("upperBoundCpuPercentile", self.upper_bound_cpu_percentile),
            ("targetMemoryPercentile", self.target_memory_percentile),
            ("lowerBoundMemoryPercentile", self.lower_bound_memory_percentile),
            ("upperBoundMemoryPercentile", self.upper_bound_memory_percentile),
        ];
        for (name, value) in percentiles {
            if !(value > 0.0 && value <= 1.0) {
                return Err(format!("{name}: {value} is not within (0, 1]"));
            }
        }
        let positive = [
            ("safetyMarginFraction", self.safety_margin_fraction, 0.0),
            ("podMinCpuMillicores", self.pod_min_cpu_millicores, 0.0),
            ("podMinMemoryMb", self.pod_min_memory_mb, 0.0),
            ("oomBumpUpRatio", self.oom_bump_up_ratio, 1.0),
            ("oomMinBumpUpBytes", self.oom_min_bump_up_bytes, 0.0),
        ];
        for (name, value, least) in positive {
            if !(value.is_finite() && value >= least) {
                return Err(format!("{name}: {value} must be a number of at least {least}"));
            }
        }
        Ok(())
    }
}

/// `ScaleResource`: an amount times a factor, truncated to whole millicores or bytes, within [0, 1e14].
fn scaled(amount: f64, factor: f64) -> f64 {
    let product = amount * factor;
    if product.is_nan() || product < 0.0 {
        0.0
    } else {
        product.min(MAX_AMOUNT).trunc()
    }
}

/// What the recommender knows of one workload: an aggregate per container and a window per pod's container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recommender {
    #[serde(rename = "v")]
    version: u32,
    #[serde(rename = "c", default)]
    containers: BTreeMap<String, Aggregate>,
    /// Keyed `pod/container`.
    #[serde(rename = "p", default)]
    windows: BTreeMap<String, ContainerWindow>,
}

impl Recommender {
    /// The recommender a state answered earlier holds, or a new one when there is none or it cannot be read
    /// (another policy's, another version's).
    pub fn restored(state: Option<&str>) -> Recommender {
        state
            .and_then(|state| serde_json::from_str::<Recommender>(state).ok())
            .filter(|recommender| recommender.version == STATE_VERSION)
            .unwrap_or(Recommender { version: STATE_VERSION, ..Recommender::default() })
    }

    /// The state to answer, for the next call.
    pub fn state(&self) -> String {
        serde_json::to_string(self).expect("the recommender always serializes")
    }

    /// Feeds this call's readings and out-of-memory kills (`cluster_feeder.go`: samples, then OOMs), and forgets
    /// pods and containers gone quiet.
    pub fn observe(&mut self, request: &ScaleRequest, estimation: &Estimation) {
        for container in &request.containers {
            self.observe_container(container, estimation);
        }
        let now = request.now;
        self.windows.retain(|_, window| window.last_cpu_sample.max(window.last_memory_sample).is_some_and(|last| now - last < MEMORY_INTERVAL_SECONDS));
        self.containers.retain(|_, aggregate| aggregate.last_sample.is_some_and(|last| now - last < AGGREGATION_WINDOW_SECONDS));
    }

    fn observe_container(&mut self, container: &ContainerUsage, estimation: &Estimation) {
        let mut samples: Vec<_> = container.samples.iter().collect();
        samples.sort_by_key(|sample| sample.at);
        let aggregate = self.containers.entry(container.name.clone()).or_default();
        for sample in samples {
            let window = self.windows.entry(format!("{}/{}", sample.pod, container.name)).or_default();
            // As `MilliValue()` and `Value()`: whole millicores and bytes, rounded up.
            let cores = (sample.cpu * 1000.0 - 1e-6).ceil().max(0.0) / 1000.0;
            let bytes = (sample.memory - 1e-6).ceil().max(0.0);
            if sample.cpu >= 0.0 && window.last_cpu_sample.is_none_or(|last| sample.at > last) {
                aggregate.add_cpu(cores, sample.at);
                window.last_cpu_sample = Some(sample.at);
            }
            if sample.memory >= 0.0 {
                add_memory(aggregate, window, bytes, sample.at, false);
            }
        }
        for kill in &container.oom_kills {
            let window = self.windows.entry(format!("{}/{}", kill.pod, container.name)).or_default();
            if window.last_memory_sample.is_some_and(|last| kill.at < last - MEMORY_INTERVAL_SECONDS) {
                continue;
            }
            // `RecordOOM`: the request or the window's usage peak (not an earlier OOM's, which would compound).
            let used = kill.memory_request.max(window.memory_peak).trunc();
            let needed = (used + estimation.oom_min_bump_up_bytes).trunc().max(scaled(used, estimation.oom_bump_up_ratio));
            add_memory(aggregate, window, needed, kill.at, true);
        }
    }

    /// The recommendation for each container that has had a sample, by `recommender.go`'s chain: percentile,
    /// margin, confidence (bounds only), and the per-pod minimum shared by the containers of `names`.
    pub fn recommend(&self, names: &[&str], estimation: &Estimation) -> Vec<ContainerRecommendation> {
        let fraction = 1.0 / names.len().max(1) as f64;
        let min_cpu = scaled(estimation.pod_min_cpu_millicores.trunc(), fraction);
        let min_memory = scaled((estimation.pod_min_memory_mb * 1024.0 * 1024.0).trunc(), fraction);
        let margin = |amount: f64| amount + scaled(amount, estimation.safety_margin_fraction);
        names
            .iter()
            .filter_map(|name| {
                let aggregate = self.containers.get(*name).filter(|aggregate| aggregate.samples > 0)?;
                let confidence = aggregate.confidence();
                let estimate = |cpu_percentile: f64, memory_percentile: f64, confidence_factor: f64| {
                    let millicores = (aggregate.cpu.percentile(Buckets::cpu(), cpu_percentile) * 1000.0).trunc();
                    let bytes = aggregate.memory.percentile(Buckets::memory(), memory_percentile).trunc();
                    let cpu = scaled(margin(millicores), confidence_factor).max(min_cpu);
                    let memory = scaled(margin(bytes), confidence_factor).max(min_memory);
                    ResourceAmounts { cpu: Some(cpu / 1000.0), memory: Some(memory) }
                };
                Some(ContainerRecommendation {
                    container: name.to_string(),
                    target: estimate(estimation.target_cpu_percentile, estimation.target_memory_percentile, 1.0),
                    lower_bound: estimate(
                        estimation.lower_bound_cpu_percentile,
                        estimation.lower_bound_memory_percentile,
                        (1.0 + 0.001 / confidence).powf(-2.0),
                    ),
                    upper_bound: estimate(estimation.upper_bound_cpu_percentile, estimation.upper_bound_memory_percentile, 1.0 + 1.0 / confidence),
                })
            })
            .collect()
    }
}

/// `addMemorySample`: one peak per container and window, replaced in the histogram when a larger one comes.
fn add_memory(aggregate: &mut Aggregate, window: &mut ContainerWindow, bytes: f64, at: i64, oom: bool) {
    if !oom && window.last_memory_sample.is_some_and(|last| at < last) {
        return;
    }
    window.last_memory_sample = Some(at);
    let end = *window.window_end.get_or_insert(at);
    let add_peak = if at < end {
        let old = window.memory_peak.max(window.oom_peak);
        if old != 0.0 && bytes > old {
            aggregate.memory.subtract(Buckets::memory(), old, MEMORY_PEAK_WEIGHT, end);
            true
        } else {
            false
        }
    } else {
        let shift = (at - end) / MEMORY_INTERVAL_SECONDS * MEMORY_INTERVAL_SECONDS + MEMORY_INTERVAL_SECONDS;
        window.window_end = Some(end + shift);
        window.memory_peak = 0.0;
        window.oom_peak = 0.0;
        true
    };
    if add_peak {
        let end = window.window_end.unwrap_or(at);
        aggregate.memory.add(Buckets::memory(), bytes, MEMORY_PEAK_WEIGHT, end);
        if oom {
            window.oom_peak = bytes;
        } else {
            window.memory_peak = bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ContainerSample, OomKill};

    fn request(now: i64, containers: Vec<ContainerUsage>) -> ScaleRequest {
        ScaleRequest { now, containers, ..crate::testing::scale_request(1, 1, 1, Vec::new()) }
    }

    fn container(name: &str, samples: Vec<ContainerSample>, oom_kills: Vec<OomKill>) -> ContainerUsage {
        let none = ResourceAmounts { cpu: None, memory: None };
        ContainerUsage { name: name.into(), requests: none, limits: none, samples, oom_kills }
    }

    fn sample(pod: &str, at: i64, cpu: f64, memory: f64) -> ContainerSample {
        ContainerSample { pod: pod.into(), at, cpu, memory }
    }

    /// The weight of one memory peak of a window ending at `end`.
    fn one_peak(histogram: &DecayingHistogram, end: i64) -> f64 {
        ((end - histogram.reference.unwrap()) as f64 / HALF_LIFE_SECONDS as f64).exp2()
    }

    #[test]
    fn bucket_layout_is_the_recommenders() {
        let cpu = Buckets::cpu();
        assert_eq!(cpu.count, 176);
        assert_eq!(Buckets::memory().count, 176);
        assert_eq!(cpu.find(0.005), 0);
        assert_eq!(cpu.find(0.01), 1);
        assert!((cpu.start(1) - 0.01).abs() < 1e-12 && (cpu.start(2) - 0.0205).abs() < 1e-12);
        assert_eq!(cpu.find(5000.0), 175, "values past the end go to the last bucket");
    }

    #[test]
    fn a_percentile_is_the_end_of_its_bucket() {
        let buckets = Buckets::cpu();
        let mut histogram = DecayingHistogram::default();
        assert_eq!(histogram.percentile(buckets, 0.9), 0.0, "empty");
        for value in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] {
            histogram.add(buckets, value, 1.0, 1_800_000_000);
        }
        let p90 = histogram.percentile(buckets, 0.9);
        assert_eq!(p90, buckets.start(buckets.find(0.9) + 1));
        assert!(p90 > 0.9 && p90 < 0.95, "{p90}");
        assert_eq!(histogram.percentile(buckets, 1.0), buckets.start(buckets.find(1.0) + 1));
    }

    #[test]
    fn a_sample_a_half_life_later_weighs_twice_as_much() {
        let buckets = Buckets::cpu();
        let mut histogram = DecayingHistogram::default();
        let day = 1_800_000_000 / 86400 * 86400;
        histogram.add(buckets, 0.1, 1.0, day);
        histogram.add(buckets, 1.0, 1.0, day + HALF_LIFE_SECONDS);
        assert!((histogram.total - 3.0).abs() < 1e-9);
        // Two thirds of the weight is at 1 core: the median is there.
        assert!(histogram.percentile(buckets, 0.5) > 1.0);
        assert!(histogram.percentile(buckets, 0.3) < 0.12, "the end of 0.1's bucket");
        // 150 half-lives later the weights are rescaled rather than overflowing: the old ones vanish.
        histogram.add(buckets, 0.1, 1.0, day + 150 * HALF_LIFE_SECONDS);
        assert!(histogram.total.is_finite() && histogram.total < 2.0, "{}", histogram.total);
        assert!(histogram.percentile(buckets, 0.99) < 0.12);
    }

    #[test]
    fn memory_keeps_one_peak_per_container_and_window() {
        let estimation = Estimation::default();
        let mut recommender = Recommender::restored(None);
        let t0 = 1_800_000_000;
        let mib = 1024.0 * 1024.0;
        let samples = vec![sample("web-1", t0, 0.1, 300.0 * mib), sample("web-1", t0 + 60, 0.1, 500.0 * mib), sample("web-1", t0 + 120, 0.1, 400.0 * mib)];
        recommender.observe(&request(t0 + 120, vec![container("app", samples, vec![])]), &estimation);
        let aggregate = &recommender.containers["app"];
        assert!((aggregate.memory.total - one_peak(&aggregate.memory, t0 + MEMORY_INTERVAL_SECONDS)).abs() < 1e-9, "the 300 MiB peak was replaced by 500 MiB");
        assert_eq!(aggregate.samples, 3);
        let window = &recommender.windows["web-1/app"];
        assert_eq!((window.memory_peak, window.window_end), (500.0 * mib, Some(t0 + MEMORY_INTERVAL_SECONDS)));
        // The next day's window has a peak of its own.
        let next = vec![sample("web-1", t0 + MEMORY_INTERVAL_SECONDS + 5, 0.1, 200.0 * mib)];
        recommender.observe(&request(t0 + MEMORY_INTERVAL_SECONDS + 5, vec![container("app", next, vec![])]), &estimation);
        assert_eq!(recommender.windows["web-1/app"].window_end, Some(t0 + 2 * MEMORY_INTERVAL_SECONDS));
        let memory = &recommender.containers["app"].memory;
        let two = one_peak(memory, t0 + MEMORY_INTERVAL_SECONDS) + one_peak(memory, t0 + 2 * MEMORY_INTERVAL_SECONDS);
        assert!((memory.total - two).abs() < 1e-9, "a peak for each window, the later weighing twice as much");
    }

    #[test]
    fn a_recommendation_is_a_percentile_with_margin_and_the_bounds_widen_while_the_history_is_short() {
        let estimation = Estimation::default();
        let mut recommender = Recommender::restored(None);
        let t0 = 1_800_000_000;
        // Two days of one sample a minute, 0.5 core and 600 MB.
        let samples: Vec<_> = (0..2 * 1440).map(|minute| sample("web-1", t0 + minute * 60, 0.5, 6e8)).collect();
        recommender.observe(&request(t0 + 2 * 86400, vec![container("app", samples, vec![])]), &estimation);
        let [recommendation] = recommender.recommend(&["app"], &estimation).try_into().unwrap();
        let cpu_bucket_end = Buckets::cpu().start(Buckets::cpu().find(0.5) + 1);
        let millicores = (cpu_bucket_end * 1000.0).trunc();
        assert_eq!(recommendation.target.cpu, Some((millicores + (millicores * 0.15).trunc()) / 1000.0));
        let memory_bucket_end = Buckets::memory().start(Buckets::memory().find(6e8) + 1).trunc();
        assert_eq!(recommendation.target.memory, Some(memory_bucket_end + (memory_bucket_end * 0.15).trunc()));
        let confidence = recommender.containers["app"].confidence();
        assert!((confidence - (2.0 * 86400.0 - 60.0) / 86400.0).abs() < 1e-9, "{confidence}");
        let upper = recommendation.upper_bound.cpu.unwrap();
        assert!((upper / recommendation.target.cpu.unwrap() - (1.0 + 1.0 / confidence)).abs() < 0.01, "{upper}");
        assert!(recommendation.lower_bound.cpu.unwrap() <= recommendation.target.cpu.unwrap());
        // The state is read back exactly.
        let restored = Recommender::restored(Some(&recommender.state()));
        assert_eq!(restored, recommender);
        assert_eq!(Recommender::restored(Some("{\"v\": 99}")), Recommender::restored(None), "another version starts over");
    }

    #[test]
    fn the_pod_minimum_is_shared_by_its_containers_and_an_oom_bumps_memory() {
        let estimation = Estimation::default();
        let mut recommender = Recommender::restored(None);
        let t0 = 1_800_000_000;
        let mib = 1024.0 * 1024.0;
        let idle = vec![sample("web-1", t0, 0.001, mib)];
        let kill = OomKill { pod: "web-1".into(), at: t0 + 30, memory_request: 500.0 * mib };
        let containers = vec![container("app", idle.clone(), vec![kill]), container("sidecar", idle, vec![])];
        recommender.observe(&request(t0 + 30, containers), &estimation);
        let recommendations = recommender.recommend(&["app", "sidecar"], &estimation);
        let sidecar = &recommendations[1].target;
        assert_eq!(sidecar.cpu, Some(0.012), "25 millicores shared by two containers, truncated");
        assert_eq!(sidecar.memory, Some(125.0 * mib));
        // The OOM: max(500 MiB + 100 MiB, 1.2 * 500 MiB) = 600 MiB, a peak replacing the 1 MiB one.
        let memory = recommendations[0].target.memory.unwrap();
        let bucket_end = Buckets::memory().start(Buckets::memory().find(600.0 * mib) + 1).trunc();
        assert_eq!(memory, bucket_end + (bucket_end * 0.15).trunc());
        let memory = &recommender.containers["app"].memory;
        assert!((memory.total - one_peak(memory, t0 + MEMORY_INTERVAL_SECONDS)).abs() < 1e-9);
    }
}
