//! The `Autoscaler` custom resource (`wasp.dev/v1alpha1`): a HorizontalPodAutoscaler v2 spec plus the policy
//! that decides, and a status that reads like the HPA's plus what the host needs to survive a restart (recent
//! recommendations and scale events, for stabilization and rate limits). The CRD in `manifests/` is generated
//! from these types (`wasp crd`), never written by hand.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerCondition, MetricSpec, MetricStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The policy an Autoscaler decides with when it names none: the HPA's algorithm.
pub const DEFAULT_POLICY: &str = "hpa";

/// Scales a workload with a WASM scale policy inside the HPA's safety rules.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "wasp.dev",
    version = "v1alpha1",
    kind = "Autoscaler",
    namespaced,
    status = "AutoscalerStatus",
    shortname = "was",
    category = "wasp",
    printcolumn = r#"{"name": "Reference", "type": "string", "jsonPath": ".status.reference"}"#,
    printcolumn = r#"{"name": "Policy", "type": "string", "jsonPath": ".status.policy"}"#,
    printcolumn = r#"{"name": "Targets", "type": "string", "jsonPath": ".status.targets"}"#,
    printcolumn = r#"{"name": "MinPods", "type": "integer", "jsonPath": ".spec.minReplicas"}"#,
    printcolumn = r#"{"name": "MaxPods", "type": "integer", "jsonPath": ".spec.maxReplicas"}"#,
    printcolumn = r#"{"name": "Replicas", "type": "integer", "jsonPath": ".status.currentReplicas"}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.lastReason", "priority": 1}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerSpec {
    /// The workload to scale: a Deployment, StatefulSet, ReplicaSet or anything with a `scale` subresource.
    pub scale_target_ref: CrossVersionObjectReference,
    /// At least this many replicas (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    pub max_replicas: i32,
    /// What to scale on, as in a HorizontalPodAutoscaler v2: Resource, Pods, Object and External metrics.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricSpec>,
    /// Stabilization windows and rate limits, with the HPA's semantics and defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
    /// The scale policy that decides, one of the host configuration's `autoscaler.policies` (default `hpa`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Settings for this Autoscaler's calls, instead of the policy's own from the host configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub settings: Option<serde_json::Value>,
    /// Replicas to run after `failureThreshold` runs in a row in which no metric could be read (KEDA's fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

impl AutoscalerSpec {
    /// The settings of this Autoscaler's policy calls, None for the policy's own (`configured`) as they are:
    /// `settings` if given, and the behavior's tolerances (`scaleUp.tolerance`, `scaleDown.tolerance`, KEP-4951)
    /// as the policy's `tolerance` setting, each side the behavior leaves out keeping the policy's. A policy with
    /// no `tolerance` setting refuses them if it denies unknown settings (the shipped ones do), and the Autoscaler
    /// says so.
    pub fn call_settings(&self, configured: &str) -> Result<Option<String>, String> {
        let side = |rules: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>, name: &str| -> Result<Option<f64>, String> {
            let Some(quantity) = rules.and_then(|rules| rules.tolerance.as_ref()) else { return Ok(None) };
            let milli = wasp_sdk::quantity::parse_milli(&quantity.0).map_err(|error| format!("spec.behavior.{name}.tolerance: {error}"))?;
            Ok(Some(milli as f64 / 1000.0))
        };
        let behavior = self.behavior.as_ref();
        let up = side(behavior.and_then(|behavior| behavior.scale_up.as_ref()), "scaleUp")?;
        let down = side(behavior.and_then(|behavior| behavior.scale_down.as_ref()), "scaleDown")?;
        if up.is_none() && down.is_none() {
            return Ok(self.settings.as_ref().map(|settings| settings.to_string()));
        }
        let mut settings = self
            .settings
            .clone()
            .or_else(|| serde_json::from_str(configured).ok())
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}));
        let current = settings["tolerance"].clone();
        let kept = |name: &str| current.as_f64().or_else(|| current[name].as_f64());
        let mut each = serde_json::Map::new();
        for (name, value) in [("scaleUp", up.or_else(|| kept("scaleUp"))), ("scaleDown", down.or_else(|| kept("scaleDown")))] {
            if let Some(value) = value {
                each.insert(name.to_string(), serde_json::json!(value));
            }
        }
        settings["tolerance"] = serde_json::Value::Object(each);
        Ok(Some(settings.to_string()))
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    #[schemars(extend("format" = "int32"))]
    pub failure_threshold: u32,
    pub replicas: i32,
}

/// A recommendation the policy gave, before the envelope: the stabilization window looks back over these.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct TimedRecommendation {
    pub time: Time,
    pub replicas: i32,
}

/// A scale the host made: the rate limits count the replicas added or removed within their periods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ScaleEvent {
    pub time: Time,
    /// Replicas added (positive) or removed (negative).
    pub change: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Deployment/web`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The policy that decided last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// `cpu: 45%/50%, qps: 12/10`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<String>,
    #[serde(default)]
    pub current_replicas: i32,
    #[serde(default)]
    pub desired_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub current_metrics: Vec<MetricStatus>,
    /// AbleToScale, ScalingActive and ScalingLimited, with the HPA's reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<HorizontalPodAutoscalerCondition>,
    /// The policy's reason for its last recommendation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recommendations: Vec<TimedRecommendation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scale_events: Vec<ScaleEvent>,
    /// Runs in a row in which no metric could be read.
    // The API server knows no `uint32` format and warns on every apply of the CRD (helm and kubectl print it): the
    // CRD says int32, with the minimum 0 the type gives.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub metric_failures: u32,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// The CRD as YAML, for `manifests/` and `wasp crd`.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = Autoscaler::crd();
    format!("# Generated by `wasp crd` from host/src/autoscaler/resource.rs: do not edit.\n{}", serde_yaml::to_string(&crd).expect("a CRD serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> AutoscalerSpec {
        serde_yaml::from_str(&format!("scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\nmaxReplicas: 5\n{extra}")).unwrap()
    }

    #[test]
    fn behavior_tolerances_become_the_policy_tolerance_over_its_other_settings() {
        // No tolerance in the behavior: the Autoscaler's settings if it has any, else the policy's own.
        assert_eq!(spec("").call_settings(r#"{"tolerance": 0.2}"#), Ok(None));
        assert_eq!(spec("settings: {combine: min}").call_settings("").unwrap().as_deref(), Some(r#"{"combine":"min"}"#));
        // One side from the behavior, the other kept from the policy's settings (a number for both sides).
        let up = spec("behavior: {scaleUp: {tolerance: 50m}}");
        let settings: serde_json::Value = serde_json::from_str(&up.call_settings(r#"{"tolerance": 0.2, "combine": "min"}"#).unwrap().unwrap()).unwrap();
        assert_eq!(settings, serde_json::json!({"combine": "min", "tolerance": {"scaleUp": 0.05, "scaleDown": 0.2}}));
        // A side neither gives is left to the policy's default.
        let down = spec("behavior: {scaleDown: {tolerance: '0.3'}}");
        assert_eq!(down.call_settings("").unwrap().as_deref(), Some(r#"{"tolerance":{"scaleDown":0.3}}"#));
        let bad = spec("behavior: {scaleDown: {tolerance: lots}}");
        assert!(bad.call_settings("").unwrap_err().starts_with("spec.behavior.scaleDown.tolerance: "));
    }

    #[test]
    fn the_shipped_crd_is_the_generated_one() {
        let shipped = include_str!("../../../manifests/05-crd-autoscaler.yaml");
        assert_eq!(shipped, crd_yaml(), "regenerate with: cargo run -p wasp -- crd > manifests/05-crd-autoscaler.yaml");
    }

    #[test]
    fn a_spec_as_users_write_it_parses() {
        let yaml = "apiVersion: wasp.dev/v1alpha1\nkind: Autoscaler\nmetadata: {name: web, namespace: shop}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  maxReplicas: 10\n  policy: all-metrics-agree\n  settings: {priority: [cpu]}\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}\n  behavior: {scaleDown: {stabilizationWindowSeconds: 60}}\n";
        let autoscaler: Autoscaler = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(autoscaler.spec.max_replicas, 10);
        assert_eq!(autoscaler.spec.metrics[0].resource.as_ref().unwrap().target.average_utilization, Some(50));
        assert_eq!(autoscaler.spec.settings, Some(serde_json::json!({"priority": ["cpu"]})));
    }
}
