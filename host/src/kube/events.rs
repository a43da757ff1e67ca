//! Events, as kube's event recorder writes them: a repeat within 10 minutes bumps `count` instead of creating
//! another event, and a spam filter allows an object 25 warnings, then one per 5 minutes. Each loop records
//! under its own reporting component (each scheduler profile under its name, as kube-scheduler does); every
//! event names this process in `reportingInstance`.

use super::client::ApiClient;
use super::identity::HostIdentity;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AGGREGATION_WINDOW: Duration = Duration::from_secs(600);

/// kube's event spam filter: per object, a burst of 25 warnings, then one per 5 minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// (object uid or name, reason, message) of an event already sent.
type EventKey = (String, String, String);
/// The event's name, its count, and when it was last sent.
type SentEvent = (String, i32, Instant);

/// The object an event is about.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    pub fn pod(namespace: &str, name: &str, uid: &str) -> ObjectRef {
        ObjectRef { api_version: "v1".into(), kind: "Pod".into(), namespace: namespace.into(), name: name.into(), uid: uid.into() }
    }

    /// A Node: its events go to the `default` namespace, where the kubelet records a node's events and
    /// `kubectl describe node` finds them.
    pub fn node(name: &str) -> ObjectRef {
        ObjectRef { api_version: "v1".into(), kind: "Node".into(), namespace: String::new(), name: name.into(), uid: name.into() }
    }

    /// The namespace its events are created in.
    fn events_namespace(&self) -> &str {
        if self.namespace.is_empty() {
            "default"
        } else {
            &self.namespace
        }
    }

    fn key(&self) -> String {
        if self.uid.is_empty() {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        } else {
            self.uid.clone()
        }
    }
}

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

/// Records events under one reporting component; recorders made with [`for_component`](Self::for_component)
/// share the aggregation and the spam budgets.
#[derive(Clone)]
pub struct EventRecorder {
    api: ApiClient,
    component: Arc<str>,
    identity: Arc<HostIdentity>,
    recent: Arc<Mutex<RecentEvents>>,
}

impl EventRecorder {
    pub fn new(api: ApiClient, component: &str, identity: Arc<HostIdentity>) -> EventRecorder {
        EventRecorder { api, component: Arc::from(component), identity, recent: Arc::default() }
    }

    /// The same recorder, sending through `api` (a loop's client, with the loop's request budget).
    pub fn sending_through(&self, api: ApiClient) -> EventRecorder {
        EventRecorder { api, ..self.clone() }
    }

    /// The same recorder under another reporting component.
    pub fn for_component(&self, component: &str) -> EventRecorder {
        EventRecorder { component: Arc::from(component), ..self.clone() }
    }

    pub fn component(&self) -> &str {
        &self.component
    }

    /// An event about the host itself, on its Pod; logged only when the host does not know its Pod (outside a
    /// cluster, or without the downward API variables).
    pub async fn host_event(&self, kind: &str, reason: &str, message: &str) {
        match &self.identity.pod {
            Some(object) => self.event(object, kind, reason, message).await,
            None => tracing::debug!(reason, "no host Pod to attach the event to (set POD_NAMESPACE and POD_NAME)"),
        }
    }

    pub async fn event(&self, object: &ObjectRef, kind: &str, reason: &str, message: &str) {
        let events: Api<Event> = Api::namespaced(self.api.client.clone(), object.events_namespace());
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
        let _permit = self.api.permit().await;
        let result = match previous {
            Some((name, count, _)) => {
                let patch = json!({"count": count + 1, "lastTimestamp": crate::clock::now_rfc3339()});
                events.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| (name, count + 1))
            }
            None => {
                let name = format!("{}.{:016x}", object.name, fastrand::u64(..));
                let event = json!({
                    "metadata": {"name": name, "namespace": object.events_namespace()},
                    "involvedObject": {"apiVersion": object.api_version, "kind": object.kind, "namespace": object.namespace, "name": object.name, "uid": object.uid},
                    "reason": reason, "message": message, "type": kind, "count": 1,
                    "firstTimestamp": crate::clock::now_rfc3339(), "lastTimestamp": crate::clock::now_rfc3339(),
                    "source": {"component": &*self.component},
                    "reportingComponent": &*self.component, "reportingInstance": self.identity.instance,
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
