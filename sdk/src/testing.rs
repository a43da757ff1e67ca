//! Builders for native unit tests of policies: pods, nodes and autoscaling metrics with Kubernetes-style
//! quantities (`"500m"`, `"2Gi"`). They panic on malformed quantities: they are for tests.

use crate::quantity;
use crate::types::{
    AttachedVolume, ClaimRequirement, Condition, Container, ContainerState, HostPort, InclusionPolicy, LabelSelector, Metric, MetricSample, MetricSource,
    MetricTarget, Node, NodeAffinity, NodeImage, NodeSelectorTerm, Owner, Pod, PodAffinity, PodAffinityTerm, PodMetric, PodPhase, PortProtocol, PreferredTerm,
    Resources, ScaleRequest, SelectorRequirement, Taint, TaintEffect, Termination, Toleration, TolerationOperator, TopologySpreadConstraint,
    UnsatisfiableAction, VolumeClaim, WeightedPodAffinityTerm,
};

fn set_quantity(resources: &mut Resources, name: &str, value: &str) {
    let parse = |value: &str| quantity::whole_units(value).unwrap_or_else(|error| panic!("{error}"));
    match name {
        "cpu" => resources.cpu_millis = quantity::cpu_millis(value).unwrap_or_else(|error| panic!("{error}")),
        "memory" => resources.memory_bytes = parse(value),
        "ephemeral-storage" => resources.ephemeral_storage_bytes = parse(value),
        scalar => {
            resources.scalar.retain(|(key, _)| key != scalar);
            resources.scalar.push((scalar.to_string(), parse(value)));
        }
    }
}

fn empty_resources() -> Resources {
    Resources { cpu_millis: 0, memory_bytes: 0, ephemeral_storage_bytes: 0, scalar: Vec::new() }
}

fn container(name: &str, requests: &[(&str, &str)]) -> Container {
    let mut container =
        Container { name: name.to_string(), image: String::new(), requests: empty_resources(), restart_count: 0, state: ContainerState::Unknown };
    for (resource, value) in requests {
        set_quantity(&mut container.requests, resource, value);
    }
    container
}

pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    /// A pending pod in namespace `default` with one container that requests nothing.
    pub fn new(name: &str) -> Self {
        PodBuilder {
            pod: Pod {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                labels: Vec::new(),
                scheduler_name: "wasp".into(),
                priority: 0,
                phase: PodPhase::Pending,
                containers: vec![container("main", &[])],
                init_containers: Vec::new(),
                sidecar_init_containers: Vec::new(),
                overhead: empty_resources(),
                node_selector: Vec::new(),
                node_affinity: None,
                tolerations: Vec::new(),
                topology_spread: Vec::new(),
                owner: None,
                created_at: 0,
                terminating: false,
                mirror: false,
                local_storage: false,
                pvc: false,
                ready: false,
                nominated_node: None,
                pod_affinity: None,
                pod_anti_affinity: None,
                host_ports: Vec::new(),
                status_reason: String::new(),
                annotations: Vec::new(),
                volume_claims: Vec::new(),
            },
        }
    }

    /// A PersistentVolumeClaim as the host resolved it for the pod to place.
    pub fn claim(mut self, name: &str, requirement: ClaimRequirement) -> Self {
        self.pod.volume_claims.push(VolumeClaim { name: name.into(), requirement, attachment: None });
        self
    }

    /// A claim, resolved to a volume that needs no particular node, whose volume `driver` attaches as `handle`
    /// (kube-scheduler's NodeVolumeLimits counts these).
    pub fn attached_claim(mut self, name: &str, driver: &str, handle: &str) -> Self {
        let attachment = Some(AttachedVolume { driver: driver.into(), handle: handle.into() });
        self.pod.volume_claims.push(VolumeClaim { name: name.into(), requirement: ClaimRequirement::Anywhere, attachment });
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.pod.annotations.push((key.into(), value.into()));
        self
    }

    /// A required pod affinity term (see [`affinity_term`]).
    pub fn require_affinity(mut self, term: PodAffinityTerm) -> Self {
        self.pod.pod_affinity.get_or_insert_with(no_terms).required.push(term);
        self
    }

    pub fn prefer_affinity(mut self, weight: i32, term: PodAffinityTerm) -> Self {
        self.pod.pod_affinity.get_or_insert_with(no_terms).preferred.push(WeightedPodAffinityTerm { weight, term });
        self
    }

    /// A required pod anti-affinity term (see [`affinity_term`]).
    pub fn require_anti_affinity(mut self, term: PodAffinityTerm) -> Self {
        self.pod.pod_anti_affinity.get_or_insert_with(no_terms).required.push(term);
        self
    }

    pub fn prefer_anti_affinity(mut self, weight: i32, term: PodAffinityTerm) -> Self {
        self.pod.pod_anti_affinity.get_or_insert_with(no_terms).preferred.push(WeightedPodAffinityTerm { weight, term });
        self
    }

    /// A host port on every address (`0.0.0.0`); `protocol` is `TCP`, `UDP` or `SCTP`.
    pub fn host_port(self, port: u16, protocol: &str) -> Self {
        self.host_port_on(port, protocol, "0.0.0.0")
    }

    pub fn host_port_on(mut self, port: u16, protocol: &str, ip: &str) -> Self {
        let protocol = match protocol {
            "UDP" => PortProtocol::Udp,
            "SCTP" => PortProtocol::Sctp,
            _ => PortProtocol::Tcp,
        };
        self.pod.host_ports.push(HostPort { port, protocol, ip: ip.into() });
        self
    }

    /// Phase Failed with `status.reason`, its first container terminated with `exit_code`.
    pub fn failed(mut self, reason: &str, container_reason: &str, exit_code: i32) -> Self {
        self.pod.phase = PodPhase::Failed;
        self.pod.status_reason = reason.into();
        self.pod.containers[0].state = ContainerState::Terminated(Termination { reason: container_reason.into(), exit_code });
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.pod.namespace = namespace.into();
        self
    }

    /// Sets a request of the first container (`cpu`, `memory`, `ephemeral-storage` or an extended resource).
    pub fn request(mut self, resource: &str, value: &str) -> Self {
        set_quantity(&mut self.pod.containers[0].requests, resource, value);
        self
    }

    pub fn cpu(self, value: &str) -> Self {
        self.request("cpu", value)
    }

    pub fn memory(self, value: &str) -> Self {
        self.request("memory", value)
    }

    /// The image of the app containers so far (`registry/repo:tag`).
    pub fn image(mut self, image: &str) -> Self {
        for container in &mut self.pod.containers {
            container.image = image.to_string();
        }
        self
    }

    /// Adds another app container with the given requests, e.g. `&[("cpu", "100m")]`.
    pub fn container(mut self, name: &str, requests: &[(&str, &str)]) -> Self {
        self.pod.containers.push(container(name, requests));
        self
    }

    pub fn init_container(mut self, name: &str, requests: &[(&str, &str)]) -> Self {
        self.pod.init_containers.push(container(name, requests));
        self
    }

    /// An init container with `restartPolicy: Always`.
    pub fn sidecar(mut self, name: &str, requests: &[(&str, &str)]) -> Self {
        self = self.init_container(name, requests);
        self.pod.sidecar_init_containers.push(name.into());
        self
    }

    pub fn overhead(mut self, resource: &str, value: &str) -> Self {
        set_quantity(&mut self.pod.overhead, resource, value);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod.labels.push((key.into(), value.into()));
        self
    }

    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.pod.node_selector.push((key.into(), value.into()));
        self
    }

    fn affinity(&mut self) -> &mut NodeAffinity {
        self.pod.node_affinity.get_or_insert_with(|| NodeAffinity { required: None, preferred: Vec::new() })
    }

    /// Adds a required node selector term (terms are ORed, expressions within a term ANDed).
    pub fn require_node_term(mut self, expressions: Vec<SelectorRequirement>) -> Self {
        let term = NodeSelectorTerm { match_expressions: expressions, match_fields: Vec::new() };
        self.affinity().required.get_or_insert_with(Vec::new).push(term);
        self
    }

    pub fn prefer_node_term(mut self, weight: i32, expressions: Vec<SelectorRequirement>) -> Self {
        let term = NodeSelectorTerm { match_expressions: expressions, match_fields: Vec::new() };
        self.affinity().preferred.push(PreferredTerm { weight, term });
        self
    }

    /// `operator` is `Equal` when `value` is given, `Exists` otherwise; `effect` None tolerates all effects.
    pub fn toleration(mut self, key: &str, value: Option<&str>, effect: Option<TaintEffect>) -> Self {
        self.pod.tolerations.push(Toleration {
            key: key.into(),
            operator: if value.is_some() { TolerationOperator::Equal } else { TolerationOperator::Exists },
            value: value.unwrap_or_default().into(),
            effect,
        });
        self
    }

    /// A topology spread constraint selecting pods with `selector_labels`.
    pub fn spread(mut self, topology_key: &str, max_skew: i32, when_unsatisfiable: UnsatisfiableAction, selector_labels: &[(&str, &str)]) -> Self {
        self.pod.topology_spread.push(TopologySpreadConstraint {
            max_skew,
            topology_key: topology_key.into(),
            when_unsatisfiable,
            label_selector: Some(LabelSelector {
                match_labels: selector_labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                match_expressions: Vec::new(),
            }),
            min_domains: None,
            node_affinity_policy: InclusionPolicy::Honor,
            node_taints_policy: InclusionPolicy::Ignore,
            match_label_keys: Vec::new(),
        });
        self
    }

    pub fn owner(mut self, kind: &str, name: &str) -> Self {
        self.pod.owner = Some(Owner { kind: kind.into(), name: name.into(), controller: true });
        self
    }

    pub fn running(mut self) -> Self {
        self.pod.phase = PodPhase::Running;
        self.pod.ready = true;
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.pod.priority = priority;
        self
    }

    pub fn created_at(mut self, seconds: i64) -> Self {
        self.pod.created_at = seconds;
        self
    }

    pub fn restarts(mut self, count: u32) -> Self {
        self.pod.containers[0].restart_count = count;
        self
    }

    /// Direct access for fields without a builder method.
    pub fn with(mut self, change: impl FnOnce(&mut Pod)) -> Self {
        change(&mut self.pod);
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }
}

fn no_terms() -> PodAffinity {
    PodAffinity { required: Vec::new(), preferred: Vec::new() }
}

/// A pod affinity term selecting pods with all of `labels` in the pod's own namespace, over `topology_key`.
pub fn affinity_term(topology_key: &str, labels: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: labels.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect(),
            match_expressions: Vec::new(),
        }),
        namespaces: Vec::new(),
        namespace_selector: None,
        topology_key: topology_key.into(),
    }
}

pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A Ready node with 4 CPUs, 16 GiB of memory, 100 GiB of ephemeral storage and room for 110 pods.
    pub fn new(name: &str) -> Self {
        let mut allocatable = empty_resources();
        set_quantity(&mut allocatable, "cpu", "4");
        set_quantity(&mut allocatable, "memory", "16Gi");
        set_quantity(&mut allocatable, "ephemeral-storage", "100Gi");
        NodeBuilder {
            node: Node {
                name: name.into(),
                labels: vec![("kubernetes.io/hostname".into(), name.into())],
                taints: Vec::new(),
                unschedulable: false,
                allocatable,
                allocatable_pods: 110,
                conditions: vec![Condition { kind: "Ready".into(), status: "True".into() }],
                images: Vec::new(),
                volume_limits: Vec::new(),
            },
        }
    }

    /// How many volumes the CSI `driver` may attach to the node (its CSINode's `allocatable.count`).
    pub fn volume_limit(mut self, driver: &str, count: u32) -> Self {
        self.node.volume_limits.push((driver.into(), count));
        self
    }

    pub fn allocatable(mut self, resource: &str, value: &str) -> Self {
        set_quantity(&mut self.node.allocatable, resource, value);
        self
    }

    /// An image on the node (`status.images`) with its names and size.
    pub fn image(mut self, names: &[&str], size_bytes: u64) -> Self {
        self.node.images.push(NodeImage { names: names.iter().map(|name| name.to_string()).collect(), size_bytes });
        self
    }

    pub fn cpu(self, value: &str) -> Self {
        self.allocatable("cpu", value)
    }

    pub fn memory(self, value: &str) -> Self {
        self.allocatable("memory", value)
    }

    pub fn max_pods(mut self, pods: u32) -> Self {
        self.node.allocatable_pods = pods;
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node.labels.retain(|(existing, _)| existing != key);
        self.node.labels.push((key.into(), value.into()));
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: TaintEffect) -> Self {
        self.node.taints.push(Taint { key: key.into(), value: value.into(), effect });
        self
    }

    pub fn unschedulable(mut self) -> Self {
        self.node.unschedulable = true;
        self
    }

    pub fn condition(mut self, kind: &str, status: &str) -> Self {
        self.node.conditions.retain(|condition| condition.kind != kind);
        self.node.conditions.push(Condition { kind: kind.into(), status: status.into() });
        self
    }

    pub fn build(self) -> Node {
        self.node
    }
}

/// One metric of a workload: its pods' readings, or an object's or external series' value.
pub struct MetricBuilder {
    metric: Metric,
}

impl MetricBuilder {
    fn with(name: &str, source: MetricSource, target: MetricTarget, value: Option<f64>) -> Self {
        MetricBuilder { metric: Metric { name: name.into(), source, target, pods: Vec::new(), value, error: None, history: Vec::new() } }
    }

    /// A Resource metric held to a percent of requests; each pod requests 100, so readings read as percent.
    pub fn utilization(name: &str, percent: f64) -> Self {
        Self::with(name, MetricSource::Resource, MetricTarget::Utilization(percent), None)
    }

    /// A Pods metric held to an average per pod.
    pub fn average(name: &str, target: f64) -> Self {
        Self::with(name, MetricSource::Pods, MetricTarget::AverageValue(target), None)
    }

    /// An External metric whose series sum to `value`; add the target's pods with [`MetricBuilder::ready_pods`].
    pub fn external(name: &str, target: MetricTarget, value: f64) -> Self {
        Self::with(name, MetricSource::External, target, Some(value))
    }

    fn push(mut self, ready: bool, value: Option<f64>) -> Self {
        let pod = format!("pod-{}", self.metric.pods.len());
        let request = matches!(self.metric.target, MetricTarget::Utilization(_)).then_some(100.0);
        self.metric.pods.push(PodMetric { pod, ready, started: 0, value, request });
        self
    }

    pub fn ready(self, value: f64) -> Self {
        self.push(true, Some(value))
    }

    pub fn unready(self, value: f64) -> Self {
        self.push(false, Some(value))
    }

    /// A ready pod whose metric is missing.
    pub fn missing(self) -> Self {
        self.push(true, None)
    }

    /// `count` ready pods without readings (the pods of an Object or External metric's target).
    pub fn ready_pods(self, count: usize) -> Self {
        (0..count).fold(self, |builder, _| builder.push(true, None))
    }

    /// The request of the pod added last.
    pub fn request(mut self, request: f64) -> Self {
        if let Some(pod) = self.metric.pods.last_mut() {
            pod.request = Some(request);
        }
        self
    }

    /// The metric could not be read.
    pub fn error(mut self, error: &str) -> Self {
        self.metric.error = Some(error.into());
        self
    }

    /// Earlier readings, `(seconds since the epoch, reading, pods averaged over)`, oldest first.
    pub fn history(mut self, samples: &[(i64, f64, u32)]) -> Self {
        self.metric.history = samples.iter().map(|(at, value, pods)| MetricSample { at: *at, value: *value, pods: *pods }).collect();
        self
    }

    pub fn build(self) -> Metric {
        self.metric
    }
}

/// A request at time 0 with no earlier recommendations.
pub fn scale_request(current_replicas: u32, min: u32, max: u32, metrics: Vec<Metric>) -> ScaleRequest {
    ScaleRequest {
        workload: "default/Deployment/web".into(),
        now: 0,
        current_replicas,
        min_replicas: min,
        max_replicas: max,
        metrics,
        recommendations: Vec::new(),
        containers: Vec::new(),
        state: None,
    }
}

/// Builds a policy from settings JSON as the host's `configure` call will (empty: all defaults), or says what
/// is wrong with them: `build::<MyPolicy>(r#"{"zone": "west"}"#)`.
pub use crate::guest::build;

/// Each candidate's verdict from `filter_all` (what the host calls), by node name: `("a", Verdict::Pass)`,
/// `("b", Verdict::reject("Insufficient cpu"))`.
pub fn verdicts(policy: &dyn crate::Filter, pod: &Pod, cluster: &crate::Cluster) -> Vec<(String, crate::Verdict)> {
    let nodes: Vec<&crate::NodeInfo> = cluster.nodes().collect();
    let ids: Vec<crate::NodeId> = nodes.iter().map(|node| node.id).collect();
    let result = policy.filter_all(pod, cluster, &ids);
    nodes
        .iter()
        .zip(&result.verdicts)
        .map(|(node, code)| {
            let verdict = match *code {
                0 => crate::Verdict::Pass,
                code => crate::Verdict::Reject(result.rejections[code as usize - 1].iter().cloned().map(Into::into).collect()),
            };
            (node.name().to_string(), verdict)
        })
        .collect()
}
