//! Label selectors: the string form a `scale` subresource reports (`app=web,tier in (a,b),!legacy`) and the API
//! form tenants write in pods, budgets and Autoscalers. Parsed or refused, and a parsed one matches labels,
//! without a panic.
#![no_main]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let labels: BTreeMap<String, String> =
        [("app", "web"), ("tier", "a"), ("", "")].into_iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(selector) = wasp::autoscaler::metrics_source::parse_selector(text) {
            let _ = selector.selects(&labels);
        }
    }
    if let Ok(selector) = serde_json::from_slice::<LabelSelector>(data) {
        if let Ok(selector) = wasp::cluster::convert::label_selector("fuzzed object", "spec.selector", &selector) {
            let pairs: Vec<(String, String)> = labels.into_iter().collect();
            let _ = selector.matches(&pairs);
        }
    }
});
