//! The timeline of `wasp simulate`: the API server's pods, workloads and Autoscalers sampled at every tick of the
//! simulated clock, and what changed between samples: pods bound, pods gone from their node, pods left waiting,
//! replicas changed. Told per scenario event (its effect), as evictions (pod, from, to, by whom, why) and as
//! replica changes (when, by whom).

use crate::autoscaler::resource::Autoscaler;
use crate::explain::DecisionRecords;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use wasp_sim::scenario::TimedEvent;

/// A pod as one sample saw it.
#[derive(Debug, Clone, PartialEq)]
struct PodSeen {
    uid: String,
    node: Option<String>,
    /// `ReplicaSet default/web-6d7f9`: its replacement has the same owner.
    owner: Option<String>,
    terminating: bool,
    /// The PodScheduled=False message, while the pod waits.
    waiting: Option<String>,
}

/// What the API server showed at one tick.
#[derive(Debug, Clone, Default)]
struct Sample {
    pods: BTreeMap<String, PodSeen>,
    /// `Deployment default/web` → spec.replicas.
    replicas: BTreeMap<String, i32>,
}

/// One change between two samples.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Bound {
        pod: String,
        node: String,
    },
    /// Deleted, or marked for deletion, while on `node`.
    Left {
        pod: String,
        node: String,
    },
    Waiting {
        pod: String,
        message: String,
    },
    Replicas {
        workload: String,
        from: i32,
        to: i32,
        by: String,
    },
    /// A rescheduling run that evicted or skipped something.
    Rescheduled {
        summary: String,
    },
}

#[derive(Debug, Clone)]
pub struct Happening {
    /// Simulated time since the scenario started.
    pub at: Duration,
    pub change: Change,
}

/// A pod that left its node, where its replacement went and who moved it.
#[derive(Debug, Clone)]
pub struct Move {
    pub at: Duration,
    pub pod: String,
    pub from: String,
    /// The node a pod of the same owner (or the pod itself, for a StatefulSet) was bound to next.
    pub to: Option<String>,
    /// The rescheduler's strategy, or the scenario event, or `deleted`.
    pub by: String,
    pub reason: String,
}

/// One sample of an Autoscaler: its replicas and its metrics against their targets.
#[derive(Debug, Clone)]
pub struct AutoscalerSample {
    pub at: Duration,
    pub autoscaler: String,
    pub current: i32,
    pub desired: i32,
    pub targets: String,
}

/// Everything sampled: the changes in order, and the Autoscalers' samples.
#[derive(Default)]
pub struct Timeline {
    last: Option<Sample>,
    owners: BTreeMap<String, String>,
    pub happenings: Vec<Happening>,
    pub autoscalers: Vec<AutoscalerSample>,
    /// Rescheduling runs seen so far.
    runs_seen: u64,
}

fn key(namespace: Option<&str>, name: Option<&str>) -> String {
    format!("{}/{}", namespace.unwrap_or("default"), name.unwrap_or_default())
}

fn pod_seen(pod: &Pod) -> PodSeen {
    let spec = pod.spec.as_ref();
    let waiting = pod.status.as_ref().and_then(|status| status.conditions.as_ref()).and_then(|conditions| {
        let scheduled = conditions.iter().find(|condition| condition.type_ == "PodScheduled" && condition.status == "False")?;
        Some(scheduled.message.clone().unwrap_or_else(|| scheduled.reason.clone().unwrap_or_default()))
    });
    let owner = pod
        .metadata
        .owner_references
        .as_ref()
        .and_then(|owners| owners.first())
        .map(|owner| format!("{} {}", owner.kind, key(pod.metadata.namespace.as_deref(), Some(&owner.name))));
    PodSeen {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        node: spec.and_then(|spec| spec.node_name.clone()),
        owner,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        waiting: spec.and_then(|spec| spec.node_name.as_ref()).map_or(waiting, |_| None),
    }
}

impl Timeline {
    /// Samples the API server at `at` and keeps what changed since the last sample. The first sample is the
    /// ground the changes start from.
    pub async fn sample(
        &mut self,
        client: &Client,
        at: Duration,
        scale_events: &[&TimedEvent],
        reschedules: Option<(u64, Option<String>)>,
    ) -> anyhow::Result<()> {
        let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?.items;
        let mut sample = Sample::default();
        for pod in &pods {
            let seen = pod_seen(pod);
            let name = key(pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref());
            if let Some(owner) = &seen.owner {
                self.owners.insert(name.clone(), owner.clone());
            }
            sample.pods.insert(name, seen);
        }
        for deployment in Api::<Deployment>::all(client.clone()).list(&ListParams::default()).await?.items {
            let replicas = deployment.spec.replicas.unwrap_or(1);
            sample.replicas.insert(format!("Deployment {}", key(deployment.metadata.namespace.as_deref(), deployment.metadata.name.as_deref())), replicas);
        }
        for set in Api::<StatefulSet>::all(client.clone()).list(&ListParams::default()).await?.items {
            let replicas = set.spec.replicas.unwrap_or(1);
            sample.replicas.insert(format!("StatefulSet {}", key(set.metadata.namespace.as_deref(), set.metadata.name.as_deref())), replicas);
        }
        let autoscalers = match Api::<Autoscaler>::all(client.clone()).list(&ListParams::default()).await {
            Ok(list) => list.items,
            // No CRD: no Autoscalers in this scenario.
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(error) => return Err(error.into()),
        };
        for autoscaler in &autoscalers {
            let status = autoscaler.status.clone().unwrap_or_default();
            self.autoscalers.push(AutoscalerSample {
                at,
                autoscaler: key(autoscaler.metadata.namespace.as_deref(), autoscaler.metadata.name.as_deref()),
                current: status.current_replicas,
                desired: status.desired_replicas,
                targets: status.targets.unwrap_or_default(),
            });
        }
        if let Some(last) = &self.last {
            self.compare(last.clone(), &sample, at, scale_events, &autoscalers);
        }
        if let Some((runs, summary)) = reschedules {
            if runs > self.runs_seen && self.last.is_some() {
                if let Some(summary) = summary {
                    self.happenings.push(Happening { at, change: Change::Rescheduled { summary } });
                }
            }
            self.runs_seen = runs;
        }
        self.last = Some(sample);
        Ok(())
    }

    fn compare(&mut self, last: Sample, now: &Sample, at: Duration, scale_events: &[&TimedEvent], autoscalers: &[Autoscaler]) {
        let mut push = |change| self.happenings.push(Happening { at, change });
        for (name, before) in &last.pods {
            let after = now.pods.get(name).filter(|after| after.uid == before.uid);
            let left = match after {
                None => !before.terminating,
                Some(after) => after.terminating && !before.terminating,
            };
            if let (true, Some(node)) = (left, &before.node) {
                push(Change::Left { pod: name.clone(), node: node.clone() });
            }
        }
        for (name, after) in &now.pods {
            let before = last.pods.get(name).filter(|before| before.uid == after.uid);
            if let Some(node) = &after.node {
                if before.is_none_or(|before| before.node.is_none()) {
                    push(Change::Bound { pod: name.clone(), node: node.clone() });
                }
            } else if let Some(message) = &after.waiting {
                if before.is_none_or(|before| before.waiting.is_none()) {
                    push(Change::Waiting { pod: name.clone(), message: message.clone() });
                }
            }
        }
        for (workload, &to) in &now.replicas {
            let Some(&from) = last.replicas.get(workload) else { continue };
            if from == to {
                continue;
            }
            let by = replicas_changed_by(workload, to, at, scale_events, autoscalers);
            push(Change::Replicas { workload: workload.clone(), from, to, by });
        }
    }

    /// Pods that left their node, each with who moved it (the rescheduler by its decision record, or the
    /// scenario event under way on that node, or the scale-down of its workload, or a deletion) and, when it was
    /// moved rather than removed, where its owner's next pod went.
    pub fn moves(&self, records: &DecisionRecords, events: &[TimedEvent]) -> Vec<Move> {
        let mut taken: HashSet<usize> = HashSet::new();
        let mut moves = Vec::new();
        for (index, happening) in self.happenings.iter().enumerate() {
            let Change::Left { pod, node } = &happening.change else { continue };
            let owner = self.owners.get(pod);
            let evicted = records.evictions.get(pod).filter(|record| record.node == *node && record.outcome.as_deref() == Some("evicted"));
            let (by, reason, replaced) = match evicted {
                Some(record) => (record.policy.clone(), record.reason.clone(), true),
                None => match under_way(events, node, happening.at) {
                    Some(event) => (format!("scenario: {}", event.action), String::new(), true),
                    None => match owner.and_then(|owner| self.scaled_down(owner, happening.at)) {
                        Some(scaled) => (format!("scale-down: {scaled}"), String::new(), false),
                        None => ("deleted".to_string(), String::new(), false),
                    },
                },
            };
            if !replaced {
                moves.push(Move { at: happening.at, pod: pod.clone(), from: node.clone(), to: None, by, reason });
                continue;
            }
            let replacement = self.happenings.iter().enumerate().skip(index + 1).find(|(later, candidate)| {
                let Change::Bound { pod: bound, .. } = &candidate.change else { return false };
                !taken.contains(later)
                    && (bound == pod || (owner.is_some() && self.owners.get(bound) == owner && !owner.is_some_and(|owner| owner.starts_with("StatefulSet "))))
            });
            let to = replacement.map(|(later, candidate)| {
                taken.insert(later);
                match &candidate.change {
                    Change::Bound { node, .. } => node.clone(),
                    _ => unreachable!("found as Bound"),
                }
            });
            moves.push(Move { at: happening.at, pod: pod.clone(), from: node.clone(), to, by, reason });
        }
        moves
    }
}

impl Timeline {
    /// The last scale-down, at or before `at`, of the workload whose pods `owner` owns (a Deployment's through
    /// its ReplicaSet `NAME-HASH`): `Deployment default/web 15 -> 14`.
    fn scaled_down(&self, owner: &str, at: Duration) -> Option<String> {
        let (kind, name) = owner.split_once(' ')?;
        let workload = match kind {
            "ReplicaSet" => format!("Deployment {}", name.rsplit_once('-')?.0),
            _ => owner.to_string(),
        };
        self.happenings.iter().rev().filter(|happening| happening.at <= at).find_map(|happening| match &happening.change {
            Change::Replicas { workload: scaled, from, to, .. } if *scaled == workload && to < from => Some(format!("{workload} {from} -> {to}")),
            _ => None,
        })
    }
}

/// The scenario event that makes pods leave `node` and is still under way at `at`: a drain, a node failure or a
/// `NoExecute` taint, not yet ended by the node's recovery, uncordon or untaint.
fn under_way<'a>(events: &'a [TimedEvent], node: &str, at: Duration) -> Option<&'a TimedEvent> {
    use wasp_sim::scenario::Action;
    let mut on_node: Vec<&TimedEvent> = events.iter().filter(|event| event.at <= at).collect();
    on_node.sort_by_key(|event| event.at);
    let latest = on_node.into_iter().rev().find(|event| match &event.action {
        Action::Drain { node: target }
        | Action::FailNode { node: target }
        | Action::RecoverNode { node: target }
        | Action::Uncordon { node: target }
        | Action::Untaint { node: target, .. } => target == node,
        Action::Taint { node: target, effect, .. } => target == node && effect == "NoExecute",
        _ => false,
    })?;
    matches!(latest.action, Action::Drain { .. } | Action::FailNode { .. } | Action::Taint { .. }).then_some(latest)
}

/// Who set `workload` to `replicas`: a scenario `scale` event, or the Autoscaler that targets it (with its
/// metrics then), or someone else.
fn replicas_changed_by(workload: &str, replicas: i32, at: Duration, scale_events: &[&TimedEvent], autoscalers: &[Autoscaler]) -> String {
    use wasp_sim::scenario::Action;
    let (kind, name) = workload.split_once(' ').unwrap_or(("", workload));
    // The workload's latest scale event by then, if it asked for these replicas.
    let latest = scale_events
        .iter()
        .filter(|event| event.at <= at && matches!(&event.action, Action::Scale { workload: target, namespace, .. } if format!("{namespace}/{target}") == name))
        .max_by_key(|event| event.at);
    let scaled = latest.filter(|event| matches!(&event.action, Action::Scale { replicas: to, .. } if *to as i32 == replicas));
    if let Some(event) = scaled {
        return format!("scenario: {}", event.action);
    }
    let (namespace, target) = name.split_once('/').unwrap_or(("default", name));
    let autoscaler = autoscalers.iter().find(|autoscaler| {
        autoscaler.metadata.namespace.as_deref().unwrap_or("default") == namespace
            && autoscaler.spec.scale_target_ref.kind == kind
            && autoscaler.spec.scale_target_ref.name == target
    });
    match autoscaler {
        Some(autoscaler) => {
            let status = autoscaler.status.clone().unwrap_or_default();
            let name = key(autoscaler.metadata.namespace.as_deref(), autoscaler.metadata.name.as_deref());
            format!("Autoscaler {name} ({})", status.targets.unwrap_or_default())
        }
        None => "-".to_string(),
    }
}

/// `1m05s` for a report's time column.
pub fn clock_time(at: Duration) -> String {
    let seconds = at.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        _ => format!("{}m{:02}s", seconds / 60, seconds % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(uid: &str, node: Option<&str>, owner: &str) -> PodSeen {
        PodSeen { uid: uid.into(), node: node.map(Into::into), owner: Some(owner.into()), terminating: false, waiting: None }
    }

    #[test]
    fn a_pod_that_left_is_matched_with_its_owners_next_pod_and_told_by_the_event_on_its_node() {
        let mut timeline = Timeline::default();
        let rs = "ReplicaSet default/web-1";
        let before = Sample { pods: [("default/web-a".to_string(), seen("a", Some("n-0"), rs))].into(), replicas: BTreeMap::new() };
        let mut after = Sample::default();
        after.pods.insert("default/web-b".into(), seen("b", Some("n-2"), rs));
        timeline.owners.insert("default/web-a".into(), rs.into());
        timeline.owners.insert("default/web-b".into(), rs.into());
        timeline.compare(before, &after, Duration::from_secs(31), &[], &[]);
        assert_eq!(
            timeline.happenings.iter().map(|happening| happening.change.clone()).collect::<Vec<_>>(),
            [Change::Left { pod: "default/web-a".into(), node: "n-0".into() }, Change::Bound { pod: "default/web-b".into(), node: "n-2".into() }]
        );
        let events: Vec<TimedEvent> = serde_yaml::from_str("[{at: 30s, action: drain, node: n-0}, {at: 40s, action: drain, node: n-1}]").unwrap();
        let moves = timeline.moves(&DecisionRecords::default(), &events);
        assert_eq!(moves.len(), 1);
        assert_eq!((moves[0].from.as_str(), moves[0].to.as_deref(), moves[0].by.as_str()), ("n-0", Some("n-2"), "scenario: drain n-0"));
    }

    #[test]
    fn a_pod_deleted_after_its_deployment_scaled_down_was_the_scale_downs() {
        let mut timeline = Timeline::default();
        timeline.owners.insert("default/web-a".into(), "ReplicaSet default/web-6d7f9".into());
        timeline.happenings.push(Happening {
            at: Duration::from_secs(10),
            change: Change::Replicas { workload: "Deployment default/web".into(), from: 3, to: 2, by: "-".into() },
        });
        timeline.happenings.push(Happening { at: Duration::from_secs(11), change: Change::Left { pod: "default/web-a".into(), node: "n-0".into() } });
        let moves = timeline.moves(&DecisionRecords::default(), &[]);
        assert_eq!((moves[0].by.as_str(), moves[0].to.as_deref()), ("scale-down: Deployment default/web 3 -> 2", None));
    }

    #[test]
    fn a_node_event_ends_with_the_nodes_recovery() {
        let events: Vec<TimedEvent> = serde_yaml::from_str("[{at: 30s, action: fail-node, node: w-3}, {at: 90s, action: recover-node, node: w-3}, {at: 100s, action: taint, node: w-1, key: k, effect: NoSchedule}]").unwrap();
        let at = |seconds| Duration::from_secs(seconds);
        assert_eq!(under_way(&events, "w-3", at(60)).map(|event| event.at), Some(at(30)));
        assert!(under_way(&events, "w-3", at(120)).is_none(), "recovered");
        assert!(under_way(&events, "w-1", at(120)).is_none(), "a NoSchedule taint moves nothing");
    }

    #[test]
    fn replicas_set_by_a_scale_event_are_the_scenarios() {
        let events: Vec<TimedEvent> = serde_yaml::from_str("[{at: 150s, action: scale, workload: api, replicas: 12}]").unwrap();
        let events: Vec<&TimedEvent> = events.iter().collect();
        let at = Duration::from_secs(151);
        assert_eq!(replicas_changed_by("Deployment default/api", 12, at, &events, &[]), "scenario: scale default/api to 12");
        assert_eq!(replicas_changed_by("Deployment default/api", 7, at, &events, &[]), "-");
        assert_eq!(replicas_changed_by("Deployment default/api", 12, Duration::from_secs(100), &events, &[]), "-", "not before the event");
    }

    #[test]
    fn times_read_as_minutes_and_seconds() {
        assert_eq!((clock_time(Duration::from_secs(59)), clock_time(Duration::from_secs(65))), ("59s".to_string(), "1m05s".to_string()));
    }
}
