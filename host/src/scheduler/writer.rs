//! What the scheduler writes to the API server: bindings, `Scheduled`/`FailedScheduling` events (aggregated like
//! kube's event recorder: a repeat within 10 minutes bumps `count` instead of creating another event), and the
//! `PodScheduled=False` condition.

use crate::runtime::bindings::types::Pod;
use k8s_openapi::api::core::v1::{Event, Pod as KubePod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const AGGREGATION_WINDOW: Duration = Duration::from_secs(600);

/// (pod uid, reason, message) of an event already sent.
type EventKey = (String, String, String);
/// The event's name, its count, and when it was last sent.
type SentEvent = (String, i32, Instant);

pub struct ApiWriter {
    client: Client,
    /// The reporting component (`wasp`); events also name the profile.
    component: String,
    recent: Mutex<HashMap<EventKey, SentEvent>>,
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl ApiWriter {
    pub fn new(client: Client, component: &str) -> Self {
        ApiWriter { client, component: component.to_string(), recent: Mutex::new(HashMap::new()) }
    }

    pub async fn bind(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let pods: Api<KubePod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        pods.create_subresource::<_, serde_json::Value>("binding", &pod.name, &PostParams::default(), &binding).await.map(drop)
    }

    pub async fn scheduled(&self, pod: &Pod, node: &str, profile: &str) {
        let message = format!("Successfully assigned {}/{} to {node}", pod.namespace, pod.name);
        self.event(pod, "Normal", "Scheduled", &message, profile).await;
    }

    /// The Warning event and the condition kubectl shows for a pod that does not fit.
    pub async fn unschedulable(&self, pod: &Pod, message: &str, profile: &str) {
        self.event(pod, "Warning", "FailedScheduling", message, profile).await;
        let pods: Api<KubePod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let condition = json!({"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": now(),
        }]}});
        if let Err(error) = pods.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(condition)).await {
            tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), %error, "could not set PodScheduled=False");
        }
    }

    async fn event(&self, pod: &Pod, kind: &str, reason: &str, message: &str, profile: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        let key = (pod.uid.clone(), reason.to_string(), message.to_string());
        let previous = {
            let mut recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            recent.retain(|_, (_, _, at)| at.elapsed() < AGGREGATION_WINDOW);
            recent.get(&key).cloned()
        };
        let result = match previous {
            Some((name, count, _)) => {
                let patch = json!({"count": count + 1, "lastTimestamp": now()});
                events.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| (name, count + 1))
            }
            None => {
                let name = format!("{}.{:016x}", pod.name, fastrand::u64(..));
                let event = json!({
                    "metadata": {"name": name, "namespace": pod.namespace},
                    "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
                    "reason": reason, "message": message, "type": kind, "count": 1,
                    "firstTimestamp": now(), "lastTimestamp": now(),
                    "source": {"component": profile}, "reportingComponent": self.component, "reportingInstance": profile,
                });
                let event: Event = match serde_json::from_value(event) {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(%error, "building an event");
                        return;
                    }
                };
                events.create(&PostParams::default(), &event).await.map(|_| (name, 1))
            }
        };
        match result {
            Ok((name, count)) => {
                self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(key, (name, count, Instant::now()));
            }
            Err(error) => tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), reason, %error, "could not record event"),
        }
    }
}
