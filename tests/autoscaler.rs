//! The autoscaler against the simulated API server over real HTTP: the CRD from manifests/, Autoscalers as users
//! write them, metrics from the simulator's load model (CPU that grows with requests per second and shrinks as
//! replicas share them), the scheduler placing the new pods. Replica changes are counted where the host sent
//! them (its own counter of `scale` requests) and read back from the Deployment.

mod common;

use common::repo_root;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp::autoscaler::resource::Autoscaler;
use wasp::config::{AutoscalerSection, HostConfig};
use wasp::host::Host;
use wasp::kube::ApiClient;
use wasp::runtime::Runtime;
use wasp_sim::metrics::{Curve, Point, WorkloadLoad};
use wasp_sim::{Scenario, Simulator};

struct Harness {
    simulator: Simulator,
    client: Client,
    host: Arc<Host>,
    loops: tokio::task::JoinHandle<()>,
}

/// Every scale policy, reconciled every 200 ms; CPU is trusted from a pod's start (the HPA waits 5 minutes).
const AUTOSCALER: &str = "policies: [hpa, all-metrics-agree, predictive, scheduled]\nsyncPeriod: 200ms\ncpuInitializationPeriod: 0s";

fn config() -> HostConfig {
    let mut config = HostConfig::built_in();
    config.policy_dir = repo_root().join("plugins/out");
    config.autoscaler = Some(serde_yaml::from_str::<AutoscalerSection>(AUTOSCALER).unwrap());
    config.validate().unwrap();
    config
}

/// `web`: 100m CPU per pod, of which 10m idle and 10m per request per second; `qps` requests per second in all.
fn web_load(qps: f64) -> WorkloadLoad {
    WorkloadLoad { cpu: Curve::constant(0.1), memory: Curve::constant(0.5), qps: Curve::constant(qps), cpu_per_request: 10.0 }
}

fn scenario(replicas: u32) -> String {
    format!(
        "kubelet: {{readyDelay: 100ms}}\nnodeGroups: [{{name: n, count: 4, cpu: '8', memory: 32Gi}}]\n\
         workloads: [{{name: web, replicas: {replicas}, schedulerName: wasp, cpu: 100m, memory: 256Mi}}]\n"
    )
}

async fn start(scenario: &str, config: HostConfig) -> Harness {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).try_init();
    let simulator = Simulator::start(&Scenario::parse(scenario).unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    install_crd(&api.client).await;
    let host = Host::with_config(&config, &Runtime::new(None).unwrap(), api.clone()).unwrap();
    let loops = tokio::spawn(host.clone().run_loops());
    Harness { simulator, client: api.client, host, loops }
}

/// The CRD exactly as shipped.
async fn install_crd(client: &Client) {
    let text = std::fs::read_to_string(repo_root().join("manifests/05-crd-autoscaler.yaml")).unwrap();
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        // Simulators of one process share custom types; the CRD object itself is per simulator.
        Err(error) => panic!("installing the CRD: {error}"),
    }
}

impl Harness {
    fn set_load(&self, load: WorkloadLoad) {
        self.simulator.state.load.set("web", load);
    }

    async fn autoscale(&self, yaml: &str) {
        let autoscaler: Autoscaler = serde_yaml::from_str(yaml).unwrap();
        Api::<Autoscaler>::namespaced(self.client.clone(), "default").create(&PostParams::default(), &autoscaler).await.unwrap();
    }

    async fn replicas(&self) -> i32 {
        let deployment = Api::<Deployment>::namespaced(self.client.clone(), "default").get("web").await.unwrap();
        deployment.spec.replicas.unwrap()
    }

    async fn status(&self, name: &str) -> serde_json::Value {
        let autoscaler = Api::<Autoscaler>::namespaced(self.client.clone(), "default").get(name).await.unwrap();
        serde_json::to_value(autoscaler.status.unwrap_or_default()).unwrap()
    }

    /// Waits until the Deployment asks for `expected` replicas; returns how long that took.
    async fn wait_for_replicas(&self, expected: i32, patience: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let replicas = self.replicas().await;
            if replicas == expected {
                return started.elapsed();
            }
            assert!(started.elapsed() < patience, "web has {replicas} replicas, not {expected}, after {patience:?}; status: {}", self.status("web").await);
            // The poll interval of a condition wait (bounded by the deadline above), not a fixed wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `passes` more passes of the autoscaler have finished.
    async fn passes(&self, passes: u64) {
        let target = self.host.autoscaler.stats.passes.load(Ordering::Relaxed) + passes;
        let host = self.host.clone();
        common::eventually("autoscaling passes", move || host.autoscaler.stats.passes.load(Ordering::Relaxed) >= target).await;
    }

    fn scale_requests(&self) -> u64 {
        self.host.autoscaler.stats.scale_requests.load(Ordering::Relaxed)
    }

    async fn events(&self, reason: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let all = events.list(&ListParams::default()).await.unwrap().items;
        all.into_iter().filter(|event| event.reason.as_deref() == Some(reason)).collect()
    }

    /// Stops the host (a crash or a failover), keeping the simulator.
    fn stop_host(self) -> Simulator {
        self.loops.abort();
        self.simulator
    }
}

fn cpu_autoscaler(name: &str, policy: &str, extra: &str) -> String {
    format!(
        "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
         scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  minReplicas: 1\n  maxReplicas: 10\n  policy: {policy}\n  \
         metrics:\n  - type: Resource\n    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 50}}}}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_follow_a_load_up_and_down_within_the_behavior() {
    let harness = start(&scenario(2), config()).await;
    // 20 req/s over 2 pods: 10 + 100m of 100m, 110% against 50%.
    harness.set_load(web_load(20.0));
    harness.autoscale(&cpu_autoscaler("web", "hpa", "  behavior: {scaleDown: {stabilizationWindowSeconds: 2}}\n")).await;
    // ceil(2.2 * 2) = 5, within the default scale-up limit of max(2 + 4, 2 * 2).
    harness.wait_for_replicas(5, Duration::from_secs(20)).await;
    assert_eq!(harness.scale_requests(), 1, "one change from 2 to 5");
    // 5 pods share the load: 4 req/s, 50m of 100m: on target; nothing more happens.
    harness.passes(10).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (5, 1), "status: {}", harness.status("web").await);
    let status = harness.status("web").await;
    assert_eq!(status["targets"], "cpu: 50%/50%", "{status}");
    assert_eq!(status["reference"], "Deployment/web");
    let active = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingActive").unwrap();
    assert_eq!((active["status"].as_str(), active["reason"].as_str()), (Some("True"), Some("ValidMetricFound")), "{status}");
    let rescaled = harness.events("SuccessfulRescale").await;
    let message = rescaled[0].message.clone().unwrap();
    assert!(message.starts_with("New size: 5 (from 2); reason: policy hpa: cpu at 110% of requests (target 50%) wants 5"), "{message}");
    assert!(rescaled.iter().any(|event| event.involved_object.kind.as_deref() == Some("Deployment")), "an event on the target too");

    // The load falls to 4 req/s: 5 pods at 18% want ceil(0.36 * 5) = 2, after the 2 s window.
    harness.set_load(web_load(4.0));
    let took = harness.wait_for_replicas(2, Duration::from_secs(20)).await;
    assert!(took >= Duration::from_millis(1500), "the scale-down waited for its stabilization window: {took:?}");
    assert_eq!(harness.scale_requests(), 2);
    // The status is written after the scale: wait for it (the replicas can be read in between).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = harness.status("web").await;
        if status["scaleEvents"].as_array().is_some_and(|events| events.len() >= 2) || std::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval of the condition wait
    };
    let events = status["scaleEvents"].as_array().unwrap();
    assert_eq!(events.iter().map(|event| event["change"].as_i64().unwrap()).collect::<Vec<_>>(), [3, -3], "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_behavior_tolerance_is_the_policy_tolerance_on_its_side() {
    let harness = start(&scenario(2), config()).await;
    // 8.8 req/s over 2 pods: 10 + 44m of 100m, 54% against 50%, a ratio of 1.08: within the default 10%.
    harness.set_load(web_load(8.8));
    harness.autoscale(&cpu_autoscaler("web", "hpa", "")).await;
    harness.passes(3).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (2, 0), "status: {}", harness.status("web").await);
    // A scale-up tolerance of 5% (KEP-4951, `behavior.scaleUp.tolerance`): 1.08 is outside it, so ceil(1.08 * 2).
    let autoscalers = Api::<Autoscaler>::namespaced(harness.client.clone(), "default");
    let tolerance =
        serde_json::json!({"spec": {"behavior": {"scaleUp": {"tolerance": "0.05"}, "scaleDown": {"tolerance": "0.6", "stabilizationWindowSeconds": 0}}}});
    autoscalers.patch("web", &PatchParams::default(), &Patch::Merge(&tolerance)).await.unwrap();
    harness.wait_for_replicas(3, Duration::from_secs(20)).await;
    // 4 req/s over 3 pods: 23% of requests, a ratio of 0.47: within the 60% scale-down tolerance; the default
    // tolerance would take it to ceil(0.47 * 3) = 2.
    harness.set_load(web_load(4.0));
    harness.passes(3).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (3, 1), "status: {}", harness.status("web").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noisy_load_does_not_flap_and_rate_limits_and_bounds_hold() {
    let harness = start(&scenario(2), config()).await;
    harness.set_load(web_load(8.0));
    let bounded = "  behavior:\n    scaleUp: {policies: [{type: Pods, value: 1, periodSeconds: 3}]}\n    scaleDown: {stabilizationWindowSeconds: 60}\n";
    harness.autoscale(&cpu_autoscaler("web", "hpa", bounded).replace("maxReplicas: 10", "maxReplicas: 4")).await;
    harness.passes(3).await;
    // A burst: 200 req/s wants ~40 pods; one pod per 3 s, and never more than 4.
    harness.set_load(web_load(200.0));
    harness.wait_for_replicas(3, Duration::from_secs(10)).await;
    let third = Instant::now();
    harness.wait_for_replicas(4, Duration::from_secs(10)).await;
    assert!(third.elapsed() >= Duration::from_millis(2500), "one pod per 3 s: {:?}", third.elapsed());
    harness.passes(5).await;
    assert_eq!(harness.replicas().await, 4, "maxReplicas");
    let status = harness.status("web").await;
    let limited = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingLimited").unwrap().clone();
    assert_eq!((limited["status"].as_str(), limited["reason"].as_str()), (Some("True"), Some("TooManyReplicas")), "{status}");
    // Noise: the load swings every pass; the 60 s window holds the replicas at the highest recommendation.
    let sent = harness.scale_requests();
    for step in 0..12 {
        harness.set_load(web_load(if step % 2 == 0 { 2.0 } else { 60.0 }));
        harness.passes(1).await;
    }
    assert_eq!((harness.replicas().await, harness.scale_requests()), (4, sent), "no change while the load flaps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_up_and_memory_down_is_held_by_all_metrics_agree_and_scaled_by_hpa() {
    let harness = start(&scenario(2), config()).await;
    // CPU at 110% of requests says up; memory at 20% says down.
    harness.set_load(WorkloadLoad { memory: Curve::constant(0.2), ..web_load(20.0) });
    let memory = "  - type: Resource\n    resource: {name: memory, target: {type: Utilization, averageUtilization: 80}}\n";
    harness.autoscale(&format!("{}{memory}", cpu_autoscaler("web", "all-metrics-agree", ""))).await;
    harness.passes(5).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (2, 0), "held: {}", harness.status("web").await);
    let status = harness.status("web").await;
    assert!(status["lastReason"].as_str().unwrap().ends_with("holding: metrics disagree on the direction"), "{status}");
    // Said where users look: the condition, and one event when it began (not one per sync).
    let active = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingActive").unwrap().clone();
    assert_eq!(active["reason"], "ConflictingMetrics", "{status}");
    let message = active["message"].as_str().unwrap();
    assert!(
        message.starts_with("metrics disagree (cpu wants ") && message.contains("; memory wants ") && message.ends_with("): holding at 2 replicas"),
        "{message}"
    );
    let events = harness.events("ConflictingMetrics").await;
    assert_eq!((events.len(), events[0].count), (1, Some(1)), "{events:?}");
    // The same Autoscaler on the HPA's rule scales up: max(5, 1).
    let patch = json!({"spec": {"policy": "hpa"}});
    Api::<Autoscaler>::namespaced(harness.client.clone(), "default").patch("web", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    harness.wait_for_replicas(5, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_history_the_rate_limits_need() {
    let harness = start(&scenario(2), config()).await;
    harness.set_load(web_load(20.0));
    let slow = "  behavior: {scaleUp: {policies: [{type: Pods, value: 1, periodSeconds: 600}]}}\n";
    harness.autoscale(&cpu_autoscaler("web", "hpa", slow)).await;
    harness.wait_for_replicas(3, Duration::from_secs(10)).await;
    harness.passes(3).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (3, 1), "one pod per 10 minutes");

    // A new host, with nothing in memory, reads the scale event from the status: still no second pod.
    let simulator = harness.stop_host();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let host = Host::with_config(&config(), &Runtime::new(None).unwrap(), api.clone()).unwrap();
    let harness = Harness { simulator, client: api.client, loops: tokio::spawn(host.clone().run_loops()), host };
    harness.passes(5).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (3, 0), "status: {}", harness.status("web").await);
    let status = harness.status("web").await;
    let limited = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingLimited").unwrap().clone();
    assert_eq!(limited["reason"], "ScaleUpLimit", "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_metric_scales_and_when_it_cannot_be_read_the_fallback_applies() {
    let harness = start(&scenario(2), config()).await;
    harness.simulator.state.load.set_external("queue_depth", Curve::constant(40.0));
    let autoscaler = "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: web, namespace: default}\nspec:\n  \
         scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  maxReplicas: 8\n  \
         metrics:\n  - type: External\n    external: {metric: {name: queue_depth}, target: {type: AverageValue, averageValue: '10'}}\n  \
         fallback: {failureThreshold: 3, replicas: 6}\n";
    harness.autoscale(autoscaler).await;
    // 40 queued, 10 per pod.
    harness.wait_for_replicas(4, Duration::from_secs(10)).await;
    harness.passes(2).await;
    assert_eq!(harness.status("web").await["targets"], "queue_depth: 10/10");
    // The metric disappears: two failed reads change nothing, the third applies the fallback's 6 replicas.
    harness.simulator.state.load.remove_external("queue_depth");
    harness.wait_for_replicas(6, Duration::from_secs(10)).await;
    // The status is written after the scale: one more pass to read it.
    harness.passes(1).await;
    let status = harness.status("web").await;
    assert!(status["metricFailures"].as_u64().unwrap() >= 3, "{status}");
    assert!(status["lastReason"].as_str().unwrap().starts_with("fallback: no metric could be read in "), "{status}");
    assert_eq!(status["targets"], "queue_depth: <unknown>/10");
    let active = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingActive").unwrap().clone();
    assert_eq!(active["reason"], "FailedGetExternalMetric", "{status}");
    assert_eq!(harness.scale_requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_an_hpa_or_two_autoscalers_scale_is_left_alone_and_bad_specs_are_refused_with_a_reason() {
    let harness = start(&scenario(2), config()).await;
    harness.set_load(web_load(40.0));
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web-hpa", "namespace": "default"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 3},
    });
    let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> = Api::namespaced(harness.client.clone(), "default");
    hpas.create(&PostParams::default(), &serde_json::from_value(hpa).unwrap()).await.unwrap();
    harness.autoscale(&cpu_autoscaler("web", "hpa", "")).await;
    harness.autoscale(&cpu_autoscaler("typo", "hpaa", "")).await;
    harness.passes(3).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (2, 0));
    let status = harness.status("web").await;
    let able = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "AbleToScale").unwrap().clone();
    assert_eq!((able["status"].as_str(), able["reason"].as_str()), (Some("False"), Some("ConflictingHorizontalPodAutoscaler")), "{status}");
    assert!(!harness.events("ConflictingHorizontalPodAutoscaler").await.is_empty());
    let typo = harness.status("typo").await;
    let active = typo["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingActive").unwrap().clone();
    assert_eq!(active["reason"], "InvalidSpec");
    assert_eq!(active["message"], "spec.policy: \"hpaa\" is not one of the host's scale policies (hpa, all-metrics-agree, predictive, scheduled)");
    // Without the HPA, two Autoscalers name web (`typo` too): the HPA's AmbiguousSelector, neither scales.
    hpas.delete("web-hpa", &Default::default()).await.unwrap();
    harness.passes(3).await;
    assert_eq!((harness.replicas().await, harness.scale_requests()), (2, 0));
    let status = harness.status("web").await;
    let active = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "ScalingActive").unwrap().clone();
    assert_eq!((active["status"].as_str(), active["reason"].as_str()), (Some("False"), Some("AmbiguousSelector")), "{status}");
    assert_eq!(active["message"], "Autoscalers typo, web all scale Deployment/web: none of them scales it until one is left");
    // With one Autoscaler left, wasp takes over.
    Api::<Autoscaler>::namespaced(harness.client.clone(), "default").delete("typo", &Default::default()).await.unwrap();
    harness.wait_for_replicas(6, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predictive_meets_a_ramp_earlier_than_the_hpa_rule() {
    let scenario = "kubelet: {readyDelay: 100ms}\nnodeGroups: [{name: n, count: 4, cpu: '16', memory: 64Gi}]\n\
         workloads:\n- {name: web, replicas: 2, schedulerName: wasp, cpu: 100m, memory: 256Mi}\n- {name: api, replicas: 2, schedulerName: wasp, cpu: 100m, memory: 256Mi}\n";
    let harness = start(scenario, config()).await;
    let load = &harness.simulator.state.load;
    for workload in ["web", "api"] {
        load.set(workload, web_load(8.0));
    }
    let fast_up = "  behavior: {scaleUp: {policies: [{type: Pods, value: 20, periodSeconds: 1}]}}\n";
    harness.autoscale(&cpu_autoscaler("web", "hpa", fast_up)).await;
    let predictive = cpu_autoscaler("api", "predictive", fast_up).replace("name: web}\n", "name: api}\n")
        + "  settings: {method: linear, horizonSeconds: 5, minSamples: 5}\n";
    harness.autoscale(&predictive).await;
    harness.passes(8).await;
    // The same ramp for both: 8 to 48 requests per second over 20 s (2 to 12 pods needed).
    let now = load.elapsed();
    let ramp = Curve(vec![Point { at: now, value: 8.0 }, Point { at: now + Duration::from_secs(20), value: 48.0 }]);
    for workload in ["web", "api"] {
        load.set(workload, WorkloadLoad { qps: ramp.clone(), ..web_load(0.0) });
    }
    let started = Instant::now();
    let deployments: Api<Deployment> = Api::namespaced(harness.client.clone(), "default");
    let (mut hpa_at, mut predictive_at) = (None, None);
    while hpa_at.is_none() || predictive_at.is_none() {
        assert!(started.elapsed() < Duration::from_secs(40), "hpa reached 8 at {hpa_at:?}, predictive at {predictive_at:?}");
        for (name, reached) in [("web", &mut hpa_at), ("api", &mut predictive_at)] {
            let replicas = deployments.get(name).await.unwrap().spec.replicas.unwrap();
            if reached.is_none() && replicas >= 8 {
                *reached = Some(started.elapsed());
            }
        }
        // The poll interval of a condition wait (bounded by the deadline above), not a fixed wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (hpa_at, predictive_at) = (hpa_at.unwrap(), predictive_at.unwrap());
    println!("8 replicas on a ramp: hpa after {hpa_at:?}, predictive after {predictive_at:?}");
    assert!(predictive_at + Duration::from_secs(2) <= hpa_at, "predictive at {predictive_at:?}, hpa at {hpa_at:?}");
}

/// Listing HorizontalPodAutoscalers fails (500 on every list): unknown is not "none", as both controllers could
/// scale the workload, so the host sends no scale update and says why; once the list works again it scales.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_is_not_scaled_while_horizontal_pod_autoscalers_cannot_be_listed() {
    let failing = "faults: {seed: 7, rules: [{verbs: [list], resources: [horizontalpodautoscalers.autoscaling], errorRate: 1.0, status: 500}]}\n";
    let harness = start(&format!("{failing}{}", scenario(2)), config()).await;
    harness.set_load(web_load(20.0));
    harness.autoscale(&cpu_autoscaler("web", "hpa", "")).await;
    harness.passes(3).await;
    assert!(harness.simulator.state.faults.counts(0).1 >= 3, "the lists failed");
    assert_eq!(harness.scale_requests(), 0, "no scale update while a conflict cannot be ruled out");
    assert_eq!(harness.replicas().await, 2);
    let status = harness.status("web").await;
    let able = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "AbleToScale").unwrap().clone();
    assert_eq!((able["status"].as_str(), able["reason"].as_str()), (Some("False"), Some("FailedListHorizontalPodAutoscalers")), "{status}");
    assert!(able["message"].as_str().unwrap().contains("could not list HorizontalPodAutoscalers"), "{status}");
    harness.simulator.state.faults.replace(wasp_sim::faults::FaultSpec::default());
    harness.wait_for_replicas(5, Duration::from_secs(20)).await;
}

/// Someone else scales the Deployment between the host's read of its scale and the host's write: the API server
/// refuses the write made on the resourceVersion read (409), and the next sync starts from the other writer's
/// replicas. A host that dropped the resourceVersion would overwrite them (its write would succeed, from 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_that_someone_changed_meanwhile_is_not_overwritten() {
    // Every scale update takes 1.5 s to arrive, so the test can change the Deployment while one is on its way.
    let slow_updates = "faults: {seed: 7, rules: [{verbs: [update], resources: [deployments.apps/scale], latency: 1500ms}]}\n";
    let harness = start(&format!("{slow_updates}{}", scenario(2)), config()).await;
    harness.set_load(web_load(20.0));
    harness.autoscale(&cpu_autoscaler("web", "hpa", "")).await;
    let faults = &harness.simulator.state.faults;
    let started = Instant::now();
    while faults.counts(0).0 < 1 {
        assert!(started.elapsed() < Duration::from_secs(10), "the host sent no scale update");
        // The poll interval of a condition wait (bounded by the deadline above), not a fixed wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deployments: Api<Deployment> = Api::namespaced(harness.client.clone(), "default");
    deployments.patch("web", &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}}))).await.unwrap();
    let started = Instant::now();
    while harness.events("SuccessfulRescale").await.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "no rescale after the conflict; status: {}", harness.status("web").await);
        // The poll interval of a condition wait (bounded by the deadline above), not a fixed wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed = harness.events("FailedRescale").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    let message = failed[0].message.as_deref().unwrap();
    assert!(message.starts_with("New size: 5 (from 2); reason: policy hpa:"), "{message}");
    assert!(message.contains("the target's scale changed since it was read"), "the API server refused the stale write: {message}");
    let rescaled = harness.events("SuccessfulRescale").await;
    assert!(rescaled.iter().all(|event| event.message.as_deref().unwrap().contains("(from 3)")), "the next sync read the other writer's 3: {rescaled:?}");
}
