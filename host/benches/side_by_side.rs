//! kube-scheduler and wasp side by side on one real control plane, in one run (issue "Side by side", scheduling).
//!
//! `cargo bench -p wasp --bench side_by_side [-- --nodes N] [--workload NAME]... [--scheduler NAME]...
//! [--node-lease-seconds S] [--give-up-after S]`, after `scripts/build-policies.sh` and
//! `scripts/build-controlplane.sh`. `--node-lease-seconds` lengthens the fake kubelets' Leases (a kubelet's are
//! 40 s, renewed every 10 s): at 5000 nodes their renewals are a load of their own on two cores, enough to make
//! nodes miss their heartbeats. `--give-up-after` (600 s, scheduler_perf's wait) bounds how long a scheduler may
//! take to place the measured pods: one that has not placed them all by then is stopped, and its row reads what
//! it placed until then (no latency columns), so the other schedulers' rows of the table still come.
//!
//! The workloads are kube-scheduler's own scheduler_perf test cases, read from the Kubernetes module the control
//! plane is built from (`test/integration/scheduler_perf/*/performance-config.yaml` and its templates, in Go's
//! module cache): the same node and pod templates, the same operations, the counts of the test case's
//! `performance` workload (5000 nodes) scaled to `--nodes`. Each scheduler gets a fresh control plane
//! (`wasp-controlplane`) and runs as its own process, so its CPU time and peak memory (start-up and the first
//! list of the cluster included) are its own: kube-scheduler's command built from the same Go modules
//! (`target/controlplane/kube-scheduler`: the default profile, the default `percentageOfNodesToScore`,
//! scheduler_perf's client rate limit of 5000/s), `wasp run` with its built-in configuration (the default
//! policy set, as WASM, with preemption: see `wasp_config`), and the same host with the same configuration but
//! the scheduling policies compiled natively into it (this benchmark's binary, started again with
//! `--native-host CONFIG`: see `support::native::run_host`). All connect as the control plane's admin, as
//! kube-scheduler does in scheduler_perf (exempt from API priority and fairness).
//!
//! What differs from scheduler_perf, and why: scheduler_perf creates the measured pods while the scheduler runs
//! and samples how many are scheduled each second. On two shared cores the pods' creation would be the bottleneck
//! for both schedulers, so here the measured pods are created while no scheduler runs, then the scheduler is
//! started and the rate counts from its first binding of them to its last, from the API server's audit log. The
//! informer sync before the first binding is printed apart ("start to first"). The latency columns are measured
//! afterwards, with the scheduler running and idle: 100 plain pods created at 20 per second, from the API
//! server's receipt of the create to its receipt of the binding. Also unlike scheduler_perf: kwok updates nodes
//! and pods as kubelets would, and every kube-controller-manager controller runs; nodes are used once the node
//! lifecycle controller has lifted their `not-ready` taint (scheduler_perf disables the admission plugin that
//! adds it).
//!
//! Every binding is replayed through kube-scheduler's own filter plugins (`wasp-controlplane check-placements`);
//! the run fails on a violation, as on an unmeasured pod left unbound. `--nodes 100` is the smoke version
//! `scripts/test.sh` runs.

#[allow(dead_code)] // the benchmark uses the control plane, not every helper the tests use
#[path = "../../tests/common/control_plane.rs"]
mod control_plane;
#[path = "support/native.rs"]
mod native;

// The native host's memory figures are the `wasp` binary's, with its allocator.
#[cfg(feature = "jemalloc")]
wasp_allocator::binary_allocator!();

use control_plane::{AuditEvent, ControlPlane, Usage};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_yaml::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The test cases compared, in scheduler_perf's names.
const WORKLOADS: &[&str] = &[
    "SchedulingBasic",
    "SchedulingPodAntiAffinity",
    "SchedulingPodAffinity",
    "TopologySpreading",
    "Unschedulable",
    "PreemptionAsync",
    "SchedulingWithMixedChurn",
    "GangScheduling",
];

/// Requests in flight while creating nodes and pods.
const CREATORS: usize = 16;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn main() {
    // This binary started again as the third scheduler (`Scheduler::WaspNative`).
    if std::env::args().nth(1).as_deref() == Some("--native-host") {
        let config = std::env::args().nth(2).expect("--native-host takes the host's configuration file");
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_writer(std::io::stderr).init();
        if let Err(error) = native::run_host(config.as_ref(), repo_root().join("target/side-by-side-cache")) {
            eprintln!("the native host failed: {error:#}");
            std::process::exit(1);
        }
        return;
    }
    let mut nodes = 5000;
    let mut chosen: Vec<String> = Vec::new();
    let mut schedulers: Vec<Scheduler> = Vec::new();
    let mut plane_flags: Vec<String> = Vec::new();
    let mut give_up_after = Duration::from_secs(600);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--nodes" => nodes = args.next().and_then(|value| value.parse().ok()).expect("--nodes takes a number"),
            "--workload" => chosen.push(args.next().expect("--workload takes a test case name")),
            "--scheduler" => {
                let name = args.next().expect("--scheduler takes a scheduler's name");
                let known = Scheduler::ALL.into_iter().chain([Scheduler::KubeSchedulerJson]);
                let names: Vec<&str> = known.clone().map(Scheduler::name).collect();
                schedulers
                    .push(known.into_iter().find(|scheduler| scheduler.name() == name).unwrap_or_else(|| panic!("no scheduler {name:?}: one of {names:?}")));
            }
            "--node-lease-seconds" => {
                let seconds: u32 =
                    args.next().and_then(|value| value.parse().ok()).filter(|seconds| *seconds > 0).expect("--node-lease-seconds takes whole seconds");
                plane_flags = vec!["--node-lease-duration".into(), format!("{seconds}s")];
            }
            "--give-up-after" => {
                let seconds: u64 =
                    args.next().and_then(|value| value.parse().ok()).filter(|seconds| *seconds > 0).expect("--give-up-after takes whole seconds");
                give_up_after = Duration::from_secs(seconds);
            }
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => panic!(
                "unknown argument {other:?}: --nodes N, --workload NAME (one of {WORKLOADS:?}), --scheduler NAME, --node-lease-seconds S, --give-up-after S"
            ),
        }
    }
    if chosen.is_empty() {
        chosen = WORKLOADS.iter().map(|name| name.to_string()).collect();
    }
    if schedulers.is_empty() {
        schedulers = Scheduler::ALL.to_vec();
    }
    let catalogue = Catalogue::find();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("scheduler_perf test cases from {}", catalogue.dir.display());
    let mut violated = Vec::new();
    for name in &chosen {
        let workload = catalogue.workload(name, nodes);
        println!("\n{name}: {}", workload.describe());
        assert_eq!(
            workload.operations.iter().filter(|operation| matches!(operation, Operation::CreatePods { measured: true, .. })).count(),
            1,
            "{name}: one measured operation"
        );
        let results: Vec<RunResult> = schedulers.iter().map(|scheduler| runtime.block_on(run(&workload, *scheduler, &plane_flags, give_up_after))).collect();
        print_table(&workload, &results);
        for result in results.iter() {
            if let Some(GaveUp { bound, after }) = result.gave_up {
                println!(
                    "  *{}: stopped after {} s with {bound} of {} measured pods bound; its row counts those",
                    result.scheduler.label(),
                    after.as_secs(),
                    workload.measured_pods()
                );
            }
        }
        for result in results.iter().filter(|result| result.bound_after_error > 0) {
            println!(
                "  {}: {} pods bound by a binding the API server answered with an error (a timeout under load)",
                result.scheduler.label(),
                result.bound_after_error
            );
        }
        for result in results.iter().filter(|result| result.check.gone > 0) {
            println!("  {}: {} pods bound, then deleted (preemption's victims)", result.scheduler.label(), result.check.gone);
        }
        for result in results.iter().filter(|result| !result.check.violations.is_empty()) {
            println!("  {} placed {} pods where kube-scheduler's filters refuse them, first:", result.scheduler.label(), result.check.violations.len());
            result.check.violations.iter().take(5).for_each(|violation| println!("    {violation}"));
            violated.push(format!("{name} ({})", result.scheduler.label()));
        }
    }
    assert!(violated.is_empty(), "placements kube-scheduler's filter plugins refuse: {violated:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// The workloads, as scheduler_perf defines them.

/// Where scheduler_perf's test cases are: the module cache's copy of the Kubernetes version controlplane/ builds.
struct Catalogue {
    dir: PathBuf,
}

impl Catalogue {
    fn find() -> Catalogue {
        let go_mod = std::fs::read_to_string(repo_root().join("controlplane/go.mod")).unwrap();
        let version = go_mod
            .lines()
            .find_map(|line| line.trim().strip_prefix("k8s.io/kubernetes "))
            .map(|version| version.trim().to_string())
            .expect("controlplane/go.mod requires k8s.io/kubernetes");
        let output = Command::new("go").args(["env", "GOMODCACHE"]).output().expect("go is installed");
        let cache = PathBuf::from(String::from_utf8(output.stdout).unwrap().trim());
        let dir = cache.join(format!("k8s.io/kubernetes@{version}/test/integration/scheduler_perf"));
        assert!(dir.is_dir(), "{} is missing: `cd controlplane && go mod download` fetches it", dir.display());
        Catalogue { dir }
    }

    /// Test case `name` with the counts of its `performance` workload scaled from its nodes to `nodes`.
    fn workload(&self, name: &str, nodes: usize) -> Workload {
        let mut found = None;
        // A folder per subject (misc/, affinity/), some with a folder per test case (podgroup/gangscheduling/).
        let folders = std::fs::read_dir(&self.dir).unwrap().map(|entry| entry.unwrap().path()).filter(|path| path.is_dir());
        let folders: Vec<PathBuf> =
            folders.flat_map(|folder| std::iter::once(folder.clone()).chain(std::fs::read_dir(&folder).unwrap().map(|entry| entry.unwrap().path()))).collect();
        for folder in folders {
            let file = folder.join("performance-config.yaml");
            let Ok(text) = std::fs::read_to_string(&file) else { continue };
            let cases: Vec<Value> = serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            if let Some(case) = cases.into_iter().find(|case| case["name"].as_str() == Some(name)) {
                found = Some((file.parent().unwrap().to_path_buf(), case));
                break;
            }
        }
        let (dir, case) = found.unwrap_or_else(|| panic!("no scheduler_perf test case {name} under {}", self.dir.display()));
        // The workload scheduler_perf's performance job runs (one with a threshold), the variant with queueing
        // hints on, as they are in this Kubernetes version (the gate is locked on).
        let thresholded: Vec<&Value> = case["workloads"].as_sequence().unwrap().iter().filter(|workload| workload["threshold"].is_number()).collect();
        let measured = thresholded
            .iter()
            .find(|workload| workload["featureGates"]["SchedulerQueueingHints"].as_bool() == Some(true))
            .or(thresholded.first())
            .map(|workload| (*workload).clone())
            // Test cases without thresholds yet (GangScheduling): the first workload of the performance job.
            .or_else(|| {
                let workloads = case["workloads"].as_sequence().unwrap();
                let performance = |workload: &&Value| workload["labels"].as_sequence().is_some_and(|labels| labels.iter().any(|label| label == "performance"));
                workloads.iter().find(performance).cloned()
            })
            .unwrap_or_else(|| panic!("{name}: no workload with a threshold or of the performance job"));
        let params: BTreeMap<String, usize> =
            measured["params"].as_mapping().unwrap().iter().filter_map(|(key, value)| Some((key.as_str()?.to_string(), value.as_u64()? as usize))).collect();
        let reference_nodes = params["initNodes"];
        let scale = |count: usize| (count * nodes).div_ceil(reference_nodes).max(1);
        let count = |op: &Value| -> usize {
            match (op["countParam"].as_str(), op["count"].as_u64()) {
                (Some(param), _) => scale(params[param.trim_start_matches('$')]),
                (None, Some(count)) => count as usize,
                _ => panic!("{name}: an operation without a count: {op:?}"),
            }
        };
        let template = |path: Option<&str>| path.map(|path| serde_yaml::from_str::<Value>(&std::fs::read_to_string(dir.join(path)).unwrap()).unwrap());
        // `templateParams` name the workload's parameters (`$podsPerGroup`), not scaled: a gang keeps its size.
        let indexed = |path: &str, op: &Value| Indexed {
            text: std::fs::read_to_string(dir.join(path)).unwrap(),
            params: op["templateParams"]
                .as_mapping()
                .into_iter()
                .flatten()
                .map(|(key, value)| (key.as_str().unwrap().to_string(), params[value.as_str().unwrap().trim_start_matches('$')]))
                .collect(),
        };
        let mut feature_gates: BTreeMap<String, bool> = BTreeMap::new();
        for gates in [&case["featureGates"], &measured["featureGates"]] {
            for (gate, on) in gates.as_mapping().into_iter().flatten() {
                feature_gates.insert(gate.as_str().unwrap().to_string(), on.as_bool().unwrap());
            }
        }
        let default_pod = template(case["defaultPodTemplatePath"].as_str());
        let mut operations = Vec::new();
        for (index, op) in case["workloadTemplate"].as_sequence().unwrap().iter().enumerate() {
            let known: &[&str] = match op["opcode"].as_str().unwrap_or_default() {
                "createNodes" => {
                    operations.push(Operation::CreateNodes {
                        count: count(op),
                        template: template(op["nodeTemplatePath"].as_str()),
                        labels: op["labelNodePrepareStrategy"].as_mapping().map(|strategy| {
                            let key = strategy.get("labelKey").and_then(Value::as_str).unwrap().to_string();
                            let values = strategy
                                .get("labelValues")
                                .and_then(Value::as_sequence)
                                .unwrap()
                                .iter()
                                .map(|value| value.as_str().unwrap().to_string())
                                .collect();
                            (key, values)
                        }),
                    });
                    &["opcode", "countParam", "count", "nodeTemplatePath", "labelNodePrepareStrategy"]
                }
                "createNamespaces" => {
                    let prefix = op["prefix"].as_str().unwrap();
                    operations.extend((0..count(op)).map(|index| Operation::CreateNamespace(format!("{prefix}-{index}"))));
                    &["opcode", "prefix", "count", "countParam"]
                }
                "createPods" => {
                    let indexed = op["templateParams"].is_mapping().then(|| indexed(op["podTemplatePath"].as_str().unwrap(), op));
                    let template = match &indexed {
                        Some(indexed) => indexed.render(0),
                        None => template(op["podTemplatePath"].as_str()).or_else(|| default_pod.clone()).unwrap_or_else(base_pod),
                    };
                    // `countMultiplierParam`: pods per group, not scaled.
                    let multiplier = op["countMultiplierParam"].as_str().map_or(1, |param| params[param.trim_start_matches('$')]);
                    operations.push(Operation::CreatePods {
                        count: count(op) * multiplier,
                        // scheduler_perf's own default: a namespace per operation.
                        namespace: op["namespace"].as_str().map_or_else(|| format!("namespace-{index}"), str::to_string),
                        template,
                        indexed,
                        measured: op["collectMetrics"].as_bool().unwrap_or(false),
                    });
                    &["opcode", "countParam", "countMultiplierParam", "count", "podTemplatePath", "templateParams", "namespace", "collectMetrics"]
                }
                "createPodGroups" => {
                    operations.push(Operation::CreatePodGroups {
                        count: count(op),
                        namespace: op["namespace"].as_str().unwrap().to_string(),
                        template: indexed(op["templatePath"].as_str().unwrap(), op),
                    });
                    &["opcode", "countParam", "count", "namespace", "templatePath", "templateParams"]
                }
                "churn" => {
                    let templates: Vec<Value> = op["templatePaths"].as_sequence().unwrap().iter().map(|path| template(path.as_str()).unwrap()).collect();
                    for template in &templates {
                        let kind = template["kind"].as_str().unwrap_or_default();
                        assert!(["Pod", "Node", "Service"].contains(&kind), "{name}: churning a {kind} is not supported by this benchmark yet");
                    }
                    let number = op["number"].as_u64().unwrap_or(0) as usize;
                    let mode = match op["mode"].as_str() {
                        Some("create") => ChurnMode::Create { limit: Some(number).filter(|number| *number > 0) },
                        Some("recreate") => ChurnMode::Recreate { number: number.max(1) },
                        other => panic!("{name}: churn mode {other:?} is not scheduler_perf's"),
                    };
                    operations.push(Operation::Churn {
                        templates,
                        namespace: op["namespace"].as_str().map_or_else(|| format!("namespace-{index}"), str::to_string),
                        // scheduler_perf's default interval.
                        interval: Duration::from_millis(op["intervalMilliseconds"].as_u64().unwrap_or(500)),
                        mode,
                    });
                    &["opcode", "mode", "templatePaths", "intervalMilliseconds", "number", "namespace"]
                }
                other => panic!("{name}: scheduler_perf's opcode {other:?} is not supported by this benchmark yet"),
            };
            if let Some(unknown) = op.as_mapping().unwrap().keys().filter_map(Value::as_str).find(|key| !known.contains(key)) {
                panic!("{name}: operation {index} ({}) uses {unknown:?}, which this benchmark does not support yet", op["opcode"].as_str().unwrap_or_default());
            }
        }
        Workload {
            variant: measured["name"].as_str().unwrap_or_default().to_string(),
            threshold: measured["threshold"].as_f64(),
            feature_gates: feature_gates.into_iter().map(|(gate, on)| format!("{gate}={on}")).collect(),
            operations,
        }
    }
}

/// scheduler_perf's `makeBasePod`: one pause container, 100m CPU and 500Mi, for operations without a template.
fn base_pod() -> Value {
    serde_yaml::from_str(
        "apiVersion: v1\nkind: Pod\nmetadata: {generateName: pod-}\nspec:\n  containers:\n  - {name: pause, image: registry.k8s.io/pause:3.10.2, ports: [{containerPort: 80}], resources: {limits: {cpu: 100m, memory: 500Mi}, requests: {cpu: 100m, memory: 500Mi}}}\n",
    )
    .unwrap()
}

/// scheduler_perf's `makeBaseNode`: 4 CPUs, 32Gi and 110 pods, Ready.
fn base_node() -> Value {
    serde_yaml::from_str(
        "apiVersion: v1\nkind: Node\nmetadata: {generateName: scheduler-perf-}\nstatus:\n  capacity: {pods: '110', cpu: '4', memory: 32Gi}\n  allocatable: {pods: '110', cpu: '4', memory: 32Gi}\n  phase: Running\n  conditions: [{type: Ready, status: 'True'}]\n",
    )
    .unwrap()
}

struct Workload {
    /// The scheduler_perf workload whose counts were scaled (e.g. 5000Nodes_10000Pods).
    variant: String,
    /// scheduler_perf's threshold for that workload, in pods/s, measured on Kubernetes' CI machines.
    threshold: Option<f64>,
    /// The feature gates the test case turns on (`GenericWorkload=true` for gangs): the control plane runs with
    /// them on, and kube-scheduler is given them.
    feature_gates: Vec<String>,
    operations: Vec<Operation>,
}

/// A scheduler_perf template with Go template actions (`{{.Index}}`, `{{.podsPerGroup}}`,
/// `{{DivideInt .Index .podsPerGroup}}`), made once per object.
#[derive(Clone)]
struct Indexed {
    text: String,
    params: BTreeMap<String, usize>,
}

impl Indexed {
    /// The object of index `index`.
    fn render(&self, index: usize) -> Value {
        let value = |token: &str| match token {
            ".Index" => index,
            other => *self.params.get(other.trim_start_matches('.')).unwrap_or_else(|| panic!("template parameter {other} is not given")),
        };
        let mut out = String::new();
        let mut rest = self.text.as_str();
        while let Some(start) = rest.find("{{") {
            let end = start + rest[start..].find("}}").expect("an unclosed {{ in a template");
            out.push_str(&rest[..start]);
            let tokens: Vec<&str> = rest[start + 2..end].split_whitespace().collect();
            let rendered = match tokens.as_slice() {
                ["DivideInt", a, b] => value(a) / value(b),
                [one] => value(one),
                other => panic!("template action {other:?} is not supported by this benchmark yet"),
            };
            out.push_str(&rendered.to_string());
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        serde_yaml::from_str(&out).unwrap()
    }
}

enum Operation {
    /// `labels`: scheduler_perf's labelNodePrepareStrategy, a key and values given to the nodes round-robin.
    CreateNodes {
        count: usize,
        template: Option<Value>,
        labels: Option<(String, Vec<String>)>,
    },
    CreateNamespace(String),
    CreatePods {
        count: usize,
        namespace: String,
        template: Value,
        /// A template with `templateParams`, made per pod (the pod of index 0 is `template`).
        indexed: Option<Indexed>,
        measured: bool,
    },
    /// scheduler_perf's `createPodGroups`: PodGroups `gang-0`, `gang-1`, ... (Kubernetes 1.37's gangs).
    CreatePodGroups {
        count: usize,
        namespace: String,
        template: Indexed,
    },
    /// scheduler_perf's `churn`: from its place on, every `interval`, an object of each template (pods, nodes,
    /// Services) made or, in `recreate` mode, deleted again, until the measured pods are placed.
    Churn {
        templates: Vec<Value>,
        namespace: String,
        interval: Duration,
        mode: ChurnMode,
    },
}

#[derive(Clone, Copy)]
enum ChurnMode {
    /// An object of each template every interval, up to `limit` of each.
    Create { limit: Option<usize> },
    /// scheduler_perf's `recreate`: `number` objects of each template made over as many intervals, then deleted
    /// one an interval in the same order, and again.
    Recreate { number: usize },
}

impl Workload {
    fn describe(&self) -> String {
        let parts: Vec<String> = self
            .operations
            .iter()
            .filter_map(|operation| match operation {
                Operation::CreateNodes { count, .. } => Some(format!("{count} nodes")),
                Operation::CreatePods { count, namespace, measured, .. } => {
                    Some(format!("{count} {} pods in {namespace}", if *measured { "measured" } else { "initial" }))
                }
                Operation::Churn { templates, interval, mode, .. } => {
                    let kinds: Vec<&str> = templates.iter().map(|template| template["kind"].as_str().unwrap_or_default()).collect();
                    let how = match mode {
                        ChurnMode::Create { .. } => "created",
                        ChurnMode::Recreate { .. } => "created and deleted in turn",
                    };
                    Some(format!("{} {how} every {interval:?}", kinds.join(", ")))
                }
                Operation::CreatePodGroups { count, .. } => Some(format!("{count} PodGroups")),
                Operation::CreateNamespace(_) => None,
            })
            .collect();
        format!("{} (scheduler_perf's {} scaled)", parts.join(", "), self.variant)
    }

    fn measured_pods(&self) -> usize {
        self.operations
            .iter()
            .map(|operation| match operation {
                Operation::CreatePods { count, measured: true, .. } => *count,
                _ => 0,
            })
            .sum()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The schedulers, each its own process.

#[derive(Clone, Copy, PartialEq)]
enum Scheduler {
    KubeScheduler,
    Wasp,
    /// The same host and configuration as [`Scheduler::Wasp`], its scheduling policies compiled natively.
    WaspNative,
    /// kube-scheduler talking JSON to the API server, as wasp does (kube-rs has no protobuf), instead of its
    /// default protobuf: what the wire format costs the control plane. Run only when asked (`--scheduler`).
    KubeSchedulerJson,
}

impl Scheduler {
    /// The schedulers compared by default, in the order they run and are printed.
    const ALL: [Scheduler; 3] = [Scheduler::KubeScheduler, Scheduler::Wasp, Scheduler::WaspNative];

    /// Its name for `--scheduler`.
    fn name(self) -> &'static str {
        match self {
            Scheduler::KubeScheduler => "kube-scheduler",
            Scheduler::Wasp => "wasp",
            Scheduler::WaspNative => "wasp-native",
            Scheduler::KubeSchedulerJson => "kube-scheduler-json",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Scheduler::KubeScheduler => "kube-scheduler",
            Scheduler::Wasp => "wasp (wasm)",
            Scheduler::WaspNative => "wasp (native)",
            Scheduler::KubeSchedulerJson => "kube-sch. (JSON)",
        }
    }

    /// How its requests name it in the API server's audit log.
    fn user_agent(self) -> &'static str {
        match self {
            Scheduler::KubeScheduler | Scheduler::KubeSchedulerJson => "kube-scheduler/",
            Scheduler::Wasp | Scheduler::WaspNative => wasp::kube::client::USER_AGENT,
        }
    }

    /// The `schedulerName` its pods carry.
    fn profile(self) -> &'static str {
        match self {
            Scheduler::KubeScheduler | Scheduler::KubeSchedulerJson => "default-scheduler",
            Scheduler::Wasp | Scheduler::WaspNative => "wasp",
        }
    }

    /// Starts it; kube-scheduler with the test case's `feature_gates` (the control plane has them on already).
    fn start(self, plane: &ControlPlane, feature_gates: &[String]) -> SchedulerProcess {
        let log = plane.dir.path().join(format!("{}-{}.log", self.profile(), SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()));
        let process = match self {
            Scheduler::KubeScheduler | Scheduler::KubeSchedulerJson => {
                let kubeconfig = plane.kubeconfig.to_str().unwrap();
                let content_type = match self {
                    Scheduler::KubeSchedulerJson => "application/json",
                    _ => "application/vnd.kubernetes.protobuf",
                };
                Command::new(kube_scheduler_binary())
                    .arg(format!("--kube-api-content-type={content_type}"))
                    .args((!feature_gates.is_empty()).then(|| format!("--feature-gates={}", feature_gates.join(","))))
                    .args([
                        &format!("--kubeconfig={kubeconfig}"),
                        &format!("--authentication-kubeconfig={kubeconfig}"),
                        &format!("--authorization-kubeconfig={kubeconfig}"),
                        "--leader-elect=false",
                        "--secure-port=0",
                        // scheduler_perf's client rate limit (test/integration/scheduler_perf/util.go): the default
                        // 50 requests/s would cap the bindings, not measure the scheduler.
                        "--kube-api-qps=5000",
                        "--kube-api-burst=5000",
                    ])
                    // As in a kube-scheduler Pod: no memory limit for Go's collector (the control plane's is its own).
                    .env_remove("GOMEMLIMIT")
                    .env_remove("GOGC")
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .unwrap()
            }
            Scheduler::Wasp => plane.run_wasp(&wasp_config(plane), &log),
            Scheduler::WaspNative => Command::new(std::env::current_exe().unwrap())
                .arg("--native-host")
                .arg(wasp_config(plane))
                .env("KUBECONFIG", &plane.kubeconfig)
                .env("RUST_LOG", "warn")
                .current_dir(repo_root())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        };
        SchedulerProcess { process, started: SystemTime::now(), log }
    }
}

struct SchedulerProcess {
    process: Child,
    started: SystemTime,
    log: PathBuf,
}

impl SchedulerProcess {
    fn usage(&self) -> Usage {
        control_plane::process_usage(self.process.id())
    }

    /// Fails the run if the scheduler died.
    fn assert_alive(&mut self, scheduler: Scheduler) {
        if let Ok(Some(status)) = self.process.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!("{} exited ({status}); the end of {}:\n{}", scheduler.label(), self.log.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
    }
}

/// A scheduler never outlives its run, even one that fails.
impl Drop for SchedulerProcess {
    fn drop(&mut self) {
        control_plane::stop(&mut self.process, Duration::from_secs(10));
    }
}

/// wasp's built-in configuration (the default policy set) with preemption, as kube-scheduler's default profile
/// preempts: the rescheduler with no strategy of its own, only `make-room-for-pending`. Pods no controller would
/// recreate may be its victims (`evictBarePods`), as kube-scheduler's are: scheduler_perf's pods are all bare, and
/// wasp's envelope, like the descheduler's, protects them by default.
fn wasp_config(plane: &ControlPlane) -> PathBuf {
    let built_in = control_plane::built_in_config();
    let path = plane.dir.path().join("wasp-config.yaml");
    std::fs::write(&path, format!("{built_in}rescheduler:\n  preemption: {{policy: make-room-for-pending}}\n  protections: {{evictBarePods: true}}\n"))
        .unwrap();
    path
}

/// kube-scheduler's command, built by scripts/build-controlplane.sh from the control plane's Go modules.
fn kube_scheduler_binary() -> PathBuf {
    let path = repo_root().join("target/controlplane/kube-scheduler");
    assert!(path.exists(), "{} is missing: scripts/build-controlplane.sh builds it", path.display());
    path
}

/// Waits until `count` nodes are Ready and none carries the `not-ready` taint the API server gives a new node
/// (until the node lifecycle controller lifts it, no scheduler may use the node).
async fn wait_schedulable(client: &kube::Client, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let nodes = Api::<Node>::all(client.clone()).list(&Default::default()).await.unwrap().items;
        let schedulable = nodes
            .iter()
            .filter(|node| {
                let status = node.status.as_ref();
                let ready = status
                    .and_then(|status| status.conditions.as_ref())
                    .is_some_and(|conditions| conditions.iter().any(|condition| condition.type_ == "Ready" && condition.status == "True"));
                let tainted = node
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.taints.as_ref())
                    .is_some_and(|taints| taints.iter().any(|taint| taint.key.starts_with("node.kubernetes.io/")));
                ready && !tainted
            })
            .count();
        if schedulable >= count {
            return;
        }
        assert!(Instant::now() < deadline, "{schedulable} of {count} nodes schedulable after 5 minutes");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// One run: a fresh control plane, the workload's operations, one scheduler.

struct RunResult {
    scheduler: Scheduler,
    /// Measured pods per second, from the scheduler's first binding of them to its last.
    pods_per_second: f64,
    /// From the scheduler's process start to its first binding of a measured pod: informer sync and start-up.
    start_to_first: Duration,
    /// Creation-to-binding latency of pods created at a steady rate while the scheduler runs: p50, p99; not
    /// measured of a scheduler given up on.
    latency: Option<(Duration, Duration)>,
    /// Set when the scheduler had not placed every measured pod within `--give-up-after`.
    gave_up: Option<GaveUp>,
    usage: Usage,
    /// The control plane's CPU seconds while the scheduler placed the measured pods (its start to their last
    /// binding): what the API server, etcd, the controllers and kwok took of the two cores meanwhile.
    plane_cpu_seconds: f64,
    /// Measured pods per node: (fewest, most), over the nodes.
    per_node: (usize, usize),
    /// Measured pods per zone label value, when nodes have one.
    per_zone: BTreeMap<String, usize>,
    /// Bindings kube-scheduler's filter plugins refuse, replayed in binding order (0 allowed).
    check: Check,
    /// The scheduler's requests while it placed the measured pods, per `verb resource[/subresource]`, most first.
    requests: Vec<(String, usize)>,
    /// Pods bound by a binding the API server answered with an error (see `run`).
    bound_after_error: usize,
    /// Every audited request over the same span: the scheduler's, the controllers', the benchmark's (not kwok's
    /// heartbeats, which the control plane's audit policy leaves out).
    all_requests: usize,
}

/// A scheduler stopped before it placed every measured pod.
#[derive(Clone, Copy)]
struct GaveUp {
    /// Measured pods bound by the time its process stopped.
    bound: usize,
    after: Duration,
}

/// Plain pods created at [`LATENCY_RATE`] per second after the measurement, for the latency column.
const LATENCY_PODS: usize = 100;
const LATENCY_RATE: f64 = 20.0;

async fn run(workload: &Workload, scheduler: Scheduler, plane_flags: &[String], give_up_after: Duration) -> RunResult {
    let plane = ControlPlane::start_with(&plane_flags.iter().map(String::as_str).collect::<Vec<_>>());
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(&plane.kubeconfig).unwrap(), &Default::default()).await.unwrap(),
    )
    .unwrap();
    let bound = BoundPods::watch(client.clone());
    priority_classes(&client, workload).await;
    let mut running: Option<SchedulerProcess> = None;
    let mut churns = Vec::new();
    let mut measured = Vec::new();
    let mut measured_started = None;
    let mut plane_cpu_seconds = 0.0;
    let mut gave_up = None;
    let mut node_index = 0;
    for (index, operation) in workload.operations.iter().enumerate() {
        match operation {
            Operation::CreateNodes { count, template, labels: round_robin } => {
                let template = template.clone().unwrap_or_else(base_node);
                let nodes: Vec<Node> = (0..*count)
                    .map(|offset| {
                        let number = node_index + offset;
                        let mut node = template.clone();
                        let name = format!("scheduler-perf-{number}");
                        node["metadata"]["name"] = Value::from(name.clone());
                        let labels = &mut node["metadata"]["labels"];
                        if labels.is_null() {
                            *labels = Value::Mapping(Default::default());
                        }
                        labels["kubernetes.io/hostname"] = Value::from(name);
                        if let Some((key, values)) = round_robin {
                            labels[key.as_str()] = Value::from(values[number % values.len()].clone());
                        }
                        serde_yaml::from_value(node).unwrap()
                    })
                    .collect();
                node_index += count;
                let started = Instant::now();
                create_all(Api::<Node>::all(client.clone()), nodes).await;
                wait_schedulable(&client, node_index).await;
                eprintln!("  {count} nodes created and schedulable in {:.1}s", started.elapsed().as_secs_f64());
            }
            Operation::Churn { templates, namespace, interval, mode } => {
                ensure_namespace(&client, namespace).await;
                churns.push(Churn::start(client.clone(), namespace, templates.clone(), *interval, *mode, scheduler));
            }
            Operation::CreateNamespace(name) => ensure_namespace(&client, name).await,
            Operation::CreatePodGroups { count, namespace, template } => {
                ensure_namespace(&client, namespace).await;
                let groups: Vec<PodGroup> = (0..*count).map(|index| serde_yaml::from_value(template.render(index)).unwrap()).collect();
                create_all(Api::<PodGroup>::namespaced(client.clone(), namespace), groups).await;
            }
            Operation::CreatePods { count, namespace, template, indexed, measured: is_measured } => {
                ensure_namespace(&client, namespace).await;
                let mut pods = pods_from(template, namespace, &format!("pod-{index}"), *count, scheduler);
                if let Some(indexed) = indexed {
                    // Each pod its own group (`schedulingGroup`), the rest as the template of index 0 made it.
                    for (number, pod) in pods.iter_mut().enumerate() {
                        let rendered: Pod = serde_yaml::from_value(indexed.render(number)).unwrap();
                        pod.spec.as_mut().unwrap().scheduling_group = rendered.spec.and_then(|spec| spec.scheduling_group);
                    }
                }
                let names: Vec<String> = pods.iter().map(|pod| format!("{namespace}/{}", pod.metadata.name.as_deref().unwrap())).collect();
                if *is_measured {
                    // Created with no scheduler running; then a fresh scheduler is timed placing them.
                    drop(running.take());
                    let started = Instant::now();
                    create_all(Api::<Pod>::namespaced(client.clone(), namespace), pods).await;
                    eprintln!("  {count} measured pods created in {:.1}s", started.elapsed().as_secs_f64());
                    let plane_before = plane.usage().cpu_seconds;
                    let mut process = scheduler.start(&plane, &workload.feature_gates);
                    if let Err(unbound) = bound.wait_for(&names, &mut process, scheduler, give_up_after).await {
                        eprintln!("  {}: given up on: {unbound}", scheduler.label());
                        gave_up = Some(GaveUp { bound: names.len() - unbound.count, after: give_up_after });
                    }
                    plane_cpu_seconds = plane.usage().cpu_seconds - plane_before;
                    measured_started = Some(process.started);
                    running = Some(process);
                    measured.extend(names);
                    if gave_up.is_some() {
                        break;
                    }
                } else {
                    if running.is_none() {
                        running = Some(scheduler.start(&plane, &workload.feature_gates));
                    }
                    create_all(Api::<Pod>::namespaced(client.clone(), namespace), pods).await;
                    if let Err(unbound) = bound.wait_for(&names, running.as_mut().unwrap(), scheduler, INITIAL_PODS_WAIT).await {
                        panic!("{}: {unbound}", scheduler.label());
                    }
                }
            }
        }
    }
    let mut process = running.expect("the workload creates pods");
    let usage = process.usage();
    drop(churns);

    // Latency: plain pods at a steady rate, the scheduler running (not of a scheduler given up on).
    if gave_up.is_none() {
        ensure_namespace(&client, "latency").await;
        let pods = pods_from(&base_pod(), "latency", "l", LATENCY_PODS, scheduler);
        let latency_names: Vec<String> = pods.iter().map(|pod| format!("latency/{}", pod.metadata.name.as_deref().unwrap())).collect();
        let api = Api::<Pod>::namespaced(client.clone(), "latency");
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / LATENCY_RATE));
        // A slow create delays the next ones; it does not send a burst.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for pod in pods {
            tick.tick().await;
            api.create(&PostParams::default(), &pod).await.unwrap();
        }
        if let Err(unbound) = bound.wait_for(&latency_names, &mut process, scheduler, INITIAL_PODS_WAIT).await {
            panic!("{}: {unbound}", scheduler.label());
        }
    }
    drop(process);
    if gave_up.is_some() {
        settle(&client).await;
    }

    // From the API server's record: when each pod's creation and each binding were received (the order the
    // placement check replays).
    let audit = plane.audit();
    let mut accepted: HashMap<String, SystemTime> = HashMap::new();
    let mut failed: HashMap<String, SystemTime> = HashMap::new();
    for event in audit.iter().filter(|event| event.subresource() == "binding" && event.verb() == "create") {
        let pod = format!("{}/{}", event.namespace(), event.name());
        match event.code() {
            201 => accepted.insert(pod, received(event)),
            code if code >= 500 => failed.insert(pod, received(event)),
            _ => None,
        };
    }
    // Under load the API server can answer a binding with an error (a timeout) after etcd applied it: the pod is
    // bound and no accepted binding names it. Its last failed attempt stands for its binding.
    let placements = bound.placements();
    let bound_after_error: Vec<(String, SystemTime)> =
        failed.into_iter().filter(|(pod, _)| !accepted.contains_key(pod) && placements.contains_key(pod)).collect();
    let mut bindings: Vec<(String, SystemTime)> = accepted.into_iter().chain(bound_after_error.iter().cloned()).collect();
    bindings.sort_by_key(|(_, received)| *received);
    let order: Vec<&str> = bindings.iter().map(|(name, _)| name.as_str()).collect();
    let check = check_placements(&plane, &order);
    let created_at: HashMap<String, SystemTime> = audit
        .iter()
        .filter(|event| {
            event.resource() == "pods" && event.subresource().is_empty() && event.verb() == "create" && event.namespace() == "latency" && event.code() == 201
        })
        .map(|event| (event.name().to_string(), received(event)))
        .collect();
    assert_eq!(created_at.len(), if gave_up.is_some() { 0 } else { LATENCY_PODS }, "the audit log names every pod created");
    let bindings: HashMap<String, SystemTime> = bindings.into_iter().collect();
    if let Some(gave_up) = &mut gave_up {
        // Bindings sent until the process stopped count; one in flight then may be in one record only.
        measured.retain(|name| bindings.contains_key(name) && placements.contains_key(name));
        assert!(!measured.is_empty(), "{}: stopped before it bound a measured pod", scheduler.label());
        gave_up.bound = measured.len();
    }
    let measured_times: Vec<SystemTime> = measured
        .iter()
        .map(|name| {
            *bindings.get(name).unwrap_or_else(|| {
                let attempts: Vec<u64> = audit
                    .iter()
                    .filter(|event| event.subresource() == "binding" && format!("{}/{}", event.namespace(), event.name()) == *name)
                    .map(AuditEvent::code)
                    .collect();
                panic!("no binding of {name} in the audit log (its binding requests' codes: {attempts:?}; bound: {:?})", placements.get(name))
            })
        })
        .collect();
    let first = *measured_times.iter().min().unwrap();
    let last = *measured_times.iter().max().unwrap();
    let span = last.duration_since(first).unwrap_or_default().as_secs_f64().max(0.001);
    let mut latencies: Vec<Duration> = created_at
        .iter()
        .map(|(name, created)| bindings[&format!("latency/{name}")].duration_since(*created).expect("a pod is bound after it is created"))
        .collect();
    latencies.sort();
    let percentile = |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1];
    let latency = (!latencies.is_empty()).then(|| (percentile(0.5), percentile(0.99)));

    // What the scheduler asked of the API server while it placed them, told apart by its User-Agent.
    let placing = measured_started.unwrap()..=last;
    let in_span: Vec<&AuditEvent> = audit.iter().filter(|event| placing.contains(&received(event))).collect();
    let mut requests: HashMap<String, usize> = HashMap::new();
    for event in in_span.iter().filter(|event| event.0["userAgent"].as_str().unwrap_or("").starts_with(scheduler.user_agent())) {
        // Discovery and other requests for no resource by their path.
        let resource = match event.resource() {
            "" => event.uri().split('?').next().unwrap_or_default().to_string(),
            resource => [resource, event.subresource()].into_iter().filter(|part| !part.is_empty()).collect::<Vec<_>>().join("/"),
        };
        *requests.entry(format!("{} {resource}", event.verb())).or_default() += 1;
    }
    let mut requests: Vec<(String, usize)> = requests.into_iter().collect();
    requests.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));

    // Where the measured pods went.
    let nodes = Api::<Node>::all(client.clone()).list(&Default::default()).await.unwrap().items;
    let zone_of: HashMap<String, Option<String>> = nodes
        .iter()
        .map(|node| (node.metadata.name.clone().unwrap(), node.metadata.labels.as_ref().and_then(|labels| labels.get("topology.kubernetes.io/zone").cloned())))
        .collect();
    let mut per_node: HashMap<&str, usize> = zone_of.keys().map(|name| (name.as_str(), 0)).collect();
    let mut per_zone = BTreeMap::new();
    for name in &measured {
        let node = &placements[name];
        *per_node.get_mut(node.as_str()).unwrap() += 1;
        if let Some(zone) = &zone_of[node] {
            *per_zone.entry(zone.clone()).or_default() += 1;
        }
    }
    RunResult {
        scheduler,
        pods_per_second: measured.len().saturating_sub(1).max(1) as f64 / span,
        start_to_first: first.duration_since(measured_started.unwrap()).unwrap_or_default(),
        latency,
        gave_up,
        usage,
        plane_cpu_seconds,
        per_node: (*per_node.values().min().unwrap(), *per_node.values().max().unwrap()),
        per_zone,
        check,
        requests,
        all_requests: in_span.len(),
        bound_after_error: bound_after_error.len(),
    }
}

/// Waits until the API server answers promptly again: a scheduler stopped under overload leaves requests that
/// time out for a while after it (its bindings, events and status patches), and the placement check needs every
/// node.
async fn settle(client: &kube::Client) {
    let nodes = Api::<Node>::all(client.clone());
    let started = Instant::now();
    let mut prompt_answers = 0;
    while prompt_answers < 3 {
        assert!(started.elapsed() < Duration::from_secs(300), "the API server still does not answer promptly 5 minutes after the scheduler stopped");
        let asked = Instant::now();
        let answered = tokio::time::timeout(Duration::from_secs(5), nodes.list_metadata(&kube::api::ListParams::default().limit(1))).await;
        prompt_answers = if matches!(answered, Ok(Ok(_))) && asked.elapsed() < Duration::from_secs(1) { prompt_answers + 1 } else { 0 };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("  the API server answers promptly again after {:.0}s", started.elapsed().as_secs_f64());
}

/// When the API server received the request.
fn received(event: &AuditEvent) -> SystemTime {
    let text = event.0["requestReceivedTimestamp"].as_str().unwrap_or_else(|| panic!("an audit event without requestReceivedTimestamp: {}", event.0));
    SystemTime::from(text.parse::<jiff::Timestamp>().unwrap())
}

/// What kube-scheduler's filter plugins said of the bindings.
struct Check {
    /// Each `NAMESPACE/NAME on NODE: PLUGIN: REASONS`.
    violations: Vec<String>,
    /// Refused at their place in the order, accepted in the final state (see controlplane/check.go).
    out_of_order: usize,
    /// Bound, then deleted (preemption's victims).
    gone: usize,
}

/// kube-scheduler's filter plugins on every binding, replayed in `order` (`wasp-controlplane check-placements`).
fn check_placements(plane: &ControlPlane, order: &[&str]) -> Check {
    let order_file = plane.dir.path().join("binding-order");
    std::fs::write(&order_file, order.join("\n")).unwrap();
    let output = Command::new(control_plane::binary())
        .args(["check-placements", "--kubeconfig"])
        .arg(&plane.kubeconfig)
        .arg("--order")
        .arg(&order_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().any(|line| line.starts_with("checked ")),
        "check-placements: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    // `checked N gone G violations M out-of-order K`
    let counts: Vec<usize> =
        stdout.lines().find_map(|line| line.strip_prefix("checked ")).unwrap().split_whitespace().filter_map(|word| word.parse().ok()).collect();
    assert_eq!(counts.len(), 4, "check-placements' summary: {stdout}");
    Check {
        violations: stdout.lines().filter_map(|line| line.strip_prefix("violation ")).map(str::to_string).collect(),
        out_of_order: counts[3],
        gone: counts[1],
    }
}

/// `count` pods from a scheduler_perf template, named `{prefix}-{i}`, for `scheduler`.
fn pods_from(template: &Value, namespace: &str, prefix: &str, count: usize, scheduler: Scheduler) -> Vec<Pod> {
    (0..count)
        .map(|index| {
            let mut pod = template.clone();
            pod["metadata"]["name"] = Value::from(format!("{prefix}-{index}"));
            pod["metadata"]["namespace"] = Value::from(namespace);
            if let Some(metadata) = pod["metadata"].as_mapping_mut() {
                metadata.remove("generateName");
            }
            pod["spec"]["schedulerName"] = Value::from(scheduler.profile());
            // scheduler_perf disables the Priority admission plugin and sets priorities directly; with it on, as in
            // any cluster, a pod names a PriorityClass (made by `priority_classes`).
            if let Some(priority) = pod["spec"].as_mapping_mut().and_then(|spec| spec.remove("priority")) {
                pod["spec"]["priorityClassName"] = Value::from(format!("scheduler-perf-{}", priority.as_i64().unwrap()));
            }
            serde_yaml::from_value(pod).unwrap()
        })
        .collect()
}

/// The PriorityClasses the workload's pod templates' priorities become (see `pods_from`).
async fn priority_classes(client: &kube::Client, workload: &Workload) {
    let templates = workload.operations.iter().flat_map(|operation| match operation {
        Operation::CreatePods { template, .. } => std::slice::from_ref(template),
        Operation::Churn { templates, .. } => templates.as_slice(),
        _ => &[],
    });
    let priorities: std::collections::BTreeSet<i64> = templates.filter_map(|template| template["spec"]["priority"].as_i64()).collect();
    for priority in priorities {
        let class: PriorityClass =
            serde_json::from_value(serde_json::json!({"metadata": {"name": format!("scheduler-perf-{priority}")}, "value": priority})).unwrap();
        Api::<PriorityClass>::all(client.clone()).create(&PostParams::default(), &class).await.unwrap();
    }
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("namespace {name}: {error}"),
    }
}

/// Creates `objects`, [`CREATORS`] requests at a time.
async fn create_all<K>(api: Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|object| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &object).await.map(drop) }
        })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|error| panic!("creating {}: {error}", std::any::type_name::<K>()));
}

/// Objects made (and deleted again) from templates at an interval, in the background, until dropped.
struct Churn(tokio::task::JoinHandle<()>);

impl Churn {
    fn start(client: kube::Client, namespace: &str, templates: Vec<Value>, interval: Duration, mode: ChurnMode, scheduler: Scheduler) -> Churn {
        let namespace = namespace.to_string();
        Churn(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Per template, the objects that exist (`recreate`: a slot each, deleted when its turn comes again).
            let mut slots: Vec<Vec<Option<String>>> =
                templates.iter().map(|_| vec![None; if let ChurnMode::Recreate { number } = mode { number } else { 0 }]).collect();
            for turn in 0.. {
                tick.tick().await;
                if let ChurnMode::Create { limit: Some(limit) } = mode {
                    if turn >= limit {
                        return;
                    }
                }
                for (template, slots) in templates.iter().zip(&mut slots) {
                    let (api, object) = churned(&client, &namespace, template, turn, scheduler);
                    let slot = match mode {
                        ChurnMode::Recreate { number } => Some(&mut slots[turn % number]),
                        ChurnMode::Create { .. } => None,
                    };
                    match slot {
                        Some(slot) if slot.is_some() => {
                            if let Err(error) = api.delete(&slot.take().unwrap(), &Default::default()).await {
                                eprintln!("  churn: deleting a {}: {error}", template["kind"].as_str().unwrap_or_default());
                            }
                        }
                        slot => match api.create(&PostParams::default(), &object).await {
                            Ok(created) => {
                                if let Some(slot) = slot {
                                    *slot = created.metadata.name;
                                }
                            }
                            Err(error) => eprintln!("  churn: creating a {}: {error}", template["kind"].as_str().unwrap_or_default()),
                        },
                    }
                }
            }
        }))
    }
}

/// The object of `template` for churn turn `turn`, and the API it is made through: a pod as the measured ones are
/// (for `scheduler`), a node or a Service named after the turn.
fn churned(
    client: &kube::Client,
    namespace: &str,
    template: &Value,
    turn: usize,
    scheduler: Scheduler,
) -> (Api<kube::api::DynamicObject>, kube::api::DynamicObject) {
    use kube::api::{ApiResource, DynamicObject};
    let kind = template["kind"].as_str().unwrap_or_default();
    let (resource, object) = match kind {
        "Pod" => {
            (ApiResource::erase::<Pod>(&()), serde_json::to_value(pods_from(template, namespace, &format!("churn-{turn}"), 1, scheduler).remove(0)).unwrap())
        }
        "Node" => {
            let mut node = template.clone();
            let name = format!("node-churn-{turn}");
            node["metadata"] = serde_yaml::from_str(&format!("{{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}")).unwrap();
            (ApiResource::erase::<Node>(&()), serde_json::to_value(node).unwrap())
        }
        _ => {
            let mut service = template.clone();
            service["metadata"] = serde_yaml::from_str(&format!("{{name: service-churn-{turn}, namespace: {namespace}}}")).unwrap();
            (ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()), serde_json::to_value(service).unwrap())
        }
    };
    let api = match kind {
        "Node" => Api::all_with(client.clone(), &resource),
        _ => Api::namespaced_with(client.clone(), namespace, &resource),
    };
    (api, serde_json::from_value::<DynamicObject>(object).unwrap())
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Every pod's node, as a watch of all pods sees it. The watch ends on drop (an open watch holds up the API
/// server's stop).
struct BoundPods {
    nodes: Arc<Mutex<HashMap<String, String>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for BoundPods {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl BoundPods {
    fn watch(client: kube::Client) -> BoundPods {
        let nodes: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let seen = nodes.clone();
        let watch = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(Api::<Pod>::all(client), watcher::Config::default()).default_backoff());
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                    if let Some(node) = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()) {
                        let key = format!("{}/{}", pod.metadata.namespace.unwrap_or_default(), pod.metadata.name.unwrap_or_default());
                        seen.lock().unwrap().insert(key, node);
                    }
                }
            }
        });
        BoundPods { nodes, watch }
    }

    fn placements(&self) -> HashMap<String, String> {
        self.nodes.lock().unwrap().clone()
    }

    /// Waits until every pod of `names` is bound, or `limit` passes: then says how many are not. Fails the run
    /// if the scheduler dies.
    async fn wait_for(&self, names: &[String], process: &mut SchedulerProcess, scheduler: Scheduler, limit: Duration) -> Result<(), Unbound> {
        let deadline = Instant::now() + limit;
        let mut reported = Instant::now();
        loop {
            let unbound: Vec<&String> = {
                let nodes = self.nodes.lock().unwrap();
                names.iter().filter(|name| !nodes.contains_key(*name)).collect()
            };
            if unbound.is_empty() {
                return Ok(());
            }
            process.assert_alive(scheduler);
            if Instant::now() >= deadline {
                return Err(Unbound { count: unbound.len(), of: names.len(), example: unbound[0].clone(), after: limit });
            }
            if reported.elapsed() > Duration::from_secs(10) {
                eprintln!("  {}: {} of {} pods bound", scheduler.label(), names.len() - unbound.len(), names.len());
                reported = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Pods a scheduler left unbound past a wait's limit.
struct Unbound {
    count: usize,
    of: usize,
    example: String,
    after: Duration,
}

impl std::fmt::Display for Unbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} pods still unbound after {} s, {} among them", self.count, self.of, self.after.as_secs(), self.example)
    }
}

/// The wait for pods that are not measured (the initial pods, the latency pods): scheduler_perf's.
const INITIAL_PODS_WAIT: Duration = Duration::from_secs(600);

// ---------------------------------------------------------------------------------------------------------------

fn print_table(workload: &Workload, results: &[RunResult]) {
    let reference = results.iter().find(|result| result.scheduler == Scheduler::KubeScheduler).map(|result| result.pods_per_second);
    println!(
        "  {:<16} {:>8} {:>7} {:>15} {:>9} {:>9} {:>8} {:>10} {:>13} {:>10} {:>12} {:>14}  per zone",
        "scheduler", "pods/s", "ratio", "start to first", "p50", "p99", "CPU s", "peak MiB", "plane CPU s", "violations", "out of order", "per node"
    );
    for result in results {
        let ratio = reference.map_or("-".to_string(), |reference| format!("{:.2}x", result.pods_per_second / reference));
        let zones: Vec<String> = result.per_zone.iter().map(|(zone, count)| format!("{zone}={count}")).collect();
        let milliseconds = |latency: fn((Duration, Duration)) -> Duration| {
            result.latency.map_or("-".to_string(), |pair| format!("{:.0}ms", latency(pair).as_secs_f64() * 1000.0))
        };
        println!(
            "  {:<16} {:>8} {:>7} {:>14.1}s {:>9} {:>9} {:>8.1} {:>10.0} {:>13.1} {:>10} {:>12} {:>14}  {}",
            result.scheduler.label(),
            format!("{:.0}{}", result.pods_per_second, if result.gave_up.is_some() { "*" } else { "" }),
            ratio,
            result.start_to_first.as_secs_f64(),
            milliseconds(|(p50, _)| p50),
            milliseconds(|(_, p99)| p99),
            result.usage.cpu_seconds,
            result.usage.peak_mib,
            result.plane_cpu_seconds,
            result.check.violations.len(),
            result.check.out_of_order,
            format!("{}-{}", result.per_node.0, result.per_node.1),
            zones.join(" "),
        );
    }
    println!("  requests while placing the measured pods (the API server's audit log, by User-Agent):");
    for result in results {
        let total: usize = result.requests.iter().map(|(_, count)| count).sum();
        let most: Vec<String> = result.requests.iter().take(5).map(|(request, count)| format!("{request} {count}")).collect();
        println!("    {:<16} {total:>6} of {:>7} ({})", result.scheduler.label(), result.all_requests, most.join(", "));
    }
    let rate = |scheduler: Scheduler| results.iter().find(|result| result.scheduler == scheduler).map(|result| result.pods_per_second);
    if let (Some(wasm), Some(native)) = (rate(Scheduler::Wasp), rate(Scheduler::WaspNative)) {
        println!("  wasp's WASM at {:.2}x its native build's pods/s (target: 0.8x)", wasm / native);
    }
    println!(
        "  {} measured pods, a backlog created before the scheduler starts; scheduler_perf's threshold for {}: {} pods/s (pods created while scheduling, on Kubernetes' CI machines: for orientation only)",
        workload.measured_pods(),
        workload.variant,
        workload.threshold.map_or("none".to_string(), |threshold| threshold.to_string())
    );
}
