//! Label and field selectors in the API server's query syntax: `app=web,tier!=db,env in (a,b),!legacy`.

use crate::error::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Operator {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    operator: Operator,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match &self.operator {
            Operator::Equals(expected) => value == Some(expected.as_str()),
            // As in Kubernetes, `!=` also matches objects without the key.
            Operator::NotEquals(excluded) => value != Some(excluded.as_str()),
            Operator::In(values) => value.is_some_and(|value| values.iter().any(|candidate| candidate == value)),
            Operator::NotIn(values) => !value.is_some_and(|value| values.iter().any(|candidate| candidate == value)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_requirements(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().map(str::trim).filter(|part| !part.is_empty()).collect()
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(selector: &str, rest: &str) -> Result<Vec<String>, ApiError> {
    let inner = rest.trim().strip_prefix('(').and_then(|rest| rest.strip_suffix(')'));
    let inner = inner.ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {selector:?}: expected a (value, ...) set")))?;
    Ok(inner.split(',').map(|value| value.trim().to_string()).filter(|value| !value.is_empty()).collect())
}

fn parse_requirement(part: &str, allow_sets: bool) -> Result<Requirement, ApiError> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {part:?}"));
    let requirement = if let Some(key) = part.strip_prefix('!') {
        Requirement { key: key.trim().to_string(), operator: Operator::DoesNotExist }
    } else if let Some((key, value)) = part.split_once("!=") {
        Requirement { key: key.trim().to_string(), operator: Operator::NotEquals(value.trim().to_string()) }
    } else if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        Requirement { key: key.trim().to_string(), operator: Operator::Equals(value.trim().to_string()) }
    } else if let Some((key, rest)) = part.split_once(" notin ").filter(|_| allow_sets) {
        Requirement { key: key.trim().to_string(), operator: Operator::NotIn(parse_set(part, rest)?) }
    } else if let Some((key, rest)) = part.split_once(" in ").filter(|_| allow_sets) {
        Requirement { key: key.trim().to_string(), operator: Operator::In(parse_set(part, rest)?) }
    } else if allow_sets && valid_key(part) {
        Requirement { key: part.to_string(), operator: Operator::Exists }
    } else {
        return Err(bad());
    };
    if !valid_key(&requirement.key) {
        return Err(bad());
    }
    Ok(requirement)
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        split_requirements(text).into_iter().map(|part| parse_requirement(part, true)).collect::<Result<_, _>>().map(LabelSelector)
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = crate::store::field(object, &["metadata", "labels"]);
        self.0.iter().all(|requirement| requirement.matches(labels.and_then(|labels| labels.get(&requirement.key)).and_then(Value::as_str)))
    }
}

/// A parsed field selector (`spec.nodeName=`, `status.phase!=Succeeded`, `metadata.name=web`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<Requirement>);

impl FieldSelector {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        split_requirements(text).into_iter().map(|part| parse_requirement(part, false)).collect::<Result<_, _>>().map(FieldSelector)
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|requirement| {
            let pointer = format!("/{}", requirement.key.replace('.', "/"));
            let value = match object.pointer(&pointer) {
                Some(Value::String(text)) => Some(text.clone()),
                Some(Value::Bool(flag)) => Some(flag.to_string()),
                Some(Value::Number(number)) => Some(number.to_string()),
                // A field that is not set compares as the empty string, as the API server does.
                _ => Some(String::new()),
            };
            requirement.matches(value.as_deref())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_syntax() {
        let pod = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        for (selector, expected) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("env!=prod", true),
            ("tier in (front, back)", true),
            ("tier notin (front)", false),
            ("app", true),
            ("!app", false),
            ("!env", true),
            ("app=web,env in (prod)", false),
        ] {
            assert_eq!(LabelSelector::parse(selector).unwrap().matches(&pod), expected, "{selector}");
        }
        assert_eq!(LabelSelector::parse("app in web").unwrap_err().reason, "BadRequest");
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors_on_pod_fields() {
        let pod = json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"schedulerName": "wasp"}, "status": {"phase": "Pending"}});
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(&pod), "unset compares as empty");
        assert!(FieldSelector::parse("spec.schedulerName=wasp,status.phase!=Running").unwrap().matches(&pod));
        assert!(!FieldSelector::parse("metadata.namespace=default").unwrap().matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName in (a)").is_err(), "field selectors have no sets");
    }
}
