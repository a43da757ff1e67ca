//! What a policy's answer must be before the host uses it: bounded texts, one verdict or score per candidate,
//! rejection codes that exist, proposals no more than metrics; and how much of an answer wasmtime may copy into
//! the host at all ([`answer_bytes`]). A rule broken is a [`CallError::Malformed`] naming it; the checks of a
//! `propose` answer against the cluster live with the policy (`policy::checked_proposals`).

use super::CallError;
use crate::contract::types::{FilterResult, ScaleDecision};

/// Longest reason (a rejection, an eviction, a scale decision) the host passes on: it ends up in events and
/// conditions, which the API server bounds too.
pub const MAX_REASON_BYTES: usize = 1024;
/// All reasons of one answer together.
pub const MAX_ANSWER_TEXT_BYTES: usize = 64 << 10;
/// All reasons of one `propose` answer together: it may name every pod of a large cluster (a week-old cluster
/// under pod-lifetime), a reason each.
pub const MAX_PROPOSAL_TEXT_BYTES: usize = 16 << 20;

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
    use crate::contract::types::{Eviction, MetricProposal};

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

    /// At most one proposal per metric.
    pub fn recommend(metrics: usize) -> usize {
        metrics.saturating_mul(size_of::<MetricProposal>() + NAME).saturating_add(MAX_ANSWER_TEXT_BYTES + SMALL)
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

pub fn validate_scale_decision(decision: &ScaleDecision, metrics: usize) -> Result<(), CallError> {
    if decision.proposals.len() > metrics {
        let message = format!("{} metric proposals for {metrics} metrics", decision.proposals.len());
        return Err(CallError::Malformed { operation: "recommend", message });
    }
    let texts = std::iter::once(decision.reason.as_str()).chain(decision.proposals.iter().map(|proposal| proposal.metric.as_str()));
    check_texts("recommend", MAX_ANSWER_TEXT_BYTES, texts)
}

#[cfg(test)]
mod tests {
    use super::*;

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
