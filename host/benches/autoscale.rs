//! One autoscaling pass over 1000 Autoscalers, each with its Deployment of 2 running pods and a CPU metric, on the
//! simulated API server over HTTP: the pass's time, the part spent in policy calls (the rest is the API reads and
//! writes: the target's scale, its pods, their metrics, the status), and the process's memory. Side by side: a
//! steady pass (every target on its target: reads only, since a status that did not change is not written), a
//! pass in which every status changes (metrics move within the tolerance), and one in which every target scales.
//!
//! `cargo bench -p wasp --bench autoscale` (after scripts/build-policies.sh).

mod support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::Api;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use wasp::autoscaler::resource::Autoscaler;
use wasp::autoscaler::PassSummary;
use wasp::config::{AutoscalerSection, HostConfig};
use wasp::host::Host;
use wasp::kube::ApiClient;
use wasp::runtime::Runtime;
use wasp_sim::metrics::{Curve, WorkloadLoad};
use wasp_sim::{Scenario, Simulator};

const AUTOSCALERS: usize = 1000;
const TARGET: Duration = Duration::from_secs(1);

fn scenario() -> String {
    let mut yaml = String::from("kubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 100, cpu: '32', memory: 128Gi, pods: 110}]\nworkloads:\n");
    for index in 0..AUTOSCALERS {
        yaml.push_str(&format!("- {{name: w{index}, replicas: 2, schedulerName: wasp, cpu: 100m, memory: 128Mi, load: {{cpu: [{{at: 0s, value: 0.5}}]}}}}\n"));
    }
    yaml
}

fn autoscaler(index: usize) -> Autoscaler {
    serde_yaml::from_str(&format!(
        "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {{name: w{index}, namespace: default}}\nspec:\n  \
         scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: w{index}}}\n  maxReplicas: 4\n  \
         metrics: [{{type: Resource, resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 50}}}}}}]\n"
    ))
    .unwrap()
}

fn line(label: &str, pass: &PassSummary) -> String {
    let took = Duration::from_millis(pass.duration_ms as u64);
    format!(
        "{label:<34} {:>6} ms  (policy calls {:>4} ms, API and the rest {:>5} ms; {} scaled)  {:.2}x the 1 s target",
        pass.duration_ms,
        pass.policy_ms,
        pass.duration_ms - pass.policy_ms,
        pass.scaled,
        took.as_secs_f64() / TARGET.as_secs_f64()
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let simulator = Simulator::start(&Scenario::parse(&scenario()).unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
        let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
        let mut config = HostConfig::built_in();
        config.policy_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/out");
        config.autoscaler = Some(serde_yaml::from_str::<AutoscalerSection>("policies: [hpa]\ncpuInitializationPeriod: 0s").unwrap());
        config.validate().unwrap();
        let host = Host::with_config(&config, &Runtime::new(None).unwrap(), api.clone()).unwrap();
        host.start_informers();
        tokio::spawn(host.scheduler.clone().run(tokio_util::sync::CancellationToken::new()));
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(api.client.clone());
        let started = Instant::now();
        loop {
            let running = pods
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|pod| pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Running"))
                .count();
            if running == 2 * AUTOSCALERS {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(300), "{running} pods running");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let crd = <Autoscaler as kube::CustomResourceExt>::crd();
        Api::<CustomResourceDefinition>::all(api.client.clone()).create(&PostParams::default(), &crd).await.unwrap();
        let autoscalers: Api<Autoscaler> = Api::namespaced(api.client.clone(), "default");
        for index in 0..AUTOSCALERS {
            autoscalers.create(&PostParams::default(), &autoscaler(index)).await.unwrap();
        }
        println!("{AUTOSCALERS} Autoscalers, {} pods running, ready after {:.1}s", 2 * AUTOSCALERS, started.elapsed().as_secs_f64());
        // The first pass writes every status for the first time and compiles nothing (the registry did).
        let first = host.autoscaler.pass().await.unwrap();
        println!("{}", line("first pass", &first));
        let mut steady = Vec::new();
        for _ in 0..5 {
            steady.push(host.autoscaler.pass().await.unwrap());
        }
        steady.sort_by_key(|pass| pass.duration_ms);
        println!("{}", line("steady pass (median of 5)", &steady[2]));
        // Every target at 52% of 50%: within the tolerance, no scale, but every status's metrics change.
        for index in 0..AUTOSCALERS {
            simulator.state.load.set(&format!("w{index}"), WorkloadLoad { cpu: Curve::constant(0.52), ..Default::default() });
        }
        println!("{}", line("pass that writes every status", &host.autoscaler.pass().await.unwrap()));
        // Every target at 80% of 50%: each pass asks for 4 replicas everywhere.
        for index in 0..AUTOSCALERS {
            simulator.state.load.set(&format!("w{index}"), WorkloadLoad { cpu: Curve::constant(0.8), ..Default::default() });
        }
        let scaling = host.autoscaler.pass().await.unwrap();
        println!("{}", line("pass that scales every target", &scaling));
        println!("resident memory {:.0} MiB (simulator included)", support::resident_mib());
    });
}
