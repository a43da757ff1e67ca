//! Kubernetes objects from YAML files as users write them: one or several documents, or a `kind: List`.

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::Path;

/// Reads every object of `kind` from a YAML file. Errors name the file, the document and the field.
pub fn read_objects<T: DeserializeOwned>(path: &Path, kind: &str) -> anyhow::Result<Vec<T>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_objects(&text, kind).with_context(|| format!("{}", path.display()))
}

pub fn parse_objects<T: DeserializeOwned>(text: &str, kind: &str) -> anyhow::Result<Vec<T>> {
    let mut objects = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(document).with_context(|| format!("document {}: malformed YAML", index + 1))?;
        if value.is_null() {
            continue;
        }
        let items = match value.get("items").and_then(serde_yaml::Value::as_sequence) {
            Some(items) => items.clone(),
            None => vec![value],
        };
        for (position, item) in items.into_iter().enumerate() {
            let item_kind = item.get("kind").and_then(serde_yaml::Value::as_str).unwrap_or(kind);
            if item_kind != kind {
                bail!("document {}, item {}: expected kind {kind}, found {item_kind}", index + 1, position + 1);
            }
            let object = serde_yaml::from_value(item).with_context(|| format!("document {}, item {}: not a valid {kind}", index + 1, position + 1))?;
            objects.push(object);
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn documents_lists_and_kind_checks() {
        let text = "kind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems: [{kind: Node, metadata: {name: b}}, {metadata: {name: c}}]\n---\n";
        let nodes: Vec<Node> = parse_objects(text, "Node").unwrap();
        let names: Vec<_> = nodes.iter().map(|node| node.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let error = parse_objects::<Pod>(text, "Pod").unwrap_err();
        assert_eq!(format!("{error:#}"), "document 1, item 1: expected kind Pod, found Node");
        let error = parse_objects::<Node>("metadata: {name: [", "Node").unwrap_err();
        assert!(format!("{error:#}").starts_with("document 1: malformed YAML"), "{error:#}");
        let error = parse_objects::<Pod>("kind: Pod\nspec: {containers: 5}", "Pod").unwrap_err();
        assert!(format!("{error:#}").contains("not a valid Pod"), "{error:#}");
    }
}
