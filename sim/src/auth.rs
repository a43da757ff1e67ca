//! Authentication by bearer token and RBAC authorization for ServiceAccount tokens.
//!
//! - The kubeconfig's token ([`ADMIN_TOKEN`]) is all-powerful, like cluster-admin.
//! - A ServiceAccount token (`POST .../serviceaccounts/{name}/token`, a TokenRequest, or
//!   [`service_account_token`]) is `wasp-sim:sa:<namespace>:<name>:<uid>`: valid while that ServiceAccount
//!   (with that uid) exists. Not a secret: the simulator is no security boundary.
//! - Without a token: allowed, unless [`crate::SimulatorOptions::require_auth`] (then 401).
//! - A ServiceAccount is authorized by the rules of the Roles and ClusterRoles bound to it (or to its groups
//!   `system:serviceaccounts`, `system:serviceaccounts:<namespace>`, `system:authenticated`), as kube-apiserver's
//!   RBAC authorizer does; a refusal is kube-apiserver's 403 `Forbidden` Status.

use crate::error::ApiError;
use crate::resources::{self, ResourceType};
use crate::store::{namespace_of, Store};
use serde_json::{json, Value};

/// The token of the simulator's kubeconfig.
pub const ADMIN_TOKEN: &str = "wasp-sim";
const PREFIX: &str = "wasp-sim:sa:";

/// Who is asking.
#[derive(Debug, Clone, PartialEq)]
pub enum User {
    Admin,
    /// No credentials and auth not required.
    Anonymous,
    ServiceAccount {
        namespace: String,
        name: String,
    },
}

impl User {
    pub fn username(&self) -> String {
        match self {
            User::Admin => "wasp-sim-admin".into(),
            User::Anonymous => "system:anonymous".into(),
            User::ServiceAccount { namespace, name } => format!("system:serviceaccount:{namespace}:{name}"),
        }
    }

    fn groups(&self) -> Vec<String> {
        match self {
            User::ServiceAccount { namespace, .. } => {
                vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}"), "system:authenticated".into()]
            }
            _ => Vec::new(),
        }
    }

    /// `authentication.k8s.io/v1` UserInfo, as admission webhooks receive it. The admin is in `system:masters`
    /// (what the kubeconfig of a kind or kubeadm cluster is); RBAC here never looks at these two groups.
    pub fn user_info(&self) -> Value {
        let groups = match self {
            User::Admin => vec!["system:masters".into(), "system:authenticated".into()],
            User::Anonymous => vec!["system:unauthenticated".into()],
            User::ServiceAccount { .. } => self.groups(),
        };
        json!({"username": self.username(), "groups": groups})
    }
}

/// What a request does, in RBAC's terms.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    pub verb: &'a str,
    pub resource: &'static ResourceType,
    pub subresource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

fn service_accounts() -> &'static ResourceType {
    resources::find("", "v1", "serviceaccounts").expect("served")
}

/// The token of a ServiceAccount that exists.
pub fn service_account_token(store: &Store, namespace: &str, name: &str) -> Result<String, ApiError> {
    let account = store.get(service_accounts(), Some(namespace), name)?;
    let uid = account.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    Ok(format!("{PREFIX}{namespace}:{name}:{uid}"))
}

/// The TokenRequest answer for `POST /api/v1/namespaces/{namespace}/serviceaccounts/{name}/token`.
pub fn token_request(store: &Store, namespace: &str, name: &str, request: &Value) -> Result<Value, ApiError> {
    let token = service_account_token(store, namespace, name)?;
    let seconds = request.pointer("/spec/expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
    let expires =
        jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap_or(jiff::Timestamp::MAX).strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Ok(json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": crate::store::now_rfc3339()},
        "spec": {"audiences": request.pointer("/spec/audiences").cloned().unwrap_or(json!([])), "expirationSeconds": seconds},
        "status": {"token": token, "expirationTimestamp": expires},
    }))
}

fn unauthorized() -> ApiError {
    ApiError { code: 401, reason: "Unauthorized", message: "Unauthorized".into(), details: None }
}

/// Who presents `authorization` (the header's value, if any).
pub fn authenticate(store: &Store, authorization: Option<&str>, require_auth: bool) -> Result<User, ApiError> {
    let Some(header) = authorization else {
        return if require_auth { Err(unauthorized()) } else { Ok(User::Anonymous) };
    };
    let token = header.strip_prefix("Bearer ").map(str::trim).ok_or_else(unauthorized)?;
    if token == ADMIN_TOKEN {
        return Ok(User::Admin);
    }
    let rest = token.strip_prefix(PREFIX).ok_or_else(unauthorized)?;
    let mut parts = rest.splitn(3, ':');
    let (Some(namespace), Some(name), Some(uid)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(unauthorized());
    };
    let account = store.get(service_accounts(), Some(namespace), name).map_err(|_| unauthorized())?;
    if account.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
        return Err(unauthorized());
    }
    Ok(User::ServiceAccount { namespace: namespace.into(), name: name.into() })
}

fn rbac(plural: &str) -> &'static ResourceType {
    resources::find("rbac.authorization.k8s.io", "v1", plural).expect("served")
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn rule_allows(rule: &Value, attributes: &Attributes) -> bool {
    let verb_ok = strings(&rule["verbs"]).any(|verb| verb == "*" || verb == attributes.verb);
    let group_ok = strings(&rule["apiGroups"]).any(|group| group == "*" || group == attributes.resource.group);
    let plural = attributes.resource.plural;
    let resource_ok = strings(&rule["resources"]).any(|resource| {
        if attributes.subresource.is_empty() {
            resource == "*" || resource == plural
        } else {
            resource == "*"
                || resource == format!("{plural}/{}", attributes.subresource)
                || resource == format!("*/{}", attributes.subresource)
                || resource == format!("{plural}/*")
        }
    });
    let names: Vec<&str> = strings(&rule["resourceNames"]).collect();
    let name_ok = names.is_empty() || (!attributes.name.is_empty() && names.contains(&attributes.name));
    verb_ok && group_ok && resource_ok && name_ok
}

fn binds(binding: &Value, user: &User) -> bool {
    let User::ServiceAccount { namespace, name } = user else { return false };
    let groups = user.groups();
    binding["subjects"].as_array().into_iter().flatten().any(|subject| match subject["kind"].as_str() {
        Some("ServiceAccount") => {
            subject["name"].as_str() == Some(name.as_str()) && subject["namespace"].as_str().unwrap_or(namespace_of(binding)) == namespace.as_str()
        }
        Some("User") => subject["name"].as_str() == Some(user.username().as_str()),
        Some("Group") => subject["name"].as_str().is_some_and(|group| groups.iter().any(|mine| mine == group)),
        _ => false,
    })
}

/// The rules of the role a binding refers to (`None` if it does not exist).
fn role_rules(store: &Store, binding: &Value) -> Option<Value> {
    let role_name = binding.pointer("/roleRef/name").and_then(Value::as_str)?;
    let role = match binding.pointer("/roleRef/kind").and_then(Value::as_str)? {
        "ClusterRole" => store.get(rbac("clusterroles"), None, role_name).ok()?,
        "Role" => store.get(rbac("roles"), Some(namespace_of(binding)), role_name).ok()?,
        _ => return None,
    };
    Some(role["rules"].clone())
}

/// Whether RBAC lets `user` do what `attributes` describe.
pub fn allowed(store: &Store, user: &User, attributes: &Attributes) -> bool {
    if !matches!(user, User::ServiceAccount { .. }) {
        return true;
    }
    let allows = |binding: &Value| {
        binds(binding, user) && role_rules(store, binding).is_some_and(|rules| rules.as_array().into_iter().flatten().any(|rule| rule_allows(rule, attributes)))
    };
    if store.all(rbac("clusterrolebindings")).iter().any(|binding| allows(binding)) {
        return true;
    }
    // RoleBindings grant within their own namespace only.
    match attributes.namespace.filter(|_| attributes.resource.namespaced) {
        Some(namespace) => store.all_in(rbac("rolebindings"), namespace).iter().any(|binding| allows(binding)),
        None => false,
    }
}

/// kube-apiserver's refusal: `pods "x" is forbidden: User "system:serviceaccount:ns:sa" cannot create resource
/// "pods/binding" in API group "" in the namespace "default"`.
pub fn forbidden(user: &User, attributes: &Attributes) -> ApiError {
    let resource = attributes.resource;
    let full = if attributes.subresource.is_empty() { resource.plural.to_string() } else { format!("{}/{}", resource.plural, attributes.subresource) };
    let scope = match attributes.namespace.filter(|_| resource.namespaced) {
        Some(namespace) => format!("in the namespace \"{namespace}\""),
        None => "at the cluster scope".into(),
    };
    let reason = format!("User \"{}\" cannot {} resource \"{full}\" in API group \"{}\" {scope}", user.username(), attributes.verb, resource.group);
    ApiError::forbidden(resource.plural, resource.group, attributes.name, &reason)
}
