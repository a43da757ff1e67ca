//! The default policy set, compiled to wasm and run in the host's sandbox: every kind end to end, with the cluster
//! view kept current by deltas.

mod common;

use common::*;
use wasp::contract::types::{
    ContainerSample, ContainerUsage, Metric, MetricSource, MetricTarget, OomKill, PodMetric, PolicyKind, ResourceAmounts, ScaleRequest, ViewScope,
};
use wasp::contract::{EvictContext, PendingPod};

#[test]
fn every_default_policy_describes_itself() {
    let runtime = runtime();
    let expected = [
        ("resources-fit", vec![PolicyKind::Filter], ViewScope::Nodes),
        ("taint-toleration", vec![PolicyKind::Filter, PolicyKind::Score], ViewScope::Nodes),
        ("node-affinity", vec![PolicyKind::Filter, PolicyKind::Score], ViewScope::Nodes),
        ("node-unschedulable", vec![PolicyKind::Filter], ViewScope::Nodes),
        ("least-allocated", vec![PolicyKind::Score], ViewScope::Nodes),
        ("balanced-allocation", vec![PolicyKind::Score], ViewScope::Nodes),
        ("pod-topology-spread", vec![PolicyKind::Filter, PolicyKind::Score], ViewScope::NodesAndPods),
        ("remove-pods-violating-node-taints", vec![PolicyKind::Evict], ViewScope::NodesAndPods),
        ("hpa", vec![PolicyKind::Scale], ViewScope::Nodes),
        ("image-locality", vec![PolicyKind::Score], ViewScope::Nodes),
    ];
    for (name, kinds, view) in expected {
        let policy = load(&runtime, name, "");
        assert_eq!(policy.name(), name);
        assert_eq!(policy.descriptor.kinds, kinds, "{name}");
        assert_eq!(policy.descriptor.view, view, "{name}");
        assert_eq!(policy.contract_version, wasp::contract::CONTRACT_VERSION);
        assert_eq!(policy.descriptor.node_facts.images, name == "image-locality", "only image-locality asks for node images");
        assert!(policy.size < 300 * 1024, "{name} is {} bytes; a ConfigMap holds 1 MiB in all", policy.size);
        let defaults: serde_json::Value = serde_json::from_str(&policy.descriptor.default_settings).unwrap();
        assert!(defaults.is_object(), "{name}");
    }
}

#[test]
fn the_policies_that_read_labels_through_selectors_keep_only_selected_labels_and_settings_name_theirs() {
    use wasp::contract::types::LabelScope;
    let runtime = runtime();
    for name in
        ["pod-topology-spread", "inter-pod-affinity", "remove-pods-violating-topology-spread-constraint", "remove-pods-violating-inter-pod-anti-affinity"]
    {
        assert_eq!(load(&runtime, name, "").descriptor.pod_facts.labels, LabelScope::Selected, "{name}");
    }
    let settings = r#"{"labelSelector": {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}}"#;
    let strategy = load(&runtime, "remove-pods-violating-inter-pod-anti-affinity", settings);
    assert_eq!(strategy.settings_label_keys, ["canary", "team"], "the keys its labelSelector names reach its view");
    assert!(load(&runtime, "remove-pods-violating-inter-pod-anti-affinity", "").settings_label_keys.is_empty());
}

#[test]
fn resources_fit_follows_binding_deltas() {
    let runtime = runtime();
    let fit = load(&runtime, "resources-fit", "");
    let mut cluster = cluster_of(vec![simple_node("small", "1", "2Gi", ""), simple_node("large", "8", "32Gi", "")]);
    let ids = cluster.node_ids();
    let pod = simple_pod("web", "2", "");
    assert_eq!(reasons(&fit.filter(&cluster, &pod, &ids).unwrap()), vec!["Insufficient cpu", ""]);

    // Fill the large node: the same pooled instance gets only the usage deltas and now rejects it too.
    for index in 0..4 {
        cluster.upsert_pod(simple_pod(&format!("filler-{index}"), "1500m", ""), "large");
    }
    assert_eq!(fit.idle_instances(), 1);
    assert_eq!(reasons(&fit.filter(&cluster, &pod, &ids).unwrap()), vec!["Insufficient cpu", ""]);
    cluster.upsert_pod(simple_pod("filler-4", "1500m", ""), "large");
    assert_eq!(reasons(&fit.filter(&cluster, &pod, &ids).unwrap()), vec!["Insufficient cpu"; 2]);

    // Deleting a pod frees the room again; removing a node makes its id unknown to the guest.
    cluster.remove_pod("uid-filler-0");
    assert_eq!(reasons(&fit.filter(&cluster, &pod, &ids).unwrap()), vec!["Insufficient cpu", ""]);
    cluster.remove_node("small");
    assert_eq!(reasons(&fit.filter(&cluster, &pod, &ids).unwrap()), vec!["node(s) were unknown to the policy", ""]);
}

#[test]
fn pods_bound_before_their_node_appears_are_counted() {
    let runtime = runtime();
    let fit = load(&runtime, "resources-fit", "");
    let mut cluster = cluster_of(vec![]);
    cluster.upsert_pod(simple_pod("early", "3500m", ""), "late-node");
    cluster.upsert_node(simple_node("late-node", "4", "8Gi", ""));
    let ids = cluster.node_ids();
    assert_eq!(reasons(&fit.filter(&cluster, &simple_pod("p", "1", ""), &ids).unwrap()), vec!["Insufficient cpu"]);
}

#[test]
fn taints_affinity_and_cordons() {
    let runtime = runtime();
    let cluster = cluster_of(vec![
        node("metadata: {name: gpu, labels: {zone: a}}\nspec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}"),
        node("metadata: {name: cordoned, labels: {zone: b}}\nspec: {unschedulable: true}"),
        node("metadata: {name: plain, labels: {zone: c}}\nspec: {taints: [{key: spot, value: 'yes', effect: PreferNoSchedule}]}"),
    ]);
    let ids = cluster.node_ids();
    let pod = pod(r#"
metadata: {name: web, uid: u1}
spec:
  containers: [{name: app}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a, c]}]}]
      preferredDuringSchedulingIgnoredDuringExecution:
      - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: [c]}]}}
"#);
    let taints = load(&runtime, "taint-toleration", "");
    assert_eq!(reasons(&taints.filter(&cluster, &pod, &ids).unwrap()), vec!["node(s) had untolerated taint {dedicated: gpu}", "", ""]);
    assert_eq!(taints.score(&cluster, &pod, &ids).unwrap(), vec![100, 100, 0]);
    let affinity = load(&runtime, "node-affinity", "");
    assert_eq!(reasons(&affinity.filter(&cluster, &pod, &ids).unwrap()), vec!["", "node(s) didn't match Pod's node affinity/selector", ""]);
    assert_eq!(affinity.score(&cluster, &pod, &ids).unwrap(), vec![0, 0, 100]);
    let cordon = load(&runtime, "node-unschedulable", "");
    assert_eq!(reasons(&cordon.filter(&cluster, &pod, &ids).unwrap()), vec!["", "node(s) were unschedulable", ""]);
}

#[test]
fn allocation_scores() {
    let runtime = runtime();
    let mut cluster = cluster_of(vec![simple_node("busy", "4", "8Gi", ""), simple_node("idle", "4", "8Gi", "")]);
    cluster.upsert_pod(simple_pod("x", "3", ""), "busy");
    let ids = cluster.node_ids();
    let pod = simple_pod("p", "500m", "");
    let least = load(&runtime, "least-allocated", "").score(&cluster, &pod, &ids).unwrap();
    assert!(least[1] > least[0], "{least:?}");
    let balanced = load(&runtime, "balanced-allocation", "").score(&cluster, &pod, &ids).unwrap();
    assert!(balanced[1] > balanced[0], "{balanced:?}");
}

#[test]
fn topology_spread_sees_the_pods_on_each_node() {
    let runtime = runtime();
    let mut cluster = cluster_of(vec![simple_node("a1", "4", "8Gi", "zone=a"), simple_node("b1", "4", "8Gi", "zone=b")]);
    cluster.upsert_pod(simple_pod("web-0", "100m", "app=web"), "a1");
    let ids = cluster.node_ids();
    let pod = pod(r#"
metadata: {name: web-1, uid: u-web-1, labels: {app: web}}
spec:
  containers: [{name: app}]
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]
"#);
    let spread = load(&runtime, "pod-topology-spread", "");
    assert_eq!(reasons(&spread.filter(&cluster, &pod, &ids).unwrap()), vec!["node(s) didn't match pod topology spread constraints", ""]);
    cluster.upsert_pod(simple_pod("web-2", "100m", "app=web"), "b1");
    assert_eq!(reasons(&spread.filter(&cluster, &pod, &ids).unwrap()), vec!["", ""], "the delta reached the guest");
}

#[test]
fn evict_policy_proposes_pods_the_host_can_name() {
    let runtime = runtime();
    let mut cluster =
        cluster_of(vec![node("metadata: {name: n1}\nspec: {taints: [{key: maintenance, value: 'true', effect: NoSchedule}]}"), node("metadata: {name: n2}")]);
    cluster.upsert_pod(simple_pod("victim", "100m", ""), "n1");
    cluster.upsert_pod(simple_pod("safe", "100m", ""), "n2");
    let evict = load(&runtime, "remove-pods-violating-node-taints", "");
    let proposals = evict.propose(&cluster, &EvictContext { now: 0, pending: Vec::new(), failed: Vec::new() }).unwrap();
    assert_eq!(proposals.len(), 1);
    let (pod, node) = cluster.pod_by_id(proposals[0].pod).unwrap();
    assert_eq!((pod.name.as_str(), node), ("victim", "n1"));
    assert_eq!(proposals[0].reason, "node n1 has taint {maintenance: true} the pod does not tolerate");
}

#[test]
fn the_time_and_the_pending_pods_reach_evict_policies_and_room_for_comes_back() {
    let runtime = runtime();
    let mut cluster = cluster_of(vec![simple_node("n", "2", "8Gi", "")]);
    cluster.upsert_pod(simple_pod("low", "2", ""), "n");
    let (low, _) = cluster.pod("uid-low").unwrap();
    let created = low.created_at;
    let mut important = simple_pod("important", "1", "");
    important.priority = 1000;
    let pending = vec![PendingPod { pod: important, reason: "0/1 nodes are available: 1 Insufficient cpu.".into() }];
    let context = EvictContext { now: created + 7200, pending, failed: Vec::new() };
    let room = load(&runtime, "make-room-for-pending", "").propose(&cluster, &context).unwrap();
    assert_eq!(room.len(), 1);
    assert_eq!(room[0].room_for.as_deref(), Some("uid-important"));
    let lifetime = load(&runtime, "pod-lifetime", r#"{"maxPodLifeTimeSeconds": 3600}"#).propose(&cluster, &context).unwrap();
    assert_eq!(lifetime.len(), 1, "two hours old by the host's clock");
    assert_eq!(lifetime[0].reason, "running for 7200s, longer than maxPodLifeTimeSeconds 3600");
}

#[test]
fn scale_policy_applies_the_hpa_formula_and_an_autoscalers_own_settings_only_to_its_call() {
    let runtime = runtime();
    let hpa = load(&runtime, "hpa", r#"{"tolerance": 0.1}"#);
    // CPU held to 50% of 1000m per pod.
    let metric = |values: &[f64]| Metric {
        name: "cpu".into(),
        source: MetricSource::Resource,
        target: MetricTarget::Utilization(50.0),
        pods: values
            .iter()
            .enumerate()
            .map(|(index, value)| PodMetric { pod: format!("web-{index}"), ready: true, started: 0, value: Some(*value), request: Some(1000.0) })
            .collect(),
        value: None,
        error: None,
        history: vec![],
    };
    let request = |values: &[f64]| ScaleRequest {
        workload: "default/Deployment/web".into(),
        now: 0,
        current_replicas: values.len() as u32,
        min_replicas: 1,
        max_replicas: 20,
        metrics: vec![metric(values)],
        recommendations: vec![],
        containers: vec![],
        state: None,
    };
    let cluster = cluster_of(vec![]);
    assert_eq!(hpa.recommend(&cluster, &request(&[900.0, 900.0, 900.0])).unwrap().desired_replicas, 6);
    assert_eq!(hpa.recommend(&cluster, &request(&[520.0, 480.0])).unwrap().desired_replicas, 2);
    // 60% of 50% is outside the configured 10% tolerance, inside an Autoscaler's own 30%.
    let busy = request(&[600.0, 600.0]);
    assert_eq!(hpa.recommend_with_settings(&cluster, &busy, Some(r#"{"tolerance": 0.3}"#)).unwrap().desired_replicas, 2);
    assert_eq!(hpa.recommend(&cluster, &busy).unwrap().desired_replicas, 3, "the pooled instance has its own settings back");
    let refused = hpa.recommend_with_settings(&cluster, &busy, Some(r#"{"tolerance": 7}"#)).unwrap_err();
    assert!(refused.to_string().starts_with("invalid settings: "), "{refused}");
    assert_eq!(hpa.recommend(&cluster, &busy).unwrap().desired_replicas, 3);
    let error = hpa.recommend(&cluster, &ScaleRequest { metrics: vec![], ..request(&[1.0]) }).unwrap_err();
    assert_eq!(error.to_string(), "default/Deployment/web: no metrics to scale on");
}

#[test]
fn the_vpa_policy_sizes_containers_through_the_sandbox_and_its_state_carries_the_history() {
    let runtime = runtime();
    let vpa = load(&runtime, "vpa", "");
    assert_eq!(vpa.descriptor.kinds, vec![PolicyKind::Scale]);
    let cluster = cluster_of(vec![]);
    let none = ResourceAmounts { cpu: None, memory: None };
    let t0 = 1_800_000_000;
    let request = |now: i64, cpu: f64, oom_kills: Vec<OomKill>, state: Option<String>| ScaleRequest {
        workload: "default/Deployment/web".into(),
        now,
        current_replicas: 2,
        min_replicas: 1,
        max_replicas: 4,
        metrics: vec![],
        recommendations: vec![],
        containers: vec![ContainerUsage {
            name: "app".into(),
            requests: ResourceAmounts { cpu: Some(0.1), memory: Some(2e8) },
            limits: none,
            samples: ["web-1", "web-2"].iter().map(|pod| ContainerSample { pod: pod.to_string(), at: now, cpu, memory: 3e8 }).collect(),
            oom_kills,
        }],
        state,
    };
    // An hour of one reading a minute at 0.4 core, the state handed back each time as the host does.
    let mut state = None;
    for minute in 0..60 {
        let decision = vpa.recommend(&cluster, &request(t0 + minute * 60, 0.4, vec![], state.take())).unwrap();
        assert_eq!(decision.desired_replicas, 2, "the replicas are left as they are");
        state = decision.state;
    }
    let decision = vpa.recommend(&cluster, &request(t0 + 3600, 0.4, vec![], state.clone())).unwrap();
    let [app] = decision.resources.try_into().unwrap();
    assert_eq!(app.container, "app");
    let cpu = app.target.cpu.unwrap();
    assert!(cpu > 0.4 && cpu < 0.5, "the end of 0.4 core's bucket plus 15%: {cpu}");
    assert!(app.upper_bound.cpu.unwrap() > cpu && app.lower_bound.cpu.unwrap() <= cpu);
    // The bound follows an hour of history (confidence 1/24 day: 25 times the target); a call without the
    // state has none, and its upper bound is the recommender's maximum.
    assert!(app.upper_bound.cpu.unwrap() < 30.0 * cpu, "{:?}", app.upper_bound);
    let forgetful = vpa.recommend(&cluster, &request(t0 + 3600, 0.4, vec![], None)).unwrap();
    assert!(forgetful.resources[0].upper_bound.cpu.unwrap() > 1e6, "{:?}", forgetful.resources[0].upper_bound);
    // An out-of-memory kill raises memory above the 300 MB peaks: at least the request (200 MB) plus 100 MiB,
    // or the peak times 1.2, whichever is more.
    let before = app.target.memory.unwrap();
    let kill = OomKill { pod: "web-1".into(), at: t0 + 3630, memory_request: 2e8 };
    let after = vpa.recommend(&cluster, &request(t0 + 3660, 0.4, vec![kill], state)).unwrap();
    assert!(after.resources[0].target.memory.unwrap() > before, "{before} then {:?}", after.resources[0].target.memory);
    // A policy's error names the workload: no containers (an Autoscaler without updatePolicy).
    let error = vpa.recommend(&cluster, &ScaleRequest { containers: vec![], ..request(t0, 0.4, vec![], None) }).unwrap_err();
    assert!(error.to_string().contains("default/Deployment/web: no containers to size"), "{error}");
}

#[test]
fn concurrent_calls_use_separate_instances_from_the_pool() {
    let runtime = runtime();
    let fit = load(&runtime, "resources-fit", "");
    let mut cluster = cluster_of((0..50).map(|index| simple_node(&format!("n{index}"), "4", "8Gi", "")).collect());
    cluster.upsert_pod(simple_pod("busy", "3500m", ""), "n0");
    let ids = cluster.node_ids();
    let pod = simple_pod("p", "1", "");
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                barrier.wait();
                for _ in 0..200 {
                    let result = fit.filter(&cluster, &pod, &ids).unwrap();
                    assert_eq!(reasons(&result)[0], "Insufficient cpu");
                    assert!(result.verdicts[1..].iter().all(|code| *code == 0));
                }
            });
        }
    });
    let idle = fit.idle_instances();
    assert!((1..=2).contains(&idle), "one instance per concurrent caller at most: {idle}");
}

/// Instances another loop made while the scheduler held the others go once that loop is done: each keeps its
/// own copy of the cluster (megabytes at 5000 nodes).
#[test]
fn a_policy_keeps_at_most_the_instances_asked_for_and_its_pool_stays_whole() {
    let runtime = runtime();
    let fit = load(&runtime, "resources-fit", "");
    let cluster = cluster_of(vec![simple_node("small", "1", "2Gi", "")]);
    let held: Vec<_> = (0..3).map(|_| fit.prepare(&cluster).unwrap()).collect();
    held.into_iter().for_each(|prepared| prepared.release());
    assert_eq!(fit.idle_instances(), 3, "three callers at once, three instances");
    let before = fit.memory_in_use();
    fit.keep_at_most(1);
    assert_eq!(fit.idle_instances(), 1);
    assert!(fit.memory_in_use() < before, "their memory went with them");
    let pod = simple_pod("web", "2", "");
    assert_eq!(reasons(&fit.filter(&cluster, &pod, &cluster.node_ids()).unwrap()), vec!["Insufficient cpu"], "the one kept still serves");
    assert_eq!(fit.idle_instances(), 1);
    // The dropped instances gave their places back: as many callers as the pool allows are served at once.
    let (done, finished) = std::sync::mpsc::channel();
    let (fit, cluster) = (std::sync::Arc::new(fit), std::sync::Arc::new(cluster));
    // Not scoped: a caller stuck waiting must fail the test, not hang it.
    std::thread::spawn(move || {
        let held: Vec<_> = (0..wasp::policy::max_instances()).map(|_| fit.prepare(&cluster).unwrap()).collect();
        held.into_iter().for_each(|prepared| prepared.release());
        done.send(()).unwrap();
    });
    assert!(finished.recv_timeout(std::time::Duration::from_secs(30)).is_ok(), "a caller waits for a place that was never given back");
}
