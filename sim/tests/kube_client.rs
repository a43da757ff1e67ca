//! The simulator through kube-rs, the way the host talks to a cluster: real HTTP on a loopback port.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::time::Duration;
use wasp_sim::{Scenario, Simulator, SimulatorOptions};

const SCENARIO: &str = r#"
name: test
kubelet: {readyDelay: 50ms, terminationDelay: 50ms}
nodeGroups:
- {name: worker, count: 3, cpu: "4", memory: 16Gi, zones: [a, b]}
workloads:
- {name: web, replicas: 2, schedulerName: wasp, cpu: 500m, memory: 256Mi, pdb: {minAvailable: 2}}
"#;

/// Three nodes and nothing running: nothing changes unless the test changes it.
const QUIET: &str = "nodeGroups: [{name: worker, count: 3, cpu: '4', memory: 16Gi}]\n";

async fn start(scenario: &str) -> (Simulator, Client) {
    start_with(scenario, SimulatorOptions { history: 1000, ..Default::default() }).await
}

async fn start_with(scenario: &str, options: SimulatorOptions) -> (Simulator, Client) {
    let scenario = Scenario::parse(scenario).unwrap();
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let mut config = kube::Config::new(simulator.url().parse().unwrap());
    // kube-rs retries 429/503/504 for minutes by default; these tests want to see each answer.
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    (simulator, client)
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "test"}},
        "spec": {"schedulerName": "wasp", "containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]}
    }))
    .unwrap()
}

async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(value) = probe().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_selectors_and_conflicts() {
    let (_simulator, client) = start(SCENARIO).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods.create(&PostParams::default(), &pod("solo")).await.unwrap();
    assert_eq!(created.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert!(created.metadata.uid.is_some());

    // Label and field selectors.
    eventually("two web pods and solo pending for wasp", async || {
        let unassigned = pods.list(&ListParams::default().fields("spec.nodeName=,spec.schedulerName=wasp")).await.unwrap();
        (unassigned.items.len() == 3).then_some(())
    })
    .await;
    let labelled = pods.list(&ListParams::default().labels("app=test")).await.unwrap();
    assert_eq!(labelled.items.len(), 1);
    let nodes: Api<Node> = Api::all(client.clone());
    let zone_a = nodes.list(&ListParams::default().labels("topology.kubernetes.io/zone in (a)")).await.unwrap();
    assert_eq!(zone_a.items.len(), 2);

    // Paging.
    let first = nodes.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().unwrap();
    let rest = nodes.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(rest.items.len(), 1);

    // Optimistic concurrency: a stale resourceVersion is a 409 Conflict.
    let mut stale = created.clone();
    pods.patch("solo", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}}))).await.unwrap();
    stale.metadata.labels.as_mut().unwrap().insert("v".into(), "3".into());
    match pods.replace("solo", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (409, "Conflict")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    // So is one in a merge patch (kube-scheduler's volume binder writes a claimRef that way); a current one is not.
    let stale_version = json!({"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {"v": "4"}}});
    match pods.patch("solo", &PatchParams::default(), &Patch::Merge(&stale_version)).await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (409, "Conflict")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let current = pods.get("solo").await.unwrap().metadata.resource_version;
    let patched =
        pods.patch("solo", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"resourceVersion": current, "labels": {"v": "5"}}}))).await.unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["v"], "5");

    // JSON patch and strategic merge (cordon).
    let patched = pods
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}])).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.annotations.unwrap()["a"], "b");
    let cordoned = nodes.patch("worker-0", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"unschedulable": true}}))).await.unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));

    // Unbound pods are deleted at once; errors are Status objects with the right reason.
    pods.delete("solo", &DeleteParams::default()).await.unwrap();
    match pods.get("solo").await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str(), status.message.as_str()), (404, "NotFound", "pods \"solo\" not found"))
        }
        other => panic!("expected not found, got {other:?}"),
    }
    match pods.create(&PostParams::default(), &pod("web-x")).await.and(pods.create(&PostParams::default(), &pod("web-x")).await) {
        Err(kube::Error::Api(status)) => assert_eq!(status.reason, "AlreadyExists"),
        other => panic!("expected already exists, got {other:?}"),
    }
}

/// The audit log holds what the server was asked and how it answered: a second binding shows as a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_each_request_to_a_resource_with_its_answer() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("audit.log");
    let (_simulator, client) = start_with(QUIET, SimulatorOptions { audit_log: Some(path.clone()), ..Default::default() }).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("audited")).await.unwrap();
    let binding =
        |node: &str| serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "audited"}, "target": {"kind": "Node", "name": node}});
    for node in ["worker-0", "worker-1"] {
        let request = http::Request::post("/api/v1/namespaces/default/pods/audited/binding")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&binding(node)).unwrap())
            .unwrap();
        let _ = client.request::<serde_json::Value>(request).await;
    }
    assert!(pods.get("missing").await.is_err());
    let recorded: Vec<(String, String, String, String, u16)> = wasp_sim::audit::AuditLog::read(&path)
        .unwrap()
        .into_iter()
        .map(|entry| (entry.verb, entry.resource, entry.subresource, entry.name, entry.code))
        .collect();
    let expected = |verb: &str, subresource: &str, name: &str, code| (verb.to_string(), "pods".to_string(), subresource.to_string(), name.to_string(), code);
    assert_eq!(
        recorded,
        [
            expected("create", "", "", 201),
            expected("create", "binding", "audited", 201),
            expected("create", "binding", "audited", 409),
            expected("get", "", "missing", 404)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_starts_the_pod_and_cannot_happen_twice() {
    let (_simulator, client) = start(SCENARIO).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("bind-me")).await.unwrap();
    let binding = |node: &str| Binding {
        metadata: ObjectMeta { name: Some("bind-me".into()), ..Default::default() },
        target: ObjectReference { kind: Some("Node".into()), name: Some(node.into()), ..Default::default() },
    };
    let url = "/api/v1/namespaces/default/pods/bind-me/binding";
    let request = |node: &str| http::Request::post(url).header("content-type", "application/json").body(serde_json::to_vec(&binding(node)).unwrap()).unwrap();
    client.request::<serde_json::Value>(request("worker-1")).await.unwrap();
    match client.request::<serde_json::Value>(request("worker-2")).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409);
            assert!(status.message.contains("is already assigned to node \"worker-1\""), "{}", status.message);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let running = eventually("the pod to run", async || {
        let pod = pods.get("bind-me").await.unwrap();
        (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
    })
    .await;
    assert_eq!(running.spec.unwrap().node_name.as_deref(), Some("worker-1"));
    let ready = running.status.unwrap().conditions.unwrap().into_iter().any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(ready);
}

/// A started pod's `hostIP` is its node's InternalIP, also after the node's address changes (the simulated
/// kubelets keep each node's address rather than read the node for every pod).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_pod_has_its_nodes_address() {
    let (_simulator, client) = start(QUIET).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let internal_ip =
        |node: &Node| node.status.as_ref()?.addresses.as_ref()?.iter().find(|address| address.type_ == "InternalIP").map(|address| address.address.clone());
    let started_on = async |name: &str, node: &str| {
        pods.create(&PostParams::default(), &pod(name)).await.unwrap();
        bind(&client, name, node).await;
        eventually("the pod to run", async || {
            let status = pods.get(name).await.unwrap().status?;
            (status.phase.as_deref() == Some("Running")).then_some(status.host_ip)?
        })
        .await
    };
    let first = internal_ip(&nodes.get("worker-1").await.unwrap()).expect("nodes have an InternalIP");
    assert_eq!(started_on("before", "worker-1").await, first);
    let patch = json!({"status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.77"}, {"type": "Hostname", "address": "worker-1"}]}});
    nodes.patch_status("worker-1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(started_on("after", "worker-1").await, "192.0.2.77");
}

async fn bind(client: &Client, name: &str, node: &str) {
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
    let request = http::Request::post(format!("/api/v1/namespaces/default/pods/{name}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    client.request::<serde_json::Value>(request).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_respects_disruption_budgets() {
    let (_simulator, client) = start(SCENARIO).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let web = eventually("the deployment's pods", async || {
        let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
        (list.items.len() == 2).then_some(list.items)
    })
    .await;
    for (index, pod) in web.iter().enumerate() {
        bind(&client, pod.metadata.name.as_deref().unwrap(), &format!("worker-{index}")).await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    eventually("the budget to count two healthy pods", async || {
        let status = pdbs.get("web").await.unwrap().status?;
        (status.current_healthy == Some(2)).then_some(())
    })
    .await;
    let victim = web[0].metadata.name.clone().unwrap();
    let eviction = Eviction { metadata: ObjectMeta { name: Some(victim.clone()), ..Default::default() }, ..Default::default() };
    let request = http::Request::post(format!("/api/v1/namespaces/default/pods/{victim}/eviction"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&eviction).unwrap())
        .unwrap();
    match client.request::<serde_json::Value>(request).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"));
            assert_eq!(status.message, "Cannot evict pod as it would violate the pod's disruption budget.");
        }
        other => panic!("expected 429, got {other:?}"),
    }
    // Loosen the budget: the eviction goes through and the pod terminates.
    pdbs.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 1}}))).await.unwrap();
    eventually("the eviction to be allowed", async || {
        let request = http::Request::post(format!("/api/v1/namespaces/default/pods/{victim}/eviction"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&eviction).unwrap())
            .unwrap();
        client.request::<serde_json::Value>(request).await.ok()
    })
    .await;
    eventually("the evicted pod to be gone", async || pods.get_opt(&victim).await.unwrap().is_none().then_some(())).await;
}

/// With `maxUnavailable`, the pods a budget expects are what their controller wants, as the disruption
/// controller counts them: an evicted pod still terminating beside its replacement is not counted twice, so
/// `maxUnavailable: 2` allows two evictions in a row, as kube-apiserver does, and refuses the third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_unavailable_counts_the_controllers_replicas_not_the_terminating_pods() {
    let scenario = "kubelet: {readyDelay: 50ms, terminationDelay: 60s}\nnodeGroups: [{name: worker, count: 2, cpu: '4', memory: 16Gi}]\n\
                    workloads: [{name: web, replicas: 4, schedulerName: wasp, cpu: 100m, memory: 64Mi, pdb: {maxUnavailable: 2}}]\n";
    let (_simulator, client) = start(scenario).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let web = eventually("the deployment's pods", async || {
        let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
        (list.items.len() == 4).then_some(list.items)
    })
    .await;
    for pod in &web {
        bind(&client, pod.metadata.name.as_deref().unwrap(), "worker-0").await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    eventually("the budget to count four healthy pods", async || (pdbs.get("web").await.unwrap().status?.current_healthy == Some(4)).then_some(())).await;
    let evict = |victim: String| {
        let client = client.clone();
        async move {
            let eviction = Eviction { metadata: ObjectMeta { name: Some(victim.clone()), ..Default::default() }, ..Default::default() };
            let request = http::Request::post(format!("/api/v1/namespaces/default/pods/{victim}/eviction"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&eviction).unwrap())
                .unwrap();
            client.request::<serde_json::Value>(request).await.map(drop).map_err(|error| error.to_string())
        }
    };
    let name = |index: usize| web[index].metadata.name.clone().unwrap();
    assert_eq!(evict(name(0)).await, Ok(()));
    // The first one terminates (for a minute) beside its replacement, which is not Ready (nothing binds it).
    eventually("the replacement", async || (pods.list(&ListParams::default().labels("app=web")).await.unwrap().items.len() == 5).then_some(())).await;
    assert_eq!(evict(name(1)).await, Ok(()), "4 wanted, 2 healthy may go: the terminating pod is not expected twice");
    let third = evict(name(2)).await.unwrap_err();
    assert!(third.contains("TooManyRequests"), "two are gone, two must stay: {third}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_scale_through_the_scale_subresource() {
    let (_simulator, client) = start(SCENARIO).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let count = async || {
        pods.list(&ListParams::default().labels("app=web")).await.unwrap().items.iter().filter(|pod| pod.metadata.deletion_timestamp.is_none()).count()
    };
    eventually("two pods", async || (count().await == 2).then_some(())).await;
    let scale = deployments.patch_scale("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(5));
    eventually("five pods", async || (count().await == 5).then_some(())).await;
    let owner = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items[0].metadata.owner_references.clone().unwrap();
    assert_eq!(owner[0].kind, "ReplicaSet");
    assert!(pods.list(&ListParams::default().labels("app=web")).await.unwrap().items[0].metadata.labels.as_ref().unwrap().contains_key("pod-template-hash"));
    deployments.patch_scale("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually("one pod", async || (count().await == 1).then_some(())).await;
    let status = eventually("the deployment status", async || {
        let status = deployments.get("web").await.unwrap().status?;
        (status.replicas == Some(1)).then_some(status)
    })
    .await;
    assert_eq!(status.observed_generation, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_from_a_version_and_expires_when_too_old() {
    let (simulator, client) = start(QUIET).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let listed = pods.list(&ListParams::default()).await.unwrap();
    let version = listed.metadata.resource_version.unwrap();
    let mut stream = pods.watch(&WatchParams::default().timeout(5), &version).await.unwrap().boxed();
    pods.create(&PostParams::default(), &pod("watched")).await.unwrap();
    let added = loop {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(pod) if pod.metadata.name.as_deref() == Some("watched") => break pod,
            _ => {}
        }
    };
    drop(stream);
    // The stream dropped; resume from the last version seen: nothing is missed.
    pods.create(&PostParams::default(), &pod("after-drop")).await.unwrap();
    let resume = added.metadata.resource_version.unwrap();
    let mut resumed = pods.watch(&WatchParams::default().timeout(5), &resume).await.unwrap().boxed();
    match resumed.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(pod) => assert_eq!(pod.metadata.name.as_deref(), Some("after-drop")),
        other => panic!("expected the missed pod, got {other:?}"),
    }
    // A version older than the retained history is 410 Gone, and the client relists.
    for index in 0..1010 {
        simulator
            .store
            .mutate(wasp_sim::resources::nodes(), None, "worker-0", |node| {
                node["metadata"]["labels"]["churn"] = json!(index.to_string());
                Ok(())
            })
            .unwrap();
    }
    let mut expired = pods.watch(&WatchParams::default(), &resume).await.unwrap().boxed();
    match expired.try_next().await {
        Ok(Some(WatchEvent::Error(status))) => assert_eq!(status.code, 410),
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_apis_serve_the_load_model() {
    let (_simulator, client) = start(
        "nodeGroups: [{name: n, count: 1, cpu: '8', memory: 16Gi}]\nkubelet: {readyDelay: 10ms}\nworkloads:\n- name: api\n  kind: Pods\n  replicas: 2\n  cpu: '1'\n  memory: 1Gi\n  load: {cpu: [{at: 0s, value: 0.5}], qps: [{at: 0s, value: 300}]}\n",
    )
    .await;
    for index in 0..2 {
        bind(&client, &format!("api-{index}"), "n-0").await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually("both pods running", async || {
        let list = pods.list(&ListParams::default()).await.unwrap();
        list.items.iter().all(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).then_some(())
    })
    .await;
    let request = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();
    let pod_metrics: serde_json::Value = client.request(request("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")).await.unwrap();
    assert_eq!(pod_metrics["items"].as_array().unwrap().len(), 2);
    assert_eq!(pod_metrics["items"][0]["containers"][0]["usage"]["cpu"], "500000000n", "half of a 1 CPU request");
    let node_metrics: serde_json::Value = client.request(request("/apis/metrics.k8s.io/v1beta1/nodes/n-0")).await.unwrap();
    assert_eq!(node_metrics["usage"]["cpu"], "1000000000n");
    let custom: serde_json::Value = client.request(request("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/requests_per_second")).await.unwrap();
    assert_eq!(custom["items"][0]["value"], "150000m", "300 rps over two ready pods");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_status_errors_and_changes_nothing() {
    let (simulator, client) = start(QUIET).await;
    let before = simulator.store.revision();
    let post = |path: &str, body: &str| http::Request::post(path).header("content-type", "application/json").body(body.as_bytes().to_vec()).unwrap();
    let cases = [
        (post("/api/v1/namespaces/default/pods", "{not json"), 400, "BadRequest"),
        (post("/api/v1/namespaces/default/pods", r#"{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "x"}}"#), 400, "BadRequest"),
        (post("/api/v1/namespaces/default/pods", r#"{"metadata": {}, "spec": {"containers": [{"name": "a"}]}}"#), 422, "Invalid"),
        (post("/api/v1/namespaces/default/pods", r#"{"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "a"}]}}"#), 422, "Invalid"),
        (post("/api/v1/namespaces/default/pods", r#"{"metadata": {"name": "empty"}, "spec": {"containers": []}}"#), 422, "Invalid"),
        (post("/api/v1/namespaces/nowhere/pods", r#"{"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a"}]}}"#), 404, "NotFound"),
        (http::Request::get("/api/v1/pods?labelSelector=a%20in%20b").body(Vec::new()).unwrap(), 400, "BadRequest"),
        (http::Request::get("/api/v1/widgets").body(Vec::new()).unwrap(), 404, "NotFound"),
        (
            post(
                "/api/v1/namespaces/default/pods?fieldValidation=Strict",
                r#"{"metadata": {"name": "x"}, "spek": {}, "spec": {"containers": [{"name": "a"}]}}"#,
            ),
            400,
            "BadRequest",
        ),
    ];
    for (request, code, reason) in cases {
        let path = request.uri().to_string();
        match client.request::<serde_json::Value>(request).await {
            Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (code, reason), "{path}: {}", status.message),
            other => panic!("{path}: expected {code} {reason}, got {other:?}"),
        }
    }
    assert_eq!(simulator.store.revision(), before, "no failed request wrote anything");
    // Without strict validation an unknown field is dropped, as the API server does by default.
    let created: serde_json::Value =
        client.request(post("/api/v1/namespaces/default/configmaps", r#"{"metadata": {"name": "c"}, "data": {"k": "v"}, "colour": "blue"}"#)).await.unwrap();
    assert!(created.get("colour").is_none());
    assert_eq!(created["data"]["k"], "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_delay_fail_and_cut_watches_which_clients_survive() {
    let scenario = r#"
faults:
  dropWatchesAfter: 300ms
  rules:
  - {verbs: [get], resources: [nodes], latency: 200ms}
  - {verbs: [list], resources: [configmaps], errorRate: 1.0, status: 503}
nodeGroups: [{name: worker, count: 1, cpu: "4", memory: 16Gi}]
"#;
    let (_simulator, client) = start(scenario).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let started = std::time::Instant::now();
    nodes.get("worker-0").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200), "latency injected: {:?}", started.elapsed());
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
    match configmaps.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (503, "ServiceUnavailable")),
        other => panic!("expected 503, got {other:?}"),
    }

    // Watches are cut every 300 ms; kube-runtime's watcher resumes from its last version and misses nothing.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let collector = {
        let seen = seen.clone();
        let stream = kube::runtime::watcher(pods.clone(), kube::runtime::watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(pod) | kube::runtime::watcher::Event::InitApply(pod)) = event {
                    seen.lock().unwrap().insert(pod.metadata.name.unwrap());
                }
            }
        })
    };
    for index in 0..6 {
        pods.create(&PostParams::default(), &pod(&format!("p{index}"))).await.unwrap();
        // Part of the scenario, not a wait for a result: creations spread over several watch lifetimes, so some
        // fall between a dropped watch and its resumption. The outcome is awaited on a condition below.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    eventually("every pod seen across dropped watches", async || (seen.lock().unwrap().len() == 6).then_some(())).await;
    collector.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_carry_the_current_version() {
    let scenario = Scenario::parse(QUIET).unwrap();
    let options = SimulatorOptions { bookmark_interval: Duration::from_millis(100), ..Default::default() };
    let simulator = Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let client = Client::try_from(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let nodes: Api<Node> = Api::all(client);
    let version = nodes.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = nodes.watch(&WatchParams { bookmarks: true, ..WatchParams::default().timeout(5) }, &version).await.unwrap().boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(bookmark) => assert_eq!(bookmark.metadata.resource_version, version),
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

/// The vanished pod: a bound pod deleted (graceful, so only marked) gets a removal timer from each event seen
/// while it terminates. The first timer removes it; a pod created again under its name must not be removed by
/// a later timer of the old pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_again_under_a_deleted_ones_name_is_not_removed_by_its_timers() {
    let (_simulator, client) = start(&format!("kubelet: {{readyDelay: 10ms, terminationDelay: 300ms}}\n{QUIET}")).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p0")).await.unwrap();
    bind(&client, "p0", "worker-0").await;
    pods.delete("p0", &DeleteParams::default()).await.unwrap();
    // Another event of the terminating pod, deliberately later: a second removal timer, due 150ms after the first.
    tokio::time::sleep(Duration::from_millis(150)).await;
    pods.patch("p0", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}))).await.unwrap();
    eventually("the old p0 gone", async || pods.get_opt("p0").await.unwrap().is_none().then_some(())).await;
    let again = pods.create(&PostParams::default(), &pod("p0")).await.unwrap();
    bind(&client, "p0", "worker-1").await;
    // A check that something does NOT happen: wait past the old timers' due time (300 ms after the later event),
    // then look. No condition can replace this wait; it can only make the test pass wrongly, never fail wrongly.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let current = pods.get_opt("p0").await.unwrap().expect("the new p0 still exists");
    assert_eq!(current.metadata.uid, again.metadata.uid);
}

/// Claims as a CSI driver with zonal disks serves them: `WaitForFirstConsumer` waits for the scheduler's node and
/// provisions in its zone, `Immediate` provisions at once, a claim naming a volume is bound to it, and a deleted
/// claim takes its provisioned volume with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_provisioned_where_the_scheduler_says() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    let (_simulator, client) = start(SCENARIO).await;
    let classes: Api<StorageClass> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for (name, mode) in [("zonal", "WaitForFirstConsumer"), ("eager", "Immediate")] {
        let class = json!({"metadata": {"name": name}, "provisioner": "disk.csi.example.com", "volumeBindingMode": mode});
        classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    }
    let claim = |name: &str, class: &str| {
        serde_json::from_value::<PersistentVolumeClaim>(json!({
            "metadata": {"name": name}, "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}
        }))
        .unwrap()
    };
    let bound = async |name: &str| {
        eventually("the claim to be bound", async || {
            let claim = claims.get(name).await.unwrap();
            (claim.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(claim)
        })
        .await
    };
    let zone_of = |volume: &PersistentVolume| {
        let term = &volume.spec.as_ref().unwrap().node_affinity.as_ref().unwrap().required.as_ref().unwrap().node_selector_terms[0];
        let expression = &term.match_expressions.as_ref().unwrap()[0];
        assert_eq!(expression.key, "topology.kubernetes.io/zone");
        expression.values.as_ref().unwrap()[0].clone()
    };

    claims.create(&PostParams::default(), &claim("data", "zonal")).await.unwrap();
    claims.create(&PostParams::default(), &claim("cache", "eager")).await.unwrap();
    let cache = bound("cache").await;
    assert!(volumes.get(cache.spec.unwrap().volume_name.as_deref().unwrap()).await.is_ok());
    // Not provisioned before a node is chosen.
    assert_eq!(claims.get("data").await.unwrap().status.unwrap().phase.as_deref(), Some("Pending"));
    let node = Api::<Node>::all(client.clone()).get("worker-2").await.unwrap();
    let node_zone = node.metadata.labels.unwrap()["topology.kubernetes.io/zone"].clone();
    let selected = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "worker-2"}}});
    claims.patch("data", &PatchParams::default(), &Patch::Merge(&selected)).await.unwrap();
    let data = bound("data").await;
    let volume = volumes.get(data.spec.as_ref().unwrap().volume_name.as_deref().unwrap()).await.unwrap();
    assert_eq!(zone_of(&volume), node_zone);
    assert_eq!(volume.spec.as_ref().unwrap().claim_ref.as_ref().unwrap().name.as_deref(), Some("data"));
    assert_eq!(volume.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));

    // A volume made by hand, named by its claim.
    let manual =
        json!({"metadata": {"name": "manual"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}}});
    volumes.create(&PostParams::default(), &serde_json::from_value(manual).unwrap()).await.unwrap();
    let mut named = claim("named", "");
    named.spec.as_mut().unwrap().volume_name = Some("manual".into());
    claims.create(&PostParams::default(), &named).await.unwrap();
    bound("named").await;

    claims.delete("data", &DeleteParams::default()).await.unwrap();
    let name = volume.metadata.name.clone().unwrap();
    eventually("the provisioned volume to go", async || volumes.get_opt(&name).await.unwrap().is_none().then_some(())).await;
}
