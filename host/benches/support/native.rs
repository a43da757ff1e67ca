//! The default policies compiled into the benchmark binary, behind the scheduler's [`SchedulingPolicy`]: the
//! native side of the side-by-side runs. The same policy crates the components are built from run over the SDK's
//! cluster view, one copy per thread, fed from the same delta log as the sandboxed instances; records cross
//! from the host's types to the SDK's (both generated from the WIT) as the contract's `apply` carries them, in
//! postcard's encoding. [`run_host`] serves them from a host process of their own, as `wasp run` serves the
//! components.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use wasp::cluster::{ClusterState, DeltaSink, SyncPoint};
use wasp::config::HostConfig;
use wasp::contract::encode_deltas;
use wasp::contract::types::{ClusterDelta, FilterResult, NodeId, Pod, PodPlace, ViewScope};
use wasp::host::Host;
use wasp::kube::{ApiClient, HostIdentity};
use wasp::policy::SchedulingPolicy;
use wasp::registry::{Plans, PolicyRegistry, ProfilePolicies};
use wasp::runtime::CallError;
use wasp::runtime::Runtime;
use wasp_sdk::guest::GuestState;
use wasp_sdk::Policy;

struct NativeInstance<P: Policy> {
    state: GuestState<P>,
    synced_to: Option<SyncPoint>,
}

impl<P: Policy> DeltaSink for NativeInstance<P> {
    type Error = CallError;

    fn synced_to(&self) -> Option<SyncPoint> {
        self.synced_to
    }

    fn set_synced_to(&mut self, point: SyncPoint) {
        self.synced_to = Some(point);
    }

    fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), CallError> {
        self.state.apply_encoded(&encode_deltas(deltas)).map_err(CallError::Guest)
    }
}

pub struct NativePolicy<P: Policy> {
    settings: String,
    /// A fresh guest state with the policy's exports (found on the concrete type by `exports_of!`).
    new_state: fn() -> GuestState<P>,
    idle: Mutex<Vec<NativeInstance<P>>>,
}

impl<P: Policy + Send + Sync + 'static> NativePolicy<P> {
    fn shared(settings: String, new_state: fn() -> GuestState<P>) -> Arc<dyn SchedulingPolicy> {
        Arc::new(NativePolicy::<P> { settings, new_state, idle: Mutex::new(Vec::new()) })
    }

    /// Runs `body` on an idle synced copy (or a new one), like the sandboxed pool, with `pod` sent as the
    /// subject of the call as the host sends it to components.
    fn with_instance<R>(&self, cluster: &ClusterState, body: impl FnOnce(&GuestState<P>) -> R, pod: &Pod) -> R {
        let pooled = self.idle.lock().unwrap().pop();
        let mut instance = pooled.unwrap_or_else(|| {
            let mut state = (self.new_state)();
            state.configure(&self.settings).expect("default settings are valid");
            NativeInstance { state, synced_to: None }
        });
        // The facts the component's descriptor would declare, so both sides are synced alike.
        let facts = P::POD_FACTS;
        let view = wasp::cluster::View {
            scope: self.view(),
            pod_facts: wasp::contract::types::PodFacts {
                labels: match facts.labels {
                    wasp_sdk::LabelScope::None => wasp::contract::types::LabelScope::None,
                    wasp_sdk::LabelScope::Selected => wasp::contract::types::LabelScope::Selected,
                    wasp_sdk::LabelScope::All => wasp::contract::types::LabelScope::All,
                },
                containers: facts.containers,
                images: facts.images,
                placement: facts.placement,
                pod_affinity: facts.pod_affinity,
                host_ports: facts.host_ports,
            },
            node_facts: wasp::contract::types::NodeFacts {
                labels: P::NODE_FACTS.labels,
                taints: P::NODE_FACTS.taints,
                conditions: P::NODE_FACTS.conditions,
                images: P::NODE_FACTS.images,
            },
            settings_keys: &[],
        };
        cluster.sync(&mut instance, view).expect("the host's records decode in the SDK built from the same WIT");
        let subject = ClusterDelta::PodUpsert((0, PodPlace::Subject, pod.clone()));
        instance.state.apply_encoded(&encode_deltas(&[subject])).expect("the records of one contract decode");
        let result = body(&instance.state);
        self.idle.lock().unwrap().push(instance);
        result
    }
}

impl<P: Policy + Send + Sync + 'static> SchedulingPolicy for NativePolicy<P> {
    fn name(&self) -> &str {
        P::NAME
    }

    fn view(&self) -> ViewScope {
        match P::VIEW {
            wasp_sdk::types::ViewScope::Nodes => ViewScope::Nodes,
            wasp_sdk::types::ViewScope::NodesAndPods => ViewScope::NodesAndPods,
        }
    }

    fn filter_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> FilterResult {
        let result = self.with_instance(cluster, |state| state.filter(candidates), pod).expect("native filter");
        FilterResult { verdicts: result.verdicts, rejections: result.rejections }
    }

    fn score_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> Vec<u32> {
        self.with_instance(cluster, |state| state.score(candidates), pod).expect("native score")
    }
}

/// Policy `name` of the default set, compiled into this binary, configured with `settings` (JSON; empty for the
/// defaults).
pub fn native(name: &str, settings: String) -> Arc<dyn SchedulingPolicy> {
    match name {
        "node-unschedulable" => NativePolicy::<node_unschedulable::NodeUnschedulable>::shared(settings, || {
            GuestState::new(wasp_sdk::exports_of!(node_unschedulable::NodeUnschedulable))
        }),
        "resources-fit" => {
            NativePolicy::<resources_fit::ResourcesFit>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(resources_fit::ResourcesFit)))
        }
        "node-affinity" => {
            NativePolicy::<node_affinity::NodeAffinity>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(node_affinity::NodeAffinity)))
        }
        "taint-toleration" => {
            NativePolicy::<taint_toleration::TaintToleration>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(taint_toleration::TaintToleration)))
        }
        "pod-topology-spread" => NativePolicy::<pod_topology_spread::PodTopologySpread>::shared(settings, || {
            GuestState::new(wasp_sdk::exports_of!(pod_topology_spread::PodTopologySpread))
        }),
        "least-allocated" => {
            NativePolicy::<least_allocated::LeastAllocated>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(least_allocated::LeastAllocated)))
        }
        "node-ports" => NativePolicy::<node_ports::NodePorts>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(node_ports::NodePorts))),
        "volume-topology" => {
            NativePolicy::<volume_topology::VolumeTopology>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(volume_topology::VolumeTopology)))
        }
        "image-locality" => {
            NativePolicy::<image_locality::ImageLocality>::shared(settings, || GuestState::new(wasp_sdk::exports_of!(image_locality::ImageLocality)))
        }
        "inter-pod-affinity" => NativePolicy::<inter_pod_affinity::InterPodAffinity>::shared(settings, || {
            GuestState::new(wasp_sdk::exports_of!(inter_pod_affinity::InterPodAffinity))
        }),
        "balanced-allocation" => NativePolicy::<balanced_allocation::BalancedAllocation>::shared(settings, || {
            GuestState::new(wasp_sdk::exports_of!(balanced_allocation::BalancedAllocation))
        }),
        other => panic!("no native build of {other}"),
    }
}

/// The configuration's scheduling plan with every policy of its profiles compiled natively.
pub fn native_plans(config: &HostConfig) -> Plans {
    let mut policies: HashMap<String, Arc<dyn SchedulingPolicy>> = HashMap::new();
    let profiles = config.scheduler.profiles.iter();
    for name in profiles.flat_map(|profile| profile.filters.iter().chain(profile.scores.iter().map(|score| &score.policy))) {
        let settings = config.policies.get(name).map(|policy| policy.settings_json()).unwrap_or_default();
        policies.entry(name.clone()).or_insert_with(|| native(name, settings));
    }
    let scheduling = config
        .scheduler
        .profiles
        .iter()
        .map(|profile| {
            let resolved = ProfilePolicies {
                scheduler_name: profile.scheduler_name.clone(),
                filters: profile.filters.iter().map(|name| policies[name].clone()).collect(),
                scores: profile.scores.iter().map(|score| (policies[&score.policy].clone(), score.weight)).collect(),
            };
            (profile.scheduler_name.clone(), Arc::new(resolved))
        })
        .collect();
    Plans { scheduling, ..Plans::default() }
}

/// The host `wasp run --no-leader-election --config CONFIG` runs, on the API server of `$KUBECONFIG`, with the
/// scheduler serving [`native_plans`] instead of the components; until the process is killed. The other loops'
/// policies (the rescheduler's preemption policy) stay components. Every component the configuration names is
/// loaded first, through `cache_directory`, as `wasp run` loads them, and the scheduling ones are then dropped:
/// that load counts in this host's CPU time and peak memory too.
pub fn run_host(config_path: &Path, cache_directory: PathBuf) -> anyhow::Result<()> {
    let config = HostConfig::load(config_path)?;
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    tokio.block_on(async move {
        let api = ApiClient::connect().await?;
        let runtime = Runtime::new(Some(cache_directory))?;
        let components = PolicyRegistry::new(&runtime, config.clone(), None)?.current();
        let plans = Plans {
            scheduling: native_plans(&config).scheduling,
            eviction: components.plans.eviction.clone(),
            preemption: components.plans.preemption.clone(),
            scaling: components.plans.scaling.clone(),
        };
        // The scheduling components are dropped here: only the native copies serve.
        drop(components);
        let registry = PolicyRegistry::with_plans(&runtime, config, plans);
        Host::new(api, Arc::new(registry), HostIdentity::named("wasp-native", None)).run_loops().await;
        Ok(())
    })
}
