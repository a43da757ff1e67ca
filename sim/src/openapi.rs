//! OpenAPI v3, as kube-apiserver lays it out: `/openapi/v3` is an index of group-version documents, each listing
//! the paths and operations of its resources (with `x-kubernetes-group-version-kind` and the `fieldValidation`
//! parameter, which is how kubectl learns that the server validates fields itself) and the component schemas of
//! its kinds (for `kubectl explain`). The schemas come from k8s-openapi, generated into `sim/openapi/schemas.json`
//! by `tests/openapi_schemas.rs`.

use crate::resources::ResourceType;
use serde_json::{json, Map, Value};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

static EMBEDDED: &str = include_str!("../openapi/schemas.json");

/// Each group-version document, serialized once, with its hash (clients cache by `?hash=`).
struct Documents {
    by_path: BTreeMap<String, (String, Vec<u8>)>,
}

fn documents() -> &'static Documents {
    static DOCUMENTS: OnceLock<Documents> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let embedded: Value = serde_json::from_str(EMBEDDED).expect("sim/openapi/schemas.json is valid JSON");
        let mut by_path = BTreeMap::new();
        for (group, version) in crate::resources::group_versions() {
            let document = group_version_document(&embedded, group, version);
            let bytes = serde_json::to_vec(&document).unwrap_or_default();
            let mut hasher = DefaultHasher::new();
            bytes.hash(&mut hasher);
            by_path.insert(gv_path(group, version), (format!("{:016X}", hasher.finish()), bytes));
        }
        Documents { by_path }
    })
}

/// `api/v1`, `apis/apps/v1`: the document's key in the index.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`.
pub fn index() -> Value {
    let paths: Map<String, Value> =
        documents().by_path.iter().map(|(path, (hash, _))| (path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}))).collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/{path}`: the serialized document, if `path` names a served group-version.
pub fn document(path: &str) -> Option<&'static [u8]> {
    documents().by_path.get(path.trim_matches('/')).map(|(_, bytes)| bytes.as_slice())
}

/// The component schema of a served kind (`v1/Pod`, `apps/v1/Deployment`), for tests and required-field checks.
pub fn schemas() -> &'static Map<String, Value> {
    static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let embedded: Value = serde_json::from_str(EMBEDDED).expect("sim/openapi/schemas.json is valid JSON");
        embedded["schemas"].as_object().cloned().unwrap_or_default()
    })
}

/// The schema name of a kind (`io.k8s.api.core.v1.Pod`), if the embedded schemas have it.
pub fn schema_name(api_version: &str, kind: &str) -> Option<&'static str> {
    static ROOTS: OnceLock<Map<String, Value>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let embedded: Value = serde_json::from_str(EMBEDDED).expect("sim/openapi/schemas.json is valid JSON");
        embedded["roots"].as_object().cloned().unwrap_or_default()
    });
    roots.get(&format!("{api_version}/{kind}")).and_then(Value::as_str)
}

/// Fields `object` lacks (or has as null) that its kind's schema marks required, as `spec.containers[0].name`.
/// Typed clients (the Python client's models) refuse such objects. Kinds without an embedded schema: none.
pub fn missing_required(api_version: &str, kind: &str, object: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    if let Some(name) = schema_name(api_version, kind) {
        check_required(&json!({"$ref": format!("#/components/schemas/{name}")}), object, "", &mut missing);
    }
    missing
}

fn check_required(schema: &Value, value: &Value, path: &str, missing: &mut Vec<String>) {
    // A reference with a description of its own is `{"allOf": [{"$ref": ...}], "description": ...}`.
    for part in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        check_required(part, value, path, missing);
    }
    let resolved = match schema.get("$ref").and_then(Value::as_str).and_then(|reference| reference.strip_prefix("#/components/schemas/")) {
        Some(name) => match schemas().get(name) {
            Some(schema) => schema,
            None => return,
        },
        None => schema,
    };
    let field = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
    match value {
        Value::Object(map) => {
            for required in resolved.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if map.get(required).is_none_or(Value::is_null) {
                    missing.push(field(required));
                }
            }
            if let Some(properties) = resolved.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if let Some(child) = map.get(name) {
                        check_required(property, child, &field(name), missing);
                    }
                }
            } else if let Some(additional) = resolved.get("additionalProperties").filter(|schema| schema.is_object()) {
                for (name, child) in map {
                    check_required(additional, child, &field(name), missing);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = resolved.get("items") {
                for (index, item) in items.iter().enumerate() {
                    check_required(item_schema, item, &format!("{path}[{index}]"), missing);
                }
            }
        }
        _ => {}
    }
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn query_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_parameters() -> Vec<Value> {
    vec![
        query_parameter("dryRun", "When present, indicates that modifications should not be persisted."),
        query_parameter("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
        query_parameter(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. This is the default. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present.",
        ),
    ]
}

fn list_parameters() -> Vec<Value> {
    ["allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion", "timeoutSeconds", "watch"]
        .iter()
        .map(|name| query_parameter(name, ""))
        .collect()
}

struct Operation<'a> {
    action: &'a str,
    id: String,
    gvk: Value,
    body: Option<Value>,
    response: Value,
    parameters: Vec<Value>,
}

impl Operation<'_> {
    fn build(self) -> Value {
        let mut operation = json!({
            "operationId": self.id,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": self.response}}}, "401": {"description": "Unauthorized"}},
        });
        if !self.parameters.is_empty() {
            operation["parameters"] = json!(self.parameters);
        }
        if self.action == "patch" {
            let patch = json!({"schema": {"type": "object"}});
            operation["requestBody"] = json!({"content": {
                "application/apply-patch+yaml": patch, "application/json-patch+json": patch,
                "application/merge-patch+json": patch, "application/strategic-merge-patch+json": patch,
            }, "required": true});
        } else if let Some(body) = self.body {
            operation["requestBody"] = json!({"content": {"*/*": {"schema": body}}, "required": true});
        }
        operation
    }
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn object_schema(resource: &ResourceType) -> Value {
    schema_name(&resource.api_version(), resource.kind).map_or_else(|| json!({"type": "object"}), reference)
}

/// Paths and operations of one resource.
fn resource_paths(resource: &ResourceType, paths: &mut Map<String, Value>) {
    let prefix = format!("/{}", gv_path(resource.group, resource.version));
    let collection =
        if resource.namespaced { format!("{prefix}/namespaces/{{namespace}}/{}", resource.plural) } else { format!("{prefix}/{}", resource.plural) };
    let kind_gvk = gvk(resource.group, resource.version, resource.kind);
    let schema = object_schema(resource);
    let id = |verb: &str, suffix: &str| format!("{verb}{}{}{suffix}", resource.group.replace('.', ""), resource.kind);
    let path_parameters = |with_name: bool| {
        let mut parameters = Vec::new();
        if with_name {
            parameters.push(json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
        }
        if resource.namespaced {
            parameters.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
        }
        parameters
    };
    let operation = |action: &str, id: String, body: Option<Value>, parameters: Vec<Value>| {
        Operation { action, id, gvk: kind_gvk.clone(), body, response: schema.clone(), parameters }.build()
    };
    let mut collection_item = json!({"parameters": path_parameters(false)});
    collection_item["get"] = operation("list", id("list", ""), None, list_parameters());
    if !resource.read_only {
        collection_item["post"] = operation("post", id("create", ""), Some(schema.clone()), write_parameters());
        collection_item["delete"] = operation("deletecollection", id("deletecollection", ""), None, list_parameters());
    }
    paths.insert(collection.clone(), collection_item);
    if resource.namespaced {
        let all = json!({"get": operation("list", id("list", "ForAllNamespaces"), None, list_parameters())});
        paths.insert(format!("{prefix}/{}", resource.plural), all);
    }
    let mut object_item = json!({"parameters": path_parameters(true)});
    object_item["get"] = operation("get", id("read", ""), None, Vec::new());
    if !resource.read_only {
        object_item["put"] = operation("put", id("replace", ""), Some(schema.clone()), write_parameters());
        object_item["patch"] = operation("patch", id("patch", ""), None, write_parameters());
        object_item["delete"] = operation("delete", id("delete", ""), None, Vec::new());
    }
    paths.insert(format!("{collection}/{{name}}"), object_item);
    for sub in resource.subresources {
        let mut item = json!({"parameters": path_parameters(true)});
        let sub_kind = |api_version: &str, kind: &str| {
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            (gvk(group, version, kind), schema_name(api_version, kind).map_or_else(|| json!({"type": "object"}), reference))
        };
        let (sub_gvk, sub_schema) = match *sub {
            "binding" => sub_kind("v1", "Binding"),
            "eviction" => sub_kind("policy/v1", "Eviction"),
            "scale" => sub_kind("autoscaling/v1", "Scale"),
            "log" | "exec" => (gvk("", "v1", "Status"), json!({"type": "string"})),
            _ => (kind_gvk.clone(), schema.clone()),
        };
        let sub_operation = |action: &str, verb: &str, body: bool, parameters: Vec<Value>| {
            let id = id(verb, &format!("{}{}", sub[..1].to_uppercase(), &sub[1..]));
            Operation { action, id, gvk: sub_gvk.clone(), body: body.then(|| sub_schema.clone()), response: sub_schema.clone(), parameters }.build()
        };
        match *sub {
            "binding" | "eviction" => item["post"] = sub_operation("post", "create", true, write_parameters()),
            "log" => item["get"] = sub_operation("get", "read", false, vec![query_parameter("container", "The container for which to stream logs.")]),
            "exec" => {
                item["get"] = sub_operation("connect", "connectGet", false, Vec::new());
                item["post"] = sub_operation("connect", "connectPost", false, Vec::new());
            }
            _ => {
                item["get"] = sub_operation("get", "read", false, Vec::new());
                item["put"] = sub_operation("put", "replace", true, write_parameters());
                item["patch"] = sub_operation("patch", "patch", false, write_parameters());
            }
        }
        paths.insert(format!("{collection}/{{name}}/{sub}"), item);
    }
}

/// Adds `name` and every schema it refers to.
fn add_closure(all: &Map<String, Value>, name: &str, out: &mut Map<String, Value>) {
    if out.contains_key(name) {
        return;
    }
    let Some(schema) = all.get(name) else { return };
    out.insert(name.to_string(), schema.clone());
    let mut references = Vec::new();
    collect_references(schema, &mut references);
    for reference in references {
        add_closure(all, &reference, out);
    }
}

fn collect_references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                if let Some(name) = reference.strip_prefix("#/components/schemas/") {
                    out.push(name.to_string());
                }
            }
            map.values().for_each(|value| collect_references(value, out));
        }
        Value::Array(values) => values.iter().for_each(|value| collect_references(value, out)),
        _ => {}
    }
}

fn group_version_document(embedded: &Value, group: &str, version: &str) -> Value {
    let empty = Map::new();
    let all = embedded["schemas"].as_object().unwrap_or(&empty);
    let roots = embedded["roots"].as_object().unwrap_or(&empty);
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let served: Vec<&ResourceType> = crate::resources::served().into_iter().filter(|resource| resource.group == group && resource.version == version).collect();
    for resource in &served {
        resource_paths(resource, &mut paths);
    }
    // Every root schema reachable from this group-version's operations, with the kinds it serves as.
    let mut kinds: Vec<(String, &str, &str, &str)> =
        served.iter().map(|resource| (resource.api_version(), resource.group, resource.version, resource.kind)).collect();
    for resource in &served {
        for sub in resource.subresources {
            match *sub {
                "binding" => kinds.push(("v1".into(), "", "v1", "Binding")),
                "eviction" => kinds.push(("policy/v1".into(), "policy", "v1", "Eviction")),
                "scale" => kinds.push(("autoscaling/v1".into(), "autoscaling", "v1", "Scale")),
                _ => {}
            }
        }
    }
    for (api_version, group, version, kind) in kinds {
        let Some(name) = roots.get(&format!("{api_version}/{kind}")).and_then(Value::as_str) else { continue };
        add_closure(all, name, &mut schemas);
        let schema = &mut schemas[name];
        let mut gvks = schema.get("x-kubernetes-group-version-kind").and_then(Value::as_array).cloned().unwrap_or_default();
        let this = gvk(group, version, kind);
        if !gvks.contains(&this) {
            gvks.push(this);
        }
        schema["x-kubernetes-group-version-kind"] = json!(gvks);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (wasp-sim)", "version": "v1.33.0-wasp-sim"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_fields_are_found_at_any_depth() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"image": "x"}]}, "status": {"containerStatuses": [{"name": "a", "image": null}]}});
        let missing = missing_required("v1", "Pod", &pod);
        for field in [
            "spec.containers[0].name",
            "status.containerStatuses[0].image",
            "status.containerStatuses[0].imageID",
            "status.containerStatuses[0].ready",
            "status.containerStatuses[0].restartCount",
        ] {
            assert!(missing.contains(&field.to_string()), "{field} not in {missing:?}");
        }
        let node = json!({"metadata": {"name": "n"}, "status": {"nodeInfo": {"kubeletVersion": "v1"}}});
        assert!(missing_required("v1", "Node", &node).contains(&"status.nodeInfo.bootID".to_string()));
    }

    #[test]
    fn index_points_at_every_group_version() {
        let index = index();
        let url = index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
        assert!(index["paths"]["apis/apps/v1"].is_object());
    }

    #[test]
    fn patch_operations_declare_field_validation_and_their_kind() {
        let document: Value = serde_json::from_slice(document("apis/apps/v1").unwrap()).unwrap();
        let patch = &document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"], json!({"group": "apps", "version": "v1", "kind": "Deployment"}));
        assert!(patch["parameters"].as_array().unwrap().iter().any(|parameter| parameter["name"] == "fieldValidation" && parameter["in"] == "query"));
        let deployment = &document["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(deployment["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        // Every reference resolves inside the document.
        let mut references = Vec::new();
        collect_references(&document, &mut references);
        for reference in references {
            assert!(document["components"]["schemas"].get(&reference).is_some(), "{reference} is missing");
        }
    }
}
