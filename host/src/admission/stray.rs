//! Pods that slipped past the webhook (created while it was down, before it was installed, or admitted in
//! `warn` mode) and wait for a scheduler nobody runs: no scheduler owns them, so without this nobody says
//! anything. Each gets one Warning event `NoSuchScheduler` with the webhook's message once it has waited
//! `strayPodGrace`, and `wasp_stray_pods` counts them by the name they gave.

use super::metrics::AdmissionMetrics;
use super::review::KnownSchedulers;
use crate::cluster::SharedCluster;
use crate::kube::{EventRecorder, ObjectRef};
use crate::registry::PolicyRegistry;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The reporting component of the events.
pub const COMPONENT: &str = "wasp-admission";
/// How often pending pods are checked: a stray pod is reported within its grace plus this.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub struct StrayPods {
    cluster: Arc<SharedCluster>,
    policies: Arc<PolicyRegistry>,
    events: EventRecorder,
    metrics: AdmissionMetrics,
    /// Uids already reported, while they wait: one event per pod.
    reported: Mutex<HashSet<String>>,
}

impl StrayPods {
    pub fn new(cluster: Arc<SharedCluster>, policies: Arc<PolicyRegistry>, events: &EventRecorder, metrics: AdmissionMetrics) -> Arc<StrayPods> {
        Arc::new(StrayPods { cluster, policies, events: events.for_component(COMPONENT), metrics, reported: Mutex::new(HashSet::new()) })
    }

    /// Checks every [`CHECK_INTERVAL`] until `stop` is cancelled.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        tokio::select! {
            _ = self.cluster.wait_until_ready() => {}
            _ = stop.cancelled() => return,
        }
        while !stop.is_cancelled() {
            self.check(jiff::Timestamp::now().as_second()).await;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            }
        }
    }

    /// Counts the stray pods and reports those that waited their grace (at `now`, Unix seconds); returns how
    /// many were reported.
    pub async fn check(&self, now: i64) -> usize {
        let generation = self.policies.current();
        let known = KnownSchedulers::of(&generation.config, self.cluster.binding_schedulers());
        let grace = generation.config.admission.stray_pod_grace.as_secs() as i64;
        let mut stray = self.cluster.pending_where(|pod| !pod.terminating && !known.runs(&pod.scheduler_name));
        if !stray.is_empty() {
            // A scheduler whose pods are bound now may simply not have bound one since this host started (a gang
            // scheduler's pods wait long): not reported. Only read when some pod looks stray.
            let bound: HashSet<String> = {
                let names: HashSet<&str> = stray.iter().map(|pod| pod.scheduler_name.as_str()).collect();
                let cluster = self.cluster.read();
                cluster.bound_pods().filter(|(pod, _)| names.contains(pod.scheduler_name.as_str())).map(|(pod, _)| pod.scheduler_name.clone()).collect()
            };
            stray.retain(|pod| !bound.contains(&pod.scheduler_name));
        }
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for pod in &stray {
            *counts.entry(pod.scheduler_name.clone()).or_default() += 1;
        }
        self.metrics.stray_pods(&counts);
        let due: Vec<_> = {
            let mut reported = self.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let waiting: HashSet<&str> = stray.iter().map(|pod| pod.uid.as_str()).collect();
            reported.retain(|uid| waiting.contains(uid.as_str()));
            stray.iter().filter(|pod| now - pod.created_at >= grace && reported.insert(pod.uid.clone())).collect()
        };
        for pod in &due {
            let message = known.unknown(&pod.scheduler_name);
            tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), scheduler = %pod.scheduler_name, %message, "pod waits for a scheduler nobody runs");
            self.events.event(&ObjectRef::pod(&pod.namespace, &pod.name, &pod.uid), "Warning", "NoSuchScheduler", &message).await;
        }
        due.len()
    }
}
