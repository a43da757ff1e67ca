//! What the scheduler writes to the API server: bindings, `Scheduled`/`FailedScheduling` events (like kube's event
//! recorder: a repeat within 10 minutes bumps `count` instead of creating another event, and a spam filter allows
//! an object 25 warnings, then one per 5 minutes), and the `PodScheduled=False` condition.

use crate::runtime::bindings::types::Pod;
use k8s_openapi::api::core::v1::{Event, Pod as KubePod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const AGGREGATION_WINDOW: Duration = Duration::from_secs(600);

/// Requests in flight at once. Bindings are made asynchronously, one task per pod; unbounded, a burst of
/// thousands of decisions would open as many connections (HTTP/1) and exhaust file descriptors on both sides.
const MAX_IN_FLIGHT: usize = 64;

/// (object uid or name, reason, message) of an event already sent.
type EventKey = (String, String, String);
/// The event's name, its count, and when it was last sent.
type SentEvent = (String, i32, Instant);

/// The object an event is about.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    fn of_pod(pod: &Pod) -> ObjectRef {
        ObjectRef { kind: "Pod".into(), namespace: pod.namespace.clone(), name: pod.name.clone(), uid: pod.uid.clone() }
    }

    /// The host's own Pod, from the downward API variables `POD_NAMESPACE` and `POD_NAME`.
    pub fn host_pod_from_env() -> Option<ObjectRef> {
        let namespace = std::env::var("POD_NAMESPACE").ok().filter(|value| !value.is_empty())?;
        let name = std::env::var("POD_NAME").ok().filter(|value| !value.is_empty())?;
        let uid = std::env::var("POD_UID").unwrap_or_default();
        Some(ObjectRef { kind: "Pod".into(), namespace, name, uid })
    }

    fn key(&self) -> String {
        if self.uid.is_empty() { format!("{}/{}/{}", self.kind, self.namespace, self.name) } else { self.uid.clone() }
    }
}

/// kube's event spam filter: per object, a burst of 25 warnings, then one per 5 minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// Warnings sent within the aggregation window and each object's spam budget (tokens, last update), pruned now
/// and then rather than on every event.
#[derive(Default)]
struct RecentEvents {
    sent: HashMap<EventKey, SentEvent>,
    budgets: HashMap<String, (f64, Instant)>,
    pruned_at: Option<Instant>,
}

impl RecentEvents {
    fn prune(&mut self) {
        if self.pruned_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            self.sent.retain(|_, (_, _, at)| at.elapsed() < AGGREGATION_WINDOW);
            self.budgets.retain(|_, (tokens, at)| *tokens + at.elapsed().as_secs_f64() / SPAM_REFILL.as_secs_f64() < SPAM_BURST);
            self.pruned_at = Some(Instant::now());
        }
    }

    /// Takes a token from `object`'s budget, if it has one.
    fn allow(&mut self, object: &str) -> bool {
        let (tokens, at) = self.budgets.entry(object.to_string()).or_insert((SPAM_BURST, Instant::now()));
        *tokens = (*tokens + at.elapsed().as_secs_f64() / SPAM_REFILL.as_secs_f64()).min(SPAM_BURST);
        *at = Instant::now();
        let allowed = *tokens >= 1.0;
        if allowed {
            *tokens -= 1.0;
        }
        allowed
    }
}

pub struct ApiWriter {
    client: Client,
    /// The reporting component (`wasp`); events also name the profile.
    component: String,
    recent: Mutex<RecentEvents>,
    /// What events about the host itself (reload failures) are attached to.
    host_object: Mutex<Option<ObjectRef>>,
    in_flight: tokio::sync::Semaphore,
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl ApiWriter {
    pub fn new(client: Client, component: &str) -> Self {
        ApiWriter {
            client,
            component: component.to_string(),
            recent: Mutex::new(RecentEvents::default()),
            host_object: Mutex::new(None),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    pub fn set_host_object(&self, object: ObjectRef) {
        *self.host_object.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(object);
    }

    /// An event about the host itself; logged only when no host object is known (outside a cluster).
    pub async fn host_event(&self, kind: &str, reason: &str, message: &str) {
        let object = self.host_object.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        match object {
            Some(object) => self.event(&object, kind, reason, message, &self.component).await,
            None => tracing::debug!(reason, "no host object to attach the event to (set POD_NAMESPACE and POD_NAME)"),
        }
    }

    async fn permit(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.in_flight.acquire().await.expect("the semaphore is never closed")
    }

    pub async fn bind(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let _permit = self.permit().await;
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
        self.event(&ObjectRef::of_pod(pod), "Normal", "Scheduled", &message, profile).await;
    }

    /// The Warning event and the condition kubectl shows for a pod that does not fit.
    pub async fn unschedulable(&self, pod: &Pod, message: &str, profile: &str) {
        self.event(&ObjectRef::of_pod(pod), "Warning", "FailedScheduling", message, profile).await;
        let pods: Api<KubePod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let _permit = self.permit().await;
        let condition = json!({"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": now(),
        }]}});
        if let Err(error) = pods.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(condition)).await {
            tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), %error, "could not set PodScheduled=False");
        }
    }

    async fn event(&self, object: &ObjectRef, kind: &str, reason: &str, message: &str, source: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &object.namespace);
        let key = (object.key(), reason.to_string(), message.to_string());
        let previous = {
            let mut recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            recent.prune();
            // `Normal` events here happen once per object (`Scheduled`): only warnings repeat and are limited.
            if kind == "Warning" && !recent.allow(&key.0) {
                tracing::debug!(object = %format!("{}/{}", object.namespace, object.name), reason, "event dropped by the spam filter");
                return;
            }
            recent.sent.get(&key).filter(|(_, _, at)| at.elapsed() < AGGREGATION_WINDOW).cloned()
        };
        let _permit = self.permit().await;
        let result = match previous {
            Some((name, count, _)) => {
                let patch = json!({"count": count + 1, "lastTimestamp": now()});
                events.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| (name, count + 1))
            }
            None => {
                let name = format!("{}.{:016x}", object.name, fastrand::u64(..));
                let event = json!({
                    "metadata": {"name": name, "namespace": object.namespace},
                    "involvedObject": {"apiVersion": "v1", "kind": object.kind, "namespace": object.namespace, "name": object.name, "uid": object.uid},
                    "reason": reason, "message": message, "type": kind, "count": 1,
                    "firstTimestamp": now(), "lastTimestamp": now(),
                    "source": {"component": source}, "reportingComponent": self.component, "reportingInstance": source,
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
            // Only warnings repeat (a pod retried, a reload refused again); remembering every `Scheduled` event
            // would hold one entry per pod placed in the last 10 minutes.
            Ok((name, count)) if kind == "Warning" => {
                self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).sent.insert(key, (name, count, Instant::now()));
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(object = %format!("{}/{}", object.namespace, object.name), reason, %error, "could not record event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spam_filter_allows_a_burst_of_25_per_object() {
        let mut recent = RecentEvents::default();
        assert!((0..25).all(|_| recent.allow("pod-a")));
        assert!(!recent.allow("pod-a"), "the 26th warning within moments is dropped");
        assert!(recent.allow("pod-b"), "budgets are per object");
    }
}
