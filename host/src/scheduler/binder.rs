//! What the scheduler writes to the API server: bindings, the node chosen for claims that wait for it,
//! `Scheduled`/`FailedScheduling` events (under the profile's name, as kube-scheduler reports per profile) and the
//! `PodScheduled=False` condition, and a PodGroup's `PodGroupInitiallyScheduled`.

use crate::cluster::groups::{GroupKey, INITIALLY_SCHEDULED};
use crate::cluster::{ScheduledCondition, SharedCluster};
use crate::contract::types::Pod;
use crate::kube::{ApiClient, EventRecorder, ObjectRef};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod as KubePod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use std::sync::Arc;

pub struct Binder {
    api: ApiClient,
    events: EventRecorder,
    /// Where the pods' `PodScheduled` conditions are known, so an unchanged one is not written again.
    cluster: Arc<SharedCluster>,
}

fn object_of(pod: &Pod) -> ObjectRef {
    ObjectRef::pod(&pod.namespace, &pod.name, &pod.uid)
}

impl Binder {
    pub fn new(api: ApiClient, events: EventRecorder, cluster: Arc<SharedCluster>) -> Binder {
        Binder { api, events, cluster }
    }

    pub async fn bind(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let _permit = self.api.permit().await;
        let pods: Api<KubePod> = Api::namespaced(self.api.client.clone(), &pod.namespace);
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        pods.create_subresource::<_, serde_json::Value>("binding", &pod.name, &PostParams::default(), &binding).await.map(drop)
    }

    /// Tells the provisioner of a `WaitForFirstConsumer` claim which node its pod goes to, as kube-scheduler's
    /// VolumeBinding PreBind does: the claim's `volume.kubernetes.io/selected-node` annotation.
    pub async fn select_node_for_claim(&self, namespace: &str, claim: &str, node: &str) -> Result<(), kube::Error> {
        let _permit = self.api.permit().await;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.api.client.clone(), namespace);
        let annotation = json!({"metadata": {"annotations": {crate::cluster::volumes::SELECTED_NODE: node}}});
        claims.patch(claim, &PatchParams::default(), &Patch::Merge(annotation)).await.map(drop)
    }

    /// Gives an existing volume to a claim, as kube-scheduler's volume binder does: its `claimRef` names the
    /// claim, and the PersistentVolume controller completes the binding. Conditional on the `resource_version` the
    /// volume was chosen at: a volume someone else changed meanwhile is not taken from them (a 409).
    pub async fn claim_volume(&self, volume: &str, resource_version: &str, namespace: &str, claim: &str) -> Result<(), kube::Error> {
        let _permit = self.api.permit().await;
        let volumes: Api<PersistentVolume> = Api::all(self.api.client.clone());
        let claim_ref = json!({
            "metadata": {"resourceVersion": resource_version},
            "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace, "name": claim}},
        });
        volumes.patch(volume, &PatchParams::default(), &Patch::Merge(claim_ref)).await.map(drop)
    }

    pub async fn scheduled(&self, pod: &Pod, node: &str, profile: &str) {
        let message = format!("Successfully assigned {}/{} to {node}", pod.namespace, pod.name);
        self.events.for_component(profile).event(&object_of(pod), "Normal", "Scheduled", &message).await;
    }

    /// The Warning event and the condition kubectl shows for a pod that does not fit.
    pub async fn unschedulable(&self, pod: &Pod, message: &str, profile: &str) {
        self.not_scheduled(&object_of(pod), "Unschedulable", message, profile).await;
    }

    /// `PodScheduled=False` for a pod held by its scheduling gates, as kube-scheduler says it (no event: nothing
    /// failed).
    pub async fn gated(&self, pod: &Pod) {
        let message = "Scheduling is blocked due to non-empty scheduling gates";
        self.set_not_scheduled(&object_of(pod), crate::cluster::informer::SCHEDULING_GATED, message).await;
    }

    /// A `FailedScheduling` Warning event and `PodScheduled=False` with `reason` (kube-scheduler's
    /// `Unschedulable`, or `SchedulerError` when the pod cannot be considered at all).
    pub async fn not_scheduled(&self, pod: &ObjectRef, reason: &str, message: &str, profile: &str) {
        self.events.for_component(profile).event(pod, "Warning", "FailedScheduling", message).await;
        self.set_not_scheduled(pod, reason, message).await;
    }

    /// Sets a PodGroup's `PodGroupInitiallyScheduled` condition (a strategic merge: its other conditions stay),
    /// with `since` as its transition time when the status stays what it was.
    pub async fn group_condition(&self, group: &GroupKey, status: &str, reason: &str, message: &str, since: Option<Time>) {
        let condition = Condition {
            type_: INITIALLY_SCHEDULED.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: since.unwrap_or_else(|| Time(crate::clock::now())),
            observed_generation: None,
        };
        let groups: Api<PodGroup> = Api::namespaced(self.api.client.clone(), &group.namespace);
        let _permit = self.api.permit().await;
        let patch = json!({"status": {"conditions": [&condition]}});
        match groups.patch_status(&group.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => self.cluster.groups.note_condition(group, condition),
            Err(error) => tracing::warn!(group = %group, %error, "could not set the PodGroup's {INITIALLY_SCHEDULED} condition"),
        }
    }

    /// Writes `PodScheduled=False` only when it changes, keeping the time of the last transition while the
    /// status stays False (see [`ScheduledCondition`]).
    async fn set_not_scheduled(&self, pod: &ObjectRef, reason: &str, message: &str) {
        let since = match self.cluster.scheduled_condition(&pod.uid) {
            Some(seen) if seen.status == "False" && seen.reason == reason && seen.message == message => return,
            Some(seen) if seen.status == "False" => seen.last_transition_time.unwrap_or_else(crate::clock::now_rfc3339),
            _ => crate::clock::now_rfc3339(),
        };
        let pods: Api<KubePod> = Api::namespaced(self.api.client.clone(), &pod.namespace);
        let _permit = self.api.permit().await;
        let condition = json!({"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message, "lastTransitionTime": since,
        }]}});
        match pods.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(condition)).await {
            // Known at once: the next attempt may fail before the informer brings the pod's new status.
            Ok(_) => {
                let written = ScheduledCondition { status: "False".into(), reason: reason.into(), message: message.into(), last_transition_time: Some(since) };
                self.cluster.note_scheduled_condition(&pod.uid, Some(written));
            }
            Err(error) => tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), %error, "could not set PodScheduled=False"),
        }
    }
}
