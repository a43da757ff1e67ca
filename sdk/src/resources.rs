//! Resource arithmetic with kube-scheduler's rules: what a pod requests, what a node has left.
//!
//! [`ResourceVector`] is plain Rust so the host (which has its own generated contract types) computes node usage
//! with exactly the same code as the guest.

use crate::types::{Pod, Resources};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// CPU counted for a container that requests none, when scoring (kube-scheduler's `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: u64 = 100;
/// Memory counted for a container that requests none, when scoring (`DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: u64 = 200 * 1024 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceVector {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    pub scalar: BTreeMap<String, u64>,
}

impl ResourceVector {
    /// Adds `other`, saturating: requests come from pod specs (four pods of `memory: 4Ei` sum past `u64`), and a
    /// total that wrapped would make a full node look empty. Subtracting from a saturated total does not restore
    /// it: the host sums a node's pods again when that happens.
    pub fn add(&mut self, other: &ResourceVector) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
        self.ephemeral_storage_bytes = self.ephemeral_storage_bytes.saturating_add(other.ephemeral_storage_bytes);
        for (name, value) in &other.scalar {
            let entry = self.scalar.entry(name.clone()).or_default();
            *entry = entry.saturating_add(*value);
        }
    }

    /// Removes `other`, saturating at zero.
    pub fn subtract(&mut self, other: &ResourceVector) {
        self.cpu_millis = self.cpu_millis.saturating_sub(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_sub(other.memory_bytes);
        self.ephemeral_storage_bytes = self.ephemeral_storage_bytes.saturating_sub(other.ephemeral_storage_bytes);
        for (name, value) in &other.scalar {
            if let Some(entry) = self.scalar.get_mut(name) {
                *entry = entry.saturating_sub(*value);
            }
        }
        self.scalar.retain(|_, value| *value > 0);
    }

    pub fn max_with(&mut self, other: &ResourceVector) {
        self.cpu_millis = self.cpu_millis.max(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.max(other.memory_bytes);
        self.ephemeral_storage_bytes = self.ephemeral_storage_bytes.max(other.ephemeral_storage_bytes);
        for (name, value) in &other.scalar {
            let entry = self.scalar.entry(name.clone()).or_default();
            *entry = (*entry).max(*value);
        }
    }

    /// The amount of a resource by its Kubernetes name (`cpu` in millicores, others in base units).
    pub fn get(&self, name: &str) -> u64 {
        self.amount(&ResourceName::from(name))
    }

    /// The amount of a resource named once (see [`ResourceName`]).
    #[inline]
    pub fn amount(&self, name: &ResourceName) -> u64 {
        name.pick(self.cpu_millis, self.memory_bytes, self.ephemeral_storage_bytes, |name| self.scalar.get(name).copied().unwrap_or(0))
    }

    /// The scoring view: zero CPU or memory counts as kube-scheduler's defaults.
    pub fn non_zero(&self) -> ResourceVector {
        let mut copy = self.clone();
        if copy.cpu_millis == 0 {
            copy.cpu_millis = DEFAULT_MILLI_CPU_REQUEST;
        }
        if copy.memory_bytes == 0 {
            copy.memory_bytes = DEFAULT_MEMORY_REQUEST;
        }
        copy
    }
}

/// A resource and its weight in an allocation score (kube-scheduler's `ResourceSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceWeight {
    pub name: String,
    pub weight: i64,
}

/// Settings of the allocation scores (`least-allocated`, `balanced-allocation`): which resources count and how much.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceWeightSettings {
    pub resources: Vec<ResourceWeight>,
}

/// CPU and memory, weight 1 each: kube-scheduler's default for its allocation scores.
impl Default for ResourceWeightSettings {
    fn default() -> Self {
        let resources = ["cpu", "memory"].map(|name| ResourceWeight { name: name.into(), weight: 1 }).into();
        ResourceWeightSettings { resources }
    }
}

/// kube-scheduler's validation of `resources`: names unique and not empty, weights in 1..=100.
pub fn validate_resource_weights(field: &str, weights: &[ResourceWeight]) -> Result<(), String> {
    if weights.is_empty() {
        return Err(format!("{field}: at least one resource is needed"));
    }
    for (index, entry) in weights.iter().enumerate() {
        if entry.name.is_empty() {
            return Err(format!("{field}[{index}].name: must not be empty"));
        }
        if !(1..=100).contains(&entry.weight) {
            return Err(format!("{field}[{index}].weight: {} is outside 1..100", entry.weight));
        }
        if weights[..index].iter().any(|earlier| earlier.name == entry.name) {
            return Err(format!("{field}[{index}].name: {:?} is listed twice", entry.name));
        }
    }
    Ok(())
}

/// One container as the request arithmetic sees it.
pub struct ContainerRequest {
    pub requests: ResourceVector,
    /// An init container with `restartPolicy: Always` (a sidecar): it keeps running beside the app containers.
    pub sidecar: bool,
}

/// kube-scheduler's `computePodResourceRequest`: the sum of the app containers and sidecars, or the largest init
/// container step (with the sidecars started before it) if that is larger, plus the pod overhead.
/// With `non_zero`, each container's missing CPU or memory request counts as the scoring defaults.
pub fn effective_requests(
    containers: impl IntoIterator<Item = ResourceVector>,
    init_containers: impl IntoIterator<Item = ContainerRequest>,
    overhead: &ResourceVector,
    non_zero: bool,
) -> ResourceVector {
    let adjust = |requests: ResourceVector| if non_zero { requests.non_zero() } else { requests };
    let mut total = ResourceVector::default();
    for requests in containers {
        total.add(&adjust(requests));
    }
    let mut sidecars = ResourceVector::default();
    let mut largest_init_step = ResourceVector::default();
    for init in init_containers {
        let requests = adjust(init.requests);
        let step = if init.sidecar {
            total.add(&requests);
            sidecars.add(&requests);
            sidecars.clone()
        } else {
            let mut step = requests;
            step.add(&sidecars);
            step
        };
        largest_init_step.max_with(&step);
    }
    total.max_with(&largest_init_step);
    total.add(overhead);
    total
}

impl From<&Resources> for ResourceVector {
    fn from(resources: &Resources) -> Self {
        ResourceVector {
            cpu_millis: resources.cpu_millis,
            memory_bytes: resources.memory_bytes,
            ephemeral_storage_bytes: resources.ephemeral_storage_bytes,
            scalar: resources.scalar.iter().cloned().collect(),
        }
    }
}

impl From<&ResourceVector> for Resources {
    fn from(vector: &ResourceVector) -> Self {
        Resources {
            cpu_millis: vector.cpu_millis,
            memory_bytes: vector.memory_bytes,
            ephemeral_storage_bytes: vector.ephemeral_storage_bytes,
            scalar: vector.scalar.iter().map(|(name, value)| (name.clone(), *value)).collect(),
        }
    }
}

impl Resources {
    /// The amount of a scalar (extended) resource, zero when absent.
    pub fn scalar(&self, name: &str) -> u64 {
        self.scalar.iter().find(|(key, _)| key == name).map_or(0, |(_, value)| *value)
    }

    /// The amount of a resource by its Kubernetes name, as [`ResourceVector::get`] reads it, without building a
    /// vector.
    pub fn get(&self, name: &str) -> u64 {
        self.amount(&ResourceName::from(name))
    }

    /// The amount of a resource named once (see [`ResourceName`]): scoring reads a node's allocatable and usage
    /// this way for every candidate.
    #[inline]
    pub fn amount(&self, name: &ResourceName) -> u64 {
        name.pick(self.cpu_millis, self.memory_bytes, self.ephemeral_storage_bytes, |name| self.scalar(name))
    }
}

/// A resource's Kubernetes name, resolved once: reading an amount by it is a field access, where reading by the
/// name compares strings, for every candidate node and resource of a score (in a sandbox, a call to `memcmp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceName {
    Cpu,
    Memory,
    EphemeralStorage,
    /// An extended resource (`nvidia.com/gpu`) or any other scalar.
    Extended(String),
}

impl ResourceName {
    /// The one of these amounts this name reads.
    #[inline]
    fn pick(&self, cpu: u64, memory: u64, ephemeral_storage: u64, extended: impl FnOnce(&str) -> u64) -> u64 {
        match self {
            ResourceName::Cpu => cpu,
            ResourceName::Memory => memory,
            ResourceName::EphemeralStorage => ephemeral_storage,
            ResourceName::Extended(name) => extended(name),
        }
    }

    /// CPU and memory: the resources kube-scheduler's scores count with non-zero defaults for pods without requests.
    pub fn has_scoring_default(&self) -> bool {
        matches!(self, ResourceName::Cpu | ResourceName::Memory)
    }
}

impl From<&str> for ResourceName {
    fn from(name: &str) -> Self {
        match name {
            "cpu" => ResourceName::Cpu,
            "memory" => ResourceName::Memory,
            "ephemeral-storage" => ResourceName::EphemeralStorage,
            other => ResourceName::Extended(other.to_string()),
        }
    }
}

impl Pod {
    /// What the scheduler reserves for this pod on a node.
    pub fn requests(&self) -> ResourceVector {
        self.effective_requests(false)
    }

    /// The same with kube-scheduler's scoring defaults for containers without requests.
    pub fn non_zero_requests(&self) -> ResourceVector {
        self.effective_requests(true)
    }

    fn effective_requests(&self, non_zero: bool) -> ResourceVector {
        effective_requests(
            self.containers.iter().map(|container| ResourceVector::from(&container.requests)),
            self.init_containers.iter().map(|container| ContainerRequest {
                requests: ResourceVector::from(&container.requests),
                sidecar: self.sidecar_init_containers.contains(&container.name),
            }),
            &ResourceVector::from(&self.overhead),
            non_zero,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(millis: u64) -> ResourceVector {
        ResourceVector { cpu_millis: millis, ..Default::default() }
    }

    fn init(millis: u64, sidecar: bool) -> ContainerRequest {
        ContainerRequest { requests: cpu(millis), sidecar }
    }

    #[test]
    fn app_containers_add_up_and_the_largest_init_container_wins_if_larger() {
        let total = effective_requests([cpu(100), cpu(200)], [init(250, false), init(500, false)], &cpu(0), false);
        assert_eq!(total.cpu_millis, 500);
        let total = effective_requests([cpu(400), cpu(200)], [init(500, false)], &cpu(0), false);
        assert_eq!(total.cpu_millis, 600);
    }

    #[test]
    fn sidecars_run_beside_app_containers_and_later_init_steps() {
        // Sidecar 100m starts first, then an init step of 500m runs beside it (600m), then the app 200m + 100m.
        let total = effective_requests([cpu(200)], [init(100, true), init(500, false)], &cpu(0), false);
        assert_eq!(total.cpu_millis, 600);
        let total = effective_requests([cpu(900)], [init(100, true), init(500, false)], &cpu(0), false);
        assert_eq!(total.cpu_millis, 1000);
    }

    #[test]
    fn overhead_is_added_on_top() {
        let total = effective_requests([cpu(100)], [], &cpu(50), false);
        assert_eq!(total.cpu_millis, 150);
    }

    #[test]
    fn non_zero_counts_scoring_defaults_per_container() {
        let total = effective_requests([cpu(0), cpu(300)], [], &cpu(0), true);
        assert_eq!(total.cpu_millis, 400);
        assert_eq!(total.memory_bytes, 2 * DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn huge_requests_saturate_instead_of_wrapping() {
        let four_exbibytes = ResourceVector { memory_bytes: 4 << 60, scalar: [("gpu".to_string(), u64::MAX / 2)].into(), ..Default::default() };
        let mut node = ResourceVector::default();
        for _ in 0..4 {
            node.add(&four_exbibytes);
        }
        assert_eq!(node.memory_bytes, u64::MAX, "four pods of 4Ei fill the node instead of wrapping to a small total");
        assert_eq!(node.get("gpu"), u64::MAX);
    }

    #[test]
    fn subtract_saturates_and_drops_empty_scalars() {
        let mut node = ResourceVector { cpu_millis: 100, scalar: [("gpu".to_string(), 1)].into(), ..Default::default() };
        node.subtract(&ResourceVector { cpu_millis: 300, scalar: [("gpu".to_string(), 1)].into(), ..Default::default() });
        assert_eq!(node, ResourceVector::default());
    }
}
