//! The simulator's wall clock: tokio's clock, anchored to the system's at first use. It is real time while the
//! runtime's clock runs (`wasp sim serve`, the tests), and simulated time when the runtime's clock is paused and
//! advanced whenever every task waits (`wasp simulate` runs a scenario's timeline so, faster than real time).
//! Every timestamp the simulator writes, and the load curves it serves, follow it; the host's clock follows it too
//! under `wasp simulate`, so both agree on the age of a pod and the time of a scale.

use jiff::{SignedDuration, Timestamp};
use std::sync::OnceLock;

static ANCHOR: OnceLock<(Timestamp, tokio::time::Instant)> = OnceLock::new();

/// Now, as the simulated cluster sees it.
pub fn now() -> Timestamp {
    let (wall, instant) = ANCHOR.get_or_init(|| (Timestamp::now(), tokio::time::Instant::now()));
    let elapsed = SignedDuration::try_from(instant.elapsed()).unwrap_or(SignedDuration::MAX);
    wall.checked_add(elapsed).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    #[tokio::test(start_paused = true)]
    async fn it_follows_a_paused_clock() {
        let before = super::now();
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        let after = super::now();
        let hour = after.duration_since(before).as_secs_f64();
        assert!((3600.0..3601.0).contains(&hour), "an hour of simulated time passed: {hour} s");
    }
}
