//! `hpa` against kube-controller-manager: every case of the replica calculator's tests
//! (`pkg/controller/podautoscaler/replica_calculator_test.go`) that the scale contract can express, and the
//! worked examples of the Kubernetes documentation, as rows run through the policy. A row's label starts with
//! the Go test (and subtest) it comes from, so a failure names the case.
//!
//! How the Go fixtures become contract input:
//! - The fake metrics API reports two containers per pod, each using `level` millicores and requesting
//!   `request`; the host sums containers, so a pod here reads `2 * level` of `2 * request` ([`cpu`]).
//! - Pods are classified by the HPA's `groupPods` before they reach a policy (`host/src/autoscaler/metrics_source.rs`):
//!   a pod without a reading is missing whatever its readiness, a pending pod is unready, and readiness only
//!   matters for CPU, where a pod in its initialization period whose reading predates its readiness ("hot CPU")
//!   is unready too ([`hot`]). For Pods metrics every running pod counts, so the `CMUnreadyHotCpu` rows have
//!   ready pods: that is what the Go test checks (its unready pods are not set aside).
//! - Failed pods and pods being deleted never reach the policy (the host drops them), nor do readings of pods
//!   outside the target: those rows simply omit them.
//! - Custom and external quantities are written in the Go tests' milli-units and reach the policy as plain
//!   numbers (`20000` is `20`), as the host's quantity parsing gives them.
//! - The usage a row checks is the Go test's `expectedUtilization` (whole percent, compared exactly) or
//!   `expectedUsage` (milli-units, millicores for CPU; the Go side truncates or rounds up to a whole
//!   milli-unit, so it is compared to within one).
//!
//! Not expressible, and why:
//! - The `container ...` subtests of `TestReplicaCalcResourceScale` (scale up: container metric, hot-CPU
//!   container, failed pods with missing container metric, container metrics with failed or deleted pods,
//!   scale down: container metric, container metric excluding unready / unscheduled / hot-CPU pods or with
//!   failed pods, still-running pods being deleted): the host reads `Resource`, `Pods`, `Object` and
//!   `External` metrics, not `ContainerResource`, so the contract carries whole-pod usage only.
//! - `TestGroupPods`, `TestCalculateRequests` and `TestCalculatePodRequestsFromContainers_NonExistentContainer`:
//!   pod classification and request sums are the host's work; the contract receives their result (`ready`,
//!   the pod's summed `request`).
//! - `expectedRawValue` and the metric timestamps: the contract's proposal carries the utilization, not the
//!   raw average, and no timestamp.

use crate::Hpa;
use wasp_sdk::autoscaling::{propose, Tolerance};
use wasp_sdk::guest::build;
use wasp_sdk::testing::scale_request;
use wasp_sdk::types::{Metric, MetricSource, MetricTarget, PodMetric};
use wasp_sdk::Scale;

/// One pod of a Resource or Pods metric: its readiness as the host reports it, its reading (`level`, None if
/// the metrics API has none for it) and its request, both per container in millicores for CPU.
#[derive(Debug, Clone, Copy)]
struct Pod {
    ready: bool,
    level: Option<i64>,
    request: Option<i64>,
}

/// A ready pod reading `level`, requesting one core per container (the Go fixtures' `1.0`).
const fn ready(level: i64) -> Pod {
    Pod { ready: true, level: Some(level), request: Some(1000) }
}

/// A pod whose Ready condition is False: set aside, and counted at 0 on a scale-up.
const fn unready(level: i64) -> Pod {
    Pod { ready: false, ..ready(level) }
}

/// A pod started within the CPU initialization period whose reading predates its readiness
/// (`hotCPUCreationTime`): the host's `Readiness::cpu_ready` reports it unready, as `groupPods` does.
const fn hot(level: i64) -> Pod {
    unready(level)
}

/// A running pod the metrics API has no reading for.
const MISSING: Pod = Pod { ready: true, level: None, request: Some(1000) };

/// A pending pod (`PodPending`): unready, whatever it reads.
const PENDING: Pod = Pod { ready: false, level: None, request: Some(1000) };

impl Pod {
    const fn req(self, request: i64) -> Pod {
        Pod { request: Some(request), ..self }
    }

    const fn no_request(self) -> Pod {
        Pod { request: None, ..self }
    }
}

fn metric(name: &str, source: MetricSource, target: MetricTarget, pods: Vec<PodMetric>, value: Option<f64>) -> Metric {
    Metric { name: name.into(), source, target, pods, value, error: None, history: Vec::new() }
}

fn pod_metrics(pods: &[Pod], value: impl Fn(i64) -> f64, request: impl Fn(i64) -> f64) -> Vec<PodMetric> {
    pods.iter()
        .enumerate()
        .map(|(index, pod)| PodMetric {
            pod: format!("test-pod-{index}"),
            ready: pod.ready,
            started: 0,
            value: pod.level.map(&value),
            request: pod.request.map(&request),
        })
        .collect()
}

/// CPU held to `target` percent of requests; two containers per pod, as in the Go fixtures.
fn cpu(target: i32, pods: &[Pod]) -> Metric {
    let pods = pod_metrics(pods, |level| 2.0 * level as f64, |request| 2.0 * request as f64);
    metric("cpu", MetricSource::Resource, MetricTarget::Utilization(f64::from(target)), pods, None)
}

/// CPU held to an average of `target` millicores per pod; each pod's `level` is its whole usage.
fn cpu_average(target: i64, pods: &[Pod]) -> Metric {
    let pods = pod_metrics(pods, |level| level as f64, |request| request as f64);
    metric("cpu", MetricSource::Resource, MetricTarget::AverageValue(target as f64), pods, None)
}

/// A milli-value of the Go tests as the plain number the host hands over.
fn milli(value: i64) -> f64 {
    value as f64 / 1000.0
}

/// A Pods metric (`qps`) held to an average of `target` milli-units per pod.
fn pods_metric(target: i64, pods: &[Pod]) -> Metric {
    let pods = pod_metrics(pods, milli, |_| 0.0);
    let pods = pods.into_iter().map(|pod| PodMetric { request: None, ..pod }).collect();
    metric("qps", MetricSource::Pods, MetricTarget::AverageValue(milli(target)), pods, None)
}

#[derive(Debug, Clone, Copy)]
enum Target {
    /// `targetUsage`: the whole value.
    Value(i64),
    /// `perPodTargetUsage`: the value over the current replicas.
    Average(i64),
}

/// An Object or External metric (`qps`) whose series sum to `values`, on a target with pods of `readiness`.
fn whole(source: MetricSource, values: &[i64], target: Target, readiness: &[bool]) -> Metric {
    let target = match target {
        Target::Value(value) => MetricTarget::Value(milli(value)),
        Target::Average(value) => MetricTarget::AverageValue(milli(value)),
    };
    let pods = readiness
        .iter()
        .enumerate()
        .map(|(index, ready)| PodMetric { pod: format!("test-pod-{index}"), ready: *ready, started: 0, value: None, request: None })
        .collect();
    metric("qps", source, target, pods, Some(values.iter().map(|value| milli(*value)).sum()))
}

fn object(value: i64, target: Target, readiness: &[bool]) -> Metric {
    whole(MetricSource::Object, &[value], target, readiness)
}

fn external(values: &[i64], target: Target, readiness: &[bool]) -> Metric {
    whole(MetricSource::External, values, target, readiness)
}

/// A metric the host could not read.
fn unreadable(name: &str) -> Metric {
    Metric {
        error: Some("unable to get metric: the server is currently unable to handle the request (503)".into()),
        ..metric(name, MetricSource::Pods, MetricTarget::AverageValue(10.0), Vec::new(), None)
    }
}

const ALL_READY_3: [bool; 3] = [true; 3];
const ALL_READY_4: [bool; 4] = [true; 4];
const ALL_READY_5: [bool; 5] = [true; 5];

#[derive(Debug)]
enum Want {
    Replicas(u32),
    /// The call fails with an error containing this.
    Error(&'static str),
}

struct Row {
    label: &'static str,
    current: u32,
    tolerance: Tolerance,
    metrics: Vec<Metric>,
    want: Want,
    /// The first metric's reading: whole percent for Utilization, milli-units otherwise.
    usage: Option<f64>,
}

fn row(label: &'static str, current: u32, metric: Metric, want: u32) -> Row {
    Row { label, current, tolerance: Tolerance::default(), metrics: vec![metric], want: Want::Replicas(want), usage: None }
}

fn fails(label: &'static str, current: u32, metric: Metric, error: &'static str) -> Row {
    Row { want: Want::Error(error), ..row(label, current, metric, 0) }
}

impl Row {
    fn usage(self, usage: impl Into<f64>) -> Row {
        Row { usage: Some(usage.into()), ..self }
    }

    fn tolerance(self, tolerance: impl Into<Tolerance>) -> Row {
        Row { tolerance: tolerance.into(), ..self }
    }

    fn and(mut self, metric: Metric) -> Row {
        self.metrics.push(metric);
        self
    }
}

/// The Go tests' `i64::MAX` milli-value (`math.MaxInt64`), and the int32 replica count it saturates at.
const MAX_MILLI: i64 = i64::MAX;
const MAX_REPLICAS: u32 = i32::MAX as u32;

fn resource_rows() -> Vec<Row> {
    let five = [ready(100), ready(300), ready(500), ready(250), ready(250)];
    vec![
        row("TestReplicaCalcResourceScale/scale up", 3, cpu(30, &[ready(300), ready(500), ready(700)]), 5).usage(50),
        row("TestReplicaCalcResourceScale/scale up: unready pod scales less", 3, cpu(30, &[unready(300), ready(500), ready(700)]), 4).usage(60),
        row("TestReplicaCalcResourceScale/scale up: hot-CPU pod scales less", 3, cpu(30, &[hot(300), ready(500), ready(700)]), 4).usage(60),
        row("TestReplicaCalcResourceScale/no scale: unready pods ignored", 3, cpu(30, &[ready(400), unready(500), unready(700)]), 3).usage(40),
        row("TestReplicaCalcResourceScale/no scale: hot-CPU pods ignored", 3, cpu(30, &[ready(400), hot(500), hot(700)]), 3).usage(40),
        row("TestReplicaCalcResourceScale/scale up: failed pods ignored", 2, cpu(30, &[ready(500), ready(700)]), 4).usage(60),
        row("TestReplicaCalcResourceScale/scale up: pods being deleted are ignored", 2, cpu(30, &[ready(500), ready(700)]), 4).usage(60),
        row("TestReplicaCalcResourceScale/scale down", 5, cpu(50, &five), 3).usage(28),
        row("TestReplicaCalcResourceScale/scale down: exclude unready pods", 5, cpu(50, &[ready(100), ready(300), ready(500), unready(250), unready(250)]), 2)
            .usage(30),
        row("TestReplicaCalcResourceScale/scale down: exclude unscheduled pods", 5, cpu(50, &[ready(100), PENDING, PENDING, PENDING, PENDING]), 1).usage(10),
        row("TestReplicaCalcResourceScale/scale down: ignore hot-CPU pods", 5, cpu(50, &[ready(100), ready(300), ready(500), hot(250), hot(250)]), 2).usage(30),
        row("TestReplicaCalcResourceScale/scale down: failed pods ignored", 5, cpu(50, &five), 3).usage(28),
        row("TestReplicaCalcResourceScale/scale down: pods being deleted are ignored", 5, cpu(50, &five), 3).usage(28),
        // The reading belongs to a pod that is not the target's: the target's one pod is missing. The Go side
        // fails with "no metrics returned matched known pods", the policy with its own words: both refuse.
        fails("TestReplicaCalcDisjointResourcesMetrics", 1, cpu(100, &[MISSING]), "did not receive metrics for targeted pods"),
        row("TestReplicaCalcTolerance", 3, cpu(100, &[ready(1010).req(900), ready(1030).req(1000), ready(1020).req(1100)]), 3).usage(102),
        row("TestReplicaCalcConfigurableTolerance/Outside of a 0% tolerance", 3, cpu(100, &[ready(909).req(900), ready(1010), ready(1111).req(1100)]), 4)
            .tolerance(0.0)
            .usage(101),
        // The Go side's `Tolerances{scaleDown, scaleUp}`.
        row(
            "TestReplicaCalcConfigurableTolerance/Within a 200% scale-up tolerance",
            3,
            cpu(100, &[ready(1890).req(900), ready(1910), ready(1900).req(1100)]),
            3,
        )
        .tolerance(Tolerance { scale_down: 0.1, scale_up: 2.0 })
        .usage(190),
        row(
            "TestReplicaCalcConfigurableTolerance/Outside 8% scale-up tolerance (and superfuous scale-down tolerance)",
            3,
            cpu(100, &[ready(1100).req(900), ready(1080), ready(1090).req(1100)]),
            4,
        )
        .tolerance(Tolerance { scale_down: 2.0, scale_up: 0.08 })
        .usage(109),
        row("TestReplicaCalcConfigurableTolerance/Within a 36% scale-down tolerance", 3, cpu(100, &[ready(660).req(900), ready(640), ready(650).req(1100)]), 3)
            .tolerance(Tolerance { scale_down: 0.36, scale_up: 0.1 })
            .usage(65),
        row(
            "TestReplicaCalcConfigurableTolerance/Outside a 34% scale-down tolerance",
            3,
            cpu(100, &[ready(660).req(900), ready(640), ready(650).req(1100)]),
            2,
        )
        .tolerance(Tolerance { scale_down: 0.34, scale_up: 0.1 })
        .usage(65),
        // Readings of two pods outside the target (test-pod-4, test-pod-5) never reach the policy.
        row("TestReplicaCalcSuperfluousMetrics", 4, cpu(100, &[ready(4000), ready(9500), ready(3000), ready(7000)]), 24).usage(587),
        row("TestReplicaCalcMissingMetrics", 4, cpu(100, &[ready(400), ready(95), MISSING, MISSING]), 3).usage(24),
        // No readings at all (the fourth pod has no request either): the Go side fails reading the metrics API.
        fails("TestReplicaCalcEmptyMetrics", 4, cpu(100, &[MISSING, MISSING, MISSING, MISSING.no_request()]), "metric cpu:"),
        fails("TestReplicaCalcEmptyCPURequest", 1, cpu(100, &[ready(200).no_request()]), "missing request for cpu"),
        row("TestReplicaCalcMissingMetricsNoChangeEq", 2, cpu(100, &[ready(1000), MISSING]), 2).usage(100),
        row("TestReplicaCalcMissingMetricsNoChangeGt", 2, cpu(100, &[ready(1900), MISSING]), 2).usage(190),
        row("TestReplicaCalcMissingMetricsNoChangeLt", 2, cpu(100, &[ready(600), MISSING]), 2).usage(60),
        row("TestReplicaCalcMissingMetricsUnreadyChange", 3, cpu(50, &[unready(100), ready(450), MISSING]), 3).usage(45),
        row("TestReplicaCalcMissingMetricsHotCpuNoChange", 3, cpu(50, &[hot(100), ready(450), MISSING]), 3).usage(45),
        row("TestReplicaCalcMissingMetricsUnreadyScaleUp", 3, cpu(50, &[unready(100), ready(2000), MISSING]), 4).usage(200),
        row("TestReplicaCalcMissingMetricsHotCpuScaleUp", 3, cpu(50, &[hot(100), ready(2000), MISSING]), 4).usage(200),
        row("TestReplicaCalcMissingMetricsUnreadyScaleDown", 4, cpu(50, &[unready(100), ready(100), ready(100), MISSING]), 3).usage(10),
        row("TestReplicaCalcMissingMetricsScaleDownTargetOver100", 4, cpu(300, &[unready(200), ready(100), ready(100).req(2000), MISSING.req(2000)]), 2)
            .usage(6),
        // Three pods while the Deployment's replicas say 2: the missing-metrics guess would want 3, a turn.
        row("TestReplicaCalcDuringRollingUpdateWithMaxSurge", 2, cpu(50, &[ready(100), ready(100), MISSING]), 2).usage(10),
    ]
}

/// `TestReplicaCalcComputedToleranceAlgImplementation`: ten pods using 150m of about 300m each (50%), against
/// a target just past the tolerance (`int32((1 / (2 * 0.9) + 0.01) * 100)` = 56%: scale down to
/// `ceil(1500 / (3000 * 0.5656) * 10)` = 9) and one just inside it (`+ 0.004`: 55%, no change).
fn computed_tolerance_rows() -> Vec<Row> {
    let requests = [400, 200, 310, 290, 302, 298, 301, 299, 300, 300];
    let pods: Vec<Pod> = requests.iter().map(|request| ready(150).req(*request)).collect();
    vec![
        row("TestReplicaCalcComputedToleranceAlgImplementation (scale down)", 10, cpu(56, &pods), 9).usage(50),
        row("TestReplicaCalcComputedToleranceAlgImplementation (within tolerance)", 10, cpu(55, &pods), 10).usage(50),
    ]
}

fn custom_rows() -> Vec<Row> {
    let one_ready = [false, true, false];
    vec![
        row("TestReplicaCalcScaleUpCM", 3, pods_metric(15000, &[ready(20000), ready(10000), ready(30000)]), 4).usage(20000),
        // Readiness and CPU warm-up do not apply to a Pods metric: every pod counts, as the Go test expects.
        row("TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale", 3, pods_metric(15000, &[ready(50000), ready(10000), ready(30000)]), 6).usage(30000),
        row("TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown", 3, pods_metric(15000, &[ready(50000), ready(15000), ready(30000)]), 7).usage(31666),
        row("TestReplicaCalcScaleDownCM", 5, pods_metric(20000, &[ready(12000); 5]), 3).usage(12000),
        row("TestReplicaCalcToleranceCM", 3, pods_metric(20000, &[ready(20000), ready(21000), ready(21000)]), 3).usage(20666),
        row("TestReplicaCalcConfigurableToleranceCM (scale-up tolerance 1%)", 3, pods_metric(20000, &[ready(20000), ready(21000), ready(21000)]), 4)
            .tolerance(0.01)
            .usage(20666),
        row("TestPlainMetricReplicaCalcMissingMetricsNoChangeEq", 5, pods_metric(20000, &[ready(20000), ready(19000), ready(21000), MISSING, MISSING]), 5)
            .usage(20000),
        row("TestReplicaCalcDuringRollingUpdateWithMaxSurgeCM", 2, pods_metric(17000, &[ready(10000), ready(10000), MISSING]), 2).usage(10000),
        // Object metrics.
        row("TestReplicaCalcScaleUpCMObject", 3, object(20000, Target::Value(15000), &ALL_READY_3), 4).usage(20000),
        row("TestReplicaCalcScaleUpCMPerPodObject", 3, object(20000, Target::Average(5000), &ALL_READY_3), 4).usage(6667),
        row("TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods", 3, object(50000, Target::Value(10000), &one_ready), 5).usage(50000),
        row("TestReplicaCalcScaleDownPerPodCMObject", 5, object(6000, Target::Average(2000), &ALL_READY_5), 3).usage(1200),
        row("TestReplicaCalcScaleDownCMObject", 5, object(12000, Target::Value(20000), &ALL_READY_5), 3).usage(12000),
        row("TestReplicaCalcToleranceCMObject", 3, object(20666, Target::Value(20000), &ALL_READY_3), 3).usage(20666),
        row("TestReplicaCalcTolerancePerPodCMObject", 4, object(20166, Target::Average(5000), &ALL_READY_4), 4).usage(5042),
        row("TestReplicaCalcConfigurableToleranceCMObject (scale-up tolerance 1%)", 3, object(20666, Target::Value(20000), &ALL_READY_3), 4)
            .tolerance(0.01)
            .usage(20666),
        row("TestReplicaCalcConfigurableTolerancePerPodCMObject (scale-up tolerance 1%)", 4, object(20208, Target::Average(5000), &ALL_READY_4), 5)
            .tolerance(0.01)
            .usage(5052),
        row("TestReplicaCalcScaleUpOverflow", 3, object(MAX_MILLI, Target::Value(1), &ALL_READY_3), MAX_REPLICAS).usage(MAX_MILLI as f64),
        // External metrics.
        row("TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods", 3, external(&[8600], Target::Value(4400), &one_ready), 2).usage(8600),
        row("TestReplicaCalcScaleUpPerPodCMExternal", 3, external(&[8600], Target::Average(2150), &ALL_READY_3), 4).usage(2867),
        row("TestReplicaCalcScaleDownCMExternal", 5, external(&[8600], Target::Value(14334), &ALL_READY_5), 3).usage(8600),
        row("TestReplicaCalcScaleDownPerPodCMExternal", 5, external(&[8600], Target::Average(2867), &ALL_READY_5), 3).usage(1720),
        row("TestReplicaCalcToleranceCMExternal", 3, external(&[8600], Target::Value(8888), &ALL_READY_3), 3).usage(8600),
        row("TestReplicaCalcTolerancePerPodCMExternal", 3, external(&[8600], Target::Average(2900), &ALL_READY_3), 3).usage(2867),
        row("TestReplicaCalcConfigurableToleranceCMExternal (scale-up tolerance 1%)", 3, external(&[8900], Target::Value(8800), &ALL_READY_3), 4)
            .tolerance(0.01)
            .usage(8900),
        row("TestReplicaCalcConfigurableTolerancePerPodCMExternal (scale-up tolerance 1%)", 3, external(&[8600], Target::Average(2800), &ALL_READY_3), 4)
            .tolerance(0.01)
            .usage(2867),
        row("TestExternalPerPodMetricReplicaOverflow", 1, external(&[MAX_MILLI], Target::Average(1), &[true]), MAX_REPLICAS).usage(MAX_MILLI as f64),
        row("TestExternalPerPodMetricUsageOverflow", 1, external(&[MAX_MILLI], Target::Average(MAX_MILLI), &[true]), 1).usage(MAX_MILLI as f64),
        // The Go side caps the sum at `math.MaxInt64`; the host's sum is a float, and so the same milli-value.
        row("TestReplicaCalcExternalMetricUsageOverflow", 3, external(&[MAX_MILLI / 2 + 1, MAX_MILLI / 2 + 1], Target::Value(MAX_MILLI), &ALL_READY_3), 3)
            .usage(MAX_MILLI as f64),
    ]
}

/// The worked examples of kubernetes.io's "Horizontal Pod Autoscaling" (algorithm details), its walkthrough,
/// and the v1.33 configurable-tolerance post.
fn documentation_rows() -> Vec<Row> {
    vec![
        row("docs: current 200m against a desired 100m doubles the replicas", 4, cpu_average(100, &[ready(200); 4]), 8).usage(200),
        row("docs: current 50m against a desired 100m halves the replicas", 4, cpu_average(100, &[ready(50); 4]), 2).usage(50),
        row("docs: a ratio within the 0.1 tolerance of 1.0 skips scaling", 4, cpu_average(100, &[ready(105); 4]), 4).usage(105),
        row("docs: two pods at 100% of their requests against a 50% target scale to 4", 2, cpu(50, &[ready(1000), ready(1000)]), 4).usage(100),
        // php-apache requests 200m; one replica at 305% of it against a 50% target: ceil(1 * 305 / 50) = 7.
        row("docs walkthrough: 305% / 50% on 1 replica resizes the Deployment to 7", 1, cpu(50, &[ready(305).req(100)]), 7).usage(305),
        row("docs v1.33 tolerance post: 100 replicas at 84% of an 80% target stay within the 10% tolerance", 100, cpu(80, &vec![ready(840); 100]), 100)
            .usage(84),
        row("docs v1.33 tolerance post: with a 0% tolerance the same 5% triggers scaling", 100, cpu(80, &vec![ready(840); 100]), 105).tolerance(0.0).usage(84),
        row("docs: with several metrics the largest proposal wins", 2, cpu(50, &[ready(1000), ready(1000)]), 4)
            .and(pods_metric(10000, &[ready(10000), ready(10000)])),
        row("docs: a metric that cannot be read skips a scale-down the others suggest", 2, cpu(50, &[ready(100), ready(100)]), 2).and(unreadable("qps")),
        row("docs: ... but the HPA still scales up if another metric wants more", 2, cpu(50, &[ready(1000), ready(1000)]), 4).and(unreadable("qps")),
    ]
}

/// Rules of `replica_calculator.go` the Go tests leave unexercised, where `hpa` once deviated from it; each
/// label names the Go function whose rule the row checks.
fn source_rows() -> Vec<Row> {
    vec![
        // `Tolerances.isWithin`: `1 - tolerance <= ratio <= 1 + tolerance`, so 110% of a 100% target is within.
        row("replica_calculator.go Tolerances.isWithin: a ratio of exactly 1 + tolerance is within it", 4, cpu(100, &[ready(1100); 4]), 4).usage(110),
        row("replica_calculator.go Tolerances.isWithin: a ratio of exactly 1 - tolerance is within it", 4, cpu(100, &[ready(900); 4]), 4).usage(90),
        // `GetResourceReplicas`: on a scale-up an unready pod counts at 0 of its own request. 1800m of 1000m
        // (180%) plus an unready pod requesting 500m: 1800 / 1500 = 120% of 50%, ceil(2.4 * 2) = 5.
        row(
            "replica_calculator.go GetResourceReplicas: an unready pod counts at 0 of its own request",
            2,
            cpu(50, &[ready(900).req(500), unready(0).req(250)]),
            5,
        )
        .usage(180),
        fails(
            "replica_calculator.go calculatePodRequests: every pod needs a request, unready ones too",
            2,
            cpu(50, &[ready(900), unready(0).no_request()]),
            "missing request for cpu in pod test-pod-1",
        ),
        // `GetObjectPerPodMetricReplicas`: `usage / (target * 0)` is never within the tolerance.
        row(
            "replica_calculator.go GetObjectPerPodMetricReplicas: from 0 replicas the tolerance does not apply",
            0,
            external(&[10000], Target::Average(10000), &[]),
            1,
        ),
        row(
            "replica_calculator.go getUsageRatioReplicaCount: from 0 replicas a Value target wants ceil(ratio)",
            0,
            external(&[25000], Target::Value(10000), &[]),
            3,
        ),
        // Quantities divide as whole milli-values: 2100m / 300m is 7, where `2.1 / 0.3` in `f64` is 7.000000000000001.
        row("replica_calculator.go GetExternalPerPodMetricReplicas: ceil(2100m / 300m) is 7", 5, external(&[2100], Target::Average(300), &ALL_READY_5), 7)
            .usage(420),
        // `GetMetricUsageRatio` truncates the average to a whole milli-unit: (10 + 10 + 10.001) / 3 = 10.000(33),
        // exactly twice the 5 target, so ceil(2 * 3) = 6 (not ceil(2.0002 * 3) = 7).
        row(
            "replica_calculator.go GetMetricUsageRatio: the average is truncated to whole milli-units",
            3,
            pods_metric(5000, &[ready(10000), ready(10000), ready(10001)]),
            6,
        )
        .usage(10000),
    ]
}

#[test]
fn replica_calculator_cases() {
    let rows: Vec<Row> = [resource_rows(), computed_tolerance_rows(), custom_rows(), documentation_rows(), source_rows()].into_iter().flatten().collect();
    let failures: Vec<String> = rows.iter().filter_map(check).collect();
    assert!(failures.is_empty(), "{} of {} rows differ from kube-controller-manager:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

/// What is wrong with the policy's answer to `row`, if anything.
fn check(row: &Row) -> Option<String> {
    let label = row.label;
    let settings = format!(r#"{{"tolerance": {{"scaleUp": {}, "scaleDown": {}}}}}"#, row.tolerance.scale_up, row.tolerance.scale_down);
    let hpa = match build::<Hpa>(&settings) {
        Ok(hpa) => hpa,
        Err(error) => return Some(format!("{label}: {error}")),
    };
    let request = scale_request(row.current, 0, MAX_REPLICAS, row.metrics.clone());
    let answer = hpa.recommend(&request);
    let right = match (&row.want, &answer) {
        (Want::Replicas(want), Ok(decision)) => decision.desired_replicas == *want,
        (Want::Error(want), Err(error)) => error.contains(want),
        _ => false,
    };
    if !right {
        let got = answer.map(|decision| format!("{} ({})", decision.desired_replicas, decision.reason));
        return Some(format!("{label}: want {:?}, got {got:?}", row.want));
    }
    let want = row.usage?;
    let metric = &row.metrics[0];
    let reading = match propose(metric, row.current, row.tolerance) {
        Ok(proposal) => proposal.reading,
        Err(error) => return Some(format!("{label}: no reading: {error}")),
    };
    // Resource readings are percents or millicores already; custom and external ones are plain numbers.
    let milli = if matches!(metric.source, MetricSource::Resource) { reading } else { reading * 1000.0 };
    let same = match metric.target {
        MetricTarget::Utilization(_) => reading == want,
        _ => (milli - want).abs() < 1.0,
    };
    (!same).then(|| format!("{label}: usage {milli}, the Go test expects {want}"))
}
