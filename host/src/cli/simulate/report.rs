//! The text report of `wasp simulate`: the placement (every node's pods, or a summary past 20 nodes), claims and
//! their zones, the timeline (each scenario event and its effect), evictions, replica changes, the Autoscalers'
//! samples, every node's CPU and memory before and after, and what still waits and why. Nodes read in natural
//! order (worker-2 before worker-10).

use super::timeline::{clock_time, AutoscalerSample, Change, Happening, Move};
use crate::cluster::ClusterState;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;
use wasp_sim::scenario::TimedEvent;

/// Names in the order people read them: runs of digits compare as numbers, so `worker-2` comes before
/// `worker-10`.
fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn runs(text: &str) -> impl Iterator<Item = &str> {
        let mut rest = text;
        std::iter::from_fn(move || {
            let first = rest.chars().next()?;
            let end = rest.find(|c: char| c.is_ascii_digit() != first.is_ascii_digit()).unwrap_or(rest.len());
            let (run, tail) = rest.split_at(end);
            rest = tail;
            Some(run)
        })
    }
    let key = |run: &str| match run.bytes().all(|byte| byte.is_ascii_digit()) {
        // A number: fewer significant digits first, then digit by digit.
        true => (0, run.trim_start_matches('0').len(), run.trim_start_matches('0').to_string()),
        false => (1, 0, run.to_string()),
    };
    runs(a).map(key).cmp(runs(b).map(key)).then_with(|| a.cmp(b))
}

/// Above this many nodes, the report summarizes instead of listing every node.
pub const LISTED_NODES: usize = 20;

/// Names shown per line of a timeline entry before "and N more".
const NAMES_SHOWN: usize = 5;

/// One node's load as the host sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    pub name: String,
    pub zone: String,
    pub pods: usize,
    /// Requested, in percent of allocatable.
    pub cpu: f64,
    pub memory: f64,
}

/// Every node's load, in natural order.
pub fn node_loads(cluster: &ClusterState) -> Vec<NodeLoad> {
    let share = |used: u64, total: u64| if total == 0 { 0.0 } else { used as f64 * 100.0 / total as f64 };
    let mut loads: Vec<NodeLoad> = cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| {
            let (node, usage) = cluster.node(id)?;
            let zone = node.labels.iter().find(|(key, _)| key == "topology.kubernetes.io/zone").map_or("-", |(_, zone)| zone.as_str());
            Some(NodeLoad {
                name: node.name.clone(),
                zone: zone.to_string(),
                pods: cluster.pods_on(&node.name).filter(|pod| !pod.terminating).count(),
                cpu: share(usage.requested.cpu_millis, node.allocatable.cpu_millis),
                memory: share(usage.requested.memory_bytes, node.allocatable.memory_bytes),
            })
        })
        .collect();
    loads.sort_by(|a, b| natural_order(&a.name, &b.name));
    loads
}

/// Standard deviation of the nodes' requested CPU in percent: lower is more even.
pub fn cpu_spread(loads: &[NodeLoad]) -> f64 {
    if loads.is_empty() {
        return 0.0;
    }
    let mean = loads.iter().map(|load| load.cpu).sum::<f64>() / loads.len() as f64;
    (loads.iter().map(|load| (load.cpu - mean).powi(2)).sum::<f64>() / loads.len() as f64).sqrt()
}

fn quantiles(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let at = |share: f64| values.get(((values.len().max(1) - 1) as f64 * share).round() as usize).copied().unwrap_or(0.0);
    format!("{:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1}", at(0.0), at(0.1), at(0.5), at(0.9), at(1.0))
}

/// Pods and requested CPU and memory per node as distributions, per zone, and the least and most loaded nodes:
/// readable at 5000 nodes, where a listing is not.
pub fn summary(loads: &[NodeLoad]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} nodes (--full lists each)", loads.len());
    let _ = writeln!(out, "{:<22} {:>7} {:>7} {:>7} {:>7} {:>7}", "per node", "min", "p10", "p50", "p90", "max");
    let _ = writeln!(out, "{:<22} {}", "pods", quantiles(loads.iter().map(|load| load.pods as f64).collect()));
    let _ = writeln!(out, "{:<22} {}", "requested cpu %", quantiles(loads.iter().map(|load| load.cpu).collect()));
    let _ = writeln!(out, "{:<22} {}", "requested memory %", quantiles(loads.iter().map(|load| load.memory).collect()));
    let mut zones: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
    for load in loads {
        let zone = zones.entry(load.zone.as_str()).or_default();
        zone.0 += 1;
        zone.1 += load.pods;
        zone.2 += load.cpu;
    }
    let _ = write!(out, "\n{:<12} {:>6} {:>7} {:>15}\n", "ZONE", "NODES", "PODS", "MEAN CPU REQ %");
    for (zone, (nodes, pods, cpu)) in &zones {
        let _ = writeln!(out, "{zone:<12} {nodes:>6} {pods:>7} {:>15.1}", cpu / *nodes as f64);
    }
    let mut by_cpu: Vec<&NodeLoad> = loads.iter().collect();
    by_cpu.sort_by(|a, b| a.cpu.total_cmp(&b.cpu).then_with(|| natural_order(&a.name, &b.name)));
    let line = |load: &NodeLoad| format!("  {:<16} {:>4} pods  cpu {:>5.1}%  memory {:>5.1}%\n", load.name, load.pods, load.cpu, load.memory);
    out.push_str("\nleast loaded (requested cpu):\n");
    by_cpu.iter().take(3).for_each(|load| out.push_str(&line(load)));
    out.push_str("most loaded:\n");
    by_cpu.iter().rev().take(3).for_each(|load| out.push_str(&line(load)));
    out
}

/// Every node's pods by name (or the summary past [`LISTED_NODES`]), the claims, and per profile how many nodes
/// its pods occupy: where spreading and bin-packing profiles differ.
pub async fn placement(client: &Client, loads: &[NodeLoad], profiles: &[String], full: bool) -> anyhow::Result<String> {
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?.items;
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let mut per_node: BTreeMap<String, Vec<String>> = nodes.iter().map(|node| (node.metadata.name.clone().unwrap_or_default(), Vec::new())).collect();
    for pod in pods.iter().filter(|pod| pod.metadata.deletion_timestamp.is_none()) {
        if let Some(node) = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()) {
            per_node.entry(node).or_default().push(pod.metadata.name.clone().unwrap_or_default());
        }
    }
    let mut out = String::new();
    if full || per_node.len() <= LISTED_NODES {
        let _ = writeln!(out, "{:<12} {:>4}  PODS", "NODE", "N");
        let mut rows: Vec<(&String, &Vec<String>)> = per_node.iter().collect();
        rows.sort_by(|(a, _), (b, _)| natural_order(a, b));
        for (node, names) in rows {
            let mut names = names.clone();
            names.sort_by(|a, b| natural_order(a, b));
            let _ = writeln!(out, "{node:<12} {:>4}  {}", names.len(), names.join(" "));
        }
    } else {
        out.push_str(&summary(loads));
    }
    out.push_str(&claims(client, &pods, &nodes).await?);
    out.push('\n');
    for profile in profiles {
        let placed: Vec<&str> = pods
            .iter()
            .filter_map(|pod| pod.spec.as_ref())
            .filter(|spec| spec.scheduler_name.as_deref() == Some(profile.as_str()))
            .filter_map(|spec| spec.node_name.as_deref())
            .collect();
        let occupied: std::collections::BTreeSet<&str> = placed.iter().copied().collect();
        let _ = writeln!(out, "profile {profile}: {} pods on {} of {} nodes", placed.len(), occupied.len(), per_node.len());
    }
    Ok(out)
}

/// Each claim a pod uses, with its volume's zone and the zone of the pod's node: where volume topology shows.
/// Empty when no pod has claims.
async fn claims(client: &Client, pods: &[Pod], nodes: &[Node]) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    const ZONE: &str = "topology.kubernetes.io/zone";
    let uses: Vec<(&Pod, &str)> = pods
        .iter()
        .flat_map(|pod| {
            pod.spec
                .iter()
                .flat_map(|spec| spec.volumes.iter().flatten())
                .filter_map(move |volume| Some((pod, volume.persistent_volume_claim.as_ref()?.claim_name.as_str())))
        })
        .collect();
    if uses.is_empty() {
        return Ok(String::new());
    }
    let claims = Api::<PersistentVolumeClaim>::all(client.clone()).list(&ListParams::default()).await?.items;
    let volumes = Api::<PersistentVolume>::all(client.clone()).list(&ListParams::default()).await?.items;
    let node_zone =
        |name: &str| nodes.iter().find(|node| node.metadata.name.as_deref() == Some(name)).and_then(|node| node.metadata.labels.as_ref()?.get(ZONE).cloned());
    let volume_zone = |name: &str| {
        let volume = volumes.iter().find(|volume| volume.metadata.name.as_deref() == Some(name))?;
        let terms = &volume.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
        let expression = terms.iter().flat_map(|term| term.match_expressions.iter().flatten()).find(|expression| expression.key == ZONE)?;
        Some(expression.values.as_ref()?.join(","))
    };
    let mut out = format!("\n{:<24} {:<8} {:<12} {:<24} {:<12} {}\n", "CLAIM", "STATUS", "VOLUME ZONE", "POD", "NODE", "NODE ZONE");
    for (pod, name) in uses {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let claim = claims.iter().find(|claim| claim.metadata.name.as_deref() == Some(name) && claim.metadata.namespace.as_deref() == Some(namespace));
        let status = claim.and_then(|claim| claim.status.as_ref()?.phase.clone()).unwrap_or_else(|| "Missing".into());
        let zone = claim.and_then(|claim| claim.spec.as_ref()?.volume_name.as_deref()).and_then(volume_zone).unwrap_or_else(|| "-".into());
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        let node_zone = node.as_deref().and_then(node_zone).unwrap_or_else(|| "-".into());
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let _ = writeln!(out, "{name:<24} {status:<8} {zone:<12} {pod_name:<24} {:<12} {node_zone}", node.as_deref().unwrap_or("-"));
    }
    Ok(out)
}

/// `a, b, c, d, e and 7 more`.
fn names(list: &[String]) -> String {
    let shown = list.iter().take(NAMES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    match list.len().saturating_sub(NAMES_SHOWN) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// What the happenings between two moments amount to, a line each: pods that left which nodes, pods bound,
/// pods left waiting (by message), replica changes and rescheduling runs.
fn effect(happenings: &[&Happening]) -> Vec<String> {
    let mut left: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut bound: Vec<String> = Vec::new();
    let mut waiting: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut lines = Vec::new();
    for happening in happenings {
        match &happening.change {
            Change::Left { pod, node } => left.entry(node.as_str()).or_default().push(pod.clone()),
            Change::Bound { pod, node } => bound.push(format!("{pod} on {node}")),
            Change::Waiting { pod, message } => waiting.entry(message.as_str()).or_default().push(pod.clone()),
            Change::Replicas { workload, from, to, by } => lines.push(format!("{workload}: {from} -> {to} replicas ({by})")),
            Change::Rescheduled { summary } => lines.push(format!("rescheduler: {summary}")),
        }
    }
    let mut nodes: Vec<(&&str, &Vec<String>)> = left.iter().collect();
    nodes.sort_by(|(a, _), (b, _)| natural_order(a, b));
    for (node, pods) in nodes {
        lines.push(format!("{} left {node}: {}", plural(pods.len(), "pod"), names(pods)));
    }
    if !bound.is_empty() {
        lines.push(format!("{} bound: {}", plural(bound.len(), "pod"), names(&bound)));
    }
    for (message, pods) in waiting {
        lines.push(format!("{} waited: {} ({message})", plural(pods.len(), "pod"), names(&pods)));
    }
    lines
}

fn plural(count: usize, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}

/// One stretch of the timeline: a scenario event (none for what came before the first) and what followed it until
/// the next one, a line each.
pub struct Stretch {
    pub at: Option<Duration>,
    pub event: String,
    pub effect: Vec<String>,
}

/// The timeline cut at each scenario event; what happened before the first event (the loops at work on the placed
/// cluster) comes first, when anything did. Events at the same time share what followed them (told under the last).
pub fn stretches(events: &[TimedEvent], happenings: &[Happening]) -> Vec<Stretch> {
    let mut starts: Vec<(Duration, String)> = events.iter().map(|event| (event.at, event.action.to_string())).collect();
    starts.sort_by_key(|(at, _)| *at);
    let first = starts.first().map_or(Duration::MAX, |(at, _)| *at);
    let mut stretches = Vec::new();
    let before: Vec<&Happening> = happenings.iter().filter(|happening| happening.at < first).collect();
    if !before.is_empty() {
        stretches.push(Stretch { at: None, event: "(before any event)".into(), effect: effect(&before) });
    }
    for (index, (at, action)) in starts.iter().enumerate() {
        let until = starts.get(index + 1).map_or(Duration::MAX, |(next, _)| *next);
        let after: Vec<&Happening> = happenings.iter().filter(|happening| happening.at >= *at && happening.at < until).collect();
        let mut effect = effect(&after);
        if effect.is_empty() && until != *at {
            effect.push("no pod moved, no replica changed".into());
        }
        stretches.push(Stretch { at: Some(*at), event: action.clone(), effect });
    }
    stretches
}

/// Each scenario event at its time with what followed it.
pub fn timeline(stretches: &[Stretch], simulated: Duration, real: Duration) -> String {
    let mut out = format!("timeline ({} of simulated time in {:.1}s):\n", clock_time(simulated), real.as_secs_f64());
    for stretch in stretches {
        let _ = writeln!(out, "  {:>6}  {}", stretch.at.map(clock_time).unwrap_or_default(), stretch.event);
        for line in &stretch.effect {
            let _ = writeln!(out, "  {:>6}    {line}", "");
        }
    }
    out
}

pub fn moves(moves: &[Move]) -> String {
    let mut out = format!("evictions and deletions ({}):\n", moves.len());
    if moves.is_empty() {
        return out;
    }
    let _ = writeln!(out, "  {:>6}  {:<36} {:<12} {:<12} {:<32} REASON", "TIME", "POD", "FROM", "TO", "BY");
    for moved in moves {
        let to = moved.to.as_deref().unwrap_or("-");
        let reason = crate::text::truncated(&moved.reason, 160);
        let _ = writeln!(out, "  {:>6}  {:<36} {:<12} {:<12} {:<32} {reason}", clock_time(moved.at), moved.pod, moved.from, to, moved.by);
    }
    out
}

pub fn replica_changes(happenings: &[Happening]) -> String {
    let changes: Vec<(&Duration, &String, &i32, &i32, &String)> = happenings
        .iter()
        .filter_map(|happening| match &happening.change {
            Change::Replicas { workload, from, to, by } => Some((&happening.at, workload, from, to, by)),
            _ => None,
        })
        .collect();
    let mut out = format!("replica changes ({}):\n", changes.len());
    for (at, workload, from, to, by) in changes {
        let _ = writeln!(out, "  {:>6}  {workload:<36} {from:>4} -> {to:<4} {by}", clock_time(*at));
    }
    out
}

/// The Autoscalers' samples, one row per Autoscaler every `every` of simulated time.
pub fn autoscalers(samples: &[AutoscalerSample], every: Duration) -> String {
    let mut out = format!("{:>7}  {:<28} {:>8} {:>8}  METRICS\n", "TIME", "AUTOSCALER", "REPLICAS", "DESIRED");
    let mut next: BTreeMap<&str, Duration> = BTreeMap::new();
    for sample in samples {
        let due = next.entry(sample.autoscaler.as_str()).or_default();
        if sample.at < *due {
            continue;
        }
        *due = sample.at + every;
        let _ = writeln!(out, "{:>7}  {:<28} {:>8} {:>8}  {}", clock_time(sample.at), sample.autoscaler, sample.current, sample.desired, sample.targets);
    }
    out
}

/// Every node's pods, requested CPU and memory before and after the timeline (the summary of each past
/// [`LISTED_NODES`]), and the spread of requested CPU.
pub fn before_and_after(before: &[NodeLoad], after: &[NodeLoad], full: bool) -> String {
    let mut out = String::new();
    if full || after.len() <= LISTED_NODES {
        let _ = writeln!(out, "{:<12} {:>11} {:>15} {:>15}", "NODE", "PODS", "CPU REQ %", "MEMORY REQ %");
        for load in after {
            let was = before.iter().find(|earlier| earlier.name == load.name);
            let pods = format!("{} -> {}", was.map_or(0, |was| was.pods), load.pods);
            let cpu = format!("{:.0} -> {:.0}", was.map_or(0.0, |was| was.cpu), load.cpu);
            let memory = format!("{:.0} -> {:.0}", was.map_or(0.0, |was| was.memory), load.memory);
            let _ = writeln!(out, "{:<12} {pods:>11} {cpu:>15} {memory:>15}", load.name);
        }
    } else {
        out.push_str("before:\n");
        out.push_str(&summary(before));
        out.push_str("\nafter:\n");
        out.push_str(&summary(after));
    }
    let _ = writeln!(out, "spread of requested cpu across nodes (standard deviation of %): {:.1} before, {:.1} after", cpu_spread(before), cpu_spread(after));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_ordered_as_people_read_them() {
        let mut names = vec!["worker-10", "worker-2", "gpu-0", "worker-1", "worker-02b", "worker-2a", "w"];
        names.sort_by(|a, b| natural_order(a, b));
        assert_eq!(names, ["gpu-0", "w", "worker-1", "worker-2", "worker-2a", "worker-02b", "worker-10"]);
    }

    fn at(seconds: u64, change: Change) -> Happening {
        Happening { at: Duration::from_secs(seconds), change }
    }

    #[test]
    fn each_event_is_told_with_what_followed_it() {
        let events: Vec<TimedEvent> = serde_yaml::from_str("[{at: 30s, action: fail-node, node: w-3}, {at: 90s, action: recover-node, node: w-3}]").unwrap();
        let happenings = [
            at(31, Change::Left { pod: "default/a".into(), node: "w-3".into() }),
            at(32, Change::Bound { pod: "default/b".into(), node: "w-10".into() }),
            at(33, Change::Waiting { pod: "default/c".into(), message: "0/3 nodes are available".into() }),
        ];
        let text = timeline(&stretches(&events, &happenings), Duration::from_secs(120), Duration::from_secs(2));
        let expected = "timeline (2m00s of simulated time in 2.0s):\n     30s  fail-node w-3\n            1 pod left w-3: default/a\n            1 pod bound: default/b on w-10\n            1 pod waited: default/c (0/3 nodes are available)\n   1m30s  recover-node w-3\n            no pod moved, no replica changed\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn long_lists_end_with_a_count() {
        let pods: Vec<String> = (0..7).map(|index| format!("p-{index}")).collect();
        assert_eq!(names(&pods), "p-0, p-1, p-2, p-3, p-4 and 2 more");
    }

    #[test]
    fn nodes_before_and_after_read_in_natural_order() {
        let load = |name: &str, pods, cpu| NodeLoad { name: name.into(), zone: "-".into(), pods, cpu, memory: 10.0 };
        let text = before_and_after(&[load("n-2", 3, 60.0), load("n-10", 0, 0.0)], &[load("n-2", 2, 40.0), load("n-10", 1, 20.0)], false);
        let rows: Vec<&str> = text.lines().skip(1).take(2).map(|line| line.split_whitespace().next().unwrap()).collect();
        assert_eq!(rows, ["n-2", "n-10"]);
        assert!(text.contains("3 -> 2") && text.contains("60 -> 40"), "{text}");
        assert!(text.ends_with("30.0 before, 10.0 after\n"), "{text}");
    }
}
