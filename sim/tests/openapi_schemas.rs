//! `sim/openapi/schemas.json` holds the OpenAPI v3 component schemas of every kind the simulator serves, generated
//! from k8s-openapi's schemars descriptions (which carry the Kubernetes field documentation and `required` lists).
//! The simulator embeds the file (no schemars at run time); this test keeps it current:
//! `WASP_SIM_REGENERATE_OPENAPI=1 cargo test -p wasp-sim --test openapi_schemas` rewrites it.

use k8s_openapi::api::{admissionregistration, apps, autoscaling, coordination, core, events, policy, rbac, storage};
use schemars::{generate::SchemaSettings, JsonSchema};
use serde_json::{json, Map, Value};

fn generate() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut roots = Map::new();
    macro_rules! root {
        ($($key:literal => $type:ty),* $(,)?) => {$(
            generator.subschema_for::<$type>();
            roots.insert($key.to_string(), json!(<$type as JsonSchema>::schema_name()));
        )*};
    }
    root! {
        "v1/Namespace" => core::v1::Namespace,
        "v1/Node" => core::v1::Node,
        "v1/Pod" => core::v1::Pod,
        "v1/Event" => core::v1::Event,
        "v1/ConfigMap" => core::v1::ConfigMap,
        "v1/Secret" => core::v1::Secret,
        "v1/ServiceAccount" => core::v1::ServiceAccount,
        "v1/Service" => core::v1::Service,
        "v1/Endpoints" => core::v1::Endpoints,
        "v1/PersistentVolumeClaim" => core::v1::PersistentVolumeClaim,
        "v1/PersistentVolume" => core::v1::PersistentVolume,
        "storage.k8s.io/v1/StorageClass" => storage::v1::StorageClass,
        "v1/Binding" => core::v1::Binding,
        "events.k8s.io/v1/Event" => events::v1::Event,
        "coordination.k8s.io/v1/Lease" => coordination::v1::Lease,
        "apps/v1/Deployment" => apps::v1::Deployment,
        "apps/v1/ReplicaSet" => apps::v1::ReplicaSet,
        "apps/v1/StatefulSet" => apps::v1::StatefulSet,
        "policy/v1/PodDisruptionBudget" => policy::v1::PodDisruptionBudget,
        "policy/v1/Eviction" => policy::v1::Eviction,
        "autoscaling/v1/Scale" => autoscaling::v1::Scale,
        "autoscaling/v2/HorizontalPodAutoscaler" => autoscaling::v2::HorizontalPodAutoscaler,
        "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration" => admissionregistration::v1::MutatingWebhookConfiguration,
        "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration" => admissionregistration::v1::ValidatingWebhookConfiguration,
        "apiextensions.k8s.io/v1/CustomResourceDefinition" => k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        "rbac.authorization.k8s.io/v1/ClusterRole" => rbac::v1::ClusterRole,
        "rbac.authorization.k8s.io/v1/ClusterRoleBinding" => rbac::v1::ClusterRoleBinding,
        "rbac.authorization.k8s.io/v1/Role" => rbac::v1::Role,
        "rbac.authorization.k8s.io/v1/RoleBinding" => rbac::v1::RoleBinding,
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({"roots": roots, "schemas": schemas})
}

#[test]
fn embedded_schemas_are_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/schemas.json");
    let generated = serde_json::to_string(&generate()).unwrap() + "\n";
    if std::env::var_os("WASP_SIM_REGENERATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let embedded = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(embedded == generated, "{} is stale: rerun with WASP_SIM_REGENERATE_OPENAPI=1", path.display());
}
