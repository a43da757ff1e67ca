//! What one policy instance may use: time per call (by operation) and linear memory.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget of a call into the guest, enforced by epoch interruption: describe, configure, apply.
    pub deadline: Duration,
    pub filter_deadline: Duration,
    pub score_deadline: Duration,
    /// `propose` looks at the whole cluster at once.
    pub evict_deadline: Duration,
    pub scale_deadline: Duration,
    /// Cap on the instance's linear memory; growing past it traps.
    pub memory_bytes: usize,
}

impl Limits {
    /// The deadline of one operation (named as in [`crate::runtime::CallError`]).
    pub fn deadline_of(&self, operation: &str) -> Duration {
        match operation {
            "filter" => self.filter_deadline,
            "score" => self.score_deadline,
            "propose" => self.evict_deadline,
            "recommend" => self.scale_deadline,
            _ => self.deadline,
        }
    }

    /// Every operation with the same deadline.
    pub fn uniform(deadline: Duration, memory_bytes: usize) -> Limits {
        Limits { deadline, filter_deadline: deadline, score_deadline: deadline, evict_deadline: deadline, scale_deadline: deadline, memory_bytes }
    }
}

impl Default for Limits {
    fn default() -> Self {
        let per_pod = Duration::from_millis(500);
        Limits { evict_deadline: Duration::from_secs(5), scale_deadline: Duration::from_secs(1), ..Limits::uniform(per_pod, 128 << 20) }
    }
}
