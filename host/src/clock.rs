//! The host's wall clock: the system's, except under `wasp simulate`, where it is the simulated cluster's
//! ([`wasp_sim::clock`]: tokio's clock, paused and advanced whenever every task waits). What the loops date and
//! compare with the API server's timestamps asks it: an Autoscaler's scale times and stabilization windows, the
//! rescheduler's view of pod ages, the times of bindings, events and decision records.

use jiff::Timestamp;
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

/// Where the paused clock stands while the runtime's one thread waits for work off it (see [`instant`]).
static STANDING_AT: std::sync::Mutex<Option<tokio::time::Instant>> = std::sync::Mutex::new(None);

/// Now on tokio's clock, on any thread. Under `wasp simulate`, work the runtime hands to other threads
/// ([`crate::runtime::off_async_worker`] on its current-thread runtime, and the thread pools that work uses: the
/// scheduler's filtering threads, the rescheduler's strategies) has no runtime at hand to read the paused clock from;
/// but the runtime's one thread waits for that work, so the clock stands where it stood when the work began.
pub fn instant() -> tokio::time::Instant {
    if SIMULATED.load(Ordering::Relaxed) {
        if let Some(now) = *STANDING_AT.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            return now;
        }
    }
    tokio::time::Instant::now()
}

/// Runs `work` with [`instant`] standing at `now` everywhere, when the clock is simulated (otherwise just runs it).
pub fn standing_at<R>(now: tokio::time::Instant, work: impl FnOnce() -> R) -> R {
    if !SIMULATED.load(Ordering::Relaxed) {
        return work();
    }
    let set = |at| *STANDING_AT.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = at;
    set(Some(now));
    let result = work();
    set(None);
    result
}
