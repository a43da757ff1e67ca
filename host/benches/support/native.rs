//! The default policies compiled into the benchmark binary, behind the scheduler's [`SchedulingPolicy`]: the
//! native side of the side-by-side run. The same policy crates the components are built from run over the SDK's
//! cluster view, one copy per thread, fed from the same delta log as the sandboxed instances; records cross
//! from the host's types to the SDK's (both generated from the WIT) through postcard.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wasp::cluster::{ClusterState, DeltaSink, SyncPoint};
use wasp::contract::types::{ClusterDelta, FilterResult, NodeId, Pod, ViewScope};
use wasp::runtime::CallError;
use wasp::config::HostConfig;
use wasp::policy::SchedulingPolicy;
use wasp::registry::{Plans, ProfilePolicies};
use wasp_sdk::guest::GuestState;
use wasp_sdk::Policy;

fn to_sdk<T: Serialize, U: DeserializeOwned>(value: &T) -> U {
    postcard::from_bytes(&postcard::to_allocvec(value).expect("contract records serialize")).expect("same WIT, same records")
}

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
        self.state.apply(deltas.iter().map(to_sdk).collect());
        Ok(())
    }
}

pub struct NativePolicy<P: Policy> {
    settings: String,
    idle: Mutex<Vec<NativeInstance<P>>>,
}

impl<P: Policy + Send + Sync + 'static> NativePolicy<P> {
    fn shared(settings: String) -> Arc<dyn SchedulingPolicy> {
        Arc::new(NativePolicy::<P> { settings, idle: Mutex::new(Vec::new()) })
    }

    /// Runs `body` on an idle synced copy (or a new one), like the sandboxed pool.
    fn with_instance<R>(&self, cluster: &ClusterState, body: impl FnOnce(&GuestState<P>, &wasp_sdk::types::Pod) -> R, pod: &Pod) -> R {
        let pooled = self.idle.lock().unwrap().pop();
        let mut instance = pooled.unwrap_or_else(|| {
            let mut state = GuestState::<P>::default();
            state.configure(&self.settings).expect("default settings are valid");
            NativeInstance { state, synced_to: None }
        });
        cluster.sync(&mut instance, self.view()).expect("native sync cannot fail");
        let result = body(&instance.state, &to_sdk(pod));
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
        let result = self.with_instance(cluster, |state, pod| state.filter(pod, candidates), pod).expect("native filter");
        FilterResult { verdicts: result.verdicts, rejections: result.rejections }
    }

    fn score_or_failure_mode(&self, cluster: &ClusterState, pod: &Pod, candidates: &[NodeId]) -> Vec<u32> {
        self.with_instance(cluster, |state, pod| state.score(pod, candidates), pod).expect("native score")
    }
}

fn native(name: &str, settings: String) -> Arc<dyn SchedulingPolicy> {
    match name {
        "node-unschedulable" => NativePolicy::<node_unschedulable::NodeUnschedulable>::shared(settings),
        "resources-fit" => NativePolicy::<resources_fit::ResourcesFit>::shared(settings),
        "node-affinity" => NativePolicy::<node_affinity::NodeAffinity>::shared(settings),
        "taint-toleration" => NativePolicy::<taint_toleration::TaintToleration>::shared(settings),
        "pod-topology-spread" => NativePolicy::<pod_topology_spread::PodTopologySpread>::shared(settings),
        "least-allocated" => NativePolicy::<least_allocated::LeastAllocated>::shared(settings),
        "balanced-allocation" => NativePolicy::<balanced_allocation::BalancedAllocation>::shared(settings),
        other => panic!("no native build of {other}"),
    }
}

/// The configuration's scheduling plan with every policy compiled natively.
pub fn native_plans(config: &HostConfig) -> Plans {
    let mut policies: HashMap<String, Arc<dyn SchedulingPolicy>> = HashMap::new();
    for name in config.policy_names() {
        let settings = config.policies.get(&name).map(|policy| policy.settings_json()).unwrap_or_default();
        policies.insert(name.clone(), native(&name, settings));
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
