//! The host's wall clock: the system's, except under `wasp simulate`, where it is the simulated cluster's
//! ([`wasp_sim::clock`]: tokio's clock, paused and advanced whenever every task waits). What the loops date and
//! compare with the API server's timestamps asks it: an Autoscaler's scale times and stabilization windows, the
//! rescheduler's view of pod ages, the times of bindings, events and decision records.

use jiff::Timestamp;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

static SIMULATED: AtomicBool = AtomicBool::new(false);

/// Now.
pub fn now() -> Timestamp {
    #[cfg(feature = "sim")]
    if SIMULATED.load(Ordering::Relaxed) {
        return wasp_sim::clock::now();
    }
    Timestamp::now()
}

/// From now on, in this process, the wall clock is the simulated cluster's.
#[cfg(feature = "sim")]
pub fn follow_the_simulator() {
    SIMULATED.store(true, Ordering::Relaxed);
}

/// Now, as the API server writes a `Time` (seconds).
pub fn now_rfc3339() -> String {
    now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

thread_local! {
    static STANDING_AT: Cell<Option<tokio::time::Instant>> = const { Cell::new(None) };
}

/// Now on tokio's clock, also on a thread that works for the runtime off it ([`crate::runtime::off_async_worker`]
/// on a current-thread runtime): there, no runtime is at hand to read its clock, but the runtime's one thread waits
/// for that work, so a paused clock stands where it stood when the work began (see [`standing_at`]).
pub fn instant() -> tokio::time::Instant {
    STANDING_AT.get().unwrap_or_else(tokio::time::Instant::now)
}

/// Runs `work` on this thread with [`instant`] standing at `now`.
pub fn standing_at<R>(now: tokio::time::Instant, work: impl FnOnce() -> R) -> R {
    STANDING_AT.set(Some(now));
    let result = work();
    STANDING_AT.set(None);
    result
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn work_off_the_runtime_sees_the_paused_clock_where_it_stands() {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let now = tokio::time::Instant::now();
        let seen = crate::runtime::off_async_worker(super::instant);
        assert_eq!(seen, now, "an hour of simulated time, not the real clock");
    }
}
