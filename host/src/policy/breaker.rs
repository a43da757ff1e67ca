//! A circuit breaker per loaded policy, as Envoy's outlier detection ejects a host: a policy whose calls fail
//! [`TRIP_AFTER`] times in a row is taken out of the calls for a cooldown (5 s, doubling with each trip in a row up
//! to 5 minutes). Meanwhile every call is answered at once by the policy's failure mode, so a policy that spins
//! until its deadline costs that deadline a few times, not once per pod (a policy of one profile that spun made
//! every profile's pods wait p50 50 s). After the cooldown one call goes through (half open): a success closes the
//! breaker and forgets the trips, a failure opens it again for twice as long.

use std::sync::Mutex;
use std::time::Duration;
// tokio's clock, read through `crate::clock::instant`: cooldowns follow simulated time under `wasp simulate`.
use tokio::time::Instant;

/// Failures in a row that open the breaker.
pub const TRIP_AFTER: u32 = 5;
const FIRST_COOLDOWN: Duration = Duration::from_secs(5);
const MAX_COOLDOWN: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
struct State {
    failures_in_a_row: u32,
    /// Until when calls are refused; None while closed.
    open_until: Option<Instant>,
    /// The one call let through after a cooldown is under way.
    probing: bool,
    /// Trips since the breaker last closed (the cooldown doubles with each).
    trips_in_a_row: u32,
    /// Trips since the policy was loaded.
    trips: u64,
}

/// Where the breaker stands, for `/policies`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerStatus {
    /// `closed`, `open` or `half-open`.
    pub state: &'static str,
    pub failures_in_a_row: u32,
    pub trips: u64,
    /// Seconds until a call is let through again, while open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_seconds: Option<u64>,
}

/// The breaker refused a call: it is open for this much longer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Open {
    pub remaining: Duration,
}

/// What one call's outcome did to the breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    None,
    /// It opened for this long.
    Tripped(Duration),
    /// A call after a cooldown succeeded: closed again.
    Closed,
}

#[derive(Debug, Default)]
pub struct Breaker {
    state: Mutex<State>,
}

impl Breaker {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a call may go to the policy at `now`: always while closed; after a cooldown, one call at a time.
    pub fn admit(&self, now: Instant) -> Result<(), Open> {
        let mut state = self.state();
        match state.open_until {
            None => Ok(()),
            Some(until) if now < until => Err(Open { remaining: until - now }),
            Some(_) if state.probing => Err(Open { remaining: Duration::ZERO }),
            Some(_) => {
                state.probing = true;
                Ok(())
            }
        }
    }

    /// The outcome of a call [`admit`](Self::admit) let through.
    pub fn record(&self, succeeded: bool, now: Instant) -> Change {
        let mut state = self.state();
        let probe = std::mem::take(&mut state.probing);
        if succeeded {
            state.failures_in_a_row = 0;
            if state.open_until.take().is_some() {
                state.trips_in_a_row = 0;
                return Change::Closed;
            }
            return Change::None;
        }
        state.failures_in_a_row = state.failures_in_a_row.saturating_add(1);
        // A failed probe opens it again at once; a closed breaker opens after TRIP_AFTER failures in a row.
        // Calls admitted before it opened may still end failing: they extend nothing.
        let trips = if probe { true } else { state.open_until.is_none() && state.failures_in_a_row >= TRIP_AFTER };
        if !trips {
            return Change::None;
        }
        let cooldown = FIRST_COOLDOWN.saturating_mul(1u32.checked_shl(state.trips_in_a_row).unwrap_or(u32::MAX)).min(MAX_COOLDOWN);
        state.trips_in_a_row = state.trips_in_a_row.saturating_add(1);
        state.trips += 1;
        state.open_until = Some(now + cooldown);
        Change::Tripped(cooldown)
    }

    pub fn status(&self, now: Instant) -> BreakerStatus {
        let state = self.state();
        let (name, retry) = match state.open_until {
            None => ("closed", None),
            Some(until) if now < until => ("open", Some((until - now).as_secs())),
            Some(_) => ("half-open", None),
        };
        BreakerStatus { state: name, failures_in_a_row: state.failures_in_a_row, trips: state.trips, retry_in_seconds: retry }
    }

    /// Whether calls are refused now.
    pub fn is_open(&self, now: Instant) -> bool {
        self.state().open_until.is_some_and(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_open_it_a_cooldown_lets_one_call_try_and_trips_in_a_row_double_it() {
        let breaker = Breaker::default();
        let start = Instant::now();
        for _ in 0..TRIP_AFTER - 1 {
            assert_eq!(breaker.admit(start), Ok(()));
            assert_eq!(breaker.record(false, start), Change::None);
        }
        assert_eq!(breaker.record(true, start), Change::None, "a success resets the count");
        for _ in 0..TRIP_AFTER - 1 {
            breaker.record(false, start);
        }
        assert_eq!(breaker.record(false, start), Change::Tripped(Duration::from_secs(5)));
        assert_eq!(breaker.admit(start + Duration::from_secs(1)), Err(Open { remaining: Duration::from_secs(4) }));
        assert_eq!(breaker.status(start + Duration::from_secs(1)).state, "open");
        let later = start + Duration::from_secs(5);
        assert_eq!(breaker.admit(later), Ok(()), "the cooldown is over: one call tries");
        assert!(breaker.admit(later).is_err(), "only one at a time");
        assert_eq!(breaker.record(false, later), Change::Tripped(Duration::from_secs(10)), "a failed try opens it twice as long");
        let later = later + Duration::from_secs(10);
        assert_eq!(breaker.admit(later), Ok(()));
        assert_eq!(breaker.record(true, later), Change::Closed);
        assert_eq!(breaker.status(later), BreakerStatus { state: "closed", failures_in_a_row: 0, trips: 2, retry_in_seconds: None });
        for _ in 0..TRIP_AFTER {
            breaker.record(false, later);
        }
        assert!(breaker.is_open(later), "closed again, the cooldown starts over at 5 s");
        assert_eq!(breaker.admit(later + Duration::from_secs(5)), Ok(()));
    }

    #[test]
    fn the_cooldown_stops_doubling_at_five_minutes() {
        let breaker = Breaker::default();
        let mut now = Instant::now();
        for _ in 0..TRIP_AFTER {
            breaker.record(false, now);
        }
        let mut last = Duration::ZERO;
        for _ in 0..12 {
            now += Duration::from_secs(600);
            breaker.admit(now).unwrap();
            if let Change::Tripped(cooldown) = breaker.record(false, now) {
                last = cooldown;
            }
        }
        assert_eq!(last, MAX_COOLDOWN);
    }
}
