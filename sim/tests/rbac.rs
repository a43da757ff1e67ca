//! RBAC for ServiceAccount tokens: the repository's `manifests/` installed, the `wasp` ServiceAccount's token
//! from a TokenRequest, and what its ClusterRole and Role allow and refuse, through kube-rs.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use wasp_sim::{Scenario, Simulator, SimulatorOptions};

const ACCOUNT: &str = "system:serviceaccount:wasp-system:wasp";

fn client(simulator: &Simulator, token: &str) -> Client {
    let mut config = kube::Config::new(simulator.url().parse().unwrap());
    config.default_retry = false;
    config.auth_info.token = Some(token.to_string().into());
    Client::try_from(config).unwrap()
}

/// The path a manifest's object is created at.
fn collection(object: &Value) -> String {
    let namespace = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let api_version = object["apiVersion"].as_str().unwrap();
    let base = if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
    let (plural, namespaced) = match object["kind"].as_str().unwrap() {
        "Namespace" => ("namespaces", false),
        "CustomResourceDefinition" => ("customresourcedefinitions", false),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "ConfigMap" => ("configmaps", true),
        "Deployment" => ("deployments", true),
        "Service" => ("services", true),
        "PodDisruptionBudget" => ("poddisruptionbudgets", true),
        "ValidatingWebhookConfiguration" => ("validatingwebhookconfigurations", false),
        "MutatingWebhookConfiguration" => ("mutatingwebhookconfigurations", false),
        kind => panic!("no path for {kind}"),
    };
    if namespaced {
        format!("{base}/namespaces/{namespace}/{plural}")
    } else {
        format!("{base}/{plural}")
    }
}

async fn post(client: &Client, path: &str, body: &Value) -> Result<Value, kube::Error> {
    let request = http::Request::post(path).header("content-type", "application/json").body(serde_json::to_vec(body).unwrap()).unwrap();
    client.request::<Value>(request).await
}

/// Installs every manifest of the repository's `manifests/` (top level, in file order) as the admin.
async fn install_manifests(admin: &Client) {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    let mut files: Vec<_> =
        std::fs::read_dir(&directory).unwrap().map(|entry| entry.unwrap().path()).filter(|path| path.extension().is_some_and(|ext| ext == "yaml")).collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let object: Value = serde::Deserialize::deserialize(document).unwrap();
            if object.is_null() {
                continue;
            }
            post(admin, &collection(&object), &object).await.unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        }
    }
}

async fn start() -> (Simulator, Client, Client) {
    let scenario = Scenario::parse("nodeGroups: [{name: worker, count: 2, cpu: '4', memory: 16Gi}]\n").unwrap();
    let options = SimulatorOptions { history: 1000, require_auth: true, ..Default::default() };
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let admin = client(&simulator, wasp_sim::auth::ADMIN_TOKEN);
    install_manifests(&admin).await;
    let answer = post(
        &admin,
        "/api/v1/namespaces/wasp-system/serviceaccounts/wasp/token",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
    )
    .await
    .unwrap();
    let token = answer.pointer("/status/token").and_then(Value::as_str).unwrap().to_string();
    assert_eq!(token, simulator.service_account_token("wasp-system", "wasp").unwrap());
    let account = client(&simulator, &token);
    (simulator, admin, account)
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"schedulerName": "wasp", "containers": [{"name": "app", "image": "x"}]}})).unwrap()
}

#[track_caller]
fn assert_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, message: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(status.reason, "Forbidden");
            assert_eq!(status.message, message);
        }
        other => panic!("expected 403 {message:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasp_service_account_may_do_what_its_roles_allow_and_nothing_else() {
    let (simulator, admin, account) = start().await;
    Api::<Pod>::namespaced(admin.clone(), "default").create(&PostParams::default(), &pod("x")).await.unwrap();

    // The manifests' own Deployment gets its two replicas from the simulator's controller, asynchronously.
    let system_pods: Api<Pod> = Api::namespaced(admin.clone(), "wasp-system");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while system_pods.list(&ListParams::default()).await.unwrap().items.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "the wasp Deployment's replicas never appeared");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // The ClusterRole: nodes and pods read and watched, pods bound, pod status patched, events created.
    let nodes: Api<Node> = Api::all(account.clone());
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 2);
    let all_pods: Api<Pod> = Api::all(account.clone());
    // x, and the two replicas of the manifests' own Deployment.
    assert_eq!(all_pods.list(&ListParams::default()).await.unwrap().items.len(), 3);
    let _stream = all_pods.watch(&WatchParams::default().timeout(1), "0").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(account.clone(), "default");
    pods.get("x").await.unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "x"}, "target": {"kind": "Node", "name": "worker-0"}});
    post(&account, "/api/v1/namespaces/default/pods/x/binding", &binding).await.unwrap();
    let condition = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
    pods.patch_status("x", &PatchParams::default(), &Patch::Merge(condition)).await.unwrap();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "x.1"}, "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
        "reason": "Scheduled", "message": "bound", "type": "Normal",
    }))
    .unwrap();
    Api::<Event>::namespaced(account.clone(), "default").create(&PostParams::default(), &event).await.unwrap();

    // The Role: its own Lease created, read and renewed by name; no other.
    let leases: Api<Lease> = Api::namespaced(account.clone(), "wasp-system");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "wasp-scheduler"}, "spec": {"holderIdentity": "a"}})).unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut renewed = leases.get("wasp-scheduler").await.unwrap();
    renewed.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases.replace("wasp-scheduler", &PostParams::default(), &renewed).await.unwrap();

    assert_forbidden(
        pods.delete("x", &DeleteParams::default()).await,
        &format!("pods \"x\" is forbidden: User \"{ACCOUNT}\" cannot delete resource \"pods\" in API group \"\" in the namespace \"default\""),
    );
    assert_forbidden(
        leases.get("other").await,
        &format!("leases.coordination.k8s.io \"other\" is forbidden: User \"{ACCOUNT}\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"wasp-system\""),
    );
    // The Role is bound in wasp-system only.
    assert_forbidden(
        Api::<Lease>::namespaced(account.clone(), "default").get("wasp-scheduler").await,
        &format!("leases.coordination.k8s.io \"wasp-scheduler\" is forbidden: User \"{ACCOUNT}\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\""),
    );
    assert_forbidden(
        Api::<Node>::all(account.clone()).delete("worker-0", &DeleteParams::default()).await,
        &format!("nodes \"worker-0\" is forbidden: User \"{ACCOUNT}\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope"),
    );
    // The Status names the resource.
    let Err(kube::Error::Api(status)) = pods.delete("x", &DeleteParams::default()).await else { panic!("not refused") };
    let details = status.details.expect("details");
    assert_eq!((details.name.as_str(), details.group.as_str(), details.kind.as_str()), ("x", "", "pods"));

    // Unauthenticated requests are refused when auth is required; an unknown token always is.
    let mut anonymous = kube::Config::new(simulator.url().parse().unwrap());
    anonymous.default_retry = false;
    let anonymous = Client::try_from(anonymous).unwrap();
    let refused = Api::<Pod>::all(anonymous).list(&ListParams::default()).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref status)) if status.code == 401), "{refused:?}");
    let stranger = client(&simulator, "wasp-sim:sa:wasp-system:wasp:not-its-uid");
    assert!(matches!(Api::<Pod>::all(stranger).list(&ListParams::default()).await, Err(kube::Error::Api(ref status)) if status.code == 401));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_removed_from_the_cluster_role_is_refused() {
    let (_simulator, admin, account) = start().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&PostParams::default(), &pod("x")).await.unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let mut role = roles.get("wasp-scheduler").await.unwrap();
    let rules = role.rules.as_mut().unwrap();
    let before = rules.len();
    rules.retain(|rule| !rule.resources.as_ref().is_some_and(|resources| resources.iter().any(|resource| resource == "pods/binding")));
    assert_eq!(rules.len(), before - 1);
    roles.replace("wasp-scheduler", &PostParams::default(), &role).await.unwrap();

    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "x"}, "target": {"kind": "Node", "name": "worker-0"}});
    assert_forbidden(
        post(&account, "/api/v1/namespaces/default/pods/x/binding", &binding).await,
        &format!("pods \"x\" is forbidden: User \"{ACCOUNT}\" cannot create resource \"pods/binding\" in API group \"\" in the namespace \"default\""),
    );
    // What the other rules allow still works.
    Api::<Pod>::namespaced(account, "default").get("x").await.unwrap();
}
