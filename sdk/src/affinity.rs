//! Pod affinity terms as kube-scheduler reads them: which pods a term selects, and in which topology domain.

use crate::cluster::{Cluster, NodeInfo, PodInfo};
use crate::index::TermGroup;
use crate::matching::{label, same_text};
use crate::types::{Pod, PodAffinity, PodAffinityTerm};

impl PodAffinityTerm {
    /// Whether the term of a pod in `owner_namespace` selects `target` (kube-scheduler's `AffinityTerm.Matches`):
    /// `target` is in one of the term's namespaces (the owner's own when the term names none and has no
    /// namespace selector) or in a namespace whose labels, `target_namespace_labels`, the namespace selector
    /// matches; and its labels match the label selector (a term without one selects no pod).
    pub fn selects(&self, owner_namespace: &str, target: &Pod, target_namespace_labels: &[(String, String)]) -> bool {
        let in_namespace = if self.namespaces.is_empty() && self.namespace_selector.is_none() {
            same_text(&target.namespace, owner_namespace)
        } else {
            self.namespaces.iter().any(|namespace| same_text(namespace, &target.namespace))
                || self.namespace_selector.as_ref().is_some_and(|selector| selector.matches(target_namespace_labels))
        };
        in_namespace && self.label_selector.as_ref().is_some_and(|selector| selector.matches(&target.labels))
    }

    /// The node's domain for this term: its value of the topology key, if it has the label.
    pub fn domain<'a>(&self, node: &'a NodeInfo) -> Option<&'a str> {
        label(&node.node.labels, &self.topology_key)
    }
}

/// The required terms of an affinity, if any.
pub fn required(affinity: &Option<PodAffinity>) -> &[PodAffinityTerm] {
    affinity.as_ref().map_or(&[], |affinity| affinity.required.as_slice())
}

impl Cluster {
    /// Whether the term of `owner` selects `target`, with `target`'s namespace labels from the view.
    pub fn term_selects(&self, term: &PodAffinityTerm, owner: &Pod, target: &Pod) -> bool {
        self.selects_in_view(term, &owner.namespace, target)
    }

    /// Whether a group's term selects `target`, as it does for each pod of the group.
    pub fn group_selects(&self, group: &TermGroup, target: &Pod) -> bool {
        self.selects_in_view(&group.term, &group.owner_namespace, target)
    }

    /// The bound pods that the term of `owner` selects; through the label index when the term's selector names a
    /// value.
    pub fn pods_selected_by<'a>(&'a self, term: &'a PodAffinityTerm, owner: &'a Pod) -> impl Iterator<Item = &'a PodInfo> + 'a {
        term.label_selector.iter().flat_map(move |selector| self.pods_matching(selector)).filter(move |bound| self.term_selects(term, owner, &bound.pod))
    }

    fn selects_in_view(&self, term: &PodAffinityTerm, owner_namespace: &str, target: &Pod) -> bool {
        // Read per pod and term, over many bound pods: look the namespace up only when a selector needs it.
        let namespace_labels = if term.namespace_selector.is_some() { self.namespace_labels(&target.namespace) } else { &[] };
        term.selects(owner_namespace, target, namespace_labels)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{affinity_term, PodBuilder};
    use crate::types::LabelSelector;

    #[test]
    fn namespaces_default_to_the_owners_and_selectors_widen_them() {
        let mut term = affinity_term("zone", &[("app", "db")]);
        let db_here = PodBuilder::new("db").label("app", "db").build();
        let db_there = PodBuilder::new("db").namespace("other").label("app", "db").build();
        assert!(term.selects("default", &db_here, &[]));
        assert!(!term.selects("default", &db_there, &[]), "no namespaces and no selector: the owner's only");
        term.namespaces = vec!["other".into()];
        assert!(term.selects("default", &db_there, &[]));
        assert!(!term.selects("default", &db_here, &[]), "namespaces listed: only those");
        term.namespaces.clear();
        term.namespace_selector = Some(LabelSelector { match_labels: vec![("team".into(), "a".into())], match_expressions: vec![] });
        assert!(term.selects("default", &db_there, &[("team".into(), "a".into())]));
        assert!(!term.selects("default", &db_there, &[("team".into(), "b".into())]));
        term.namespace_selector = Some(LabelSelector { match_labels: vec![], match_expressions: vec![] });
        assert!(term.selects("default", &db_there, &[]), "an empty namespace selector matches every namespace");
        term.label_selector = None;
        assert!(!term.selects("default", &db_there, &[]), "no label selector selects no pod");
    }
}
