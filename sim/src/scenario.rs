//! Scenarios: a simulated cluster described in YAML (node groups, workloads, load curves, faults) and timed
//! events (cordon, taint, drain, node failure, scaling, load spikes). See `sim/scenarios/` for examples.

use crate::controllers::KubeletSettings;
use crate::error::ApiError;
use crate::faults::FaultSpec;
use crate::metrics::{Curve, LoadModel, WorkloadLoad, WORKLOAD_LABEL};
use crate::resources;
use crate::store::{name_of, now_rfc3339, Store};
use anyhow::{bail, Context};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub kubelet: KubeletSettings,
    #[serde(default)]
    pub faults: FaultSpec,
    #[serde(default)]
    pub node_groups: Vec<NodeGroup>,
    /// StorageClasses, provisioned by the simulator's zonal provisioner (`sim/src/volumes.rs`).
    #[serde(default)]
    pub storage_classes: Vec<StorageClassSpec>,
    #[serde(default)]
    pub workloads: Vec<Workload>,
    /// Series served by `external.metrics.k8s.io` (a queue's depth, say), by metric name.
    #[serde(default)]
    pub external_metrics: BTreeMap<String, Curve>,
    #[serde(default)]
    pub events: Vec<TimedEvent>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeGroup {
    pub name: String,
    pub count: u32,
    pub cpu: String,
    pub memory: String,
    #[serde(default = "default_max_pods")]
    pub pods: u32,
    #[serde(default)]
    pub ephemeral_storage: Option<String>,
    /// Extended resources (`nvidia.com/gpu: "1"`).
    #[serde(default)]
    pub extended: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    /// Nodes are spread over these zones in turn (label `topology.kubernetes.io/zone`).
    #[serde(default)]
    pub zones: Vec<String>,
    /// The nodes start cordoned (a pool not yet open; an `uncordon` event opens it).
    #[serde(default)]
    pub unschedulable: bool,
    /// Images already on the nodes (`status.images`), for ImageLocality.
    #[serde(default)]
    pub images: Vec<NodeImageSpec>,
    /// How many volumes each CSI driver may attach to a node (`disk.csi.wasp-sim.dev: 2`, the simulator's
    /// provisioner): served as the nodes' CSINodes, as a driver's node plugin registers them.
    #[serde(default)]
    pub volume_limits: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StorageClassSpec {
    pub name: String,
    /// `WaitForFirstConsumer` (zonal disks made where the pod goes) or `Immediate` (the default, as in Kubernetes).
    #[serde(default)]
    pub volume_binding_mode: Option<String>,
    /// The cluster's default class (`storageclass.kubernetes.io/is-default-class`).
    #[serde(default)]
    pub default: bool,
    /// Zones volumes may be made in (`allowedTopologies`); none: any.
    #[serde(default)]
    pub zones: Vec<String>,
}

/// A claim per replica of a StatefulSet (`volumeClaimTemplates`), mounted under its name.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VolumeSpec {
    pub name: String,
    /// None: the default class.
    #[serde(default)]
    pub storage_class: Option<String>,
    #[serde(default = "default_volume_size")]
    pub size: String,
}

fn default_volume_size() -> String {
    "10Gi".into()
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeImageSpec {
    /// `registry/repo:tag` (and digests), as the kubelet lists them.
    pub names: Vec<String>,
    /// A quantity: `500Mi`, `1.2G`.
    pub size: String,
}

fn default_max_pods() -> u32 {
    110
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
pub enum WorkloadKind {
    #[default]
    Deployment,
    StatefulSet,
    /// Bare pods, no controller.
    Pods,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default)]
    pub kind: WorkloadKind,
    pub replicas: u32,
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The container image (default `registry.example/app:1`).
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub priority: Option<i32>,
    /// Merged into the generated pod spec: nodeSelector, affinity, tolerations, topologySpreadConstraints, ...
    #[serde(default)]
    pub pod_spec: Option<Value>,
    #[serde(default)]
    pub pdb: Option<PdbSpec>,
    /// StatefulSets only: a claim per replica of each.
    #[serde(default)]
    pub volumes: Vec<VolumeSpec>,
    #[serde(default)]
    pub load: WorkloadLoad,
}

fn default_namespace() -> String {
    "default".into()
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PdbSpec {
    #[serde(default)]
    pub min_available: Option<Value>,
    #[serde(default)]
    pub max_unavailable: Option<Value>,
}

/// `deny_unknown_fields` sits on [`Action`]: serde cannot combine it with `flatten` here.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TimedEvent {
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    #[serde(flatten)]
    pub action: Action,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Action {
    Cordon {
        node: String,
    },
    Uncordon {
        node: String,
    },
    Taint {
        node: String,
        key: String,
        #[serde(default)]
        value: String,
        effect: String,
    },
    Untaint {
        node: String,
        key: String,
    },
    /// Cordon, then evict every pod (retrying while budgets block), like `kubectl drain`.
    Drain {
        node: String,
    },
    /// The node stops reporting: Ready becomes Unknown and the unreachable taints are added.
    FailNode {
        node: String,
    },
    RecoverNode {
        node: String,
    },
    Scale {
        workload: String,
        #[serde(default = "default_namespace")]
        namespace: String,
        replicas: u32,
    },
    LoadSpike {
        workload: String,
        factor: f64,
        #[serde(with = "humantime_serde")]
        duration: Duration,
    },
}

/// As a timeline reads it: `drain worker-0`, `scale default/api to 12`.
impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Cordon { node } => write!(f, "cordon {node}"),
            Action::Uncordon { node } => write!(f, "uncordon {node}"),
            Action::Taint { node, key, value, effect } if value.is_empty() => write!(f, "taint {node} {key}:{effect}"),
            Action::Taint { node, key, value, effect } => write!(f, "taint {node} {key}={value}:{effect}"),
            Action::Untaint { node, key } => write!(f, "untaint {node} {key}"),
            Action::Drain { node } => write!(f, "drain {node}"),
            Action::FailNode { node } => write!(f, "fail-node {node}"),
            Action::RecoverNode { node } => write!(f, "recover-node {node}"),
            Action::Scale { workload, namespace, replicas } => write!(f, "scale {namespace}/{workload} to {replicas}"),
            Action::LoadSpike { workload, factor, duration } => {
                write!(f, "load-spike {workload} x{factor} for {}", humantime_serde::re::humantime::format_duration(*duration))
            }
        }
    }
}

impl Scenario {
    /// Reads and validates a scenario; errors name the file, the field and the line.
    pub fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading scenario {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("scenario {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Scenario> {
        // serde_yaml's errors already name the field path, line and column.
        let scenario: Scenario = serde_yaml::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    pub fn node_names(&self) -> Vec<String> {
        self.node_groups.iter().flat_map(|group| (0..group.count).map(move |index| format!("{}-{index}", group.name))).collect()
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.faults.validate().map_err(anyhow::Error::msg)?;
        let mut groups = BTreeSet::new();
        for (index, group) in self.node_groups.iter().enumerate() {
            let field = format!("nodeGroups[{index}]");
            if !groups.insert(&group.name) {
                bail!("{field}.name: {:?} is used twice", group.name);
            }
            wasp_sdk::quantity::cpu_millis(&group.cpu).with_context(|| format!("{field}.cpu"))?;
            wasp_sdk::quantity::whole_units(&group.memory).with_context(|| format!("{field}.memory"))?;
            for (name, value) in &group.extended {
                wasp_sdk::quantity::whole_units(value).with_context(|| format!("{field}.extended.{name}"))?;
            }
            for (position, taint) in group.taints.iter().enumerate() {
                check_effect(&taint.effect).with_context(|| format!("{field}.taints[{position}].effect"))?;
            }
            for (position, image) in group.images.iter().enumerate() {
                wasp_sdk::quantity::whole_units(&image.size).with_context(|| format!("{field}.images[{position}].size"))?;
                if image.names.is_empty() {
                    bail!("{field}.images[{position}].names: at least one name is needed");
                }
            }
        }
        let mut workloads = BTreeSet::new();
        for (index, workload) in self.workloads.iter().enumerate() {
            let field = format!("workloads[{index}]");
            if !workloads.insert((&workload.namespace, &workload.name)) {
                bail!("{field}.name: {}/{} is used twice", workload.namespace, workload.name);
            }
            if let Some(cpu) = &workload.cpu {
                wasp_sdk::quantity::cpu_millis(cpu).with_context(|| format!("{field}.cpu"))?;
            }
            if let Some(memory) = &workload.memory {
                wasp_sdk::quantity::whole_units(memory).with_context(|| format!("{field}.memory"))?;
            }
            if workload.pod_spec.as_ref().is_some_and(|spec| !spec.is_object()) {
                bail!("{field}.podSpec: must be a mapping of pod spec fields");
            }
        }
        let nodes: BTreeSet<String> = self.node_names().into_iter().collect();
        for (index, event) in self.events.iter().enumerate() {
            let field = format!("events[{index}]");
            match &event.action {
                Action::Cordon { node }
                | Action::Uncordon { node }
                | Action::Drain { node }
                | Action::FailNode { node }
                | Action::RecoverNode { node }
                | Action::Untaint { node, .. }
                | Action::Taint { node, .. } => {
                    if !nodes.contains(node) {
                        bail!("{field}.node: no node {node:?} in the node groups (nodes are named <group>-<index>)");
                    }
                    if let Action::Taint { effect, .. } = &event.action {
                        check_effect(effect).with_context(|| format!("{field}.effect"))?;
                    }
                }
                Action::Scale { workload, namespace, .. } => {
                    if !workloads.contains(&(namespace, workload)) {
                        bail!("{field}.workload: no workload {namespace}/{workload}");
                    }
                }
                Action::LoadSpike { workload, factor, .. } => {
                    if !self.workloads.iter().any(|candidate| &candidate.name == workload) {
                        bail!("{field}.workload: no workload {workload:?}");
                    }
                    if *factor < 0.0 {
                        bail!("{field}.factor: must not be negative");
                    }
                }
            }
        }
        Ok(())
    }

    /// When the last point of any load curve is reached.
    pub fn longest_curve(&self) -> Duration {
        let workloads = self.workloads.iter().flat_map(|workload| [&workload.load.cpu, &workload.load.memory, &workload.load.qps]);
        let curves = workloads.chain(self.external_metrics.values());
        curves.filter_map(|curve| curve.0.last().map(|point| point.at)).max().unwrap_or_default()
    }

    /// Creates the namespaces, nodes, workloads and budgets, and registers the load curves.
    pub fn apply(&self, store: &Store, load: &LoadModel) -> Result<(), ApiError> {
        let namespaces = resources::find("", "v1", "namespaces").expect("served");
        let mut wanted: BTreeSet<&str> = ["default", "kube-system"].into();
        wanted.extend(self.workloads.iter().map(|workload| workload.namespace.as_str()));
        for namespace in wanted {
            if store.get(namespaces, None, namespace).is_err() {
                store.create(namespaces, None, json!({"metadata": {"name": namespace}, "status": {"phase": "Active"}}))?;
            }
        }
        for group in &self.node_groups {
            for index in 0..group.count {
                store.create(resources::nodes(), None, node_object(group, index))?;
                if !group.volume_limits.is_empty() {
                    store.create(csi_nodes(), None, csi_node_object(group, index))?;
                }
            }
        }
        for class in &self.storage_classes {
            create_storage_class(store, class)?;
        }
        for workload in &self.workloads {
            create_workload(store, workload)?;
            load.set(&workload.name, workload.load.clone());
        }
        for (name, curve) in &self.external_metrics {
            load.set_external(name, curve.clone());
        }
        Ok(())
    }

    /// Runs the timed events, relative to now.
    pub fn spawn_events(&self, store: Arc<Store>, load: Arc<LoadModel>) -> tokio::task::JoinHandle<()> {
        let mut events = self.events.clone();
        events.sort_by_key(|event| event.at);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            for event in events {
                tokio::time::sleep_until(started + event.at).await;
                tracing::info!(at = ?event.at, action = ?event.action, "scenario event");
                if let Err(error) = run_action(&store, &load, &event.action).await {
                    tracing::warn!(action = ?event.action, %error, "scenario event failed");
                }
            }
        })
    }
}

fn check_effect(effect: &str) -> anyhow::Result<()> {
    if ["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        Ok(())
    } else {
        bail!("{effect:?} is not NoSchedule, PreferNoSchedule or NoExecute")
    }
}

fn node_object(group: &NodeGroup, index: u32) -> Value {
    let name = format!("{}-{index}", group.name);
    let mut labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "sim.wasp.dev/node-group": group.name});
    if !group.zones.is_empty() {
        labels["topology.kubernetes.io/zone"] = json!(group.zones[index as usize % group.zones.len()]);
    }
    for (key, value) in &group.labels {
        labels[key] = json!(value);
    }
    let mut capacity = json!({"cpu": group.cpu, "memory": group.memory, "pods": group.pods.to_string()});
    capacity["ephemeral-storage"] = json!(group.ephemeral_storage.clone().unwrap_or_else(|| "100Gi".into()));
    for (resource, value) in &group.extended {
        capacity[resource] = json!(value);
    }
    // Deterministic per node: 10.<group hash>.<index / 250>.<index % 250 + 1>, and a stable machine id.
    let group_byte = group.name.bytes().fold(0u8, |hash, byte| hash.wrapping_mul(31).wrapping_add(byte));
    let address = format!("10.{}.{}.{}", group_byte, index / 250, index % 250 + 1);
    let id = format!("{:0>32}", format!("{:x}{index:x}", group_byte));
    let taints: Vec<Value> = group.taints.iter().map(|taint| json!({"key": taint.key, "value": taint.value, "effect": taint.effect})).collect();
    // Sizes were checked by `validate`.
    let size = |image: &NodeImageSpec| wasp_sdk::quantity::whole_units(&image.size).unwrap_or(0);
    let images: Vec<Value> = group.images.iter().map(|image| json!({"names": image.names, "sizeBytes": size(image)})).collect();
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": group.unschedulable},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}],
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            // Every NodeSystemInfo field is required (the Python client refuses a node without one).
            "nodeInfo": {
                "machineID": id, "systemUUID": id, "bootID": id, "kernelVersion": "6.1.0-wasp-sim", "osImage": "wasp simulated node",
                "containerRuntimeVersion": "wasp-sim://simulated", "kubeletVersion": "v1.33.0-wasp-sim",
                "kubeProxyVersion": "v1.33.0-wasp-sim", "operatingSystem": "linux", "architecture": "amd64",
            },
        },
    })
}

fn csi_nodes() -> &'static crate::resources::ResourceType {
    resources::find("storage.k8s.io", "v1", "csinodes").expect("served")
}

/// The CSINode a driver's node plugin registers for a node: the driver, the node's id for it, and its limit.
fn csi_node_object(group: &NodeGroup, index: u32) -> Value {
    let name = format!("{}-{index}", group.name);
    let drivers: Vec<Value> = group
        .volume_limits
        .iter()
        .map(|(driver, count)| json!({"name": driver, "nodeID": name, "allocatable": {"count": count}, "topologyKeys": ["topology.kubernetes.io/zone"]}))
        .collect();
    json!({"metadata": {"name": name}, "spec": {"drivers": drivers}})
}

fn pod_template(workload: &Workload) -> Value {
    let mut labels = json!({"app": workload.name, WORKLOAD_LABEL: workload.name});
    for (key, value) in &workload.labels {
        labels[key] = json!(value);
    }
    let mut requests = json!({});
    if let Some(cpu) = &workload.cpu {
        requests["cpu"] = json!(cpu);
    }
    if let Some(memory) = &workload.memory {
        requests["memory"] = json!(memory);
    }
    let image = workload.image.as_deref().unwrap_or("registry.example/app:1");
    let mut spec = json!({"containers": [{"name": "app", "image": image, "resources": {"requests": requests}}], "terminationGracePeriodSeconds": 30});
    if let Some(scheduler) = &workload.scheduler_name {
        spec["schedulerName"] = json!(scheduler);
    }
    if let Some(priority) = workload.priority {
        spec["priority"] = json!(priority);
    }
    if let Some(extra) = &workload.pod_spec {
        json_patch::merge(&mut spec, extra);
    }
    json!({"metadata": {"labels": labels}, "spec": spec})
}

fn create_storage_class(store: &Store, class: &StorageClassSpec) -> Result<(), ApiError> {
    let mut object = json!({
        "metadata": {"name": class.name, "annotations": {}},
        "provisioner": "disk.csi.wasp-sim.dev",
        "volumeBindingMode": class.volume_binding_mode.as_deref().unwrap_or("Immediate"),
    });
    if class.default {
        object["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] = json!("true");
    }
    if !class.zones.is_empty() {
        object["allowedTopologies"] = json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": class.zones}]}]);
    }
    store
        .create(crate::volumes::classes(), None, object)
        .map(drop)
        .map_err(|error| ApiError { message: format!("storage class {}: {}", class.name, error.message), ..error })
}

fn create_workload(store: &Store, workload: &Workload) -> Result<(), ApiError> {
    if !workload.volumes.is_empty() && !matches!(workload.kind, WorkloadKind::StatefulSet) {
        return Err(ApiError::bad_request(format!("workload {}: volumes: only StatefulSet workloads have a claim per replica", workload.name)));
    }
    let template = pod_template(workload);
    let namespace = Some(workload.namespace.as_str());
    let selector = json!({"matchLabels": {WORKLOAD_LABEL: workload.name}});
    match workload.kind {
        WorkloadKind::Pods => {
            for index in 0..workload.replicas {
                let mut pod = template.clone();
                pod["metadata"]["name"] = json!(format!("{}-{index}", workload.name));
                store.create(resources::pods(), namespace, pod)?;
            }
        }
        WorkloadKind::Deployment | WorkloadKind::StatefulSet => {
            let (plural, kind) = match workload.kind {
                WorkloadKind::Deployment => ("deployments", "Deployment"),
                _ => ("statefulsets", "StatefulSet"),
            };
            let mut object = json!({
                "metadata": {"name": workload.name, "labels": {"app": workload.name}},
                "spec": {"replicas": workload.replicas, "selector": selector, "template": template},
            });
            if !workload.volumes.is_empty() {
                let templates: Vec<Value> = workload
                    .volumes
                    .iter()
                    .map(|volume| {
                        let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": volume.size}}});
                        if let Some(class) = &volume.storage_class {
                            spec["storageClassName"] = json!(class);
                        }
                        json!({"metadata": {"name": volume.name}, "spec": spec})
                    })
                    .collect();
                object["spec"]["volumeClaimTemplates"] = json!(templates);
            }
            store
                .create(resources::find("apps", "v1", plural).expect("served"), namespace, object)
                .map_err(|error| ApiError { message: format!("{kind} {}: {}", workload.name, error.message), ..error })?;
        }
    }
    if let Some(pdb) = &workload.pdb {
        let mut spec = json!({"selector": selector});
        if let Some(min) = &pdb.min_available {
            spec["minAvailable"] = min.clone();
        }
        if let Some(max) = &pdb.max_unavailable {
            spec["maxUnavailable"] = max.clone();
        }
        let object = json!({"metadata": {"name": workload.name}, "spec": spec});
        store.create(resources::find("policy", "v1", "poddisruptionbudgets").expect("served"), namespace, object)?;
    }
    Ok(())
}

fn set_taint(node: &mut Value, key: &str, value: &str, effect: &str) {
    let mut taints: Vec<Value> = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    taints.retain(|taint| !(taint["key"] == key && taint["effect"] == effect));
    taints.push(json!({"key": key, "value": value, "effect": effect}));
    node["spec"]["taints"] = json!(taints);
}

fn remove_taints(node: &mut Value, key: &str) {
    if let Some(taints) = node["spec"]["taints"].as_array_mut() {
        taints.retain(|taint| taint["key"] != key);
    }
}

fn set_ready(node: &mut Value, status: &str) {
    let condition = json!({"type": "Ready", "status": status, "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()});
    let mut conditions: Vec<Value> = node["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions.retain(|existing| existing["type"] != "Ready");
    conditions.push(condition);
    node["status"]["conditions"] = json!(conditions);
}

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

async fn run_action(store: &Store, load: &LoadModel, action: &Action) -> Result<(), ApiError> {
    let nodes = resources::nodes();
    let change_node = |node: &str, change: &dyn Fn(&mut Value)| {
        store.mutate(nodes, None, node, |object| {
            change(object);
            Ok(())
        })
    };
    match action {
        Action::Cordon { node } => change_node(node, &|object| object["spec"]["unschedulable"] = json!(true)).map(drop),
        Action::Uncordon { node } => change_node(node, &|object| object["spec"]["unschedulable"] = json!(false)).map(drop),
        Action::Taint { node, key, value, effect } => change_node(node, &|object| set_taint(object, key, value, effect)).map(drop),
        Action::Untaint { node, key } => change_node(node, &|object| remove_taints(object, key)).map(drop),
        Action::FailNode { node } => change_node(node, &|object| {
            set_ready(object, "Unknown");
            set_taint(object, UNREACHABLE, "", "NoSchedule");
            set_taint(object, UNREACHABLE, "", "NoExecute");
        })
        .map(drop),
        Action::RecoverNode { node } => change_node(node, &|object| {
            set_ready(object, "True");
            remove_taints(object, UNREACHABLE);
        })
        .map(drop),
        Action::Drain { node } => {
            change_node(node, &|object| object["spec"]["unschedulable"] = json!(true))?;
            for _attempt in 0..120 {
                let remaining: Vec<Arc<Value>> = store
                    .all(resources::pods())
                    .into_iter()
                    .filter(|pod| pod.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node.as_str()))
                    .filter(|pod| pod.pointer("/metadata/deletionTimestamp").is_none())
                    .collect();
                if remaining.is_empty() {
                    return Ok(());
                }
                for pod in remaining {
                    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str);
                    if let Err(error) = crate::subresources::evict_pod(store, namespace, name_of(&pod)) {
                        tracing::debug!(pod = name_of(&pod), %error, "drain: eviction refused, retrying");
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(())
        }
        Action::Scale { workload, namespace, replicas } => {
            let deployments = resources::find("apps", "v1", "deployments").expect("served");
            let statefulsets = resources::find("apps", "v1", "statefulsets").expect("served");
            let resource = if store.get(deployments, Some(namespace), workload).is_ok() { deployments } else { statefulsets };
            store
                .mutate(resource, Some(namespace), workload, |object| {
                    object["spec"]["replicas"] = json!(replicas);
                    Ok(())
                })
                .map(drop)
        }
        Action::LoadSpike { workload, factor, duration } => {
            load.spike(workload, *factor, *duration);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field_and_line() {
        let error = Scenario::parse("nodeGroups:\n- name: a\n  count: many\n  cpu: '4'\n  memory: 8Gi\n").unwrap_err();
        let message = format!("{error:#}");
        assert!(message.starts_with("nodeGroups[0].count: invalid type: string \"many\""), "{message}");
        assert!(message.contains("line 3"), "{message}");

        let error = Scenario::parse("nodeGroups:\n- {name: a, count: 1, cpu: lots, memory: 8Gi}\n").unwrap_err();
        assert!(format!("{error:#}").starts_with("nodeGroups[0].cpu: invalid quantity \"lots\""), "{error:#}");

        let error = Scenario::parse("events:\n- {at: 5s, action: cordon, node: ghost-0}\n").unwrap_err();
        assert!(format!("{error:#}").contains("events[0].node: no node \"ghost-0\""), "{error:#}");

        let error = Scenario::parse("events:\n- {at: 1s, action: scale, workload: web, replicas: 2, colour: blue}\nworkloads: [{name: web, replicas: 1}]\n")
            .unwrap_err();
        assert!(format!("{error:#}").contains("unknown field `colour`"), "{error:#}");
        let error = Scenario::parse("workloads:\n- {name: web, replicas: 1, colour: blue}\n").unwrap_err();
        assert!(format!("{error:#}").contains("unknown field `colour`"), "{error:#}");
    }

    #[test]
    fn node_names_follow_groups() {
        let scenario = Scenario::parse("nodeGroups:\n- {name: a, count: 2, cpu: '4', memory: 8Gi}\n- {name: b, count: 1, cpu: '4', memory: 8Gi}\n").unwrap();
        assert_eq!(scenario.node_names(), ["a-0", "a-1", "b-0"]);
    }
}

#[cfg(test)]
mod shipped {
    use super::Scenario;

    #[test]
    fn every_shipped_scenario_is_valid() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut checked = 0;
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|extension| extension == "yaml") {
                Scenario::load(&path).unwrap_or_else(|error| panic!("{error:#}"));
                checked += 1;
            }
        }
        assert!(checked >= 2, "scenarios in {}", folder.display());
    }
}
