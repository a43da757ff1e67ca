//! Kubernetes matching rules: taints against tolerations, node selectors and affinity terms, label selectors.

use crate::types::{LabelSelector, Node, NodeSelectorTerm, Pod, SelectorOperator, SelectorRequirement, Taint, TaintEffect, Toleration, TolerationOperator};

/// The value of a label in a `(key, value)` list.
pub fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    // The length first, here: most keys differ in it, and that spares a call per label.
    labels.iter().find(|(name, _)| name.len() == key.len() && same_text(name, key)).map(|(_, value)| value.as_str())
}

/// String equality eight bytes at a time. In the sandbox `==` on strings calls the guest libc's `memcmp`, which
/// compares byte by byte: label lookups by key (`kubernetes.io/hostname`, 22 bytes, for every candidate node and
/// term) made it the costliest function of inter-pod-affinity's guest code. The last bytes are compared as one
/// word too (overlapping the one before), so no call to `memcmp` is left for a tail.
pub fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    if std::ptr::eq(a, b) {
        return true;
    }
    let word = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    if a.len() < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    (0..a.len() / 8).all(|index| word(a, index * 8) == word(b, index * 8)) && word(a, a.len() - 8) == word(b, b.len() - 8)
}

impl Toleration {
    /// Kubernetes' `Toleration.ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|effect| effect != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            // An empty key with Exists matches every taint.
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint with one of `effects` that no toleration tolerates.
#[inline]
pub fn first_untolerated_taint<'a>(taints: &'a [Taint], tolerations: &[Toleration], effects: &[TaintEffect]) -> Option<&'a Taint> {
    taints.iter().filter(|taint| effects.contains(&taint.effect)).find(|taint| !tolerations.iter().any(|toleration| toleration.tolerates(taint)))
}

impl SelectorRequirement {
    /// Whether a label (or field) value satisfies the requirement; `None` when the key is absent.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let contains = |value: &str| self.values.iter().any(|candidate| same_text(candidate, value));
        match self.operator {
            SelectorOperator::In => value.is_some_and(contains),
            SelectorOperator::NotIn => !value.is_some_and(contains),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(actual), Some(bound)) =
                    (value.and_then(|value| value.parse::<i64>().ok()), self.values.first().and_then(|bound| bound.parse::<i64>().ok()))
                else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl NodeSelectorTerm {
    /// All expressions and fields match. A term with neither matches no node, as in Kubernetes.
    pub fn matches(&self, node: &Node) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions.iter().all(|requirement| requirement.matches(label(&node.labels, &requirement.key)))
            && self.match_fields.iter().all(|requirement| {
                let field = (requirement.key == "metadata.name").then_some(node.name.as_str());
                requirement.matches(field)
            })
    }
}

impl LabelSelector {
    /// An empty selector matches everything.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.match_labels.iter().all(|(key, value)| label(labels, key).is_some_and(|found| same_text(found, value)))
            && self.match_expressions.iter().all(|requirement| requirement.matches(label(labels, &requirement.key)))
    }
}

impl Pod {
    /// `spec.nodeSelector` and the required node affinity terms (ORed), as kube-scheduler's NodeAffinity filter.
    pub fn matches_node_selector_and_required_affinity(&self, node: &Node) -> bool {
        let selector_matches = self.node_selector.iter().all(|(key, value)| label(&node.labels, key) == Some(value.as_str()));
        let required = self.node_affinity.as_ref().and_then(|affinity| affinity.required.as_ref());
        selector_matches && required.is_none_or(|terms| terms.iter().any(|term| term.matches(node)))
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        label(&self.labels, key)
    }

    /// Whether the scheduler may place the pod on `node` at all, resources aside: the node is schedulable (or
    /// the pod tolerates that), matches the pod's selector and required affinity, and has no `NoSchedule` or
    /// `NoExecute` taint the pod does not tolerate.
    pub fn may_run_on(&self, node: &Node) -> bool {
        let cordon = Taint { key: "node.kubernetes.io/unschedulable".into(), value: String::new(), effect: TaintEffect::NoSchedule };
        let cordon_tolerated = self.tolerations.iter().any(|toleration| toleration.tolerates(&cordon));
        (!node.unschedulable || cordon_tolerated)
            && self.matches_node_selector_and_required_affinity(node)
            && first_untolerated_taint(&node.taints, &self.tolerations, &[TaintEffect::NoSchedule, TaintEffect::NoExecute]).is_none()
    }
}

impl Node {
    pub fn label(&self, key: &str) -> Option<&str> {
        label(&self.labels, key)
    }

    /// The status of a condition (`Ready`, `MemoryPressure`, ...), if the node reports it.
    pub fn condition(&self, kind: &str) -> Option<&str> {
        self.conditions.iter().find(|condition| condition.kind == kind).map(|condition| condition.status.as_str())
    }

    pub fn is_ready(&self) -> bool {
        self.condition("Ready") == Some("True")
    }

    /// Whether the scheduler places new pods here at all: not cordoned, and no `NoSchedule` or `NoExecute`
    /// taint (a pod may tolerate one, but most do not).
    pub fn may_take_new_pods(&self) -> bool {
        !self.unschedulable && !self.taints.iter().any(|taint| matches!(taint.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    fn requirement(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement { key: key.into(), operator, values: values.iter().map(|v| v.to_string()).collect() }
    }

    #[test]
    fn same_text_is_string_equality() {
        for (a, b) in [
            ("", ""),
            ("a", "a"),
            ("kubernetes.io/hostname", "kubernetes.io/hostname"),
            ("kubernetes.io/hostnamf", "kubernetes.io/hostname"),
            ("12345678", "12345679"),
            ("ab", "abc"),
            ("zone", "Zone"),
        ] {
            assert_eq!(same_text(a, b), a == b, "{a:?} {b:?}");
        }
        // Every length around the word size, with one byte changed at every position.
        let text = "abcdefghijklmnopqrstuvwxyz";
        for length in 0..=text.len() {
            let a = &text[..length];
            // A copy elsewhere in memory: equal text compared by its words, not found equal by the pointer.
            let copy = a.to_string();
            assert!(same_text(a, &copy));
            for at in 0..length {
                let mut b = a.as_bytes().to_vec();
                b[at] = b'-';
                assert!(!same_text(a, std::str::from_utf8(&b).unwrap()), "{a:?} changed at {at}");
            }
        }
    }

    #[test]
    fn toleration_rules() {
        let taint = Taint { key: "dedicated".into(), value: "gpu".into(), effect: TaintEffect::NoSchedule };
        let equal = |value: &str, effect| Toleration { key: "dedicated".into(), operator: TolerationOperator::Equal, value: value.into(), effect };
        assert!(equal("gpu", None).tolerates(&taint));
        assert!(equal("gpu", Some(TaintEffect::NoSchedule)).tolerates(&taint));
        assert!(!equal("gpu", Some(TaintEffect::NoExecute)).tolerates(&taint));
        assert!(!equal("cpu", None).tolerates(&taint));
        let everything = Toleration { key: String::new(), operator: TolerationOperator::Exists, value: String::new(), effect: None };
        assert!(everything.tolerates(&taint));
    }

    #[test]
    fn selector_operators() {
        assert!(requirement("zone", SelectorOperator::In, &["a", "b"]).matches(Some("a")));
        assert!(!requirement("zone", SelectorOperator::In, &["a"]).matches(None));
        assert!(requirement("zone", SelectorOperator::NotIn, &["a"]).matches(None));
        assert!(!requirement("zone", SelectorOperator::NotIn, &["a"]).matches(Some("a")));
        assert!(requirement("zone", SelectorOperator::Exists, &[]).matches(Some("")));
        assert!(requirement("zone", SelectorOperator::DoesNotExist, &[]).matches(None));
        assert!(requirement("cores", SelectorOperator::Gt, &["4"]).matches(Some("8")));
        assert!(!requirement("cores", SelectorOperator::Gt, &["4"]).matches(Some("4")));
        assert!(requirement("cores", SelectorOperator::Lt, &["4"]).matches(Some("3")));
        assert!(!requirement("cores", SelectorOperator::Lt, &["x"]).matches(Some("3")), "non-integer bound");
    }

    #[test]
    fn empty_node_selector_term_matches_nothing() {
        let node = NodeBuilder::new("n1").label("zone", "a").build();
        assert!(!NodeSelectorTerm { match_expressions: vec![], match_fields: vec![] }.matches(&node));
        let by_name = NodeSelectorTerm { match_expressions: vec![], match_fields: vec![requirement("metadata.name", SelectorOperator::In, &["n1"])] };
        assert!(by_name.matches(&node));
    }

    #[test]
    fn node_selector_and_required_terms() {
        let node = NodeBuilder::new("n1").label("zone", "a").label("disk", "ssd").build();
        assert!(PodBuilder::new("p").node_selector("zone", "a").build().matches_node_selector_and_required_affinity(&node));
        assert!(!PodBuilder::new("p").node_selector("zone", "b").build().matches_node_selector_and_required_affinity(&node));
        let pod = PodBuilder::new("p")
            .require_node_term(vec![requirement("zone", SelectorOperator::In, &["b"])])
            .require_node_term(vec![requirement("disk", SelectorOperator::In, &["ssd"])])
            .build();
        assert!(pod.matches_node_selector_and_required_affinity(&node), "terms are ORed");
    }
}
