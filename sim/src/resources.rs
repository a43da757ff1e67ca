//! The API resources the simulator serves, with what discovery reports about them.

use serde_json::{json, Value};
use std::sync::RwLock;

#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// Empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub subresources: &'static [&'static str],
    /// Computed on read (metrics APIs): no create, update or delete.
    pub read_only: bool,
    /// A CustomResourceDefinition's `additionalPrinterColumns`; empty for built-in types.
    pub printer_columns: &'static [PrinterColumn],
}

#[derive(Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: &'static str,
    pub kind: &'static str,
    /// A simple path (`.status.replicas`), as CRDs write them.
    pub json_path: &'static str,
    pub priority: u8,
    pub description: &'static str,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// `pods`, `apps/deployments`: identifies the resource in the store and in errors.
    pub fn id(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

macro_rules! resource {
    ($group:literal, $version:literal, $kind:literal, $plural:literal, $singular:literal, $namespaced:literal,
     [$($short:literal),*], [$($sub:literal),*], $read_only:literal) => {
        ResourceType {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: &[$($short),*],
            subresources: &[$($sub),*],
            read_only: $read_only,
            printer_columns: &[],
        }
    };
}

pub static RESOURCES: &[ResourceType] = &[
    resource!("", "v1", "Namespace", "namespaces", "namespace", false, ["ns"], ["status"], false),
    resource!("", "v1", "Node", "nodes", "node", false, ["no"], ["status"], false),
    resource!("", "v1", "Pod", "pods", "pod", true, ["po"], ["binding", "eviction", "exec", "log", "status"], false),
    resource!("", "v1", "Event", "events", "event", true, ["ev"], [], false),
    resource!("", "v1", "ConfigMap", "configmaps", "configmap", true, ["cm"], [], false),
    resource!("", "v1", "Secret", "secrets", "secret", true, [], [], false),
    resource!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", true, ["sa"], ["token"], false),
    resource!("", "v1", "Service", "services", "service", true, ["svc"], ["status"], false),
    resource!("", "v1", "Endpoints", "endpoints", "endpoints", true, ["ep"], [], false),
    resource!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", true, ["pvc"], ["status"], false),
    resource!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", false, ["pv"], ["status"], false),
    resource!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", false, ["sc"], [], false),
    resource!("storage.k8s.io", "v1", "CSINode", "csinodes", "csinode", false, [], [], false),
    resource!("events.k8s.io", "v1", "Event", "events", "event", true, ["ev"], [], false),
    resource!("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, [], [], false),
    resource!("apps", "v1", "Deployment", "deployments", "deployment", true, ["deploy"], ["scale", "status"], false),
    resource!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true, ["rs"], ["scale", "status"], false),
    resource!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", true, ["sts"], ["scale", "status"], false),
    resource!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", true, ["pdb"], ["status"], false),
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", false, [], [], false),
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", false, [], [], false),
    resource!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", true, [], [], false),
    resource!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", true, [], [], false),
    resource!("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", true, ["hpa"], ["status"], false),
    resource!(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        false,
        [],
        [],
        false
    ),
    resource!(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        false,
        [],
        [],
        false
    ),
    resource!(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        false,
        ["crd", "crds"],
        ["status"],
        false
    ),
    resource!("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", "", true, [], [], true),
    resource!("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", "", false, [], [], true),
    resource!("custom.metrics.k8s.io", "v1beta2", "MetricValue", "pods", "", true, [], [], true),
    resource!("external.metrics.k8s.io", "v1beta1", "ExternalMetricValue", "externalmetrics", "", true, [], [], true),
];

/// Types that CustomResourceDefinitions added, for the life of the process: leaked so that they are as
/// `'static` as the built-in ones (a simulator registers a handful). Every simulator of the process serves them.
static CUSTOM: RwLock<Vec<&'static ResourceType>> = RwLock::new(Vec::new());

/// Whether `resource` is one of the built-in types (not registered from a CustomResourceDefinition).
pub fn is_built_in(resource: &ResourceType) -> bool {
    RESOURCES.iter().any(|known| std::ptr::eq(known, resource))
}

/// Built-in and custom types, in discovery order.
pub fn served() -> Vec<&'static ResourceType> {
    let custom = CUSTOM.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    RESOURCES.iter().chain(custom.iter().copied()).collect()
}

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    let matches = |resource: &&ResourceType| resource.group == group && resource.version == version && resource.plural == plural;
    RESOURCES.iter().find(matches).or_else(|| CUSTOM.read().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().copied().find(matches))
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_string().into_boxed_str())
}

/// Serves every version of a CustomResourceDefinition `crd` (once per group, version and plural).
pub fn register_custom(crd: &Value) -> Result<(), String> {
    let spec = &crd["spec"];
    let text = |pointer: &str| spec.pointer(pointer).and_then(Value::as_str).filter(|text| !text.is_empty());
    let group = text("/group").ok_or("spec.group: Required value")?;
    let kind = text("/names/kind").ok_or("spec.names.kind: Required value")?;
    let plural = text("/names/plural").ok_or("spec.names.plural: Required value")?;
    let singular = text("/names/singular").map_or_else(|| kind.to_lowercase(), str::to_string);
    let namespaced = text("/scope") != Some("Cluster");
    let short_names: Vec<&'static str> =
        spec.pointer("/names/shortNames").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(leak).collect();
    let versions = spec["versions"].as_array().filter(|versions| !versions.is_empty()).ok_or("spec.versions: Required value")?;
    let mut custom = CUSTOM.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    for version in versions.iter().filter(|version| version["served"] != false) {
        let name = version["name"].as_str().ok_or("spec.versions[].name: Required value")?;
        if RESOURCES.iter().chain(custom.iter().copied()).any(|known| known.group == group && known.version == name && known.plural == plural) {
            continue;
        }
        let mut subresources = Vec::new();
        if version.pointer("/subresources/status").is_some() {
            subresources.push("status");
        }
        if version.pointer("/subresources/scale").is_some() {
            subresources.push("scale");
        }
        let columns: Vec<PrinterColumn> = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|column| {
                Some(PrinterColumn {
                    name: leak(column["name"].as_str()?),
                    kind: leak(column["type"].as_str().unwrap_or("string")),
                    json_path: leak(column["jsonPath"].as_str()?),
                    priority: column["priority"].as_u64().unwrap_or(0).min(255) as u8,
                    description: leak(column["description"].as_str().unwrap_or("")),
                })
            })
            .collect();
        custom.push(Box::leak(Box::new(ResourceType {
            group: leak(group),
            version: leak(name),
            kind: leak(kind),
            plural: leak(plural),
            singular: leak(&singular),
            namespaced,
            short_names: Box::leak(short_names.clone().into_boxed_slice()),
            subresources: Box::leak(subresources.into_boxed_slice()),
            read_only: false,
            printer_columns: Box::leak(columns.into_boxed_slice()),
        })));
    }
    Ok(())
}

pub fn pods() -> &'static ResourceType {
    find("", "v1", "pods").expect("pods are served")
}

pub fn nodes() -> &'static ResourceType {
    find("", "v1", "nodes").expect("nodes are served")
}

/// Group/version pairs in discovery order.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for resource in served() {
        if !pairs.contains(&(resource.group, resource.version)) {
            pairs.push((resource.group, resource.version));
        }
    }
    pairs
}

pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = group_versions()
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, version)| {
            let group_version = json!({"groupVersion": format!("{group}/{version}"), "version": version});
            json!({"name": group, "versions": [group_version.clone()], "preferredVersion": group_version})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(group: &str) -> Option<Value> {
    let (_, version) = group_versions().into_iter().find(|(name, _)| *name == group)?;
    let group_version = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    Some(json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [group_version.clone()], "preferredVersion": group_version}))
}

pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let served: Vec<&ResourceType> = served().into_iter().filter(|resource| resource.group == group && resource.version == version).collect();
    if served.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for resource in &served {
        let verbs: &[&str] =
            if resource.read_only { &["get", "list"] } else { &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"] };
        let mut entry = json!({
            "name": resource.plural, "singularName": resource.singular, "namespaced": resource.namespaced,
            "kind": resource.kind, "verbs": verbs, "shortNames": resource.short_names,
        });
        // `kubectl get all`: the kinds kube-apiserver puts in the `all` category.
        if matches!((resource.group, resource.kind), ("", "Pod" | "Service") | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet")) {
            entry["categories"] = json!(["all"]);
        }
        entries.push(entry);
        for sub in resource.subresources {
            let (kind, verbs): (String, &[&str]) = match *sub {
                "binding" => ("Binding".into(), &["create"]),
                "eviction" => ("Eviction".into(), &["create"]),
                "scale" => ("Scale".into(), &["get", "patch", "update"]),
                "log" => ("Pod".into(), &["get"]),
                "exec" => ("PodExecOptions".into(), &["create", "get"]),
                _ => (resource.kind.to_string(), &["get", "patch", "update"]),
            };
            let mut entry =
                json!({"name": format!("{}/{sub}", resource.plural), "singularName": "", "namespaced": resource.namespaced, "kind": kind, "verbs": verbs});
            if *sub == "scale" {
                entry["group"] = json!("autoscaling");
                entry["version"] = json!("v1");
            }
            if *sub == "eviction" {
                entry["group"] = json!("policy");
                entry["version"] = json!("v1");
            }
            entries.push(entry);
        }
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}))
}
