//! What one policy instance may use: time per call and linear memory.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget of one call into the guest, enforced by epoch interruption.
    pub deadline: Duration,
    /// Cap on the instance's linear memory; growing past it traps.
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { deadline: Duration::from_millis(500), memory_bytes: 128 << 20 }
    }
}
