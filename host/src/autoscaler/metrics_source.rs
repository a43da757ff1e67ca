//! Reads an Autoscaler's metrics as the HPA does and turns them into the contract's [`Metric`]s: pod CPU and
//! memory from `metrics.k8s.io`, Pods and Object metrics from `custom.metrics.k8s.io`, External metrics from
//! `external.metrics.k8s.io`. Pods are classified by the HPA's rules (deleted and failed pods ignored, pending
//! pods unready, a pod's CPU untrusted during its initialization period); a metric that cannot be read is
//! passed on with its error, so the policy and the fallback can act on it.

use crate::cluster::ScaledPod;
use crate::contract::types::{Metric, MetricSource, MetricTarget, PodMetric};
use crate::kube::ApiClient;
use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricStatus};
use kube::core::{Expression, Selector, SelectorExt};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use wasp_sdk::quantity::parse_milli;

fn quantity(value: &str) -> Option<f64> {
    parse_milli(value).ok().map(|milli| milli as f64 / 1000.0)
}

fn timestamp(value: Option<&Value>) -> Option<Timestamp> {
    value.and_then(Value::as_str).and_then(|text| text.parse().ok())
}

/// The HPA's timing rules for CPU readings of starting pods.
#[derive(Debug, Clone, Copy)]
pub struct Readiness {
    pub cpu_initialization_period: Duration,
    pub initial_readiness_delay: Duration,
}

impl Readiness {
    /// The HPA's `groupPods` for CPU: during its initialization period a pod's reading counts only once the pod
    /// has been Ready for a whole metrics window; after it, an unready pod counts unless it never was Ready (it
    /// turned unready within `initial_readiness_delay` of starting).
    fn cpu_ready(&self, pod: &ScaledPod, usage: &Usage, now: Timestamp) -> bool {
        let (Some(started), Some(ready_since)) = (pod.started, pod.ready_since) else { return false };
        if started + self.cpu_initialization_period > now {
            pod.ready && usage.timestamp.is_none_or(|at| at >= ready_since + usage.window)
        } else {
            pod.ready || started + self.initial_readiness_delay <= ready_since
        }
    }
}

/// The usage of the pods `selector` selects in `namespace` (every pod of it without one), by pod name.
pub async fn read_pod_usage(api: &ApiClient, namespace: &str, selector: Option<&str>) -> Result<HashMap<String, Usage>, String> {
    let query = selector.map_or(String::new(), |selector| format!("?labelSelector={}", urlencode(selector)));
    let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods{query}");
    let list = get_json(api, &path).await.map_err(|error| format!("unable to get metrics for resource: {error}"))?;
    let mut usage = HashMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let Some(name) = item.pointer("/metadata/name").and_then(Value::as_str) else { continue };
        let total = |resource: &str| -> f64 {
            let containers = item["containers"].as_array().into_iter().flatten();
            containers.filter_map(|container| container["usage"][resource].as_str().and_then(quantity)).sum()
        };
        let window = item["window"].as_str().and_then(|text| humantime::parse_duration(text).ok()).unwrap_or(Duration::from_secs(15));
        let entry = Usage { cpu_millis: total("cpu") * 1000.0, memory_bytes: total("memory"), timestamp: timestamp(item.get("timestamp")), window };
        usage.insert(name.to_string(), entry);
    }
    Ok(usage)
}

async fn get_json(api: &ApiClient, path: &str) -> Result<Value, String> {
    let request = http::Request::get(path).body(Vec::new()).map_err(|error| error.to_string())?;
    let _permit = api.permit().await;
    api.client.request::<Value>(request).await.map_err(|error| match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    })
}

/// A label selector in the API's query syntax (`app=web,tier in (a,b),!legacy`), as a `scale`'s
/// `status.selector` states it; None if it is not one.
pub fn parse_selector(text: &str) -> Option<PodSelector> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    let set = |values: &str| -> Option<std::collections::BTreeSet<String>> {
        let inner = values.trim().strip_prefix('(')?.strip_suffix(')')?;
        Some(inner.split(',').map(|value| value.trim().to_string()).filter(|value| !value.is_empty()).collect())
    };
    let mut expressions = Vec::new();
    for term in terms.into_iter().map(str::trim).filter(|term| !term.is_empty()) {
        let expression = if let Some(key) = term.strip_prefix('!') {
            Expression::DoesNotExist(key.trim().to_string())
        } else if let Some((key, value)) = term.split_once("!=") {
            Expression::NotEqual(key.trim().to_string(), value.trim().to_string())
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            Expression::Equal(key.trim().to_string(), value.trim().to_string())
        } else if let Some((key, values)) = term.split_once(" notin ") {
            Expression::NotIn(key.trim().to_string(), set(values)?)
        } else if let Some((key, values)) = term.split_once(" in ") {
            Expression::In(key.trim().to_string(), set(values)?)
        } else if term.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')) {
            Expression::Exists(term.to_string())
        } else {
            return None;
        };
        expressions.push(expression);
    }
    let required_label = expressions.iter().find_map(|expression| match expression {
        Expression::Equal(key, value) => Some((key.clone(), value.clone())),
        _ => None,
    });
    Some(PodSelector { selector: expressions.into_iter().collect(), required_label })
}

/// A label selector the host evaluates itself.
pub struct PodSelector {
    selector: Selector,
    /// A `key=value` term of the selector: a pod without that label is not selected, so an index on it narrows
    /// a namespace's pods to the few that may be.
    required_label: Option<(String, String)>,
}

impl PodSelector {
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }
}

/// A namespace's pods, taken once per pass for all its Autoscalers, indexed by label: a thousand Autoscalers in
/// one namespace each test a few candidates rather than every pod.
pub struct NamespacePods {
    pods: Vec<Arc<ScaledPod>>,
    by_label: HashMap<(String, String), Vec<usize>>,
}

impl NamespacePods {
    pub fn new(pods: Vec<Arc<ScaledPod>>) -> NamespacePods {
        let mut by_label: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (index, pod) in pods.iter().enumerate() {
            for (key, value) in &pod.labels {
                by_label.entry((key.clone(), value.clone())).or_default().push(index);
            }
        }
        NamespacePods { pods, by_label }
    }

    /// The pods `selector` selects.
    pub fn selected<'a>(&'a self, selector: &'a PodSelector) -> impl Iterator<Item = &'a Arc<ScaledPod>> + 'a {
        let candidates: Box<dyn Iterator<Item = &Arc<ScaledPod>>> = match &selector.required_label {
            Some(label) => Box::new(self.by_label.get(label).into_iter().flatten().map(|index| &self.pods[*index])),
            None => Box::new(self.pods.iter()),
        };
        candidates.filter(|pod| selector.selects(&pod.labels))
    }
}

/// One pod's resource usage, from a PodMetrics item.
pub struct Usage {
    cpu_millis: f64,
    memory_bytes: f64,
    timestamp: Option<Timestamp>,
    window: Duration,
}

/// What one Autoscaler's metrics read, and what its status shows of them.
pub struct Reading {
    pub metrics: Vec<Metric>,
    pub statuses: Vec<MetricStatus>,
    /// `cpu: 45%/50%`, one per metric.
    pub targets: Vec<String>,
}

/// A reading in its target's unit (percent of requests, average per pod, or the whole value), with the pods it
/// is an average over (1 for a whole value): their product is the whole load.
pub fn current_reading(metric: &Metric, replicas: i32) -> Option<(f64, u32)> {
    let measured: Vec<&PodMetric> = metric.pods.iter().filter(|pod| pod.ready && pod.value.is_some()).collect();
    let sum = |pick: fn(&PodMetric) -> f64| measured.iter().map(|pod| pick(pod)).sum::<f64>();
    let pods = measured.len() as u32;
    match (metric.source, metric.target) {
        (_, MetricTarget::Utilization(_)) => {
            let requests = sum(|pod| pod.request.unwrap_or(0.0));
            (requests > 0.0).then(|| ((sum(|pod| pod.value.unwrap_or(0.0)) * 100.0 / requests).floor(), pods))
        }
        (MetricSource::Resource | MetricSource::Pods, MetricTarget::AverageValue(_)) => {
            (pods > 0).then(|| (sum(|pod| pod.value.unwrap_or(0.0)) / f64::from(pods), pods))
        }
        (_, MetricTarget::AverageValue(_)) => metric.value.map(|value| (value / f64::from(replicas.max(1)), replicas.max(1) as u32)),
        (_, MetricTarget::Value(_)) => metric.value.map(|value| (value, 1)),
    }
}

/// A plain number as a Kubernetes quantity: whole, or in thousandths.
fn format_quantity(value: f64) -> String {
    let milli = (value * 1000.0).round();
    if milli % 1000.0 == 0.0 {
        format!("{}", milli / 1000.0)
    } else {
        format!("{milli}m")
    }
}

pub struct MetricsReader<'a> {
    pub api: &'a ApiClient,
    pub namespace: &'a str,
    pub selector: &'a str,
    pub pods: &'a [Arc<ScaledPod>],
    pub readiness: Readiness,
    pub now: Timestamp,
    /// The namespace's pod usage, read once for every Autoscaler of the pass; None to read this target's.
    pub namespace_usage: Option<&'a Result<HashMap<String, Usage>, String>>,
}

impl MetricsReader<'_> {
    async fn get(&self, path: &str) -> Result<Value, String> {
        get_json(self.api, path).await
    }

    fn selector_query(selector: &str) -> String {
        format!("labelSelector={}", urlencode(selector))
    }

    fn started(pod: &ScaledPod) -> i64 {
        pod.started.map_or(0, |started| started.as_second())
    }

    /// Pods without readings, for metrics that do not read per pod (their ready count scales Value targets).
    fn ready_pods(&self) -> Vec<PodMetric> {
        let entry = |pod: &Arc<ScaledPod>| PodMetric { pod: pod.name.clone(), ready: pod.ready, started: Self::started(pod), value: None, request: None };
        self.pods.iter().map(entry).collect()
    }

    /// Reads every metric of `specs`, each API once.
    pub async fn read(&self, specs: &[MetricSpec], replicas: i32) -> Reading {
        let mut usage: Option<Result<HashMap<String, Usage>, String>> = None;
        let mut reading = Reading { metrics: Vec::new(), statuses: Vec::new(), targets: Vec::new() };
        for spec in specs {
            let metric = match spec.type_.as_str() {
                "Resource" => match self.namespace_usage {
                    Some(shared) => self.resource_metric(spec, shared),
                    None => {
                        if usage.is_none() {
                            usage = Some(read_pod_usage(self.api, self.namespace, Some(self.selector)).await);
                        }
                        self.resource_metric(spec, usage.as_ref().expect("read above"))
                    }
                },
                "Pods" => self.pods_metric(spec).await,
                "Object" => self.object_metric(spec).await,
                "External" => self.external_metric(spec).await,
                other => Err(unnamed(other, &format!("metric type {other:?} is not supported (Resource, Pods, Object or External)"))),
            };
            let metric = metric.unwrap_or_else(|(name, source, target, error)| Metric {
                name,
                source,
                target,
                pods: Vec::new(),
                value: None,
                error: Some(error),
                history: Vec::new(),
            });
            let current = current_reading(&metric, replicas).map(|(value, _)| value);
            reading.targets.push(describe_target(&metric, current));
            if let Some(status) = status_of(spec, &metric, current) {
                reading.statuses.push(status);
            }
            reading.metrics.push(metric);
        }
        reading
    }

    fn resource_metric(&self, spec: &MetricSpec, usage: &Result<HashMap<String, Usage>, String>) -> Result<Metric, MetricFailure> {
        let source = spec.resource.as_ref().ok_or_else(|| unnamed("Resource", "spec.metrics[].resource is missing"))?;
        let name = source.name.clone();
        let is_cpu = name == "cpu";
        let scale = if is_cpu { 1000.0 } else { 1.0 };
        let target = match (source.target.type_.as_str(), source.target.average_utilization, &source.target.average_value) {
            ("Utilization", Some(percent), _) => MetricTarget::Utilization(f64::from(percent)),
            ("AverageValue", _, Some(value)) => MetricTarget::AverageValue(quantity(&value.0).unwrap_or(0.0) * scale),
            (kind, ..) => {
                return Err((
                    name,
                    MetricSource::Resource,
                    MetricTarget::Value(0.0),
                    format!("target type {kind:?} needs its value (Utilization: averageUtilization, AverageValue: averageValue)"),
                ))
            }
        };
        let usage = usage.as_ref().map_err(|error| (name.clone(), MetricSource::Resource, target, error.clone()))?;
        let pods = self
            .pods
            .iter()
            .map(|pod| {
                let reading = usage.get(&pod.name);
                let value = reading.map(|usage| if is_cpu { usage.cpu_millis } else { usage.memory_bytes });
                let ready = match reading {
                    _ if pod.pending => false,
                    // A pod without a reading is missing, whatever its readiness (the HPA asks in that order).
                    None => true,
                    Some(usage) if is_cpu => self.readiness.cpu_ready(pod, usage, self.now),
                    Some(_) => true,
                };
                let request = if is_cpu { pod.cpu_request } else { pod.memory_request };
                PodMetric { pod: pod.name.clone(), ready, started: Self::started(pod), value, request }
            })
            .collect();
        Ok(Metric { name, source: MetricSource::Resource, target, pods, value: None, error: None, history: Vec::new() })
    }

    async fn pods_metric(&self, spec: &MetricSpec) -> Result<Metric, MetricFailure> {
        let source = spec.pods.as_ref().ok_or_else(|| unnamed("Pods", "spec.metrics[].pods is missing"))?;
        let name = source.metric.name.clone();
        let target = match &source.target.average_value {
            Some(value) if source.target.type_ == "AverageValue" => MetricTarget::AverageValue(quantity(&value.0).unwrap_or(0.0)),
            _ => return Err((name, MetricSource::Pods, MetricTarget::Value(0.0), "a Pods metric needs an AverageValue target".into())),
        };
        let mut path = format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/pods/*/{}?{}", self.namespace, name, Self::selector_query(self.selector));
        let selector =
            source.metric.selector.as_ref().map(selector_string).transpose().map_err(|error| (name.clone(), MetricSource::Pods, target, error))?.flatten();
        if let Some(selector) = selector {
            path.push_str(&format!("&metricLabelSelector={}", urlencode(&selector)));
        }
        let list = self.get(&path).await.map_err(|error| (name.clone(), MetricSource::Pods, target, format!("unable to get metric {name}: {error}")))?;
        let values: HashMap<&str, f64> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| Some((item.pointer("/describedObject/name")?.as_str()?, quantity(item["value"].as_str()?)?)))
            .collect();
        let pods = self
            .pods
            .iter()
            .map(|pod| {
                let value = values.get(pod.name.as_str()).copied();
                PodMetric { pod: pod.name.clone(), ready: !pod.pending, started: Self::started(pod), value, request: None }
            })
            .collect();
        Ok(Metric { name, source: MetricSource::Pods, target, pods, value: None, error: None, history: Vec::new() })
    }

    async fn object_metric(&self, spec: &MetricSpec) -> Result<Metric, MetricFailure> {
        let source = spec.object.as_ref().ok_or_else(|| unnamed("Object", "spec.metrics[].object is missing"))?;
        let name = source.metric.name.clone();
        let target = whole_target(&source.target.type_, source.target.value.as_ref(), source.target.average_value.as_ref())
            .map_err(|error| (name.clone(), MetricSource::Object, MetricTarget::Value(0.0), error))?;
        let object = &source.described_object;
        let group_version = object.api_version.as_deref().unwrap_or("v1");
        let plural = kube::core::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "", &object.kind)).plural;
        let prefix = if group_version.contains('/') {
            format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/{}.{}", self.namespace, plural, group_version.split('/').next().unwrap_or(""))
        } else {
            format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{}/{}", self.namespace, plural)
        };
        let path = format!("{prefix}/{}/{}", object.name, name);
        let fail =
            |error: String| (name.clone(), MetricSource::Object, target, format!("unable to get metric {name} of {} {}: {error}", object.kind, object.name));
        let list = self.get(&path).await.map_err(fail)?;
        let value = list["items"].as_array().and_then(|items| items.first()).and_then(|item| item["value"].as_str()).and_then(quantity);
        let value = value.ok_or_else(|| fail("no value in the answer".into()))?;
        Ok(Metric { name: name.clone(), source: MetricSource::Object, target, pods: self.ready_pods(), value: Some(value), error: None, history: Vec::new() })
    }

    async fn external_metric(&self, spec: &MetricSpec) -> Result<Metric, MetricFailure> {
        let source = spec.external.as_ref().ok_or_else(|| unnamed("External", "spec.metrics[].external is missing"))?;
        let name = source.metric.name.clone();
        let target = whole_target(&source.target.type_, source.target.value.as_ref(), source.target.average_value.as_ref())
            .map_err(|error| (name.clone(), MetricSource::External, MetricTarget::Value(0.0), error))?;
        let mut path = format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/{}", self.namespace, name);
        let selector =
            source.metric.selector.as_ref().map(selector_string).transpose().map_err(|error| (name.clone(), MetricSource::External, target, error))?.flatten();
        if let Some(selector) = selector {
            path.push_str(&format!("?labelSelector={}", urlencode(&selector)));
        }
        let list =
            self.get(&path).await.map_err(|error| (name.clone(), MetricSource::External, target, format!("unable to get external metric {name}: {error}")))?;
        let values: Vec<f64> = list["items"].as_array().into_iter().flatten().filter_map(|item| item["value"].as_str().and_then(quantity)).collect();
        if values.is_empty() {
            return Err((name.clone(), MetricSource::External, target, format!("unable to get external metric {name}: no series matched")));
        }
        let value = Some(values.iter().sum());
        Ok(Metric { name, source: MetricSource::External, target, pods: self.ready_pods(), value, error: None, history: Vec::new() })
    }
}

/// (name, source, target, error) of a metric that could not be read.
type MetricFailure = (String, MetricSource, MetricTarget, String);

fn unnamed(kind: &str, error: &str) -> MetricFailure {
    let source = match kind {
        "Resource" => MetricSource::Resource,
        "Pods" => MetricSource::Pods,
        "Object" => MetricSource::Object,
        _ => MetricSource::External,
    };
    (kind.to_lowercase(), source, MetricTarget::Value(0.0), error.to_string())
}

fn whole_target(
    kind: &str,
    value: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    average: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Result<MetricTarget, String> {
    match (kind, value, average) {
        ("Value", Some(value), _) => Ok(MetricTarget::Value(quantity(&value.0).unwrap_or(0.0))),
        ("AverageValue", _, Some(average)) => Ok(MetricTarget::AverageValue(quantity(&average.0).unwrap_or(0.0))),
        (kind, ..) => Err(format!("target type {kind:?} needs its value (Value: value, AverageValue: averageValue)")),
    }
}

/// A metric's label selector in the API's query syntax, as apimachinery's `LabelSelectorAsSelector` writes it
/// (`matchLabels` and `matchExpressions` together, requirements sorted by key, values sorted): None when it selects
/// everything; an error for an operator the API does not have (a selector silently narrowed to its `matchLabels`
/// would read every series of the metric).
fn selector_string(selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> Result<Option<String>, String> {
    let mut requirements: Vec<(String, String)> = selector.match_labels.iter().flatten().map(|(key, value)| (key.clone(), format!("{key}={value}"))).collect();
    for expression in selector.match_expressions.iter().flatten() {
        let key = &expression.key;
        let mut values = expression.values.clone().unwrap_or_default();
        values.sort();
        let text = match expression.operator.as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => return Err(format!("metric selector: {other:?} is not a label selector operator (In, NotIn, Exists, DoesNotExist)")),
        };
        requirements.push((key.clone(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    let text: Vec<String> = requirements.into_iter().map(|(_, text)| text).collect();
    Ok((!text.is_empty()).then(|| text.join(",")))
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn describe_target(metric: &Metric, current: Option<f64>) -> String {
    let shown = |value: f64| if value.fract() == 0.0 { format!("{value}") } else { format!("{value:.2}") };
    let now = current.filter(|_| metric.error.is_none());
    match metric.target {
        MetricTarget::Utilization(target) => {
            format!("{}: {}/{}%", metric.name, now.map_or("<unknown>".to_string(), |now| format!("{}%", shown(now))), shown(target))
        }
        MetricTarget::AverageValue(target) | MetricTarget::Value(target) => {
            format!("{}: {}/{}", metric.name, now.map_or("<unknown>".to_string(), shown), shown(target))
        }
    }
}

/// The HPA's `currentMetrics` entry for a metric read; None when it could not be read.
fn status_of(spec: &MetricSpec, metric: &Metric, current: Option<f64>) -> Option<MetricStatus> {
    let current = current.filter(|_| metric.error.is_none())?;
    let value = match metric.target {
        MetricTarget::Utilization(_) => {
            let average = metric.pods.iter().filter(|pod| pod.ready).filter_map(|pod| pod.value).sum::<f64>()
                / metric.pods.iter().filter(|pod| pod.ready && pod.value.is_some()).count().max(1) as f64;
            let average = if metric.name == "cpu" { format!("{}m", average.round()) } else { format_quantity(average.round()) };
            json!({"averageUtilization": current as i32, "averageValue": average})
        }
        MetricTarget::AverageValue(_) if metric.name == "cpu" && metric.source == MetricSource::Resource => {
            json!({"averageValue": format!("{}m", current.round())})
        }
        MetricTarget::AverageValue(_) => json!({"averageValue": format_quantity(current)}),
        MetricTarget::Value(_) => json!({"value": format_quantity(current)}),
    };
    let status = match spec.type_.as_str() {
        "Resource" => json!({"type": "Resource", "resource": {"name": metric.name, "current": value}}),
        "Pods" => json!({"type": "Pods", "pods": {"metric": {"name": metric.name}, "current": value}}),
        "Object" => {
            json!({"type": "Object", "object": {"metric": {"name": metric.name}, "describedObject": spec.object.as_ref()?.described_object, "current": value}})
        }
        _ => json!({"type": "External", "external": {"metric": {"name": metric.name}, "current": value}}),
    };
    serde_json::from_value(status).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_metric(ready: bool, value: Option<f64>, request: Option<f64>) -> PodMetric {
        PodMetric { pod: "p".into(), ready, started: 0, value, request }
    }

    #[test]
    fn readings_are_in_the_targets_unit() {
        let mut metric = Metric {
            name: "cpu".into(),
            source: MetricSource::Resource,
            target: MetricTarget::Utilization(50.0),
            pods: vec![pod_metric(true, Some(70.0), Some(100.0)), pod_metric(true, Some(71.0), Some(100.0)), pod_metric(false, Some(900.0), Some(100.0))],
            value: None,
            error: None,
            history: Vec::new(),
        };
        assert_eq!(current_reading(&metric, 3), Some((70.0, 2)), "unready pods are not counted; whole percent");
        assert_eq!(describe_target(&metric, Some(70.0)), "cpu: 70%/50%");
        metric.error = Some("down".into());
        assert_eq!(describe_target(&metric, None), "cpu: <unknown>/50%");
        let external = Metric {
            name: "queue".into(),
            source: MetricSource::External,
            target: MetricTarget::AverageValue(10.0),
            pods: vec![],
            value: Some(45.0),
            error: None,
            history: vec![],
        };
        assert_eq!(current_reading(&external, 3), Some((15.0, 3)));
    }

    #[test]
    fn a_starting_pods_cpu_counts_once_it_has_been_ready_a_whole_window() {
        let readiness = Readiness { cpu_initialization_period: Duration::from_secs(300), initial_readiness_delay: Duration::from_secs(30) };
        let at = |seconds: i64| Timestamp::from_second(1_800_000_000 + seconds).unwrap();
        let pod = |ready: bool, ready_since: i64| ScaledPod {
            name: "p".into(),
            labels: Default::default(),
            pending: false,
            ready,
            ready_since: Some(at(ready_since)),
            started: Some(at(0)),
            cpu_request: Some(100.0),
            memory_request: None,
        };
        let usage = |timestamp: i64| Usage { cpu_millis: 50.0, memory_bytes: 0.0, timestamp: Some(at(timestamp)), window: Duration::from_secs(15) };
        // Ready at 10 s: a reading taken at 20 s covers time before readiness, one at 25 s does not.
        assert!(!readiness.cpu_ready(&pod(true, 10), &usage(20), at(20)));
        assert!(readiness.cpu_ready(&pod(true, 10), &usage(25), at(25)));
        assert!(!readiness.cpu_ready(&pod(false, 10), &usage(60), at(60)), "unready while initializing");
        // After the initialization period: an unready pod counts unless it turned unready right after starting.
        assert!(readiness.cpu_ready(&pod(false, 200), &usage(400), at(400)));
        assert!(!readiness.cpu_ready(&pod(false, 20), &usage(400), at(400)), "never became ready");
    }

    #[test]
    fn a_scales_selector_is_evaluated_as_the_api_server_would() {
        let selector = parse_selector("app=web,tier in (a, b),!legacy,env!=dev").unwrap().selector;
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "b")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "a"), ("legacy", "yes")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "a"), ("env", "dev")])));
        assert!(parse_selector("app in web").is_none(), "a set needs parentheses");
        assert!(parse_selector("").unwrap().selector.selects_all());
    }

    #[test]
    fn a_metric_selector_keeps_its_expressions_in_the_apis_syntax() {
        let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"queue": "orders"},
            "matchExpressions": [
                {"key": "region", "operator": "In", "values": ["eu-west", "eu-central"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "NotIn", "values": ["batch"]},
                {"key": "env", "operator": "Exists"},
            ],
        }))
        .unwrap();
        assert_eq!(selector_string(&selector).unwrap().as_deref(), Some("!canary,env,queue=orders,region in (eu-central,eu-west),tier notin (batch)"));
        assert_eq!(selector_string(&Default::default()).unwrap(), None, "selects every series");
        let wrong: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})).unwrap();
        assert!(selector_string(&wrong).unwrap_err().contains("\"Gt\" is not a label selector operator"));
    }

    #[test]
    fn the_label_index_finds_exactly_what_the_selector_selects() {
        let pod = |name: &str, labels: &[(&str, &str)]| {
            let labels = labels.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
            Arc::new(ScaledPod {
                name: name.into(),
                labels,
                pending: false,
                ready: true,
                ready_since: None,
                started: None,
                cpu_request: None,
                memory_request: None,
            })
        };
        let pods = NamespacePods::new(vec![
            pod("a", &[("app", "web"), ("tier", "a")]),
            pod("b", &[("app", "web"), ("tier", "c")]),
            pod("c", &[("app", "db")]),
            pod("d", &[]),
        ]);
        let names = |selector: &str| -> Vec<String> {
            let selector = parse_selector(selector).unwrap();
            pods.selected(&selector).map(|pod| pod.name.clone()).collect()
        };
        assert_eq!(names("app=web"), ["a", "b"]);
        assert_eq!(names("tier in (a, c),app=web"), ["a", "b"], "indexed by the equality whatever its place");
        assert_eq!(names("tier in (c)"), ["b"], "no equality: every pod is tested");
        assert_eq!(names("app!=web"), ["c", "d"]);
        assert_eq!(names(""), ["a", "b", "c", "d"]);
        assert!(names("app=nothing").is_empty());
    }

    #[test]
    fn quantities_and_selectors_are_written_as_the_api_expects() {
        assert_eq!(format_quantity(12.0), "12");
        assert_eq!(format_quantity(0.25), "250m");
        assert_eq!(urlencode("app=web,tier in (a)"), "app%3Dweb%2Ctier%20in%20%28a%29");
    }
}
