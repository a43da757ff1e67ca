//! The scheduler against the simulated API server over real HTTP: placements, the exact failure message,
//! events and conditions, several profiles, foreign pods, retries, injected API errors and failing policies.

mod common;

use common::{fixture_wasm, policy_wasm, repo_root};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::ApiClient;
use wasp::registry::PolicyRegistry;
use wasp::runtime::Runtime;
use wasp::scheduler::Scheduler;
use wasp_sim::{Scenario, Simulator};

struct Harness {
    simulator: Simulator,
    client: Client,
    host: Arc<Host>,
    scheduler: Arc<Scheduler>,
    _worker: tokio::task::JoinHandle<()>,
}

fn default_config() -> HostConfig {
    let mut config = HostConfig::built_in();
    config.policy_dir = repo_root().join("plugins/out");
    config
}

fn api_of(simulator: &Simulator) -> ApiClient {
    ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap()
}

async fn start(scenario: &str, config: HostConfig) -> Harness {
    let scenario = Scenario::parse(scenario).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = api_of(&simulator);
    let host = Host::with_config(&config, &Runtime::new(None).unwrap(), api.clone()).unwrap();
    let worker = tokio::spawn(host.clone().run_loops());
    Harness { simulator, client: api.client, scheduler: host.scheduler.clone(), host, _worker: worker }
}

impl Harness {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Node of each pod with `label=value`, once all of them are bound.
    async fn placements(&self, selector: &str, count: usize) -> BTreeMap<String, String> {
        self.placements_within(selector, count, Duration::from_secs(10)).await
    }

    async fn placements_within(&self, selector: &str, count: usize, patience: Duration) -> BTreeMap<String, String> {
        let deadline = std::time::Instant::now() + patience;
        while std::time::Instant::now() < deadline {
            let pods = self.pods().list(&ListParams::default().labels(selector)).await.unwrap().items;
            let placed: BTreeMap<String, String> =
                pods.iter().filter_map(|pod| Some((pod.metadata.name.clone()?, pod.spec.as_ref()?.node_name.clone()?))).collect();
            if pods.len() == count && placed.len() == count {
                return placed;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("pods {selector} were not all bound");
    }

    /// Creates `pod`, which the scheduler must refuse with a `FailedScheduling` event containing `reason`; then a
    /// plain pod of the profile is scheduled as usual. The refused pod as the API server stores it.
    async fn refused_and_the_others_scheduled(&self, pod: &Pod, reason: &str) -> Pod {
        let created = self.pods().create(&PostParams::default(), pod).await.unwrap();
        let (_, event) = self.failed_scheduling(created.metadata.name.as_deref().unwrap()).await;
        let message = event.message.unwrap_or_default();
        assert!(message.contains(reason), "{message}");
        let plain: Pod = serde_json::from_value(json!({
            "metadata": {"name": "plain", "labels": {"app": "plain"}},
            "spec": {"schedulerName": "wasp", "containers": [{"name": "a"}]}
        }))
        .unwrap();
        self.pods().create(&PostParams::default(), &plain).await.unwrap();
        self.placements("app=plain", 1).await;
        created
    }

    async fn failed_scheduling(&self, pod_prefix: &str) -> (Pod, Event) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        for _ in 0..400 {
            let pod = self
                .pods()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|pod| pod.metadata.name.as_deref().unwrap_or("").starts_with(pod_prefix));
            let event = events.list(&ListParams::default()).await.unwrap().items.into_iter().find(|event| {
                event.reason.as_deref() == Some("FailedScheduling") && event.involved_object.name.as_deref().unwrap_or("").starts_with(pod_prefix)
            });
            if let (Some(pod), Some(event)) = (pod, event) {
                let has_condition = pod
                    .status
                    .as_ref()
                    .and_then(|status| status.conditions.as_ref())
                    .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "PodScheduled"));
                if has_condition {
                    return (pod, event);
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no FailedScheduling for {pod_prefix}");
    }

    /// Waits for a `FailedScheduling` event of the pod named `pod` with exactly `message`. For reasons that depend
    /// on several objects: the host's informers may see the pod before the last of them, as kube-scheduler's may,
    /// and its first attempt then has another reason; the object's arrival retries the pod.
    async fn failed_scheduling_with(&self, pod: &str, message: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let mut seen = Vec::new();
        for _ in 0..400 {
            seen = events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|event| event.reason.as_deref() == Some("FailedScheduling") && event.involved_object.name.as_deref() == Some(pod))
                .filter_map(|event| event.message)
                .collect();
            if seen.iter().any(|seen| seen == message) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no FailedScheduling for {pod} reading {message:?}; its events read {seen:?}");
    }
}

const FIT_AND_TAINTS: &str = r#"
kubelet: {readyDelay: 10ms}
nodeGroups:
- {name: small, count: 2, cpu: "2", memory: 8Gi}
- {name: tainted, count: 1, cpu: "8", memory: 32Gi, taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}
workloads:
- {name: fits, kind: Pods, replicas: 2, schedulerName: wasp, cpu: 1500m, memory: 1Gi}
- {name: huge, kind: Pods, replicas: 1, schedulerName: wasp, cpu: "3", memory: 1Gi}
- {name: tolerant, kind: Pods, replicas: 1, schedulerName: wasp, cpu: "3", podSpec: {tolerations: [{key: dedicated, operator: Exists}]}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_taints_decide_and_failures_read_like_kube_scheduler() {
    let harness = start(FIT_AND_TAINTS, default_config()).await;
    let fits = harness.placements("app=fits", 2).await;
    let nodes: Vec<&String> = fits.values().collect();
    assert_ne!(nodes[0], nodes[1], "1.5 CPU each: one per 2-CPU node");
    assert!(nodes.iter().all(|node| node.starts_with("small-")), "{fits:?}");
    assert_eq!(harness.placements("app=tolerant", 1).await["tolerant-0"], "tainted-0");

    let (pod, event) = harness.failed_scheduling("huge").await;
    let expected = "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu.";
    assert_eq!(event.message.as_deref(), Some(expected));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let condition = pod.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_deref(), condition.message.as_deref()), ("False", Some("Unschedulable"), Some(expected)));

    let events: Api<Event> = Api::namespaced(harness.client.clone(), "default");
    let scheduled = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|event| event.reason.as_deref() == Some("Scheduled") && event.involved_object.name.as_deref() == Some("tolerant-0"));
    assert_eq!(scheduled.unwrap().message.as_deref(), Some("Successfully assigned default/tolerant-0 to tainted-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_later_takes_the_waiting_pod_and_events_are_aggregated() {
    let harness = start(FIT_AND_TAINTS, default_config()).await;
    harness.failed_scheduling("huge").await;
    // More retries of the same failure bump the count of one event instead of creating new ones.
    harness
        .simulator
        .store
        .mutate(wasp_sim::resources::nodes(), None, "small-0", |node| {
            node["metadata"]["labels"]["touched"] = json!("1");
            Ok(())
        })
        .unwrap();
    let events: Api<Event> = Api::namespaced(harness.client.clone(), "default");
    let mut failures = Vec::new();
    for _ in 0..200 {
        failures =
            events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|event| event.reason.as_deref() == Some("FailedScheduling")).collect();
        if failures.iter().any(|event| event.count.unwrap_or(1) >= 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(failures.len(), 1, "one aggregated event");
    assert!(failures[0].count.unwrap_or(1) >= 2, "{:?}", failures[0].count);

    let node = json!({"metadata": {"name": "big-0", "labels": {"kubernetes.io/hostname": "big-0"}}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}});
    harness.simulator.store.create(wasp_sim::resources::nodes(), None, node).unwrap();
    assert_eq!(harness.placements("app=huge", 1).await["huge-0"], "big-0");
}

const ZONES: &str = r#"
kubelet: {readyDelay: 10ms}
nodeGroups:
- {name: node, count: 6, cpu: "8", memory: 32Gi, zones: [a, b, c]}
- {name: ssd, count: 1, cpu: "8", memory: 32Gi, labels: {disk: ssd}}
workloads:
- name: spread
  replicas: 6
  schedulerName: wasp
  cpu: 100m
  podSpec:
    topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}
- {name: db, kind: Pods, replicas: 2, schedulerName: wasp, cpu: 100m, podSpec: {nodeSelector: {disk: ssd}}}
- name: zone-b
  kind: Pods
  replicas: 2
  schedulerName: wasp
  podSpec:
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [b]}]}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_profile_prefers_the_node_that_has_the_pods_image() {
    // Four identical empty nodes; only warm-0 has the image (900 MiB on one node of four: ImageLocality 20). Each
    // pod added costs warm-0 a few points of least-allocated, far fewer than that: all five go there, where
    // chance alone would put them there once in a thousand runs.
    let scenario = "nodeGroups:\n\
        - {name: cold, count: 3, cpu: '8', memory: 32Gi}\n\
        - {name: warm, count: 1, cpu: '8', memory: 32Gi, images: [{names: ['registry.example/big:2', 'registry.example/big@sha256:00'], size: 900Mi}]}\n\
        workloads: [{name: big, kind: Pods, replicas: 5, schedulerName: wasp, cpu: 100m, memory: 128Mi, image: 'registry.example/big:2'}]\n";
    let harness = start(scenario, default_config()).await;
    let placed = harness.placements("app=big", 5).await;
    assert!(placed.values().all(|node| node == "warm-0"), "{placed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_affinity_selectors_and_topology_spread() {
    let harness = start(ZONES, default_config()).await;
    let db = harness.placements("app=db", 2).await;
    assert!(db.values().all(|node| node == "ssd-0"), "{db:?}");
    let zone_b = harness.placements("app=zone-b", 2).await;
    assert!(zone_b.values().all(|node| node == "node-1" || node == "node-4"), "zone b is node-1 and node-4: {zone_b:?}");
    let spread = harness.placements("app=spread", 6).await;
    let zone_of = |node: &str| ["a", "b", "c"][node.trim_start_matches("node-").parse::<usize>().unwrap() % 3];
    let mut per_zone = BTreeMap::new();
    for node in spread.values() {
        assert!(node.starts_with("node-"), "the ssd node has no zone label: {spread:?}");
        *per_zone.entry(zone_of(node)).or_insert(0) += 1;
    }
    assert_eq!(per_zone, BTreeMap::from([("a", 2), ("b", 2), ("c", 2)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_in_one_process_and_foreign_pods() {
    let mut config = default_config();
    config.scheduler.profiles.push(serde_yaml::from_str("{schedulerName: lenient, filters: [node-unschedulable]}").unwrap());
    let scenario = r#"
kubelet: {readyDelay: 10ms}
nodeGroups: [{name: n, count: 3, cpu: "4", memory: 16Gi}]
workloads:
- {name: strict, kind: Pods, replicas: 1, schedulerName: wasp, cpu: "8"}
- {name: loose, kind: Pods, replicas: 1, schedulerName: lenient, cpu: "8"}
- {name: other, kind: Pods, replicas: 1, schedulerName: someone-else, cpu: "3"}
"#;
    let harness = start(scenario, config).await;
    // The lenient profile checks no resources: its 8-CPU pod lands on a 4-CPU node.
    let loose_node = harness.placements("app=loose", 1).await["loose-0"].clone();
    let (_, event) = harness.failed_scheduling("strict").await;
    assert_eq!(event.message.as_deref(), Some("0/3 nodes are available: 3 Insufficient cpu."));
    assert_eq!(event.source.unwrap().component.as_deref(), Some("wasp"), "events name the profile");
    let events: Api<Event> = Api::namespaced(harness.client.clone(), "default");
    let loose =
        events.list(&ListParams::default()).await.unwrap().items.into_iter().find(|event| event.involved_object.name.as_deref() == Some("loose-0")).unwrap();
    assert_eq!(loose.source.unwrap().component.as_deref(), Some("lenient"), "each profile reports under its own name");
    assert_eq!(loose.reporting_component.as_deref(), Some("lenient"));
    assert_eq!(loose.reporting_instance.as_deref(), Some(harness.host.identity.instance.as_str()), "the instance is the host's identity");

    // A pod for another scheduler stays pending, but once someone binds it, its requests count.
    let other = harness.pods().get("other-0").await.unwrap();
    assert!(other.spec.as_ref().unwrap().node_name.is_none());
    let free: Vec<String> = ["n-0", "n-1", "n-2"].iter().map(|node| node.to_string()).filter(|node| *node != loose_node).collect();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "other-0"}, "target": {"kind": "Node", "name": free[0]}});
    harness.pods().create_subresource::<_, serde_json::Value>("binding", "other-0", &PostParams::default(), &binding).await.unwrap();
    let uid = other.metadata.uid.clone().unwrap();
    common::eventually("the informer sees the foreign binding", || harness.host.cluster.read().pod(&uid).is_some()).await;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "late", "labels": {"app": "late"}}, "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "1500m"}}}]}})).unwrap();
    harness.pods().create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(harness.placements("app=late", 1).await["late"], free[1], "the foreign pod left only 1 CPU on {}", free[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_binding_errors_are_retried_and_every_pod_is_bound_once() {
    let scenario = r#"
kubelet: {readyDelay: 10ms}
faults: {seed: 42, rules: [{verbs: [create], resources: [pods/binding], errorRate: 0.25, status: 500}]}
nodeGroups: [{name: n, count: 4, cpu: "16", memory: 64Gi}]
workloads: [{name: many, kind: Pods, replicas: 20, schedulerName: wasp, cpu: 100m}]
"#;
    let harness = start(scenario, default_config()).await;
    // Four failures in a row (0.25^4) are rare but take 1+2+4+8 s of backoff: allow a minute.
    let placed = harness.placements_within("app=many", 20, Duration::from_secs(60)).await;
    assert_eq!(placed.len(), 20);
    let stats = &harness.scheduler.stats;
    assert_eq!(common::settled(&stats.scheduled, 20).await, 20);
    // Counted where the requests arrived: every binding the host sent either met an injected error or bound a
    // pod, so a pod bound twice would show as a 21st request that was not injected.
    let (sent, injected) = harness.simulator.state.faults.counts(0);
    assert!(injected > 0, "seed 42 injects errors into some of the first bindings");
    assert_eq!(sent - injected, 20, "{sent} binding requests, {injected} failed on purpose: each pod bound exactly once");
    assert_eq!(stats.bind_requests.load(Ordering::Relaxed), sent, "the host counts what it sent");
}

fn config_with_misbehaving(failure_mode: &str) -> (tempfile::TempDir, HostConfig) {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("resources-fit.wasm"), policy_wasm("resources-fit").1).unwrap();
    std::fs::write(directory.path().join("misbehaving.wasm"), fixture_wasm("misbehaving").1).unwrap();
    let config = HostConfig::parse(&format!(
        "policyDir: {}\nscheduler: {{profiles: [{{schedulerName: wasp, filters: [misbehaving, resources-fit]}}]}}\npolicies: {{misbehaving: {{settings: {{filter: trap, only-with-label: app}}, failureMode: {failure_mode}}}}}",
        directory.path().display()
    ))
    .unwrap();
    (directory, config)
}

const TWO_PODS: &str = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 2, cpu: '4', memory: 8Gi}]\nworkloads: [{name: app, kind: Pods, replicas: 2, schedulerName: wasp, cpu: 100m}]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_policy_fails_open_or_closed_and_the_scheduler_goes_on() {
    let (_directory, config) = config_with_misbehaving("fail-open");
    let harness = start(TWO_PODS, config).await;
    harness.placements("app=app", 2).await;

    let (_directory, config) = config_with_misbehaving("fail-closed");
    let harness = start(TWO_PODS, config).await;
    let (_, event) = harness.failed_scheduling("app").await;
    assert_eq!(event.message.as_deref(), Some("0/2 nodes are available: 2 policy misbehaving failed."));
}

#[test]
fn configuration_errors_name_the_policy() {
    let runtime = Runtime::new(None).unwrap();
    let mut config = default_config();
    config.scheduler.profiles[0].filters.push("least-allocated".into());
    let error = PolicyRegistry::new(&runtime, config.clone(), None).err().unwrap();
    assert!(format!("{error:#}").ends_with("least-allocated.wasm: it implements [score], but profile wasp (as filter) needs filter"), "{error:#}");
    config.scheduler.profiles[0].filters.pop();
    config.scheduler.profiles[0].filters.push("missing-policy".into());
    let error = PolicyRegistry::new(&runtime, config, None).err().unwrap();
    assert!(format!("{error:#}").ends_with("/plugins/out/missing-policy.wasm does not exist (used by profile wasp (as filter))"), "{error:#}");
}

async fn create_pods(client: &Client, prefix: &str, count: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for index in 0..count {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{prefix}-{index}"), "labels": {"batch": prefix}},
            "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_standby_is_ready_and_takes_over_within_the_lease_and_no_pod_is_bound_twice() {
    use wasp::kube::leader::LeaderElection;
    use wasp::kube::HostIdentity;
    let mut config = default_config();
    let lease_duration = Duration::from_secs(2);
    config.leader_election =
        LeaderElection { lease_duration, renew_deadline: Duration::from_millis(1000), retry_period: Duration::from_millis(200), ..LeaderElection::default() };
    let harness_scenario = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 3, cpu: '16', memory: 64Gi}]\n";
    let scenario = Scenario::parse(harness_scenario).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let runtime = Runtime::new(None).unwrap();
    let host = |name: &str| {
        let policies = PolicyRegistry::new(&runtime, config.clone(), None).unwrap();
        Host::new(api_of(&simulator), Arc::new(policies), HostIdentity::named(name, None))
    };
    let (first, second) = (host("first"), host("second"));
    let leader = tokio::spawn(first.clone().run_as_leader(config.leader_election.clone()));
    let lease: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(api_of(&simulator).client, "kube-system");
    let holder = async || lease.get_opt("wasp-scheduler").await.unwrap().and_then(|lease| lease.spec?.holder_identity);
    for _ in 0..400 {
        if holder().await.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(holder().await.as_deref(), Some(first.identity.instance.as_str()), "the first host leads");
    let _standby = tokio::spawn(second.clone().run_as_leader(config.leader_election.clone()));
    let address = second.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    second.cluster.wait_until_ready().await;
    assert_eq!(common::http_get(address, "/readyz").await.0, 200, "the standby is synced and Ready");

    let harness_client = api_of(&simulator).client;
    create_pods(&harness_client, "before", 10).await;
    let pods: Api<Pod> = Api::namespaced(harness_client.clone(), "default");
    let bound = async |batch: &str| {
        pods.list(&ListParams::default().labels(&format!("batch={batch}")))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|pod| pod.spec.as_ref().unwrap().node_name.is_some())
            .count()
    };
    for _ in 0..400 {
        if bound("before").await == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(bound("before").await, 10);
    assert_eq!(common::settled(&first.scheduler.stats.scheduled, 10).await, 10, "the leader scheduled");
    assert_eq!(second.scheduler.stats.bind_requests.load(Ordering::Relaxed), 0, "the standby sent no binding");

    leader.abort();
    let stopped = std::time::Instant::now();
    create_pods(&harness_client, "after", 10).await;
    let mut took_over = None;
    for _ in 0..800 {
        if took_over.is_none() && second.scheduler.stats.bind_requests.load(Ordering::Relaxed) > 0 {
            took_over = Some(stopped.elapsed());
        }
        if bound("after").await == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bound("after").await, 10, "the standby took over");
    let took_over = took_over.unwrap_or_else(|| stopped.elapsed());
    // Expiry is judged from when the standby last saw the Lease change, plus a retry period to notice.
    assert!(took_over < lease_duration + Duration::from_millis(1000), "the standby bound its first pod {took_over:?} after the leader stopped");
    assert_eq!(common::settled(&second.scheduler.stats.scheduled, 10).await, 10);
    // Counted from what each host sent: twenty pods, twenty binding requests, none refused.
    let sent = |host: &Host| host.scheduler.stats.bind_requests.load(Ordering::Relaxed);
    let refused = |host: &Host| host.scheduler.stats.bind_errors.load(Ordering::Relaxed);
    assert_eq!((sent(&first), sent(&second)), (10, 10), "no pod was bound twice");
    assert_eq!((refused(&first), refused(&second)), (0, 0));
    let spec = lease.get("wasp-scheduler").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(second.identity.instance.as_str()));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_told_to_stop_finishes_its_bindings_and_releases_the_lease_to_the_standby_at_once() {
    use wasp::host::Leadership;
    use wasp::kube::HostIdentity;
    // kube-scheduler's lease timings: without the release the standby would wait out the 15 s lease.
    let config = default_config();
    let scenario = Scenario::parse("kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 4, cpu: '64', memory: 256Gi}]\n").unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let runtime = Runtime::new(None).unwrap();
    let host = |name: &str| {
        let policies = PolicyRegistry::new(&runtime, config.clone(), None).unwrap();
        Host::new(api_of(&simulator), Arc::new(policies), HostIdentity::named(name, None))
    };
    let (first, second) = (host("first"), host("second"));
    let leader = tokio::spawn(first.clone().run_as_leader(config.leader_election.clone()));
    let lease: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(api_of(&simulator).client, "kube-system");
    let holder = async || lease.get_opt("wasp-scheduler").await.unwrap().and_then(|lease| lease.spec?.holder_identity).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while holder().await != first.identity.instance {
        assert!(std::time::Instant::now() < deadline, "the first host never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let standby = tokio::spawn(second.clone().run_as_leader(config.leader_election.clone()));
    second.cluster.wait_until_ready().await;

    // Stopped in the middle of a burst: what it decided is bound, the rest is the standby's.
    let harness_client = api_of(&simulator).client;
    // Created while the leader binds: it is stopped at its first binding, with most of the burst still to come
    // (created first and then waited on, the burst was sometimes all bound before the stop).
    let creating = tokio::spawn({
        let client = harness_client.clone();
        async move { create_pods(&client, "burst", 200).await }
    });
    common::eventually("the leader's first binding", || first.scheduler.stats.bind_requests.load(Ordering::Relaxed) > 0).await;
    first.stop();
    let stopped = tokio::time::timeout(Duration::from_secs(10), leader).await.expect("the leader stopped in time").unwrap();
    let released = std::time::Instant::now();
    assert_eq!(stopped, Leadership::Released);
    // Every binding it sent was answered before it let go: none was cut off in flight.
    let answered = first.scheduler.stats.scheduled.load(Ordering::Relaxed) + first.scheduler.stats.bind_errors.load(Ordering::Relaxed);
    assert_eq!(answered, first.scheduler.stats.bind_requests.load(Ordering::Relaxed));
    while holder().await != second.identity.instance {
        assert!(released.elapsed() < Duration::from_secs(5), "the standby did not take the released Lease: {:?}", holder().await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // It watches the Lease: the release is seen at once, not at its next 2 s retry.
    let took_over = released.elapsed();
    assert!(took_over < Duration::from_millis(1000), "the standby led {took_over:?} after the release");
    creating.await.unwrap();
    let pods: Api<Pod> = Api::namespaced(harness_client.clone(), "default");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = pods.list(&ListParams::default().labels("batch=burst")).await.unwrap().items;
        if listed.len() == 200 && listed.iter().all(|pod| pod.spec.as_ref().unwrap().node_name.is_some()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the standby did not place the rest");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Counted from what the API server accepted: 200 pods, 200 bindings between the two hosts. The new leader's
    // informer may not yet show the last bindings of the old one: a binding it sends for such a pod is refused
    // (409, counted as an error), never accepted twice.
    let scheduled = |host: &Host| host.scheduler.stats.scheduled.load(Ordering::Relaxed);
    assert_eq!(scheduled(&first) + scheduled(&second), 200, "no pod was bound twice ({} + {})", scheduled(&first), scheduled(&second));
    assert!(scheduled(&first) < 200 && scheduled(&second) > 0, "the stop came mid-burst");
    assert_eq!(first.scheduler.stats.bind_errors.load(Ordering::Relaxed), 0, "the stopping leader's bindings were all answered and accepted");
    let spec = lease.get("wasp-scheduler").await.unwrap().spec.unwrap();
    assert_eq!(spec.lease_transitions, Some(1));
    standby.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_another_holder_took_steps_down() {
    use wasp::host::Leadership;
    use wasp::kube::leader::LeaderElection;
    use wasp::kube::HostIdentity;
    let mut config = default_config();
    config.leader_election = LeaderElection {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(200),
        ..LeaderElection::default()
    };
    let scenario = Scenario::parse("kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 2, cpu: '16', memory: 64Gi}]\n").unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let runtime = Runtime::new(None).unwrap();
    let policies = PolicyRegistry::new(&runtime, config.clone(), None).unwrap();
    let host = Host::new(api_of(&simulator), Arc::new(policies), HostIdentity::named("first", None));
    let leader = tokio::spawn(host.clone().run_as_leader(config.leader_election.clone()));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(api_of(&simulator).client, "kube-system");
    common::eventually_within("the host to lead", Duration::from_secs(30), || host.scheduler.is_running()).await;
    // Another replica (a split brain, an operator) writes itself into the Lease.
    let mut lease = leases.get("wasp-scheduler").await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
    leases.replace("wasp-scheduler", &PostParams::default(), &lease).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), leader).await.expect("the leader stepped down within its retry period").unwrap();
    assert_eq!(ended, Leadership::Lost);
    // The loops' tasks were aborted with the leadership; an abort takes effect at the task's next turn.
    common::eventually_within("the scheduler to stop with the leadership", Duration::from_secs(5), || !host.scheduler.is_running()).await;
    let holder = leases.get("wasp-scheduler").await.unwrap().spec.unwrap().holder_identity;
    assert_eq!(holder.as_deref(), Some("intruder"), "a leader that lost does not write the Lease back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_readiness_endpoints() {
    let harness = start(TWO_PODS, default_config()).await;
    let address = harness.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    harness.placements("app=app", 2).await;
    common::settled(&harness.scheduler.stats.scheduled, 2).await;
    let get = |path: &'static str| common::http_get(address, path);
    assert_eq!(get("/healthz").await, (200, "ok".to_string()));
    assert_eq!(get("/readyz").await, (200, "[+]informers ok\n[+]policies ok\nreadyz check passed\n".to_string()));
    let (status, metrics) = get("/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains(r#"wasp_schedule_attempts_total{profile="wasp",result="scheduled"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"wasp_policy_call_duration_seconds_count{policy="resources-fit",operation="filter"}"#), "{metrics}");
    assert!(metrics.contains(r#"wasp_pending_pods{queue="active"} 0"#), "{metrics}");
    assert!(metrics.contains("wasp_scheduling_e2e_duration_seconds_bucket"), "{metrics}");
    assert!(metrics.contains(r#"wasp_policy_info{policy="resources-fit",version="0.1.0",sha256=""#), "{metrics}");
    assert!(metrics.contains("wasp_policy_generation 1"), "{metrics}");
    // Guest memory per policy, over its live instances: at least the linear memory a Rust component starts with.
    let memory = metrics
        .lines()
        .find_map(|line| line.strip_prefix(r#"wasp_policy_memory_bytes{policy="pod-topology-spread"} "#))
        .and_then(|bytes| bytes.parse::<u64>().ok());
    assert!(memory.is_some_and(|bytes| bytes >= 1 << 20), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_the_check_that_fails() {
    let simulator = Simulator::start(&Scenario::parse(TWO_PODS).unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let host = Host::with_config(&default_config(), &Runtime::new(None).unwrap(), api_of(&simulator)).unwrap();
    let address = host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (status, body) = common::http_get(address, "/readyz").await;
    assert_eq!(status, 503, "informers not started yet");
    let waiting = "waiting for the first list of nodes, pods, namespaces, persistentvolumeclaims, persistentvolumes, storageclasses, csinodes, podgroups";
    assert!(body.starts_with(&format!("[-]informers failed: {waiting}\n[+]policies ok\n")), "{body}");
    host.start_informers();
    host.cluster.wait_until_ready().await;
    assert_eq!(common::http_get(address, "/readyz").await.0, 200);
}

#[test]
fn large_clusters_are_filtered_in_parallel_with_the_same_verdicts() {
    use wasp::scheduler::cycle::{best_node, feasible_nodes, schedule, Cursor, Decision};
    let runtime = Runtime::new(None).unwrap();
    let config = default_config();
    let generation = PolicyRegistry::new(&runtime, config, None).unwrap().current();
    let profile = &generation.plans.scheduling["wasp"];
    // 600 nodes: every third has room for the pod, the others are 1-CPU nodes.
    let mut cluster = wasp::cluster::ClusterState::new();
    for index in 0..600 {
        let cpu = if index % 3 == 0 { "8" } else { "1" };
        cluster.upsert_node(common::simple_node(&format!("n{index}"), cpu, "16Gi", ""));
    }
    let pod = common::simple_pod("p", "2", "");
    match schedule(profile, &cluster, &pod, None, &mut Cursor::default(), 100, &Default::default()).0 {
        Decision::Bind { node, feasible, evaluated } => {
            assert_eq!((feasible, evaluated), (200, 600), "all nodes evaluated at 100%");
            assert_eq!(node.trim_start_matches('n').parse::<usize>().unwrap() % 3, 0, "{node} has room");
        }
        other => panic!("expected a binding, got {other:?}"),
    }
    // The rescheduler's question: where else could it go?
    let (elsewhere, rejections) = feasible_nodes(profile, &cluster, &pod, &["n0", "n3"]);
    assert_eq!(elsewhere.len(), 198, "every roomy node but the two excluded");
    assert!(elsewhere.iter().all(|id| !["n0", "n3"].contains(&cluster.node_name(*id).unwrap())));
    assert_eq!(rejections.reasons.get("Insufficient cpu"), Some(&400));
    let best = best_node(profile, &cluster, &pod, &elsewhere).unwrap();
    assert!(elsewhere.contains(&best));
    let huge = common::simple_pod("huge", "64", "");
    assert_eq!(
        schedule(profile, &cluster, &huge, None, &mut Cursor::default(), 0, &Default::default()).0,
        Decision::Unschedulable {
            message: "0/600 nodes are available: 600 Insufficient cpu.".into(),
            helped_by: wasp::scheduler::queue::HelpedBy { pods_added: false, pods_removed: true, retry_soon: false }
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_the_watch_was_down_leaves_no_phantom_usage() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::DeleteParams;
    use wasp_sim::faults::{FaultRule, FaultSpec};
    let scenario = "kubelet: {readyDelay: 10ms, terminationDelay: 10ms}\nfaults: {dropWatchesAfter: 200ms}\n\
        nodeGroups: [{name: n, count: 1, cpu: '4', memory: 8Gi}]\n\
        workloads: [{name: doomed, kind: Pods, replicas: 1, schedulerName: wasp, cpu: '3'}]\n";
    // A short history, so the watch cannot resume across the gap and the informer must relist.
    let options = wasp_sim::SimulatorOptions { history: 8, ..Default::default() };
    let simulator = Simulator::start_with(&Scenario::parse(scenario).unwrap(), "127.0.0.1:0".parse().unwrap(), options).await.unwrap();
    let host = Host::with_config(&default_config(), &Runtime::new(None).unwrap(), api_of(&simulator)).unwrap();
    let _worker = tokio::spawn(host.clone().run_loops());
    let client = api_of(&simulator).client;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let doomed = loop {
        let pod = pods.get("doomed-0").await.unwrap();
        if pod.spec.as_ref().unwrap().node_name.is_some() {
            break pod.metadata.uid.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    common::eventually("the host to see doomed-0 bound", || host.cluster.read().pod(&doomed).is_some()).await;

    // The pod watch goes down (the stream is cut every 200 ms and cannot be reopened) ...
    let watch_down = FaultSpec {
        rules: vec![FaultRule { verbs: vec!["watch".into()], resources: vec!["pods".into()], error_rate: 1.0, status: 500, latency: None }],
        drop_watches_after: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    simulator.state.faults.replace(watch_down);
    common::eventually("the pod watch to be refused", || simulator.state.faults.counts(0).1 > 0).await;
    // ... while the pod is deleted and enough else happens that its deletion falls out of the history.
    pods.delete("doomed-0", &DeleteParams::default().grace_period(0)).await.unwrap();
    while pods.get_opt("doomed-0").await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for index in 0..20 {
        let config_map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("noise-{index}")}})).unwrap();
        config_maps.create(&PostParams::default(), &config_map).await.unwrap();
    }
    simulator.state.faults.replace(FaultSpec { drop_watches_after: Some(Duration::from_millis(200)), ..Default::default() });

    // The relist forgets the pod: its 3 CPU are free for the next one.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "next", "labels": {"app": "next"}}, "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "3"}}}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // The watcher backs off up to 30 s after each failed attempt (kube-rs's default, as client-go's reflector),
    // and two may come before the relist: the refused watch, then the 410 Gone of the resumed one. On a loaded
    // machine the refusals pile up during the gap (CI once took longer than a 30-s deadline).
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while pods.get("next").await.unwrap().spec.unwrap().node_name.is_none() {
        assert!(std::time::Instant::now() < deadline, "next was never bound: the deleted pod still holds its CPU in the host's view");
        // The poll interval of the condition wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(host.cluster.read().pod(&doomed).is_none());
}

/// A current-thread runtime (tokio's default in tests and small tools): guest calls must leave the async thread
/// without `block_in_place`, which panics there.
#[tokio::test]
async fn the_host_schedules_on_a_current_thread_runtime_and_keeps_no_per_pod_history() {
    let harness = start(TWO_PODS, default_config()).await;
    harness.placements("app=app", 2).await;
    assert_eq!(common::settled(&harness.scheduler.stats.scheduled, 2).await, 2);
    assert!(harness.scheduler.stats.report().is_none(), "nothing per pod is kept for the life of the host unless a report is asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_host_cannot_read_is_told_why_instead_of_waiting_silently() {
    let harness = start(TWO_PODS, default_config()).await;
    harness.placements("app=app", 2).await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "absurd", "labels": {"app": "absurd"}},
        "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "1e30"}}}]}
    }))
    .unwrap();
    harness.pods().create(&PostParams::default(), &pod).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let condition = loop {
        let pod = harness.pods().get("absurd").await.unwrap();
        let condition = pod.status.and_then(|status| status.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled");
        if let Some(condition) = condition {
            break condition;
        }
        assert!(std::time::Instant::now() < deadline, "no PodScheduled condition on a pod the host cannot read");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((condition.status.as_str(), condition.reason.as_deref()), ("False", Some("SchedulerError")));
    let message = condition.message.unwrap();
    assert!(message.starts_with("the pod cannot be scheduled: ") && message.contains("1e30"), "{message}");
    let (_, event) = harness.failed_scheduling("absurd").await;
    assert_eq!(event.message.as_deref(), Some(message.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_is_not_attempted_until_its_last_gate_is_removed() {
    let harness = start(TWO_PODS, default_config()).await;
    harness.placements("app=app", 2).await;
    let sent_before = harness.scheduler.stats.bind_requests.load(Ordering::Relaxed);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "gated", "labels": {"app": "gated"}},
        "spec": {"schedulerName": "wasp", "schedulingGates": [{"name": "example.com/quota"}, {"name": "example.com/images"}],
                 "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}
    }))
    .unwrap();
    harness.pods().create(&PostParams::default(), &pod).await.unwrap();
    let condition =
        |pod: &Pod| pod.status.as_ref().and_then(|status| status.conditions.clone()).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let gated = loop {
        if let Some(found) = condition(&harness.pods().get("gated").await.unwrap()) {
            break found;
        }
        assert!(std::time::Instant::now() < deadline, "no PodScheduled condition on a gated pod");
        // The poll interval of a deadline-bounded condition wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((gated.status.as_str(), gated.reason.as_deref()), ("False", Some("SchedulingGated")));
    assert_eq!(gated.message.as_deref(), Some("Scheduling is blocked due to non-empty scheduling gates"));
    // One gate removed: still gated.
    let one_left = json!({"spec": {"schedulingGates": [{"name": "example.com/images"}]}});
    harness.pods().patch("gated", &PatchParams::default(), &Patch::Merge(one_left)).await.unwrap();
    // A pod created after the patch and placed: the host's one watch has delivered the patch by then.
    let after: Pod = serde_json::from_value(
        json!({"metadata": {"name": "after", "labels": {"app": "after"}}, "spec": {"schedulerName": "wasp", "containers": [{"name": "a"}]}}),
    )
    .unwrap();
    harness.pods().create(&PostParams::default(), &after).await.unwrap();
    harness.placements("app=after", 1).await;
    assert_eq!(harness.scheduler.stats.bind_requests.load(Ordering::Relaxed), sent_before + 1, "no binding was attempted for the gated pod");
    // The last gate removed: scheduled.
    harness.pods().patch("gated", &PatchParams::default(), &Patch::Merge(json!({"spec": {"schedulingGates": null}}))).await.unwrap();
    harness.placements("app=gated", 1).await;
    assert_eq!(harness.scheduler.stats.bind_requests.load(Ordering::Relaxed), sent_before + 2);
}

const AFFINITY: &str = r#"
kubelet: {readyDelay: 10ms}
nodeGroups:
- {name: node, count: 3, cpu: "8", memory: 32Gi, zones: [a, b, c]}
workloads:
- name: web
  kind: Pods
  replicas: 4
  schedulerName: wasp
  cpu: 100m
  podSpec:
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
- {name: db, kind: Pods, replicas: 1, schedulerName: wasp, cpu: 100m, podSpec: {nodeSelector: {kubernetes.io/hostname: node-2}}}
- name: cache
  kind: Pods
  replicas: 2
  schedulerName: wasp
  cpu: 100m
  podSpec:
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: db}}}
- name: loner
  kind: Pods
  replicas: 1
  schedulerName: wasp
  cpu: 100m
  podSpec:
    nodeSelector: {kubernetes.io/hostname: node-0}
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: noisy}}}
- name: proxy
  kind: Pods
  replicas: 2
  schedulerName: wasp
  cpu: 100m
  podSpec:
    nodeSelector: {kubernetes.io/hostname: node-1}
    containers: [{name: proxy, image: proxy, ports: [{containerPort: 8080, hostPort: 8080}]}]
"#;

/// Bound pods with `selector` by name, and the unbound ones, once `count` pods exist and `bound` of them are.
async fn wait_bound(harness: &Harness, selector: &str, count: usize, bound: usize) -> (BTreeMap<String, String>, Vec<String>) {
    for _ in 0..400 {
        let pods = harness.pods().list(&ListParams::default().labels(selector)).await.unwrap().items;
        let (placed, waiting): (Vec<&Pod>, Vec<&Pod>) = pods.iter().partition(|pod| pod.spec.as_ref().is_some_and(|spec| spec.node_name.is_some()));
        if pods.len() == count && placed.len() == bound {
            let placed = placed.iter().map(|pod| (pod.metadata.name.clone().unwrap(), pod.spec.as_ref().unwrap().node_name.clone().unwrap())).collect();
            return (placed, waiting.iter().map(|pod| pod.metadata.name.clone().unwrap()).collect());
        }
        tokio::time::sleep(Duration::from_millis(25)).await; // poll interval of the condition wait
    }
    panic!("{selector}: not {bound} of {count} bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_affinity_anti_affinity_symmetry_and_host_ports_hold_as_in_kube_scheduler() {
    let harness = start(AFFINITY, default_config()).await;
    let (web, waiting) = wait_bound(&harness, "app=web", 4, 3).await;
    let nodes: std::collections::BTreeSet<&String> = web.values().collect();
    assert_eq!(nodes.len(), 3, "required anti-affinity: one replica per node, {web:?}");
    let (_, event) = harness.failed_scheduling(&waiting[0]).await;
    assert_eq!(event.message.as_deref(), Some("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."));

    // node-2 is zone c, the db's: the cache pods follow it there.
    let cache = harness.placements("app=cache", 2).await;
    assert!(cache.values().all(|node| node == "node-2"), "{cache:?}");

    // Symmetry: the loner on node-0 refuses noisy neighbours, so the noisy pod goes elsewhere though it prefers
    // node-0 (without the rule it would land there).
    harness.placements("app=loner", 1).await;
    let prefers_node_0 = json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]}]}}]});
    let noisy = json!({"metadata": {"name": "noisy", "labels": {"app": "noisy"}}, "spec": {"schedulerName": "wasp", "affinity": {"nodeAffinity": prefers_node_0}, "containers": [{"name": "app", "image": "app"}]}});
    harness.pods().create(&PostParams::default(), &serde_json::from_value(noisy).unwrap()).await.unwrap();
    let noisy = harness.placements("app=noisy", 1).await;
    assert_ne!(noisy["noisy"], "node-0");

    // Two pods asking for host port 8080 on node-1: one runs, the other is told why it waits.
    let (_, waiting) = wait_bound(&harness, "app=proxy", 2, 1).await;
    let (_, event) = harness.failed_scheduling(&waiting[0]).await;
    assert_eq!(
        event.message.as_deref(),
        Some("0/3 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 2 node(s) didn't match Pod's node affinity/selector.")
    );
}

const SPREAD_ZONES: &str = r#"
kubelet: {readyDelay: 10ms}
nodeGroups:
- {name: node, count: 6, cpu: "64", memory: 256Gi, pods: 500, zones: [a, b, c]}
"#;

/// A tenant's pods carry big label sets that no selector names (kilobytes each, within what a real API server
/// accepts): the policies that read labels through selectors keep none of them, so another tenant's spread pods
/// are placed as usual and `pod-topology-spread` stays small. With every label kept, its instances, capped here
/// at 16 MiB, ran out of memory and every spread pod got `0/6 nodes are available: 6 policy pod-topology-spread
/// failed.`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_big_label_sets_cost_the_label_reading_policies_nothing_and_spread_pods_are_placed() {
    const BULKY_PODS: usize = 150;
    const LABELS_PER_POD: usize = 400;
    let mut config = default_config();
    config.policies.entry("pod-topology-spread".into()).or_default().memory_mib = Some(16);
    let harness = start(SPREAD_ZONES, config).await;
    let value = "v".repeat(63);
    for index in 0..BULKY_PODS {
        let labels: serde_json::Map<String, serde_json::Value> =
            (0..LABELS_PER_POD).map(|label| (format!("tenant.example.com/label-{label:03}"), json!(format!("{index:04}{}", &value[4..])))).collect();
        let pod = json!({"metadata": {"name": format!("bulky-{index}"), "labels": labels},
            "spec": {"nodeName": format!("node-{}", index % 6), "containers": [{"name": "app", "image": "app"}]}});
        harness.pods().create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    }
    let cluster = harness.host.cluster.clone();
    common::eventually("the host sees the bulky pods bound", || cluster.read().pod_count() == BULKY_PODS).await;

    for index in 0..6 {
        let spread = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}});
        let pod = json!({"metadata": {"name": format!("spread-{index}"), "labels": {"app": "spread"}},
            "spec": {"schedulerName": "wasp", "topologySpreadConstraints": [spread], "containers": [{"name": "app", "image": "app"}]}});
        harness.pods().create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    }
    let placed = harness.placements("app=spread", 6).await;
    let mut per_zone = BTreeMap::new();
    for node in placed.values() {
        let zone = ["a", "b", "c"][node.trim_start_matches("node-").parse::<usize>().unwrap() % 3];
        *per_zone.entry(zone).or_insert(0) += 1;
    }
    assert_eq!(per_zone, BTreeMap::from([("a", 2), ("b", 2), ("c", 2)]), "{placed:?}");
    assert_eq!(harness.scheduler.stats.scheduled.load(Ordering::Relaxed), 6);
    let spread = harness.host.policies.current().policies["pod-topology-spread"].clone();
    let bulky_text = BULKY_PODS * LABELS_PER_POD * (30 + 63);
    let per_instance = spread.memory_in_use() / spread.idle_instances().max(1) as u64;
    assert!(per_instance < (bulky_text / 2) as u64, "{per_instance} bytes of guest memory per instance for {bulky_text} bytes of labels nobody selects");
}

/// Zone b's node is the smallest: the scores send pods elsewhere unless their volumes keep them there.
const ONE_NODE_PER_ZONE: &str = r#"
kubelet: {readyDelay: 10ms}
nodeGroups:
- {name: big, count: 2, cpu: "16", memory: 64Gi, zones: [a, c]}
- {name: small, count: 1, cpu: "2", memory: 8Gi, zones: [b]}
"#;

/// The store revision at which `pick` first holds for the object `name` of `resource` since revision `since`.
fn revision_when(
    simulator: &Simulator,
    resource: &'static wasp_sim::resources::ResourceType,
    since: u64,
    name: &str,
    pick: impl Fn(&serde_json::Value) -> bool,
) -> Option<u64> {
    let (changes, _, _) = simulator.store.watch(resource, Some(since)).unwrap();
    changes.iter().find(|change| change.object["metadata"]["name"] == name && pick(&change.object)).map(|change| change.revision)
}

/// A pod with `claims` (PersistentVolumeClaims by name) for the `wasp` profile.
fn pod_with_claims(name: &str, claims: &[&str]) -> Pod {
    let volumes: Vec<serde_json::Value> = claims.iter().map(|claim| json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"schedulerName": "wasp", "volumes": volumes, "containers": [{"name": "app", "image": "app", "resources": {"requests": {"cpu": "100m"}}}]}
    }))
    .unwrap()
}

/// Volume topology as kube-scheduler's VolumeBinding holds it: a pod goes where its zonal disk is; a
/// WaitForFirstConsumer claim is provisioned (by the simulator's zonal provisioner) in the zone of the node the
/// scheduler chose, before the pod is bound there; a missing claim keeps the pod waiting, and its creation lets
/// it through; two disks in two zones fit nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_go_where_their_volumes_are_and_claims_are_provisioned_where_pods_go() {
    use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    let harness = start(ONE_NODE_PER_ZONE, default_config()).await;
    let volumes: Api<PersistentVolume> = Api::all(harness.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(harness.client.clone(), "default");
    let classes: Api<StorageClass> = Api::all(harness.client.clone());
    let post = PostParams::default();
    let zone_of_node =
        async |node: &str| Api::<Node>::all(harness.client.clone()).get(node).await.unwrap().metadata.labels.unwrap()["topology.kubernetes.io/zone"].clone();
    let disk = |name: &str, zone: &str| {
        serde_json::from_value::<PersistentVolume>(json!({"metadata": {"name": name}, "spec": {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "csi": {"driver": "disk.csi.example.com", "volumeHandle": name},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}})).unwrap()
    };
    let claim = |name: &str, class: &str, volume: Option<&str>| {
        serde_json::from_value::<PersistentVolumeClaim>(json!({"metadata": {"name": name}, "spec": {
        "storageClassName": class, "volumeName": volume, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap()
    };

    // A disk in zone b, claimed by name: its pod can only run there.
    volumes.create(&post, &disk("disk-b", "b")).await.unwrap();
    claims.create(&post, &claim("data", "", Some("disk-b"))).await.unwrap();
    harness.pods().create(&post, &pod_with_claims("db", &["data"])).await.unwrap();
    let db = harness.placements("app=db", 1).await;
    assert_eq!(zone_of_node(&db["db"]).await, "b", "{db:?}");

    // A claim of a WaitForFirstConsumer class: provisioned for the node chosen, in its zone.
    let class = json!({"metadata": {"name": "zonal"}, "provisioner": "disk.csi.example.com", "volumeBindingMode": "WaitForFirstConsumer"});
    classes.create(&post, &serde_json::from_value(class).unwrap()).await.unwrap();
    let before = harness.simulator.store.revision();
    claims.create(&post, &claim("cache", "zonal", None)).await.unwrap();
    harness.pods().create(&post, &pod_with_claims("web", &["cache"])).await.unwrap();
    let web = harness.placements("app=web", 1).await;
    let cache = claims.get("cache").await.unwrap();
    assert_eq!(cache.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/selected-node"], web["web"]);
    let claim_bound = revision_when(&harness.simulator, wasp_sim::volumes::claims(), before, "cache", |claim| claim["status"]["phase"] == "Bound");
    let pod_bound = revision_when(&harness.simulator, wasp_sim::resources::pods(), before, "web", |pod| pod["spec"]["nodeName"].is_string());
    assert!(claim_bound.unwrap() < pod_bound.unwrap(), "the claim is provisioned before the pod is bound");
    let provisioned = volumes.get(cache.spec.unwrap().volume_name.as_deref().unwrap()).await.unwrap();
    let term = &provisioned.spec.unwrap().node_affinity.unwrap().required.unwrap().node_selector_terms[0];
    assert_eq!(term.match_expressions.as_ref().unwrap()[0].values.as_ref().unwrap()[0], zone_of_node(&web["web"]).await);

    // A missing claim: every node says why; once the claim exists, the pod is placed.
    harness.pods().create(&post, &pod_with_claims("late", &["later"])).await.unwrap();
    let (_, event) = harness.failed_scheduling("late").await;
    assert_eq!(event.message.as_deref(), Some("0/3 nodes are available: persistentvolumeclaim \"later\" not found."), "PreFilter's reason, for the pod");
    claims.create(&post, &claim("later", "zonal", None)).await.unwrap();
    harness.placements_within("app=late", 1, Duration::from_secs(20)).await;

    // Two disks in two zones: no node can attach both.
    volumes.create(&post, &disk("disk-a", "a")).await.unwrap();
    volumes.create(&post, &disk("disk-c", "c")).await.unwrap();
    claims.create(&post, &claim("left", "", Some("disk-a"))).await.unwrap();
    claims.create(&post, &claim("right", "", Some("disk-c"))).await.unwrap();
    harness.pods().create(&post, &pod_with_claims("split", &["left", "right"])).await.unwrap();
    harness.failed_scheduling_with("split", "0/3 nodes are available: 3 node(s) had volume node affinity conflict.").await;
}

/// Static binding, as kube-scheduler's VolumeBinding does it for local volumes: a WaitForFirstConsumer claim of
/// a class without a provisioner goes to the smallest existing volume that fits it, and its pod to a node that
/// volume can be attached to; the host writes the claim into the volume's `claimRef` before it binds the pod. With
/// no fitting volume left, the pod waits with kube-scheduler's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_claim_is_given_the_smallest_existing_volume_that_fits_and_its_pod_goes_there() {
    use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    let harness = start(ONE_NODE_PER_ZONE, default_config()).await;
    let volumes: Api<PersistentVolume> = Api::all(harness.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(harness.client.clone(), "default");
    let post = PostParams::default();
    let class = json!({"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"});
    Api::<StorageClass>::all(harness.client.clone()).create(&post, &serde_json::from_value(class).unwrap()).await.unwrap();
    let local = |name: &str, zone: &str, size: &str| {
        serde_json::from_value::<PersistentVolume>(json!({"metadata": {"name": name}, "spec": {
        "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local", "local": {"path": "/mnt/disks/1"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}})).unwrap()
    };
    for (name, zone, size) in [("tiny-a", "a", "1Gi"), ("big-c", "c", "100Gi"), ("fit-c", "c", "10Gi")] {
        volumes.create(&post, &local(name, zone, size)).await.unwrap();
    }
    let claim = |name: &str| {
        serde_json::from_value::<PersistentVolumeClaim>(json!({"metadata": {"name": name}, "spec": {
        "storageClassName": "local", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Gi"}}}}))
        .unwrap()
    };
    claims.create(&post, &claim("scratch")).await.unwrap();
    let before = harness.simulator.store.revision();
    harness.pods().create(&post, &pod_with_claims("batch", &["scratch"])).await.unwrap();
    let batch = harness.placements("app=batch", 1).await;
    let node: Node = Api::all(harness.client.clone()).get(&batch["batch"]).await.unwrap();
    assert_eq!(node.metadata.labels.unwrap()["topology.kubernetes.io/zone"], "c", "only zone c has a volume that fits");
    // The host gave it fit-c (the smallest that fits; the simulator never writes a claimRef on its own), and the
    // claim was bound to it before the pod was bound.
    let given = volumes.get("fit-c").await.unwrap().spec.unwrap().claim_ref.unwrap();
    assert_eq!((given.namespace.as_deref(), given.name.as_deref()), (Some("default"), Some("scratch")));
    assert!(volumes.get("big-c").await.unwrap().spec.unwrap().claim_ref.is_none());
    let claim_bound = revision_when(&harness.simulator, wasp_sim::volumes::claims(), before, "scratch", |claim| {
        claim["spec"]["volumeName"] == "fit-c" && claim["status"]["phase"] == "Bound"
    });
    let pod_bound = revision_when(&harness.simulator, wasp_sim::resources::pods(), before, "batch", |pod| pod["spec"]["nodeName"].is_string());
    assert!(claim_bound.unwrap() < pod_bound.unwrap(), "the claim is bound before the pod");
    // Two pods at once for the one volume left: the first decided gets big-c (reserved in its cycle), the other
    // waits with kube-scheduler's reason rather than being sent to a node where nothing can be bound.
    for name in ["scratch-2", "scratch-3"] {
        claims.create(&post, &claim(name)).await.unwrap();
    }
    harness.pods().create(&post, &pod_with_claims("batch-2", &["scratch-2"])).await.unwrap();
    harness.pods().create(&post, &pod_with_claims("batch-3", &["scratch-3"])).await.unwrap();
    let (placed, waiting) = tokio::select! {
        _ = harness.placements("app=batch-2", 1) => (("batch-2", "scratch-2"), "batch-3"),
        _ = harness.placements("app=batch-3", 1) => (("batch-3", "scratch-3"), "batch-2"),
    };
    assert_eq!(claims.get(placed.1).await.unwrap().spec.unwrap().volume_name.as_deref(), Some("big-c"), "{placed:?}");
    let (_, event) = harness.failed_scheduling(waiting).await;
    assert_eq!(event.message.as_deref(), Some("0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind."));

    // A claim with a selector takes only a volume it selects (ssd-b, not the smaller plain-a) and, its class
    // provisioning or not, is never provisioned: the second such claim waits rather than go to any node.
    let class = json!({"metadata": {"name": "fast"}, "provisioner": "pd.csi.storage.gke.io", "volumeBindingMode": "WaitForFirstConsumer"});
    Api::<StorageClass>::all(harness.client.clone()).create(&post, &serde_json::from_value(class).unwrap()).await.unwrap();
    for (name, zone, size, labels) in [("ssd-b", "b", "10Gi", json!({"tier": "ssd"})), ("plain-a", "a", "5Gi", json!({}))] {
        let mut volume = local(name, zone, size);
        volume.metadata.labels = serde_json::from_value(labels).unwrap();
        volume.spec.as_mut().unwrap().storage_class_name = Some("fast".into());
        volumes.create(&post, &volume).await.unwrap();
    }
    for name in ["fast", "fast-2"] {
        let selecting = json!({"metadata": {"name": name}, "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Gi"}}, "selector": {"matchLabels": {"tier": "ssd"}}}});
        claims.create(&post, &serde_json::from_value(selecting).unwrap()).await.unwrap();
    }
    harness.pods().create(&post, &pod_with_claims("fast", &["fast"])).await.unwrap();
    let fast = harness.placements("app=fast", 1).await;
    let node: Node = Api::all(harness.client.clone()).get(&fast["fast"]).await.unwrap();
    assert_eq!(node.metadata.labels.unwrap()["topology.kubernetes.io/zone"], "b", "only ssd-b is selected");
    assert_eq!(claims.get("fast").await.unwrap().spec.unwrap().volume_name.as_deref(), Some("ssd-b"));
    harness.pods().create(&post, &pod_with_claims("fast-2", &["fast-2"])).await.unwrap();
    let (_, event) = harness.failed_scheduling("fast-2").await;
    assert_eq!(event.message.as_deref(), Some("0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind."));
    assert!(volumes.get("plain-a").await.unwrap().spec.unwrap().claim_ref.is_none(), "plain-a is not selected");
}

const ONE_DISK_PER_NODE: &str = r#"
kubelet: {readyDelay: 10ms, terminationDelay: 10ms}
nodeGroups:
- {name: node, count: 2, cpu: "4", memory: 16Gi, zones: [a], volumeLimits: {disk.csi.wasp-sim.dev: 1}}
storageClasses:
- {name: zonal, volumeBindingMode: WaitForFirstConsumer, default: true}
"#;

/// kube-scheduler's NodeVolumeLimits: each node's CSINode lets the simulator's disk driver attach one volume. The
/// second disk goes to the other node, a third fits nowhere and says why, a pod sharing a disk already attached
/// goes where that disk is (it is not counted twice), and a disk let go makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_at_its_csi_volume_limit_takes_only_pods_whose_volumes_it_already_has() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let harness = start(ONE_DISK_PER_NODE, default_config()).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(harness.client.clone(), "default");
    let post = PostParams::default();
    let claim = |name: &str| {
        serde_json::from_value::<PersistentVolumeClaim>(json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap()
    };
    for name in ["first", "second", "third"] {
        claims.create(&post, &claim(name)).await.unwrap();
    }
    harness.pods().create(&post, &pod_with_claims("first", &["first"])).await.unwrap();
    let first = harness.placements("app=first", 1).await["first"].clone();
    let volume = claims.get("first").await.unwrap().spec.unwrap().volume_name.unwrap();
    let csi = Api::<PersistentVolume>::all(harness.client.clone()).get(&volume).await.unwrap().spec.unwrap().csi.unwrap();
    assert_eq!(csi.driver, "disk.csi.wasp-sim.dev", "the provisioned disk is the limited driver's");
    harness.pods().create(&post, &pod_with_claims("second", &["second"])).await.unwrap();
    let second = harness.placements("app=second", 1).await["second"].clone();
    assert_ne!(second, first, "{first} has its one disk attached");

    harness.pods().create(&post, &pod_with_claims("third", &["third"])).await.unwrap();
    let (_, event) = harness.failed_scheduling("third").await;
    assert_eq!(event.message.as_deref(), Some("0/2 nodes are available: 2 node(s) exceed max volume count."));

    harness.pods().create(&post, &pod_with_claims("reader", &["first"])).await.unwrap();
    assert_eq!(harness.placements("app=reader", 1).await["reader"], first, "the disk it shares is attached there already");

    // Both users of the first disk gone: its node can attach the third.
    for name in ["first", "reader"] {
        harness.pods().delete(name, &Default::default()).await.unwrap();
    }
    assert_eq!(harness.placements_within("app=third", 1, Duration::from_secs(20)).await["third"], first);
}

const STATEFUL_WITH_DISKS: &str = r#"
kubelet: {readyDelay: 10ms, terminationDelay: 10ms}
nodeGroups:
- {name: node, count: 6, cpu: "4", memory: 16Gi, zones: [a, b, c]}
storageClasses:
- {name: zonal, volumeBindingMode: WaitForFirstConsumer, default: true}
workloads:
- {name: db, kind: StatefulSet, replicas: 3, schedulerName: wasp, cpu: "1", volumes: [{name: data, size: 20Gi}]}
"#;

/// The user's case: a StatefulSet's replicas get their disks where they first land; a replica that is deleted
/// comes back in its disk's zone, whichever node the scheduler would otherwise pick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_replica_comes_back_in_the_zone_of_its_disk() {
    use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
    let harness = start(STATEFUL_WITH_DISKS, default_config()).await;
    let zone_of_node =
        async |node: &str| Api::<Node>::all(harness.client.clone()).get(node).await.unwrap().metadata.labels.unwrap()["topology.kubernetes.io/zone"].clone();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(harness.client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(harness.client.clone());
    let disk_zone = async |ordinal: usize| {
        let claim = claims.get(&format!("data-db-{ordinal}")).await.unwrap();
        let volume = volumes.get(claim.spec.unwrap().volume_name.as_deref().unwrap()).await.unwrap();
        let term = &volume.spec.unwrap().node_affinity.unwrap().required.unwrap().node_selector_terms[0];
        term.match_expressions.as_ref().unwrap()[0].values.as_ref().unwrap()[0].clone()
    };
    let first = harness.placements("app=db", 3).await;
    for ordinal in 0..3 {
        assert_eq!(disk_zone(ordinal).await, zone_of_node(&first[&format!("db-{ordinal}")]).await, "made where the pod went");
    }
    // Cordon the node db-0 runs on and the other node of its zone is the only place it can come back to. Load
    // on that node makes it the one the scores like least: only the disk sends db-0 there.
    let zone = disk_zone(0).await;
    let nodes: Api<Node> = Api::all(harness.client.clone());
    let mut other = None;
    for node in nodes.list(&ListParams::default()).await.unwrap().items {
        let name = node.metadata.name.clone().unwrap();
        if name != first["db-0"] && zone_of_node(&name).await == zone {
            other = Some(name);
        }
    }
    let other = other.expect("two nodes a zone");
    let load: Pod = serde_json::from_value(json!({"metadata": {"name": "load"}, "spec": {"nodeName": other, "containers": [{"name": "busy", "image": "busy", "resources": {"requests": {"cpu": "2"}}}]}})).unwrap();
    harness.pods().create(&PostParams::default(), &load).await.unwrap();
    let cordon = json!({"spec": {"unschedulable": true}});
    nodes.patch(&first["db-0"], &PatchParams::default(), &Patch::Merge(&cordon)).await.unwrap();
    let old_uid = harness.pods().get("db-0").await.unwrap().metadata.uid;
    harness.pods().delete("db-0", &Default::default()).await.unwrap();
    // The replacement as the API server stores it: another uid under the same name, bound.
    let store = harness.simulator.store.clone();
    let replacement_node = move || {
        let pod = store.get(wasp_sim::resources::pods(), Some("default"), "db-0").ok()?;
        let replaced = pod["metadata"]["uid"].as_str() != old_uid.as_deref();
        pod["spec"]["nodeName"].as_str().filter(|_| replaced).map(str::to_string)
    };
    let found = replacement_node.clone();
    common::eventually_within("db-0 to come back and be bound", Duration::from_secs(10), move || found().is_some()).await;
    let again = replacement_node().unwrap();
    assert_eq!(again, other, "back in its disk's zone, on the only node there left");
}

/// A waiting pod whose selectors name thousands of label keys would make every view that keeps selected labels
/// hold thousands of labels of every pod carrying them (a policy that ran out of memory following them failed
/// every pod of its profile): it is told why and not scheduled, and the others are scheduled as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_naming_thousands_of_label_keys_is_told_why_and_the_others_are_scheduled() {
    let harness = start(TWO_PODS, default_config()).await;
    harness.placements("app=app", 2).await;
    let expressions: Vec<serde_json::Value> = (0..2500).map(|key| json!({"key": format!("tenant.example.com/k{key}"), "operator": "Exists"})).collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "greedy", "labels": {"app": "greedy"}},
        "spec": {"schedulerName": "wasp", "containers": [{"name": "a"}], "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchExpressions": expressions}}]}
    }))
    .unwrap();
    harness.refused_and_the_others_scheduled(&pod, "name 2500 label keys; at most 64 per pod").await;
    assert!(harness.host.cluster.read().selected_keys().len() < 100, "the pod's keys were not selected");
}

/// A waiting pod of a thousand valid anti-affinity terms (about 92 KiB) would cost the host several times its size in every
/// copy it keeps of a waiting pod (its pending record, its queue entry, each policy call): it is told why and not
/// kept, and the others are scheduled as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_a_thousand_affinity_terms_is_told_why_and_not_kept() {
    let harness = start(TWO_PODS, default_config()).await;
    harness.placements("app=app", 2).await;
    let terms: Vec<serde_json::Value> =
        (0..1000).map(|term| json!({"labelSelector": {"matchLabels": {"app": format!("tenant-{term}")}}, "topologyKey": "kubernetes.io/hostname"})).collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "heavy", "labels": {"app": "heavy"}},
        "spec": {"schedulerName": "wasp", "containers": [{"name": "a"}], "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}}
    }))
    .unwrap();
    let heavy = harness
        .refused_and_the_others_scheduled(&pod, "scheduling constraints (affinity, tolerations, topology spread, node selector) take more than 64 KiB")
        .await;
    assert!(!harness.host.cluster.is_pending(heavy.metadata.uid.as_deref().unwrap()), "the host does not keep it waiting");
}

/// A namespace's waiting pods together are bounded too (here at 1 MiB): forty pods of 50 KiB each, waiting on
/// cordoned nodes, fill it; those past it are told why (the API server holds their `SchedulerError` condition)
/// and not kept, while another namespace's pods are. Once the nodes open, the kept pods are bound, and the
/// deferred ones are fetched again as room frees and bound in turn: all forty end up bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaces_waiting_pods_are_bounded_together_and_the_deferred_ones_scheduled_as_room_frees() {
    let scenario = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 2, cpu: '64', memory: 256Gi, unschedulable: true}]\n";
    let mut config = default_config();
    config.scheduler.waiting_pods_mib_per_namespace = 1;
    let harness = start(scenario, config).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(harness.client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "noisy"}})).unwrap()).await.unwrap();
    let noisy: Api<Pod> = Api::namespaced(harness.client.clone(), "noisy");
    let padding = "x".repeat(50 << 10);
    for index in 0..40 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("big-{index}"), "labels": {"app": "big"}, "annotations": {"padding": padding}},
            "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "10m"}}}]}
        }))
        .unwrap();
        noisy.create(&PostParams::default(), &pod).await.unwrap();
    }
    create_pods(&harness.client, "plain", 3).await;
    let deferred = common::wait_for("pods past the namespace's budget told why", Duration::from_secs(30), || async {
        let pods = noisy.list(&ListParams::default()).await.map_err(|error| error.to_string())?.items;
        let told = pods
            .iter()
            .filter(|pod| {
                let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
                conditions.is_some_and(|conditions| {
                    conditions.iter().any(|condition| {
                        condition.reason.as_deref() == Some("SchedulerError")
                            && condition.message.as_deref().is_some_and(|message| message.contains("the waiting pods of namespace noisy hold the 1024 KiB"))
                    })
                })
            })
            .count();
        let (held, deferred) = harness.host.cluster.waiting_budget.usage("noisy");
        match told > 0 && told == deferred && held <= 1 << 20 && deferred + held / (50 << 10) >= 39 {
            true => Ok(deferred),
            false => Err(format!("{told} told, {deferred} deferred, {held} bytes held")),
        }
    })
    .await;
    assert!((15..=25).contains(&deferred), "{deferred} of 40 pods of 50 KiB deferred past 1 MiB");
    let nodes: Api<Node> = Api::all(harness.client.clone());
    for node in nodes.list(&ListParams::default()).await.unwrap().items {
        nodes.patch(node.metadata.name.as_deref().unwrap(), &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": false}}))).await.unwrap();
    }
    harness.placements("batch=plain", 3).await;
    let bound = common::wait_for("every pod of the namespace bound", Duration::from_secs(60), || async {
        let pods = noisy.list(&ListParams::default()).await.map_err(|error| error.to_string())?.items;
        let bound = pods.iter().filter(|pod| pod.spec.as_ref().is_some_and(|spec| spec.node_name.is_some())).count();
        if bound == 40 {
            Ok(bound)
        } else {
            Err(format!("{bound} of 40 bound"))
        }
    })
    .await;
    assert_eq!(bound, 40);
    assert_eq!(harness.host.cluster.waiting_budget.usage("noisy"), (0, 0), "nothing held or deferred once all are bound");
}

/// Namespaces take turns at equal priority: two hundred pods of one namespace wait together (the nodes were
/// cordoned), then a pod of another namespace comes; it is bound after a few of the burst's, not after all of them
/// as by age alone (kube-scheduler's order, and wasp's before). Counted from the bindings the API server holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_in_one_namespace_does_not_make_another_namespace_wait_for_all_of_it() {
    let scenario = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 4, cpu: '64', memory: 256Gi, unschedulable: true}]\n";
    let harness = start(scenario, default_config()).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(harness.client.clone());
    for name in ["noisy", "quiet"] {
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()).await.unwrap();
    }
    let (noisy, quiet): (Api<Pod>, Api<Pod>) = (Api::namespaced(harness.client.clone(), "noisy"), Api::namespaced(harness.client.clone(), "quiet"));
    let pod = |name: String| -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "10m"}}}]}}),
        )
        .unwrap()
    };
    for index in 0..200 {
        noisy.create(&PostParams::default(), &pod(format!("burst-{index}"))).await.unwrap();
    }
    let bound = |pods: Vec<Pod>| pods.iter().filter(|pod| pod.spec.as_ref().is_some_and(|spec| spec.node_name.is_some())).count();
    let nodes: Api<Node> = Api::all(harness.client.clone());
    for node in nodes.list(&ListParams::default()).await.unwrap().items {
        nodes.patch(node.metadata.name.as_deref().unwrap(), &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": false}}))).await.unwrap();
    }
    // The burst waits in activeQ together: none left in the backoff its first, cordoned, attempt earned (a second),
    // so its pods were created over a second before the other namespace's will be.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let together = |sizes: wasp::scheduler::queue::QueueSizes| sizes.backoff == 0 && sizes.unschedulable == 0 && sizes.active > 100;
    while !together(harness.scheduler.queue_sizes()) {
        assert!(std::time::Instant::now() < deadline, "the burst did not wait together: {:?}", harness.scheduler.queue_sizes());
        // The poll interval of a condition wait (bounded by the deadline above), not a fixed wait.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    quiet.create(&PostParams::default(), &pod("alone".into())).await.unwrap();
    let burst_bound_before = loop {
        let burst_bound = bound(noisy.list(&ListParams::default()).await.unwrap().items);
        if bound(quiet.list(&ListParams::default()).await.unwrap().items) == 1 {
            break burst_bound;
        }
        assert!(std::time::Instant::now() < deadline, "the quiet namespace's pod was not bound");
        // The poll interval of a condition wait (bounded by the deadline above), not a fixed wait.
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!("the quiet namespace's pod was bound when {burst_bound_before} of the burst's 200 were");
    assert!(burst_bound_before < 150, "it waited for {burst_bound_before} of the burst's 200 pods");
}

/// Two profiles: `wasp` (resources-fit) and `adv`, whose first filter is the misbehaving fixture with `options`;
/// the policy directory lives as long as it is kept.
async fn start_with_an_adv_profile(options: &str) -> (Harness, tempfile::TempDir) {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("resources-fit.wasm"), policy_wasm("resources-fit").1).unwrap();
    std::fs::write(directory.path().join("misbehaving.wasm"), fixture_wasm("misbehaving").1).unwrap();
    let config = HostConfig::parse(&format!(
        "policyDir: {}\nscheduler: {{profiles: [{{schedulerName: wasp, filters: [resources-fit]}}, {{schedulerName: adv, filters: [misbehaving, resources-fit]}}]}}\n\
         policies: {{misbehaving: {{{options}}}}}",
        directory.path().display()
    ))
    .unwrap();
    let harness = start(TWO_PODS, config).await;
    harness.placements("app=app", 2).await;
    (harness, directory)
}

/// `count` pods of profile `adv` named and labelled `label` (`label-0` with `label=yes`, ...).
async fn create_adv_pods(pods: &Api<Pod>, label: &str, count: usize) {
    for index in 0..count {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{label}-{index}"), "labels": {label: "yes"}},
            "spec": {"schedulerName": "adv", "containers": [{"name": "a", "resources": {"requests": {"cpu": "10m"}}}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
}

/// A policy of one profile that spins until its deadline on some pods: after five failures in a row its circuit
/// breaker answers for it with its failure mode, so thirty such pods cost a few deadlines, not thirty (15 s), and
/// the other profile's pods are placed meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_policy_is_taken_out_of_calls_and_the_pods_go_on() {
    let (harness, _policies) = start_with_an_adv_profile("settings: {filter: loop, only-with-label: noisy}, failureMode: fail-open, deadline: 500ms").await;
    let started = std::time::Instant::now();
    let pods: Api<Pod> = harness.pods();
    create_adv_pods(&pods, "noisy", 30).await;
    create_pods(&harness.client, "plain", 5).await;
    harness.placements("noisy=yes", 30).await;
    harness.placements("batch=plain", 5).await;
    let took = started.elapsed();
    // Thirty deadlines of 500 ms in a row would be 15 s; five, then the failure mode at once, about 3 s.
    assert!(took < Duration::from_secs(12), "35 pods took {took:?}");
    let status = harness.host.endpoints.policies_document();
    let misbehaving = status["policies"].as_array().unwrap().iter().find(|policy| policy["name"] == "misbehaving").unwrap().clone();
    assert!(misbehaving["breaker"]["trips"].as_u64() >= Some(1), "{misbehaving}");
}

/// A profile whose policy is slow but answers (no failure, no breaker) takes turns by the time its decisions
/// take: pods of another profile created while thirty of its pods wait are placed after a few of them, not after
/// all thirty, though those are older.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_with_a_slow_policy_does_not_make_another_profiles_pods_wait_behind_its_own() {
    let (harness, _policies) = start_with_an_adv_profile("settings: {filter: busy, busy-iterations: 60000000, only-with-label: slow}, deadline: 10s").await;
    let pods: Api<Pod> = harness.pods();
    create_adv_pods(&pods, "slow", 30).await;
    let bound = |label: &'static str| {
        let pods = pods.clone();
        async move {
            let listed = pods.list(&ListParams::default().labels(label)).await.unwrap().items;
            listed.iter().filter(|pod| pod.spec.as_ref().is_some_and(|spec| spec.node_name.is_some())).count()
        }
    };
    let slow_before = common::wait_for("a first slow pod bound", Duration::from_secs(30), || async {
        match bound("slow=yes").await {
            0 => Err("none bound".to_string()),
            some => Ok(some),
        }
    })
    .await;
    create_pods(&harness.client, "plain", 5).await;
    harness.placements("batch=plain", 5).await;
    let slow_after = bound("slow=yes").await;
    println!("the other profile's five pods were bound while {} of the slow profile's were ({slow_before} to {slow_after})", slow_after - slow_before);
    assert!(slow_after < 30, "the other profile's pods waited for all 30 of the slow profile's");
    assert!(slow_after - slow_before <= 6, "the other profile's pods waited for {} of the slow profile's", slow_after - slow_before);
}
