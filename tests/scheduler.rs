//! The scheduler against the simulated API server over real HTTP: placements, the exact failure message,
//! events and conditions, several profiles, foreign pods, retries, injected API errors and failing policies.

mod common;

use common::{fixture_wasm, policy_wasm, repo_root};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wasp::registry::PolicyRegistry;
use wasp::runtime::Runtime;
use wasp::scheduler::config::{SchedulerConfig, DEFAULT_CONFIG};
use wasp::scheduler::Scheduler;
use wasp_sim::{Scenario, Simulator};

struct Harness {
    simulator: Simulator,
    client: Client,
    scheduler: Arc<Scheduler>,
    _worker: tokio::task::JoinHandle<()>,
}

fn default_config() -> SchedulerConfig {
    let mut config = SchedulerConfig::parse(DEFAULT_CONFIG).unwrap();
    config.policy_dir = repo_root().join("plugins/out");
    config
}

async fn start(scenario: &str, config: SchedulerConfig) -> Harness {
    let scenario = Scenario::parse(scenario).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut kube_config = kube::Config::new(simulator.url().parse().unwrap());
    kube_config.default_retry = false;
    let client = Client::try_from(kube_config).unwrap();
    let scheduler = Scheduler::new(&config, &Runtime::new(None).unwrap(), client.clone()).unwrap();
    let worker = tokio::spawn(scheduler.clone().run());
    Harness { simulator, client, scheduler, _worker: worker }
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
            let placed: BTreeMap<String, String> = pods
                .iter()
                .filter_map(|pod| Some((pod.metadata.name.clone()?, pod.spec.as_ref()?.node_name.clone()?)))
                .collect();
            if pods.len() == count && placed.len() == count {
                return placed;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("pods {selector} were not all bound");
    }

    async fn failed_scheduling(&self, pod_prefix: &str) -> (Pod, Event) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        for _ in 0..400 {
            let pod = self.pods().list(&ListParams::default()).await.unwrap().items.into_iter().find(|pod| pod.metadata.name.as_deref().unwrap_or("").starts_with(pod_prefix));
            let event = events.list(&ListParams::default()).await.unwrap().items.into_iter().find(|event| {
                event.reason.as_deref() == Some("FailedScheduling") && event.involved_object.name.as_deref().unwrap_or("").starts_with(pod_prefix)
            });
            if let (Some(pod), Some(event)) = (pod, event) {
                let has_condition = pod.status.as_ref().and_then(|status| status.conditions.as_ref()).is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "PodScheduled"));
                if has_condition {
                    return (pod, event);
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no FailedScheduling for {pod_prefix}");
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
    let scheduled = events.list(&ListParams::default()).await.unwrap().items.into_iter().find(|event| {
        event.reason.as_deref() == Some("Scheduled") && event.involved_object.name.as_deref() == Some("tolerant-0")
    });
    assert_eq!(scheduled.unwrap().message.as_deref(), Some("Successfully assigned default/tolerant-0 to tainted-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_later_takes_the_waiting_pod_and_events_are_aggregated() {
    let harness = start(FIT_AND_TAINTS, default_config()).await;
    harness.failed_scheduling("huge").await;
    // More retries of the same failure bump the count of one event instead of creating new ones.
    harness.simulator.store.mutate(wasp_sim::resources::nodes(), None, "small-0", |node| {
        node["metadata"]["labels"]["touched"] = json!("1");
        Ok(())
    }).unwrap();
    let events: Api<Event> = Api::namespaced(harness.client.clone(), "default");
    let mut failures = Vec::new();
    for _ in 0..200 {
        failures = events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|event| event.reason.as_deref() == Some("FailedScheduling")).collect();
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
    config.profiles.push(serde_yaml::from_str("{schedulerName: lenient, filters: [node-unschedulable]}").unwrap());
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

    // A pod for another scheduler stays pending, but once someone binds it, its requests count.
    let other = harness.pods().get("other-0").await.unwrap();
    assert!(other.spec.unwrap().node_name.is_none());
    let free: Vec<String> = ["n-0", "n-1", "n-2"].iter().map(|node| node.to_string()).filter(|node| *node != loose_node).collect();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "other-0"}, "target": {"kind": "Node", "name": free[0]}});
    harness.pods().create_subresource::<_, serde_json::Value>("binding", "other-0", &PostParams::default(), &binding).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "late", "labels": {"app": "late"}}, "spec": {"schedulerName": "wasp", "containers": [{"name": "a", "resources": {"requests": {"cpu": "1500m"}}}]}})).unwrap();
    harness.pods().create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(harness.placements("app=late", 1).await["late"], free[1], "the foreign pod left only 1 CPU on {}", free[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_binding_errors_are_retried_and_every_pod_is_bound_once() {
    let scenario = r#"
kubelet: {readyDelay: 10ms}
faults: {rules: [{verbs: [create], resources: [pods/binding], errorRate: 0.25, status: 500}]}
nodeGroups: [{name: n, count: 4, cpu: "16", memory: 64Gi}]
workloads: [{name: many, kind: Pods, replicas: 20, schedulerName: wasp, cpu: 100m}]
"#;
    let harness = start(scenario, default_config()).await;
    // Four failures in a row (0.25^4) are rare but take 1+2+4+8 s of backoff: allow a minute.
    let placed = harness.placements_within("app=many", 20, Duration::from_secs(60)).await;
    assert_eq!(placed.len(), 20);
    assert!(harness.scheduler.stats.bind_errors.load(Ordering::Relaxed) > 0, "some bindings failed and were retried");
    assert_eq!(common::settled(&harness.scheduler.stats.scheduled, 20).await, 20, "each pod bound exactly once");
}

fn config_with_misbehaving(failure_mode: &str) -> (tempfile::TempDir, SchedulerConfig) {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("resources-fit.wasm"), policy_wasm("resources-fit").1).unwrap();
    std::fs::write(directory.path().join("misbehaving.wasm"), fixture_wasm("misbehaving").1).unwrap();
    let config = SchedulerConfig::parse(&format!(
        "policyDir: {}\nprofiles: [{{schedulerName: wasp, filters: [misbehaving, resources-fit]}}]\npolicies: {{misbehaving: {{settings: {{filter: trap, only-with-label: app}}, failureMode: {failure_mode}}}}}",
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
    config.profiles[0].filters.push("least-allocated".into());
    let error = PolicyRegistry::new(&runtime, config.clone(), None).err().unwrap();
    assert_eq!(error.to_string(), "profiles[0].filters: policy least-allocated does not implement filter");
    config.profiles[0].filters.push("missing-policy".into());
    let error = PolicyRegistry::new(&runtime, config, None).err().unwrap();
    assert!(format!("{error:#}").ends_with("/plugins/out/missing-policy.wasm does not exist (used by profile wasp)"), "{error:#}");
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
async fn a_standby_takes_over_when_the_leader_stops_and_no_pod_is_bound_twice() {
    use wasp::scheduler::leader::{Candidate, LeaderElection};
    let mut config = default_config();
    config.leader_election = LeaderElection {
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(200),
        ..LeaderElection::default()
    };
    let harness_scenario = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 3, cpu: '16', memory: 64Gi}]\n";
    let scenario = Scenario::parse(harness_scenario).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = || {
        let mut kube_config = kube::Config::new(simulator.url().parse().unwrap());
        kube_config.default_retry = false;
        Client::try_from(kube_config).unwrap()
    };
    let runtime = Runtime::new(None).unwrap();
    let first = Scheduler::new(&config, &runtime, client()).unwrap();
    let second = Scheduler::new(&config, &runtime, client()).unwrap();
    let leader = tokio::spawn(first.clone().run_as_leader(Candidate::new(client(), config.leader_election.clone(), "first")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _standby = tokio::spawn(second.clone().run_as_leader(Candidate::new(client(), config.leader_election.clone(), "second")));

    let harness_client = client();
    create_pods(&harness_client, "before", 10).await;
    let pods: Api<Pod> = Api::namespaced(harness_client.clone(), "default");
    let bound = async |batch: &str| {
        pods.list(&ListParams::default().labels(&format!("batch={batch}"))).await.unwrap().items.iter().filter(|pod| pod.spec.as_ref().unwrap().node_name.is_some()).count()
    };
    for _ in 0..200 {
        if bound("before").await == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(bound("before").await, 10);
    assert_eq!(common::settled(&first.stats.scheduled, 10).await, 10, "the leader scheduled");
    assert_eq!(second.stats.scheduled.load(Ordering::Relaxed), 0, "the standby waited");

    leader.abort();
    create_pods(&harness_client, "after", 10).await;
    for _ in 0..400 {
        if bound("after").await == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(bound("after").await, 10, "the standby took over");
    assert_eq!(common::settled(&second.stats.scheduled, 10).await, 10);
    let events: Api<Event> = Api::namespaced(harness_client.clone(), "default");
    let scheduled = events.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|event| event.reason.as_deref() == Some("Scheduled")).count();
    assert_eq!(scheduled, 20, "one Scheduled event per pod: nothing bound twice");
    let lease: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(harness_client, "kube-system");
    let spec = lease.get("wasp-scheduler").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("second"));
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_readiness_endpoints() {
    let harness = start(TWO_PODS, default_config()).await;
    let address = wasp::scheduler::http::serve(harness.scheduler.clone(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    harness.placements("app=app", 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let get = |path: &'static str| common::http_get(address, path);
    assert_eq!(get("/healthz").await, (200, "ok".to_string()));
    assert_eq!(get("/readyz").await.0, 200);
    let (status, metrics) = get("/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains(r#"wasp_schedule_attempts_total{profile="wasp",result="scheduled"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"wasp_policy_call_duration_seconds_count{policy="resources-fit",operation="filter"}"#), "{metrics}");
    assert!(metrics.contains(r#"wasp_pending_pods{queue="active"} 0"#), "{metrics}");
    assert!(metrics.contains("wasp_scheduling_e2e_duration_seconds_bucket"), "{metrics}");
    assert!(metrics.contains(r#"wasp_policy_info{policy="resources-fit",version="0.1.0",sha256=""#), "{metrics}");
    assert!(metrics.contains("wasp_policy_generation 1"), "{metrics}");
}

#[test]
fn large_clusters_are_filtered_in_parallel_with_the_same_verdicts() {
    use wasp::scheduler::cycle::{schedule, Cursor, Decision};
    let runtime = Runtime::new(None).unwrap();
    let config = default_config();
    let generation = PolicyRegistry::new(&runtime, config, None).unwrap().current();
    let profile = &generation.profiles["wasp"];
    // 600 nodes: every third has room for the pod, the others are 1-CPU nodes.
    let mut cluster = wasp::cluster::ClusterState::new();
    for index in 0..600 {
        let cpu = if index % 3 == 0 { "8" } else { "1" };
        cluster.upsert_node(common::simple_node(&format!("n{index}"), cpu, "16Gi", ""));
    }
    let pod = common::simple_pod("p", "2", "");
    match schedule(profile, &cluster, &pod, &mut Cursor::default(), 100) {
        Decision::Bind { node, feasible, evaluated } => {
            assert_eq!((feasible, evaluated), (200, 600), "all nodes evaluated at 100%");
            assert_eq!(node.trim_start_matches('n').parse::<usize>().unwrap() % 3, 0, "{node} has room");
        }
        other => panic!("expected a binding, got {other:?}"),
    }
    let huge = common::simple_pod("huge", "64", "");
    assert_eq!(
        schedule(profile, &cluster, &huge, &mut Cursor::default(), 0),
        Decision::Unschedulable { message: "0/600 nodes are available: 600 Insufficient cpu.".into(), waits_for_other_pods: false }
    );
}
