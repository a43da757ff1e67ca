//! The `Autoscaler` custom resource (`wasp.dev/v1alpha1`): a HorizontalPodAutoscaler v2 spec plus the policy
//! that decides, and a status that reads like the HPA's plus what the host needs to survive a restart (recent
//! recommendations and scale events, for stabilization and rate limits). The CRD in `manifests/` is generated
//! from these types (`wasp crd`), never written by hand.

use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerCondition, MetricSpec, MetricStatus};
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

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
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
    #[serde(default)]
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
