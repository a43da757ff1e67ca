//! `scheduled`: replicas by time of day and weekday (KEDA's cron scaler as a policy). While a schedule's window
//! is open the target runs at least its `replicas`; the metrics, if the Autoscaler has any, can ask for more
//! by the HPA's rule. Outside every window the metrics decide, or with none the target goes to `minReplicas`.
//! Times are in a fixed UTC offset: a component has no time zone database.

use serde::{Deserialize, Serialize};
use wasp_sdk::autoscaling::{check_tolerance, Proposals, Tolerance};
use wasp_sdk::types::{ScaleDecision, ScaleRequest};
use wasp_sdk::{NodeFacts, Policy, Scale};

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Days the window opens, `Mon` to `Sun`; empty for every day.
    #[serde(default)]
    pub days: Vec<String>,
    /// `HH:MM`; an `end` before `start` closes the window the next day.
    pub start: String,
    pub end: String,
    pub replicas: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// `+02:00`, `-05:30`: the offset from UTC the schedules are written in.
    pub utc_offset: String,
    pub schedules: Vec<Schedule>,
    pub tolerance: Tolerance,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { utc_offset: "+00:00".into(), schedules: Vec::new(), tolerance: Tolerance::default() }
    }
}

/// A schedule in minutes: days as a bit set (Monday = bit 0), the window as minutes of the day.
struct Window {
    days: u8,
    start: u32,
    end: u32,
    replicas: u32,
    label: String,
}

const MINUTES_PER_DAY: i64 = 24 * 60;

impl Window {
    /// Open at `minute` of the week (Monday 00:00 = 0)?
    fn is_open(&self, minute_of_week: i64) -> bool {
        let (day, minute) = (minute_of_week / MINUTES_PER_DAY, (minute_of_week % MINUTES_PER_DAY) as u32);
        let opens_on = |day: i64| self.days & (1 << day.rem_euclid(7)) != 0;
        if self.start <= self.end {
            opens_on(day) && (self.start..self.end).contains(&minute)
        } else {
            (opens_on(day) && minute >= self.start) || (opens_on(day - 1) && minute < self.end)
        }
    }
}

fn clock(text: &str, field: &str) -> Result<u32, String> {
    let parsed = text.split_once(':').and_then(|(hours, minutes)| {
        let (hours, minutes) = (hours.parse::<u32>().ok()?, minutes.parse::<u32>().ok()?);
        (hours < 24 && minutes < 60 && text.len() == 5).then_some(hours * 60 + minutes)
    });
    parsed.ok_or_else(|| format!("{field}: {text:?} is not a time HH:MM"))
}

fn offset_minutes(text: &str) -> Result<i64, String> {
    let error = || format!("utcOffset: {text:?} is not an offset like +02:00");
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1, &text[1..]),
        Some(b'-') => (-1, &text[1..]),
        _ => return Err(error()),
    };
    let minutes = clock(rest, "utcOffset").map_err(|_| error())?;
    if minutes > 14 * 60 {
        return Err(error());
    }
    Ok(sign * i64::from(minutes))
}

pub struct Scheduled {
    offset: i64,
    windows: Vec<Window>,
    tolerance: Tolerance,
}

impl Policy for Scheduled {
    type Settings = Settings;
    const NAME: &'static str = "scheduled";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "utcOffset: the schedules' offset from UTC, like +02:00 (default +00:00)\n\
        schedules: [{days: [Mon..Sun] (default every day), start: HH:MM, end: HH:MM, replicas}]\n\
        tolerance: relative change the metrics ignore, 0 to 1 (default 0.1), or {scaleUp, scaleDown} for each side";

    fn new(settings: Settings) -> Result<Self, String> {
        let offset = offset_minutes(&settings.utc_offset)?;
        let mut windows = Vec::new();
        for (index, schedule) in settings.schedules.iter().enumerate() {
            let field = format!("schedules[{index}]");
            let mut days = 0u8;
            for day in &schedule.days {
                let position = DAYS.iter().position(|name| name.eq_ignore_ascii_case(day));
                days |= 1 << position.ok_or_else(|| format!("{field}.days: {day:?} is not one of {}", DAYS.join(", ")))?;
            }
            let (start, end) = (clock(&schedule.start, &format!("{field}.start"))?, clock(&schedule.end, &format!("{field}.end"))?);
            if start == end {
                return Err(format!("{field}: start and end are both {}: the window would never open", schedule.start));
            }
            let label = format!("{}-{}", schedule.start, schedule.end);
            windows.push(Window { days: if days == 0 { 0x7f } else { days }, start, end, replicas: schedule.replicas, label });
        }
        check_tolerance(settings.tolerance)?;
        Ok(Scheduled { offset, windows, tolerance: settings.tolerance })
    }
}

impl Scale for Scheduled {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        // 1970-01-01 was a Thursday: shift so that the week starts on Monday.
        let local = request.now.div_euclid(60) + self.offset;
        let minute_of_week = (local + 3 * MINUTES_PER_DAY).rem_euclid(7 * MINUTES_PER_DAY);
        let open = self.windows.iter().filter(|window| window.is_open(minute_of_week)).max_by_key(|window| window.replicas);
        let current = request.current_replicas;
        let Proposals { proposals, mut details, failures } = Proposals::of(request, self.tolerance);
        let from_metrics = proposals.iter().map(|proposal| proposal.replicas).max();
        let floor = open.map_or(request.min_replicas, |window| window.replicas);
        let desired = match from_metrics {
            Some(wanted) if !failures.is_empty() && wanted < current => floor.max(current),
            Some(wanted) => floor.max(wanted),
            None if !request.metrics.is_empty() => floor.max(current),
            None => floor,
        };
        let schedule = match open {
            Some(window) => format!("schedule {} wants at least {}", window.label, window.replicas),
            None => "no schedule is open".to_string(),
        };
        details.extend(failures);
        details.push(schedule);
        Ok(ScaleDecision::horizontal(desired, details.join("; "), proposals))
    }
}

wasp_sdk::export_policy!(Scheduled);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::{scale_request, MetricBuilder};

    /// Monday 2026-11-30 at `hh:mm` UTC.
    fn monday(hours: i64, minutes: i64) -> i64 {
        1_795_996_800 + hours * 3600 + minutes * 60
    }

    fn decide(settings: &str, now: i64, current: u32, metrics: Vec<wasp_sdk::types::Metric>) -> ScaleDecision {
        let mut request = scale_request(current, 2, 50, metrics);
        request.now = now;
        build::<Scheduled>(settings).unwrap().recommend(&request).unwrap()
    }

    const OFFICE_HOURS: &str =
        r#"{"utcOffset": "+01:00", "schedules": [{"days": ["Mon", "Tue", "Wed", "Thu", "Fri"], "start": "08:00", "end": "18:00", "replicas": 10}]}"#;

    #[test]
    fn the_window_sets_a_floor_in_its_own_offset() {
        // 07:30 UTC is 08:30 at +01:00: open.
        let decision = decide(OFFICE_HOURS, monday(7, 30), 2, vec![]);
        assert_eq!(decision.desired_replicas, 10);
        assert_eq!(decision.reason, "schedule 08:00-18:00 wants at least 10");
        // 06:30 UTC is 07:30 local: closed, no metrics -> minReplicas.
        assert_eq!(decide(OFFICE_HOURS, monday(6, 30), 10, vec![]).desired_replicas, 2);
        // Sunday: closed.
        assert_eq!(decide(OFFICE_HOURS, monday(9, 0) - 86_400, 10, vec![]).desired_replicas, 2);
    }

    #[test]
    fn metrics_may_ask_for_more_than_the_schedule() {
        let busy = MetricBuilder::utilization("cpu", 50.0).ready(150.0).ready(150.0).ready(150.0).ready(150.0).build();
        assert_eq!(decide(OFFICE_HOURS, monday(9, 0), 4, vec![busy.clone()]).desired_replicas, 12, "ceil(3 * 4) > 10");
        assert_eq!(decide(OFFICE_HOURS, monday(20, 0), 4, vec![busy]).desired_replicas, 12);
        let idle = MetricBuilder::utilization("cpu", 50.0).ready(5.0).ready(5.0).build();
        assert_eq!(decide(OFFICE_HOURS, monday(9, 0), 2, vec![idle]).desired_replicas, 10);
    }

    #[test]
    fn a_window_past_midnight_belongs_to_its_start_day() {
        let night = r#"{"schedules": [{"days": ["Mon"], "start": "22:00", "end": "02:00", "replicas": 6}]}"#;
        assert_eq!(decide(night, monday(23, 0), 2, vec![]).desired_replicas, 6);
        assert_eq!(decide(night, monday(25, 0), 2, vec![]).desired_replicas, 6, "Tuesday 01:00");
        assert_eq!(decide(night, monday(1, 0), 2, vec![]).desired_replicas, 2, "Monday 01:00 belongs to Sunday");
    }

    #[test]
    fn settings_are_checked() {
        let error = |settings: &str| build::<Scheduled>(settings).err().unwrap();
        assert!(error(r#"{"utcOffset": "CET"}"#).contains("utcOffset"));
        assert!(error(r#"{"schedules": [{"start": "8:00", "end": "18:00", "replicas": 1}]}"#).contains("schedules[0].start"));
        assert!(error(r#"{"schedules": [{"days": ["Funday"], "start": "08:00", "end": "18:00", "replicas": 1}]}"#).contains("Funday"));
        assert!(error(r#"{"schedules": [{"start": "08:00", "end": "08:00", "replicas": 1}]}"#).contains("never open"));
    }
}
