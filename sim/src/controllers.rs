//! What a cluster does without kubelets (like kwok): bound pods start and become Ready after a delay, terminating
//! pods go away after their grace period, Deployments keep a ReplicaSet per template, ReplicaSets and
//! StatefulSets keep their pod count, PodDisruptionBudget status stays current, and claims are bound to volumes
//! and provisioned (`volumes`).
//!
//! Event driven: changes mark objects dirty, a short tick reconciles what is dirty, and a periodic full pass
//! catches anything missed (or a burst that overflowed the event buffer).
//!
//! The controllers create through the API's own create path, as kube-controller-manager's do: admission webhooks
//! see their ReplicaSets and pods with the controller's service account as the user, and a refused create becomes
//! a Warning event on the owner (`FailedCreate`), counted on one event while it repeats, as the event recorder does.

use crate::auth::User;
use crate::error::ApiError;
use crate::pdb;
use crate::resources::{self, ResourceType};
use crate::store::{name_of, namespace_of, now_rfc3339, EventKind, Store};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletSettings {
    /// From binding to Running and Ready.
    #[serde(with = "humantime_serde")]
    pub ready_delay: Duration,
    /// Longest a terminating pod stays (its grace period, capped by this).
    #[serde(with = "humantime_serde")]
    pub termination_delay: Duration,
}

impl Default for KubeletSettings {
    fn default() -> Self {
        KubeletSettings { ready_delay: Duration::from_millis(200), termination_delay: Duration::from_millis(500) }
    }
}

const TICK: Duration = Duration::from_millis(25);
const FULL_PASS: Duration = Duration::from_secs(5);

fn apps(plural: &str) -> &'static ResourceType {
    resources::find("apps", "v1", plural).expect("apps resources are served")
}

fn pdbs() -> &'static ResourceType {
    resources::find("policy", "v1", "poddisruptionbudgets").expect("served")
}

/// Work to do on the next tick.
#[derive(Default)]
struct Dirty {
    workloads: BTreeSet<(&'static str, String, String)>,
    pdb_namespaces: BTreeSet<String>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        self.workloads.is_empty() && self.pdb_namespaces.is_empty()
    }
}

fn controller_of(object: &Value) -> Option<(&str, &str)> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|owner| owner["controller"] == true)
        .and_then(|owner| Some((owner["kind"].as_str()?, owner["name"].as_str()?)))
}

/// The simulated kubelets: their settings, and each node's InternalIP (a pod's `hostIP`), kept so that starting a
/// pod does not parse its node again (a tenth of the simulator's work in a burst of 50k pods).
struct Kubelet {
    settings: KubeletSettings,
    host_ips: std::sync::Mutex<HashMap<String, String>>,
}

impl Kubelet {
    fn host_ip(&self, store: &Store, node: &str) -> String {
        if let Some(address) = self.host_ips.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(node) {
            return address.clone();
        }
        let Some(address) = store.get(resources::nodes(), None, node).ok().and_then(|node| {
            let addresses = node.pointer("/status/addresses")?.as_array()?.clone();
            addresses.into_iter().find(|address| address["type"] == "InternalIP").and_then(|address| address["address"].as_str().map(str::to_string))
        }) else {
            return "192.0.2.1".into();
        };
        self.host_ips.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(node.to_string(), address.clone());
        address
    }

    /// A node changed or went away: its address is read again when a pod next starts there.
    fn forget(&self, node: &str) {
        self.host_ips.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(node);
    }
}

pub fn spawn(store: Arc<Store>, settings: KubeletSettings) -> tokio::task::JoinHandle<()> {
    let mut events = store.subscribe();
    let kubelet = Arc::new(Kubelet { settings, host_ips: Default::default() });
    tokio::spawn(async move {
        let mut dirty = Dirty::default();
        full_pass(&store, &mut dirty, &kubelet);
        let mut tick = tokio::time::interval(TICK);
        let mut full = tokio::time::interval(FULL_PASS);
        loop {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => observe(&store, &event, &mut dirty, &kubelet),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "controller fell behind; full pass");
                        full_pass(&store, &mut dirty, &kubelet);
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick(), if !dirty.is_empty() => reconcile(&store, std::mem::take(&mut dirty)).await,
                _ = full.tick() => full_pass(&store, &mut dirty, &kubelet),
            }
        }
    })
}

fn full_pass(store: &Arc<Store>, dirty: &mut Dirty, kubelet: &Arc<Kubelet>) {
    // Node events missed when the stream lagged never invalidated their addresses.
    kubelet.host_ips.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
    for plural in ["deployments", "replicasets", "statefulsets"] {
        let resource = apps(plural);
        for object in store.all(resource) {
            dirty.workloads.insert((resource.plural, namespace_of(&object).to_string(), name_of(&object).to_string()));
        }
    }
    for pdb in store.all(pdbs()) {
        dirty.pdb_namespaces.insert(namespace_of(&pdb).to_string());
    }
    for claim in store.all(crate::volumes::claims()) {
        let _ = crate::volumes::reconcile_claim(store, &claim);
    }
    // Only pods the kubelet acts on (bound and Pending, or terminating) are parsed; the text test is loose (it may
    // let through a pod run_kubelet then skips), never strict.
    let needs_kubelet = |text: &str| text.contains("\"deletionTimestamp\"") || (text.contains("\"nodeName\"") && text.contains("\"Pending\""));
    store.each(resources::pods(), needs_kubelet, |pod| run_kubelet(store, pod, kubelet));
}

fn observe(store: &Arc<Store>, event: &crate::store::Event, dirty: &mut Dirty, kubelet: &Arc<Kubelet>) {
    let object = &event.object;
    let namespace = namespace_of(object).to_string();
    match (event.resource.group, event.resource.plural) {
        ("", "pods") => {
            if let Some((kind, owner)) = controller_of(object) {
                let plural = match kind {
                    "ReplicaSet" => "replicasets",
                    "StatefulSet" => "statefulsets",
                    _ => return,
                };
                dirty.workloads.insert((plural, namespace.clone(), owner.to_string()));
            }
            dirty.pdb_namespaces.insert(namespace);
            if event.kind != EventKind::Deleted {
                run_kubelet(store, object, kubelet);
            }
        }
        ("apps", plural @ ("deployments" | "replicasets" | "statefulsets")) => {
            dirty.workloads.insert((plural, namespace.clone(), name_of(object).to_string()));
            if let Some(("Deployment", owner)) = controller_of(object) {
                dirty.workloads.insert(("deployments", namespace, owner.to_string()));
            }
        }
        ("policy", "poddisruptionbudgets") => {
            dirty.pdb_namespaces.insert(namespace);
        }
        ("", "nodes") => kubelet.forget(name_of(object)),
        ("", "persistentvolumeclaims") if event.kind == EventKind::Deleted => crate::volumes::claim_deleted(store, object),
        ("", "persistentvolumeclaims") => {
            if let Err(error) = crate::volumes::reconcile_claim(store, object) {
                tracing::warn!(namespace, claim = name_of(object), %error, "claim not bound");
            }
        }
        ("", "persistentvolumes") if event.kind != EventKind::Deleted => {
            if let Err(error) = crate::volumes::reconcile_volume(store, object) {
                tracing::warn!(volume = name_of(object), %error, "volume not bound");
            }
        }
        _ => {}
    }
}

/// Starts bound pods and finishes terminating ones, after the configured delays.
fn run_kubelet(store: &Arc<Store>, pod: &Value, kubelet: &Arc<Kubelet>) {
    let settings = &kubelet.settings;
    let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|node| !node.is_empty());
    let (namespace, name) = (namespace_of(pod).to_string(), name_of(pod).to_string());
    // Timers act on this pod only, never on a pod created later under the same name (every event of a
    // terminating pod, and every full pass, starts another timer).
    let uid = pod.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let store = store.clone();
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        let grace = pod.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_u64).unwrap_or(30);
        let delay = Duration::from_secs(grace).min(settings.termination_delay);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            // Gone already, or another pod of that name now, is fine.
            let _ = store.remove_if(resources::pods(), Some(&namespace), &name, |current| current["metadata"]["uid"] == uid);
        });
        return;
    }
    let pending = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Pending");
    if !(bound && pending) {
        return;
    }
    let delay = settings.ready_delay;
    let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string();
    let kubelet = kubelet.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let host_ip = kubelet.host_ip(&store, &node);
        let started = store.mutate(resources::pods(), Some(&namespace), &name, |pod| {
            if pod["metadata"]["uid"] != uid
                || pod.pointer("/status/phase").and_then(Value::as_str) != Some("Pending")
                || pod.pointer("/metadata/deletionTimestamp").is_some()
            {
                return Ok(());
            }
            let now = now_rfc3339();
            let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now});
            let statuses: Vec<Value> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|container| {
                    // name, image, imageID, ready and restartCount are required (the Python client refuses nulls).
                    let image = container["image"].as_str().unwrap_or("");
                    json!({
                        "name": container["name"], "image": image, "imageID": format!("wasp-sim://{image}"),
                        "containerID": format!("wasp-sim://{}", uuid::Uuid::new_v4().simple()),
                        "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": now}},
                    })
                })
                .collect();
            pod["status"] = json!({
                "phase": "Running", "startTime": now, "podIP": format!("10.{}.{}.{}", fastrand::u8(..), fastrand::u8(..), fastrand::u8(1..)),
                "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "qosClass": pod.pointer("/status/qosClass").cloned().unwrap_or(json!("BestEffort")),
                "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("ContainersReady"), condition("Ready"), condition("PodScheduled")],
                "containerStatuses": statuses,
            });
            Ok(())
        });
        if let Err(error) = started {
            tracing::trace!(%error, "pod vanished before it started");
        }
    });
}

async fn reconcile(store: &Store, dirty: Dirty) {
    for (plural, namespace, name) in dirty.workloads {
        let result = match plural {
            "deployments" => reconcile_deployment(store, &namespace, &name).await,
            "replicasets" => reconcile_replica_set(store, &namespace, &name).await,
            _ => reconcile_stateful_set(store, &namespace, &name).await,
        };
        match result {
            Ok(()) => {}
            Err(error) if error.code == 404 => {}
            Err(error) => tracing::warn!(kind = plural, namespace, name, %error, "reconcile failed"),
        }
    }
    for namespace in dirty.pdb_namespaces {
        let budgets = store.all_in(pdbs(), &namespace);
        if budgets.is_empty() {
            continue;
        }
        let pods = store.all_in(resources::pods(), &namespace);
        for pdb in budgets {
            let budget = pdb::budget(&pdb, pods.iter().map(|pod| pod.as_ref()), |pod| pdb::controller_scale(store, pod));
            let status = pdb::status_of(&budget, &pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)));
            let _ = store.mutate(pdbs(), Some(&namespace), name_of(&pdb), |pdb| {
                pdb["status"] = status;
                Ok(())
            });
        }
    }
}

fn template_hash(template: &Value) -> String {
    let mut hasher = DefaultHasher::new();
    template.to_string().hash(&mut hasher);
    format!("{:x}", hasher.finish())[..10].to_string()
}

fn owner_reference(kind: &str, owner: &Value) -> Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name_of(owner), "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
}

fn replicas(object: &Value) -> i64 {
    object.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
}

fn uid_of(object: &Value) -> &str {
    object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

fn set_status(store: &Store, resource: &'static ResourceType, owner: &Value, status: Value) -> Result<(), ApiError> {
    store.mutate(resource, Some(namespace_of(owner)), name_of(owner), |object| {
        object["status"] = status;
        Ok(())
    })?;
    Ok(())
}

/// Creates `object` as `controller` (a kube-controller-manager controller's name) through the API's create path.
async fn create_as(store: &Store, controller: &str, resource: &'static ResourceType, namespace: &str, object: Value) -> Result<(), ApiError> {
    let user = User::ServiceAccount { namespace: "kube-system".into(), name: controller.into() };
    let request = crate::api::Creation { resource, namespace: Some(namespace), user: &user, dry_run: false };
    crate::api::create(store, &request, object).await.map(|_| ())
}

/// A Warning event on `owner` from `controller`, as kube-controller-manager's event recorder writes it: the same
/// reason and message again only count up (`count`, `lastTimestamp`) on one event.
fn warn(store: &Store, controller: &str, owner: &Value, reason: &str, message: &str) {
    let events = resources::find("", "v1", "events").expect("served");
    let namespace = namespace_of(owner);
    let mut hasher = DefaultHasher::new();
    (uid_of(owner), reason, message).hash(&mut hasher);
    let name = format!("{}.{:016x}", name_of(owner), hasher.finish());
    let now = now_rfc3339();
    let counted = store.mutate(events, Some(namespace), &name, |event| {
        event["count"] = json!(event["count"].as_i64().unwrap_or(1) + 1);
        event["lastTimestamp"] = json!(now);
        Ok(())
    });
    if counted.is_ok() {
        return;
    }
    let event = json!({
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": name_of(owner), "namespace": namespace, "uid": uid_of(owner)},
        "reason": reason, "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": now, "lastTimestamp": now, "source": {"component": controller},
        "reportingComponent": controller, "reportingInstance": "",
    });
    if let Err(error) = store.create(events, Some(namespace), event) {
        tracing::debug!(%error, reason, "event not recorded");
    }
}

/// A create the API refused (an admission webhook's denial, most often) is reported on the owner and ends this
/// reconcile; the next full pass tries again. Anything else is the caller's error.
fn refused(
    store: &Store,
    controller: &str,
    owner: &Value,
    reason: &str,
    message: impl FnOnce(&ApiError) -> String,
    result: Result<(), ApiError>,
) -> Result<bool, ApiError> {
    match result {
        Ok(()) => Ok(false),
        Err(error) if (400..500).contains(&error.code) && error.code != 404 && error.code != 409 => {
            warn(store, controller, owner, reason, &message(&error));
            Ok(true)
        }
        Err(error) => Err(error),
    }
}

async fn reconcile_deployment(store: &Store, namespace: &str, name: &str) -> Result<(), ApiError> {
    let deployment = store.get(apps("deployments"), Some(namespace), name)?;
    let hash = template_hash(&deployment["spec"]["template"]);
    let owned = store.owned(apps("replicasets"), uid_of(&deployment));
    let current_name = format!("{name}-{hash}");
    let wanted = replicas(&deployment);
    if !owned.iter().any(|rs| name_of(rs) == current_name) {
        let mut template = deployment["spec"]["template"].clone();
        template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        let mut selector = deployment["spec"]["selector"].clone();
        selector["matchLabels"]["pod-template-hash"] = json!(hash);
        let replica_set = json!({
            "metadata": {"name": current_name, "namespace": namespace, "labels": template["metadata"]["labels"], "ownerReferences": owner_reference("Deployment", &deployment)},
            "spec": {"replicas": wanted, "selector": selector, "template": template},
        });
        let created = create_as(store, "deployment-controller", apps("replicasets"), namespace, replica_set).await;
        let message = |error: &ApiError| format!("Failed to create new replica set {current_name:?}: {}", error.message);
        if refused(store, "deployment-controller", &deployment, "ReplicaSetCreateError", message, created)? {
            return Ok(());
        }
    }
    for replica_set in &owned {
        let target = if name_of(replica_set) == current_name { wanted } else { 0 };
        if replicas(replica_set) != target {
            store.mutate(apps("replicasets"), Some(namespace), name_of(replica_set), |rs| {
                rs["spec"]["replicas"] = json!(target);
                Ok(())
            })?;
        }
    }
    let sum = |field: &str| owned.iter().map(|rs| rs.pointer(&format!("/status/{field}")).and_then(Value::as_i64).unwrap_or(0)).sum::<i64>();
    let updated = owned.iter().find(|rs| name_of(rs) == current_name).and_then(|rs| rs.pointer("/status/replicas").and_then(Value::as_i64)).unwrap_or(0);
    let status = json!({
        "observedGeneration": deployment["metadata"]["generation"], "replicas": sum("replicas"), "updatedReplicas": updated,
        "readyReplicas": sum("readyReplicas"), "availableReplicas": sum("availableReplicas"),
        "unavailableReplicas": (wanted - sum("availableReplicas")).max(0),
    });
    set_status(store, apps("deployments"), &deployment, status)
}

/// Pods to remove first when scaling down: unscheduled, then not ready, then the newest.
fn deletion_order(pod: &Value) -> (bool, bool, std::cmp::Reverse<String>) {
    let scheduled = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|node| !node.is_empty());
    let created = pod.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or("").to_string();
    (scheduled, pdb::is_ready(pod), std::cmp::Reverse(created))
}

fn pod_from_template(owner_kind: &str, owner: &Value, name: Option<String>) -> Value {
    let template = &owner["spec"]["template"];
    let mut metadata = template.get("metadata").cloned().unwrap_or(json!({}));
    match name {
        Some(name) => metadata["name"] = json!(name),
        None => metadata["generateName"] = json!(format!("{}-", name_of(owner))),
    }
    metadata["namespace"] = json!(namespace_of(owner));
    metadata["ownerReferences"] = owner_reference(owner_kind, owner);
    json!({"metadata": metadata, "spec": template["spec"]})
}

fn workload_status(owner: &Value, pods: usize, ready: usize) -> Value {
    json!({
        "observedGeneration": owner["metadata"]["generation"], "replicas": pods, "fullyLabeledReplicas": pods,
        "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": pods,
    })
}

/// Keeps the pod count from the owner index's counts: no pod is looked at unless some must go.
async fn reconcile_replica_set(store: &Store, namespace: &str, name: &str) -> Result<(), ApiError> {
    let replica_set = store.get(apps("replicasets"), Some(namespace), name)?;
    let counts = store.owned_counts(resources::pods(), uid_of(&replica_set));
    let wanted = replicas(&replica_set).max(0) as usize;
    let (mut live, mut ready) = (counts.live, counts.ready);
    if live < wanted {
        for _ in live..wanted {
            let created = create_as(store, "replicaset-controller", resources::pods(), namespace, pod_from_template("ReplicaSet", &replica_set, None)).await;
            let message = |error: &ApiError| format!("Error creating: {}", error.message);
            if refused(store, "replicaset-controller", &replica_set, "FailedCreate", message, created)? {
                break;
            }
        }
    } else if live > wanted {
        let mut pods: Vec<Arc<Value>> =
            store.owned(resources::pods(), uid_of(&replica_set)).into_iter().filter(|pod| pod.pointer("/metadata/deletionTimestamp").is_none()).collect();
        pods.sort_by_key(|pod| deletion_order(pod));
        for pod in pods.drain(..pods.len().saturating_sub(wanted)) {
            let _ = crate::subresources::delete(store, resources::pods(), Some(namespace), name_of(&pod), None);
        }
        live = pods.len();
        ready = pods.iter().filter(|pod| pdb::is_ready(pod)).count();
    }
    set_status(store, apps("replicasets"), &replica_set, workload_status(&replica_set, live, ready))
}

/// A StatefulSet pod's claims from `volumeClaimTemplates`, as the StatefulSet controller makes them: one claim per
/// template and ordinal (`<template>-<set>-<ordinal>`), created if missing and kept when the pod goes (the default
/// retention policy), and the pod's volume of the template's name pointed at it.
fn claim_volumes(store: &Store, stateful_set: &Value, ordinal: usize, pod: &mut Value) -> Result<(), ApiError> {
    let namespace = namespace_of(stateful_set).to_string();
    for template in stateful_set.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten() {
        let volume = name_of(template).to_string();
        let claim_name = format!("{volume}-{}-{ordinal}", name_of(stateful_set));
        if store.get(crate::volumes::claims(), Some(&namespace), &claim_name).is_err() {
            let mut claim = json!({"metadata": template.get("metadata").cloned().unwrap_or(json!({})), "spec": template["spec"]});
            claim["metadata"]["name"] = json!(claim_name);
            claim["metadata"]["namespace"] = json!(namespace);
            claim["metadata"]["labels"] = stateful_set.pointer("/spec/selector/matchLabels").cloned().unwrap_or(json!({}));
            match store.create(crate::volumes::claims(), Some(&namespace), claim) {
                Ok(_) => {}
                Err(error) if error.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
        let volumes = &mut pod["spec"]["volumes"];
        if !volumes.is_array() {
            *volumes = json!([]);
        }
        let list = volumes.as_array_mut().expect("an array");
        list.retain(|existing| existing["name"] != volume.as_str());
        list.push(json!({"name": volume, "persistentVolumeClaim": {"claimName": claim_name}}));
    }
    Ok(())
}

async fn reconcile_stateful_set(store: &Store, namespace: &str, name: &str) -> Result<(), ApiError> {
    let stateful_set = store.get(apps("statefulsets"), Some(namespace), name)?;
    let pods = store.owned(resources::pods(), uid_of(&stateful_set));
    let wanted = replicas(&stateful_set).max(0) as usize;
    let ordinal = |pod: &Value| name_of(pod).rsplit_once('-').and_then(|(_, index)| index.parse::<usize>().ok());
    for index in 0..wanted {
        let pod_name = format!("{name}-{index}");
        if !pods.iter().any(|pod| name_of(pod) == pod_name) {
            let mut pod = pod_from_template("StatefulSet", &stateful_set, Some(pod_name.clone()));
            claim_volumes(store, &stateful_set, index, &mut pod)?;
            let created = create_as(store, "statefulset-controller", resources::pods(), namespace, pod).await;
            let message = |error: &ApiError| format!("create Pod {pod_name} in StatefulSet {name} failed error: {}", error.message);
            // Ordered creation: a later ordinal waits for this one.
            if refused(store, "statefulset-controller", &stateful_set, "FailedCreate", message, created)? {
                break;
            }
        }
    }
    for pod in pods.iter().filter(|pod| ordinal(pod).is_some_and(|index| index >= wanted)) {
        let _ = crate::subresources::delete(store, resources::pods(), Some(namespace), name_of(pod), None);
    }
    let live: Vec<&Arc<Value>> = pods.iter().filter(|pod| pod.pointer("/metadata/deletionTimestamp").is_none()).collect();
    let ready = live.iter().filter(|pod| pdb::is_ready(pod)).count();
    set_status(store, apps("statefulsets"), &stateful_set, workload_status(&stateful_set, live.len(), ready))
}
