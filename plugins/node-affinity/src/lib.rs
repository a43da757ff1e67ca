//! `node-affinity`: kube-scheduler's NodeAffinity. The filter requires `spec.nodeSelector` and the required node
//! affinity terms (ORed; expressions and fields ANDed within a term); the score sums the weights of the matching
//! preferred terms, normalized so the best node gets 100. `addedAffinity` applies to every pod, as in
//! NodeAffinityArgs.

use serde::{Deserialize, Serialize};
use wasp_sdk::types::{NodeSelectorTerm, Pod, SelectorOperator, SelectorRequirement};
use wasp_sdk::{Cluster, Filter, NodeFacts, NodeInfo, Normalization, Policy, Score, Verdict};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// Affinity added to every pod this policy sees.
    pub added_affinity: Option<AddedAffinity>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AddedAffinity {
    /// ORed node selector terms every pod must also match.
    pub required: Vec<TermSettings>,
    pub preferred: Vec<WeightedTermSettings>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TermSettings {
    pub match_expressions: Vec<RequirementSettings>,
    pub match_fields: Vec<RequirementSettings>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequirementSettings {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedTermSettings {
    pub weight: i32,
    pub preference: TermSettings,
}

pub struct NodeAffinity {
    added_required: Option<Vec<NodeSelectorTerm>>,
    added_preferred: Vec<(i32, NodeSelectorTerm)>,
}

fn requirement(field: &str, settings: &RequirementSettings) -> Result<SelectorRequirement, String> {
    let operator = match settings.operator.as_str() {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt,
        "Lt" => SelectorOperator::Lt,
        other => return Err(format!("{field}.operator: unknown operator {other:?}")),
    };
    let values = &settings.values;
    match operator {
        SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => {
            return Err(format!("{field}.values: must not be empty for {}", settings.operator))
        }
        SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => {
            return Err(format!("{field}.values: must be empty for {}", settings.operator))
        }
        SelectorOperator::Gt | SelectorOperator::Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            return Err(format!("{field}.values: {} needs exactly one integer", settings.operator))
        }
        _ => {}
    }
    Ok(SelectorRequirement { key: settings.key.clone(), operator, values: values.clone() })
}

fn term(field: &str, settings: &TermSettings) -> Result<NodeSelectorTerm, String> {
    let convert = |name: &str, list: &[RequirementSettings]| {
        list.iter().enumerate().map(|(index, item)| requirement(&format!("{field}.{name}[{index}]"), item)).collect::<Result<Vec<_>, _>>()
    };
    Ok(NodeSelectorTerm {
        match_expressions: convert("matchExpressions", &settings.match_expressions)?,
        match_fields: convert("matchFields", &settings.match_fields)?,
    })
}

impl Policy for NodeAffinity {
    type Settings = Settings;
    const NAME: &'static str = "node-affinity";
    const NODE_FACTS: NodeFacts = NodeFacts { labels: true, ..NodeFacts::NONE };
    const SETTINGS_DOC: &'static str = "addedAffinity.required: node selector terms (ORed) every pod must match\n\
        addedAffinity.preferred: [{weight 1-100, preference: term}] added to every pod's preferences";

    fn new(settings: Settings) -> Result<Self, String> {
        let added = settings.added_affinity.unwrap_or_default();
        let added_required = if added.required.is_empty() {
            None
        } else {
            let terms = added.required.iter().enumerate().map(|(index, item)| term(&format!("addedAffinity.required[{index}]"), item));
            Some(terms.collect::<Result<Vec<_>, _>>()?)
        };
        let added_preferred = added
            .preferred
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let field = format!("addedAffinity.preferred[{index}]");
                if !(1..=100).contains(&item.weight) {
                    return Err(format!("{field}.weight: {} is outside 1..100", item.weight));
                }
                Ok((item.weight, term(&format!("{field}.preference"), &item.preference)?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(NodeAffinity { added_required, added_preferred })
    }
}

impl Filter for NodeAffinity {
    fn filter(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {
        let added = self.added_required.as_ref().is_none_or(|terms| terms.iter().any(|term| term.matches(&node.node)));
        if added && pod.matches_node_selector_and_required_affinity(&node.node) {
            Verdict::Pass
        } else {
            Verdict::reject("node(s) didn't match Pod's node affinity/selector")
        }
    }
}

impl Score for NodeAffinity {
    fn score(&self, pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        let pod_terms = pod.node_affinity.iter().flat_map(|affinity| affinity.preferred.iter().map(|p| (p.weight, &p.term)));
        let added_terms = self.added_preferred.iter().map(|(weight, term)| (*weight, term));
        pod_terms.chain(added_terms).filter(|(_, term)| term.matches(&node.node)).map(|(weight, _)| weight as i64).sum()
    }

    fn normalization(&self) -> Normalization {
        Normalization::MaxTo100
    }
}

wasp_sdk::export_policy!(NodeAffinity);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    fn expression(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement { key: key.into(), operator, values: values.iter().map(|v| v.to_string()).collect() }
    }

    fn zones() -> (Cluster, Vec<u32>) {
        let mut cluster = Cluster::for_policy::<NodeAffinity>();
        let ids = ["a", "b", "c"]
            .iter()
            .map(|zone| cluster.add_node(NodeBuilder::new(&format!("n-{zone}")).label("zone", zone).label("cores", "8").build()))
            .collect();
        (cluster, ids)
    }

    #[test]
    fn selector_and_required_terms_filter() {
        let (cluster, ids) = zones();
        let policy = build::<NodeAffinity>("{}").unwrap();
        let pod = PodBuilder::new("p").require_node_term(vec![expression("zone", SelectorOperator::In, &["a", "b"])]).node_selector("cores", "8").build();
        let result = policy.filter_all(&pod, &cluster, &ids);
        assert_eq!(result.verdicts, vec![0, 0, 1]);
        assert_eq!(result.rejections, vec![vec!["node(s) didn't match Pod's node affinity/selector".to_string()]]);
        let pod = PodBuilder::new("p").require_node_term(vec![expression("cores", SelectorOperator::Gt, &["16"])]).build();
        assert_eq!(policy.filter_all(&pod, &cluster, &ids).verdicts, vec![1, 1, 1]);
    }

    #[test]
    fn preferred_weights_are_summed_and_normalized() {
        let (cluster, ids) = zones();
        let policy = build::<NodeAffinity>("{}").unwrap();
        let pod = PodBuilder::new("p")
            .prefer_node_term(20, vec![expression("zone", SelectorOperator::In, &["a"])])
            .prefer_node_term(80, vec![expression("zone", SelectorOperator::NotIn, &["a"])])
            .prefer_node_term(20, vec![expression("zone", SelectorOperator::In, &["c"])])
            .build();
        assert_eq!(policy.score_all(&pod, &cluster, &ids), vec![20, 80, 100]);
    }

    #[test]
    fn added_affinity_applies_to_every_pod() {
        let (cluster, ids) = zones();
        let policy = build::<NodeAffinity>(
            r#"{"addedAffinity": {"required": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["c"]}]}],
                "preferred": [{"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}"#,
        )
        .unwrap();
        let pod = PodBuilder::new("p").build();
        assert_eq!(policy.filter_all(&pod, &cluster, &ids).verdicts, vec![0, 0, 1]);
        assert_eq!(policy.score_all(&pod, &cluster, &ids), vec![0, 100, 0]);
    }

    #[test]
    fn settings_errors_name_the_field() {
        let error = build::<NodeAffinity>(r#"{"addedAffinity": {"required": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]}}"#).err().unwrap();
        assert!(error.contains("addedAffinity.required[0].matchExpressions[0].operator: unknown operator \"Near\""), "{error}");
        let error = build::<NodeAffinity>(r#"{"addedAffinity": {"preferred": [{"weight": 0, "preference": {}}]}}"#).err().unwrap();
        assert!(error.contains("addedAffinity.preferred[0].weight"), "{error}");
        let error = build::<NodeAffinity>(r#"{"addedAffinity": {"required": [{"matchExpressions": [{"key": "c", "operator": "Gt", "values": ["x"]}]}]}}"#)
            .err()
            .unwrap();
        assert!(error.contains("needs exactly one integer"), "{error}");
    }
}
