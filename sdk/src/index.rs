//! Indexes of a cluster view's bound pods, kept beside the pods by [`Cluster`](crate::Cluster): pods by label
//! value, so that a selector naming a value (`app=web`) reads that app's replicas instead of every pod; and the
//! pod affinity terms of bound pods grouped by what they say, so that the symmetric checks of inter-pod affinity
//! (does an existing pod's term select the incoming one?) test each distinct term once, not once per replica.
//! With 10k bound pods of 100 apps, kube-scheduler's InterPodAffinity reads every pod per scheduling cycle; these
//! turn that into a hundred replicas and a hundred terms.

use crate::affinity::required;
use crate::types::{LabelSelector, Pod, PodAffinity, PodAffinityTerm, PodId, SelectorOperator};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which of a pod's affinity lists a term comes from, and its weight for the preferred ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TermKind {
    RequiredAffinity,
    RequiredAntiAffinity,
    PreferredAffinity(i32),
    PreferredAntiAffinity(i32),
}

/// Bound pods that carry the same term, of the same kind, in the same namespace (the term's default namespace).
#[derive(Debug, Clone)]
pub struct TermGroup {
    pub kind: TermKind,
    pub owner_namespace: String,
    pub term: PodAffinityTerm,
    pub pods: BTreeSet<PodId>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct PodIndex {
    /// label key -> value -> pods. Kept only by views that keep labels.
    by_label: HashMap<String, HashMap<String, BTreeSet<PodId>>>,
    /// Canonical text of (kind, namespace, term) -> its group. Ordered, so that sums over groups are made in the
    /// same order on every run.
    terms: BTreeMap<String, TermGroup>,
}

impl PodIndex {
    pub(crate) fn insert(&mut self, id: PodId, pod: &Pod) {
        for (key, value) in &pod.labels {
            self.by_label.entry(key.clone()).or_default().entry(value.clone()).or_default().insert(id);
        }
        for (kind, term) in terms_of(pod) {
            let group = self.terms.entry(term_key(kind, &pod.namespace, term)).or_insert_with(|| TermGroup {
                kind,
                owner_namespace: pod.namespace.clone(),
                term: term.clone(),
                pods: BTreeSet::new(),
            });
            group.pods.insert(id);
        }
    }

    pub(crate) fn remove(&mut self, id: PodId, pod: &Pod) {
        for (key, value) in &pod.labels {
            let Some(values) = self.by_label.get_mut(key) else { continue };
            if let Some(pods) = values.get_mut(value) {
                pods.remove(&id);
                if pods.is_empty() {
                    values.remove(value);
                }
            }
            if values.is_empty() {
                self.by_label.remove(key);
            }
        }
        for (kind, term) in terms_of(pod) {
            let key = term_key(kind, &pod.namespace, term);
            if let Some(group) = self.terms.get_mut(&key) {
                group.pods.remove(&id);
                if group.pods.is_empty() {
                    self.terms.remove(&key);
                }
            }
        }
    }

    /// Whether an upsert from `previous` to `next` leaves the index as it is (status updates, most of them).
    pub(crate) fn unchanged(previous: &Pod, next: &Pod) -> bool {
        previous.labels == next.labels
            && previous.namespace == next.namespace
            && previous.pod_affinity == next.pod_affinity
            && previous.pod_anti_affinity == next.pod_anti_affinity
    }

    pub(crate) fn term_groups(&self) -> impl Iterator<Item = &TermGroup> {
        self.terms.values()
    }

    /// The pods that can match `selector`, narrowed by the requirement that names the fewest pods: the pods with
    /// a `matchLabels` value or one of an `In` requirement's values. `None` when no requirement names a value
    /// (every pod is a candidate).
    pub(crate) fn candidates(&self, selector: &LabelSelector) -> Option<Vec<PodId>> {
        let pods_with = |key: &str, value: &str| self.by_label.get(key).and_then(|values| values.get(value));
        let match_labels = selector.match_labels.iter().map(|(key, value)| (key, std::slice::from_ref(value)));
        let in_values = selector
            .match_expressions
            .iter()
            .filter(|requirement| requirement.operator == SelectorOperator::In)
            .map(|requirement| (&requirement.key, requirement.values.as_slice()));
        let (key, values) = match_labels
            .chain(in_values)
            .min_by_key(|(key, values)| values.iter().map(|value| pods_with(key, value).map_or(0, BTreeSet::len)).sum::<usize>())?;
        // A pod has one value per key: the lists of distinct values are disjoint.
        Some(values.iter().filter_map(|value| pods_with(key, value)).flatten().copied().collect())
    }
}

/// Every affinity term of `pod` with its kind.
fn terms_of(pod: &Pod) -> impl Iterator<Item = (TermKind, &PodAffinityTerm)> {
    fn preferred(affinity: &Option<PodAffinity>, kind: fn(i32) -> TermKind) -> impl Iterator<Item = (TermKind, &PodAffinityTerm)> {
        affinity.iter().flat_map(|affinity| affinity.preferred.iter()).map(move |weighted| (kind(weighted.weight), &weighted.term))
    }
    fn required_of(affinity: &Option<PodAffinity>, kind: TermKind) -> impl Iterator<Item = (TermKind, &PodAffinityTerm)> {
        required(affinity).iter().map(move |term| (kind, term))
    }
    required_of(&pod.pod_affinity, TermKind::RequiredAffinity)
        .chain(required_of(&pod.pod_anti_affinity, TermKind::RequiredAntiAffinity))
        .chain(preferred(&pod.pod_affinity, TermKind::PreferredAffinity))
        .chain(preferred(&pod.pod_anti_affinity, TermKind::PreferredAntiAffinity))
}
/// Two terms are in one group exactly when this text is equal: every field, each list with its length, so no two
/// terms share a text. Written by hand rather than with `Debug`, whose formatting of the contract's records would
/// add ~15 KB to every component.
fn term_key(kind: TermKind, namespace: &str, term: &PodAffinityTerm) -> String {
    let mut key = String::new();
    let mut push = |part: &str| {
        key.push_str(part);
        key.push('\u{0}');
    };
    let (tag, weight) = match kind {
        TermKind::RequiredAffinity => ("a", 0),
        TermKind::RequiredAntiAffinity => ("n", 0),
        TermKind::PreferredAffinity(weight) => ("pa", weight),
        TermKind::PreferredAntiAffinity(weight) => ("pn", weight),
    };
    push(tag);
    push(&weight.to_string());
    push(namespace);
    push(&term.topology_key);
    push_list(&mut push, term.namespaces.iter().map(String::as_str));
    for selector in [&term.label_selector, &term.namespace_selector] {
        let Some(selector) = selector else {
            push("-");
            continue;
        };
        push_list(&mut push, selector.match_labels.iter().flat_map(|(label, value)| [label.as_str(), value.as_str()]));
        push(&selector.match_expressions.len().to_string());
        for requirement in &selector.match_expressions {
            push(&requirement.key);
            push(match requirement.operator {
                SelectorOperator::In => "in",
                SelectorOperator::NotIn => "notin",
                SelectorOperator::Exists => "exists",
                SelectorOperator::DoesNotExist => "!exists",
                SelectorOperator::Gt => "gt",
                SelectorOperator::Lt => "lt",
            });
            push_list(&mut push, requirement.values.iter().map(String::as_str));
        }
    }
    key
}

/// A list as its length, then its items.
fn push_list<'a>(push: &mut impl FnMut(&str), items: impl Iterator<Item = &'a str> + Clone) {
    push(&items.clone().count().to_string());
    for item in items {
        push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::TermKind;
    use crate::testing::{affinity_term, NodeBuilder, PodBuilder};
    use crate::types::{ClusterDelta, LabelSelector, PodId, PodPlace, SelectorOperator, SelectorRequirement};
    use crate::Cluster;

    fn requirement(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement { key: key.into(), operator, values: values.iter().map(|value| value.to_string()).collect() }
    }

    fn matching(cluster: &Cluster, selector: &LabelSelector) -> Vec<PodId> {
        let mut ids: Vec<PodId> = cluster.pods_matching(selector).map(|info| info.id).collect();
        ids.sort_unstable();
        ids
    }

    fn scanned(cluster: &Cluster, selector: &LabelSelector) -> Vec<PodId> {
        let mut ids: Vec<PodId> = cluster.pods().filter(|info| selector.matches(&info.pod.labels)).map(|info| info.id).collect();
        ids.sort_unstable();
        ids
    }

    /// Pods relabelled, moved and removed at random (seeded): every kind of selector finds through the index
    /// exactly the pods a scan finds.
    #[test]
    fn the_label_index_finds_what_a_scan_finds_through_relabels_moves_and_removals() {
        let mut cluster = Cluster::new();
        let nodes: Vec<_> = (0..4).map(|n| cluster.add_node(NodeBuilder::new(&format!("n{n}")).build())).collect();
        let (apps, tiers) = (["web", "db", "cache"], ["front", "back"]);
        let mut state: u64 = 0x5eed;
        let mut next = |below: usize| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize % below
        };
        let selectors = [
            LabelSelector { match_labels: vec![("app".into(), "web".into())], match_expressions: vec![] },
            LabelSelector { match_labels: vec![("app".into(), "db".into()), ("tier".into(), "back".into())], match_expressions: vec![] },
            LabelSelector { match_labels: vec![], match_expressions: vec![requirement("app", SelectorOperator::In, &["web", "cache"])] },
            LabelSelector { match_labels: vec![], match_expressions: vec![requirement("app", SelectorOperator::NotIn, &["web"])] },
            LabelSelector { match_labels: vec![], match_expressions: vec![requirement("tier", SelectorOperator::Exists, &[])] },
            LabelSelector { match_labels: vec![("app".into(), "none".into())], match_expressions: vec![] },
            LabelSelector { match_labels: vec![], match_expressions: vec![] },
        ];
        for step in 0..400u32 {
            let id = next(40) as PodId;
            if next(5) == 0 {
                cluster.apply(ClusterDelta::PodRemove(id));
            } else {
                let mut pod = PodBuilder::new(&format!("p{id}")).label("app", apps[next(3)]);
                if next(2) == 0 {
                    pod = pod.label("tier", tiers[next(2)]);
                }
                cluster.apply(ClusterDelta::PodUpsert((id, PodPlace::Bound(nodes[next(4)]), pod.build())));
            }
            if step % 7 == 0 {
                cluster.apply(ClusterDelta::NodeRemove(nodes[0]));
                cluster.apply(ClusterDelta::NodeUpsert((nodes[0], NodeBuilder::new("n0").build(), crate::cluster::empty_usage())));
            }
            for selector in &selectors {
                assert_eq!(matching(&cluster, selector), scanned(&cluster, selector), "step {step}, {selector:?}");
            }
        }
        assert!(!scanned(&cluster, &selectors[0]).is_empty(), "the walk leaves pods to find");
    }

    #[test]
    fn terms_share_a_key_only_when_every_field_is_equal() {
        use super::term_key;
        let base = affinity_term("zone", &[("app", "web")]);
        let key = |kind, namespace: &str, term: &crate::types::PodAffinityTerm| term_key(kind, namespace, term);
        let same = key(TermKind::RequiredAntiAffinity, "default", &base);
        assert_eq!(same, key(TermKind::RequiredAntiAffinity, "default", &base.clone()));
        let mut variants = vec![
            key(TermKind::RequiredAffinity, "default", &base),
            key(TermKind::PreferredAntiAffinity(1), "default", &base),
            key(TermKind::PreferredAntiAffinity(2), "default", &base),
            key(TermKind::RequiredAntiAffinity, "other", &base),
        ];
        let changed = |change: &dyn Fn(&mut crate::types::PodAffinityTerm)| {
            let mut term = base.clone();
            change(&mut term);
            key(TermKind::RequiredAntiAffinity, "default", &term)
        };
        variants.push(changed(&|term| term.topology_key = "host".into()));
        variants.push(changed(&|term| term.namespaces = vec!["default".into()]));
        variants.push(changed(&|term| term.label_selector = None));
        variants.push(changed(&|term| term.label_selector.as_mut().unwrap().match_labels[0].1 = "db".into()));
        variants.push(changed(&|term| term.namespace_selector = Some(LabelSelector { match_labels: vec![], match_expressions: vec![] })));
        variants.push(changed(&|term| term.label_selector.as_mut().unwrap().match_expressions.push(requirement("tier", SelectorOperator::NotIn, &["front"]))));
        variants.push(changed(&|term| term.label_selector.as_mut().unwrap().match_expressions.push(requirement("tier", SelectorOperator::In, &["front"]))));
        let count = variants.len();
        variants.push(same);
        variants.sort();
        variants.dedup();
        assert_eq!(variants.len(), count + 1, "every variant has its own key");
    }

    #[test]
    fn replicas_with_the_same_term_form_one_group_that_follows_them() {
        let mut cluster = Cluster::new();
        let node = cluster.add_node(NodeBuilder::new("n1").build());
        let replica = |name: &str| PodBuilder::new(name).label("app", "web").require_anti_affinity(affinity_term("kubernetes.io/hostname", &[("app", "web")]));
        let a = cluster.bind(replica("a").build(), node);
        let b = cluster.bind(replica("b").prefer_affinity(5, affinity_term("zone", &[("app", "db")])).build(), node);
        cluster.bind(replica("c").namespace("other").build(), node);
        let groups: Vec<_> = cluster.affinity_term_groups().map(|group| (group.kind, group.owner_namespace.clone(), group.pods.len())).collect();
        assert_eq!(groups.len(), 3, "{groups:?}");
        assert!(groups.contains(&(TermKind::RequiredAntiAffinity, "default".into(), 2)), "{groups:?}");
        assert!(groups.contains(&(TermKind::RequiredAntiAffinity, "other".into(), 1)), "another namespace is another group: {groups:?}");
        assert!(groups.contains(&(TermKind::PreferredAffinity(5), "default".into(), 1)), "{groups:?}");

        cluster.apply(ClusterDelta::PodUpsert((b, PodPlace::Bound(node), PodBuilder::new("b").label("app", "web").build())));
        cluster.apply(ClusterDelta::PodRemove(a));
        let kinds: Vec<_> = cluster.affinity_term_groups().map(|group| (group.kind, group.owner_namespace.as_str())).collect();
        assert_eq!(kinds, vec![(TermKind::RequiredAntiAffinity, "other")], "groups go with their last pod");
        cluster.apply(ClusterDelta::NodeRemove(node));
        assert_eq!(cluster.affinity_term_groups().count(), 0, "and with their node");
    }
}
