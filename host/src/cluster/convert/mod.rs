//! Kubernetes objects (k8s-openapi) into the contract's pod and node records. Every error names the object and
//! the field, so a malformed manifest is easy to fix.

mod resize;

use super::state::{EvictionConsent, PodMeta, EVICT_ANNOTATION};
use crate::contract::types::{
    AttachedVolume, ClaimRequirement, Condition, Container, ContainerState, HostPort, InclusionPolicy, LabelSelector, Node, NodeAffinity, NodeImage,
    NodeSelectorTerm, Owner, Pod, PodAffinity, PodAffinityTerm, PodPhase, PortProtocol, PreferredTerm, Resources, SelectorOperator, SelectorRequirement, Taint,
    TaintEffect, Termination, Toleration, TolerationOperator, TopologySpreadConstraint, UnsatisfiableAction, VolumeClaim, WeightedPodAffinityTerm,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use std::collections::BTreeMap;
use wasp_sdk::quantity;

/// The address a host port binds when the pod names none: every address of the node.
const ANY_IP: &str = "0.0.0.0";
/// kubectl's copy of the whole object: large, and never what a policy wants to read.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// kube-scheduler's default when a node does not report `pods` in its allocatable resources.
const DEFAULT_MAX_PODS: u32 = 110;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{object}: {field}: {reason}")]
pub struct ConvertError {
    /// `pod default/web-1` or `node worker-3`.
    pub object: String,
    pub field: String,
    pub reason: String,
}

struct Context {
    object: String,
}

impl Context {
    fn error(&self, field: impl Into<String>, reason: impl Into<String>) -> ConvertError {
        ConvertError { object: self.object.clone(), field: field.into(), reason: reason.into() }
    }

    fn resources(&self, field: &str, list: Option<&BTreeMap<String, Quantity>>) -> Result<Resources, ConvertError> {
        let mut resources = Resources { cpu_millis: 0, memory_bytes: 0, ephemeral_storage_bytes: 0, scalar: Vec::new() };
        for (name, value) in list.into_iter().flatten() {
            let field = format!("{field}.{name}");
            let whole = || quantity::whole_units(&value.0).map_err(|error| self.error(&field, error.to_string()));
            match name.as_str() {
                "cpu" => resources.cpu_millis = quantity::cpu_millis(&value.0).map_err(|error| self.error(&field, error.to_string()))?,
                "memory" => resources.memory_bytes = whole()?,
                "ephemeral-storage" => resources.ephemeral_storage_bytes = whole()?,
                // The pod count is a node property, not a resource a pod requests.
                "pods" => {}
                other => resources.scalar.push((other.to_string(), whole()?)),
            }
        }
        Ok(resources)
    }

    fn container(&self, field: &str, container: &core::Container) -> Result<Container, ConvertError> {
        let requirements = container.resources.as_ref();
        // API server defaulting: a resource with a limit and no request requests its limit.
        let mut requests = requirements.and_then(|r| r.requests.clone()).unwrap_or_default();
        for (name, limit) in requirements.and_then(|r| r.limits.as_ref()).into_iter().flatten() {
            requests.entry(name.clone()).or_insert_with(|| limit.clone());
        }
        Ok(Container {
            name: container.name.clone(),
            image: container.image.clone().unwrap_or_default(),
            requests: self.resources(&format!("{field}[{}].resources.requests", container.name), Some(&requests))?,
            restart_count: 0,
            state: ContainerState::Unknown,
        })
    }

    /// Pod-level resources (`spec.resources`, on by default since Kubernetes 1.34): kube-scheduler fits a pod by
    /// its pod-level requests where they are set (CPU, memory, huge pages) and by its containers' for the other
    /// resources. The contract's pod record has no pod-level field, so the amount is folded into the containers:
    /// every other container asks one unit of it (so that none reads as "no request", which scoring would count
    /// as kube-scheduler's 100m / 200Mi default), the first asks the rest, and the effective requests policies
    /// compute (containers, sidecars, init containers, overhead) are kube-scheduler's. A pod-level limit without a
    /// request requests the limit when no container requests that resource, and always for huge pages, which
    /// cannot be over-committed (the API server's defaulting).
    /// A pod resized in place holds the most of its spec's and its status's pod-level requests ([`resize`]).
    fn fold_pod_level_requests(
        &self,
        spec: &core::PodSpec,
        status: Option<&core::PodStatus>,
        containers: &mut [Container],
        init_containers: &mut [Container],
    ) -> Result<(), ConvertError> {
        let Some(pod_level) = spec.resources.as_ref() else { return Ok(()) };
        let mut requests = self.resources("spec.resources.requests", pod_level.requests.as_ref())?;
        if pod_level.requests.as_ref().is_some_and(|requests| !requests.is_empty()) {
            requests = resize::pod_level_requests(self, requests, status)?;
        }
        let limits = self.resources("spec.resources.limits", pod_level.limits.as_ref())?;
        let every = || containers.iter().chain(init_containers.iter());
        let requested = |amount: u64, limit: u64, in_containers: bool| match amount {
            0 if limit > 0 && !in_containers => Some(limit),
            0 => None,
            amount => Some(amount),
        };
        let cpu = requested(requests.cpu_millis, limits.cpu_millis, every().any(|container| container.requests.cpu_millis > 0));
        let memory = requested(requests.memory_bytes, limits.memory_bytes, every().any(|container| container.requests.memory_bytes > 0));
        let scalar_amount = |list: &Resources, name: &str| list.scalar.iter().find(|(key, _)| key == name).map_or(0, |(_, amount)| *amount);
        let huge_pages: Vec<(String, u64)> = requests
            .scalar
            .iter()
            .chain(&limits.scalar)
            .map(|(name, _)| name.clone())
            .filter(|name| name.starts_with("hugepages-"))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(|name| requested(scalar_amount(&requests, &name), scalar_amount(&limits, &name), false).map(|amount| (name, amount)))
            .collect();
        let Some(first) = containers.first_mut().map(|first| first.name.clone()) else { return Ok(()) };
        // The units the other app containers and the sidecars add to the sum the first one completes.
        let sidecars = spec.init_containers.iter().flatten().filter(|container| container.restart_policy.as_deref() == Some("Always")).count();
        let others = (containers.len() - 1 + sidecars) as u64;
        for container in containers.iter_mut().chain(init_containers.iter_mut()) {
            let is_first = container.name == first;
            if let Some(cpu) = cpu {
                container.requests.cpu_millis = if is_first { cpu.saturating_sub(others) } else { 1 };
            }
            if let Some(memory) = memory {
                container.requests.memory_bytes = if is_first { memory.saturating_sub(others) } else { 1 };
            }
            for (name, amount) in &huge_pages {
                container.requests.scalar.retain(|(key, _)| key != name);
                if is_first {
                    container.requests.scalar.push((name.clone(), *amount));
                }
            }
        }
        Ok(())
    }

    /// The container's ports bound on the node. With `hostNetwork` every container port is one (API defaulting).
    fn host_ports(&self, field: &str, container: &core::Container, host_network: bool) -> Result<Vec<HostPort>, ConvertError> {
        let bound = |port: &core::ContainerPort| match port.host_port.unwrap_or(0) {
            0 if host_network => port.container_port,
            number => number,
        };
        let ports = container.ports.iter().flatten().enumerate();
        ports
            .filter(|(_, port)| bound(port) > 0)
            .map(|(index, port)| {
                let field = format!("{field}[{}].ports[{index}]", container.name);
                let number = bound(port);
                let port_number = u16::try_from(number).map_err(|_| self.error(format!("{field}.hostPort"), format!("{number} is not a port number")))?;
                let protocol = match port.protocol.as_deref() {
                    None | Some("") | Some("TCP") => PortProtocol::Tcp,
                    Some("UDP") => PortProtocol::Udp,
                    Some("SCTP") => PortProtocol::Sctp,
                    Some(other) => return Err(self.error(format!("{field}.protocol"), format!("unknown protocol {other:?}"))),
                };
                let ip = port.host_ip.clone().filter(|ip| !ip.is_empty()).unwrap_or_else(|| ANY_IP.to_string());
                Ok(HostPort { port: port_number, protocol, ip })
            })
            .collect()
    }

    /// A pod affinity term with `matchLabelKeys`/`mismatchLabelKeys` merged into its selector, as kube-apiserver
    /// does when it creates the pod (so a pod created by an older server reads the same).
    fn affinity_term(&self, field: &str, term: &core::PodAffinityTerm, labels: &[(String, String)]) -> Result<PodAffinityTerm, ConvertError> {
        let mut label_selector = term.label_selector.as_ref().map(|selector| self.label_selector(&format!("{field}.labelSelector"), selector)).transpose()?;
        if let Some(selector) = label_selector.as_mut() {
            let merged = [(&term.match_label_keys, SelectorOperator::In), (&term.mismatch_label_keys, SelectorOperator::NotIn)];
            for (keys, operator) in merged {
                for key in keys.iter().flatten() {
                    let Some(value) = wasp_sdk::matching::label(labels, key) else { continue };
                    let requirement = SelectorRequirement { key: key.clone(), operator, values: vec![value.to_string()] };
                    if !selector.match_expressions.contains(&requirement) {
                        selector.match_expressions.push(requirement);
                    }
                }
            }
        }
        Ok(PodAffinityTerm {
            label_selector,
            namespaces: term.namespaces.clone().unwrap_or_default(),
            namespace_selector: term
                .namespace_selector
                .as_ref()
                .map(|selector| self.label_selector(&format!("{field}.namespaceSelector"), selector))
                .transpose()?,
            topology_key: term.topology_key.clone(),
        })
    }

    fn pod_affinity(
        &self,
        field: &str,
        required: Option<&Vec<core::PodAffinityTerm>>,
        preferred: Option<&Vec<core::WeightedPodAffinityTerm>>,
        labels: &[(String, String)],
    ) -> Result<PodAffinity, ConvertError> {
        let required = required
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, term)| self.affinity_term(&format!("{field}.requiredDuringSchedulingIgnoredDuringExecution[{index}]"), term, labels))
            .collect::<Result<_, _>>()?;
        let preferred = preferred
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, weighted)| {
                let field = format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{index}]");
                Ok(WeightedPodAffinityTerm {
                    weight: weighted.weight,
                    term: self.affinity_term(&format!("{field}.podAffinityTerm"), &weighted.pod_affinity_term, labels)?,
                })
            })
            .collect::<Result<_, ConvertError>>()?;
        Ok(PodAffinity { required, preferred })
    }

    fn selector_operator(&self, field: &str, operator: &str) -> Result<SelectorOperator, ConvertError> {
        Ok(match operator {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            "Gt" => SelectorOperator::Gt,
            "Lt" => SelectorOperator::Lt,
            other => return Err(self.error(field, format!("unknown operator {other:?}"))),
        })
    }

    fn node_requirements(&self, field: &str, requirements: Option<&Vec<core::NodeSelectorRequirement>>) -> Result<Vec<SelectorRequirement>, ConvertError> {
        requirements
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, requirement)| {
                Ok(SelectorRequirement {
                    key: requirement.key.clone(),
                    operator: self.selector_operator(&format!("{field}[{index}].operator"), &requirement.operator)?,
                    values: requirement.values.clone().unwrap_or_default(),
                })
            })
            .collect()
    }

    fn node_term(&self, field: &str, term: &core::NodeSelectorTerm) -> Result<NodeSelectorTerm, ConvertError> {
        Ok(NodeSelectorTerm {
            match_expressions: self.node_requirements(&format!("{field}.matchExpressions"), term.match_expressions.as_ref())?,
            match_fields: self.node_requirements(&format!("{field}.matchFields"), term.match_fields.as_ref())?,
        })
    }

    fn node_affinity(&self, affinity: &core::NodeAffinity) -> Result<NodeAffinity, ConvertError> {
        let base = "spec.affinity.nodeAffinity";
        let required = affinity
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|selector| {
                selector
                    .node_selector_terms
                    .iter()
                    .enumerate()
                    .map(|(index, term)| self.node_term(&format!("{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{index}]"), term))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let preferred = affinity
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
            .map(|(index, preferred)| {
                Ok(PreferredTerm {
                    weight: preferred.weight,
                    term: self.node_term(&format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{index}].preference"), &preferred.preference)?,
                })
            })
            .collect::<Result<_, ConvertError>>()?;
        Ok(NodeAffinity { required, preferred })
    }

    fn label_selector(&self, field: &str, selector: &meta::LabelSelector) -> Result<LabelSelector, ConvertError> {
        let match_expressions = selector
            .match_expressions
            .iter()
            .flatten()
            .enumerate()
            .map(|(index, requirement)| {
                let operator_field = format!("{field}.matchExpressions[{index}].operator");
                let operator = self.selector_operator(&operator_field, &requirement.operator)?;
                if matches!(operator, SelectorOperator::Gt | SelectorOperator::Lt) {
                    return Err(self.error(operator_field, "Gt and Lt are not label selector operators"));
                }
                Ok(SelectorRequirement { key: requirement.key.clone(), operator, values: requirement.values.clone().unwrap_or_default() })
            })
            .collect::<Result<_, ConvertError>>()?;
        Ok(LabelSelector { match_labels: pairs(selector.match_labels.as_ref()), match_expressions })
    }

    fn taint_effect(&self, field: &str, effect: &str) -> Result<TaintEffect, ConvertError> {
        Ok(match effect {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            other => return Err(self.error(field, format!("unknown taint effect {other:?}"))),
        })
    }

    fn toleration(&self, index: usize, toleration: &core::Toleration) -> Result<Toleration, ConvertError> {
        let field = format!("spec.tolerations[{index}]");
        let operator = match toleration.operator.as_deref() {
            None | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => return Err(self.error(format!("{field}.operator"), format!("unknown operator {other:?}"))),
        };
        let effect = match toleration.effect.as_deref() {
            None | Some("") => None,
            Some(effect) => Some(self.taint_effect(&format!("{field}.effect"), effect)?),
        };
        Ok(Toleration { key: toleration.key.clone().unwrap_or_default(), operator, value: toleration.value.clone().unwrap_or_default(), effect })
    }

    fn spread(&self, index: usize, constraint: &core::TopologySpreadConstraint) -> Result<TopologySpreadConstraint, ConvertError> {
        let field = format!("spec.topologySpreadConstraints[{index}]");
        let when_unsatisfiable = match constraint.when_unsatisfiable.as_str() {
            "DoNotSchedule" => UnsatisfiableAction::DoNotSchedule,
            "ScheduleAnyway" => UnsatisfiableAction::ScheduleAnyway,
            other => return Err(self.error(format!("{field}.whenUnsatisfiable"), format!("unknown action {other:?}"))),
        };
        let inclusion = |name: &str, value: Option<&str>, default| match value {
            None => Ok(default),
            Some("Honor") => Ok(InclusionPolicy::Honor),
            Some("Ignore") => Ok(InclusionPolicy::Ignore),
            Some(other) => Err(self.error(format!("{field}.{name}"), format!("unknown policy {other:?}"))),
        };
        if constraint.max_skew < 1 {
            return Err(self.error(format!("{field}.maxSkew"), "must be at least 1"));
        }
        Ok(TopologySpreadConstraint {
            max_skew: constraint.max_skew,
            topology_key: constraint.topology_key.clone(),
            when_unsatisfiable,
            label_selector: constraint.label_selector.as_ref().map(|selector| self.label_selector(&format!("{field}.labelSelector"), selector)).transpose()?,
            min_domains: constraint.min_domains,
            node_affinity_policy: inclusion("nodeAffinityPolicy", constraint.node_affinity_policy.as_deref(), InclusionPolicy::Honor)?,
            node_taints_policy: inclusion("nodeTaintsPolicy", constraint.node_taints_policy.as_deref(), InclusionPolicy::Ignore)?,
            match_label_keys: constraint.match_label_keys.clone().unwrap_or_default(),
        })
    }
}

fn pairs(map: Option<&BTreeMap<String, String>>) -> Vec<(String, String)> {
    map.into_iter().flatten().map(|(key, value)| (key.clone(), value.clone())).collect()
}

/// What the host keeps of a pod beyond its contract record.
pub fn pod_meta(source: &core::Pod) -> PodMeta {
    let annotation = source.metadata.annotations.as_ref().and_then(|annotations| annotations.get(EVICT_ANNOTATION));
    let consent = match annotation.map(String::as_str) {
        None => EvictionConsent::Default,
        Some("never") => EvictionConsent::Never,
        Some("allow") => EvictionConsent::Allow,
        Some(other) => EvictionConsent::Unreadable(other.chars().take(64).collect()),
    };
    let pod_group = super::groups::pod_group_of(source).map(|group| group.name);
    PodMeta { consent, resource_claims: resource_claims(source), pod_group }
}

/// The names of the pod's `spec.resourceClaims`: devices it asks for through dynamic resource allocation
/// (ResourceClaims, or templates the resourceclaim controller makes claims from). kube-scheduler's
/// DynamicResources plugin allocates them and writes the allocation into each claim before binding; the host does
/// not yet, so it leaves such pods to wait, saying why, rather than bind them where their devices are not.
pub fn resource_claims(source: &core::Pod) -> Vec<String> {
    let claims = source.spec.as_ref().and_then(|spec| spec.resource_claims.as_ref());
    claims.into_iter().flatten().map(|claim| claim.name.clone()).collect()
}

/// A label selector the host itself evaluates (from configuration, or a PodDisruptionBudget), with the SDK's
/// matching rules, so host and policies agree on what a selector selects. `object` names its owner in errors.
pub fn label_selector(object: &str, field: &str, selector: &meta::LabelSelector) -> Result<wasp_sdk::types::LabelSelector, ConvertError> {
    let context = Context { object: object.into() };
    let converted = context.label_selector(field, selector)?;
    // The host's and the SDK's records are generated from the same WIT record: the fields map one to one.
    serde_json::to_value(&converted).and_then(serde_json::from_value).map_err(|error| context.error(field, format!("cannot be evaluated: {error}")))
}

/// What the scheduler keeps of a PersistentVolumeClaim.
pub fn claim(source: &core::PersistentVolumeClaim) -> super::volumes::Claim {
    let spec = source.spec.as_ref();
    super::volumes::Claim {
        volume: spec.and_then(|spec| spec.volume_name.clone()).filter(|name| !name.is_empty()),
        class: spec.and_then(|spec| spec.storage_class_name.clone()),
        bound: spec.and_then(|spec| spec.volume_name.as_deref()).is_some_and(|name| !name.is_empty())
            && source.metadata.annotations.as_ref().is_some_and(|annotations| annotations.contains_key(super::volumes::BIND_COMPLETED)),
        terminating: source.metadata.deletion_timestamp.is_some(),
        request: spec
            .and_then(|spec| spec.resources.as_ref()?.requests.as_ref()?.get("storage"))
            .and_then(|storage| quantity::whole_units(&storage.0).ok())
            .unwrap_or(0),
        access_modes: spec.and_then(|spec| spec.access_modes.clone()).unwrap_or_default(),
        selector: spec.and_then(|spec| spec.selector.as_ref()).map(|selector| claim_selector(source, selector)),
        volume_mode: spec.and_then(|spec| spec.volume_mode.clone()).unwrap_or_else(|| "Filesystem".into()),
        uid: source.metadata.uid.clone().unwrap_or_default(),
    }
}

/// A claim's `spec.selector`; one the host cannot read selects no volume (kube-scheduler fails such a claim's
/// binding), so the claim is never given a volume it did not ask for.
fn claim_selector(source: &core::PersistentVolumeClaim, selector: &meta::LabelSelector) -> wasp_sdk::types::LabelSelector {
    let object =
        format!("PersistentVolumeClaim {}/{}", source.metadata.namespace.as_deref().unwrap_or_default(), source.metadata.name.as_deref().unwrap_or_default());
    label_selector(&object, "spec.selector", selector).unwrap_or_else(|error| {
        tracing::warn!(claim = %object, %error, "the claim's selector cannot be read: no volume is given to it");
        let nothing = wasp_sdk::types::SelectorRequirement { key: String::new(), operator: wasp_sdk::types::SelectorOperator::In, values: Vec::new() };
        wasp_sdk::types::LabelSelector { match_labels: Vec::new(), match_expressions: vec![nothing] }
    })
}

/// What the scheduler keeps of a PersistentVolume: where it can be attached.
pub fn volume(source: &core::PersistentVolume) -> Result<super::volumes::Volume, ConvertError> {
    let context = Context { object: format!("PersistentVolume {}", source.metadata.name.as_deref().unwrap_or_default()) };
    let required = source.spec.as_ref().and_then(|spec| spec.node_affinity.as_ref()).and_then(|affinity| affinity.required.as_ref());
    let node_affinity = required
        .map(|selector| {
            selector
                .node_selector_terms
                .iter()
                .enumerate()
                .map(|(index, term)| context.node_term(&format!("spec.nodeAffinity.required.nodeSelectorTerms[{index}]"), term))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let spec = source.spec.as_ref();
    // An unreadable capacity is none: no claim fits the volume, rather than every one.
    let capacity = spec.and_then(|spec| spec.capacity.as_ref()?.get("storage")).and_then(|storage| quantity::whole_units(&storage.0).ok()).unwrap_or(0);
    Ok(super::volumes::Volume {
        node_affinity,
        class: spec.and_then(|spec| spec.storage_class_name.clone()).unwrap_or_default(),
        labels: pairs(source.metadata.labels.as_ref()),
        capacity,
        access_modes: spec.and_then(|spec| spec.access_modes.clone()).unwrap_or_default(),
        claim: spec.and_then(|spec| spec.claim_ref.as_ref()).map(|claim| (claim.namespace.clone().unwrap_or_default(), claim.name.clone().unwrap_or_default())),
        claim_uid: spec.and_then(|spec| spec.claim_ref.as_ref()?.uid.clone()).unwrap_or_default(),
        phase: source.status.as_ref().and_then(|status| status.phase.clone()).unwrap_or_default(),
        volume_mode: spec.and_then(|spec| spec.volume_mode.clone()).unwrap_or_else(|| "Filesystem".into()),
        resource_version: source.metadata.resource_version.clone().unwrap_or_default(),
        terminating: source.metadata.deletion_timestamp.is_some(),
        csi: spec.and_then(|spec| spec.csi.as_ref()).map(|csi| AttachedVolume { driver: csi.driver.clone(), handle: csi.volume_handle.clone() }),
    })
}

/// How many volumes each CSI driver may attach to the node a CSINode describes (`spec.drivers[].allocatable
/// .count`); a driver that gives no count has no limit and is left out.
pub fn volume_limits(source: &k8s_openapi::api::storage::v1::CSINode) -> Vec<(String, u32)> {
    let mut limits: Vec<(String, u32)> =
        source.spec.drivers.iter().filter_map(|driver| Some((driver.name.clone(), u32::try_from(driver.allocatable.as_ref()?.count?).unwrap_or(0)))).collect();
    limits.sort();
    limits
}

/// What the scheduler keeps of a StorageClass: when its claims are provisioned, and where they may be.
pub fn storage_class(source: &k8s_openapi::api::storage::v1::StorageClass) -> super::volumes::Class {
    let allowed_topologies = source
        .allowed_topologies
        .iter()
        .flatten()
        .map(|term| NodeSelectorTerm {
            match_expressions: term
                .match_label_expressions
                .iter()
                .flatten()
                .map(|requirement| SelectorRequirement { key: requirement.key.clone(), operator: SelectorOperator::In, values: requirement.values.clone() })
                .collect(),
            match_fields: Vec::new(),
        })
        .collect();
    super::volumes::Class {
        wait_for_first_consumer: source.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
        provisioned: source.provisioner != "kubernetes.io/no-provisioner",
        provisioner: source.provisioner.clone(),
        allowed_topologies,
    }
}

/// Identifies a pod in errors and logs: `default/web-1`.
pub fn pod_key(pod: &core::Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or(""))
}

pub fn pod(source: &core::Pod) -> Result<Pod, ConvertError> {
    let context = Context { object: format!("pod {}", pod_key(source)) };
    let name = source.metadata.name.clone().filter(|name| !name.is_empty());
    let name = name.ok_or_else(|| context.error("metadata.name", "missing"))?;
    let spec = source.spec.as_ref().ok_or_else(|| context.error("spec", "missing"))?;
    let status = source.status.as_ref();
    let containers = spec.containers.iter().map(|container| context.container("spec.containers", container)).collect::<Result<Vec<_>, _>>()?;
    let init_containers =
        spec.init_containers.iter().flatten().map(|container| context.container("spec.initContainers", container)).collect::<Result<Vec<_>, _>>()?;
    let mut containers = containers;
    let mut init_containers = init_containers;
    let statuses = |list: Option<&Vec<core::ContainerStatus>>, containers: &mut Vec<Container>| {
        for container_status in list.into_iter().flatten() {
            if let Some(container) = containers.iter_mut().find(|container| container.name == container_status.name) {
                container.restart_count = container_status.restart_count.max(0) as u32;
                container.state = container_state(container_status.state.as_ref());
            }
        }
    };
    let sidecars: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|container| container.restart_policy.as_deref() == Some("Always"))
        .map(|container| container.name.clone())
        .collect();
    resize::hold_resized(&context, status, &mut containers, &init_containers, &sidecars)?;
    context.fold_pod_level_requests(spec, status, &mut containers, &mut init_containers)?;
    statuses(status.and_then(|status| status.container_statuses.as_ref()), &mut containers);
    statuses(status.and_then(|status| status.init_container_statuses.as_ref()), &mut init_containers);
    let labels = pairs(source.metadata.labels.as_ref());
    let affinity = spec.affinity.as_ref();
    let pod_affinity = affinity
        .and_then(|affinity| affinity.pod_affinity.as_ref())
        .map(|terms| {
            context.pod_affinity(
                "spec.affinity.podAffinity",
                terms.required_during_scheduling_ignored_during_execution.as_ref(),
                terms.preferred_during_scheduling_ignored_during_execution.as_ref(),
                &labels,
            )
        })
        .transpose()?;
    let pod_anti_affinity = affinity
        .and_then(|affinity| affinity.pod_anti_affinity.as_ref())
        .map(|terms| {
            context.pod_affinity(
                "spec.affinity.podAntiAffinity",
                terms.required_during_scheduling_ignored_during_execution.as_ref(),
                terms.preferred_during_scheduling_ignored_during_execution.as_ref(),
                &labels,
            )
        })
        .transpose()?;
    // kube-scheduler's GetHostPorts: sidecars first, then the containers; ordinary init containers have ended
    // before the others start.
    let host_network = spec.host_network.unwrap_or(false);
    let mut host_ports = Vec::new();
    for container in spec.init_containers.iter().flatten().filter(|container| container.restart_policy.as_deref() == Some("Always")) {
        host_ports.extend(context.host_ports("spec.initContainers", container, host_network)?);
    }
    for container in &spec.containers {
        host_ports.extend(context.host_ports("spec.containers", container, host_network)?);
    }
    let volumes = spec.volumes.iter().flatten();
    let owner = source.metadata.owner_references.as_ref().and_then(|owners| {
        let owner = owners.iter().find(|owner| owner.controller == Some(true)).or(owners.first())?;
        Some(Owner { kind: owner.kind.clone(), name: owner.name.clone(), controller: owner.controller == Some(true) })
    });
    Ok(Pod {
        namespace: source.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        name,
        uid: source.metadata.uid.clone().unwrap_or_default(),
        labels,
        scheduler_name: spec.scheduler_name.clone().unwrap_or_else(|| "default-scheduler".into()),
        priority: spec.priority.unwrap_or(0),
        phase: match status.and_then(|status| status.phase.as_deref()) {
            None | Some("Pending") => PodPhase::Pending,
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            Some(_) => PodPhase::Unknown,
        },
        containers,
        sidecar_init_containers: sidecars,
        init_containers,
        overhead: context.resources("spec.overhead", spec.overhead.as_ref())?,
        node_selector: pairs(spec.node_selector.as_ref()),
        node_affinity: spec
            .affinity
            .as_ref()
            .and_then(|affinity| affinity.node_affinity.as_ref())
            .map(|affinity| context.node_affinity(affinity))
            .transpose()?,
        tolerations: spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(index, toleration)| context.toleration(index, toleration))
            .collect::<Result<_, _>>()?,
        topology_spread: spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .enumerate()
            .map(|(index, constraint)| context.spread(index, constraint))
            .collect::<Result<_, _>>()?,
        owner,
        created_at: source.metadata.creation_timestamp.as_ref().map_or(0, |time| time.0.as_second()),
        terminating: source.metadata.deletion_timestamp.is_some(),
        mirror: source.metadata.annotations.as_ref().is_some_and(|annotations| annotations.contains_key("kubernetes.io/config.mirror")),
        local_storage: volumes.clone().any(|volume| volume.empty_dir.is_some() || volume.host_path.is_some()),
        pvc: volumes.clone().any(|volume| volume.persistent_volume_claim.is_some() || volume.ephemeral.is_some()),
        ready: status
            .and_then(|status| status.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|condition| condition.type_ == "Ready" && condition.status == "True"),
        nominated_node: status.and_then(|status| status.nominated_node_name.clone()),
        pod_affinity,
        pod_anti_affinity,
        host_ports,
        status_reason: status.and_then(|status| status.reason.clone()).unwrap_or_default(),
        annotations: source
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(key, _)| key.as_str() != LAST_APPLIED)
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        // Resolved against claims, volumes and classes when the pod is placed (`cluster::volumes`).
        volume_claims: volumes
            .clone()
            .filter_map(|volume| match (&volume.persistent_volume_claim, &volume.ephemeral) {
                (Some(claim), _) => Some(claim.claim_name.clone()),
                // A generic ephemeral volume's claim is named after the pod and the volume.
                (None, Some(_)) => Some(format!("{}-{}", source.metadata.name.as_deref().unwrap_or_default(), volume.name)),
                (None, None) => None,
            })
            .map(|name| VolumeClaim { name, requirement: ClaimRequirement::Anywhere, attachment: None })
            .collect(),
    })
}

fn container_state(state: Option<&core::ContainerState>) -> ContainerState {
    let Some(state) = state else { return ContainerState::Unknown };
    if let Some(terminated) = &state.terminated {
        ContainerState::Terminated(Termination { reason: terminated.reason.clone().unwrap_or_default(), exit_code: terminated.exit_code })
    } else if state.running.is_some() {
        ContainerState::Running
    } else if let Some(waiting) = &state.waiting {
        ContainerState::Waiting(waiting.reason.clone().unwrap_or_default())
    } else {
        ContainerState::Unknown
    }
}

pub fn node(source: &core::Node) -> Result<Node, ConvertError> {
    let name = source.metadata.name.clone().filter(|name| !name.is_empty());
    let context = Context { object: format!("node {}", name.as_deref().unwrap_or("<unnamed>")) };
    let name = name.ok_or_else(|| context.error("metadata.name", "missing"))?;
    let spec = source.spec.as_ref();
    let status = source.status.as_ref();
    let allocatable = status.and_then(|status| status.allocatable.as_ref().or(status.capacity.as_ref()));
    let allocatable_pods = match allocatable.and_then(|list| list.get("pods")) {
        Some(pods) => quantity::whole_units(&pods.0).map_err(|error| context.error("status.allocatable.pods", error.to_string()))?.min(u32::MAX as u64) as u32,
        None => DEFAULT_MAX_PODS,
    };
    Ok(Node {
        name,
        labels: pairs(source.metadata.labels.as_ref()),
        taints: spec
            .and_then(|spec| spec.taints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, taint)| {
                Ok(Taint {
                    key: taint.key.clone(),
                    value: taint.value.clone().unwrap_or_default(),
                    effect: context.taint_effect(&format!("spec.taints[{index}].effect"), &taint.effect)?,
                })
            })
            .collect::<Result<_, ConvertError>>()?,
        unschedulable: spec.and_then(|spec| spec.unschedulable).unwrap_or(false),
        allocatable: context.resources("status.allocatable", allocatable)?,
        allocatable_pods,
        conditions: status
            .and_then(|status| status.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|condition| Condition { kind: condition.type_.clone(), status: condition.status.clone() })
            .collect(),
        // The kubelet reports images with a size (`sizeBytes`, 0 when unknown) and none, one or two names.
        images: status
            .and_then(|status| status.images.as_ref())
            .into_iter()
            .flatten()
            .map(|image| NodeImage { names: image.names.clone().unwrap_or_default(), size_bytes: image.size_bytes.unwrap_or(0).max(0) as u64 })
            .collect(),
        // From the node's CSINode, which the cluster state keeps and merges in (`ClusterState::set_volume_limits`).
        volume_limits: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn pod_fields_and_api_defaults() {
        let source: core::Pod = yaml(
            r#"
metadata: {name: web, namespace: shop, labels: {app: web}, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-abc, uid: u, controller: true}]}
spec:
  containers:
  - {name: app, resources: {requests: {cpu: 250m}, limits: {cpu: "1", memory: 1Gi}}}
  initContainers:
  - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 50m}}}
  tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
  nodeSelector: {disk: ssd}
  volumes: [{name: scratch, emptyDir: {}}]
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]
"#,
        );
        let pod = pod(&source).unwrap();
        assert_eq!((pod.namespace.as_str(), pod.name.as_str()), ("shop", "web"));
        assert_eq!(pod.containers[0].requests.cpu_millis, 250, "an explicit request wins over the limit");
        assert_eq!(pod.containers[0].requests.memory_bytes, 1 << 30, "a limit without request is the request");
        assert_eq!(pod.sidecar_init_containers, vec!["proxy"]);
        assert_eq!(pod.scheduler_name, "default-scheduler");
        assert!(pod.local_storage && !pod.pvc);
        assert_eq!(pod.owner.unwrap().kind, "ReplicaSet");
        assert_eq!(pod.topology_spread[0].node_taints_policy, InclusionPolicy::Ignore);
        assert_eq!(pod.tolerations[0].operator, TolerationOperator::Exists);
    }

    #[test]
    fn affinity_ports_states_and_annotations() {
        let source: core::Pod = yaml(
            r#"
metadata:
  name: web
  namespace: shop
  labels: {app: web, version: v2}
  annotations: {team: payments, kubectl.kubernetes.io/last-applied-configuration: '{"huge": true}'}
spec:
  hostNetwork: true
  containers:
  - {name: app, ports: [{containerPort: 8080}, {containerPort: 53, hostPort: 5353, protocol: UDP, hostIP: 10.0.0.1}]}
  initContainers:
  - {name: setup, ports: [{containerPort: 9000, hostPort: 9000}]}
  - {name: proxy, restartPolicy: Always, ports: [{containerPort: 15001, hostPort: 15001}]}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [version, absent], mismatchLabelKeys: [app]}
      - {topologyKey: zone, matchLabelKeys: [version]}
    podAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - {weight: 10, podAffinityTerm: {topologyKey: zone, labelSelector: {matchLabels: {app: db}}, namespaceSelector: {}}}
status:
  phase: Failed
  reason: OutOfcpu
  containerStatuses: [{name: app, ready: false, restartCount: 2, image: app, imageID: '', state: {terminated: {exitCode: 137, reason: OOMKilled}}}]
"#,
        );
        let pod = pod(&source).unwrap();
        let anti = pod.pod_anti_affinity.as_ref().unwrap();
        let merged = &anti.required[0].label_selector.as_ref().unwrap().match_expressions;
        assert_eq!(merged.len(), 2, "version In [v2] and app NotIn [web]; a key the pod lacks adds nothing: {merged:?}");
        assert_eq!((merged[0].key.as_str(), merged[0].operator, merged[0].values.as_slice()), ("version", SelectorOperator::In, &["v2".to_string()][..]));
        assert_eq!((merged[1].key.as_str(), merged[1].operator), ("app", SelectorOperator::NotIn));
        assert!(anti.required[1].label_selector.is_none(), "no selector stays none (selects no pod)");
        let preferred = &pod.pod_affinity.as_ref().unwrap().preferred[0];
        assert_eq!(preferred.weight, 10);
        assert!(preferred.term.namespace_selector.is_some());
        let ports: Vec<(u16, PortProtocol, &str)> = pod.host_ports.iter().map(|port| (port.port, port.protocol, port.ip.as_str())).collect();
        assert_eq!(
            ports,
            [(15001, PortProtocol::Tcp, "0.0.0.0"), (8080, PortProtocol::Tcp, "0.0.0.0"), (5353, PortProtocol::Udp, "10.0.0.1")],
            "sidecars then containers, hostNetwork binds container ports, ordinary init containers have ended"
        );
        assert_eq!(pod.status_reason, "OutOfcpu");
        assert_eq!(pod.containers[0].state, ContainerState::Terminated(Termination { reason: "OOMKilled".into(), exit_code: 137 }));
        assert_eq!(pod.containers[0].restart_count, 2);
        assert_eq!(pod.annotations, vec![("team".to_string(), "payments".to_string())]);
    }

    #[test]
    fn pod_level_requests_replace_the_containers_for_the_resources_they_set() {
        let source: core::Pod = yaml(
            "metadata: {name: web}\nspec:\n  resources: {requests: {cpu: '2', memory: 1Gi, hugepages-2Mi: 4Mi}}\n  initContainers: [{name: init, resources: {requests: {cpu: '3', memory: 2Gi}}}]\n  containers:\n  - {name: app, resources: {requests: {cpu: 100m, memory: 64Mi, nvidia.com/gpu: '1'}}}\n  - {name: proxy, resources: {requests: {cpu: 50m}}}\n",
        );
        let converted = pod(&source).unwrap();
        let (fit, scoring) = super::super::state::pod_requests(&converted);
        assert_eq!((fit.cpu_millis, fit.memory_bytes), (2000, 1 << 30), "the pod's amounts, not the containers' or the init container's");
        assert_eq!((scoring.cpu_millis, scoring.memory_bytes), (2000, 1 << 30), "no container counted at scoring's defaults");
        assert_eq!((fit.get("hugepages-2Mi"), fit.get("nvidia.com/gpu")), (4 << 20, 1), "resources the pod level does not set stay the containers'");
        assert!(converted.containers[1].requests.scalar.is_empty(), "huge pages on the first container alone");

        // A pod-level limit requests itself where no container asks for the resource; where one does, the API
        // server defaults the pod's request to the containers' and nothing changes.
        let source: core::Pod = yaml("metadata: {name: web}\nspec:\n  resources: {limits: {cpu: '1', memory: 512Mi}}\n  containers: [{name: app, resources: {requests: {memory: 64Mi}}}, {name: proxy}]\n");
        let (fit, _) = super::super::state::pod_requests(&pod(&source).unwrap());
        assert_eq!((fit.cpu_millis, fit.memory_bytes), (1000, 64 << 20));
        // Huge pages are never over-committed: a pod-level limit is the pod's request whatever the containers ask.
        let source: core::Pod = yaml("metadata: {name: web}\nspec:\n  resources: {limits: {hugepages-2Mi: 8Mi, cpu: '1', memory: 1Gi}}\n  containers: [{name: app, resources: {requests: {hugepages-2Mi: 2Mi}, limits: {hugepages-2Mi: 2Mi}}}]\n");
        assert_eq!(super::super::state::pod_requests(&pod(&source).unwrap()).0.get("hugepages-2Mi"), 8 << 20);

        let source: core::Pod = yaml("metadata: {name: web}\nspec: {resources: {requests: {cpu: lots}}, containers: [{name: app}]}");
        assert_eq!(pod(&source).unwrap_err().field, "spec.resources.requests.cpu");
    }

    #[test]
    fn errors_name_the_object_and_field() {
        let source: core::Pod = yaml("metadata: {name: web}\nspec: {containers: [{name: app, resources: {requests: {cpu: lots}}}]}");
        let error = pod(&source).unwrap_err();
        assert_eq!(error.object, "pod default/web");
        assert_eq!(error.field, "spec.containers[app].resources.requests.cpu");
        assert!(error.to_string().contains("invalid quantity \"lots\""), "{error}");

        let source: core::Node = yaml("metadata: {name: n1}\nspec: {taints: [{key: k, effect: Sometimes}]}");
        assert_eq!(node(&source).unwrap_err().to_string(), "node n1: spec.taints[0].effect: unknown taint effect \"Sometimes\"");
    }

    #[test]
    fn node_allocatable_and_pod_capacity() {
        let source: core::Node = yaml(
            "metadata: {name: n1, labels: {zone: a}}\nstatus: {allocatable: {cpu: '4', memory: 8Gi, pods: '30', nvidia.com/gpu: '2'}, conditions: [{type: Ready, status: 'True'}]}",
        );
        let node = node(&source).unwrap();
        assert_eq!(node.allocatable.cpu_millis, 4000);
        assert_eq!(node.allocatable_pods, 30);
        assert_eq!(node.allocatable.scalar, vec![("nvidia.com/gpu".to_string(), 2)]);
        assert_eq!(node.conditions[0].kind, "Ready");
    }
}
