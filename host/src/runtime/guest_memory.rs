//! One budget for the linear memories and tables of every policy instance together. Each instance's cap
//! (`memoryMib`) bounds one policy; this bounds the host: `memoryMib` × instances × policies can be ten times a
//! container's memory limit, and past that limit the kernel kills the whole process, not the policy that grew.
//! A growth the budget cannot cover fails like one past the instance's cap: the call ends out of memory and the
//! policy's failure mode decides.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Left to the host itself (its cluster view, ~250 MiB at 50k pods) and to a policy compile, which runs in a
/// child process of the same container under its own 512 MiB cap.
const HOST_RESERVE: usize = 512 << 20;

#[derive(Debug)]
pub struct GuestMemory {
    /// Bytes all instances may hold together; `usize::MAX` when unbounded.
    budget: AtomicUsize,
    used: AtomicUsize,
}

impl Default for GuestMemory {
    fn default() -> Self {
        GuestMemory { budget: AtomicUsize::new(usize::MAX), used: AtomicUsize::new(0) }
    }
}

impl GuestMemory {
    /// `None`: no bound beyond each instance's own cap.
    pub fn set_budget(&self, bytes: Option<usize>) {
        self.budget.store(bytes.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    pub fn budget(&self) -> Option<usize> {
        Some(self.budget.load(Ordering::Relaxed)).filter(|budget| *budget != usize::MAX)
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` from the budget, or nothing when they do not fit.
    pub(super) fn take(&self, bytes: usize) -> bool {
        let budget = self.budget.load(Ordering::Relaxed);
        self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(bytes).filter(|total| *total <= budget)).is_ok()
    }

    pub(super) fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// The budget for a container whose memory limit is `limit`: all of it but [`HOST_RESERVE`], and at least half.
pub fn budget_for_container(limit: usize) -> usize {
    limit.saturating_sub(HOST_RESERVE).max(limit / 2)
}

/// This process's memory limit (cgroup v2 `memory.max`, else v1 `memory.limit_in_bytes`), if it has one.
pub fn container_memory_limit() -> Option<usize> {
    ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| text.trim().parse::<usize>().ok())
        // v1 says "no limit" with a huge number.
        .filter(|limit| *limit < usize::MAX / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_budget_is_refused_and_returned_bytes_are_free_again() {
        let memory = GuestMemory::default();
        assert!(memory.take(1 << 40), "unbounded by default");
        memory.give_back(1 << 40);
        memory.set_budget(Some(100));
        assert!(memory.take(60));
        assert!(!memory.take(41), "60 + 41 is over 100");
        assert_eq!(memory.used(), 60, "a refused growth takes nothing");
        assert!(memory.take(40));
        memory.give_back(60);
        assert!(memory.take(60));
    }

    #[test]
    fn a_container_keeps_a_reserve_for_the_host() {
        assert_eq!(budget_for_container(1536 << 20), 1024 << 20, "the shipped Deployment's limit");
        assert_eq!(budget_for_container(512 << 20), 256 << 20, "at least half for the policies");
    }
}
