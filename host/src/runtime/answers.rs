//! What a policy's answer must be before the host uses it: bounded texts, one verdict or score per candidate,
//! rejection codes that exist, proposals no more than metrics; and how much of an answer wasmtime may copy into
//! the host at all ([`answer_bytes`]). A rule broken is a [`CallError::Malformed`] naming it; the checks of a
//! `propose` answer against the cluster live with the policy (`policy::checked_proposals`).

use super::CallError;
use crate::contract::types::{FilterResult, ResourceAmounts, ScaleDecision, ScaleRequest};

/// Longest reason (a rejection, an eviction, a scale decision) the host passes on: it ends up in events and
/// conditions, which the API server bounds too.
pub const MAX_REASON_BYTES: usize = 1024;
/// All reasons of one answer together.
pub const MAX_ANSWER_TEXT_BYTES: usize = 64 << 10;
/// All reasons of one `propose` answer together: it may name every pod of a large cluster (a week-old cluster
/// under pod-lifetime), a reason each.
pub const MAX_PROPOSAL_TEXT_BYTES: usize = 16 << 20;

/// The most of its own state a scale policy may ask the host to keep (in the Autoscaler's status).
pub const MAX_STATE_BYTES: usize = 64 << 10;

/// A policy's own error, shortened to what a log line or an event can carry.
pub fn guest_error(message: String) -> CallError {
    CallError::Guest(truncate(message, MAX_REASON_BYTES))
}

pub(super) fn truncate(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let total = text.len();
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(&format!("… ({total} bytes, truncated)"));
    }
    text
}

/// How much of an answer wasmtime may copy into the host while lifting it. Wasmtime charges its "hostcall fuel"
/// for every list element and every string byte before copying them, so an answer past the bound is refused
/// having cost the host at most the bound: 127 entries naming one 1 MiB string of the guest's memory would
/// otherwise become 127 MiB in the host before the checks below refused them. Each bound is what those checks
/// accept after the copy (answer texts, one entry per candidate or pod), plus room for an error message. The same
/// fuel bounds what a guest passes to the host's own imports during the call (WASI output, say), each import
/// afresh; the host's output sink keeps far less of it.
pub mod answer_bytes {
    use super::{MAX_ANSWER_TEXT_BYTES, MAX_PROPOSAL_TEXT_BYTES};
    use crate::contract::types::{ContainerRecommendation, Eviction, MetricProposal};

    /// Answers without lists that grow with the cluster (`describe`, `configure`, `apply`), and the room each
    /// bound leaves for the policy's own error message.
    pub const SMALL: usize = 1 << 20;
    /// A node name, a pod uid: what a placement or a `room-for` names.
    const NAME: usize = 256;

    /// A verdict and a rejection per candidate, and the rejections' reasons: each at least a byte (an empty one
    /// is refused), so at most [`MAX_ANSWER_TEXT_BYTES`] of them, each an entry besides its text.
    pub fn filter(candidates: usize) -> usize {
        let reasons = MAX_ANSWER_TEXT_BYTES * (1 + size_of::<String>());
        candidates.saturating_mul(size_of::<u32>() + size_of::<Vec<String>>()).saturating_add(reasons + SMALL)
    }

    pub fn score(candidates: usize) -> usize {
        candidates.saturating_mul(size_of::<u32>()).saturating_add(SMALL)
    }

    /// At most one eviction per pod, each with a placement and a `room-for` naming something, and the reasons.
    pub fn propose(pods: usize) -> usize {
        pods.saturating_mul(size_of::<Eviction>() + 2 * NAME).saturating_add(MAX_PROPOSAL_TEXT_BYTES + SMALL)
    }

    /// At most one proposal per metric and one recommendation per container, and the state.
    pub fn recommend(metrics: usize, containers: usize) -> usize {
        let proposals = metrics.saturating_mul(size_of::<MetricProposal>() + NAME);
        let resources = containers.saturating_mul(size_of::<ContainerRecommendation>() + NAME);
        proposals.saturating_add(resources).saturating_add(MAX_ANSWER_TEXT_BYTES + super::MAX_STATE_BYTES + SMALL)
    }

    /// Whether a call failed because its answer was past its bound. Wasmtime's error type for it is private;
    /// its message is pinned by a test of the sandbox.
    pub(crate) fn exhausted(error: &wasmtime::Error) -> bool {
        format!("{error:#}").contains("fuel allocated for hostcalls has been exhausted")
    }
}

/// Reasons must be short enough for events and conditions, and all of them together bounded.
pub fn check_texts<'a>(operation: &'static str, budget: usize, texts: impl Iterator<Item = &'a str>) -> Result<(), CallError> {
    let malformed = |message: String| Err(CallError::Malformed { operation, message });
    let mut total = 0usize;
    for text in texts {
        if text.len() > MAX_REASON_BYTES {
            return malformed(format!("a reason of {} bytes (at most {MAX_REASON_BYTES})", text.len()));
        }
        total += text.len();
        if total > budget {
            return malformed(format!("more than {budget} bytes of reasons in one answer"));
        }
    }
    Ok(())
}

/// A Kubernetes label key is at most 317 bytes (a 253-byte prefix, `/`, a 63-byte name); a policy's settings
/// name a handful.
pub const MAX_SETTINGS_LABEL_KEYS: usize = 256;

pub fn check_label_keys(keys: &[String]) -> Result<(), CallError> {
    let malformed = |message: String| Err(CallError::Malformed { operation: "configure", message });
    if keys.len() > MAX_SETTINGS_LABEL_KEYS {
        return malformed(format!("{} label keys named by the settings (at most {MAX_SETTINGS_LABEL_KEYS})", keys.len()));
    }
    if let Some(key) = keys.iter().find(|key| key.is_empty() || key.len() > 317) {
        return malformed(format!("a label key of {} bytes (1 to 317)", key.len()));
    }
    Ok(())
}

pub fn validate_filter_result(result: &FilterResult, candidates: usize) -> Result<(), CallError> {
    let malformed = |message: String| Err(CallError::Malformed { operation: "filter", message });
    if result.verdicts.len() != candidates {
        return malformed(format!("{} verdicts for {candidates} candidate nodes", result.verdicts.len()));
    }
    if let Some(code) = result.verdicts.iter().find(|&&code| code as usize > result.rejections.len()) {
        return malformed(format!("verdict {code} names a rejection that does not exist ({} given)", result.rejections.len()));
    }
    if result.rejections.iter().any(Vec::is_empty) {
        return malformed("a rejection without a reason".into());
    }
    // An empty reason would read `0/6 nodes are available: 6 .` to the pod's owner.
    if result.rejections.iter().flatten().any(|reason| reason.trim().is_empty()) {
        return malformed("an empty rejection reason".into());
    }
    if result.rejections.len() > candidates {
        return malformed(format!("{} rejections for {candidates} candidate nodes", result.rejections.len()));
    }
    check_texts("filter", MAX_ANSWER_TEXT_BYTES, result.rejections.iter().flatten().map(String::as_str))?;
    Ok(())
}

pub fn validate_scores(scores: &[u32], candidates: usize) -> Result<(), CallError> {
    let malformed = |message: String| Err(CallError::Malformed { operation: "score", message });
    if scores.len() != candidates {
        return malformed(format!("{} scores for {candidates} candidate nodes", scores.len()));
    }
    if let Some(score) = scores.iter().find(|&&score| score > 100) {
        return malformed(format!("score {score} is outside 0..=100"));
    }
    Ok(())
}

pub fn validate_scale_decision(decision: &ScaleDecision, request: &ScaleRequest) -> Result<(), CallError> {
    let malformed = |message: String| Err(CallError::Malformed { operation: "recommend", message });
    if decision.proposals.len() > request.metrics.len() {
        return malformed(format!("{} metric proposals for {} metrics", decision.proposals.len(), request.metrics.len()));
    }
    let mut named = std::collections::HashSet::new();
    for recommendation in &decision.resources {
        let container = &recommendation.container;
        if !request.containers.iter().any(|known| &known.name == container) {
            return malformed(format!("a recommendation for container {container:?}, which the target's pods do not have"));
        }
        if !named.insert(container) {
            return malformed(format!("two recommendations for container {container:?}"));
        }
        for (bound, amounts) in [("target", &recommendation.target), ("lowerBound", &recommendation.lower_bound), ("upperBound", &recommendation.upper_bound)] {
            if let Some(bad) = invalid_amount(amounts) {
                return malformed(format!("container {container:?}: {bound} {bad}"));
            }
        }
    }
    if let Some(state) = &decision.state {
        if state.len() > MAX_STATE_BYTES {
            return malformed(format!("a state of {} bytes (at most {MAX_STATE_BYTES})", state.len()));
        }
    }
    let texts = std::iter::once(decision.reason.as_str()).chain(decision.proposals.iter().map(|proposal| proposal.metric.as_str()));
    check_texts("recommend", MAX_ANSWER_TEXT_BYTES, texts)
}

/// What is wrong with an amount a policy recommends, if anything: requests are finite and positive.
fn invalid_amount(amounts: &ResourceAmounts) -> Option<String> {
    [("cpu", amounts.cpu), ("memory", amounts.memory)].into_iter().find_map(|(resource, value)| {
        value.filter(|value| !value.is_finite() || *value <= 0.0).map(|value| format!("{resource} is {value}, not a positive amount"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertical_answers_name_the_requests_containers_with_positive_amounts_and_a_bounded_state() {
        use crate::contract::types::{ContainerRecommendation, ContainerUsage};
        let none = ResourceAmounts { cpu: None, memory: None };
        let container = ContainerUsage { name: "app".into(), requests: none, limits: none, samples: Vec::new(), oom_kills: Vec::new() };
        let request = ScaleRequest {
            workload: "default/Deployment/web".into(),
            now: 0,
            current_replicas: 1,
            min_replicas: 1,
            max_replicas: 1,
            metrics: Vec::new(),
            recommendations: Vec::new(),
            containers: vec![container],
            state: None,
        };
        let recommendation = |container: &str, cpu: f64| ContainerRecommendation {
            container: container.into(),
            target: ResourceAmounts { cpu: Some(cpu), memory: None },
            lower_bound: none,
            upper_bound: none,
        };
        let decision = |resources: Vec<ContainerRecommendation>, state: Option<String>| ScaleDecision {
            desired_replicas: 1,
            reason: "sized".into(),
            proposals: Vec::new(),
            resources,
            state,
        };
        assert!(validate_scale_decision(&decision(vec![recommendation("app", 0.25)], Some("{}".into())), &request).is_ok());
        let message = |answer: ScaleDecision| validate_scale_decision(&answer, &request).unwrap_err().to_string();
        assert!(message(decision(vec![recommendation("db", 0.25)], None)).contains("container \"db\", which the target's pods do not have"));
        assert!(message(decision(vec![recommendation("app", 0.25), recommendation("app", 0.5)], None)).contains("two recommendations"));
        assert!(message(decision(vec![recommendation("app", f64::NAN)], None)).contains("target cpu is NaN, not a positive amount"));
        assert!(message(decision(vec![recommendation("app", -1.0)], None)).contains("not a positive amount"));
        assert!(message(decision(Vec::new(), Some("x".repeat(MAX_STATE_BYTES + 1)))).contains("a state of 65537 bytes"));
    }

    #[test]
    fn long_answers_are_malformed_and_long_errors_truncated() {
        let reason = "x".repeat(MAX_REASON_BYTES + 1);
        let result = FilterResult { verdicts: vec![1], rejections: vec![vec![reason]] };
        let error = validate_filter_result(&result, 1).unwrap_err();
        assert_eq!(error.to_string(), "malformed answer from filter: a reason of 1025 bytes (at most 1024)");
        let many = FilterResult { verdicts: vec![1; 100], rejections: (0..100).map(|_| vec!["y".repeat(1000)]).collect() };
        assert!(validate_filter_result(&many, 100).unwrap_err().to_string().contains("more than 65536 bytes of reasons"));
        let CallError::Guest(message) = guest_error("é".repeat(10_000)) else { panic!() };
        assert!(message.len() < MAX_REASON_BYTES + 40 && message.ends_with("(20000 bytes, truncated)"), "{message}");
    }
}
