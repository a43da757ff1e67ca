//! Which pods a strategy looks at, in the descheduler's argument shape: `namespaces: {include, exclude}` and a
//! Kubernetes `labelSelector`, for policies' settings.

use crate::types::{LabelSelector, Pod, SelectorOperator, SelectorRequirement};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Namespaces a strategy acts in: only `include` when it is set, else all but `exclude` (not both).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Namespaces {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Namespaces {
    /// The descheduler's rule: at most one of the two lists.
    pub fn validate(&self) -> Result<(), String> {
        if !self.include.is_empty() && !self.exclude.is_empty() {
            return Err("namespaces: only one of include and exclude can be set".into());
        }
        Ok(())
    }

    pub fn contains(&self, namespace: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|name| name == namespace)) && !self.exclude.iter().any(|name| name == namespace)
    }
}

/// A label selector as written in Kubernetes objects (`matchLabels` map, `matchExpressions` with
/// `In`/`NotIn`/`Exists`/`DoesNotExist`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Expression>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expression {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

impl Selector {
    /// The contract's selector, or an error naming the expression that is wrong; `field` prefixes it.
    pub fn compile(&self, field: &str) -> Result<LabelSelector, String> {
        let match_expressions = self
            .match_expressions
            .iter()
            .enumerate()
            .map(|(index, expression)| {
                let operator = match expression.operator.as_str() {
                    "In" => SelectorOperator::In,
                    "NotIn" => SelectorOperator::NotIn,
                    "Exists" => SelectorOperator::Exists,
                    "DoesNotExist" => SelectorOperator::DoesNotExist,
                    other => return Err(format!("{field}.matchExpressions[{index}].operator: {other:?} is not In, NotIn, Exists or DoesNotExist")),
                };
                Ok(SelectorRequirement { key: expression.key.clone(), operator, values: expression.values.clone() })
            })
            .collect::<Result<_, String>>()?;
        let match_labels = self.match_labels.iter().map(|(key, value)| (key.clone(), value.clone())).collect();
        Ok(LabelSelector { match_labels, match_expressions })
    }
}

/// The pods a strategy considers: in its namespaces and matching its selector.
#[derive(Debug, Clone, Default)]
pub struct PodFilter {
    namespaces: Namespaces,
    selector: Option<LabelSelector>,
}

impl PodFilter {
    pub fn new(namespaces: &Namespaces, selector: Option<&Selector>) -> Result<PodFilter, String> {
        namespaces.validate()?;
        let selector = selector.map(|selector| selector.compile("labelSelector")).transpose()?;
        Ok(PodFilter { namespaces: namespaces.clone(), selector })
    }

    /// The label keys the selector names: what a policy whose view keeps `Selected` labels answers as its
    /// [`Policy::label_keys`](crate::Policy::label_keys).
    pub fn label_keys(&self) -> Vec<String> {
        let Some(selector) = &self.selector else { return Vec::new() };
        let named = selector.match_labels.iter().map(|(key, _)| key).chain(selector.match_expressions.iter().map(|requirement| &requirement.key));
        let mut keys: Vec<String> = named.cloned().collect();
        keys.sort();
        keys.dedup();
        keys
    }

    pub fn admits(&self, pod: &Pod) -> bool {
        self.namespaces.contains(&pod.namespace) && self.selector.as_ref().is_none_or(|selector| selector.matches(&pod.labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;

    #[test]
    fn namespaces_and_selector_filter_pods() {
        let selector: Selector =
            serde_json::from_str(r#"{"matchLabels": {"tier": "web"}, "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}"#).unwrap();
        let filter = PodFilter::new(&Namespaces { include: vec!["shop".into()], exclude: vec![] }, Some(&selector)).unwrap();
        assert!(filter.admits(&PodBuilder::new("a").namespace("shop").label("tier", "web").build()));
        assert!(!filter.admits(&PodBuilder::new("b").namespace("shop").label("tier", "web").label("canary", "1").build()));
        assert!(!filter.admits(&PodBuilder::new("c").namespace("other").label("tier", "web").build()));
        assert_eq!(filter.label_keys(), ["canary", "tier"]);
        assert!(PodFilter::new(&Namespaces::default(), None).unwrap().label_keys().is_empty());
        let both = Namespaces { include: vec!["a".into()], exclude: vec!["b".into()] };
        assert_eq!(PodFilter::new(&both, None).unwrap_err(), "namespaces: only one of include and exclude can be set");
        let bad: Selector = serde_json::from_str(r#"{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}"#).unwrap();
        assert!(PodFilter::new(&Namespaces::default(), Some(&bad)).unwrap_err().contains("labelSelector.matchExpressions[0].operator"));
    }
}
