//! [`SelectedKeys`]: the label keys that some pod's label selectors name. A view that keeps `selected` labels
//! (contract 0.6: topology spread, pod affinity) receives only these of each pod's labels, so the labels a tenant
//! puts on its own pods for its own use (kilobytes of them, if it likes) cost no guest memory: a selector can only
//! match keys it names. The keys of the pods bound and of the pods waiting for a scheduler both count, since the
//! pod a filter is about is a waiting one.

use crate::contract::types::{LabelSelector, Pod};
use std::collections::HashMap;

/// Label keys one pod's selectors may name: kube-scheduler users name a handful (`app`, `pod-template-hash`).
/// A pod that waits and names more is not scheduled (it is told why); a bound one has its first keys selected.
pub const MAX_NAMED_KEYS_PER_POD: usize = 64;
/// Label keys all pods' selectors may name together before a waiting pod that would name another is refused:
/// each selected key makes every view that keeps `selected` labels hold that label of every pod carrying it.
pub const MAX_SELECTED_KEYS: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct SelectedKeys {
    /// How many pods name each key in their selectors (a pod counts once per key); a key at zero is gone.
    counts: HashMap<String, u32>,
    /// The keys each waiting pod names, by uid: only pods that name some.
    pending: HashMap<String, Vec<String>>,
    /// A what-if copy's keys only grow: what it removes (a victim, a pod it moves) its original still selects,
    /// and an instance that comes back from the fork by its way back must hold what the original selects.
    only_grows: bool,
}

impl SelectedKeys {
    pub fn contains(&self, key: &str) -> bool {
        self.counts.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// A what-if copy: the counts, without the waiting pods (only the live state hears of those), that only grow.
    pub fn fork(&self) -> SelectedKeys {
        SelectedKeys { counts: self.counts.clone(), pending: HashMap::new(), only_grows: true }
    }

    /// Counts a pod's keys once more; answers those that no selector named before.
    pub fn add(&mut self, keys: &[String]) -> Vec<String> {
        let mut new = Vec::new();
        for key in keys {
            let count = self.counts.entry(key.clone()).or_insert(0);
            *count += 1;
            if *count == 1 {
                new.push(key.clone());
            }
        }
        new
    }

    pub fn remove(&mut self, keys: &[String]) {
        if self.only_grows {
            return;
        }
        for key in keys {
            if let Some(count) = self.counts.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    self.counts.remove(key);
                }
            }
        }
    }

    /// Records the keys a waiting pod names (replacing what it named before: a key both name never drops to zero
    /// in between, which would send every pod carrying it again); answers those newly selected.
    pub fn add_pending(&mut self, uid: &str, keys: Vec<String>) -> Vec<String> {
        if keys.is_empty() {
            self.remove_pending(uid);
            return Vec::new();
        }
        let new = self.add(&keys);
        if let Some(before) = self.pending.insert(uid.to_string(), keys) {
            self.remove(&before);
        }
        new
    }

    pub fn remove_pending(&mut self, uid: &str) {
        if let Some(keys) = self.pending.remove(uid) {
            self.remove(&keys);
        }
    }
}

/// The label keys `pod`'s selectors name, the first [`MAX_NAMED_KEYS_PER_POD`] of them (see [`all_named_keys`]).
pub fn named_keys(pod: &Pod) -> Vec<String> {
    let mut keys = all_named_keys(pod);
    keys.truncate(MAX_NAMED_KEYS_PER_POD);
    keys
}

/// Why a waiting pod's selectors name too many label keys, with `selected` the keys selected now; None when
/// they fit: the pod is told, rather than every view made to hold thousands of tenants' labels (a policy that
/// runs out of memory following them fails every pod).
pub fn too_many_keys(pod: &Pod, selected: &SelectedKeys) -> Option<String> {
    let keys = all_named_keys(pod);
    if keys.len() > MAX_NAMED_KEYS_PER_POD {
        return Some(format!(
            "its topology spread constraints and pod (anti-)affinity terms name {} label keys; at most {MAX_NAMED_KEYS_PER_POD} per pod",
            keys.len()
        ));
    }
    let new = keys.iter().filter(|key| !selected.contains(key)).count();
    (new > 0 && selected.len() + new > MAX_SELECTED_KEYS).then(|| {
        format!(
            "the cluster's pods already name {} label keys in their selectors and this pod would add {new}; at most {MAX_SELECTED_KEYS} together",
            selected.len()
        )
    })
}

/// The label keys `pod`'s selectors name: its topology spread constraints' selectors and `matchLabelKeys`, and
/// its pod affinity and anti-affinity terms' selectors (which already hold their `matchLabelKeys`). Sorted, each
/// once; empty (and no allocation) for a pod with none.
fn all_named_keys(pod: &Pod) -> Vec<String> {
    let mut keys = Vec::new();
    let mut selector = |selector: &Option<LabelSelector>| {
        if let Some(selector) = selector {
            keys.extend(selector.match_labels.iter().map(|(key, _)| key.clone()));
            keys.extend(selector.match_expressions.iter().map(|requirement| requirement.key.clone()));
        }
    };
    for constraint in &pod.topology_spread {
        selector(&constraint.label_selector);
    }
    for terms in [&pod.pod_affinity, &pod.pod_anti_affinity].into_iter().flatten() {
        terms.required.iter().for_each(|term| selector(&term.label_selector));
        terms.preferred.iter().for_each(|weighted| selector(&weighted.term.label_selector));
    }
    keys.extend(pod.topology_spread.iter().flat_map(|constraint| constraint.match_label_keys.iter().cloned()));
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::convert;

    fn pod(spec: serde_json::Value) -> Pod {
        let source = serde_json::json!({"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": spec});
        convert::pod(&serde_json::from_value(source).unwrap()).unwrap()
    }

    #[test]
    fn a_pod_names_the_keys_of_its_spread_constraints_and_affinity_terms() {
        let term = |key: &str| serde_json::json!({"labelSelector": {"matchExpressions": [{"key": key, "operator": "Exists"}]}, "topologyKey": "zone"});
        let named = named_keys(&pod(serde_json::json!({
            "containers": [],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"]}],
            "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("tier")]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term("app")}]},
            },
        })));
        assert_eq!(named, ["app", "pod-template-hash", "tier"]);
        assert!(named_keys(&pod(serde_json::json!({"containers": []}))).is_empty());
    }

    #[test]
    fn a_pod_naming_too_many_keys_or_too_many_new_ones_is_refused() {
        let spread = |keys: std::ops::Range<usize>| {
            let expressions: Vec<serde_json::Value> = keys.map(|key| serde_json::json!({"key": format!("k{key:04}"), "operator": "Exists"})).collect();
            pod(serde_json::json!({"containers": [], "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchExpressions": expressions}}]}))
        };
        let mut selected = SelectedKeys::default();
        assert_eq!(too_many_keys(&spread(0..64), &selected), None);
        let refused = too_many_keys(&spread(0..2500), &selected).unwrap();
        assert_eq!(
            refused,
            "its topology spread constraints and pod (anti)affinity terms name 2500 label keys; at most 64 per pod".replace("(anti)", "(anti-)")
        );
        assert_eq!(named_keys(&spread(0..2500)).len(), MAX_NAMED_KEYS_PER_POD, "a bound pod's first keys");
        for start in (0..MAX_SELECTED_KEYS).step_by(64) {
            selected.add(&named_keys(&spread(start..start + 64)));
        }
        assert_eq!(selected.len(), MAX_SELECTED_KEYS);
        assert_eq!(too_many_keys(&spread(0..10), &selected), None, "keys already selected add nothing");
        let full = too_many_keys(&spread(MAX_SELECTED_KEYS..MAX_SELECTED_KEYS + 1), &selected).unwrap();
        assert!(full.starts_with("the cluster's pods already name 4096 label keys in their selectors and this pod would add 1"), "{full}");
    }

    #[test]
    fn keys_are_counted_until_no_pod_names_them() {
        let keys = |names: &[&str]| names.iter().map(|name| name.to_string()).collect::<Vec<_>>();
        let mut selected = SelectedKeys::default();
        assert_eq!(selected.add(&keys(&["app"])), ["app"]);
        assert!(selected.add(&keys(&["app"])).is_empty(), "already selected");
        assert_eq!(selected.add_pending("waiting", keys(&["app", "tier"])), ["tier"]);
        assert!(selected.add_pending("waiting", keys(&["app", "tier"])).is_empty(), "an update of the waiting pod selects nothing anew");
        selected.remove(&keys(&["app"]));
        selected.remove(&keys(&["app"]));
        assert!(selected.contains("app"), "the waiting pod still names it");
        let mut fork = selected.fork();
        selected.remove_pending("waiting");
        assert!(selected.is_empty());
        fork.remove(&keys(&["app", "tier"]));
        assert!(fork.contains("app") && fork.contains("tier"), "a fork keeps its own counts, and they only grow");
    }
}
