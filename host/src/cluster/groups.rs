//! Pod groups: Kubernetes 1.37's gang scheduling (`scheduling.k8s.io/v1beta1`, behind the GenericWorkload gate).
//! [`PodGroups`] holds what each PodGroup asks (a gang of at least `minCount` pods placed together, or `basic`:
//! each pod on its own), whether it was placed once (its `PodGroupInitiallyScheduled` condition), and which pods
//! name which group (`spec.schedulingGroup.podGroupName`, bound or waiting). The scheduler reads it to place a
//! gang's pods together or not at all (`scheduler::gang`). Not served (a cluster with the gate off) or not
//! readable (an install whose RBAC predates it), no group is known and a pod that names one waits, saying why.

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::collections::{BTreeSet, HashMap};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The condition a scheduler sets on a PodGroup: True (reason `Scheduled`) once its pods were placed, and never
/// False again; False with `Unschedulable` or `SchedulerError` until then.
pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// A PodGroup by namespace and name (pods name their group within their namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How a group's pods are placed: `spec.schedulingPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Each pod on its own, as if it named no group.
    Basic,
    /// None of the pods is bound until `min_count` of them fit at once.
    Gang { min_count: u32 },
}

/// What the scheduler keeps of a PodGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRecord {
    pub policy: GroupPolicy,
    /// Its `status.conditions`, which a new condition is merged into.
    pub conditions: Vec<Condition>,
}

impl GroupRecord {
    /// Whether its pods were placed once: from then on, members pass one by one.
    pub fn initially_scheduled(&self) -> bool {
        self.conditions.iter().any(|condition| condition.type_ == INITIALLY_SCHEDULED && condition.status == "True")
    }

    /// The group's condition as it stands, if set.
    pub fn condition(&self) -> Option<&Condition> {
        self.conditions.iter().find(|condition| condition.type_ == INITIALLY_SCHEDULED)
    }
}

/// What the scheduler keeps of a PodGroup (`basic` when it names no gang).
pub fn group_record(source: &PodGroup) -> GroupRecord {
    let policy = match &source.spec.scheduling_policy.gang {
        // The API server validates minCount >= 1; a zero would make a gang of nothing.
        Some(gang) => GroupPolicy::Gang { min_count: gang.min_count.max(1) as u32 },
        None => GroupPolicy::Basic,
    };
    let conditions = source.status.as_ref().and_then(|status| status.conditions.clone()).unwrap_or_default();
    GroupRecord { policy, conditions }
}

/// The pod group a pod names, if any.
pub fn pod_group_of(source: &k8s_openapi::api::core::v1::Pod) -> Option<GroupKey> {
    let name = source.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.clone().filter(|name| !name.is_empty())?;
    Some(GroupKey { namespace: source.metadata.namespace.clone().unwrap_or_else(|| "default".into()), name })
}

#[derive(Default)]
pub struct PodGroups {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    groups: HashMap<GroupKey, GroupRecord>,
    /// Every pod the informer holds that names a group, by uid.
    member_of: HashMap<String, GroupKey>,
    members: HashMap<GroupKey, BTreeSet<String>>,
    /// Why PodGroups cannot be listed (not served, forbidden), while they cannot.
    unreadable: Option<String>,
}

impl PodGroups {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps a PodGroup; says whether what the scheduler decides by changed (its policy, or whether it is new).
    pub fn upsert(&self, key: GroupKey, record: GroupRecord) -> bool {
        let mut inner = self.write();
        let changed = inner.groups.get(&key).is_none_or(|known| known.policy != record.policy);
        inner.groups.insert(key, record);
        changed
    }

    pub fn remove(&self, key: &GroupKey) {
        self.write().groups.remove(key);
    }

    /// Keeps only the groups a relist found.
    pub fn retain(&self, listed: impl Fn(&GroupKey) -> bool) {
        self.write().groups.retain(|key, _| listed(key));
    }

    pub fn get(&self, key: &GroupKey) -> Option<GroupRecord> {
        self.read().groups.get(key).cloned()
    }

    /// Records the condition this host wrote, before the informer brings it back.
    pub fn note_condition(&self, key: &GroupKey, condition: Condition) {
        if let Some(record) = self.write().groups.get_mut(key) {
            record.conditions.retain(|known| known.type_ != condition.type_);
            record.conditions.push(condition);
        }
    }

    /// The pod `uid` names `group` (None: no group) as last seen; true when it newly joined that group.
    pub fn set_member(&self, uid: &str, group: Option<GroupKey>) -> bool {
        let mut inner = self.write();
        if inner.member_of.get(uid) == group.as_ref() {
            return false;
        }
        inner.forget(uid);
        let Some(group) = group else { return false };
        inner.members.entry(group.clone()).or_default().insert(uid.to_string());
        inner.member_of.insert(uid.to_string(), group);
        true
    }

    /// The pod `uid` is gone.
    pub fn forget_member(&self, uid: &str) {
        self.write().forget(uid);
    }

    pub fn group_of(&self, uid: &str) -> Option<GroupKey> {
        self.read().member_of.get(uid).cloned()
    }

    /// The uids of the pods that name `group`, bound or waiting.
    pub fn members(&self, group: &GroupKey) -> Vec<String> {
        self.read().members.get(group).map(|members| members.iter().cloned().collect()).unwrap_or_default()
    }

    pub fn set_unreadable(&self, why: Option<String>) {
        self.write().unreadable = why;
    }

    pub fn unreadable(&self) -> Option<String> {
        self.read().unreadable.clone()
    }
}

impl Inner {
    fn forget(&mut self, uid: &str) {
        if let Some(group) = self.member_of.remove(uid) {
            if let Some(members) = self.members.get_mut(&group) {
                members.remove(uid);
                if members.is_empty() {
                    self.members.remove(&group);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> GroupKey {
        GroupKey { namespace: "ml".into(), name: name.into() }
    }

    #[test]
    fn members_follow_what_each_pod_names_last() {
        let groups = PodGroups::default();
        assert!(groups.set_member("a", Some(key("train"))));
        assert!(groups.set_member("b", Some(key("train"))));
        assert!(!groups.set_member("b", Some(key("train"))), "seen again");
        assert!(!groups.set_member("c", None));
        assert_eq!(groups.members(&key("train")), ["a", "b"]);
        groups.set_member("b", Some(key("eval")));
        groups.forget_member("a");
        assert!(groups.members(&key("train")).is_empty());
        assert_eq!(groups.members(&key("eval")), ["b"]);
        assert_eq!(groups.group_of("b"), Some(key("eval")));
        assert_eq!(groups.group_of("c"), None);
    }

    #[test]
    fn a_gang_reads_its_min_count_and_whether_it_was_placed() {
        let source: PodGroup = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
            "status": {"conditions": [{"type": INITIALLY_SCHEDULED, "status": "True", "reason": "Scheduled", "message": "", "lastTransitionTime": "2026-12-07T10:00:00Z"}]},
        }))
        .unwrap();
        let record = group_record(&source);
        assert_eq!(record.policy, GroupPolicy::Gang { min_count: 3 });
        assert!(record.initially_scheduled());
        let groups = PodGroups::default();
        assert!(groups.upsert(key("train"), record.clone()), "new");
        assert!(!groups.upsert(key("train"), record), "only its status changed");
        let basic: PodGroup = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "train", "namespace": "ml"}, "spec": {"schedulingPolicy": {"basic": {}}},
        }))
        .unwrap();
        assert_eq!(group_record(&basic).policy, GroupPolicy::Basic);
        assert!(groups.upsert(key("train"), group_record(&basic)), "its policy changed");
    }
}
