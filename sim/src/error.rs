//! API errors as the real API server reports them: a `Status` body with `reason` and `code`.

use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None }
    }

    fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        self.details = Some(json!({"name": name, "group": group, "kind": kind}));
        self
    }

    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found")).with_details(name, group, resource)
    }

    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        Self::new(409, "AlreadyExists", format!("{qualified} \"{name}\" already exists")).with_details(name, group, resource)
    }

    pub fn conflict(resource: &str, group: &str, name: &str, why: &str) -> Self {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}")).with_details(name, group, resource)
    }

    /// `pods "x" is forbidden: <why>` (`pods is forbidden: <why>` without a name), as `apierrors.NewForbidden`.
    pub fn forbidden(resource: &str, group: &str, name: &str, why: &str) -> Self {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        let message = if name.is_empty() { format!("{qualified} is forbidden: {why}") } else { format!("{qualified} \"{name}\" is forbidden: {why}") };
        let mut details = json!({"group": group, "kind": resource});
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        ApiError { code: 403, reason: "Forbidden", message, details: Some(details) }
    }

    /// `Internal error occurred: <why>`, as `apierrors.NewInternalError`.
    pub fn internal(why: &str) -> Self {
        let mut error = Self::new(500, "InternalError", format!("Internal error occurred: {why}"));
        error.details = Some(json!({"causes": [{"message": why}]}));
        error
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `<Kind> "<name>" is invalid: <field>: <why>`; the cause's reason follows `why`'s opening words, as
    /// apimachinery's field errors print their type ("Required value" is FieldValueRequired, ...).
    pub fn invalid(kind: &str, name: &str, field: &str, why: &str) -> Self {
        let reason = [
            ("Required value", "FieldValueRequired"),
            ("Duplicate value", "FieldValueDuplicate"),
            ("Unsupported value", "FieldValueNotSupported"),
            ("Too long", "FieldValueTooLong"),
            ("Forbidden", "FieldValueForbidden"),
            ("Not found", "FieldValueNotFound"),
            ("Too many", "FieldValueTooMany"),
            ("Internal error", "InternalError"),
        ]
        .iter()
        .find(|(opening, _)| why.starts_with(opening))
        .map_or("FieldValueInvalid", |(_, reason)| reason);
        let mut error = Self::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {field}: {why}"));
        error.details = Some(json!({"name": name, "kind": kind, "causes": [{"reason": reason, "message": why, "field": field}]}));
        error
    }

    /// kube-apiserver's storage refuses a create that names a resourceVersion, with a 500 and no reason.
    pub fn resource_version_on_create() -> Self {
        Self::new(500, "", "resourceVersion should not be set on objects to be created")
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/strategic-merge-patch+json, application/json-patch+json; got {content_type:?}"))
    }

    pub fn too_many_requests(message: impl Into<String>, causes: Value) -> Self {
        let mut error = Self::new(429, "TooManyRequests", message);
        error.details = Some(json!({"causes": causes}));
        error
    }

    /// An injected fault, with the status code the fault plan asked for.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            409 => "Conflict",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Unknown",
        };
        Self::new(code, reason, format!("injected fault: {code} {reason}"))
    }

    pub fn status_body(&self) -> Value {
        let mut body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        // Status omits an empty reason (a webhook's denial may have none); kubectl then prints no "(Reason)".
        if self.reason.is_empty() {
            body.as_object_mut().expect("built as an object").remove("reason");
        }
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }
}
