//! `metav1.LabelSelector` objects (matchLabels and matchExpressions) as stored in specs, matched against JSON
//! objects. (Query-string selectors are in [`crate::selectors`].)

use serde_json::Value;

pub fn label_selector_matches(selector: &Value, object: &Value) -> bool {
    let labels = object.pointer("/metadata/labels");
    let label = |key: &str| labels.and_then(|labels| labels.get(key)).and_then(Value::as_str);
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let labels_match = match_labels.is_none_or(|map| map.iter().all(|(key, value)| label(key) == value.as_str()));
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    labels_match
        && expressions.is_none_or(|expressions| {
            expressions.iter().all(|expression| {
                let key = expression["key"].as_str().unwrap_or("");
                let values: Vec<&str> = expression["values"].as_array().map(|values| values.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                let value = label(key);
                match expression["operator"].as_str() {
                    Some("In") => value.is_some_and(|value| values.contains(&value)),
                    Some("NotIn") => !value.is_some_and(|value| values.contains(&value)),
                    Some("Exists") => value.is_some(),
                    Some("DoesNotExist") => value.is_none(),
                    _ => false,
                }
            })
        })
}

/// `matchLabels` as the query-string form (`a=b,c=d`), for `Scale.status.selector`.
pub fn selector_string(selector: &Value) -> String {
    let mut parts: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|map| map.iter().map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    for expression in selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = expression["key"].as_str().unwrap_or("");
        let values: Vec<&str> = expression["values"].as_array().map(|values| values.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        match expression["operator"].as_str() {
            Some("In") => parts.push(format!("{key} in ({})", values.join(","))),
            Some("NotIn") => parts.push(format!("{key} notin ({})", values.join(","))),
            Some("Exists") => parts.push(key.to_string()),
            Some("DoesNotExist") => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}
