//! The descheduler and wasp's rescheduler side by side on one real control plane, in one run (issue "Side by
//! side", rescheduling).
//!
//! `cargo bench -p wasp --bench rescheduling_side_by_side [-- --interval SECONDS] [--case NAME]...`, after
//! `scripts/build-policies.sh` and `scripts/build-controlplane.sh` (which builds the descheduler's command,
//! `sigs.k8s.io/descheduler` v0.36.0, from the control plane's Go modules).
//!
//! Each case builds one cluster state (nodes, Deployments, and the change that leaves them badly placed: nodes
//! added empty, a taint, a budget at its limit; kube-scheduler spreading pods, or packing them for
//! HighNodeUtilization), then runs one tool for ten intervals: the descheduler (`--descheduling-interval`, the
//! case's strategy as a v1alpha2 profile, its defaults otherwise) or `wasp run` (the same strategy as its policy,
//! the rescheduler's defaults otherwise, `fitProfile: wasp` since kube-scheduler places these pods), each on a
//! fresh control plane. kube-scheduler places every pod and every replacement in both runs. What each tool did is
//! read from the API server's audit log: evictions (201) and refusals (429: a PodDisruptionBudget), per workload.
//! Printed per tool: evictions, evictions of replacements (pods created after the tool started: the tool undoing
//! its own move, a loop as in descheduler issues #1695 and #424), workloads evicted more than once,
//! refusals, pods Pending at the end, the spread of the nodes' CPU requests before and after, and the tool's CPU
//! seconds per interval.

#[allow(dead_code)] // the benchmark uses the control plane, not every helper the tests use
#[path = "../../tests/common/control_plane.rs"]
mod control_plane;

use control_plane::{wait_for, ControlPlane};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const INTERVALS: u32 = 10;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn main() {
    let mut interval_seconds: u64 = 10;
    let mut chosen: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--interval" => {
                interval_seconds = args.next().and_then(|value| value.parse().ok()).filter(|seconds| *seconds > 0).expect("--interval takes whole seconds")
            }
            "--case" => chosen.push(args.next().expect("--case takes a case name")),
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => {
                panic!("unknown argument {other:?}: --interval SECONDS, --case NAME (one of {:?})", CASES.iter().map(|case| case.name).collect::<Vec<_>>())
            }
        }
    }
    let cases: Vec<&Case> = if chosen.is_empty() {
        CASES.iter().collect()
    } else {
        chosen.iter().map(|name| CASES.iter().find(|case| case.name == name).unwrap_or_else(|| panic!("no case {name:?}"))).collect()
    };
    let interval = Duration::from_secs(interval_seconds);
    println!("{INTERVALS} intervals of {interval_seconds} s per tool; kube-scheduler places every pod");
    let (mut pending, mut untouched) = (Vec::new(), Vec::new());
    for case in cases {
        println!("\n{}: {}", case.name, case.describe);
        let runs = [run(case, Tool::Descheduler, interval), run(case, Tool::Wasp, interval)];
        print_table(&runs);
        pending.extend(runs.iter().filter(|run| run.pending > 0).map(|run| format!("{} ({})", case.name, run.tool.label())));
        // The harness works only if the state it built is one the descheduler acts on (an eviction, or one a
        // budget refused).
        if runs[0].evictions + runs[0].refused == 0 {
            untouched.push(case.name);
        }
    }
    assert!(pending.is_empty(), "pods left Pending after an eviction: {pending:?}");
    assert!(untouched.is_empty(), "cases the descheduler did not act on: {untouched:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// The cases.

/// A Deployment: name, replicas, CPU request per pod (millicores), more of its pod spec (YAML at the spec's
/// indentation, or "").
struct Workload(&'static str, u32, u32, &'static str);

/// What leaves the placed pods badly placed, besides the later node groups becoming schedulable.
#[derive(PartialEq)]
enum Change {
    /// Nothing more: the later groups join empty.
    NodesJoin,
    /// A NoSchedule taint the pods do not tolerate, on the first node.
    TaintFirstNode,
    /// A bare pod labelled `app: noisy` bound, past the scheduler (`nodeName`), to each of the first `n` nodes
    /// (by name) that run a workload's pod.
    NoisyNeighbours(usize),
    /// A PodDisruptionBudget that allows no disruption (`minAvailable` every replica) over each workload.
    BudgetAtItsLimit,
}

/// Where the workloads' pods are first placed.
#[derive(PartialEq)]
enum Placement {
    /// On the first node group (the others are cordoned meanwhile).
    FirstGroup,
    /// Workload i on the i-th node by name (every other node cordoned meanwhile), one workload at a time.
    OneWorkloadPerNode,
}

/// Refuses a node that runs an `app: noisy` pod or another `app: front` pod (so each run starts from one per node).
const APART_FROM_NOISY: &str = "      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchExpressions: [{key: app, operator: In, values: [noisy, front]}]}, topologyKey: kubernetes.io/hostname}]}}\n";
/// At most one more pod in one zone than in another, counting only nodes whose taints the pod tolerates.
const SPREAD_OVER_ZONES: &str = "      topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor, labelSelector: {matchLabels: {app: spread}}}]\n";

/// A cluster state and the one strategy that should fix it.
struct Case {
    name: &'static str,
    describe: &'static str,
    /// Node groups: name prefix, count, CPU each, zones (round robin).
    nodes: &'static [(&'static str, usize, &'static str, &'static [&'static str])],
    workloads: &'static [Workload],
    placement: Placement,
    /// kube-scheduler's NodeResourcesFit scoring (wasp-controlplane's `--kube-scheduler-scoring`).
    scoring: &'static str,
    change: Change,
    /// The descheduler's plugin, its arguments, and its extension point.
    descheduler: (&'static str, &'static str, &'static str),
    /// wasp's strategy (its defaults are the descheduler's defaults).
    wasp: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "LowNodeUtilization",
        describe: "two nodes at 62% of CPU, four new empty ones; under 20% is underutilized, over 50% overutilized",
        nodes: &[("full", 2, "4", ZONES), ("empty", 4, "4", ZONES)],
        workloads: &[Workload("web", 10, 500, "")],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::NodesJoin,
        descheduler: ("LowNodeUtilization", "{thresholds: {cpu: 20, memory: 20, pods: 20}, targetThresholds: {cpu: 50, memory: 50, pods: 50}}", "balance"),
        wasp: "low-node-utilization",
    },
    Case {
        name: "RemoveDuplicates",
        describe: "six replicas on one node, five new empty nodes",
        nodes: &[("full", 1, "4", ZONES), ("empty", 5, "4", ZONES)],
        workloads: &[Workload("dup", 6, 100, "")],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::NodesJoin,
        descheduler: ("RemoveDuplicates", "{}", "balance"),
        wasp: "remove-duplicates",
    },
    Case {
        name: "RemovePodsViolatingNodeTaints",
        describe: "a NoSchedule taint the pods do not tolerate put on a node that runs them",
        nodes: &[("full", 1, "4", ZONES), ("empty", 3, "4", ZONES)],
        workloads: &[Workload("tainted", 6, 100, "")],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::TaintFirstNode,
        descheduler: ("RemovePodsViolatingNodeTaints", "{}", "deschedule"),
        wasp: "remove-pods-violating-node-taints",
    },
    Case {
        name: "TooBigToMove",
        describe: "the loop the descheduler's users report: 2.6-CPU pods on two 4-CPU nodes (65%), four 2-CPU nodes underutilized but too small for them",
        nodes: &[("big", 2, "4", ZONES), ("small", 4, "2", ZONES)],
        workloads: &[Workload("big", 2, 2600, "")],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::NodesJoin,
        descheduler: ("LowNodeUtilization", "{thresholds: {cpu: 20, memory: 20, pods: 20}, targetThresholds: {cpu: 50, memory: 50, pods: 50}}", "balance"),
        wasp: "low-node-utilization",
    },
    Case {
        name: "RemovePodsViolatingTopologySpreadConstraint",
        describe: "six pods spread over zones (maxSkew 1) placed while zone-b's nodes were cordoned: 6 to 0 once they join",
        nodes: &[("zone-a", 2, "4", &["zone-a"]), ("zone-b", 2, "4", &["zone-b"])],
        workloads: &[Workload("spread", 6, 100, SPREAD_OVER_ZONES)],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::NodesJoin,
        descheduler: ("RemovePodsViolatingTopologySpreadConstraint", "{}", "balance"),
        wasp: "remove-pods-violating-topology-spread-constraint",
    },
    Case {
        name: "RemovePodsViolatingInterPodAntiAffinity",
        describe: "four pods that avoid `app: noisy` and each other on six nodes; then a noisy bare pod bound past the scheduler beside two of them",
        nodes: &[("node", 6, "4", ZONES)],
        workloads: &[Workload("front", 4, 100, APART_FROM_NOISY)],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::NoisyNeighbours(2),
        descheduler: ("RemovePodsViolatingInterPodAntiAffinity", "{}", "deschedule"),
        wasp: "remove-pods-violating-inter-pod-anti-affinity",
    },
    Case {
        name: "HighNodeUtilization",
        describe: "kube-scheduler packing (MostAllocated); two nodes at 60%, four at 12.5% (under 20% is underutilized): empty them for a cluster autoscaler",
        nodes: &[("packed", 2, "4", ZONES), ("thin", 4, "4", ZONES)],
        workloads: THIN_AND_PACKED,
        placement: Placement::OneWorkloadPerNode,
        scoring: "MostAllocated",
        change: Change::NodesJoin,
        descheduler: ("HighNodeUtilization", "{thresholds: {cpu: 20, memory: 20, pods: 20}}", "balance"),
        wasp: "high-node-utilization",
    },
    Case {
        name: "RemoveDuplicatesUnderABudget",
        describe: "RemoveDuplicates' state with a PodDisruptionBudget at its limit (minAvailable: 6 of 6): nothing may move",
        nodes: &[("full", 1, "4", ZONES), ("empty", 5, "4", ZONES)],
        workloads: &[Workload("dup", 6, 100, "")],
        placement: Placement::FirstGroup,
        scoring: "LeastAllocated",
        change: Change::BudgetAtItsLimit,
        descheduler: ("RemoveDuplicates", "{}", "balance"),
        wasp: "remove-duplicates",
    },
];

const ZONES: &[&str] = &["zone-a", "zone-b"];

/// Two nodes at 60% and four with one 0.5-CPU pod each (12.5%), for a bin-packing scheduler.
const THIN_AND_PACKED: &[Workload] = &[
    Workload("base-a", 2, 1200, ""),
    Workload("base-b", 2, 1200, ""),
    Workload("thin-0", 1, 500, ""),
    Workload("thin-1", 1, 500, ""),
    Workload("thin-2", 1, 500, ""),
    Workload("thin-3", 1, 500, ""),
];

// ---------------------------------------------------------------------------------------------------------------
// The tools.

#[derive(Clone, Copy, PartialEq)]
enum Tool {
    Descheduler,
    Wasp,
}

impl Tool {
    fn label(self) -> &'static str {
        match self {
            Tool::Descheduler => "descheduler",
            Tool::Wasp => "wasp",
        }
    }

    fn start(self, case: &Case, plane: &ControlPlane, interval: Duration) -> Child {
        let log = plane.dir.path().join(format!("{}.log", self.label()));
        match self {
            Tool::Descheduler => {
                let (plugin, args, point) = case.descheduler;
                let policy = plane.dir.path().join("descheduler-policy.yaml");
                std::fs::write(
                    &policy,
                    format!("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: bench\n  pluginConfig:\n  - {{name: DefaultEvictor, args: {{}}}}\n  - {{name: {plugin}, args: {args}}}\n  plugins:\n    {point}: {{enabled: [{plugin}]}}\n"),
                )
                .unwrap();
                let binary = repo_root().join("target/controlplane/descheduler");
                assert!(binary.exists(), "{} is missing: scripts/build-controlplane.sh builds it", binary.display());
                Command::new(binary)
                    .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
                    .arg(format!("--policy-config-file={}", policy.display()))
                    .arg(format!("--descheduling-interval={}s", interval.as_secs()))
                    .args(["--secure-port=0", "--leader-elect=false", "--v=2"])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .expect("the descheduler runs")
            }
            Tool::Wasp => {
                let config = plane.dir.path().join("wasp-config.yaml");
                std::fs::write(
                    &config,
                    format!(
                        "{}rescheduler:\n  interval: {}s\n  strategies: [{{policy: {}}}]\n  fitProfile: wasp\n",
                        control_plane::built_in_config(),
                        interval.as_secs(),
                        case.wasp
                    ),
                )
                .unwrap();
                plane.run_wasp(&config, &log)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// One run.

struct Run {
    tool: Tool,
    evictions: usize,
    /// Evictions of pods that replaced an evicted one: the tool undoing its own move (a loop).
    replacements: usize,
    /// Evictions per workload (its ReplicaSet), for the ones evicted more than once.
    repeated: BTreeMap<String, usize>,
    refused: usize,
    pending: usize,
    /// Nodes' CPU requests in % of allocatable: (lowest, highest, standard deviation), before and after.
    before: (f64, f64, f64),
    after: (f64, f64, f64),
    cpu_per_interval: f64,
}

fn run(case: &Case, tool: Tool, interval: Duration) -> Run {
    let plane = ControlPlane::start_with(&["--kube-scheduler", &format!("--kube-scheduler-scoring={}", case.scoring)]);
    for (prefix, count, cpu, zones) in case.nodes {
        plane.create_nodes(prefix, *count, zones, cpu, "16Gi");
    }
    let (first, _, _, _) = case.nodes[0];
    let nodes = node_names(&plane);
    let create = |Workload(name, count, millis, more): &Workload| {
        let created = plane.kubectl_input(
            &["create", "-f", "-"],
            &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  replicas: {count}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: {millis}m, memory: 64Mi}}}}}}]\n{more}"),
        );
        assert!(created.ok, "{}: {}", case.name, created.stderr);
    };
    let mut replicas = 0;
    let running =
        |replicas: u32| wait_for(&format!("{}: {replicas} pods Running", case.name), Duration::from_secs(120), || running_pods(&plane) == replicas as usize);
    match case.placement {
        // Only the first group takes the workloads' pods: the others are cordoned until they are placed.
        Placement::FirstGroup => {
            let later: Vec<&String> = nodes.iter().filter(|name| !name.starts_with(&format!("{first}-"))).collect();
            for node in &later {
                plane.must(&["cordon", node]);
            }
            for workload in case.workloads {
                replicas += workload.1;
                create(workload);
            }
            running(replicas);
            for node in &later {
                plane.must(&["uncordon", node]);
            }
        }
        Placement::OneWorkloadPerNode => {
            assert_eq!(case.workloads.len(), nodes.len(), "{}: a workload per node", case.name);
            for node in &nodes {
                plane.must(&["cordon", node]);
            }
            for (workload, node) in case.workloads.iter().zip(&nodes) {
                plane.must(&["uncordon", node]);
                replicas += workload.1;
                create(workload);
                running(replicas);
                plane.must(&["cordon", node]);
            }
            for node in &nodes {
                plane.must(&["uncordon", node]);
            }
        }
    }
    match case.change {
        Change::NodesJoin => {}
        Change::TaintFirstNode => {
            plane.must(&["taint", "node", &format!("{first}-0"), "bench/maintenance=true:NoSchedule"]);
        }
        Change::NoisyNeighbours(nodes) => {
            let occupied: std::collections::BTreeSet<String> =
                pods(&plane).iter().filter_map(|pod| pod["spec"]["nodeName"].as_str().map(str::to_string)).collect();
            for (index, node) in occupied.iter().take(nodes).enumerate() {
                let created = plane.kubectl_input(
                    &["create", "-f", "-"],
                    &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: noisy-{index}, namespace: default, labels: {{app: noisy}}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: app, image: nginx}}]\n"),
                );
                assert!(created.ok, "{}: {}", case.name, created.stderr);
            }
        }
        Change::BudgetAtItsLimit => {
            for Workload(name, count, _, _) in case.workloads {
                let created = plane.kubectl_input(&["create", "-f", "-"], &format!("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  minAvailable: {count}\n  selector: {{matchLabels: {{app: {name}}}}}\n"));
                assert!(created.ok, "{}: {}", case.name, created.stderr);
                // The disruption controller's count, which the Eviction API judges by.
                wait_for(&format!("{}: the budget {name} counted", case.name), Duration::from_secs(60), || {
                    plane.get_json(&["get", "pdb", name, "-n", "default"])["status"]["currentHealthy"].as_u64() == Some(u64::from(*count))
                });
            }
        }
    }
    let before = spread(&plane);
    let initial: std::collections::HashSet<String> = pods(&plane).iter().map(|pod| pod["metadata"]["name"].as_str().unwrap().to_string()).collect();

    let mut process = tool.start(case, &plane, interval);
    println!("  {}: {INTERVALS} intervals", tool.label());
    std::thread::sleep(interval * INTERVALS);
    if let Ok(Some(status)) = process.try_wait() {
        let log = std::fs::read_to_string(plane.dir.path().join(format!("{}.log", tool.label()))).unwrap_or_default();
        panic!("{} exited ({status}):\n{log}", tool.label());
    }
    let usage = control_plane::process_usage(process.id());
    control_plane::stop(&mut process, Duration::from_secs(10));
    // The last evictions' replacements are placed (or stay Pending) within seconds.
    wait_for(&format!("{}: {replicas} pods Running or Pending", case.name), Duration::from_secs(60), || {
        pods(&plane).iter().filter(|pod| pod["metadata"]["deletionTimestamp"].is_null()).count() == replicas as usize
    });
    let _ = wait_until(Duration::from_secs(15), || running_pods(&plane) == replicas as usize);

    let mut per_workload: BTreeMap<String, usize> = BTreeMap::new();
    let (mut evictions, mut refused, mut replacements) = (0, 0, 0);
    for event in plane.audit().iter().filter(|event| event.resource() == "pods" && event.subresource() == "eviction" && event.verb() == "create") {
        match event.code() {
            201 => {
                evictions += 1;
                replacements += usize::from(!initial.contains(event.name()));
                // A Deployment's pod is named after its ReplicaSet: NAME-HASH-SUFFIX.
                let workload = event.name().rsplit_once('-').map_or(event.name(), |(replica_set, _)| replica_set).to_string();
                *per_workload.entry(workload).or_default() += 1;
            }
            429 => refused += 1,
            _ => {}
        }
    }
    let pending = pods(&plane).iter().filter(|pod| pod["spec"]["nodeName"].is_null() && pod["metadata"]["deletionTimestamp"].is_null()).count();
    Run {
        tool,
        evictions,
        replacements,
        repeated: per_workload.into_iter().filter(|(_, count)| *count > 1).collect(),
        refused,
        pending,
        before,
        after: spread(&plane),
        cpu_per_interval: usage.cpu_seconds / f64::from(INTERVALS),
    }
}

/// Polls `condition` until it holds or `patience` runs out; whether it held.
fn wait_until(patience: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + patience;
    while !condition() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    true
}

fn node_names(plane: &ControlPlane) -> Vec<String> {
    plane.get_json(&["get", "nodes"])["items"].as_array().unwrap().iter().map(|node| node["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

/// The workloads' pods (not the noisy neighbours).
fn pods(plane: &ControlPlane) -> Vec<Value> {
    plane.get_json(&["get", "pods", "-n", "default", "-l", "app!=noisy"])["items"].as_array().unwrap().clone()
}

fn running_pods(plane: &ControlPlane) -> usize {
    pods(plane).iter().filter(|pod| pod["status"]["phase"] == "Running" && pod["metadata"]["deletionTimestamp"].is_null()).count()
}

/// Each node's CPU requests in % of its allocatable CPU: (lowest, highest, standard deviation).
fn spread(plane: &ControlPlane) -> (f64, f64, f64) {
    let millis =
        |text: &str| -> f64 { text.strip_suffix('m').map_or_else(|| text.parse::<f64>().unwrap_or(0.0) * 1000.0, |millis| millis.parse().unwrap_or(0.0)) };
    let mut requested: BTreeMap<String, f64> = BTreeMap::new();
    for pod in pods(plane).iter().filter(|pod| pod["metadata"]["deletionTimestamp"].is_null()) {
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            let cpu: f64 = pod["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|container| container["resources"]["requests"]["cpu"].as_str().map_or(0.0, millis))
                .sum();
            *requested.entry(node.to_string()).or_default() += cpu;
        }
    }
    let percents: Vec<f64> = plane.get_json(&["get", "nodes"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            100.0 * requested.get(node["metadata"]["name"].as_str().unwrap()).copied().unwrap_or(0.0)
                / millis(node["status"]["allocatable"]["cpu"].as_str().unwrap())
        })
        .collect();
    let mean = percents.iter().sum::<f64>() / percents.len() as f64;
    let deviation = (percents.iter().map(|percent| (percent - mean).powi(2)).sum::<f64>() / percents.len() as f64).sqrt();
    (percents.iter().copied().fold(f64::MAX, f64::min), percents.iter().copied().fold(0.0, f64::max), deviation)
}

fn print_table(runs: &[Run]) {
    println!(
        "  {:<12} {:>9} {:>13} {:>22} {:>8} {:>8} {:>22} {:>22} {:>12}",
        "tool", "evictions", "replacements", "workloads evicted 2x+", "refused", "pending", "CPU % before (sd)", "CPU % after (sd)", "CPU s/run"
    );
    let shown = |(low, high, deviation): (f64, f64, f64)| format!("{low:.0}-{high:.0} ({deviation:.1})");
    for run in runs {
        let repeated = if run.repeated.is_empty() {
            "0".to_string()
        } else {
            run.repeated.iter().map(|(workload, count)| format!("{workload} x{count}")).collect::<Vec<_>>().join(", ")
        };
        println!(
            "  {:<12} {:>9} {:>13} {:>22} {:>8} {:>8} {:>22} {:>22} {:>12.3}",
            run.tool.label(),
            run.evictions,
            run.replacements,
            repeated,
            run.refused,
            run.pending,
            shown(run.before),
            shown(run.after),
            run.cpu_per_interval
        );
    }
}
