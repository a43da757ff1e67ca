//! `events.k8s.io/v1` and core/v1 events are two views of one store, as in kube-apiserver: events are stored as
//! core/v1 objects and converted on the way in and out (`pkg/apis/events/v1/conversion.go`): note <-> message,
//! regarding <-> involvedObject, reportingController <-> reportingComponent, deprecatedSource <-> source,
//! deprecatedCount <-> count, deprecatedFirstTimestamp/deprecatedLastTimestamp <-> firstTimestamp/lastTimestamp.

use crate::resources::{self, ResourceType};
use serde_json::{Map, Value};

/// (core/v1 field, events.k8s.io/v1 field) pairs that only change name.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
];

/// Where objects of `resource` are stored: core/v1 events for both event APIs, the resource itself otherwise.
pub fn storage(resource: &'static ResourceType) -> &'static ResourceType {
    if is_events_v1(resource) {
        resources::find("", "v1", "events").expect("core events are served")
    } else {
        resource
    }
}

pub fn is_events_v1(resource: &ResourceType) -> bool {
    resource.group == "events.k8s.io" && resource.kind == "Event"
}

fn rename(object: &Value, from_core: bool, api_version: &str) -> Value {
    let Some(map) = object.as_object() else { return object.clone() };
    let mut out = Map::new();
    for (key, value) in map {
        let renamed = RENAMED.iter().find_map(|(core, events)| {
            if from_core && key == core {
                Some(*events)
            } else if !from_core && key == events {
                Some(*core)
            } else {
                None
            }
        });
        out.insert(renamed.unwrap_or(key).to_string(), value.clone());
    }
    out.insert("apiVersion".into(), Value::from(api_version));
    out.insert("kind".into(), Value::from("Event"));
    Value::Object(out)
}

/// A stored core/v1 event as events.k8s.io/v1 shows it. `eventTime` is filled from the legacy timestamps when
/// the event has none (kube-apiserver leaves it null, which the Python client's `EventsV1Event` refuses).
pub fn to_events_v1(core: &Value) -> Value {
    let mut event = rename(core, true, "events.k8s.io/v1");
    if event.get("eventTime").is_none_or(Value::is_null) {
        let at = ["deprecatedLastTimestamp", "deprecatedFirstTimestamp"]
            .iter()
            .find_map(|field| event.get(*field).and_then(Value::as_str))
            .or_else(|| event.pointer("/metadata/creationTimestamp").and_then(Value::as_str))
            .map(micro_time);
        if let Some(at) = at {
            event["eventTime"] = Value::from(at);
        }
    }
    event
}

/// An events.k8s.io/v1 event as core/v1 stores it.
pub fn to_core(events_v1: &Value) -> Value {
    rename(events_v1, false, "v1")
}

/// `2026-01-01T00:00:00Z` as a MicroTime, `2026-01-01T00:00:00.000000Z`.
fn micro_time(time: &str) -> String {
    match time.strip_suffix('Z') {
        Some(seconds) if !seconds.contains('.') => format!("{seconds}.000000Z"),
        _ => time.to_string(),
    }
}

/// How `resource` shows a stored object.
/// The object as `resource` shows it: borrowed as stored, except for events.k8s.io/v1 (a converted copy). Every
/// watch line and response goes through here: a copy of every pod per watcher would cost more than the rest of
/// the request.
pub fn view<'a>(resource: &ResourceType, stored: &'a Value) -> std::borrow::Cow<'a, Value> {
    if is_events_v1(resource) {
        std::borrow::Cow::Owned(to_events_v1(stored))
    } else {
        std::borrow::Cow::Borrowed(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn views_round_trip() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "Successfully assigned", "reason": "Scheduled",
            "source": {"component": "wasp"}, "reportingComponent": "wasp", "count": 2, "type": "Normal",
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
        });
        let events_v1 = to_events_v1(&core);
        assert_eq!(events_v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(events_v1["regarding"]["name"], "p");
        assert_eq!(events_v1["note"], "Successfully assigned");
        assert_eq!(events_v1["reportingController"], "wasp");
        assert_eq!(events_v1["deprecatedSource"]["component"], "wasp");
        assert_eq!(events_v1["deprecatedCount"], 2);
        assert_eq!(events_v1["eventTime"], "2026-01-01T00:01:00.000000Z");
        let mut back = to_core(&events_v1);
        back.as_object_mut().unwrap().remove("eventTime");
        assert_eq!(back, core);
    }
}
