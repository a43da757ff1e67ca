//! Decision records as text for people: one format wherever a record is shown (`wasp explain`, `wasp policy
//! eval`, `wasp simulate`), so what a user sees locally and in the cluster reads the same.

use super::{EvictionRecord, PlacementRecord, ScaleRecord};

/// Columns padded to their widest cell, separated by two spaces; the last column is not padded.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..columns).map(|column| rows.iter().filter_map(|row| row.get(column)).map(|cell| cell.chars().count()).max().unwrap_or(0)).collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[column]));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn duration(micros: u64) -> String {
    match micros {
        0..1_000 => format!("{micros} µs"),
        1_000..1_000_000 => format!("{:.1} ms", micros as f64 / 1e3),
        _ => format!("{:.2} s", micros as f64 / 1e6),
    }
}

/// A placement: the result, each filter's rejections, and the best nodes' scores.
pub fn placement(record: &PlacementRecord) -> String {
    let mut text = format!("Pod {} (profile {}), decided {} in {}\n", record.pod, record.profile, record.at, duration(record.duration_micros));
    match (&record.node, &record.message) {
        (Some(node), _) => text.push_str(&format!("Result:  placed on {node} ({})\n", record.chosen_by.as_deref().unwrap_or("chosen"))),
        (None, Some(message)) => text.push_str(&format!("Result:  unschedulable: {message}\n")),
        (None, None) => text.push_str("Result:  not placed\n"),
    }
    text.push_str(&format!("Nodes:   {} in the cluster, {} evaluated, {} feasible\n", record.nodes, record.evaluated, record.feasible));
    if !record.filters.is_empty() {
        text.push('\n');
        let mut rows = vec![vec!["FILTER".to_string(), "EVALUATED".into(), "REJECTED".into(), "REASONS".into()]];
        for step in &record.filters {
            let reasons: Vec<String> = step.reasons.iter().map(|reason| format!("{} {}", reason.nodes, reason.reason)).collect();
            rows.push(vec![step.policy.clone(), step.evaluated.to_string(), step.rejected.to_string(), reasons.join(", ")]);
        }
        text.push_str(&table(&rows));
    }
    if !record.top_nodes.is_empty() && !record.score_policies.is_empty() {
        text.push('\n');
        let mut header = vec!["NODE".to_string()];
        header.extend(record.score_policies.iter().map(|policy| format!("{} (x{})", policy.policy, policy.weight)));
        header.push("TOTAL".into());
        let mut rows = vec![header];
        for node in &record.top_nodes {
            let mut row = vec![format!("{}{}", node.node, if node.chosen { " *" } else { "" })];
            row.extend(node.scores.iter().zip(&record.score_policies).map(|(score, policy)| format!("{score} ({})", *score as u64 * policy.weight as u64)));
            row.push(node.total.to_string());
            rows.push(row);
        }
        text.push_str(&table(&rows));
        text.push_str("Scores are normalized (0-100), weighted in parentheses; * the chosen node.\n");
    }
    text
}

/// An eviction made or left: the strategy's reason, the envelope's checks, where the fit check placed the pod.
pub fn eviction(record: &EvictionRecord) -> String {
    let mut text = format!("Pod {} on {}, planned {}\n", record.pod, record.node, record.at);
    text.push_str(&format!("Proposed by: {}: {}\n", record.policy, record.reason));
    if let Some(workload) = &record.workload {
        text.push_str(&format!("Workload:    {workload}\n"));
    }
    let decision = match (record.decision.as_str(), &record.target, &record.room_for) {
        ("evict", Some(target), _) => format!("evict; the fit check places its replacement on {target}"),
        ("preempt", _, Some(room_for)) => format!("evict to make room for {room_for}"),
        ("clear", _, _) => "evict the failed pod".to_string(),
        ("skip", _, _) => "left where it is".to_string(),
        (other, _, _) => other.to_string(),
    };
    text.push_str(&format!("Decision:    {decision}\n"));
    if let Some(outcome) = &record.outcome {
        text.push_str(&format!("Outcome:     {outcome}\n"));
    }
    text.push('\n');
    let mut rows = vec![vec!["CHECK".to_string(), "VERDICT".into(), "DETAIL".into()]];
    for step in &record.checks {
        rows.push(vec![step.check.clone(), step.verdict.clone(), step.detail.clone().unwrap_or_default()]);
    }
    text.push_str(&table(&rows));
    text
}

/// A sync of an Autoscaler: each metric, the policy's answer, the behavior rules, the result.
pub fn scale(record: &ScaleRecord) -> String {
    let mut text = format!("Autoscaler {} ({}, policy {}), synced {}\n", record.autoscaler, record.target, record.policy, record.at);
    text.push_str(&format!("Replicas:    {} now, within [{}, {}]\n", record.current, record.min, record.max));
    if !record.metrics.is_empty() {
        text.push('\n');
        let mut rows = vec![vec!["METRIC".to_string(), "SOURCE".into(), "PROPOSES".into(), "READING".into()]];
        for line in &record.metrics {
            let reading = match (&line.reading, &line.error) {
                (_, Some(error)) => format!("error: {error}"),
                (Some(reading), None) => reading.clone(),
                (None, None) => String::new(),
            };
            rows.push(vec![line.metric.clone(), line.source.clone(), line.proposal.map_or("-".into(), |replicas| replicas.to_string()), reading]);
        }
        text.push_str(&table(&rows));
        text.push('\n');
    }
    if let Some(recommended) = record.recommended {
        text.push_str(&format!("Policy:      {recommended} replicas: {}\n", record.reason));
    } else if !record.reason.is_empty() {
        text.push_str(&format!("Reason:      {}\n", record.reason));
    }
    for rule in &record.limited_by {
        text.push_str(&format!("Behavior:    {rule}\n"));
    }
    text.push_str(&format!("Desired:     {}\n", record.desired));
    text.push_str(&format!("Outcome:     {}\n", record.outcome));
    text
}

#[cfg(test)]
mod tests {
    use super::super::*;

    #[test]
    fn a_placement_reads_as_a_result_a_filter_table_and_a_score_table() {
        let record = PlacementRecord {
            pod: "shop/web-7".into(),
            uid: "u".into(),
            profile: "default-scheduler".into(),
            at: "2026-12-04T21:00:00Z".into(),
            duration_micros: 1250,
            nodes: 5,
            evaluated: 5,
            feasible: 2,
            node: Some("worker-3".into()),
            chosen_by: Some("highest score".into()),
            message: None,
            filters: vec![
                FilterStep::new("taint-toleration", 5, 2, [("node(s) had untolerated taint {gpu: true}".to_string(), 2)]),
                FilterStep::new("resources-fit", 3, 1, [("Insufficient cpu".to_string(), 1)]),
            ],
            score_policies: vec![ScorePolicy { policy: "least-allocated".into(), weight: 2 }],
            top_nodes: vec![
                ScoredNode { node: "worker-3".into(), scores: vec![80], total: 160, chosen: true },
                ScoredNode { node: "worker-10".into(), scores: vec![40], total: 80, chosen: false },
            ],
        };
        let text = super::placement(&record);
        assert_eq!(
            text,
            "Pod shop/web-7 (profile default-scheduler), decided 2026-12-04T21:00:00Z in 1.2 ms\n\
             Result:  placed on worker-3 (highest score)\n\
             Nodes:   5 in the cluster, 5 evaluated, 2 feasible\n\
             \n\
             FILTER            EVALUATED  REJECTED  REASONS\n\
             taint-toleration  5          2         2 node(s) had untolerated taint {gpu: true}\n\
             resources-fit     3          1         1 Insufficient cpu\n\
             \n\
             NODE        least-allocated (x2)  TOTAL\n\
             worker-3 *  80 (160)              160\n\
             worker-10   40 (80)               80\n\
             Scores are normalized (0-100), weighted in parentheses; * the chosen node.\n"
        );
    }
}
