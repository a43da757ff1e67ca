//! Server-side printing: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` gets a `meta.k8s.io` Table with
//! kube-apiserver's printer columns (`pkg/printers/internalversion/printers.go`), so `kubectl get` prints what it
//! prints against a real cluster. Kinds without printer columns get NAME and AGE, as the API server's default
//! table convertor gives.

use crate::resources::ResourceType;
use crate::selectors_k8s::selector_string;
use crate::store::name_of;
use axum::http::HeaderMap;
use serde_json::{json, Value};

/// Which Table version the client asked for, if any (`v1` or `v1beta1`).
pub fn requested(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get("accept").and_then(|value| value.to_str().ok())?;
    for media_type in accept.split(',') {
        let mut parts = media_type.split(';').map(str::trim);
        if !matches!(parts.next(), Some("application/json")) {
            continue;
        }
        let (mut table, mut group, mut version) = (false, false, None);
        for parameter in parts {
            match parameter.split_once('=') {
                Some(("as", "Table")) => table = true,
                Some(("g", "meta.k8s.io")) => group = true,
                Some(("v", "v1")) => version = Some("v1"),
                Some(("v", "v1beta1")) => version = Some("v1beta1"),
                _ => {}
            }
        }
        if table && group && version.is_some() {
            return version;
        }
    }
    None
}

/// What rows carry as `object` (`includeObject`): partial metadata by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn from_query(value: Option<&str>) -> Include {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

struct Column {
    name: &'static str,
    kind: &'static str,
    priority: u8,
    description: &'static str,
}

const fn column(name: &'static str, kind: &'static str, priority: u8, description: &'static str) -> Column {
    Column { name, kind, priority, description }
}

const NAME: Column = column(
    "Name",
    "string",
    0,
    "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
);
const AGE: Column = column("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.");
const CONTAINERS: Column = column("Containers", "string", 1, "Names of each container in the template.");
const IMAGES: Column = column("Images", "string", 1, "Images referenced by each container in the template.");

fn columns(resource: &ResourceType) -> Vec<Column> {
    if !resource.printer_columns.is_empty() {
        let custom = resource.printer_columns.iter().map(|column| {
            let kind = if column.kind == "date" { "date" } else { column.kind };
            Column { name: column.name, kind, priority: column.priority, description: column.description }
        });
        return std::iter::once(NAME).chain(custom).collect();
    }
    match (resource.group, resource.kind) {
        ("", "Pod") => vec![
            NAME,
            column("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            column("Status", "string", 0, "The aggregate status of the containers in this pod."),
            column("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            column("IP", "string", 1, "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            column("Node", "string", 1, "NodeName indicates in which node this pod is scheduled."),
            column("Nominated Node", "string", 1, "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods."),
            column("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
        ],
        ("", "Node") => vec![
            NAME,
            column("Status", "string", 0, "The status of the node"),
            column("Roles", "string", 0, "The roles of the node"),
            AGE,
            column("Version", "string", 0, "Kubelet Version reported by the node."),
            column("Internal-IP", "string", 1, "List of addresses reachable to the node."),
            column("External-IP", "string", 1, "List of addresses reachable to the node."),
            column("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            column("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            column("Container-Runtime", "string", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        ("", "Namespace") => vec![NAME, column("Status", "string", 0, "The status of the namespace"), AGE],
        ("", "PersistentVolumeClaim") => vec![
            NAME,
            column("Status", "string", 0, "phase represents the current phase of PersistentVolumeClaim."),
            column("Volume", "string", 0, "volumeName is the binding reference to the PersistentVolume backing this claim."),
            column("Capacity", "string", 0, "capacity represents the actual resources of the underlying volume."),
            column("Access Modes", "string", 0, "accessModes contains the desired access modes the volume should have."),
            column("StorageClass", "string", 0, "storageClassName is the name of the StorageClass required by the claim."),
            column("VolumeAttributesClass", "string", 0, "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim."),
            AGE,
            column("VolumeMode", "string", 1, "volumeMode defines what type of volume is required by the claim."),
        ],
        ("", "PersistentVolume") => vec![
            NAME,
            column("Capacity", "string", 0, "capacity is the description of the persistent volume's resources and capacity."),
            column("Access Modes", "string", 0, "accessModes contains all ways the volume can be mounted."),
            column("Reclaim Policy", "string", 0, "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
            column("Status", "string", 0, "phase indicates if a volume is available, bound to a claim, or released by a claim."),
            column("Claim", "string", 0, "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
            column("StorageClass", "string", 0, "storageClassName is the name of StorageClass to which this persistent volume belongs."),
            column("VolumeAttributesClass", "string", 0, "Name of VolumeAttributesClass to which this persistent volume belongs."),
            column("Reason", "string", 0, "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
            AGE,
            column("VolumeMode", "string", 1, "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state."),
        ],
        ("storage.k8s.io", "StorageClass") => vec![
            NAME,
            column("Provisioner", "string", 0, "provisioner indicates the type of the provisioner."),
            column("ReclaimPolicy", "string", 0, "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class."),
            column("VolumeBindingMode", "string", 0, "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound."),
            column("AllowVolumeExpansion", "string", 0, "allowVolumeExpansion shows whether the storage class allow volume expand."),
            AGE,
        ],
        ("storage.k8s.io", "CSINode") => vec![NAME, column("Drivers", "integer", 0, "Drivers indicates the number of CSI drivers registered on the node"), AGE],
        ("", "ConfigMap") => vec![NAME, column("Data", "string", 0, "Data contains the configuration data."), AGE],
        ("", "Secret") => vec![NAME, column("Type", "string", 0, "Used to facilitate programmatic handling of secret data."), column("Data", "string", 0, "Data contains the secret data."), AGE],
        ("", "ServiceAccount") => vec![NAME, column("Secrets", "string", 0, "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."), AGE],
        ("", "Service") => vec![
            NAME,
            column("Type", "string", 0, "type determines how the Service is exposed."),
            column("Cluster-IP", "string", 0, "clusterIP is the IP address of the service."),
            column("External-IP", "string", 0, "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            column("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
            AGE,
            column("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector."),
        ],
        ("", "Endpoints") => vec![NAME, column("Endpoints", "string", 0, "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service."), AGE],
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => {
            vec![NAME, column("Webhooks", "integer", 0, "Webhooks indicates the number of webhooks included in the configuration"), AGE]
        }
        ("", "Event") | ("events.k8s.io", "Event") => vec![
            column("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
            column("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
            column("Reason", "string", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            column("Object", "string", 0, "The object that this event is about."),
            column("Subobject", "string", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]."),
            column("Source", "string", 1, "The component reporting this event. Should be a short machine understandable string."),
            column("Message", "string", 0, "A human-readable description of the status of this operation."),
            column("First Seen", "string", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
            column("Count", "string", 1, "The number of times this event has occurred."),
            column("Name", "string", 1, "Name must be unique within a namespace."),
        ],
        ("apps", "Deployment") => vec![
            NAME,
            column("Ready", "string", 0, "Number of the pod with ready state"),
            column("Up-to-date", "string", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            column("Available", "string", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            CONTAINERS,
            IMAGES,
            column("Selector", "string", 1, "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
        ],
        ("apps", "ReplicaSet") => vec![
            NAME,
            column("Desired", "integer", 0, "Replicas is the number of desired pods."),
            column("Current", "integer", 0, "Replicas is the most recently observed number of replicas."),
            column("Ready", "integer", 0, "The number of ready replicas for this replica set."),
            AGE,
            CONTAINERS,
            IMAGES,
            column("Selector", "string", 1, "Selector is a label query over pods that should match the replica count."),
        ],
        ("apps", "StatefulSet") => vec![NAME, column("Ready", "string", 0, "Number of the pod with ready state"), AGE, CONTAINERS, IMAGES],
        ("policy", "PodDisruptionBudget") => vec![
            NAME,
            column("Min Available", "string", 0, "The minimum number of pods that must be available."),
            column("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
            column("Allowed Disruptions", "integer", 0, "Calculated number of pods that may be disrupted at this time."),
            AGE,
        ],
        ("coordination.k8s.io", "Lease") => vec![NAME, column("Holder", "string", 0, "The holder of the lease."), AGE],
        _ => vec![NAME, AGE],
    }
}

/// kube's `GetAccessModesAsString`: `RWO,ROX`, in that fixed order.
fn access_modes(modes: Option<&Value>) -> String {
    let listed: Vec<&str> = modes.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(mode, _)| listed.contains(mode))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

fn or_unset(text: String) -> String {
    if text.is_empty() {
        "<unset>".into()
    } else {
        text
    }
}

/// kube's `duration.HumanDuration`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let rest = seconds % 60;
        return if rest == 0 { format!("{minutes}m") } else { format!("{minutes}m{rest}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let rest = minutes % 60;
        return if rest == 0 { format!("{hours}h") } else { format!("{hours}h{rest}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rest = hours % 24;
        return if rest == 0 { format!("{}d", hours / 24) } else { format!("{}d{rest}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: `<unknown>` without a timestamp.
fn since(timestamp: Option<&Value>) -> String {
    let parsed = timestamp.and_then(Value::as_str).and_then(|text| text.parse::<jiff::Timestamp>().ok());
    match parsed {
        Some(at) => human_duration(crate::clock::now().as_second() - at.as_second()),
        None => "<unknown>".into(),
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        _ => String::new(),
    }
}

fn or_none(text: String) -> String {
    if text.is_empty() {
        "<none>".into()
    } else {
        text
    }
}

fn int(value: Option<&Value>) -> i64 {
    value.and_then(Value::as_i64).unwrap_or(0)
}

fn age(object: &Value) -> Value {
    json!(since(object.pointer("/metadata/creationTimestamp")))
}

fn template_containers(object: &Value) -> (Value, Value) {
    let containers = object.pointer("/spec/template/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
    let names: Vec<String> = containers.iter().map(|container| text(container.get("name"))).collect();
    let images: Vec<String> = containers.iter().map(|container| text(container.get("image"))).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

/// printPod's STATUS: the phase, overridden by container states, `Terminating` while deleting.
fn pod_status(pod: &Value) -> String {
    let mut reason = text(pod.pointer("/status/phase"));
    if let Some(status_reason) = pod.pointer("/status/reason").and_then(Value::as_str).filter(|text| !text.is_empty()) {
        reason = status_reason.to_string();
    }
    let mut running = false;
    for status in pod.pointer("/status/containerStatuses").and_then(Value::as_array).into_iter().flatten().rev() {
        let state = &status["state"];
        if let Some(waiting) = state["waiting"]["reason"].as_str().filter(|text| !text.is_empty()) {
            reason = waiting.to_string();
        } else if let Some(terminated) = state.get("terminated").filter(|value| value.is_object()) {
            reason = terminated["reason"].as_str().map_or_else(|| format!("ExitCode:{}", int(terminated.get("exitCode"))), str::to_string);
        } else if state.get("running").is_some_and(Value::is_object) && status["ready"] == true {
            running = true;
        }
    }
    if reason == "Completed" && running {
        reason = "Running".into();
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if pod.pointer("/status/reason").and_then(Value::as_str) == Some("NodeLost") { "Unknown".into() } else { "Terminating".into() };
    }
    if reason.is_empty() {
        "Pending".into()
    } else {
        reason
    }
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
    let statuses = pod.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
    let ready = statuses.iter().filter(|status| status["ready"] == true).count();
    let restarts: i64 = statuses.iter().map(|status| int(status.get("restartCount"))).sum();
    let gates = pod.pointer("/spec/readinessGates").and_then(Value::as_array).filter(|gates| !gates.is_empty()).map_or_else(
        || "<none>".to_string(),
        |gates| {
            let conditions = pod.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
            let met = gates
                .iter()
                .filter(|gate| conditions.iter().any(|condition| condition["type"] == gate["conditionType"] && condition["status"] == "True"))
                .count();
            format!("{met}/{}", gates.len())
        },
    );
    vec![
        json!(name_of(pod)),
        json!(format!("{ready}/{containers}")),
        json!(pod_status(pod)),
        json!(restarts.to_string()),
        age(pod),
        json!(or_none(text(pod.pointer("/status/podIP")))),
        json!(or_none(text(pod.pointer("/spec/nodeName")))),
        json!(or_none(text(pod.pointer("/status/nominatedNodeName")))),
        json!(gates),
    ]
}

/// printNode's STATUS: the Ready condition, then `SchedulingDisabled` when cordoned.
pub fn node_status(node: &Value) -> String {
    let conditions = node.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut status: Vec<&str> = Vec::new();
    if let Some(ready) = conditions.iter().find(|condition| condition["type"] == "Ready") {
        status.push(match ready["status"].as_str() {
            Some("True") => "Ready",
            Some("False") => "NotReady",
            _ => "Unknown",
        });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push("SchedulingDisabled");
    }
    status.join(",")
}

fn node_cells(node: &Value) -> Vec<Value> {
    let mut roles: Vec<String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                    Some(role) if !role.is_empty() => Some(role.to_string()),
                    _ if key == "kubernetes.io/role" => value.as_str().filter(|role| !role.is_empty()).map(str::to_string),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    let address = |kind: &str| {
        node.pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|addresses| addresses.iter().find(|address| address["type"] == kind))
            .map(|address| text(address.get("address")))
            .unwrap_or_default()
    };
    let info = |field: &str| or_none(text(node.pointer(&format!("/status/nodeInfo/{field}"))));
    vec![
        json!(name_of(node)),
        json!(node_status(node)),
        json!(or_none(roles.join(","))),
        age(node),
        json!(text(node.pointer("/status/nodeInfo/kubeletVersion"))),
        json!(or_none(address("InternalIP"))),
        json!(or_none(address("ExternalIP"))),
        json!(if text(node.pointer("/status/nodeInfo/osImage")).is_empty() { "<unknown>".to_string() } else { info("osImage") }),
        json!(if text(node.pointer("/status/nodeInfo/kernelVersion")).is_empty() { "<unknown>".to_string() } else { info("kernelVersion") }),
        json!(if text(node.pointer("/status/nodeInfo/containerRuntimeVersion")).is_empty() {
            "<unknown>".to_string()
        } else {
            info("containerRuntimeVersion")
        }),
    ]
}

/// Core/v1 event cells; events.k8s.io objects are printed through their core view.
fn event_cells(event: &Value) -> Vec<Value> {
    let series_last = event.pointer("/series/lastObservedTime");
    let last = series_last
        .filter(|value| value.is_string())
        .or_else(|| event.get("lastTimestamp").filter(|value| value.is_string()))
        .or_else(|| event.get("eventTime").filter(|value| value.is_string()));
    let first = event.get("firstTimestamp").filter(|value| value.is_string()).or_else(|| event.get("eventTime").filter(|value| value.is_string()));
    let count = event.pointer("/series/count").and_then(Value::as_i64).unwrap_or_else(|| int(event.get("count")));
    let mut source = text(event.pointer("/source/component"));
    if source.is_empty() {
        source = text(event.get("reportingComponent"));
    }
    let host = text(event.pointer("/source/host"));
    if !host.is_empty() {
        source = format!("{source}, {host}");
    }
    let kind = text(event.pointer("/involvedObject/kind")).to_lowercase();
    vec![
        json!(since(last)),
        json!(text(event.get("type"))),
        json!(text(event.get("reason"))),
        json!(format!("{kind}/{}", text(event.pointer("/involvedObject/name")))),
        json!(text(event.pointer("/involvedObject/fieldPath"))),
        json!(source),
        json!(text(event.get("message")).trim().to_string()),
        json!(since(first)),
        json!(count.to_string()),
        json!(name_of(event)),
    ]
}

fn cells(resource: &ResourceType, object: &Value) -> Vec<Value> {
    let name = json!(name_of(object));
    if !resource.printer_columns.is_empty() {
        // As apiextensions-apiserver's table convertor: simple paths, dates as ages, absent values empty.
        let custom = resource.printer_columns.iter().map(|column| {
            let value = object.pointer(&column.json_path.replace('.', "/"));
            match (column.kind, value) {
                ("date", Some(_)) => json!(since(value)),
                (_, Some(value)) => value.clone(),
                (_, None) => Value::Null,
            }
        });
        return std::iter::once(name).chain(custom).collect();
    }
    match (resource.group, resource.kind) {
        ("", "Pod") => pod_cells(object),
        ("", "Node") => node_cells(object),
        ("", "Namespace") => vec![name, json!(text(object.pointer("/status/phase"))), age(object)],
        // kube-apiserver's printer: capacity and access modes once a volume is named, `Terminating` when deleted.
        ("", "PersistentVolumeClaim") => {
            let (capacity, modes) = match text(object.pointer("/spec/volumeName")).is_empty() {
                false => (text(object.pointer("/status/capacity/storage")), access_modes(object.pointer("/status/accessModes"))),
                true => (String::new(), String::new()),
            };
            let phase = if object.pointer("/metadata/deletionTimestamp").is_some() { "Terminating".to_string() } else { text(object.pointer("/status/phase")) };
            vec![
                name,
                json!(phase),
                json!(text(object.pointer("/spec/volumeName"))),
                json!(capacity),
                json!(modes),
                json!(text(object.pointer("/spec/storageClassName"))),
                json!(or_unset(text(object.pointer("/spec/volumeAttributesClassName")))),
                age(object),
                json!(text(object.pointer("/spec/volumeMode"))),
            ]
        }
        ("", "PersistentVolume") => {
            let claim =
                match (object.pointer("/spec/claimRef/namespace").and_then(Value::as_str), object.pointer("/spec/claimRef/name").and_then(Value::as_str)) {
                    (Some(namespace), Some(claim)) => format!("{namespace}/{claim}"),
                    _ => String::new(),
                };
            vec![
                name,
                json!(text(object.pointer("/spec/capacity/storage"))),
                json!(access_modes(object.pointer("/spec/accessModes"))),
                json!(text(object.pointer("/spec/persistentVolumeReclaimPolicy"))),
                json!(if object.pointer("/metadata/deletionTimestamp").is_some() { "Terminating".to_string() } else { text(object.pointer("/status/phase")) }),
                json!(claim),
                json!(text(object.pointer("/spec/storageClassName"))),
                json!(or_unset(text(object.pointer("/spec/volumeAttributesClassName")))),
                json!(text(object.pointer("/status/reason"))),
                age(object),
                json!(text(object.pointer("/spec/volumeMode"))),
            ]
        }
        ("storage.k8s.io", "CSINode") => vec![name, json!(object.pointer("/spec/drivers").and_then(Value::as_array).map_or(0, Vec::len)), age(object)],
        ("storage.k8s.io", "StorageClass") => {
            let default = ["storageclass.kubernetes.io~1is-default-class", "storageclass.beta.kubernetes.io~1is-default-class"]
                .iter()
                .any(|key| object.pointer(&format!("/metadata/annotations/{key}")).and_then(Value::as_str) == Some("true"));
            let shown = if default { json!(format!("{} (default)", name.as_str().unwrap_or(""))) } else { name };
            vec![
                shown,
                json!(text(object.get("provisioner"))),
                json!(text(object.get("reclaimPolicy"))),
                json!(text(object.get("volumeBindingMode"))),
                json!(object.get("allowVolumeExpansion").and_then(Value::as_bool).unwrap_or(false)),
                age(object),
            ]
        }
        ("", "ConfigMap") => {
            let count = |field: &str| object.get(field).and_then(Value::as_object).map_or(0, |map| map.len());
            vec![name, json!(count("data") + count("binaryData")), age(object)]
        }
        ("", "Secret") => {
            let count = object.get("data").and_then(Value::as_object).map_or(0, |map| map.len());
            vec![name, json!(text(object.get("type"))), json!(count), age(object)]
        }
        ("", "ServiceAccount") => vec![name, json!(object.get("secrets").and_then(Value::as_array).map_or(0, Vec::len)), age(object)],
        ("", "Service") => {
            let ports: Vec<String> = object
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|port| {
                    let protocol = port["protocol"].as_str().unwrap_or("TCP");
                    match port.get("nodePort").and_then(Value::as_i64) {
                        Some(node_port) => format!("{}:{node_port}/{protocol}", int(port.get("port"))),
                        None => format!("{}/{protocol}", int(port.get("port"))),
                    }
                })
                .collect();
            let external: Vec<String> = object.pointer("/spec/externalIPs").and_then(Value::as_array).into_iter().flatten().map(|ip| text(Some(ip))).collect();
            let selector: Vec<String> = object
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .map(|map| map.iter().map(|(key, value)| format!("{key}={}", text(Some(value)))).collect())
                .unwrap_or_default();
            let service_type = text(object.pointer("/spec/type"));
            vec![
                name,
                json!(if service_type.is_empty() { "ClusterIP".to_string() } else { service_type }),
                json!(or_none(text(object.pointer("/spec/clusterIP")))),
                json!(or_none(external.join(","))),
                json!(or_none(ports.join(","))),
                age(object),
                json!(or_none(selector.join(","))),
            ]
        }
        ("", "Endpoints") => vec![name, json!(endpoints_text(object)), age(object)],
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => {
            vec![name, json!(object.get("webhooks").and_then(Value::as_array).map_or(0, Vec::len)), age(object)]
        }
        ("", "Event") => event_cells(object),
        ("events.k8s.io", "Event") => event_cells(&crate::events::to_core(object)),
        ("apps", "Deployment") => {
            let (containers, images) = template_containers(object);
            let status = |field: &str| int(object.pointer(&format!("/status/{field}")));
            vec![
                name,
                json!(format!("{}/{}", status("readyReplicas"), int(object.pointer("/spec/replicas")))),
                json!(status("updatedReplicas")),
                json!(status("availableReplicas")),
                age(object),
                containers,
                images,
                json!(selector_string(object.pointer("/spec/selector").unwrap_or(&Value::Null))),
            ]
        }
        ("apps", "ReplicaSet") => {
            let (containers, images) = template_containers(object);
            vec![
                name,
                json!(int(object.pointer("/spec/replicas"))),
                json!(int(object.pointer("/status/replicas"))),
                json!(int(object.pointer("/status/readyReplicas"))),
                age(object),
                containers,
                images,
                json!(selector_string(object.pointer("/spec/selector").unwrap_or(&Value::Null))),
            ]
        }
        ("apps", "StatefulSet") => {
            let (containers, images) = template_containers(object);
            vec![
                name,
                json!(format!("{}/{}", int(object.pointer("/status/readyReplicas")), int(object.pointer("/spec/replicas")))),
                age(object),
                containers,
                images,
            ]
        }
        ("policy", "PodDisruptionBudget") => {
            let spec = |field: &str| object.pointer(&format!("/spec/{field}")).map_or_else(|| "N/A".to_string(), |value| text(Some(value)));
            vec![name, json!(spec("minAvailable")), json!(spec("maxUnavailable")), json!(int(object.pointer("/status/disruptionsAllowed"))), age(object)]
        }
        ("coordination.k8s.io", "Lease") => vec![name, json!(text(object.pointer("/spec/holderIdentity"))), age(object)],
        _ => vec![name, age(object)],
    }
}

/// `10.0.0.1:443,10.0.0.2:443 + 1 more...`, as kubectl's endpoints printer: ready addresses with each port, the
/// first three shown.
fn endpoints_text(endpoints: &Value) -> String {
    let mut all = Vec::new();
    for subset in endpoints.get("subsets").and_then(Value::as_array).into_iter().flatten() {
        let ports: Vec<i64> = subset.get("ports").and_then(Value::as_array).into_iter().flatten().map(|port| int(port.get("port"))).collect();
        for ip in subset.get("addresses").and_then(Value::as_array).into_iter().flatten().map(|address| text(address.get("ip"))) {
            if ports.is_empty() {
                all.push(ip.clone());
            }
            all.extend(ports.iter().map(|port| format!("{ip}:{port}")));
        }
    }
    let shown = all.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    match all.len() {
        0 => "<none>".into(),
        1..=3 => shown,
        count => format!("{shown} + {} more...", count - 3),
    }
}

fn row(resource: &ResourceType, object: &Value, include: Include, version: &str) -> Value {
    let mut row = json!({"cells": cells(resource, object)});
    match include {
        Include::None => {}
        Include::Object => row["object"] = object.clone(),
        Include::Metadata => {
            row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": object["metadata"]});
        }
    }
    row
}

/// A Table of `objects`; `metadata` is the list metadata (resourceVersion, continue).
pub fn table<'a>(resource: &ResourceType, objects: impl IntoIterator<Item = &'a Value>, metadata: Value, include: Include, version: &str) -> Value {
    let definitions: Vec<Value> = columns(resource)
        .iter()
        .map(|column| {
            let format = if column.name == "Name" && column.priority == 0 { "name" } else { "" };
            json!({"name": column.name, "type": column.kind, "format": format, "description": column.description, "priority": column.priority})
        })
        .collect();
    let rows: Vec<Value> = objects.into_iter().map(|object| row(resource, object, include, version)).collect();
    json!({"kind": "Table", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn names(resource: &ResourceType, wide: bool) -> Vec<String> {
        columns(resource).iter().filter(|column| wide || column.priority == 0).map(|column| column.name.to_uppercase()).collect()
    }

    #[test]
    fn columns_match_kube_apiserver() {
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!(names(pods, false), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
        assert_eq!(names(pods, true)[5..], ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]);
        let nodes = find("", "v1", "nodes").unwrap();
        assert_eq!(names(nodes, false), ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
        assert_eq!(names(nodes, true)[5..], ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]);
        assert_eq!(names(find("apps", "v1", "deployments").unwrap(), false), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
        assert_eq!(names(find("apps", "v1", "replicasets").unwrap(), false), ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]);
        assert_eq!(names(find("apps", "v1", "statefulsets").unwrap(), false), ["NAME", "READY", "AGE"]);
        assert_eq!(names(find("", "v1", "events").unwrap(), false), ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
        assert_eq!(
            names(find("policy", "v1", "poddisruptionbudgets").unwrap(), false),
            ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]
        );
        assert_eq!(names(find("coordination.k8s.io", "v1", "leases").unwrap(), false), ["NAME", "HOLDER", "AGE"]);
        assert_eq!(names(find("", "v1", "namespaces").unwrap(), false), ["NAME", "STATUS", "AGE"]);
        assert_eq!(names(find("", "v1", "configmaps").unwrap(), false), ["NAME", "DATA", "AGE"]);
        assert_eq!(names(find("", "v1", "endpoints").unwrap(), false), ["NAME", "ENDPOINTS", "AGE"]);
        assert_eq!(
            names(find("", "v1", "persistentvolumeclaims").unwrap(), false),
            ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"]
        );
        assert_eq!(
            names(find("", "v1", "persistentvolumes").unwrap(), false),
            ["NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "REASON", "AGE"]
        );
        assert_eq!(
            names(find("storage.k8s.io", "v1", "storageclasses").unwrap(), false),
            ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]
        );
        assert_eq!(names(find("storage.k8s.io", "v1", "csinodes").unwrap(), false), ["NAME", "DRIVERS", "AGE"]);
        for plural in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
            assert_eq!(names(find("admissionregistration.k8s.io", "v1", plural).unwrap(), false), ["NAME", "WEBHOOKS", "AGE"]);
        }
    }

    #[test]
    fn node_status_shows_cordoned_and_not_ready() {
        let mut node = json!({"metadata": {"name": "n"}, "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(node_status(&node), "Ready");
        node["spec"]["unschedulable"] = json!(true);
        assert_eq!(node_status(&node), "Ready,SchedulingDisabled");
        node["status"]["conditions"][0]["status"] = json!("False");
        assert_eq!(node_status(&node), "NotReady,SchedulingDisabled");
    }

    #[test]
    fn pod_rows_show_readiness_status_and_node() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"nodeName": "worker-0", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]},
        });
        let cells = pod_cells(&pod);
        assert_eq!(cells[..4], [json!("p"), json!("1/2"), json!("ContainerCreating"), json!("1")]);
        assert_eq!(cells[5..], [json!("10.0.0.1"), json!("worker-0"), json!("<none>"), json!("<none>")]);
    }

    #[test]
    fn human_durations_match_kube() {
        for (seconds, expected) in
            [(5, "5s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"), (400 * 86400, "400d")]
        {
            assert_eq!(human_duration(seconds), expected);
        }
    }

    #[test]
    fn accept_headers_pick_the_table_version() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json".parse().unwrap(),
        );
        assert_eq!(requested(&headers), Some("v1"));
        headers.insert("accept", "application/json;as=Table;v=v1beta1;g=meta.k8s.io".parse().unwrap());
        assert_eq!(requested(&headers), Some("v1beta1"));
        headers.insert("accept", "application/json".parse().unwrap());
        assert_eq!(requested(&headers), None);
    }
}
