//! Resource and custom metrics from a load model: each workload's CPU and memory use (as a share of its requests)
//! and its requests per second follow curves over time, and running pods report their part. Served as
//! `metrics.k8s.io/v1beta1` (what `kubectl top` reads) and `custom.metrics.k8s.io/v1beta2`.

use crate::api::{json_response, ServerState, Target};
use crate::error::ApiError;
use crate::resources;
use crate::selectors::LabelSelector;
use crate::store::{name_of, namespace_of, now_rfc3339};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;
// tokio's clock: the load curves follow simulated time under `wasp simulate` (see `crate::clock`).
use tokio::time::Instant;

/// Pods carry their workload's name in this label; the load model looks curves up by it.
pub const WORKLOAD_LABEL: &str = "sim.wasp.dev/workload";
/// The custom metric served for every workload with a `qps` curve.
pub const REQUESTS_PER_SECOND: &str = "requests_per_second";

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Point {
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    pub value: f64,
}

/// A piecewise-linear curve over time since the simulation started; constant before the first and after the
/// last point.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Curve(pub Vec<Point>);

impl Curve {
    /// The same value at every time.
    pub fn constant(value: f64) -> Curve {
        Curve(vec![Point { at: Duration::ZERO, value }])
    }

    pub fn at(&self, elapsed: Duration) -> f64 {
        let points = &self.0;
        let Some(first) = points.first() else { return 0.0 };
        if elapsed <= first.at {
            return first.value;
        }
        for pair in points.windows(2) {
            let (from, to) = (&pair[0], &pair[1]);
            if elapsed <= to.at {
                let span = (to.at - from.at).as_secs_f64();
                let progress = if span == 0.0 { 1.0 } else { (elapsed - from.at).as_secs_f64() / span };
                return from.value + (to.value - from.value) * progress;
            }
        }
        points.last().map_or(0.0, |point| point.value)
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadLoad {
    /// CPU used as a share of the CPU requested (1.0 = exactly the request).
    pub cpu: Curve,
    /// Memory used as a share of the memory requested.
    pub memory: Curve,
    /// Requests per second for the whole workload, split across its ready pods.
    pub qps: Curve,
    /// CPU (millicores) each request per second costs a pod, on top of the `cpu` share: with it, more
    /// replicas mean less CPU each, as for a real service.
    pub cpu_per_request: f64,
}

struct Spike {
    workload: String,
    factor: f64,
    until: Instant,
}

pub struct LoadModel {
    started: Instant,
    workloads: RwLock<HashMap<String, WorkloadLoad>>,
    /// External metrics by name, the same in every namespace.
    external: RwLock<HashMap<String, Curve>>,
    spikes: RwLock<Vec<Spike>>,
}

impl Default for LoadModel {
    fn default() -> Self {
        LoadModel { started: Instant::now(), workloads: RwLock::new(HashMap::new()), external: RwLock::new(HashMap::new()), spikes: RwLock::new(Vec::new()) }
    }
}

fn cpu_quantity(millicores: f64) -> String {
    format!("{}n", (millicores * 1e6).max(0.0).round() as u64)
}

fn memory_quantity(bytes: f64) -> String {
    format!("{}Ki", (bytes / 1024.0).max(0.0).round() as u64)
}

impl LoadModel {
    pub fn set(&self, workload: &str, load: WorkloadLoad) {
        self.workloads.write().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(workload.to_string(), load);
    }

    /// Serves the external metric `name` from `curve`.
    pub fn set_external(&self, name: &str, curve: Curve) {
        self.external.write().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(name.to_string(), curve);
    }

    /// Stops serving the external metric `name` (its reads answer 404).
    pub fn remove_external(&self, name: &str) {
        self.external.write().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(name);
    }

    /// Time since the simulation started: where the curves are now.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether some workload's load is split across its Ready pods (it has requests per second).
    pub fn splits_load(&self) -> bool {
        let workloads = self.workloads.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        workloads.values().any(|load| !load.qps.0.is_empty())
    }

    /// Requests per second of a whole workload now.
    pub fn workload_qps(&self, workload: &str) -> f64 {
        self.sample(workload, |load| &load.qps, 0.0)
    }

    /// Multiplies a workload's load by `factor` for `duration`.
    pub fn spike(&self, workload: &str, factor: f64, duration: Duration) {
        let spike = Spike { workload: workload.to_string(), factor, until: Instant::now() + duration };
        self.spikes.write().unwrap_or_else(|poisoned| poisoned.into_inner()).push(spike);
    }

    fn factor(&self, workload: &str) -> f64 {
        let now = Instant::now();
        let spikes = self.spikes.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        spikes.iter().filter(|spike| spike.workload == workload && spike.until > now).map(|spike| spike.factor).product()
    }

    fn sample(&self, workload: &str, pick: impl Fn(&WorkloadLoad) -> &Curve, default: f64) -> f64 {
        let workloads = self.workloads.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let base = workloads.get(workload).map_or(default, |load| {
            let curve = pick(load);
            if curve.0.is_empty() {
                default
            } else {
                curve.at(self.started.elapsed())
            }
        });
        base * self.factor(workload)
    }

    /// (millicores, bytes) a running pod uses now, one of `ready` Ready pods of its workload.
    pub fn pod_usage(&self, pod: &Value, ready: usize) -> (f64, f64) {
        let workload = workload_of(pod);
        let (mut cpu, mut memory) = (0.0, 0.0);
        for container in pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
            let request = |name: &str| container.pointer(&format!("/resources/requests/{name}")).and_then(Value::as_str);
            cpu += request("cpu").and_then(|value| wasp_sdk::quantity::cpu_millis(value).ok()).unwrap_or(100) as f64;
            memory += request("memory").and_then(|value| wasp_sdk::quantity::whole_units(value).ok()).unwrap_or(128 << 20) as f64;
        }
        let per_request = self.workloads.read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(workload).map_or(0.0, |load| load.cpu_per_request);
        let serving = if per_request > 0.0 { per_request * self.pod_qps(workload, ready) } else { 0.0 };
        (cpu * self.sample(workload, |load| &load.cpu, 0.5) + serving, memory * self.sample(workload, |load| &load.memory, 0.6))
    }

    /// Requests per second of one of `ready` pods of a workload.
    pub fn pod_qps(&self, workload: &str, ready: usize) -> f64 {
        self.workload_qps(workload) / ready.max(1) as f64
    }
}

fn is_running(pod: &Value) -> bool {
    crate::store::field(pod, &["status", "phase"]).and_then(Value::as_str) == Some("Running")
}

fn workload_of(pod: &Value) -> &str {
    pod.get("metadata").and_then(|metadata| metadata.get("labels")).and_then(|labels| labels.get(WORKLOAD_LABEL)).and_then(Value::as_str).unwrap_or("")
}

/// Ready pods per workload: the load is split across them.
fn ready_per_workload(pods: &[std::sync::Arc<Value>]) -> HashMap<String, usize> {
    let mut ready: HashMap<String, usize> = HashMap::new();
    for pod in pods.iter().filter(|pod| crate::pdb::is_ready(pod)) {
        *ready.entry(workload_of(pod).to_string()).or_default() += 1;
    }
    ready
}

fn pod_metrics(state: &ServerState, pod: &Value, ready: &HashMap<String, usize>) -> Value {
    let (cpu, memory) = state.load.pod_usage(pod, ready.get(workload_of(pod)).copied().unwrap_or(0));
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array).map_or(1, Vec::len).max(1) as f64;
    let per_container: Vec<Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|container| json!({"name": container["name"], "usage": {"cpu": cpu_quantity(cpu / containers), "memory": memory_quantity(memory / containers)}}))
        .collect();
    json!({
        "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": name_of(pod), "namespace": namespace_of(pod), "creationTimestamp": now_rfc3339(), "labels": pod.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
        "timestamp": now_rfc3339(), "window": "15s", "containers": per_container,
    })
}

fn node_metrics(state: &ServerState, node: &Value, pods: &[std::sync::Arc<Value>], ready: &HashMap<String, usize>) -> Value {
    let name = name_of(node);
    let (cpu, memory) = pods
        .iter()
        .filter(|pod| is_running(pod) && pod.pointer("/spec/nodeName").and_then(Value::as_str) == Some(name))
        .map(|pod| state.load.pod_usage(pod, ready.get(workload_of(pod)).copied().unwrap_or(0)))
        .fold((0.0, 0.0), |(cpu, memory), (pod_cpu, pod_memory)| (cpu + pod_cpu, memory + pod_memory));
    json!({
        "kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": name, "creationTimestamp": now_rfc3339(), "labels": node.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
        "timestamp": now_rfc3339(), "window": "15s",
        "usage": {"cpu": cpu_quantity(cpu), "memory": memory_quantity(memory)},
    })
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {}, "items": items})
}

pub fn serve(state: &ServerState, method: &Method, target: &Target, query: &HashMap<String, String>) -> Result<Response, ApiError> {
    if *method != Method::GET {
        return Err(ApiError::method_not_allowed("metrics are read-only"));
    }
    let store = &state.store;
    let pods = store.all(resources::pods());
    // Counting every workload's Ready pods costs a pass over all pods: only when some load depends on it.
    let ready = if state.load.splits_load() { ready_per_workload(&pods) } else { HashMap::new() };
    let in_namespace = |pod: &&std::sync::Arc<Value>, namespace: &Option<String>| namespace.as_deref().is_none_or(|namespace| namespace_of(pod) == namespace);
    let mut body = match target {
        Target::Collection { resource, namespace } if resource.kind == "PodMetrics" => {
            // PodMetrics copy their pod's labels: select the pods first rather than build every pod's metrics.
            let selector = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let selected = pods.iter().filter(|pod| in_namespace(pod, namespace) && selector.matches(pod) && is_running(pod));
            list("PodMetricsList", "metrics.k8s.io/v1beta1", selected.map(|pod| pod_metrics(state, pod, &ready)).collect())
        }
        Target::Object { resource, namespace, name } if resource.kind == "PodMetrics" => {
            let pod = store.get(resources::pods(), namespace.as_deref(), name)?;
            if !is_running(&pod) {
                return Err(ApiError::not_found("pods", "metrics.k8s.io", name));
            }
            pod_metrics(state, &pod, &ready)
        }
        Target::Collection { resource, .. } if resource.kind == "NodeMetrics" => {
            let items = store.all(resources::nodes()).iter().map(|node| node_metrics(state, node, &pods, &ready)).collect();
            list("NodeMetricsList", "metrics.k8s.io/v1beta1", items)
        }
        Target::Object { resource, name, .. } if resource.kind == "NodeMetrics" => {
            let node = store.get(resources::nodes(), None, name)?;
            node_metrics(state, &node, &pods, &ready)
        }
        // custom.metrics.k8s.io: /namespaces/{ns}/pods/{name or *}/{metric}
        Target::Subresource { resource, namespace, name, sub } if resource.kind == "MetricValue" => {
            if sub != REQUESTS_PER_SECOND {
                return Err(ApiError::not_found("pods", "custom.metrics.k8s.io", sub));
            }
            let ready_pods: Vec<&std::sync::Arc<Value>> = pods.iter().filter(|pod| in_namespace(pod, namespace) && crate::pdb::is_ready(pod)).collect();
            // MetricValues carry no labels: the selector picks the pods they describe.
            let selector = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let items = ready_pods
                .iter()
                .filter(|pod| (name == "*" || name_of(pod) == name) && selector.matches(pod))
                .map(|pod| {
                    let workload = workload_of(pod);
                    let qps = state.load.pod_qps(workload, ready.get(workload).copied().unwrap_or(0));
                    json!({
                        "describedObject": {"kind": "Pod", "namespace": namespace_of(pod), "name": name_of(pod), "apiVersion": "/v1"},
                        "metric": {"name": sub, "selector": null},
                        "timestamp": now_rfc3339(), "windowSeconds": 15,
                        "value": format!("{}m", (qps * 1000.0).round() as u64),
                    })
                })
                .collect();
            return Ok(json_response(StatusCode::OK, &list("MetricValueList", "custom.metrics.k8s.io/v1beta2", items)));
        }
        _ => return Err(ApiError::not_found("metrics", "", "")),
    };
    if let Some(selector) = query.get("labelSelector") {
        filter_by_labels(&mut body, &LabelSelector::parse(selector)?);
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// `requests_per_second` of a workload (its whole load), described by the Deployment, StatefulSet or
/// ReplicaSet of that name: an Object metric.
pub fn object_metric(state: &ServerState, namespace: &str, described: &str, name: &str, metric: &str) -> Result<Response, ApiError> {
    let (plural, group) = described.split_once('.').unwrap_or((described, ""));
    let kind = match plural {
        "deployments" => "Deployment",
        "statefulsets" => "StatefulSet",
        "replicasets" => "ReplicaSet",
        _ => return Err(ApiError::not_found(plural, "custom.metrics.k8s.io", name)),
    };
    if metric != REQUESTS_PER_SECOND {
        return Err(ApiError::not_found(described, "custom.metrics.k8s.io", metric));
    }
    state.store.get(crate::resources::find("apps", "v1", plural).expect("apps are served"), Some(namespace), name)?;
    let value = state.load.workload_qps(name);
    let api_version = if group.is_empty() { "v1".to_string() } else { format!("{group}/v1") };
    let item = json!({
        "describedObject": {"kind": kind, "namespace": namespace, "name": name, "apiVersion": api_version},
        "metric": {"name": metric, "selector": null},
        "timestamp": now_rfc3339(), "windowSeconds": 15,
        "value": format!("{}m", (value * 1000.0).round() as u64),
    });
    Ok(json_response(StatusCode::OK, &list("MetricValueList", "custom.metrics.k8s.io/v1beta2", vec![item])))
}

/// An external metric from its curve (`externalMetrics` in the scenario), in every namespace.
pub fn external_metric(state: &ServerState, metric: &str) -> Result<Response, ApiError> {
    let value = {
        let external = state.load.external.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        external.get(metric).map(|curve| curve.at(state.load.elapsed()))
    };
    let value = value.ok_or_else(|| ApiError::not_found("externalmetrics", "external.metrics.k8s.io", metric))?;
    let item = json!({
        "metricName": metric, "metricLabels": {}, "timestamp": now_rfc3339(),
        "value": format!("{}m", (value * 1000.0).round().max(0.0) as u64),
    });
    Ok(json_response(StatusCode::OK, &list("ExternalMetricValueList", "external.metrics.k8s.io/v1beta1", vec![item])))
}

/// `kubectl top -l app=web`: metric lists filtered by the labels they copy from their pods and nodes.
fn filter_by_labels(body: &mut Value, selector: &LabelSelector) {
    if let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) {
        items.retain(|item| selector.matches(item));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_interpolate_and_hold_their_ends() {
        let curve = Curve(vec![Point { at: Duration::from_secs(10), value: 1.0 }, Point { at: Duration::from_secs(20), value: 3.0 }]);
        assert_eq!(curve.at(Duration::ZERO), 1.0);
        assert_eq!(curve.at(Duration::from_secs(15)), 2.0);
        assert_eq!(curve.at(Duration::from_secs(60)), 3.0);
        assert_eq!(Curve::default().at(Duration::ZERO), 0.0);
    }

    #[test]
    fn quantities_use_metrics_server_units() {
        assert_eq!(cpu_quantity(250.0), "250000000n");
        assert_eq!(memory_quantity(1048576.0), "1024Ki");
    }
}
