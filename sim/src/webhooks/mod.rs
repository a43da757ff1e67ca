//! Dynamic admission, as kube-apiserver runs it on create: the `admissionregistration.k8s.io/v1`
//! MutatingWebhookConfigurations (in name order, each webhook in turn, its JSONPatch applied) and then the
//! ValidatingWebhookConfigurations (called concurrently, the first refusal wins). This module owns which webhooks
//! a request reaches (rules, namespaceSelector, objectSelector, matchConditions), the `AdmissionReview` sent, and
//! how answers and failures become the create's result: a denial's `Status`, `Warning` headers, the
//! failurePolicy. [`client`] makes the HTTPS call; [`conditions`] evaluates CEL.
//!
//! Not modelled: UPDATE, DELETE and CONNECT (only creates are admitted), subresources, `matchPolicy: Equivalent`
//! conversions (the simulator serves one version per resource), `reinvocationPolicy: IfNeeded`, the
//! `authorizer` CEL variable. The simulator's controllers create through the same path ([`crate::controllers`]).

pub mod client;
pub mod conditions;

use crate::auth::User;
use crate::error::ApiError;
use crate::resources::{self, ResourceType};
use crate::selectors_k8s::label_selector_matches;
use crate::store::{name_of, Store};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const GROUP: &str = "admissionregistration.k8s.io";
/// kube-apiserver's default `timeoutSeconds`.
const DEFAULT_TIMEOUT_SECONDS: u64 = 10;

pub fn validating_configurations() -> &'static ResourceType {
    resources::find(GROUP, "v1", "validatingwebhookconfigurations").expect("served")
}

pub fn mutating_configurations() -> &'static ResourceType {
    resources::find(GROUP, "v1", "mutatingwebhookconfigurations").expect("served")
}

/// Whether any webhook configuration exists: creates skip admission's preparation (a copy of the object, a
/// namespace lookup) when none does.
pub fn configured(store: &Store) -> bool {
    store.count(mutating_configurations()) + store.count(validating_configurations()) > 0
}

/// The request being admitted.
pub struct Request<'a> {
    pub resource: &'static ResourceType,
    /// The namespace of a namespaced object (already checked to exist).
    pub namespace: Option<&'a str>,
    pub user: &'a User,
    pub dry_run: bool,
}

/// One webhook of one configuration.
struct Hook<'a> {
    config: &'a str,
    spec: &'a Value,
}

impl Hook<'_> {
    fn name(&self) -> &str {
        self.spec["name"].as_str().unwrap_or("")
    }

    fn fails_open(&self) -> bool {
        self.spec["failurePolicy"] == "Ignore"
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.spec["timeoutSeconds"].as_u64().unwrap_or(DEFAULT_TIMEOUT_SECONDS).max(1))
    }
}

/// Runs the mutating and then the validating webhooks that match a CREATE of `object` (defaulted, in the
/// request's version), applying mutations to it. Returns the webhooks' warnings; a denial, a failed call under
/// `failurePolicy: Fail` or a match condition that errs under Fail is the create's error.
pub async fn admit_create(store: &Store, request: &Request<'_>, object: &mut Value) -> Result<Vec<String>, ApiError> {
    // kube-apiserver never sends the webhook configurations themselves to webhooks: a broken webhook could
    // otherwise lock out its own repair.
    if request.resource.group == GROUP {
        return Ok(Vec::new());
    }
    let mutating = store.all(mutating_configurations());
    let validating = store.all(validating_configurations());
    if mutating.is_empty() && validating.is_empty() {
        return Ok(Vec::new());
    }
    let namespace = namespace_object(store, request, object);
    let mut warnings = Vec::new();
    for hook in hooks(&mutating) {
        let review = review(request, object);
        if !should_call(&hook, request, object, namespace.as_deref(), &review)? {
            continue;
        }
        let Some(response) = call(store, &hook, review, true).await? else { continue };
        warnings.extend(response_warnings(&response));
        if response["allowed"] != true {
            return Err(denied(&hook, &response));
        }
        if let Some(patch) = response["patch"].as_str() {
            apply_patch(&hook, object, patch)?;
        }
    }
    // Reviews are made first: the calls borrow them, and all run at once as kube-apiserver runs them.
    let reviews: Vec<(Hook, Value)> = hooks(&validating).map(|hook| (hook, review(request, object))).collect();
    let (mut called, mut calls) = (Vec::new(), Vec::new());
    for (hook, review) in &reviews {
        if should_call(hook, request, object, namespace.as_deref(), review)? {
            called.push(hook);
            calls.push(call(store, hook, review.clone(), false));
        }
    }
    let mut first_error = None;
    for (hook, result) in called.into_iter().zip(futures::future::join_all(calls).await) {
        match result {
            Ok(Some(response)) if response["allowed"] == true => warnings.extend(response_warnings(&response)),
            Ok(Some(response)) => {
                warnings.extend(response_warnings(&response));
                first_error.get_or_insert_with(|| denied(hook, &response));
            }
            Ok(None) => {}
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(warnings),
    }
}

/// Every webhook of the configurations, configurations in name order (the store's key order).
fn hooks(configurations: &[Arc<Value>]) -> impl Iterator<Item = Hook<'_>> {
    configurations.iter().flat_map(|configuration| {
        let config = name_of(configuration);
        configuration["webhooks"].as_array().into_iter().flatten().map(move |spec| Hook { config, spec })
    })
}

/// What namespaceSelector is matched against: the object itself when it is a Namespace, its namespace for
/// namespaced objects, nothing (the selector is not consulted) for other cluster-scoped objects.
fn namespace_object(store: &Store, request: &Request<'_>, object: &Value) -> Option<Arc<Value>> {
    if request.resource.group.is_empty() && request.resource.plural == "namespaces" {
        return Some(Arc::new(object.clone()));
    }
    let namespaces = resources::find("", "v1", "namespaces").expect("served");
    request.namespace.filter(|_| request.resource.namespaced).and_then(|namespace| store.get(namespaces, None, namespace).ok())
}

/// The `AdmissionReview` of a CREATE, with a fresh uid per call as kube-apiserver makes.
fn review(request: &Request<'_>, object: &Value) -> Value {
    let resource = request.resource;
    let kind = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    let gvr = json!({"group": resource.group, "version": resource.version, "resource": resource.plural});
    let mut admission = json!({
        "uid": uuid::Uuid::new_v4().to_string(),
        "kind": kind, "resource": gvr, "requestKind": kind, "requestResource": gvr,
        "operation": "CREATE",
        "userInfo": request.user.user_info(),
        "object": object,
        "oldObject": null,
        "dryRun": request.dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    });
    // Go's omitempty: a generateName create has no name yet, a cluster-scoped object no namespace.
    let name = name_of(object);
    if !name.is_empty() {
        admission["name"] = json!(name);
    }
    if let Some(namespace) = request.namespace.filter(|_| resource.namespaced) {
        admission["namespace"] = json!(namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": admission})
}

/// Whether `hook` applies, in kube-apiserver's order: selectors, rules, then matchConditions (whose errors
/// follow the failurePolicy: Ignore skips the webhook, Fail refuses the request with 403).
fn should_call(hook: &Hook, request: &Request<'_>, object: &Value, namespace: Option<&Value>, review: &Value) -> Result<bool, ApiError> {
    let spec = hook.spec;
    if let Some(namespace) = namespace {
        if !label_selector_matches(&spec["namespaceSelector"], namespace) {
            return Ok(false);
        }
    }
    if !label_selector_matches(&spec["objectSelector"], object) {
        return Ok(false);
    }
    if !spec["rules"].as_array().into_iter().flatten().any(|rule| rule_matches(rule, request.resource, "CREATE")) {
        return Ok(false);
    }
    let admission = &review["request"];
    let mut visible = admission.clone();
    if let Some(map) = visible.as_object_mut() {
        map.remove("object");
        map.remove("oldObject");
    }
    let conditions = spec["matchConditions"].as_array().map(Vec::as_slice).unwrap_or_default();
    match conditions::evaluate(conditions, &admission["object"], &admission["oldObject"], &visible) {
        conditions::Outcome::Call => Ok(true),
        conditions::Outcome::Skip { condition } => {
            tracing::debug!(webhook = hook.name(), configuration = hook.config, condition, "match condition false: webhook not called");
            Ok(false)
        }
        conditions::Outcome::Error(why) if hook.fails_open() => {
            tracing::warn!(webhook = hook.name(), configuration = hook.config, %why, "match conditions failed to evaluate, failing open");
            Ok(false)
        }
        conditions::Outcome::Error(why) => {
            tracing::warn!(webhook = hook.name(), configuration = hook.config, %why, "match conditions failed to evaluate, failing closed");
            Err(ApiError::forbidden(request.resource.plural, request.resource.group, name_of(object), &why))
        }
    }
}

/// One `rules[]` entry against a request on a main resource (no subresource), as kube-apiserver's rule matcher.
fn rule_matches(rule: &Value, resource: &ResourceType, operation: &str) -> bool {
    let listed = |field: &str, wanted: &str| rule[field].as_array().into_iter().flatten().filter_map(Value::as_str).any(|item| item == "*" || item == wanted);
    let resource_listed = rule["resources"].as_array().into_iter().flatten().filter_map(Value::as_str).any(|item| {
        let (name, sub) = item.split_once('/').unwrap_or((item, ""));
        (name == "*" || name == resource.plural) && (sub == "*" || sub.is_empty())
    });
    let is_namespace = resource.group.is_empty() && resource.plural == "namespaces";
    let scope = match rule["scope"].as_str() {
        Some("Namespaced") => resource.namespaced && !is_namespace,
        Some("Cluster") => !resource.namespaced || is_namespace,
        _ => true,
    };
    listed("operations", operation) && listed("apiGroups", resource.group) && listed("apiVersions", resource.version) && resource_listed && scope
}

/// Calls one webhook and checks its answer. `Ok(None)`: the call failed and the webhook fails open.
/// (kube-apiserver refuses dry runs to webhooks with side effects; v1 configurations cannot declare any, which
/// [`validate_configuration`] enforces, so every webhook is called on dry runs.)
async fn call(store: &Store, hook: &Hook<'_>, review: Value, mutating: bool) -> Result<Option<Value>, ApiError> {
    let name = hook.name();
    let timeout = hook.timeout();
    let ca_bundle = hook.spec.pointer("/clientConfig/caBundle").and_then(Value::as_str).unwrap_or("");
    let uid = review["request"]["uid"].as_str().unwrap_or("").to_string();
    let answer = match client::destination(store, &hook.spec["clientConfig"], timeout) {
        Ok(destination) => client::post(&destination, ca_bundle, &review, timeout).await,
        Err(error) => Err(error),
    };
    let checked = answer.map_err(|client::CallError(why)| format!("failed to call webhook: {why}")).and_then(|answer| verify(answer, &uid, mutating));
    match checked {
        Ok(response) => {
            tracing::debug!(webhook = name, configuration = hook.config, allowed = %response["allowed"], "webhook answered");
            Ok(Some(response))
        }
        Err(why) if hook.fails_open() => {
            tracing::warn!(webhook = name, configuration = hook.config, %why, "failed calling webhook, failing open");
            Ok(None)
        }
        Err(why) => {
            tracing::warn!(webhook = name, configuration = hook.config, %why, "failed calling webhook, failing closed");
            Err(ApiError::internal(&format!("failed calling webhook \"{name}\": {why}")))
        }
    }
}

/// The `response` of an `AdmissionReview` answer, if it is one for this request (kube-apiserver's checks and
/// wording); a failure here counts as a failed call.
fn verify(mut answer: Value, uid: &str, mutating: bool) -> Result<Value, String> {
    let (api_version, kind) = (answer["apiVersion"].as_str().unwrap_or(""), answer["kind"].as_str().unwrap_or(""));
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"));
    }
    let response = answer.get_mut("response").map(Value::take).filter(Value::is_object).ok_or("webhook response was absent")?;
    let answered = response["uid"].as_str().unwrap_or("");
    if answered != uid {
        return Err(format!("expected response.uid={uid:?}, got {answered:?}"));
    }
    let patch_type = response["patchType"].as_str().unwrap_or("");
    let has_patch = response["patch"].as_str().is_some_and(|patch| !patch.is_empty());
    match (mutating, patch_type, has_patch) {
        (true, "", true) => Err("webhook returned response.patch but not response.patchType".into()),
        (true, "" | "JSONPatch", _) => Ok(response),
        (true, other, _) => Err(format!("webhook returned invalid response.patchType of {other:?}")),
        (false, "", false) => Ok(response),
        (false, "", true) => Err("validating webhook may not return response.patch".into()),
        (false, _, _) => Err("validating webhook may not return response.patchType".into()),
    }
}

fn response_warnings(response: &Value) -> impl Iterator<Item = String> + '_ {
    response["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string)
}

/// A refusal as kube-apiserver (1.33) renders it: the webhook's `result` Status, a code of at least 400, and the
/// message prefixed with which webhook refused.
fn denied(hook: &Hook, response: &Value) -> ApiError {
    let result = &response["status"];
    let code = result["code"].as_u64().and_then(|code| u16::try_from(code).ok()).filter(|code| *code >= 400).unwrap_or(400);
    let reason = interned(result["reason"].as_str().unwrap_or(""));
    let denied_by = format!("admission webhook \"{}\" denied the request", hook.name());
    let message = match (result["message"].as_str().filter(|text| !text.is_empty()), reason) {
        (Some(message), _) => format!("{denied_by}: {message}"),
        (None, "") => format!("{denied_by} without explanation"),
        (None, reason) => format!("{denied_by}: {reason}"),
    };
    tracing::info!(webhook = hook.name(), configuration = hook.config, code, %message, "webhook denied the request");
    ApiError { code, reason, message, details: result.get("details").filter(|details| details.is_object()).cloned() }
}

/// A webhook's own `reason` as the `'static` text `ApiError` holds: each distinct reason is kept once.
fn interned(reason: &str) -> &'static str {
    static REASONS: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut reasons = REASONS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let reasons = reasons.get_or_insert_with(HashSet::new);
    if let Some(known) = reasons.get(reason) {
        return known;
    }
    let leaked: &'static str = Box::leak(reason.to_string().into_boxed_str());
    reasons.insert(leaked);
    leaked
}

/// Applies a mutating webhook's base64 JSONPatch. A patch that cannot be applied is an internal error whatever
/// the failurePolicy, as in kube-apiserver.
fn apply_patch(hook: &Hook, object: &mut Value, patch: &str) -> Result<(), ApiError> {
    let text = crate::defaults::base64_decode(patch)
        .ok_or_else(|| ApiError::internal(&format!("webhook \"{}\" returned a patch that is not base64 of UTF-8 text", hook.name())))?;
    let operations: json_patch::Patch = serde_json::from_str(&text).map_err(|error| ApiError::internal(&error.to_string()))?;
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &operations).map_err(|error| ApiError::internal(&error.to_string()))?;
    tracing::debug!(webhook = hook.name(), configuration = hook.config, operations = operations.0.len(), "applied the webhook's patch");
    *object = patched;
    Ok(())
}

/// Checks a webhook configuration on create or update: what kube-apiserver's validation refuses that the
/// simulator would otherwise trip over later (unnamed webhooks, missing sideEffects, conditions that do not
/// compile).
pub fn validate_configuration(kind: &str, configuration: &Value) -> Result<(), ApiError> {
    let name = name_of(configuration);
    let webhooks = configuration["webhooks"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut seen = HashSet::new();
    for (index, hook) in webhooks.iter().enumerate() {
        let hook_name = hook["name"].as_str().unwrap_or("");
        if hook_name.is_empty() {
            return Err(ApiError::invalid(kind, name, &format!("webhooks[{index}].name"), "Required value"));
        }
        if !seen.insert(hook_name) {
            return Err(ApiError::invalid(kind, name, &format!("webhooks[{index}].name"), &format!("Duplicate value: {hook_name:?}")));
        }
        if !matches!(hook["sideEffects"].as_str(), Some("None" | "NoneOnDryRun")) {
            return Err(ApiError::invalid(kind, name, &format!("webhooks[{index}].sideEffects"), "Unsupported value: must be None or NoneOnDryRun"));
        }
        let versions = hook["admissionReviewVersions"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !versions.iter().any(|version| version == "v1") {
            return Err(ApiError::invalid(kind, name, &format!("webhooks[{index}].admissionReviewVersions"), "Invalid value: must include at least one of v1"));
        }
        let config = &hook["clientConfig"];
        if config.get("url").is_some() == config.get("service").is_some() {
            return Err(ApiError::invalid(kind, name, &format!("webhooks[{index}].clientConfig"), "Required value: exactly one of url or service is required"));
        }
    }
    conditions::validate(webhooks).map_err(|(field, why)| ApiError::invalid(kind, name, &field, &why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_as_kube_apiservers_rule_matcher() {
        let pods = resources::pods();
        let namespaces = resources::find("", "v1", "namespaces").unwrap();
        let deployments = resources::find("apps", "v1", "deployments").unwrap();
        let rule = |operations: &[&str], groups: &[&str], resources: &[&str], scope: &str| json!({"operations": operations, "apiGroups": groups, "apiVersions": ["*"], "resources": resources, "scope": scope});
        assert!(rule_matches(&rule(&["*"], &[""], &["pods"], "*"), pods, "CREATE"));
        assert!(!rule_matches(&rule(&["UPDATE"], &[""], &["pods"], "*"), pods, "CREATE"));
        assert!(!rule_matches(&rule(&["CREATE"], &["apps"], &["pods"], "*"), pods, "CREATE"));
        assert!(rule_matches(&rule(&["CREATE"], &["*"], &["*"], "*"), deployments, "CREATE"));
        // `pods/*` and `*/*` reach the main resource too; `*/status` does not.
        assert!(rule_matches(&rule(&["CREATE"], &[""], &["pods/*"], "*"), pods, "CREATE"));
        assert!(rule_matches(&rule(&["CREATE"], &[""], &["*/*"], "*"), pods, "CREATE"));
        assert!(!rule_matches(&rule(&["CREATE"], &[""], &["*/status"], "*"), pods, "CREATE"));
        // Namespaces are cluster-scoped, though their objects name a namespace.
        assert!(rule_matches(&rule(&["CREATE"], &[""], &["*"], "Cluster"), namespaces, "CREATE"));
        assert!(!rule_matches(&rule(&["CREATE"], &[""], &["*"], "Namespaced"), namespaces, "CREATE"));
        assert!(rule_matches(&rule(&["CREATE"], &[""], &["*"], "Namespaced"), pods, "CREATE"));
        assert!(!rule_matches(&rule(&["CREATE"], &[""], &["*"], "Cluster"), pods, "CREATE"));
    }

    #[test]
    fn answers_are_checked_like_kube_apiserver_checks_them() {
        let answer = |response: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
        assert!(verify(answer(json!({"uid": "u", "allowed": true})), "u", false).is_ok());
        assert_eq!(verify(answer(json!({"uid": "v", "allowed": true})), "u", false).unwrap_err(), "expected response.uid=\"u\", got \"v\"");
        assert_eq!(
            verify(json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}), "u", false).unwrap_err(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview"
        );
        assert_eq!(
            verify(answer(json!({"uid": "u", "allowed": true, "patch": "W10="})), "u", true).unwrap_err(),
            "webhook returned response.patch but not response.patchType"
        );
        assert_eq!(
            verify(answer(json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})), "u", false).unwrap_err(),
            "validating webhook may not return response.patchType"
        );
        assert!(verify(answer(json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})), "u", true).is_ok());
    }
}
