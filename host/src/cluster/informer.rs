//! Informers: kube-rs watchers on nodes, pods, namespaces, volume objects and pod groups that keep the [`SharedCluster`] current and publish what
//! changed. After every (re)list, objects the list no longer holds are removed: a pod or node deleted while the
//! watch was disconnected does not linger as phantom usage.

use super::groups::{group_record, pod_group_of, GroupKey};
use super::shared::{ClusterEvent, ScheduledCondition, SharedCluster, Synced, UnreadablePod};
use super::{convert, PodChange};
use crate::contract::types::PodPhase;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace as KubeNamespace, Node as KubeNode, PersistentVolume, PersistentVolumeClaim, Pod as KubePod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use std::collections::HashSet;
use std::sync::Arc;

/// The running informers; dropping this stops them.
pub struct Informers {
    _tasks: tokio::task::JoinSet<()>,
}

/// Starts the node, pod and namespace informers on `cluster`.
pub fn spawn(client: Client, cluster: Arc<SharedCluster>) -> Informers {
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(follow(client.clone(), cluster.clone(), "nodes", apply_node_event, |synced| synced.nodes = true, Needed::Always));
    tasks.spawn(follow(client.clone(), cluster.clone(), "namespaces", apply_namespace_event, |synced| synced.namespaces = true, Needed::Always));
    tasks.spawn(follow(client.clone(), cluster.clone(), "persistentvolumeclaims", apply_claim_event, |synced| synced.claims = true, Needed::ForClaims));
    tasks.spawn(follow(client.clone(), cluster.clone(), "persistentvolumes", apply_volume_event, |synced| synced.volumes = true, Needed::ForClaims));
    tasks.spawn(follow(client.clone(), cluster.clone(), "storageclasses", apply_class_event, |synced| synced.storage_classes = true, Needed::ForClaims));
    tasks.spawn(follow(client.clone(), cluster.clone(), "csinodes", apply_csi_node_event, |synced| synced.csi_nodes = true, Needed::ForClaims));
    tasks.spawn(follow(client.clone(), cluster.clone(), "podgroups", apply_group_event, |synced| synced.pod_groups = true, Needed::ForGroups));
    tasks.spawn(follow(client, cluster, "pods", apply_pod_event, |synced| synced.pods = true, Needed::Always));
    Informers { _tasks: tasks }
}

/// What the loops need an informer's objects for.
#[derive(Clone, Copy, PartialEq)]
enum Needed {
    /// Nothing works without them: the loops wait for the first list.
    Always,
    /// Only pods with claims: when the host may not read them (an install whose RBAC predates volume topology),
    /// the loops start without them and those pods wait, saying why.
    ForClaims,
    /// Only pods that name a pod group: when PodGroups are not served (GenericWorkload off, as in a stock 1.37
    /// cluster) or not readable, the loops start without them, and such pods wait, saying why.
    ForGroups,
}

impl Needed {
    /// The informer lists again after `why` kept it from listing (None: it listed).
    fn set_unreadable(self, cluster: &SharedCluster, kind: &'static str, why: Option<String>) {
        match self {
            Needed::Always => {}
            Needed::ForClaims => cluster.volumes.set_unreadable(kind, why),
            Needed::ForGroups => cluster.groups.set_unreadable(why),
        }
    }
}

/// Follows a watcher on every `K` until the stream ends: `apply` turns each event into cluster changes (with the
/// names listed since the last relist), which are published; `listed` marks the first full list.
async fn follow<K>(
    client: Client,
    cluster: Arc<SharedCluster>,
    kind: &'static str,
    mut apply: impl FnMut(&SharedCluster, Event<K>, &mut HashSet<String>) -> Vec<ClusterEvent>,
    listed: fn(&mut Synced),
    needed: Needed,
) where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut relisted = HashSet::new();
    let mut failing = false;
    loop {
        let next = tokio::select! {
            next = stream.try_next() => next,
            // Deferred pods are fetched and applied here, between the watch's events, never beside them.
            () = cluster.waiting_budget.readmissions_ready(), if kind == "pods" => {
                for change in readmit_deferred(&client, &cluster).await {
                    cluster.publish(change);
                }
                continue;
            }
        };
        let event = match next {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(error) => {
                let status = match &error {
                    watcher::Error::InitialListFailed(kube::Error::Api(status)) => Some(status),
                    _ => None,
                };
                // A resource this API server does not serve (PodGroups with GenericWorkload off) is said once, at
                // info: the watcher keeps trying, in case the API is turned on later.
                let not_served = needed == Needed::ForGroups && status.is_some_and(|status| status.code == 404);
                match not_served {
                    true if !failing => tracing::info!(kind, "not served by this API server; pods that name a pod group wait until it is"),
                    true => {}
                    false => {
                        tracing::warn!(kind, %error, "watch failed; retrying");
                        cluster.note_watch_error(kind, Some(error.to_string()));
                    }
                }
                failing = true;
                if let Some(status) = status.filter(|status| needed != Needed::Always && (status.code == 403 || status.code == 404)) {
                    needed.set_unreadable(&cluster, kind, Some(status.message.clone()));
                    cluster.mark_synced(listed);
                }
                continue;
            }
        };
        if std::mem::take(&mut failing) {
            cluster.note_watch_error(kind, None);
        }
        let done = matches!(event, Event::InitDone);
        for change in apply(&cluster, event, &mut relisted) {
            cluster.publish(change);
        }
        if done {
            cluster.mark_synced(listed);
            needed.set_unreadable(&cluster, kind, None);
        }
    }
}

fn apply_node_event(cluster: &SharedCluster, event: Event<KubeNode>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let mut state = cluster.write();
    match event {
        Event::Init => {
            relisted.clear();
            Vec::new()
        }
        Event::InitApply(node) | Event::Apply(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            relisted.insert(name.clone());
            match convert::node(&node) {
                Ok(node) => match state.upsert_node(node) {
                    true => vec![ClusterEvent::NodeChanged { name }],
                    false => Vec::new(),
                },
                Err(error) => {
                    tracing::warn!(node = %name, %error, "ignoring node");
                    Vec::new()
                }
            }
        }
        Event::Delete(node) => {
            let name = node.metadata.name.unwrap_or_default();
            state.remove_node(&name);
            vec![ClusterEvent::NodeRemoved { name }]
        }
        Event::InitDone => {
            let gone: Vec<String> = state.node_names().filter(|name| !relisted.contains(*name)).map(str::to_string).collect();
            gone.into_iter()
                .map(|name| {
                    state.remove_node(&name);
                    ClusterEvent::NodeRemoved { name }
                })
                .collect()
        }
    }
}

/// The volume objects' events, alike for claims, volumes and classes: `upsert` keeps what the scheduler needs of an
/// object (by its key) and says whether that changed, `remove` forgets one, `retain` keeps only those a relist found.
/// A change also resolves again what the bound pods' claims attach.
fn apply_volume_object<K: kube::Resource>(
    cluster: &SharedCluster,
    event: Event<K>,
    relisted: &mut HashSet<String>,
    key: impl Fn(&K) -> String,
    upsert: impl Fn(&K) -> bool,
    remove: impl Fn(&K),
    retain: impl Fn(&HashSet<String>),
) -> Vec<ClusterEvent> {
    let changed = match event {
        Event::Init => {
            relisted.clear();
            false
        }
        Event::InitApply(object) => {
            relisted.insert(key(&object));
            upsert(&object)
        }
        Event::Apply(object) => upsert(&object),
        Event::Delete(object) => {
            remove(&object);
            true
        }
        Event::InitDone => {
            retain(relisted);
            true
        }
    };
    if !changed {
        return Vec::new();
    }
    let mut events = cluster.refresh_attachments();
    events.push(ClusterEvent::VolumesChanged);
    events
}

/// A node's CSINode: how many volumes each driver may attach there, merged into the node's record.
fn apply_csi_node_event(cluster: &SharedCluster, event: Event<CSINode>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let mut state = cluster.write();
    let mut set = |name: String, limits: Vec<(String, u32)>| state.set_volume_limits(&name, limits).then_some(ClusterEvent::NodeChanged { name });
    match event {
        Event::Init => {
            relisted.clear();
            Vec::new()
        }
        Event::InitApply(csi_node) | Event::Apply(csi_node) => {
            let name = csi_node.metadata.name.clone().unwrap_or_default();
            relisted.insert(name.clone());
            set(name, convert::volume_limits(&csi_node)).into_iter().collect()
        }
        Event::Delete(csi_node) => set(csi_node.metadata.name.unwrap_or_default(), Vec::new()).into_iter().collect(),
        Event::InitDone => {
            let gone: Vec<String> = state.nodes_with_volume_limits().into_iter().filter(|name| !relisted.contains(name)).collect();
            gone.into_iter().filter_map(|name| state.set_volume_limits(&name, Vec::new()).then_some(ClusterEvent::NodeChanged { name })).collect()
        }
    }
}

fn apply_claim_event(cluster: &SharedCluster, event: Event<PersistentVolumeClaim>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let volumes = &cluster.volumes;
    let names = |claim: &PersistentVolumeClaim| (claim.metadata.namespace.clone().unwrap_or_default(), claim.metadata.name.clone().unwrap_or_default());
    apply_volume_object(
        cluster,
        event,
        relisted,
        |claim| {
            let (namespace, name) = names(claim);
            format!("{namespace}/{name}")
        },
        |claim| {
            let (namespace, name) = names(claim);
            volumes.upsert_claim(&namespace, &name, convert::claim(claim))
        },
        |claim| {
            let (namespace, name) = names(claim);
            volumes.remove_claim(&namespace, &name)
        },
        |listed| volumes.retain_claims(listed),
    )
}

fn apply_volume_event(cluster: &SharedCluster, event: Event<PersistentVolume>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let volumes = &cluster.volumes;
    let name = |volume: &PersistentVolume| volume.metadata.name.clone().unwrap_or_default();
    apply_volume_object(
        cluster,
        event,
        relisted,
        name,
        |volume| match convert::volume(volume) {
            Ok(converted) => volumes.upsert_volume(&name(volume), converted),
            Err(error) => {
                // Unreadable node affinity: as if the volume did not exist, so its pods wait and say why.
                tracing::warn!(volume = %name(volume), %error, "ignoring persistent volume");
                volumes.remove_volume(&name(volume));
                true
            }
        },
        |volume| volumes.remove_volume(&name(volume)),
        |listed| volumes.retain_volumes(listed),
    )
}

fn apply_class_event(cluster: &SharedCluster, event: Event<StorageClass>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let volumes = &cluster.volumes;
    let name = |class: &StorageClass| class.metadata.name.clone().unwrap_or_default();
    apply_volume_object(
        cluster,
        event,
        relisted,
        name,
        |class| volumes.upsert_class(&name(class), convert::storage_class(class)),
        |class| volumes.remove_class(&name(class)),
        |listed| volumes.retain_classes(listed),
    )
}

/// PodGroups: their policy, and the condition a scheduler set; a new group or policy may let its pods be placed.
fn apply_group_event(cluster: &SharedCluster, event: Event<PodGroup>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let key =
        |group: &PodGroup| GroupKey { namespace: group.metadata.namespace.clone().unwrap_or_default(), name: group.metadata.name.clone().unwrap_or_default() };
    let groups = &cluster.groups;
    let changed = match event {
        Event::Init => {
            relisted.clear();
            false
        }
        Event::InitApply(group) => {
            relisted.insert(key(&group).to_string());
            groups.upsert(key(&group), group_record(&group))
        }
        Event::Apply(group) => groups.upsert(key(&group), group_record(&group)),
        Event::Delete(group) => {
            groups.remove(&key(&group));
            true
        }
        Event::InitDone => {
            groups.retain(|group| relisted.contains(&group.to_string()));
            true
        }
    };
    changed.then_some(ClusterEvent::GroupsChanged).into_iter().collect()
}

/// Namespaces matter only through their labels (pod affinity's namespace selectors); no loop reacts to them.
fn apply_namespace_event(cluster: &SharedCluster, event: Event<KubeNamespace>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    let mut state = cluster.write();
    match event {
        Event::Init => relisted.clear(),
        Event::InitApply(namespace) | Event::Apply(namespace) => {
            let name = namespace.metadata.name.clone().unwrap_or_default();
            let labels = namespace.metadata.labels.unwrap_or_default().into_iter().collect();
            state.upsert_namespace(&name, labels);
            relisted.insert(name);
        }
        Event::Delete(namespace) => state.remove_namespace(namespace.metadata.name.as_deref().unwrap_or_default()),
        Event::InitDone => {
            let gone: Vec<String> = state.namespace_names().filter(|name| !relisted.contains(*name)).map(str::to_string).collect();
            for name in gone {
                state.remove_namespace(&name);
            }
        }
    }
    Vec::new()
}

fn apply_pod_event(cluster: &SharedCluster, event: Event<KubePod>, relisted: &mut HashSet<String>) -> Vec<ClusterEvent> {
    match event {
        Event::Init => {
            relisted.clear();
            Vec::new()
        }
        Event::InitApply(pod) => {
            relisted.insert(pod.metadata.uid.clone().unwrap_or_default());
            cluster.scaled_pods.observe(&pod);
            observe_pod(cluster, &pod)
        }
        Event::Apply(pod) => {
            cluster.scaled_pods.observe(&pod);
            observe_pod(cluster, &pod)
        }
        Event::Delete(pod) => {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            cluster.scaled_pods.forget(uid);
            forget_pod(cluster, uid)
        }
        Event::InitDone => {
            cluster.scaled_pods.retain_listed(relisted);
            known_pods(cluster).into_iter().filter(|uid| !relisted.contains(uid)).flat_map(|uid| forget_pod(cluster, &uid)).collect()
        }
    }
}

/// A pod that does not convert: forgotten, and if it waits for a scheduler, reported so its owner learns why.
fn unreadable(cluster: &SharedCluster, source: &KubePod, error: String) -> Vec<ClusterEvent> {
    tracing::warn!(pod = %convert::pod_key(source), %error, "cannot read pod");
    let uid = source.metadata.uid.clone().unwrap_or_default();
    let mut changes = forget_pod(cluster, &uid);
    changes.extend(told_why(source, error));
    changes
}

/// For a pod that waits for a scheduler and is not kept: the event that has its owner told why, unless its
/// condition says so already.
fn told_why(source: &KubePod, error: String) -> Option<ClusterEvent> {
    let uid = source.metadata.uid.clone().unwrap_or_default();
    let spec = source.spec.as_ref();
    let waiting = spec.is_some_and(|spec| spec.node_name.as_deref().unwrap_or("").is_empty()) && source.metadata.deletion_timestamp.is_none();
    // Said once: the condition written for it comes back as an update of the same unreadable pod.
    let said = scheduled_condition(source)
        .is_some_and(|condition| condition.status == "False" && condition.reason == "SchedulerError" && condition.message.ends_with(&error));
    (waiting && !said).then(|| {
        ClusterEvent::PodUnreadable(Arc::new(UnreadablePod {
            namespace: source.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: source.metadata.name.clone().unwrap_or_default(),
            uid,
            scheduler_name: spec.and_then(|spec| spec.scheduler_name.clone()).unwrap_or_else(|| "default-scheduler".into()),
            error,
        }))
    })
}

/// Uids of every pod the view holds, bound, failed or pending.
fn known_pods(cluster: &SharedCluster) -> Vec<String> {
    let state = cluster.read();
    let mut uids: Vec<String> = state.pod_uids().chain(state.failed_uids()).map(str::to_string).collect();
    drop(state);
    uids.extend(cluster.pending().keys().cloned());
    uids
}

fn forget_pod(cluster: &SharedCluster, uid: &str) -> Vec<ClusterEvent> {
    cluster.waiting_budget.forget(uid);
    cluster.groups.forget_member(uid);
    let mut changes = Vec::new();
    let mut state = cluster.write();
    state.forget_failed(uid);
    if state.remove_pod(uid) {
        changes.push(ClusterEvent::PodRemoved { uid: uid.to_string() });
    }
    drop(state);
    if cluster.forget_pending(uid) {
        changes.push(ClusterEvent::PendingGone { uid: uid.to_string() });
    }
    changes
}

fn observe_pod(cluster: &SharedCluster, source: &KubePod) -> Vec<ClusterEvent> {
    let pod = match convert::pod(source) {
        Ok(pod) => pod,
        Err(error) => return unreadable(cluster, source, error.to_string()),
    };
    let uid = pod.uid.clone();
    let joined = cluster.groups.set_member(&uid, pod_group_of(source));
    let node = source.spec.as_ref().and_then(|spec| spec.node_name.clone()).filter(|node| !node.is_empty());
    let finished = matches!(pod.phase, PodPhase::Succeeded | PodPhase::Failed);
    let mut changes = Vec::new();
    if joined {
        changes.push(ClusterEvent::GroupMemberAdded { uid: uid.clone() });
    }
    if node.is_some() || finished || pod.terminating {
        // It will not wait (bound by anyone, finished, going): no longer deferred either.
        cluster.waiting_budget.forget(&uid);
    }
    let waited = cluster.take_pending(&uid);
    if waited.is_some() && node.is_some() && !finished {
        // Someone bound a pod that waited: its scheduler runs (a pod created with its node named proves nothing).
        cluster.note_binding_scheduler(&pod.scheduler_name);
    }
    match node {
        // A finished pod frees its node; a failed one stays known (with its id) until deleted, for evict
        // policies to clear.
        Some(node) if finished && pod.phase == PodPhase::Failed => {
            let mut state = cluster.write();
            let was_bound = state.pod(&uid).is_some();
            state.note_failed(pod, &node, convert::pod_meta(source));
            if was_bound {
                changes.push(ClusterEvent::PodRemoved { uid: uid.clone() });
            }
        }
        Some(_) if finished => changes.extend(forget_pod(cluster, &uid)),
        Some(node) => match cluster.write().upsert_pod_with(with_attachments(cluster, pod), &node, convert::pod_meta(source)) {
            PodChange::Unchanged => {}
            PodChange::Bound => changes.push(ClusterEvent::PodBound { uid: uid.clone() }),
            PodChange::Updated { labels_changed, requests_changed } => {
                changes.push(ClusterEvent::PodUpdated { uid: uid.clone(), labels_changed, requests_changed })
            }
        },
        // A gated pod never falls through to the next arm (it is not pending), whether or not its condition says
        // so already: not one guard, as clippy would have it.
        #[allow(clippy::collapsible_match)]
        None if !pod.terminating && !finished && is_gated(source) => {
            if !says_gated(source) {
                changes.push(ClusterEvent::PodGated(Arc::new(pod)));
            }
        }
        None if !pod.terminating && !finished => {
            let cost = match super::selected::too_many_keys(&pod, cluster.read().selected_keys()) {
                Some(error) => Err((error, None)),
                None => waiting_cost(source).map_err(|error| (error, None)),
            };
            let admitted = cost.and_then(|bytes| cluster.waiting_budget.admit(&pod.namespace, &uid, bytes).map_err(|error| (error, Some(bytes))));
            if let Err((error, deferred_bytes)) = admitted {
                if let Some(waited) = waited {
                    cluster.stopped_waiting(&uid);
                    cluster.unselect_pending(&waited);
                    changes.push(ClusterEvent::PendingGone { uid: uid.clone() });
                }
                match deferred_bytes {
                    // Past its namespace's budget only: deferred, and fetched again when the namespace has room.
                    Some(bytes) => {
                        tracing::info!(pod = %convert::pod_key(source), "deferred: its namespace's waiting pods hold the host's budget for one namespace");
                        cluster.waiting_budget.defer(&pod.namespace, &pod.name, &uid, bytes);
                        changes.extend(told_why(source, error));
                    }
                    None => changes.extend(unreadable(cluster, source, error)),
                }
                return changes;
            }
            let never_preempts = source.spec.as_ref().and_then(|spec| spec.preemption_policy.as_deref()) == Some("Never");
            cluster.set_preemption_policy(&uid, never_preempts);
            cluster.set_resource_claims(&uid, convert::resource_claims(source));
            cluster.add_pending(pod.clone());
            cluster.note_scheduled_condition(&uid, scheduled_condition(source));
            cluster.set_nomination(&pod);
            changes.push(ClusterEvent::PodPending(Arc::new(pod)));
            return changes;
        }
        None => {}
    }
    if let Some(waited) = waited {
        cluster.stopped_waiting(&uid);
        cluster.unselect_pending(&waited);
        changes.insert(0, ClusterEvent::PendingGone { uid });
    }
    changes
}

/// At most this much of a waiting pod's labels, annotations (less kubectl's last-applied copy, which the host
/// drops) and scheduling constraints (affinity, tolerations, topology spread, node selector), as JSON: what the
/// host keeps of a waiting pod (its pending record, its queue entry, each policy call for it) grows with them.
/// Ordinary pods hold a few KiB; 200 valid pods of 1000 anti-affinity terms each (about 92 KiB of them) took the
/// host from 66 to 425 MB.
pub const MAX_WAITING_POD_BYTES: usize = 64 * 1024;

/// Deferred pods fetched again at a time: the watch's events wait meanwhile.
const READMISSIONS_AT_ONCE: usize = 32;
/// How long one fetch of a deferred pod may take.
const READMISSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// When fetches failed, how long before the deferred pods are offered room again.
const READMISSION_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Pods a namespace's budget deferred whose room is now reserved, fetched again (a few at a time, each within
/// [`READMISSION_TIMEOUT`]) and observed as if the watch had brought them, in the pod informer's task so they
/// never race its events. One that cannot be fetched goes back to its place and is offered room again after
/// [`READMISSION_RETRY`]; one gone or replaced (another uid) is forgotten.
async fn readmit_deferred(client: &Client, cluster: &Arc<SharedCluster>) -> Vec<ClusterEvent> {
    let mut changes = Vec::new();
    let mut failed = false;
    for (namespace, name, uid) in cluster.waiting_budget.take_readmissions(READMISSIONS_AT_ONCE) {
        let pods = Api::<KubePod>::namespaced(client.clone(), &namespace);
        match tokio::time::timeout(READMISSION_TIMEOUT, pods.get_opt(&name)).await {
            Ok(Ok(Some(pod))) if pod.metadata.uid.as_deref() == Some(uid.as_str()) => changes.extend(observe_pod(cluster, &pod)),
            Ok(Ok(_)) => cluster.waiting_budget.forget(&uid),
            outcome => {
                let error = outcome.map_or_else(|_| "timed out".to_string(), |result| result.err().map(|error| error.to_string()).unwrap_or_default());
                tracing::warn!(pod = %format!("{namespace}/{name}"), %error, "cannot fetch a deferred pod; it keeps its place");
                cluster.waiting_budget.not_fetched(&uid);
                failed = true;
            }
        }
    }
    if failed {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(READMISSION_RETRY).await;
            cluster.waiting_budget.offer_room_everywhere();
        });
    }
    changes
}

/// What the host keeps of `pod` while it waits, in bytes of its labels, annotations and constraints as JSON; Err
/// with the reason past [`MAX_WAITING_POD_BYTES`]. Measured by writing them out, stopping at the bound: a huge pod
/// costs no more.
fn waiting_cost(pod: &KubePod) -> Result<usize, String> {
    /// Counts bytes written, and refuses once past the bound.
    struct Bounded(usize);
    impl std::io::Write for Bounded {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            match self.0 > MAX_WAITING_POD_BYTES {
                true => Err(std::io::Error::other("over the bound")),
                false => Ok(bytes.len()),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let metadata = &pod.metadata;
    let texts = metadata.labels.iter().flatten().chain(metadata.annotations.iter().flatten().filter(|(key, _)| *key != convert::LAST_APPLIED));
    let mut written = Bounded(texts.map(|(key, value)| key.len() + value.len()).sum());
    let spec = pod.spec.as_ref();
    let constraints = spec.map(|spec| (&spec.affinity, &spec.tolerations, &spec.topology_spread_constraints, &spec.node_selector));
    let within = written.0 <= MAX_WAITING_POD_BYTES && serde_json::to_writer(&mut written, &constraints).is_ok();
    match within {
        true => Ok(written.0),
        false => Err(format!(
            "its labels, annotations and scheduling constraints (affinity, tolerations, topology spread, node selector) take more than {} KiB; the host keeps at most that much of a waiting pod",
            MAX_WAITING_POD_BYTES / 1024
        )),
    }
}

fn with_attachments(cluster: &SharedCluster, mut pod: crate::contract::types::Pod) -> crate::contract::types::Pod {
    cluster.volumes.attach(&mut pod);
    pod
}

/// Whether the pod has `spec.schedulingGates`: kube-scheduler does not attempt it until the last is removed.
fn is_gated(pod: &KubePod) -> bool {
    pod.spec.as_ref().and_then(|spec| spec.scheduling_gates.as_ref()).is_some_and(|gates| !gates.is_empty())
}

/// Whether the pod's status already says `PodScheduled=False` for its gates (so saying it again would only
/// loop: the status change comes back as an update).
fn says_gated(pod: &KubePod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == "PodScheduled" && condition.reason.as_deref() == Some(SCHEDULING_GATED))
}

/// The pod's `PodScheduled` condition, if its status has one.
fn scheduled_condition(pod: &KubePod) -> Option<ScheduledCondition> {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    let condition = conditions.into_iter().flatten().find(|condition| condition.type_ == "PodScheduled")?;
    Some(ScheduledCondition {
        status: condition.status.clone(),
        reason: condition.reason.clone().unwrap_or_default(),
        message: condition.message.clone().unwrap_or_default(),
        last_transition_time: condition.last_transition_time.as_ref().map(|time| time.0.to_string()),
    })
}

/// kube-scheduler's reason for a pod held by its scheduling gates.
pub const SCHEDULING_GATED: &str = "SchedulingGated";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, ready: bool, labels: serde_json::Value) -> KubePod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "d", "uid": "u1", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    #[test]
    fn room_this_host_nominated_survives_an_update_written_before_the_nomination() {
        let cluster = SharedCluster::default();
        let pending = pod(None, false, json!({"app": "vip"}));
        observe_pod(&cluster, &pending);
        // Preemption holds room on n1 before its victims go and before status.nominatedNodeName is written.
        cluster.nominate("u1", Some("n1"));
        assert!(cluster.nominations().contains_key("n1"));
        // The pod's own PodScheduled=False comes back as an update without a nominated node.
        observe_pod(&cluster, &pending);
        assert!(cluster.nominations().contains_key("n1"), "the room made for it is still held");
        // Bound, it no longer holds any room.
        observe_pod(&cluster, &pod(Some("n2"), true, json!({"app": "vip"})));
        assert!(cluster.nominations().is_empty());
        // A nomination the API server states replaces this host's.
        let other = pod(None, false, json!({"app": "other"}));
        let mut other_source = other.clone();
        other_source.metadata.uid = Some("u2".into());
        observe_pod(&cluster, &other_source);
        other_source.status.as_mut().unwrap().nominated_node_name = Some("n3".into());
        observe_pod(&cluster, &other_source);
        assert!(cluster.nominations().contains_key("n3"));
    }

    #[test]
    fn a_pods_life_reads_as_pending_bound_updated_and_removed() {
        let cluster = SharedCluster::default();
        let labels = json!({"app": "web"});
        let events = observe_pod(&cluster, &pod(None, false, labels.clone()));
        assert!(matches!(events.as_slice(), [ClusterEvent::PodPending(pod)] if pod.uid == "u1"), "{events:?}");
        assert_eq!(cluster.pending_pods().len(), 1);

        let events = observe_pod(&cluster, &pod(Some("n"), false, labels.clone()));
        assert_eq!(events, [ClusterEvent::PendingGone { uid: "u1".into() }, ClusterEvent::PodBound { uid: "u1".into() }]);
        assert!(cluster.pending_pods().is_empty());

        let events = observe_pod(&cluster, &pod(Some("n"), true, labels.clone()));
        assert_eq!(events, [ClusterEvent::PodUpdated { uid: "u1".into(), labels_changed: false, requests_changed: false }], "readiness");
        assert_eq!(observe_pod(&cluster, &pod(Some("n"), true, labels)), [], "nothing changed");
        let events = observe_pod(&cluster, &pod(Some("n"), true, json!({"app": "web", "tier": "front"})));
        assert_eq!(events, [ClusterEvent::PodUpdated { uid: "u1".into(), labels_changed: true, requests_changed: false }]);

        assert_eq!(known_pods(&cluster), ["u1"]);
        assert_eq!(forget_pod(&cluster, "u1"), [ClusterEvent::PodRemoved { uid: "u1".into() }]);
        assert!(cluster.read().pod("u1").is_none());
    }
}
