//! What the rescheduler writes to the API server: evictions, only through the Eviction API
//! (`POST pods/{name}/eviction`, so PodDisruptionBudgets hold), events on the pods it evicts or had to
//! leave for a reason their owners can act on, and the workloads' evictions it must remember across restarts
//! (a ConfigMap beside the Lease).

use super::memory::{Conflict, Record};
use super::plan::{PlanEntry, Skip};
use crate::kube::{ApiClient, EventRecorder, ObjectRef};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ListParams, PostParams};
use kube::Api;

/// The reporting component of the rescheduler's events.
pub const COMPONENT: &str = "wasp-rescheduler";

pub struct Evictor {
    api: ApiClient,
    events: EventRecorder,
}

fn object_of(entry: &PlanEntry) -> ObjectRef {
    ObjectRef::pod(&entry.namespace, &entry.name, &entry.uid)
}

/// The ConfigMap, in the Lease's namespace, that keeps the workloads' evictions across restarts and failovers.
pub const MEMORY_CONFIG_MAP: &str = "wasp-rescheduler-memory";
const MEMORY_KEY: &str = "evictions.json";

/// How the Eviction API answered.
pub enum Answer {
    Evicted,
    /// 429: a PodDisruptionBudget forbids it now.
    RefusedByBudget(String),
    Gone,
    Failed(String),
}

impl Evictor {
    pub fn new(api: ApiClient, events: &EventRecorder) -> Evictor {
        Evictor { api, events: events.for_component(COMPONENT) }
    }

    /// The cluster's PodDisruptionBudgets, for the plan to spend.
    pub async fn budgets(&self) -> Result<Vec<PodDisruptionBudget>, kube::Error> {
        let _permit = self.api.permit().await;
        let budgets: Api<PodDisruptionBudget> = Api::all(self.api.client.clone());
        Ok(budgets.list(&ListParams::default()).await?.items)
    }

    /// The evictions a previous leader (or this process before a restart) kept; None when there are none.
    pub async fn load_memory(&self, namespace: &str) -> Result<Option<Record>, String> {
        let _permit = self.api.permit().await;
        let config_maps: Api<ConfigMap> = Api::namespaced(self.api.client.clone(), namespace);
        let Some(config_map) = config_maps.get_opt(MEMORY_CONFIG_MAP).await.map_err(|error| error.to_string())? else { return Ok(None) };
        let Some(text) = config_map.data.as_ref().and_then(|data| data.get(MEMORY_KEY)) else { return Ok(None) };
        serde_json::from_str(text).map(Some).map_err(|error| format!("configmap {namespace}/{MEMORY_CONFIG_MAP}: {MEMORY_KEY}: {error}"))
    }

    /// Keeps `record` for the next leader; a failure is logged (the next run that evicts writes it again).
    pub async fn save_memory(&self, namespace: &str, record: &Record) {
        let _permit = self.api.permit().await;
        let config_maps: Api<ConfigMap> = Api::namespaced(self.api.client.clone(), namespace);
        let text = serde_json::to_string(record).unwrap_or_default();
        let saved = match config_maps.get_opt(MEMORY_CONFIG_MAP).await {
            Ok(Some(mut config_map)) => {
                config_map.data = Some([(MEMORY_KEY.to_string(), text)].into());
                config_maps.replace(MEMORY_CONFIG_MAP, &PostParams::default(), &config_map).await.map(drop)
            }
            Ok(None) => {
                let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": MEMORY_CONFIG_MAP, "namespace": namespace, "labels": {"app.kubernetes.io/name": "wasp"}},
                    "data": {MEMORY_KEY: text},
                }))
                .unwrap_or_default();
                config_maps.create(&PostParams::default(), &config_map).await.map(drop)
            }
            Err(error) => Err(error),
        };
        if let Err(error) = saved {
            tracing::warn!(configmap = %format!("{namespace}/{MEMORY_CONFIG_MAP}"), %error, "could not keep the workloads' evictions for the next leader");
        }
    }

    pub async fn evict(&self, entry: &PlanEntry) -> Answer {
        let pods: Api<Pod> = Api::namespaced(self.api.client.clone(), &entry.namespace);
        // Only this pod: a replacement of the same name (StatefulSet) is not ours to evict.
        let params = EvictParams {
            delete_options: Some(kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions { uid: Some(entry.uid.clone()), resource_version: None }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let _permit = self.api.permit().await;
        match pods.evict(&entry.name, &params).await {
            Ok(_) => Answer::Evicted,
            Err(kube::Error::Api(status)) if status.code == 429 => Answer::RefusedByBudget(status.message),
            Err(kube::Error::Api(status)) if status.code == 404 => Answer::Gone,
            Err(kube::Error::Api(status)) if status.code == 409 && status.message.contains("UID") => Answer::Gone,
            Err(error) => Answer::Failed(error.to_string()),
        }
    }

    /// The event on an evicted pod: which policy, why, and what is known of where its replacement goes.
    /// `target` is where the fit check found room; None for a failed pod, which goes nowhere. Only a policy's
    /// placement hint steers the scheduler there; otherwise the scheduler decides anew, so the event says the
    /// fit check found room, not where the replacement will land.
    pub async fn evicted(&self, entry: &PlanEntry, target: Option<&str>) {
        let message = match (target, &entry.placement) {
            (Some(target), Some(_)) => format!(
                "Evicted from node {} by policy {}: {}; its replacement is steered to node {target} (the policy's placement hint)",
                entry.node, entry.policy, entry.reason
            ),
            (Some(target), None) => format!(
                "Evicted from node {} by policy {}: {}; the fit check found room on node {target} (the scheduler places the replacement)",
                entry.node, entry.policy, entry.reason
            ),
            (None, _) => format!("Evicted failed pod from node {} by policy {}: {}", entry.node, entry.policy, entry.reason),
        };
        self.events.event(&object_of(entry), "Normal", "Evicted", &message).await;
    }

    /// Asks the scheduler to place the pending pod on `node`, where evictions made room for it
    /// (`status.nominatedNodeName`, as kube-scheduler's preemption does).
    pub async fn nominate(&self, namespace: &str, name: &str, node: &str) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.api.client.clone(), namespace);
        let _permit = self.api.permit().await;
        let patch = serde_json::json!({"status": {"nominatedNodeName": node}});
        pods.patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await.map(drop)
    }

    /// The event on a pod evicted to make room for a pending one: kube-scheduler's reason and message
    /// (`Preempted`, `Preempted by pod <uid> on node <node>`), then which policy and why.
    pub async fn preempted(&self, entry: &PlanEntry) {
        let preemptor = entry.room_for.as_deref().unwrap_or_default();
        let message = format!("Preempted by pod {preemptor} on node {} (policy {}: {})", entry.node, entry.policy, entry.reason);
        self.events.event(&object_of(entry), "Normal", "Preempted", &message).await;
    }

    /// A warning on a pod a policy wants moved but that stays for a reason its owner can act on (a budget that
    /// allows no disruption, no other node that fits, an annotation that is not understood).
    /// A Warning `EvictionBlocked` on a node whose pods a policy proposed but that stay, for reasons someone must
    /// act on (`blocked`: each pod and why): a drain that cannot finish says so where the node is described.
    pub async fn blocked_on_node(&self, node: &str, policy: &str, blocked: &[(String, String)]) {
        const SHOWN: usize = 5;
        let listed: Vec<String> = blocked.iter().take(SHOWN).map(|(pod, why)| format!("{pod} ({why})")).collect();
        let more = if blocked.len() > SHOWN { format!(" and {} more", blocked.len() - SHOWN) } else { String::new() };
        let message = format!("{} pod(s) that policy {policy} proposed stay on node {node}: {}{more}", blocked.len(), listed.join("; "));
        self.events.event(&ObjectRef::node(node), "Warning", "EvictionBlocked", &message).await;
    }

    /// `entry`'s policy proposes a pod that replaced one another policy evicted within the pacing window.
    pub async fn strategies_conflict(&self, entry: &PlanEntry, conflict: &Conflict, window: std::time::Duration) {
        let message = format!(
            "policy {} proposes this pod, which replaced a pod of {} that policy {} evicted within the last {}: the two strategies undo each other's moves (pacing and backoff only slow the loop); make them agree (for low- and high-node-utilization, thresholds that do not overlap)",
            conflict.proposed_by,
            conflict.workload,
            conflict.evicted_by,
            humantime::format_duration(window)
        );
        self.events.event(&object_of(entry), "Warning", "StrategiesConflict", &message).await;
    }

    pub async fn left_in_place(&self, entry: &PlanEntry, skip: &Skip) {
        if skip.actionable() {
            let message = format!("Not evicted (policy {} proposed it: {}): {}", entry.policy, entry.reason, skip.detail());
            self.events.event(&object_of(entry), "Warning", "EvictionSkipped", &message).await;
        }
    }
}
