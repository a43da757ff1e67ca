//! The rescheduler against the simulated API server over real HTTP, with the scheduler placing the replacements:
//! a tainted node emptied one pod at a time within its workload's budget, dry runs that change nothing, a
//! policy that would move the same workload forever, protections, and policies that answer badly. Evictions are
//! counted where they arrive (a fault rule that matches every eviction and injects nothing).

mod common;

use common::repo_root;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wasp::config::{HostConfig, ReschedulerSection};
use wasp::host::Host;
use wasp::kube::ApiClient;
use wasp::rescheduler::plan::{Decision, Skip};
use wasp::runtime::Runtime;
use wasp_sim::{Scenario, Simulator};

struct Harness {
    simulator: Simulator,
    client: Client,
    host: Arc<Host>,
    _loops: Option<tokio::task::JoinHandle<()>>,
}

/// The built-in configuration (the `wasp` profile), the test fixtures' policies too, and this rescheduler section.
fn config(rescheduler: &str) -> HostConfig {
    let mut config = HostConfig::built_in();
    config.policy_dir = repo_root().join("plugins/out");
    config.rescheduler = Some(serde_yaml::from_str::<ReschedulerSection>(rescheduler).unwrap());
    config.validate().unwrap();
    config
}

/// Starts the simulator and a host; with `loops`, the scheduler and rescheduler run; without, only the
/// informers (the test calls `run_once`).
async fn start(scenario: &str, config: HostConfig, loops: bool) -> Harness {
    // RUST_LOG=wasp=debug shows the host's logs for a failing test.
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).try_init();
    let scenario = Scenario::parse(scenario).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let host = Host::with_config(&config, &Runtime::new(None).unwrap(), api.clone()).unwrap();
    let loops = if loops {
        Some(tokio::spawn(host.clone().run_loops()))
    } else {
        host.start_informers();
        None
    };
    Harness { simulator, client: api.client, host, _loops: loops }
}

impl Harness {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Node of each Ready pod with `selector`, once `count` of them are bound and Ready.
    async fn ready_placements(&self, selector: &str, count: usize, patience: Duration) -> BTreeMap<String, String> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let pods = self.pods().list(&ListParams::default().labels(selector)).await.unwrap().items;
            let placed: BTreeMap<String, String> = pods
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none() && is_ready(pod))
                .filter_map(|pod| Some((pod.metadata.name.clone()?, pod.spec.as_ref()?.node_name.clone()?)))
                .collect();
            if placed.len() == count && pods.len() == count {
                return placed;
            }
            assert!(std::time::Instant::now() < deadline, "pods {selector}: {} of {count} placed and Ready: {placed:?}", placed.len());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the host's informers show `count` Ready pods with `selector` bound (the plan reads them).
    async fn host_sees_ready(&self, app: &str, count: usize) {
        let host = self.host.clone();
        let app = app.to_string();
        common::eventually("the host sees every pod Ready", move || {
            let state = host.cluster.read();
            let ready = state.bound_pods().filter(|(pod, _)| pod.ready && pod.labels.iter().any(|(key, value)| key == "app" && *value == app)).count();
            ready == count
        })
        .await;
    }

    async fn taint(&self, node: &str) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}});
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    /// Eviction requests that reached the simulator (its fault rule 0 matches them all and injects nothing).
    fn evictions_received(&self) -> u64 {
        self.simulator.state.faults.counts(0).0
    }

    async fn events_from(&self, component: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let all = events.list(&ListParams::default()).await.unwrap().items;
        all.into_iter().filter(|event| event.reporting_component.as_deref() == Some(component)).collect()
    }
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// Watches pods with `selector` and keeps the fewest Ready at any moment after the first list.
fn track_fewest_ready(client: Client, selector: &str) -> Arc<AtomicI64> {
    let fewest = Arc::new(AtomicI64::new(i64::MAX));
    let kept = fewest.clone();
    let selector = selector.to_string();
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let listed = pods.list(&ListParams::default().labels(&selector)).await.unwrap();
        let mut ready: HashMap<String, bool> =
            listed.items.iter().map(|pod| (pod.metadata.name.clone().unwrap(), is_ready(pod) && pod.metadata.deletion_timestamp.is_none())).collect();
        kept.store(ready.values().filter(|ready| **ready).count() as i64, Ordering::SeqCst);
        let version = listed.metadata.resource_version.unwrap();
        let mut stream = pods.watch(&WatchParams::default().labels(&selector), &version).await.unwrap().boxed();
        while let Some(Ok(event)) = stream.next().await {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    let alive = pod.metadata.deletion_timestamp.is_none();
                    ready.insert(pod.metadata.name.clone().unwrap(), alive && is_ready(&pod));
                }
                WatchEvent::Deleted(pod) => {
                    ready.remove(pod.metadata.name.as_deref().unwrap());
                }
                _ => continue,
            }
            kept.fetch_min(ready.values().filter(|ready| **ready).count() as i64, Ordering::SeqCst);
        }
    });
    fewest
}

const COUNT_EVICTIONS: &str = "faults: {seed: 7, rules: [{verbs: [create], resources: [pods/eviction], errorRate: 0.0}]}";

/// How a node is marked for maintenance, and the strategy that empties it.
enum Mark {
    /// `kubelet taint ... maintenance=true:NoSchedule`, emptied by remove-pods-violating-node-taints.
    Taint,
    /// A `wasp.dev/maintenance` label only (node-unschedulable keeps wasp's new pods off it), emptied by drain-for-maintenance.
    Label,
}

/// A node marked for maintenance is emptied one pod at a time (the workload's budget would allow two), every
/// replacement placed by the scheduler elsewhere, each pod evicted once, bare pods left alone.
async fn node_in_maintenance_is_emptied(mark: Mark) {
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 300ms}}\nnodeGroups: [{{name: n, count: 3, cpu: '4', memory: 16Gi}}]\n\
         workloads:\n\
         - {{name: web, replicas: 5, schedulerName: wasp, cpu: 500m, pdb: {{maxUnavailable: 2}}}}\n\
         - {{name: solo, kind: Pods, replicas: 3, schedulerName: wasp, cpu: 100m}}\n"
    );
    let (policy, expected_reason) = match mark {
        Mark::Taint => ("remove-pods-violating-node-taints", "has taint {maintenance: true} the pod does not tolerate"),
        Mark::Label => ("drain-for-maintenance", "is marked for maintenance (wasp.dev/maintenance)"),
    };
    // An interval longer than the test: the change to the node triggers the first run, pacing the next ones.
    let rescheduler = format!("strategies: [{{policy: {policy}}}]\ninterval: 1h\nlimits: {{maxPerRun: 10, maxPerWorkload: 1}}");
    let harness = start(&scenario, config(&rescheduler), true).await;
    let before = harness.ready_placements("app=web", 5, Duration::from_secs(20)).await;
    let solos = harness.ready_placements("app=solo", 3, Duration::from_secs(20)).await;
    // The node with the most web pods goes into maintenance.
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for node in before.values() {
        *per_node.entry(node).or_default() += 1;
    }
    let (marked, moving) = per_node.iter().max_by_key(|(_, count)| **count).map(|(node, count)| (node.to_string(), *count)).unwrap();
    assert!(moving >= 2, "least-allocated spreads 5 pods over 3 nodes: {before:?}");
    let fewest_ready = track_fewest_ready(harness.client.clone(), "app=web");
    // A bare pod on the node (placed there by name): nothing would recreate it, so the node cannot be emptied.
    let pinned: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "labels": {"app": "pinned"}},
        "spec": {"nodeName": marked, "schedulerName": "wasp", "containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": "10m"}}}]},
    }))
    .unwrap();
    harness.pods().create(&PostParams::default(), &pinned).await.unwrap();
    harness.ready_placements("app=pinned", 1, Duration::from_secs(30)).await;
    match mark {
        Mark::Taint => harness.taint(&marked).await,
        Mark::Label => {
            let nodes: Api<Node> = Api::all(harness.client.clone());
            let patch = json!({"metadata": {"labels": {"wasp.dev/maintenance": "kernel-upgrade"}}});
            nodes.patch(&marked, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        }
    }

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let placed = harness.ready_placements("app=web", 5, Duration::from_secs(60)).await;
        if !placed.values().any(|node| *node == marked) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "web pods still on {marked}: {placed:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each pod on the node was evicted once: counted where the requests arrived, and by the host.
    let stats = &harness.host.rescheduler.stats;
    assert_eq!(harness.evictions_received(), moving as u64, "one eviction per pod that had to move");
    assert_eq!(stats.eviction_requests.load(Ordering::Relaxed), moving as u64);
    // The budget would allow two at once; pacing waits for each replacement to be Ready.
    assert_eq!(fewest_ready.load(Ordering::SeqCst), 4, "never more than one web pod down at a time");
    // Bare pods are protected: the ones on the marked node are still there.
    let solos_after = harness.ready_placements("app=solo", 3, Duration::from_secs(5)).await;
    assert_eq!(solos_after, solos);
    let evicted_events = harness.events_from("wasp-rescheduler").await;
    // What keeps the node from being emptied is said on the node: the bare pods.
    let blocked = evicted_events
        .iter()
        .find(|event| event.reason.as_deref() == Some("EvictionBlocked") && event.involved_object.name.as_deref() == Some(marked.as_str()));
    let blocked = blocked.and_then(|event| event.message.as_deref()).unwrap_or_else(|| panic!("no EvictionBlocked event on {marked}: {evicted_events:?}"));
    assert!(
        blocked.contains(&format!("that policy {policy} proposed stay on node {marked}"))
            && blocked.contains("default/pinned (no controller would recreate it (bare pod))"),
        "{blocked}"
    );
    let evicted: Vec<&Event> = evicted_events.iter().filter(|event| event.reason.as_deref() == Some("Evicted")).collect();
    assert_eq!(evicted.len(), moving, "{evicted_events:?}");
    let message = evicted[0].message.as_deref().unwrap();
    assert!(message.starts_with(&format!("Evicted from node {marked} by policy {policy}: node {marked} {expected_reason}")), "{message}");
    // Only drain-for-maintenance gives a placement hint; without one the event claims no more than the fit check.
    let placed = match policy == "drain-for-maintenance" {
        true => "its replacement is steered to node n-",
        false => "the fit check found room on node n-",
    };
    assert!(message.contains(placed), "{message}");
    let status = harness.host.endpoints.policies_document();
    assert!(status["rescheduler"]["lastRun"]["policies"][0]["policy"] == policy, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tainted_node_is_emptied_one_pod_at_a_time_and_the_scheduler_places_the_replacements() {
    node_in_maintenance_is_emptied(Mark::Taint).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_labelled_for_maintenance_is_drained_one_pod_at_a_time() {
    node_in_maintenance_is_emptied(Mark::Label).await;
}

/// The loops run side by side: a rescheduling run does not wait for the scheduler to place a burst of pending
/// pods (polled in one task with it, the rescheduler did not run until the scheduler's queue was empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescheduling_run_happens_while_the_scheduler_works_through_a_burst() {
    const PODS: usize = 3000;
    let scenario = format!("nodeGroups: [{{name: n, count: 50, cpu: '64', memory: 256Gi, pods: 110}}]\nworkloads: [{{name: burst, kind: Pods, replicas: {PODS}, schedulerName: wasp, cpu: 10m}}]\n");
    let harness = start(&scenario, config("strategies: [{policy: remove-duplicates}]\ndryRun: true\ninterval: 1h"), true).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while harness.host.rescheduler.stats.runs.load(Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "no rescheduling run in 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await; // poll interval of the condition wait, bounded by the deadline
    }
    // Counted from the scheduler's decisions (a binding request goes out with each), not from bindings, which
    // lag behind.
    let decided = harness.host.scheduler.stats.bind_requests.load(Ordering::Relaxed) as usize;
    assert!(decided < PODS / 2, "the first rescheduling run ended only once the scheduler had placed {decided} of {PODS} pods");
}

/// One read guard: a second `read()` in the same expression waits behind an informer's pending write while the
/// first guard blocks that write, a deadlock (it hung a CI run).
fn host_sees_taint(host: &Host, node: &str) -> bool {
    let state = host.cluster.read();
    state.node_id(node).is_some_and(|id| state.node(id).is_some_and(|(node, _)| !node.taints.is_empty()))
}

const TWO_NODES_SIX_REPLICAS: &str = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 2, cpu: '4', memory: 16Gi}]\n\
     workloads: [{name: web, replicas: 6, schedulerName: wasp, cpu: 500m, pdb: {minAvailable: 5}}]\n";

/// The promise "a workload's replacements are not evicted again once it lost maxEvictionsPerWorkload pods within
/// the window" across a restart or a failover: the evictions are kept in a ConfigMap, and the next leader's first
/// run reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_the_workloads_eviction_window() {
    let scenario = format!("{COUNT_EVICTIONS}\n{TWO_NODES_SIX_REPLICAS}");
    let rescheduler = "strategies: [{policy: remove-pods-violating-node-taints}]\ninterval: 1h\npacing: {maxEvictionsPerWorkload: 1, window: 1h, replacementTimeout: 1s}\nlimits: {maxPerWorkload: 5}";
    let config = config(rescheduler);
    let mut harness = start(&scenario, config.clone(), true).await;
    let before = harness.ready_placements("app=web", 6, Duration::from_secs(20)).await;
    harness.host_sees_ready("web", 6).await;
    let tainted = before.values().next().unwrap().clone();
    harness.taint(&tainted).await;
    // The leader's run after the taint evicts one web pod (the window allows one) and keeps it in a ConfigMap.
    let kept: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(harness.client.clone(), &config.leader_election.lease_namespace);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let record = loop {
        if let Some(config_map) = kept.get_opt("wasp-rescheduler-memory").await.unwrap() {
            break config_map.data.unwrap()["evictions.json"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "no evictions kept");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval of the condition wait
    };
    assert!(record.contains("default/ReplicaSet/web-"), "{record}");
    // The evicted pod's replacement, placed on the other node by this leader's scheduler.
    let after = harness.ready_placements("app=web", 6, Duration::from_secs(20)).await;
    let replacement = after.keys().find(|name| !before.contains_key(*name)).unwrap().clone();
    harness._loops.take().unwrap().abort();
    assert_eq!(harness.evictions_received(), 1);

    // The host is gone (a crash, a rollout); another takes over with an empty memory of its own. The other node
    // is tainted too, so the strategy proposes the replacement as well.
    let other = after[&replacement].clone();
    harness.taint(&other).await;
    let api = ApiClient::from_config(kube::Config::new(harness.simulator.url().parse().unwrap())).unwrap();
    let next = Host::with_config(&config, &Runtime::new(None).unwrap(), api).unwrap();
    next.start_informers();
    next.cluster.wait_until_ready().await;
    let host = next.clone();
    common::eventually("the new host sees both taints", || host_sees_taint(&host, &tainted) && host_sees_taint(&host, &other)).await;
    let plan = next.rescheduler.run_once(false).await.unwrap();
    // The replacement waits out the window the first leader's eviction opened: moving it would undo that move.
    let held = plan.entries.iter().find(|entry| entry.name == replacement).unwrap_or_else(|| panic!("{replacement} not proposed:\n{}", plan.table()));
    assert!(matches!(&held.decision, Decision::Skip(Skip::Backoff(_))), "{}", plan.table());
    assert_eq!(harness.evictions_received(), 1, "a second eviction within the window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_simulates_budgets_and_placement_and_changes_nothing() {
    let scenario = format!("{COUNT_EVICTIONS}\n{TWO_NODES_SIX_REPLICAS}");
    let rescheduler = "strategies: [{policy: remove-pods-violating-node-taints}]\ndryRun: true\nlimits: {maxPerWorkload: 5}";
    let harness = start(&scenario, config(rescheduler), true).await;
    let before = harness.ready_placements("app=web", 6, Duration::from_secs(20)).await;
    harness.host_sees_ready("web", 6).await;
    let tainted = before.values().next().unwrap().clone();
    let on_tainted = before.values().filter(|node| **node == tainted).count();
    harness.taint(&tainted).await;
    let host = harness.host.clone();
    common::eventually("the host sees the taint", || host_sees_taint(&host, &tainted)).await;

    let plan = harness.host.rescheduler.run_once(false).await.unwrap();
    assert!(plan.dry_run);
    assert_eq!(plan.entries.len(), on_tainted, "{}", plan.table());
    // By default a strategy's instances, with their copy of the cluster, go when the run is done.
    let strategy = harness.host.policies.current().policies["remove-pods-violating-node-taints"].clone();
    assert_eq!((strategy.idle_instances(), strategy.memory_in_use()), (0, 0));
    // minAvailable 5 of 6 allows one disruption: the plan spends it, and the budget refuses the rest.
    let evictions: Vec<_> = plan.evictions().collect();
    assert_eq!(evictions.len(), 1, "{}", plan.table());
    let other = before.values().find(|node| **node != tainted).unwrap();
    assert_eq!(evictions[0].target(), Some(other.as_str()), "the only other node");
    let refused: Vec<_> = plan.entries.iter().filter(|entry| matches!(&entry.decision, Decision::Skip(Skip::Budget(_)))).collect();
    assert_eq!(refused.len(), on_tainted - 1, "{}", plan.table());
    let table = plan.table();
    assert!(table.contains("skip: pdb") && table.contains("PodDisruptionBudget default/web allows no more disruptions"), "{table}");
    assert!(table.contains(&format!("evict -> {other} (dry run)")), "{table}");
    assert!(table.ends_with(&format!("{on_tainted} candidates, 1 to evict (dry run: nothing evicted)\n")), "{table}");
    // Nothing was sent or written.
    assert_eq!(harness.evictions_received(), 0);
    assert!(harness.events_from("wasp-rescheduler").await.is_empty());
    assert_eq!(harness.ready_placements("app=web", 6, Duration::from_secs(5)).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_always_proposes_the_same_workload_causes_no_eviction_loop() {
    // pod-lifetime at one second proposes every pod of `web` on every run, its replacements as soon as they are a
    // second old: the move settles in the plan (a new pod is not proposed), and only the workload's backoff stops
    // the loop. Three nodes for two pods: the node a pod leaves and the empty one score the same, so the fit check
    // lets it go (with two, the profile would put it right back).
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\n\
         nodeGroups: [{{name: n, count: 3, cpu: '4', memory: 16Gi}}]\n\
         workloads: [{{name: web, replicas: 2, schedulerName: wasp, cpu: 100m}}]\n"
    );
    let rescheduler = "strategies: [{policy: pod-lifetime}]\ninterval: 1s\npacing: {maxEvictionsPerWorkload: 3, window: 1h}\nkeepStrategiesWarm: true";
    let mut config = config(rescheduler);
    config.policies.insert("pod-lifetime".into(), serde_yaml::from_str("settings: {maxPodLifeTimeSeconds: 1}").unwrap());
    let harness = start(&scenario, config, true).await;
    let stats = &harness.host.rescheduler.stats;
    common::eventually("three evictions", || stats.evicted.load(Ordering::Relaxed) >= 3).await;
    let runs = stats.runs.load(Ordering::Relaxed);
    let rescheduler = harness.host.rescheduler.clone();
    // Several more runs: the workload backs off, whatever the policy says. Past the third eviction only an original
    // pod not evicted yet may still go (one at most of two: the first eviction took an original).
    common::eventually_within("five more runs", Duration::from_secs(30), || rescheduler.stats.runs.load(Ordering::Relaxed) >= runs + 5).await;
    let evicted = stats.eviction_requests.load(Ordering::Relaxed);
    assert!((3..=4).contains(&evicted), "{evicted} evictions");
    assert_eq!(harness.evictions_received(), evicted);
    let runs = stats.runs.load(Ordering::Relaxed);
    common::eventually_within("five more runs", Duration::from_secs(30), || rescheduler.stats.runs.load(Ordering::Relaxed) >= runs + 5).await;
    assert_eq!(stats.eviction_requests.load(Ordering::Relaxed), evicted, "no eviction once both pods are replacements");
    let last = harness.host.rescheduler.last_run().unwrap();
    assert_eq!(last.skipped.get("backoff"), Some(&2), "{last:?}");
    // keepStrategiesWarm: the strategy's instance, with its copy of the cluster, stays for the next run.
    let strategy = harness.host.policies.current().policies["pod-lifetime"].clone();
    assert!(strategy.idle_instances() == 1 && strategy.memory_in_use() > 0);
}

#[test]
fn an_answer_naming_unknown_pods_twice_or_too_many_is_malformed_and_a_trap_is_a_trap() {
    let runtime = common::runtime();
    let mut cluster = common::cluster_of(vec![common::simple_node("n", "4", "8Gi", "")]);
    cluster.upsert_pod(common::simple_pod("a", "100m", ""), "n");
    cluster.upsert_pod(common::simple_pod("b", "100m", ""), "n");
    let (source, wasm) = common::fixture_wasm("misbehaving");
    for (mode, expected) in [
        ("unknown-id", "malformed answer from propose: pod id 4294967295 is not a pod of the cluster"),
        ("duplicate", "malformed answer from propose: pod id 0 is proposed twice"),
        // A million evictions for two pods: refused by its size before it is copied into the host.
        ("huge", "malformed answer from propose: an answer of more than"),
        ("trap", "propose trapped"),
    ] {
        let options = wasp::policy::PolicyOptions { settings: format!(r#"{{"evict": "{mode}"}}"#), ..Default::default() };
        let policy = wasp::policy::LoadedPolicy::load(&runtime, &source, &wasm, options).unwrap();
        let context = wasp::contract::EvictContext { now: 0, pending: Vec::new(), failed: Vec::new() };
        let error = policy.propose(&cluster, &context).unwrap_err().to_string();
        assert!(error.contains(expected), "{mode}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_that_fails_evicts_nothing_and_the_others_go_on() {
    // The fixture answers badly only where a node has the label `bad`: past the canary, on the live cluster.
    let scenario = format!("{COUNT_EVICTIONS}\n{}", TWO_NODES_SIX_REPLICAS.replace("memory: 16Gi", "memory: 16Gi, labels: {bad: 'yes'}"));
    let policies = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo_root().join("plugins/out")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, policies.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::copy(repo_root().join("target/wasm-fixtures/misbehaving.wasm"), policies.path().join("misbehaving.wasm")).unwrap();
    let mut config = config("strategies: [{policy: misbehaving}, {policy: remove-pods-violating-node-taints}]\ndryRun: true");
    config.policy_dir = policies.path().to_path_buf();
    config.policies.insert("misbehaving".into(), serde_yaml::from_str("settings: {evict: duplicate, only-with-label: bad}").unwrap());
    config.validate().unwrap();
    let harness = start(&scenario, config, true).await;
    let before = harness.ready_placements("app=web", 6, Duration::from_secs(20)).await;
    harness.host_sees_ready("web", 6).await;
    let tainted = before.values().next().unwrap().clone();
    harness.taint(&tainted).await;
    let host = harness.host.clone();
    common::eventually("the host sees the taint", || host_sees_taint(&host, &tainted)).await;
    let plan = harness.host.rescheduler.run_once(false).await.unwrap();
    assert_eq!(plan.failures.len(), 1, "{}", plan.table());
    assert_eq!(plan.failures[0].policy, "misbehaving");
    assert!(plan.failures[0].error.contains("is proposed twice"), "{}", plan.failures[0].error);
    assert!(!plan.entries.is_empty() && plan.entries.iter().all(|entry| entry.policy == "remove-pods-violating-node-taints"), "{}", plan.table());
    assert!(plan.table().contains("policy misbehaving failed and proposes nothing this run: malformed answer from propose"), "{}", plan.table());
    let last = harness.host.rescheduler.last_run().unwrap();
    assert!(last.policies[0].error.as_deref().unwrap().contains("proposed twice"), "/policies shows the failure: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasp_reschedule_dry_run_prints_the_plan_for_any_cluster_and_changes_nothing() {
    // Pods already bound to a node tainted for maintenance; no host runs, the command plans on its own.
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\nnodeGroups:\n\
         - {{name: old, count: 1, cpu: '8', memory: 16Gi, taints: [{{key: maintenance, value: 'true', effect: NoSchedule}}]}}\n\
         - {{name: new, count: 2, cpu: '8', memory: 16Gi}}\n\
         workloads: [{{name: web, replicas: 3, schedulerName: wasp, cpu: 500m, podSpec: {{nodeName: old-0}}, pdb: {{maxUnavailable: 1}}}}]\n"
    );
    let simulator = Simulator::start(&Scenario::parse(&scenario).unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap().client;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pods.list(&ListParams::default()).await.unwrap().items.iter().filter(|pod| is_ready(pod)).count() < 3 {
        assert!(std::time::Instant::now() < deadline, "the pods never became Ready");
        tokio::time::sleep(Duration::from_millis(20)).await; // poll interval of the condition wait, bounded by the deadline
    }
    let directory = tempfile::tempdir().unwrap();
    let kubeconfig = directory.path().join("kubeconfig");
    simulator.write_kubeconfig(&kubeconfig).unwrap();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["reschedule", "--dry-run", "--kubeconfig", kubeconfig.to_str().unwrap(), "--strategy", "remove-pods-violating-node-taints"])
            .current_dir(repo_root())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("POD") && lines[0].contains("NODE") && lines[0].contains("POLICY") && lines[0].contains("DECISION"), "{stdout}");
    // One per workload per run (the default limit); the budget would refuse a second one anyway.
    let evicting: Vec<&&str> = lines.iter().filter(|line| line.contains("evict -> new-")).collect();
    assert_eq!(evicting.len(), 1, "{stdout}");
    assert!(evicting[0].contains("remove-pods-violating-node-taints") && evicting[0].contains("(dry run)"), "{stdout}");
    assert_eq!(
        lines.iter().filter(|line| line.contains("skip: limit") && line.contains("maxPerWorkload 1 reached for ReplicaSet default/web-")).count(),
        2,
        "{stdout}"
    );
    assert_eq!(*lines.last().unwrap(), "3 candidates, 1 to evict (dry run: nothing evicted)");
    assert_eq!(simulator.state.faults.counts(0).0, 0, "a dry run sends no eviction");
}

#[test]
fn wasp_simulate_rebalances_a_grown_cluster_and_the_spread_of_utilization_shrinks() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(["simulate", "--scenario", "sim/scenarios/rebalance.yaml", "--config", "examples/config/rebalance.yaml"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let spread = stdout.lines().find(|line| line.starts_with("spread of requested cpu across nodes")).unwrap_or_else(|| panic!("{stdout}"));
    let numbers: Vec<f64> = spread.split(|c: char| !(c.is_ascii_digit() || c == '.')).filter_map(|part| part.parse().ok()).collect();
    let (before, after) = (numbers[numbers.len() - 2], numbers[numbers.len() - 1]);
    assert!(before > 30.0 && after < before / 1.5, "the policy's own objective improves: {spread}");
    // Each eviction in the report: from an old node, by the strategy, its replacement on a new node.
    let moves: Vec<Vec<&str>> = stdout
        .lines()
        .skip_while(|line| !line.starts_with("evictions and deletions ("))
        .skip(2)
        .take_while(|line| !line.is_empty())
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert!(!moves.is_empty(), "{stdout}");
    for row in &moves {
        // TIME POD FROM TO BY REASON...
        assert!(row[2].starts_with("old-") && row[3].starts_with("new-") && row[4] == "low-node-utilization", "{row:?}\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_gets_room_from_lower_priority_pods_and_is_placed_on_the_nominated_node() {
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms, terminationDelay: 100ms}}\nnodeGroups: [{{name: n, count: 1, cpu: '4', memory: 16Gi}}]\n\
         workloads: [{{name: filler, replicas: 4, schedulerName: wasp, cpu: '1', priority: 0}}]\n"
    );
    let rescheduler = "strategies: [{policy: make-room-for-pending}]\ninterval: 1h\npendingTrigger: 1s\nlimits: {maxPerWorkload: 5}";
    let harness = start(&scenario, config(rescheduler), true).await;
    harness.ready_placements("app=filler", 4, Duration::from_secs(20)).await;
    let vip: Pod = serde_json::from_value(json!({
        "metadata": {"name": "vip", "labels": {"app": "vip"}},
        "spec": {"schedulerName": "wasp", "priority": 1000, "containers": [{"name": "app", "image": "app", "resources": {"requests": {"cpu": "2"}}}]},
    }))
    .unwrap();
    let created = harness.pods().create(&Default::default(), &vip).await.unwrap();
    // Every nominated node the pod's status shows, as it changes.
    let nominated = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = nominated.clone();
    let mut changes =
        harness.pods().watch(&WatchParams::default().fields("metadata.name=vip"), created.metadata.resource_version.as_deref().unwrap()).await.unwrap().boxed();
    tokio::spawn(async move {
        // Bookmarks come every few seconds on a busy machine: skip them, not stop at them.
        while let Some(Ok(event)) = changes.next().await {
            if let WatchEvent::Modified(pod) = event {
                if let Some(node) = pod.status.and_then(|status| status.nominated_node_name) {
                    seen.lock().unwrap().push(node);
                }
            }
        }
    });
    // The scheduler finds no room; after pendingTrigger the rescheduler makes some.
    let placed = harness.ready_placements("app=vip", 1, Duration::from_secs(40)).await;
    assert_eq!(placed["vip"], "n-0");
    assert_eq!(harness.evictions_received(), 2, "the fewest pods that make room: two of one CPU for two CPUs");
    assert!(nominated.lock().unwrap().iter().any(|node| node == "n-0"), "the host nominated the node: {:?}", nominated.lock().unwrap());
    let events = harness.events_from("wasp-rescheduler").await;
    let preemptor = format!("Preempted by pod {} on node n-0 (policy make-room-for-pending: ", created.metadata.uid.unwrap());
    let preempted: Vec<&Event> =
        events.iter().filter(|event| event.reason.as_deref() == Some("Preempted") && event.message.as_deref().unwrap_or("").starts_with(&preemptor)).collect();
    assert_eq!(preempted.len(), 2, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_preempts_at_once_and_passes_over_a_node_whose_victim_a_budget_protects() {
    // a-0 holds two replicas of `guarded`, whose budget allows no disruption, and b-0 three of `plain`. For 2.5
    // CPUs, one guarded pod is the best victim (one pod) but may not go: the host must take b-0's two instead.
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms, terminationDelay: 100ms}}\nnodeGroups:\n\
         - {{name: a, count: 1, cpu: '4', memory: 16Gi, labels: {{pool: a}}}}\n\
         - {{name: b, count: 1, cpu: '4', memory: 16Gi, labels: {{pool: b}}}}\n\
         workloads:\n\
         - {{name: guarded, replicas: 2, schedulerName: wasp, cpu: 1500m, priority: 0, pdb: {{minAvailable: 2}}, podSpec: {{nodeSelector: {{pool: a}}}}}}\n\
         - {{name: plain, replicas: 3, schedulerName: wasp, cpu: '1', priority: 0, podSpec: {{nodeSelector: {{pool: b}}}}}}\n"
    );
    // No strategy, and neither an interval nor pendingTrigger that comes within the test: only the scheduler's
    // request for preemption can make room.
    // maxPerWorkload 1 (the default) does not hold back a preemption's victims: two replicas of `plain` go.
    let rescheduler = "strategies: []\npreemption: {policy: make-room-for-pending}\ninterval: 1h\npendingTrigger: 1h";
    let harness = start(&scenario, config(rescheduler), true).await;
    harness.ready_placements("app=guarded", 2, Duration::from_secs(20)).await;
    harness.ready_placements("app=plain", 3, Duration::from_secs(20)).await;
    let important = |name: &str, policy: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"schedulerName": "wasp", "priority": 1000, "preemptionPolicy": policy,
                     "containers": [{"name": "app", "image": "app", "resources": {"requests": {"cpu": "2500m"}}}]},
        }))
        .unwrap()
    };
    // First a pod that may not preempt: it waits, and takes nobody's room.
    harness.pods().create(&Default::default(), &important("patient", "Never")).await.unwrap();
    let stats = harness.host.scheduler.stats.clone();
    common::eventually_within("the scheduler finds no room for patient", Duration::from_secs(20), || stats.unschedulable.load(Ordering::Relaxed) >= 1).await;
    let vip = harness.pods().create(&Default::default(), &important("vip", "PreemptLowerPriority")).await.unwrap();
    let placed = harness.ready_placements("app=vip", 1, Duration::from_secs(30)).await;
    assert_eq!(placed["vip"], "b-0");
    assert_eq!(harness.evictions_received(), 2, "two plain pods, and no request for a guarded one");
    let patient = harness.pods().get("patient").await.unwrap();
    assert!(patient.spec.unwrap().node_name.is_none(), "preemptionPolicy Never waits");
    assert!(patient.status.unwrap().nominated_node_name.is_none());
    let events = harness.events_from("wasp-rescheduler").await;
    let preemptor = format!("Preempted by pod {} on node b-0", vip.metadata.uid.unwrap());
    let preempted =
        events.iter().filter(|event| event.reason.as_deref() == Some("Preempted") && event.message.as_deref().unwrap_or("").starts_with(&preemptor)).count();
    assert_eq!(preempted, 2, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policys_placement_hint_sends_the_replacement_where_the_scheduler_alone_would_not() {
    // web prefers pool x (node affinity) and is alone there; high-node-utilization empties x and asks for the
    // fullest node with room, y, where neither the affinity nor least-allocated would send it.
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms, terminationDelay: 100ms}}\nnodeGroups:\n\
         - {{name: x, count: 1, cpu: '10', memory: 16Gi, labels: {{pool: x}}}}\n\
         - {{name: y, count: 1, cpu: '10', memory: 16Gi, labels: {{pool: y}}}}\n\
         - {{name: z, count: 1, cpu: '10', memory: 16Gi, labels: {{pool: z}}}}\n\
         workloads:\n\
         - {{name: hog, kind: Pods, replicas: 1, cpu: '7', podSpec: {{nodeName: y-0}}}}\n\
         - {{name: mid, kind: Pods, replicas: 1, cpu: '3', podSpec: {{nodeName: z-0}}}}\n\
         - {{name: web, replicas: 1, schedulerName: wasp, cpu: '1', podSpec: {{affinity: {{nodeAffinity: {{preferredDuringSchedulingIgnoredDuringExecution: [{{weight: 100, preference: {{matchExpressions: [{{key: pool, operator: In, values: [x]}}]}}}}]}}}}}}}}\n"
    );
    let rescheduler = "strategies: [{policy: high-node-utilization}]\ninterval: 2s\npacing: {maxEvictionsPerWorkload: 1}";
    let harness = start(&scenario, config(rescheduler), true).await;
    let stats = &harness.host.rescheduler.stats;
    common::eventually_within("one eviction", Duration::from_secs(30), || stats.evicted.load(Ordering::Relaxed) == 1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let placed = harness.ready_placements("app=web", 1, Duration::from_secs(20)).await;
        if placed.values().all(|node| node == "y-0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the replacement went to {placed:?}, not y-0");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(harness.evictions_received(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budgets_refusal_is_retried_later_with_backoff_never_in_a_loop() {
    // The budgets cannot be read (every list fails), so only the Eviction API's 429 stops the eviction.
    let scenario = "faults: {seed: 7, rules: [{verbs: [create], resources: [pods/eviction], errorRate: 0.0}, {verbs: [list], resources: [poddisruptionbudgets.policy], errorRate: 1.0, status: 500}]}\n\
         kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 2, cpu: '4', memory: 16Gi}]\n\
         workloads: [{name: web, replicas: 2, schedulerName: wasp, cpu: 500m, pdb: {minAvailable: 2}}]\n";
    let rescheduler = "strategies: [{policy: remove-pods-violating-node-taints}]\ninterval: 1s\npacing: {budgetRetry: 1h}";
    let harness = start(scenario, config(rescheduler), true).await;
    let before = harness.ready_placements("app=web", 2, Duration::from_secs(20)).await;
    let runs = harness.host.rescheduler.stats.runs.load(Ordering::Relaxed);
    harness.taint(before.values().next().unwrap()).await;
    let rescheduler = harness.host.rescheduler.clone();
    common::eventually_within("five runs after the taint", Duration::from_secs(30), || rescheduler.stats.runs.load(Ordering::Relaxed) >= runs + 5).await;
    assert_eq!(harness.evictions_received(), 1, "one eviction request, refused with 429; later runs wait");
    let last = harness.host.rescheduler.last_run().unwrap();
    assert_eq!(last.skipped.get("pdb"), Some(&1), "{last:?}");
    assert_eq!(last.evicted, 0);
    let plan = harness.host.rescheduler.run_once(true).await.unwrap();
    let table = plan.table();
    assert!(table.contains("a PodDisruptionBudget refused its eviction 1 time(s); the next try waits 1h"), "{table}");
    assert!(table.contains("warning: PodDisruptionBudgets could not be read"), "{table}");
}

/// A run whose list of PodDisruptionBudgets fails plans with the last list (of the past five minutes): the
/// taint's eviction, which the budget does not allow, is not sent. Before, such a run counted no budget and sent
/// it, for the API server to refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_budget_list_fails_plans_with_the_last_list() {
    let evictions_counted = "{verbs: [create], resources: [pods/eviction], errorRate: 0.0}";
    let scenario = format!(
        "faults: {{seed: 7, rules: [{evictions_counted}]}}\nkubelet: {{readyDelay: 10ms}}\nnodeGroups: [{{name: n, count: 2, cpu: '4', memory: 16Gi}}]\n\
         workloads: [{{name: web, replicas: 2, schedulerName: wasp, cpu: 500m, pdb: {{minAvailable: 2}}}}]\n"
    );
    let harness = start(&scenario, config("strategies: [{policy: remove-pods-violating-node-taints}]\ninterval: 1s"), true).await;
    let before = harness.ready_placements("app=web", 2, Duration::from_secs(20)).await;
    let rescheduler = harness.host.rescheduler.clone();
    let runs = rescheduler.stats.runs.load(Ordering::Relaxed);
    common::eventually_within("two runs that listed the budgets", Duration::from_secs(30), || rescheduler.stats.runs.load(Ordering::Relaxed) >= runs + 2).await;
    let failing: wasp_sim::faults::FaultSpec = serde_yaml::from_str(&format!(
        "{{seed: 7, rules: [{evictions_counted}, {{verbs: [list], resources: [poddisruptionbudgets.policy], errorRate: 1.0, status: 500}}]}}"
    ))
    .unwrap();
    harness.simulator.state.faults.replace(failing);
    harness.taint(before.values().next().unwrap()).await;
    let runs = rescheduler.stats.runs.load(Ordering::Relaxed);
    common::eventually_within("five runs after the taint", Duration::from_secs(30), || rescheduler.stats.runs.load(Ordering::Relaxed) >= runs + 5).await;
    assert!(harness.simulator.state.faults.counts(1).1 >= 5, "the lists failed");
    assert_eq!(harness.evictions_received(), 0, "the kept budget allows none: nothing sent");
    let table = harness.host.rescheduler.run_once(true).await.unwrap().table();
    assert!(table.contains("the plan counts them as listed"), "{table}");
}

/// Pods of `selector` by name with their node, as the API has them now.
async fn nodes_of(harness: &Harness, selector: &str) -> BTreeMap<String, Option<String>> {
    let pods = harness.pods().list(&ListParams::default().labels(selector)).await.unwrap().items;
    pods.into_iter().map(|pod| (pod.metadata.name.clone().unwrap(), pod.spec.and_then(|spec| spec.node_name))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_anti_affinity_is_violated_moves_and_the_scheduler_keeps_it_apart() {
    // `web` prefers n-0 and refuses to share a node with `app=noisy`; a noisy pod is then placed on n-0 by hand
    // (`spec.nodeName`, as another scheduler or an operator would), which the web pod's rule did not foresee.
    let prefers_n0 = "{preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n-0]}]}}]}";
    let refuses_noisy = "{requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: noisy}}}]}";
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\nnodeGroups: [{{name: n, count: 2, cpu: '4', memory: 16Gi}}]\n\
         workloads: [{{name: web, replicas: 1, schedulerName: wasp, cpu: 100m, podSpec: {{affinity: {{nodeAffinity: {prefers_n0}, podAntiAffinity: {refuses_noisy}}}}}}}]\n"
    );
    let rescheduler = "strategies: [{policy: remove-pods-violating-inter-pod-anti-affinity}]\ninterval: 1s";
    let harness = start(&scenario, config(rescheduler), true).await;
    let before = harness.ready_placements("app=web", 1, Duration::from_secs(20)).await;
    assert_eq!(before.values().next().unwrap(), "n-0", "{before:?}");
    let noisy =
        json!({"metadata": {"name": "noisy", "labels": {"app": "noisy"}}, "spec": {"nodeName": "n-0", "containers": [{"name": "app", "image": "app"}]}});
    harness.pods().create(&Default::default(), &serde_json::from_value(noisy).unwrap()).await.unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let web = harness.ready_placements("app=web", 1, Duration::from_secs(30)).await;
        if web.values().all(|node| node == "n-1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "web still on n-0: {web:?}");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval of the condition wait
    }
    assert_eq!(harness.evictions_received(), 1, "one eviction, of the pod whose rule is violated");
    assert_eq!(nodes_of(&harness, "app=noisy").await["noisy"].as_deref(), Some("n-0"), "the pod it repels is not the one moved");
    let events = harness.events_from("wasp-rescheduler").await;
    let message = events.iter().find(|event| event.reason.as_deref() == Some("Evicted")).and_then(|event| event.message.clone()).unwrap();
    assert!(message.contains("its required anti-affinity (kubernetes.io/hostname) repels default/noisy in the same domain"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_pods_are_cleared_by_reason_and_the_others_stay() {
    let scenario = format!("{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\nnodeGroups: [{{name: n, count: 2, cpu: '4', memory: 16Gi}}]\n");
    let rescheduler = "strategies: [{policy: remove-failed-pods}]\ninterval: 1s\nprotections: {evictFailedBarePods: true}";
    let mut config = config(rescheduler);
    config.policies.insert("remove-failed-pods".into(), serde_yaml::from_str("settings: {minPodLifetimeSeconds: 0, reasons: [OutOfcpu]}").unwrap());
    let harness = start(&scenario, config, true).await;
    for name in ["rejected", "crashed", "running"] {
        let pod =
            json!({"metadata": {"name": name, "labels": {"test": "failed"}}, "spec": {"nodeName": "n-0", "containers": [{"name": "app", "image": "app"}]}});
        harness.pods().create(&Default::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    }
    let fail = |name: &str, status: serde_json::Value| {
        harness.simulator.store.mutate(wasp_sim::resources::pods(), Some("default"), name, |pod| {
            pod["status"] = status.clone();
            Ok(())
        })
    };
    fail("rejected", json!({"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected: Node didn't have enough resource: cpu"})).unwrap();
    let terminated =
        json!([{"name": "app", "ready": false, "restartCount": 0, "image": "app", "imageID": "", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]);
    fail("crashed", json!({"phase": "Failed", "containerStatuses": terminated})).unwrap();

    let pods = harness.pods();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while nodes_of(&harness, "test=failed").await.contains_key("rejected") {
        assert!(std::time::Instant::now() < deadline, "the failed pod was not cleared");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval of the condition wait
    }
    // Two more runs: the pod failed for another reason and the running one stay, and nothing more was sent.
    let runs = harness.host.rescheduler.stats.runs.load(Ordering::Relaxed);
    let rescheduler = harness.host.rescheduler.clone();
    common::eventually_within("two more runs", Duration::from_secs(20), || rescheduler.stats.runs.load(Ordering::Relaxed) >= runs + 2).await;
    let left: Vec<String> = nodes_of(&harness, "test=failed").await.into_keys().collect();
    assert_eq!(left, ["crashed", "running"]);
    assert_eq!(harness.evictions_received(), 1);
    assert!(pods.get("crashed").await.is_ok());
    let events = harness.events_from("wasp-rescheduler").await;
    let message = events.iter().find(|event| event.reason.as_deref() == Some("Evicted")).and_then(|event| event.message.clone()).unwrap();
    assert!(message.starts_with("Evicted failed pod from node n-0 by policy remove-failed-pods: failed (OutOfcpu) "), "{message}");
}

/// A pod with a zonal disk moves only within its zone: the fit check resolves its claims as the scheduler does,
/// so the plan sends it to the other node of its zone, though a node elsewhere is emptier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_zonal_disk_is_moved_only_within_its_zone() {
    let scenario = "kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 4, cpu: '4', memory: 16Gi, zones: [a, b]}]\n\
        storageClasses: [{name: zonal, volumeBindingMode: WaitForFirstConsumer, default: true}]\n\
        workloads: [{name: db, kind: StatefulSet, replicas: 1, schedulerName: wasp, cpu: 500m, volumes: [{name: data}]}]\n";
    let rescheduler = "strategies: [{policy: remove-pods-violating-node-taints}]\ndryRun: true";
    let harness = start(scenario, config(rescheduler), true).await;
    let placed = harness.ready_placements("app=db", 1, Duration::from_secs(20)).await;
    let node = placed["db-0"].clone();
    let nodes: Api<Node> = Api::all(harness.client.clone());
    let zone_of = |node: &Node| node.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"].clone();
    let all = nodes.list(&ListParams::default()).await.unwrap().items;
    let zone = zone_of(all.iter().find(|candidate| candidate.metadata.name.as_deref() == Some(&node)).unwrap());
    let neighbour =
        all.iter().find(|candidate| candidate.metadata.name.as_deref() != Some(&node) && zone_of(candidate) == zone).unwrap().metadata.name.clone().unwrap();
    // Load on the neighbour: the scores prefer the other zone's empty nodes.
    let load: Pod = serde_json::from_value(json!({"metadata": {"name": "load"}, "spec": {"nodeName": neighbour, "containers": [{"name": "busy", "image": "busy", "resources": {"requests": {"cpu": "3"}}}]}})).unwrap();
    let load_uid = harness.pods().create(&kube::api::PostParams::default(), &load).await.unwrap().metadata.uid.unwrap();
    let host = harness.host.clone();
    common::eventually("the host sees the load", move || host.cluster.read().pod(&load_uid).is_some()).await;
    harness.taint(&node).await;
    let host = harness.host.clone();
    common::eventually("the host sees the taint", || host_sees_taint(&host, &node)).await;

    let plan = harness.host.rescheduler.run_once(false).await.unwrap();
    let evictions: Vec<_> = plan.evictions().collect();
    assert_eq!(evictions.len(), 1, "{}", plan.table());
    assert_eq!(evictions[0].target(), Some(neighbour.as_str()), "within its disk's zone: {}", plan.table());
}

/// A bin-packing profile packs a duplicate right back where `remove-duplicates` would take it from: the fit check
/// asks where the pod's own profile would put the replacement, the current node included, and evicts nothing
/// (before, it looked only at the other nodes, evicted, and the scheduler packed the replacement back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_its_bin_packing_profile_would_pack_back_is_not_evicted() {
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\nnodeGroups: [{{name: n, count: 3, cpu: '4', memory: 16Gi}}]\n\
         workloads: [{{name: web, replicas: 2, schedulerName: packer, cpu: 500m}}]\n"
    );
    let mut config = config("strategies: [{policy: remove-duplicates}]\ninterval: 1h\nlimits: {maxPerWorkload: 5}");
    config.scheduler.profiles.push(
        serde_yaml::from_str(
            "{schedulerName: packer, filters: [node-unschedulable, taint-toleration, resources-fit], scores: [{policy: most-allocated, weight: 1}]}",
        )
        .unwrap(),
    );
    config.validate().unwrap();
    let harness = start(&scenario, config, true).await;
    let placed = harness.ready_placements("app=web", 2, Duration::from_secs(20)).await;
    let nodes: std::collections::BTreeSet<&String> = placed.values().collect();
    assert_eq!(nodes.len(), 1, "most-allocated packs both replicas on one node: {placed:?}");
    harness.host_sees_ready("web", 2).await;

    let plan = harness.host.rescheduler.run_once(false).await.unwrap();
    let table = plan.table();
    assert_eq!(plan.entries.len(), 1, "remove-duplicates proposes one of the two: {table}");
    assert_eq!(plan.evictions().count(), 0, "{table}");
    assert!(table.contains("its profile packer would place the replacement back on node"), "{table}");
    assert_eq!(harness.evictions_received(), 0);
}

/// A move that only shifts what the strategy measures: five replicas on two nodes that fit them (a third node
/// counts for the spread but fits none), three and two. `remove-duplicates` allows two per node and proposes one
/// of the three; it fits on the other node, which the profile does not score below its own, but there it makes
/// three again. The strategy asked again after the move proposes the replacement, so the move is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_whose_move_only_makes_another_node_hold_too_many_is_not_evicted() {
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\n\
         nodeGroups: [{{name: a, count: 2, cpu: '4', memory: 16Gi}}, {{name: small, count: 1, cpu: 200m, memory: 16Gi}}]\n\
         workloads: [{{name: web, replicas: 5, schedulerName: wasp, cpu: 500m}}]\n"
    );
    let config = config("strategies: [{policy: remove-duplicates}]\ninterval: 1h\nlimits: {maxPerWorkload: 5}");
    let harness = start(&scenario, config, true).await;
    let placed = harness.ready_placements("app=web", 5, Duration::from_secs(20)).await;
    let mut per_node: BTreeMap<&String, usize> = BTreeMap::new();
    placed.values().for_each(|node| *per_node.entry(node).or_default() += 1);
    let mut counts: Vec<usize> = per_node.values().copied().collect();
    counts.sort();
    assert_eq!(counts, [2, 3], "spread over the two nodes that fit: {placed:?}");
    harness.host_sees_ready("web", 5).await;

    let plan = harness.host.rescheduler.run_once(false).await.unwrap();
    let table = plan.table();
    assert_eq!(plan.entries.len(), 1, "remove-duplicates proposes one of the three: {table}");
    assert_eq!(plan.evictions().count(), 0, "{table}");
    assert!(table.contains("remove-duplicates would propose its replacement again on node a-"), "{table}");
    assert!(table.contains("so the move does not settle it"), "{table}");
    assert_eq!(harness.evictions_received(), 0);
}

/// Two strategies that undo each other's moves (here: one evicts a pod off a tainted node, the other proposes its
/// replacement for its age) are said: a Warning `StrategiesConflict` on the replacement, once per window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_proposing_the_replacement_of_anothers_eviction_is_warned_about() {
    let scenario = format!(
        "{COUNT_EVICTIONS}\nkubelet: {{readyDelay: 10ms}}\nnodeGroups: [{{name: n, count: 3, cpu: '4', memory: 16Gi}}]\n\
         workloads: [{{name: web, replicas: 2, schedulerName: wasp, cpu: 100m}}]\n"
    );
    // The taint comes well within pod-lifetime's limit: the taint strategy moves the pod first, then pod-lifetime
    // proposes every pod, the replacement included.
    let rescheduler = "strategies: [{policy: remove-pods-violating-node-taints}, {policy: pod-lifetime}]\ninterval: 1s";
    let mut config = config(rescheduler);
    config.policies.insert("pod-lifetime".into(), serde_yaml::from_str("settings: {maxPodLifeTimeSeconds: 6}").unwrap());
    let harness = start(&scenario, config, true).await;
    let placed = harness.ready_placements("app=web", 2, Duration::from_secs(20)).await;
    harness.host_sees_ready("web", 2).await;
    let tainted = placed.values().next().unwrap().clone();
    harness.taint(&tainted).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !harness.events_from("wasp-rescheduler").await.iter().any(|event| event.reason.as_deref() == Some("StrategiesConflict")) {
        assert!(std::time::Instant::now() < deadline, "no StrategiesConflict event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = harness.events_from("wasp-rescheduler").await;
    let conflicts: Vec<&Event> = events.iter().filter(|event| event.reason.as_deref() == Some("StrategiesConflict")).collect();
    assert_eq!(conflicts.len(), 1, "once per workload and pair: {conflicts:?}");
    let message = conflicts[0].message.clone().unwrap_or_default();
    // Usually the taint strategy moves first; on a loaded machine the pods may pass pod-lifetime's six seconds
    // before the taint comes, and pod-lifetime moves first (its replacement then lands on the node tainted next).
    let taints = "remove-pods-violating-node-taints";
    let (proposed_by, evicted_by) = if message.starts_with("policy pod-lifetime") { ("pod-lifetime", taints) } else { (taints, "pod-lifetime") };
    assert!(
        message.starts_with(&format!("policy {proposed_by} proposes this pod, which replaced a pod of ReplicaSet default/web-"))
            && message.contains(&format!("that policy {evicted_by} evicted within the last")),
        "{message}"
    );
    let evicted: Vec<String> = events.iter().filter(|event| event.reason.as_deref() == Some("Evicted")).filter_map(|event| event.message.clone()).collect();
    assert!(evicted.iter().any(|event| event.contains(&format!("by policy {evicted_by}"))), "{evicted_by} evicted: {evicted:?}");
}
