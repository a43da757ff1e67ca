//! The HTTP side: paths as the real API server lays them out, list/get/create/update/patch/delete/watch on every
//! served resource, discovery, and `Status` errors. Subresources live in [`crate::subresources`].

use crate::error::ApiError;
use crate::faults::FaultPlan;
use crate::metrics::LoadModel;
use crate::resources::{self, ResourceType};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{check_resource_version, name_of, namespace_of, Event, EventKind, Store};
use crate::subresources;
use crate::{events, tables};
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// Everything a request handler needs.
pub struct ServerState {
    pub store: Arc<Store>,
    pub faults: FaultPlan,
    pub load: Arc<LoadModel>,
    pub bookmark_interval: Duration,
    /// Refuse requests without a token (401); by default they are allowed, as the admin.
    pub require_auth: bool,
    /// Where every answered request to a resource is recorded, when asked for.
    pub audit: Option<crate::audit::AuditLog>,
}

pub fn router(state: Arc<ServerState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (status, [("content-type", "application/json")], bytes).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, &self.status_body())
    }
}

/// What a request path names.
pub enum Target {
    Version,
    Health,
    ApiVersions,
    GroupList,
    Group(String),
    ResourceList {
        group: String,
        version: String,
    },
    Collection {
        resource: &'static ResourceType,
        namespace: Option<String>,
    },
    Object {
        resource: &'static ResourceType,
        namespace: Option<String>,
        name: String,
    },
    Subresource {
        resource: &'static ResourceType,
        namespace: Option<String>,
        name: String,
        sub: String,
    },
    OpenApiIndex,
    OpenApiDocument(String),
    /// custom.metrics.k8s.io: a metric of one object, `namespaces/{ns}/{resource}/{name}/{metric}`.
    ObjectMetric {
        namespace: String,
        described: String,
        name: String,
        metric: String,
    },
    /// external.metrics.k8s.io: `namespaces/{ns}/{metric}`.
    ExternalMetric {
        namespace: String,
        metric: String,
    },
}

pub fn parse_path(path: &str) -> Result<Target, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|segment| !segment.is_empty()).collect();
    let not_found = || ApiError { code: 404, reason: "NotFound", message: "the server could not find the requested resource".into(), details: None };
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Ok(Target::Version),
        ["healthz"] | ["readyz"] | ["livez"] => return Ok(Target::Health),
        ["api"] => return Ok(Target::ApiVersions),
        ["apis"] => return Ok(Target::GroupList),
        ["openapi", "v3"] => return Ok(Target::OpenApiIndex),
        ["openapi", "v3", rest @ ..] => return Ok(Target::OpenApiDocument(rest.join("/"))),
        ["apis", group] => return Ok(Target::Group(group.to_string())),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    match (group, rest) {
        ("custom.metrics.k8s.io", ["namespaces", namespace, described, name, metric]) if *described != "pods" => {
            let (namespace, described, name, metric) = (namespace.to_string(), described.to_string(), name.to_string(), metric.to_string());
            return Ok(Target::ObjectMetric { namespace, described, name, metric });
        }
        ("external.metrics.k8s.io", ["namespaces", namespace, metric]) => {
            return Ok(Target::ExternalMetric { namespace: namespace.to_string(), metric: metric.to_string() });
        }
        _ => {}
    }
    let lookup = |plural: &str| resources::find(group, version, plural).ok_or_else(not_found);
    let (resource, namespace, rest) = match rest {
        [] => return Ok(Target::ResourceList { group: group.into(), version: version.into() }),
        ["namespaces", namespace, plural, rest @ ..] if resources::find(group, version, plural).is_some_and(|r| r.namespaced) => {
            (lookup(plural)?, Some(namespace.to_string()), rest)
        }
        [plural, rest @ ..] => (lookup(plural)?, None, rest),
    };
    Ok(match rest {
        [] => Target::Collection { resource, namespace },
        [name] => Target::Object { resource, namespace, name: name.to_string() },
        [name, sub] => Target::Subresource { resource, namespace, name: name.to_string(), sub: sub.to_string() },
        // custom.metrics.k8s.io: namespaces/{ns}/pods/*/{metric}
        _ => return Err(not_found()),
    })
}

async fn handle(
    State(state): State<Arc<ServerState>>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let response = match route(&state, &method, &uri, &query, &headers, body).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(%method, %uri, code = error.code, reason = error.reason, "request failed");
            error.into_response()
        }
    };
    if let Some(audit) = &state.audit {
        audit_request(&state, audit, &method, &uri, &query, &headers, response.status());
    }
    response
}

/// Records a request to a resource (not discovery, health or OpenAPI) with the answer's status.
fn audit_request(
    state: &ServerState,
    audit: &crate::audit::AuditLog,
    method: &Method,
    uri: &Uri,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    status: StatusCode,
) {
    let Ok(target) = parse_path(uri.path()) else { return };
    let (Target::Collection { resource, namespace } | Target::Object { resource, namespace, .. } | Target::Subresource { resource, namespace, .. }) = &target
    else {
        return;
    };
    let (name, subresource) = match &target {
        Target::Object { name, .. } => (name.clone(), String::new()),
        Target::Subresource { name, sub, .. } => (name.clone(), sub.clone()),
        _ => (String::new(), String::new()),
    };
    let authorization = headers.get("authorization").and_then(|value| value.to_str().ok());
    let user = crate::auth::authenticate(&state.store, authorization, false).map_or_else(|_| "system:anonymous".to_string(), |user| user.username());
    audit.record(crate::audit::AuditEntry {
        at_ms: 0,
        user,
        verb: verb(method, &target, query).to_string(),
        resource: resource.id(),
        subresource,
        namespace: namespace.clone().unwrap_or_default(),
        name,
        code: status.as_u16(),
    });
}

fn verb(method: &Method, target: &Target, query: &HashMap<String, String>) -> &'static str {
    let watching = query.get("watch").is_some_and(|value| value == "true" || value == "1");
    match (method.as_str(), target) {
        ("GET", Target::Collection { .. }) if watching => "watch",
        ("GET", Target::Collection { .. }) => "list",
        ("GET", _) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Target::Collection { .. }) => "deletecollection",
        ("DELETE", _) => "delete",
        _ => "other",
    }
}

fn fault_resource(target: &Target) -> String {
    match target {
        Target::Collection { resource, .. } | Target::Object { resource, .. } => resource.id(),
        Target::Subresource { resource, sub, .. } => format!("{}/{sub}", resource.id()),
        _ => String::new(),
    }
}

async fn route(
    state: &Arc<ServerState>,
    method: &Method,
    uri: &Uri,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let target = parse_path(uri.path())?;
    let verb = verb(method, &target, query);
    let authorization = headers.get("authorization").and_then(|value| value.to_str().ok());
    let user = crate::auth::authenticate(&state.store, authorization, state.require_auth)?;
    if let Target::Collection { resource, namespace } | Target::Object { resource, namespace, .. } | Target::Subresource { resource, namespace, .. } = &target {
        let (name, subresource) = match &target {
            Target::Object { name, .. } => (name.as_str(), ""),
            Target::Subresource { name, sub, .. } => (name.as_str(), sub.as_str()),
            _ => ("", ""),
        };
        let attributes = crate::auth::Attributes { verb, resource, subresource, namespace: namespace.as_deref(), name };
        if !crate::auth::allowed(&state.store, &user, &attributes) {
            return Err(crate::auth::forbidden(&user, &attributes));
        }
    }
    if let Some(fault) = state.faults.decide(verb, &fault_resource(&target)) {
        if !fault.delay.is_zero() {
            tokio::time::sleep(fault.delay).await;
        }
        if let Some(code) = fault.status {
            return Err(ApiError::injected(code));
        }
    }
    let store = &state.store;
    match (method.clone(), target) {
        (Method::GET, Target::Version) => Ok(json_response(
            StatusCode::OK,
            &json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-wasp-sim", "platform": "linux/amd64",
                "gitCommit": "wasp-sim", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc",
            }),
        )),
        (Method::GET, Target::Health) => Ok((StatusCode::OK, "ok").into_response()),
        (Method::GET, Target::ApiVersions) => Ok(json_response(StatusCode::OK, &resources::api_versions())),
        (Method::GET, Target::GroupList) => Ok(json_response(StatusCode::OK, &resources::api_group_list())),
        (Method::GET, Target::Group(group)) => {
            resources::api_group(&group).map(|body| json_response(StatusCode::OK, &body)).ok_or_else(|| ApiError::not_found("groups", "", &group))
        }
        (Method::GET, Target::OpenApiIndex) => Ok(json_response(StatusCode::OK, &crate::openapi::index())),
        (Method::GET, Target::OpenApiDocument(path)) => crate::openapi::document(&path)
            .map(|bytes| (StatusCode::OK, [("content-type", "application/json")], bytes).into_response())
            .ok_or_else(|| ApiError { code: 404, reason: "NotFound", message: format!("no OpenAPI document for {path}"), details: None }),
        (Method::GET, Target::ResourceList { group, version }) => resources::resource_list(&group, &version)
            .map(|body| json_response(StatusCode::OK, &body))
            .ok_or_else(|| ApiError::not_found("groupversions", "", &format!("{group}/{version}"))),
        (Method::GET, Target::ObjectMetric { namespace, described, name, metric }) => {
            crate::metrics::object_metric(state, &namespace, &described, &name, &metric)
        }
        // One series per metric, the same in every namespace.
        (Method::GET, Target::ExternalMetric { metric, .. }) => crate::metrics::external_metric(state, &metric),
        (_, target @ (Target::Collection { .. } | Target::Object { .. } | Target::Subresource { .. })) if target_resource(&target).read_only => {
            crate::metrics::serve(state, method, &target, query)
        }
        (Method::GET, Target::Collection { resource, namespace }) if verb == "watch" => watch(state, resource, namespace, query, headers),
        (Method::GET, Target::Collection { resource, namespace }) => list(store, resource, namespace.as_deref(), query, headers),
        (Method::GET, Target::Object { resource, namespace, name }) => {
            let stored = store.get(events::storage(resource), namespace.as_deref(), &name)?;
            let object = events::view(resource, &stored);
            Ok(match tables::requested(headers) {
                Some(version) => {
                    let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
                    let include = tables::Include::from_query(query.get("includeObject").map(String::as_str));
                    json_response(StatusCode::OK, &tables::table(resource, [&*object], metadata, include, version))
                }
                None => json_response(StatusCode::OK, &object),
            })
        }
        (Method::POST, Target::Collection { resource, namespace }) => {
            let (object, mut warnings) = checked_fields(resource, parse_body(&body)?, query)?;
            let request = Creation { resource, namespace: namespace.as_deref(), user: &user, dry_run: dry_run(query) };
            let (created, admission_warnings) = create(store, &request, object).await?;
            warnings.extend(admission_warnings);
            Ok(with_warnings(json_response(StatusCode::CREATED, &events::view(resource, &created)), &warnings))
        }
        (Method::PUT, Target::Object { resource, namespace, name }) => {
            let (object, warnings) = checked_fields(resource, parse_body(&body)?, query)?;
            let object = if events::is_events_v1(resource) { events::to_core(&object) } else { object };
            replace(store, events::storage(resource), namespace.as_deref(), &name, object)
                .map(|updated| with_warnings(json_response(StatusCode::OK, &events::view(resource, &updated)), &warnings))
        }
        (Method::PATCH, Target::Object { resource, namespace, name }) => {
            let patch = PatchBody::parse(headers, &body)?;
            let applying = headers.get("content-type").and_then(|value| value.to_str().ok()).is_some_and(|value| value.starts_with("application/apply-patch"));
            // Server-side apply of an object that does not exist creates it (`kubectl apply --server-side`).
            if applying && store.get(events::storage(resource), namespace.as_deref(), &name).is_err_and(|error| error.code == 404) {
                let PatchBody::Merge(object) = &patch else { unreachable!("apply patches are merge patches") };
                let (mut object, mut warnings) = checked_fields(resource, object.clone(), query)?;
                if !object.get("metadata").is_some_and(Value::is_object) {
                    object["metadata"] = json!({});
                }
                object["metadata"]["name"] = json!(name);
                let request = Creation { resource, namespace: namespace.as_deref(), user: &user, dry_run: dry_run(query) };
                let (created, admission_warnings) = create(store, &request, object).await?;
                warnings.extend(admission_warnings);
                return Ok(with_warnings(json_response(StatusCode::CREATED, &events::view(resource, &created)), &warnings));
            }
            let updated = store.mutate(events::storage(resource), namespace.as_deref(), &name, |object| {
                // A resource version in a merge patch is a precondition, as kube-apiserver reads it.
                if let PatchBody::Merge(body) = &patch {
                    check_resource_version(resource, object, body)?;
                }
                let status_before = object.get("status").cloned();
                if events::is_events_v1(resource) {
                    let mut view = events::view(resource, object).into_owned();
                    patch.apply(&mut view)?;
                    *object = events::to_core(&view);
                } else {
                    patch.apply(object)?;
                }
                if has_status_subresource(resource) {
                    restore(object, "status", status_before);
                }
                crate::defaults::apply_on_update(resource, object)
            })?;
            Ok(json_response(StatusCode::OK, &events::view(resource, &updated)))
        }
        (Method::DELETE, Target::Object { resource, namespace, name }) => {
            let grace = grace_period(query, &body);
            let deleted = subresources::delete(store, events::storage(resource), namespace.as_deref(), &name, grace)?;
            Ok(json_response(StatusCode::OK, &events::view(resource, &deleted)))
        }
        (Method::DELETE, Target::Collection { resource, namespace }) => {
            let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))?;
            let page = store.list(events::storage(resource), namespace.as_deref(), 0, None, |object| selected(resource, &labels, &fields, object))?;
            let grace = grace_period(query, &body);
            for object in &page.items {
                let namespace = (!namespace_of(object).is_empty()).then(|| namespace_of(object));
                // Already gone is fine for a collection delete.
                let _ = subresources::delete(store, events::storage(resource), namespace, name_of(object), grace);
            }
            Ok(json_response(StatusCode::OK, &list_body(resource, page.items, store.revision(), None)))
        }
        (method, Target::Subresource { resource, namespace, name, sub }) => {
            subresources::serve(store, &method, resource, namespace.as_deref(), &name, &sub, headers, &body, query)
        }
        (method, _) => Err(ApiError::method_not_allowed(format!("{method} is not supported here"))),
    }
}

/// A create request, as admission sees it.
pub(crate) struct Creation<'a> {
    pub resource: &'static ResourceType,
    /// From the request path.
    pub namespace: Option<&'a str>,
    pub user: &'a crate::auth::User,
    pub dry_run: bool,
}

fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|value| value == "All")
}

/// Creates `object` (in the request's version): admission webhooks first when any are configured, then a
/// CustomResourceDefinition is checked and its types served from then on. Returns the webhooks' warnings.
pub(crate) async fn create(store: &Store, request: &Creation<'_>, object: Value) -> Result<(Arc<Value>, Vec<String>), ApiError> {
    let resource = request.resource;
    let (object, warnings) = if crate::webhooks::configured(store) { admit(store, request, object).await? } else { (object, Vec::new()) };
    let object = if events::is_events_v1(resource) { events::to_core(&object) } else { object };
    let created = create_checked(store, resource, request.namespace, object)?;
    Ok((created, warnings))
}

/// Admission of a create, on the object as kube-apiserver hands it to webhooks: its namespace known to exist,
/// defaulted, apiVersion and kind set. The store fills in the rest (name from generateName, uid, timestamps)
/// afterwards, so validating webhooks see no uid yet, unlike kube-apiserver's.
async fn admit(store: &Store, request: &Creation<'_>, mut object: Value) -> Result<(Value, Vec<String>), ApiError> {
    let resource = request.resource;
    if !object.is_object() {
        return Err(ApiError::bad_request(format!("the body of a {} must be a JSON object", resource.kind)));
    }
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    let namespace = if resource.namespaced {
        let in_body = object.pointer("/metadata/namespace").and_then(Value::as_str).filter(|namespace| !namespace.is_empty()).map(str::to_string);
        let namespace = match (request.namespace, in_body) {
            (Some(path), Some(body)) if path != body => {
                return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"))
            }
            (Some(path), _) => path.to_string(),
            (None, body) => body.unwrap_or_else(|| "default".into()),
        };
        let namespaces = resources::find("", "v1", "namespaces").expect("served");
        store.get(namespaces, None, &namespace).map_err(|_| ApiError::not_found("namespaces", "", &namespace))?;
        object["metadata"]["namespace"] = json!(namespace);
        Some(namespace)
    } else {
        None
    };
    object["apiVersion"] = json!(resource.api_version());
    object["kind"] = json!(resource.kind);
    crate::defaults::apply(resource, &mut object)?;
    let admission = crate::webhooks::Request { resource, namespace: namespace.as_deref(), user: request.user, dry_run: request.dry_run };
    let warnings = crate::webhooks::admit_create(store, &admission, &mut object).await?;
    Ok((object, warnings))
}

/// Stores a new object; a CustomResourceDefinition is checked first and its types served from then on.
fn create_checked(store: &Store, resource: &'static ResourceType, namespace: Option<&str>, mut object: Value) -> Result<Arc<Value>, ApiError> {
    // kube-apiserver's storage refuses a version it can read that is not 0; one it cannot read is ignored.
    if object.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|version| version.parse::<u64>().ok()).is_some_and(|version| version != 0) {
        return Err(ApiError::resource_version_on_create());
    }
    if resource.kind == "CustomResourceDefinition" {
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        resources::register_custom(&object).map_err(|message| ApiError::invalid("CustomResourceDefinition", &name, "spec", &message))?;
        let names = object.pointer("/spec/names").cloned().unwrap_or(json!({}));
        let now = crate::store::now_rfc3339();
        object["status"] = json!({
            "acceptedNames": names,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
            "storedVersions": object.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten().filter(|version| version["storage"] == true).map(|version| version["name"].clone()).collect::<Vec<_>>(),
        });
    }
    store.create(events::storage(resource), namespace, object)
}

fn target_resource(target: &Target) -> &'static ResourceType {
    match target {
        Target::Collection { resource, .. } | Target::Object { resource, .. } | Target::Subresource { resource, .. } => resource,
        _ => unreachable!("only called for resource targets"),
    }
}

/// Top-level fields each kind has; anything else is an unknown field.
fn known_fields(resource: &ResourceType) -> &'static [&'static str] {
    match (resource.group, resource.kind) {
        ("", "ConfigMap") => &["apiVersion", "kind", "metadata", "data", "binaryData", "immutable"],
        ("", "Event") => &[
            "apiVersion",
            "kind",
            "metadata",
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        ("events.k8s.io", "Event") => &[
            "apiVersion",
            "kind",
            "metadata",
            "eventTime",
            "series",
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
            "regarding",
            "related",
            "note",
            "type",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
        ],
        ("", "Secret") => &["apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable"],
        ("", "ServiceAccount") => &["apiVersion", "kind", "metadata", "secrets", "imagePullSecrets", "automountServiceAccountToken"],
        ("rbac.authorization.k8s.io", "ClusterRole") => &["apiVersion", "kind", "metadata", "rules", "aggregationRule"],
        ("rbac.authorization.k8s.io", "Role") => &["apiVersion", "kind", "metadata", "rules"],
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => &["apiVersion", "kind", "metadata", "roleRef", "subjects"],
        ("", "Endpoints") => &["apiVersion", "kind", "metadata", "subsets"],
        ("storage.k8s.io", "StorageClass") => &[
            "apiVersion",
            "kind",
            "metadata",
            "provisioner",
            "parameters",
            "reclaimPolicy",
            "mountOptions",
            "allowVolumeExpansion",
            "volumeBindingMode",
            "allowedTopologies",
        ],
        ("admissionregistration.k8s.io", _) => &["apiVersion", "kind", "metadata", "webhooks"],
        _ => &["apiVersion", "kind", "metadata", "spec", "status"],
    }
}

/// Unknown top-level fields: refused with `fieldValidation=Strict`, otherwise dropped with a warning, as the
/// API server does by default.
fn checked_fields(resource: &ResourceType, mut object: Value, query: &HashMap<String, String>) -> Result<(Value, Vec<String>), ApiError> {
    let known = known_fields(resource);
    let unknown: Vec<String> = object.as_object().map(|map| map.keys().filter(|key| !known.contains(&key.as_str())).cloned().collect()).unwrap_or_default();
    if unknown.is_empty() {
        return Ok((object, Vec::new()));
    }
    if query.get("fieldValidation").is_some_and(|mode| mode == "Strict") {
        return Err(ApiError::bad_request(format!("strict decoding error: unknown field \"{}\"", unknown.join("\", \""))));
    }
    if let Some(map) = object.as_object_mut() {
        map.retain(|key, _| known.contains(&key.as_str()));
    }
    Ok((object, unknown.into_iter().map(|field| format!("unknown field \"{field}\"")).collect()))
}

/// `Warning: 299 - "text"` headers, quoted as kube-apiserver's `NewWarningHeader` quotes them (`\"` and `\\`),
/// which kubectl unquotes back to the text.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let quoted = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = format!("299 - \"{quoted}\"").parse() {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

pub fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    // kubectl's generators (`kubectl create namespace|deployment|configmap ...`) send protobuf.
    if body.starts_with(crate::protobuf::MAGIC) {
        return crate::protobuf::decode(body);
    }
    serde_json::from_slice(body).map_err(|error| ApiError::bad_request(format!("the request body is not valid JSON: {error}")))
}

pub fn has_status_subresource(resource: &ResourceType) -> bool {
    resource.subresources.contains(&"status")
}

/// Puts back a field an update may not change through this endpoint.
pub fn restore(object: &mut Value, field: &str, previous: Option<Value>) {
    match previous {
        Some(previous) => object[field] = previous,
        None => {
            if let Some(map) = object.as_object_mut() {
                map.remove(field);
            }
        }
    }
}

fn replace(store: &Store, resource: &'static ResourceType, namespace: Option<&str>, name: &str, object: Value) -> Result<Arc<Value>, ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request("the body of an update must be a JSON object"));
    }
    let body_name = name_of(&object);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!("the name of the object ({body_name}) does not match the name on the URL ({name})")));
    }
    store.mutate(resource, namespace, name, |current| {
        check_resource_version(resource, current, &object)?;
        let status = current.get("status").cloned();
        *current = object;
        if has_status_subresource(resource) {
            restore(current, "status", status);
        }
        crate::defaults::apply_on_update(resource, current)
    })
}

fn grace_period(query: &HashMap<String, String>, body: &[u8]) -> Option<i64> {
    query
        .get("gracePeriodSeconds")
        .and_then(|value| value.parse().ok())
        .or_else(|| serde_json::from_slice::<Value>(body).ok().and_then(|options| options.get("gracePeriodSeconds").and_then(Value::as_i64)))
}

/// A PATCH body with its content type.
pub enum PatchBody {
    Merge(Value),
    Json(json_patch::Patch),
}

impl PatchBody {
    pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Self, ApiError> {
        let content_type = headers.get("content-type").and_then(|value| value.to_str().ok()).unwrap_or("");
        let media_type = content_type.split(';').next().unwrap_or("").trim();
        match media_type {
            // Strategic merge and server-side apply are treated as merge patches: enough for cordon, labels,
            // annotations, replicas and status (documented in sim/README.md).
            "application/merge-patch+json" | "application/strategic-merge-patch+json" | "application/apply-patch+yaml" => {
                Ok(PatchBody::Merge(parse_body(body)?))
            }
            "application/json-patch+json" => {
                serde_json::from_slice(body).map(PatchBody::Json).map_err(|error| ApiError::bad_request(format!("invalid JSON patch: {error}")))
            }
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }

    pub fn apply(&self, object: &mut Value) -> Result<(), ApiError> {
        match self {
            PatchBody::Merge(patch) => {
                json_patch::merge(object, patch);
                Ok(())
            }
            PatchBody::Json(patch) => json_patch::patch(object, patch).map_err(|error| ApiError {
                code: 422,
                reason: "Invalid",
                message: format!("the JSON patch could not be applied: {error}"),
                details: None,
            }),
        }
    }
}

fn list_metadata(revision: u64, continue_token: Option<String>) -> Value {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    metadata
}

/// A list as kube-apiserver sends it: the list says its kind; the items of a built-in type do not (kubectl adds
/// theirs back), a custom resource's items keep theirs (they are stored and listed as written).
fn list_body(resource: &ResourceType, items: Vec<Arc<Value>>, revision: u64, continue_token: Option<String>) -> Value {
    let metadata = list_metadata(revision, continue_token);
    let built_in = resources::is_built_in(resource);
    let items: Vec<Value> = items_of(resource, &items_ref(&items))
        .into_iter()
        .map(|mut item| {
            if let Some(item) = item.as_object_mut().filter(|_| built_in) {
                item.remove("kind");
                item.remove("apiVersion");
            }
            item
        })
        .collect();
    json!({"kind": resource.list_kind(), "apiVersion": resource.api_version(), "metadata": metadata, "items": items})
}

fn items_ref(items: &[Arc<Value>]) -> Vec<&Value> {
    items.iter().map(|item| item.as_ref()).collect()
}

fn items_of(resource: &ResourceType, items: &[&Value]) -> Vec<Value> {
    items.iter().map(|item| events::view(resource, item).into_owned()).collect()
}

fn list(
    store: &Store,
    resource: &'static ResourceType,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))?;
    let limit = match query.get("limit") {
        Some(limit) => limit.parse().map_err(|_| ApiError::bad_request(format!("limit: {limit:?} is not a number")))?,
        None => 0,
    };
    let page = store
        .list(events::storage(resource), namespace, limit, query.get("continue").map(String::as_str), |object| selected(resource, &labels, &fields, object))?;
    if let Some(version) = tables::requested(headers) {
        let include = tables::Include::from_query(query.get("includeObject").map(String::as_str));
        let items = items_of(resource, &items_ref(&page.items));
        let table = tables::table(resource, &items, list_metadata(page.revision, page.continue_token), include, version);
        return Ok(json_response(StatusCode::OK, &table));
    }
    Ok(json_response(StatusCode::OK, &list_body(resource, page.items, page.revision, page.continue_token)))
}

/// Selectors see the object as the request's resource shows it (`regarding.name` for events.k8s.io/v1).
fn selected(resource: &ResourceType, labels: &LabelSelector, fields: &FieldSelector, stored: &Value) -> bool {
    if events::is_events_v1(resource) {
        let view = events::to_events_v1(stored);
        return labels.matches(&view) && fields.matches(&view);
    }
    labels.matches(stored) && fields.matches(stored)
}

struct WatchFilter {
    resource: &'static ResourceType,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|namespace| namespace_of(object) == namespace) && selected(self.resource, &self.labels, &self.fields, object)
    }

    /// How an event looks through this watch's selectors: an object entering them is ADDED, one leaving them
    /// is DELETED, as the API server reports it.
    fn view(&self, event: &Event) -> Option<EventKind> {
        let now = self.matches(&event.object);
        let before = event.previous.as_deref().is_some_and(|previous| self.matches(previous));
        match (event.kind, before, now) {
            (EventKind::Added, _, true) => Some(EventKind::Added),
            (EventKind::Modified, true, true) => Some(EventKind::Modified),
            (EventKind::Modified, false, true) => Some(EventKind::Added),
            (EventKind::Modified, true, false) => Some(EventKind::Deleted),
            (EventKind::Deleted, true, _) => Some(EventKind::Deleted),
            _ => None,
        }
    }
}

fn watch_line(kind: &str, object: &Value) -> Result<Bytes, Infallible> {
    // Written directly: `json!` would copy the whole object first.
    let mut line = Vec::with_capacity(2048);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut line, object).is_err() {
        line.extend_from_slice(b"null");
    }
    line.extend_from_slice(b"}\n");
    Ok(Bytes::from(line))
}

/// Events a watch holds for a client that reads slower than the store changes, before it is cut off (it then
/// resumes or relists). The watch keeps reading the store's stream meanwhile, so a slow client holds only the
/// objects its selectors let through, never every change since it fell behind.
const WATCH_QUEUE_LIMIT: usize = 200_000;

/// How a watch shows each object: the resource's view, as a one-row Table if the client asked for tables.
struct WatchView {
    resource: &'static ResourceType,
    table: Option<(&'static str, tables::Include)>,
}

/// An event a watch has yet to send. Most watches send the object as stored, so they keep only its text: a
/// parsed pod and its previous version are ~40 KiB against ~1.5 KiB of text, and a burst queues thousands.
enum Queued {
    Stored(EventKind, Arc<str>),
    Parsed(EventKind, Arc<Event>),
}

impl WatchView {
    /// Clients that see the object as stored get its text as it is; tables and `events.k8s.io` need the object.
    fn sends_stored_text(&self) -> bool {
        self.table.is_none() && !events::is_events_v1(self.resource)
    }

    fn queued(&self, kind: EventKind, event: &Arc<Event>) -> Queued {
        if self.sends_stored_text() {
            Queued::Stored(kind, event.text.clone())
        } else {
            Queued::Parsed(kind, event.clone())
        }
    }

    fn event_line(&self, queued: Queued) -> Result<Bytes, Infallible> {
        let (kind, text) = match queued {
            Queued::Parsed(kind, event) => return self.line(kind.as_str(), &event.object),
            Queued::Stored(kind, text) => (kind, text),
        };
        let mut line = Vec::with_capacity(text.len() + 40);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_str().as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        line.extend_from_slice(text.as_bytes());
        line.extend_from_slice(b"}\n");
        Ok(Bytes::from(line))
    }

    fn line(&self, kind: &str, object: &Value) -> Result<Bytes, Infallible> {
        let object = events::view(self.resource, object);
        match self.table {
            Some((version, include)) => {
                let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
                watch_line(kind, &tables::table(self.resource, [&*object], metadata, include, version))
            }
            None => watch_line(kind, &object),
        }
    }
}

fn watch(
    state: &Arc<ServerState>,
    resource: &'static ResourceType,
    namespace: Option<String>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let view = WatchView {
        resource,
        table: tables::requested(headers).map(|version| (version, tables::Include::from_query(query.get("includeObject").map(String::as_str)))),
    };
    let stored = events::storage(resource);
    let filter = WatchFilter {
        resource,
        namespace,
        labels: LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))?,
    };
    let since = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(version) => Some(version.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {version:?}")))?),
    };
    let timeout = query.get("timeoutSeconds").and_then(|value| value.parse().ok()).map_or(Duration::from_secs(1800), Duration::from_secs);
    let lifetime = state.faults.watch_lifetime().map_or(timeout, |cut| cut.min(timeout));
    let bookmarks = query.get("allowWatchBookmarks").is_some_and(|value| value == "true");
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(1024);
    let stream = futures::stream::poll_fn(move |context| receiver.poll_recv(context));
    let response = Response::builder().status(StatusCode::OK).header("content-type", "application/json");
    let (backlog, mut live, started_at) = match state.store.watch(stored, since) {
        Ok(started) => started,
        // Like the API server: a watch from too old a version is a 200 stream with one ERROR event (410).
        Err(error) => {
            let _ = sender.try_send(watch_line("ERROR", &error.status_body()));
            drop(sender);
            return Ok(response.body(Body::from_stream(stream)).expect("valid response"));
        }
    };
    let bookmark_interval = state.bookmark_interval;
    tokio::spawn(async move {
        let mut queue: VecDeque<Queued> = backlog.iter().filter_map(|event| filter.view(event).map(|kind| view.queued(kind, event))).collect();
        // The newest revision this watch has taken in (queued or passed over): a bookmark says every event up to
        // its version was sent, so it carries this, never the store's revision, which may be ahead of events
        // still on their way here (a client resuming from such a bookmark would never see them).
        let mut seen = started_at;
        drop(backlog);
        let deadline = tokio::time::sleep(lifetime);
        tokio::pin!(deadline);
        let mut bookmark = tokio::time::interval(bookmark_interval);
        bookmark.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = sender.closed() => return,
                received = live.recv() => match received {
                    Ok(event) if std::ptr::eq(event.resource, stored) => {
                        seen = seen.max(event.revision);
                        if let Some(kind) = filter.view(&event) {
                            if queue.len() >= WATCH_QUEUE_LIMIT {
                                return;
                            }
                            queue.push_back(view.queued(kind, &event));
                        }
                    }
                    Ok(event) => seen = seen.max(event.revision),
                    // A watcher that fell this far behind is cut off; it resumes or relists, as with etcd.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
                permit = sender.reserve(), if !queue.is_empty() => {
                    let Ok(permit) = permit else { return };
                    permit.send(view.event_line(queue.pop_front().expect("not empty")));
                }
                _ = bookmark.tick(), if bookmarks && queue.is_empty() => {
                    let marker = json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": {"resourceVersion": seen.to_string()}});
                    if sender.send(watch_line("BOOKMARK", &marker)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(response.body(Body::from_stream(stream)).expect("valid response"))
}
