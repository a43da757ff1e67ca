//! The HPA controller and wasp's autoscaler side by side on one real control plane, in one run (issue "Side by
//! side", autoscaling).
//!
//! `cargo bench -p wasp --bench autoscaling_side_by_side [-- --sync-period SECONDS] [--autoscaler NAME]...`, after
//! `scripts/build-policies.sh` and `scripts/build-controlplane.sh`.
//!
//! One Deployment (pods asking 200m CPU) and one load trace (ramp, plateau, spike, seeded noise, drop), replayed
//! three times, each on a fresh control plane: once for the real HPA controller (kube-controller-manager's,
//! autoscaling/v2), once for wasp's `hpa` policy, once for wasp's `predictive`. Each autoscaler gets the same
//! spec: 2 to 40 replicas, CPU at 50% of requests, the same `behavior`. The load is the Deployment's total CPU,
//! shared by its Running pods as a load balancer shares requests: the control plane's metrics adapter serves it
//! through the aggregation layer (`totalCpu` in its load model), so both read the same numbers the same way.
//! kube-scheduler places the pods in every run.
//!
//! Time runs in ticks, a fifteenth of the sync period (one second at the HPA's default 15 s): the trace is
//! written in ticks, and every tick the load is written and the Deployment's replicas and Running pods are
//! read from the API server. Figures are printed in trace seconds (seconds at a 15 s sync period). A shorter
//! `--sync-period` replays the trace faster; `--sync-period 1` is the smoke version `scripts/test.sh` runs. The
//! HPA's own clocks (the 5-minute CPU initialization period, the 30 s readiness delay, the metrics' 30 s
//! window) do not scale: both autoscalers keep them, so a shortened run still compares like with like.
//! `--autoscaler` (hpa-controller, hpa, predictive; repeatable) runs only those, to try a policy's change in a
//! third of the time: the trace and the environment replay exactly, so an earlier run's figures still compare.

#[allow(dead_code)] // the benchmark uses the control plane, not every helper the tests use
#[path = "../../tests/common/control_plane.rs"]
mod control_plane;

use control_plane::ControlPlane;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// Ticks per sync period.
const TICKS_PER_SYNC: u32 = 15;
/// Each pod's CPU request, in millicores, and the target utilization of it.
const REQUEST_MILLIS: u64 = 200;
const TARGET_PERCENT: u64 = 50;
const MIN_REPLICAS: u64 = 2;
const MAX_REPLICAS: u64 = 40;
/// The window the control plane's metrics adapter reports its samples over (controlplane/metrics.go).
const METRICS_WINDOW: Duration = Duration::from_secs(30);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn main() {
    let mut sync_seconds: u32 = 15;
    let mut chosen = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sync-period" => {
                sync_seconds = args.next().and_then(|value| value.parse().ok()).filter(|seconds| *seconds > 0).expect("--sync-period takes whole seconds")
            }
            "--autoscaler" => {
                let name = args.next().unwrap_or_default();
                let autoscaler = Autoscaler::ALL.into_iter().find(|autoscaler| autoscaler.name() == name);
                chosen.push(autoscaler.unwrap_or_else(|| panic!("--autoscaler {name:?}: one of hpa-controller, hpa, predictive")));
            }
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => panic!("unknown argument {other:?}: --sync-period SECONDS, --autoscaler NAME"),
        }
    }
    if chosen.is_empty() {
        chosen = Autoscaler::ALL.to_vec();
    }
    let trace = Trace::recorded();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!(
        "load trace: {} trace seconds (ramp, plateau, spike, noise, drop), sync period {sync_seconds} s (a tick is {:.0} ms); pods ask {REQUEST_MILLIS}m CPU, target {TARGET_PERCENT}%, {MIN_REPLICAS}-{MAX_REPLICAS} replicas",
        trace.millis.len(),
        tick(sync_seconds).as_secs_f64() * 1000.0,
    );
    let runs: Vec<Run> = chosen.into_iter().map(|autoscaler| runtime.block_on(run(autoscaler, &trace, sync_seconds))).collect();
    report(&trace, &runs);
    // The harness works only if every autoscaler followed the load up and back down.
    for run in &runs {
        let most = run.samples.iter().map(|sample| sample.desired).max().unwrap_or(0);
        let last = run.samples.last().map_or(0, |sample| sample.desired);
        assert!(most > MIN_REPLICAS && last < most, "{} did not follow the load: at most {most} replicas, {last} at the end", run.autoscaler.label());
    }
}

fn tick(sync_seconds: u32) -> Duration {
    Duration::from_secs(u64::from(sync_seconds)) / TICKS_PER_SYNC
}

// ---------------------------------------------------------------------------------------------------------------
// The load trace.

/// The Deployment's total CPU use, in millicores, for each tick.
struct Trace {
    millis: Vec<u64>,
    /// Where each phase begins, in ticks.
    phases: Vec<(u32, &'static str)>,
}

impl Trace {
    /// Calm, a ramp to 5x, a plateau, a spike, noise around the plateau (seeded), a drop, calm again.
    fn recorded() -> Trace {
        let mut noise = fastrand::Rng::with_seed(7);
        let mut noisy = 2000;
        let millis = (0..660u64)
            .map(|second| match second {
                0..60 => 400,
                60..180 => 400 + (2000 - 400) * (second - 60) / 120,
                180..300 => 2000,
                300..345 => 3200,
                345..480 => {
                    if second % 15 == 0 {
                        noisy = 2000 - 400 + noise.u64(0..=800);
                    }
                    noisy
                }
                _ => 600,
            })
            .collect();
        Trace { millis, phases: vec![(0, "calm"), (60, "ramp"), (180, "plateau"), (300, "spike"), (345, "noise"), (480, "drop")] }
    }

    fn phase(&self, tick: u32) -> &'static str {
        self.phases.iter().rev().find(|(start, _)| *start <= tick).map_or("", |(_, name)| name)
    }
}

/// Replicas that hold `millis` at the target utilization, within the spec's bounds.
fn needed(millis: u64) -> u64 {
    millis.div_ceil(REQUEST_MILLIS * TARGET_PERCENT / 100).clamp(MIN_REPLICAS, MAX_REPLICAS)
}

// ---------------------------------------------------------------------------------------------------------------
// The autoscalers.

#[derive(Clone, Copy, PartialEq)]
enum Autoscaler {
    Hpa,
    WaspHpa,
    WaspPredictive,
}

impl Autoscaler {
    const ALL: [Autoscaler; 3] = [Autoscaler::Hpa, Autoscaler::WaspHpa, Autoscaler::WaspPredictive];

    /// The name `--autoscaler` takes.
    fn name(self) -> &'static str {
        match self {
            Autoscaler::Hpa => "hpa-controller",
            Autoscaler::WaspHpa => "hpa",
            Autoscaler::WaspPredictive => "predictive",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Autoscaler::Hpa => "HPA controller",
            Autoscaler::WaspHpa => "wasp hpa",
            Autoscaler::WaspPredictive => "wasp predictive",
        }
    }

    /// The spec both kinds share: bounds, the CPU metric, and the HPA's default behavior with its periods scaled
    /// to the sync period and a scale-down window of four syncs (the default 300 s would outlast the trace's
    /// calm end).
    fn spec(sync_seconds: u32) -> String {
        format!(
            "  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  minReplicas: {MIN_REPLICAS}\n  maxReplicas: {MAX_REPLICAS}\n  metrics:\n  - type: Resource\n    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: {TARGET_PERCENT}}}}}\n  behavior:\n    scaleUp:\n      stabilizationWindowSeconds: 0\n      selectPolicy: Max\n      policies: [{{type: Percent, value: 100, periodSeconds: {sync_seconds}}}, {{type: Pods, value: 4, periodSeconds: {sync_seconds}}}]\n    scaleDown:\n      stabilizationWindowSeconds: {window}\n      selectPolicy: Max\n      policies: [{{type: Percent, value: 100, periodSeconds: {sync_seconds}}}]\n",
            window = 4 * sync_seconds,
        )
    }

    fn manifest(self, sync_seconds: u32) -> String {
        let spec = Self::spec(sync_seconds);
        match self {
            Autoscaler::Hpa => format!("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: web, namespace: default}}\nspec:\n{spec}"),
            Autoscaler::WaspHpa => format!("apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {{name: web, namespace: default}}\nspec:\n  policy: hpa\n{spec}"),
            // A forecast two syncs ahead: what a pod started now is worth once it counts.
            Autoscaler::WaspPredictive => format!(
                "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {{name: web, namespace: default}}\nspec:\n  policy: predictive\n  settings: {{horizonSeconds: {}}}\n{spec}",
                2 * sync_seconds
            ),
        }
    }

    /// Starts what runs this autoscaler besides the control plane: `wasp run` for wasp's.
    fn start(self, plane: &ControlPlane, sync_seconds: u32) -> Option<WaspProcess> {
        if self == Autoscaler::Hpa {
            return None;
        }
        let config = plane.dir.path().join("wasp-config.yaml");
        std::fs::write(&config, format!("{}autoscaler:\n  syncPeriod: {sync_seconds}s\n  policies: [hpa, predictive]\n", control_plane::built_in_config()))
            .unwrap();
        let log = plane.dir.path().join("wasp.log");
        Some(WaspProcess { process: plane.run_wasp(&config, &log), log })
    }
}

struct WaspProcess {
    process: Child,
    log: PathBuf,
}

impl WaspProcess {
    fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.process.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("wasp exited ({status}); {}:\n{log}", self.log.display());
        }
    }
}

impl Drop for WaspProcess {
    fn drop(&mut self) {
        control_plane::stop(&mut self.process, Duration::from_secs(10));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// One run.

/// What the API server said at one tick: the replicas the autoscaler asked for and the pods Running.
#[derive(Clone, Copy, Default)]
struct Sample {
    desired: u64,
    running: u64,
}

struct Run {
    autoscaler: Autoscaler,
    /// One per tick.
    samples: Vec<Sample>,
}

async fn run(autoscaler: Autoscaler, trace: &Trace, sync_seconds: u32) -> Run {
    println!("\n{}: starting a control plane", autoscaler.label());
    let plane = ControlPlane::start_with(&["--kube-scheduler", &format!("--hpa-sync-period={sync_seconds}s")]);
    plane.create_nodes("worker", 4, &["zone-a", "zone-b"], "8", "32Gi");
    let applied = plane.kubectl(&["apply", "-f", repo_root().join("manifests/05-crd-autoscaler.yaml").to_str().unwrap()]);
    assert!(applied.ok, "the Autoscaler CRD: {}", applied.stderr);
    let created = plane.kubectl_input(
        &["create", "-f", "-"],
        &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\nspec:\n  replicas: {MIN_REPLICAS}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: {REQUEST_MILLIS}m}}}}}}]\n"),
    );
    assert!(created.ok, "the Deployment: {}", created.stderr);

    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(&plane.kubeconfig).unwrap(), &Default::default()).await.unwrap(),
    )
    .unwrap();
    let (deployments, pods, config_maps) = (
        Api::<Deployment>::namespaced(client.clone(), "default"),
        Api::<Pod>::namespaced(client.clone(), "default"),
        Api::<ConfigMap>::namespaced(client, "kube-system"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while read(&deployments, &pods).await.running < MIN_REPLICAS {
        assert!(Instant::now() < deadline, "{}: the Deployment's {MIN_REPLICAS} pods not Running after 2 minutes", autoscaler.label());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    write_load(&config_maps, trace.millis[0]).await;
    // Both autoscalers ignore a new pod's CPU until it has been Ready for the metrics' window (the HPA's rule
    // within its CPU initialization period): start each from pods they both count.
    let ready_since = web_pods(&pods)
        .await
        .iter()
        .filter_map(|pod| {
            pod.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|condition| condition.type_ == "Ready" && condition.status == "True")?
                .last_transition_time
                .as_ref()
                .map(|time| time.0)
        })
        .max()
        .expect("Ready pods");
    let counted_in = ready_since.as_millisecond() + METRICS_WINDOW.as_millis() as i64 + 1000 - jiff::Timestamp::now().as_millisecond();
    tokio::time::sleep(Duration::from_millis(counted_in.clamp(0, 60_000) as u64)).await;

    let mut wasp = autoscaler.start(&plane, sync_seconds);
    let created = plane.kubectl_input(&["create", "-f", "-"], &autoscaler.manifest(sync_seconds));
    assert!(created.ok, "{}: {}", autoscaler.label(), created.stderr);
    let (tick, ticks) = (tick(sync_seconds), trace.millis.len() as u32);
    println!("{}: replaying the trace, {:.0} s", autoscaler.label(), (tick * ticks).as_secs_f64());
    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::with_capacity(ticks as usize);
    let mut written = trace.millis[0];
    loop {
        let now = (started.elapsed().as_secs_f64() / tick.as_secs_f64()) as u32;
        if now >= ticks {
            break;
        }
        if trace.millis[now as usize] != written {
            written = trace.millis[now as usize];
            write_load(&config_maps, written).await;
        }
        let sample = read(&deployments, &pods).await;
        // A tick the loop overran takes the sample after it.
        samples.resize(now as usize + 1, sample);
        if let Some(wasp) = wasp.as_mut() {
            wasp.assert_alive();
        }
        if now % (ticks / 10) == 0 && samples.len() as u32 == now + 1 {
            println!("  t={now:>3}s {:<8} load {:>4}m: {} replicas, {} Running", trace.phase(now), written, sample.desired, sample.running);
        }
        tokio::time::sleep_until((started + tick * (now + 1)).into()).await;
    }
    Run { autoscaler, samples }
}

/// The Deployment's replicas and its Running pods (bound, Running, not being deleted: what the metrics adapter
/// shares the load over).
async fn read(deployments: &Api<Deployment>, pods: &Api<Pod>) -> Sample {
    let deployment = deployments.get("web").await.unwrap();
    let running = web_pods(pods)
        .await
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Running"))
        .count() as u64;
    Sample { desired: deployment.spec.replicas.unwrap_or(0) as u64, running }
}

/// The Deployment's pods, as the API server lists them.
async fn web_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app=web")).await.unwrap().items
}

/// The metrics adapter's load model: `millis` of CPU shared by web's Running pods.
async fn write_load(config_maps: &Api<ConfigMap>, millis: u64) {
    let model = format!("pods:\n- {{namespace: default, selector: app=web, totalCpu: {millis}m, memory: 64Mi}}\n");
    let config_map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "wasp-controlplane-load", "namespace": "kube-system"},
        "data": {"load.yaml": model},
    });
    config_maps.patch("wasp-controlplane-load", &PatchParams::apply("autoscaling-side-by-side").force(), &Patch::Apply(&config_map)).await.unwrap();
}

// ---------------------------------------------------------------------------------------------------------------
// The report.

/// Trace seconds over the target utilization (every pod busier than the target, or no pod Running under load)
/// and replica-seconds (Running pods, summed over the ticks).
fn cost(trace: &Trace, run: &Run) -> (u64, u64) {
    let over = run
        .samples
        .iter()
        .zip(&trace.millis)
        .filter(|(sample, millis)| sample.running == 0 || **millis * 100 > sample.running * REQUEST_MILLIS * TARGET_PERCENT)
        .count() as u64;
    (over, run.samples.iter().map(|sample| sample.running).sum())
}

fn report(trace: &Trace, runs: &[Run]) {
    println!("\nreplicas asked for at the end of each sync period (trace seconds; needed: what holds the load at {TARGET_PERCENT}%)");
    let mut header = format!("{:>5}  {:<8} {:>6} {:>6}", "t", "phase", "load", "needed");
    for run in runs {
        header.push_str(&format!("  {:>15}", run.autoscaler.label()));
    }
    println!("{header}");
    let controller = runs.iter().find(|run| run.autoscaler == Autoscaler::Hpa);
    let wasp_hpa = runs.iter().find(|run| run.autoscaler == Autoscaler::WaspHpa);
    let mut differences = BTreeMap::new();
    for end in (TICKS_PER_SYNC - 1..trace.millis.len() as u32).step_by(TICKS_PER_SYNC as usize) {
        let millis = trace.millis[end as usize];
        let mut line = format!("{end:>5}  {:<8} {:>5}m {:>6}", trace.phase(end), millis, needed(millis));
        for run in runs {
            line.push_str(&format!("  {:>15}", run.samples[end as usize].desired));
        }
        println!("{line}");
        // The first sync is where the two start from different phases of their clocks.
        if let (Some(controller), Some(wasp)) = (controller, wasp_hpa) {
            let (controller, wasp) = (controller.samples[end as usize].desired, wasp.samples[end as usize].desired);
            if end >= 2 * TICKS_PER_SYNC - 1 && controller != wasp {
                differences.insert(end, (controller, wasp));
            }
        }
    }
    println!("\n{:<16} {:>16} {:>16} {:>8}", "", "seconds over", "replica-seconds", "ratio");
    let (_, baseline) = cost(trace, &runs[0]);
    for run in runs {
        let (over, replica_seconds) = cost(trace, run);
        println!("{:<16} {:>16} {:>16} {:>7.2}x", run.autoscaler.label(), over, replica_seconds, replica_seconds as f64 / baseline as f64);
    }
    if controller.is_some() && wasp_hpa.is_some() {
        println!(
            "\nwasp hpa against the HPA controller: {} of {} syncs after the first differ{}",
            differences.len(),
            trace.millis.len() as u32 / TICKS_PER_SYNC - 1,
            differences.iter().map(|(end, (hpa, wasp))| format!("\n  t={end}s: HPA {hpa}, wasp {wasp}")).collect::<String>()
        );
    }
}
