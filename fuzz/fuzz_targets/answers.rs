//! A policy's answers as the host checks them before using them: filter results, scores, evict proposals, scale
//! decisions and the label keys `configure` names, built from the fuzzer's bytes (wasmtime has already lifted
//! them from the canonical ABI: these are the values a guest can make it produce). No check may panic, and an
//! answer a check accepts must keep the promises its caller relies on: every verdict names a rejection that
//! exists, one score per candidate within 0..=100, proposals name distinct pods of the cluster and nodes it has,
//! no more proposals than metrics, texts within their bounds.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::sync::OnceLock;
use wasp::cluster::ClusterState;
use wasp::contract::types::{Eviction, FilterResult, Metric, MetricProposal, MetricSource, MetricTarget, Placement, ScaleDecision, ScaleRequest};
use wasp::contract::{EvictContext, PendingPod};
use wasp::runtime::answers::{self, answer_bytes, MAX_ANSWER_TEXT_BYTES, MAX_REASON_BYTES};

const NODES: [&str; 3] = ["n0", "n1", "n2"];
const PENDING_UID: &str = "uid-pending";

fn pod(name: &str) -> wasp::contract::types::Pod {
    let source: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}
    }))
    .unwrap();
    wasp::cluster::convert::pod(&source).unwrap()
}

/// Three nodes with four pods, and a context with one pending pod.
fn cluster() -> &'static (ClusterState, EvictContext) {
    static CLUSTER: OnceLock<(ClusterState, EvictContext)> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let mut cluster = ClusterState::new();
        for name in NODES {
            let source: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap();
            cluster.upsert_node(wasp::cluster::convert::node(&source).unwrap());
        }
        for index in 0..4 {
            cluster.upsert_pod(pod(&format!("p{index}")), NODES[index % NODES.len()]);
        }
        let context = EvictContext { now: 0, pending: vec![PendingPod { pod: pod("pending"), reason: String::new() }], failed: Vec::new() };
        (cluster, context)
    })
}

/// Mostly short texts, sometimes blank, sometimes at or past the bound of one reason.
fn text(input: &mut Unstructured) -> Result<String> {
    Ok(match input.int_in_range(0u8..=7)? {
        0 => String::new(),
        1 => " ".repeat(input.int_in_range(1..=3)?),
        2 | 3 => "r".repeat(input.int_in_range(MAX_REASON_BYTES - 2..=MAX_REASON_BYTES + 2)?),
        _ => input.arbitrary()?,
    })
}

fn texts(input: &mut Unstructured, most: usize) -> Result<Vec<String>> {
    let count = input.int_in_range(0..=most)?;
    (0..count).map(|_| text(input)).collect()
}

fn name(input: &mut Unstructured) -> Result<String> {
    Ok(match input.int_in_range(0u8..=3)? {
        0 => PENDING_UID.to_string(),
        1 => NODES[input.choose_index(NODES.len())?].to_string(),
        _ => text(input)?,
    })
}

fn filter(input: &mut Unstructured) -> Result<()> {
    let candidates = input.int_in_range(0..=70usize)?;
    let count = input.int_in_range(0..=candidates + 1)?;
    let verdicts: Vec<u32> = (0..count).map(|_| input.int_in_range(0..=4u32)).collect::<Result<_>>()?;
    // Up to 4 x 24 reasons of up to 1 KiB: past the 64 KiB of one answer.
    let many = input.int_in_range(0..=4usize)?;
    let rejections: Vec<Vec<String>> = (0..many).map(|_| texts(input, 24)).collect::<Result<_>>()?;
    let result = FilterResult { verdicts, rejections };
    if answers::validate_filter_result(&result, candidates).is_ok() {
        assert_eq!(result.verdicts.len(), candidates);
        let mut total = 0;
        for &code in result.verdicts.iter().filter(|&&code| code != 0) {
            // What the scheduler does with each rejected node: count its reasons.
            let reasons = &result.rejections[code as usize - 1];
            assert!(!reasons.is_empty());
            for reason in reasons {
                assert!(!reason.trim().is_empty() && reason.len() <= MAX_REASON_BYTES);
            }
        }
        for reason in result.rejections.iter().flatten() {
            total += reason.len();
        }
        assert!(total <= MAX_ANSWER_TEXT_BYTES);
        // What wasmtime charges to lift an accepted answer fits the bound the host sets for it.
        let entries = result.rejections.iter().map(|reasons| size_of::<Vec<String>>() + reasons.len() * size_of::<String>()).sum::<usize>();
        assert!(result.verdicts.len() * size_of::<u32>() + entries + total <= answer_bytes::filter(candidates));
    }
    Ok(())
}

fn scores(input: &mut Unstructured) -> Result<()> {
    let candidates = input.int_in_range(0..=70usize)?;
    let count = input.int_in_range(0..=candidates + 1)?;
    let scores: Vec<u32> = (0..count).map(|_| input.int_in_range(0..=102u32)).collect::<Result<_>>()?;
    if answers::validate_scores(&scores, candidates).is_ok() {
        assert!(scores.len() == candidates && scores.iter().all(|&score| score <= 100));
    }
    Ok(())
}

fn proposals(input: &mut Unstructured) -> Result<()> {
    let (cluster, context) = cluster();
    let count = input.int_in_range(0..=7usize)?;
    let mut evictions = Vec::with_capacity(count);
    for _ in 0..count {
        let placement = match input.int_in_range(0u8..=2)? {
            0 => None,
            1 => Some(Placement::RequiredNode(name(input)?)),
            _ => Some(Placement::PreferredNode(name(input)?)),
        };
        let room_for = if input.arbitrary()? { Some(name(input)?) } else { None };
        evictions.push(Eviction { pod: input.int_in_range(0..=5u32)?, reason: text(input)?, room_for, placement });
    }
    if let Ok(accepted) = wasp::policy::checked_proposals(evictions, cluster, context) {
        let mut seen = HashSet::new();
        for eviction in &accepted {
            assert!(seen.insert(eviction.pod), "a pod proposed twice");
            assert!(cluster.pod_by_id(eviction.pod).is_some() || cluster.failed_by_id(eviction.pod).is_some());
            if let Some(Placement::RequiredNode(node) | Placement::PreferredNode(node)) = &eviction.placement {
                assert!(cluster.node_id(node).is_some());
            }
            if let Some(uid) = &eviction.room_for {
                assert!(context.pending.iter().any(|pending| &pending.pod.uid == uid));
            }
        }
    }
    Ok(())
}

fn scale(input: &mut Unstructured) -> Result<()> {
    let metrics = input.int_in_range(0..=4usize)?;
    let count = input.int_in_range(0..=6usize)?;
    let proposals: Vec<MetricProposal> =
        (0..count).map(|_| Ok(MetricProposal { metric: text(input)?, replicas: input.arbitrary()? })).collect::<Result<_>>()?;
    let decision = ScaleDecision { desired_replicas: input.arbitrary()?, reason: text(input)?, proposals, resources: Vec::new(), state: None };
    let metric = Metric {
        name: "cpu".into(),
        source: MetricSource::Resource,
        target: MetricTarget::Utilization(50.0),
        pods: Vec::new(),
        value: None,
        error: None,
        history: Vec::new(),
    };
    let request = ScaleRequest {
        workload: "default/Deployment/web".into(),
        now: 0,
        current_replicas: 1,
        min_replicas: 1,
        max_replicas: 1,
        metrics: vec![metric; metrics],
        recommendations: Vec::new(),
        containers: Vec::new(),
        state: None,
    };
    if answers::validate_scale_decision(&decision, &request).is_ok() {
        assert!(decision.proposals.len() <= metrics);
        assert!(decision.reason.len() <= MAX_REASON_BYTES && decision.proposals.iter().all(|proposal| proposal.metric.len() <= MAX_REASON_BYTES));
    }
    Ok(())
}

fn label_keys(input: &mut Unstructured) -> Result<()> {
    let keys = if input.arbitrary()? { vec!["k".to_string(); input.int_in_range(250..=260)?] } else { texts(input, 8)? };
    if answers::check_label_keys(&keys).is_ok() {
        assert!(keys.len() <= answers::MAX_SETTINGS_LABEL_KEYS && keys.iter().all(|key| (1..=317).contains(&key.len())));
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut input = Unstructured::new(data);
    let _ = match input.int_in_range(0u8..=4) {
        Ok(0) => filter(&mut input),
        Ok(1) => scores(&mut input),
        Ok(2) => proposals(&mut input),
        Ok(3) => scale(&mut input),
        Ok(_) => label_keys(&mut input),
        Err(_) => Ok(()),
    };
});
