//! The install in manifests/: every document is a valid object, the Deployment mounts the policies as a
//! directory that can update (no subPath) where the configuration expects them, the configuration is valid, the
//! RBAC grants what the host does, and the examples ask for a profile that exists.

mod common;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde::Deserialize;
use std::collections::BTreeMap;
use wasp::config::HostConfig;

/// Every document of every YAML file under manifests/, by kind.
fn documents() -> BTreeMap<String, Vec<serde_yaml::Value>> {
    let mut by_kind: BTreeMap<String, Vec<serde_yaml::Value>> = BTreeMap::new();
    let root = common::repo_root().join("manifests");
    let mut files = Vec::new();
    for directory in [root.clone(), root.join("examples"), root.join("cert-manager")] {
        for entry in std::fs::read_dir(&directory).unwrap().flatten() {
            if entry.path().extension().is_some_and(|extension| extension == "yaml") {
                files.push(entry.path());
            }
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let kind = value["kind"].as_str().unwrap_or_else(|| panic!("{}: a document without kind", file.display())).to_string();
            by_kind.entry(kind).or_default().push(value);
        }
    }
    by_kind
}

fn typed<T: serde::de::DeserializeOwned>(value: &serde_yaml::Value) -> T {
    serde_yaml::from_value(value.clone()).unwrap_or_else(|error| panic!("{error}: {value:?}"))
}

fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|rule| {
        rule.api_groups.as_ref().is_some_and(|groups| groups.iter().any(|g| g == group))
            && rule.resources.as_ref().is_some_and(|resources| resources.iter().any(|r| r == resource))
            && rule.verbs.iter().any(|v| v == verb)
    })
}

#[test]
fn the_install_is_consistent() {
    let documents = documents();
    let config_maps: Vec<ConfigMap> = documents["ConfigMap"].iter().map(typed).collect();
    let deployment: Deployment = typed(&documents["Deployment"].iter().find(|d| d["metadata"]["name"] == "wasp-scheduler").unwrap().clone());
    let pod_spec = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod_spec.containers[0];
    let mounts = container.volume_mounts.as_ref().unwrap();
    assert!(mounts.iter().all(|mount| mount.sub_path.is_none()), "subPath mounts never update");
    let mount_of = |volume: &str| mounts.iter().find(|mount| mount.name == volume).unwrap().mount_path.clone();

    // The configuration is where --config points, valid, and reads policies where they are mounted.
    let args = container.args.as_ref().unwrap();
    let config_arg = &args[args.iter().position(|arg| arg == "--config").unwrap() + 1];
    let config_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "config").unwrap();
    let config_map_name = config_volume.config_map.as_ref().unwrap().name.clone();
    let config_map = config_maps.iter().find(|map| map.metadata.name.as_deref() == Some(config_map_name.as_str())).unwrap();
    let (key, text) = config_map.data.as_ref().unwrap().iter().next().unwrap();
    assert_eq!(config_arg, &format!("{}/{key}", mount_of("config")));
    let config = HostConfig::parse(text).unwrap();
    assert_eq!(config.policy_dir.to_str().unwrap(), mount_of("policies"));

    // The policies volume gathers the ConfigMaps `wasp configmap --split` prints, and the default set fits in them.
    let policies_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "policies").unwrap();
    let sources = policies_volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let names: Vec<String> = sources.iter().map(|source| source.config_map.as_ref().unwrap().name.clone()).collect();
    assert_eq!(names[0], "wasp-policies-1");
    let default_set: u64 = std::fs::read_dir(common::repo_root().join("plugins/out")).unwrap().flatten().map(|entry| entry.metadata().unwrap().len()).sum();
    assert!(default_set <= names.len() as u64 * (1 << 20) * 3 / 4, "{default_set} bytes of policies need more ConfigMaps than the volume lists");

    // RBAC: what the scheduler calls, and the Lease in the namespace the configuration names.
    let cluster_role: ClusterRole = typed(&documents["ClusterRole"][0]);
    let rules = cluster_role.rules.unwrap();
    for (resource, verb) in [("nodes", "list"), ("nodes", "watch"), ("pods", "list"), ("pods", "watch"), ("pods/binding", "create"), ("pods/status", "patch"), ("events", "create"), ("events", "patch")] {
        assert!(allows(&rules, "", resource, verb), "the ClusterRole does not allow {verb} {resource}");
    }
    assert!(!allows(&rules, "", "pods", "delete") && !allows(&rules, "", "secrets", "get"), "least privilege");
    if config.rescheduler.is_some() {
        assert!(allows(&rules, "", "pods/eviction", "create"), "the rescheduler evicts through the Eviction API");
        assert!(allows(&rules, "policy", "poddisruptionbudgets", "list"), "the rescheduler plans within the budgets");
    }
    if config.autoscaler.is_some() {
        assert!(allows(&rules, "wasp.dev", "autoscalers", "list") && allows(&rules, "wasp.dev", "autoscalers/status", "patch"));
        for scale in ["deployments/scale", "statefulsets/scale", "replicasets/scale"] {
            assert!(allows(&rules, "apps", scale, "get") && allows(&rules, "apps", scale, "update"), "the autoscaler changes replicas through {scale}");
        }
        assert!(!allows(&rules, "apps", "deployments", "update"), "never the workloads themselves");
        assert!(allows(&rules, "autoscaling", "horizontalpodautoscalers", "list"), "conflicts with HPAs are checked");
        let crd = &documents["CustomResourceDefinition"][0];
        assert_eq!(crd["metadata"]["name"], "autoscalers.wasp.dev");
    }
    let role: Role = typed(&documents["Role"][0]);
    assert_eq!(role.metadata.namespace.as_deref(), Some(config.leader_election.lease_namespace.as_str()));
    let role_rules = role.rules.unwrap();
    for verb in ["create", "get", "update"] {
        assert!(allows(&role_rules, "coordination.k8s.io", "leases", verb), "the Role does not allow {verb} leases");
    }
    assert!(role_rules.iter().filter_map(|rule| rule.resource_names.as_ref()).flatten().all(|name| *name == config.leader_election.lease_name));

    // Webhooks: fail open and fast, never sent kube-system or wasp's own pods, called only for pods that may
    // concern them, through the Service onto the container's webhook port, with the certificate mounted where
    // `wasp run` reads it; the host may watch namespaces.
    assert!(allows(&rules, "", "namespaces", "watch"), "the webhooks read namespaces' scheduler choice");
    let service: k8s_openapi::api::core::v1::Service = typed(documents["Service"].iter().find(|d| d["metadata"]["name"] == "wasp-webhook").unwrap());
    let service_port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    let webhook_port = container.ports.as_ref().unwrap().iter().find(|port| port.name.as_deref() == Some("webhook")).unwrap();
    assert_eq!(service_port.target_port, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("webhook".into())));
    let listen = &args[args.iter().position(|arg| arg == "--webhook-listen").unwrap() + 1];
    assert!(listen.ends_with(&format!(":{}", webhook_port.container_port)), "{listen}");
    let tls_volume = pod_spec.volumes.as_ref().unwrap().iter().find(|volume| volume.name == "webhook-tls").unwrap();
    assert_eq!(tls_volume.secret.as_ref().unwrap().secret_name.as_deref(), Some("wasp-webhook-tls"));
    for (flag, file) in [("--tls-cert-file", "tls.crt"), ("--tls-private-key-file", "tls.key")] {
        assert_eq!(args[args.iter().position(|arg| arg == flag).unwrap() + 1], format!("{}/{file}", mount_of("webhook-tls")));
    }
    for (kind, path) in [("ValidatingWebhookConfiguration", "/validate-pods"), ("MutatingWebhookConfiguration", "/mutate-pods")] {
        let configuration = &documents[kind][0];
        let webhook = &configuration["webhooks"][0];
        assert_eq!(webhook["failurePolicy"], "Ignore", "{kind}: wasp being down must never block pod creation");
        assert_eq!(webhook["sideEffects"], "None", "{kind}");
        assert!(webhook["timeoutSeconds"].as_i64().unwrap() <= 5, "{kind}: a short timeout");
        assert!(webhook["matchConditions"][0]["expression"].as_str().unwrap().contains("schedulerName"), "{kind}");
        let client = &webhook["clientConfig"]["service"];
        assert_eq!((client["name"].as_str(), client["namespace"].as_str(), client["path"].as_str()), (Some("wasp-webhook"), service.metadata.namespace.as_deref(), Some(path)), "{kind}");
        assert_eq!(client["port"].as_i64(), Some(i64::from(service_port.port)), "{kind}");
        let excluded = &webhook["namespaceSelector"]["matchExpressions"][0];
        assert_eq!((excluded["key"].as_str(), excluded["operator"].as_str()), (Some("kubernetes.io/metadata.name"), Some("NotIn")));
        for namespace in ["kube-system", config.leader_election.lease_namespace.as_str()] {
            assert!(excluded["values"].as_sequence().unwrap().iter().any(|value| value == namespace), "{kind} must not be sent {namespace}'s pods");
        }
        assert_eq!(configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "wasp-system/wasp-webhook");
    }
    let certificate = &documents["Certificate"][0];
    assert_eq!(certificate["spec"]["secretName"], "wasp-webhook-tls");
    assert!(certificate["spec"]["dnsNames"].as_sequence().unwrap().iter().any(|name| name == "wasp-webhook.wasp-system.svc"));

    // The examples ask for a profile of this configuration.
    let profiles: Vec<&str> = config.scheduler.profiles.iter().map(|profile| profile.scheduler_name.as_str()).collect();
    let mut example_scheduler_names = Vec::new();
    for deployment in documents["Deployment"].iter().filter(|d| d["metadata"]["name"] != "wasp-scheduler") {
        let deployment: Deployment = typed(deployment);
        example_scheduler_names.push(deployment.spec.unwrap().template.spec.unwrap().scheduler_name.unwrap());
    }
    for pod in &documents["Pod"] {
        example_scheduler_names.push(typed::<Pod>(pod).spec.unwrap().scheduler_name.unwrap());
    }
    assert!(!example_scheduler_names.is_empty());
    assert!(example_scheduler_names.iter().all(|name| profiles.contains(&name.as_str())), "{example_scheduler_names:?} vs {profiles:?}");
}
