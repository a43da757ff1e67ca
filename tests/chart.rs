//! charts/wasp, rendered and linted by helm itself (tools/helm): the chart and manifests/ are one install, so a
//! test fails when they drift; every value reaches the objects it is for; the certificate the chart makes is one
//! the API server can verify; bad values are refused naming the value. Installing and upgrading it on the real
//! control plane is tests/real_cluster.rs's.

mod common;

use common::helm;
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use serde_yaml::Value;
use std::collections::BTreeMap;
use wasp::config::{AdmissionMode, HostConfig};

/// Labels the chart adds to manifests/'s (Helm's conventions): left out when the two are compared.
const CHART_LABELS: [&str; 4] = ["app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"];

/// An object's identity: kind, namespace and name.
type Key = (String, String, String);

fn key(object: &Value) -> Key {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    (text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

/// `object` as the comparison sees it: without the chart's labels (on the object and its pod template), and the
/// host configuration's text parsed (its comments and layout are the file's own).
fn comparable(mut object: Value) -> Value {
    let strip = |labels: &mut Value| {
        if let Some(labels) = labels.as_mapping_mut() {
            for label in CHART_LABELS {
                labels.remove(label);
            }
        }
    };
    strip(&mut object["metadata"]["labels"]);
    if let Some(template) = object.get_mut("spec").and_then(|spec| spec.get_mut("template")) {
        strip(&mut template["metadata"]["labels"]);
    }
    if object["kind"] == "ConfigMap" && object["metadata"]["name"] == "wasp-config" {
        let config: Value = serde_yaml::from_str(object["data"]["config.yaml"].as_str().unwrap()).unwrap();
        object["data"]["config.yaml"] = config;
    }
    object
}

fn by_key(objects: Vec<Value>) -> BTreeMap<Key, Value> {
    let mut keyed = BTreeMap::new();
    for object in objects {
        let key = key(&object);
        assert!(keyed.insert(key.clone(), comparable(object)).is_none(), "{key:?} twice");
    }
    keyed
}

/// The objects of manifests/'s install files (the Namespace left out: `helm install --create-namespace`), and of
/// the extra files named.
fn manifests(extra: &[&str]) -> BTreeMap<Key, Value> {
    let root = common::repo_root().join("manifests");
    let files = ["05-crd-autoscaler.yaml", "10-rbac.yaml", "20-config.yaml", "30-deployment.yaml", "40-webhooks.yaml"];
    let objects = files.iter().chain(extra).flat_map(|file| helm::objects(&std::fs::read_to_string(root.join(file)).unwrap())).collect();
    by_key(objects)
}

/// Where two installs differ, object by object.
fn assert_same(chart: &BTreeMap<Key, Value>, manifests: &BTreeMap<Key, Value>) {
    let only_chart: Vec<&Key> = chart.keys().filter(|key| !manifests.contains_key(*key)).collect();
    let only_manifests: Vec<&Key> = manifests.keys().filter(|key| !chart.contains_key(*key)).collect();
    assert!(only_chart.is_empty() && only_manifests.is_empty(), "only in the chart: {only_chart:?}; only in manifests/: {only_manifests:?}");
    for (key, object) in chart {
        assert_eq!(
            object,
            &manifests[key],
            "{key:?} differs between the chart and manifests/:\nchart:\n{}\nmanifests/:\n{}",
            serde_yaml::to_string(object).unwrap(),
            serde_yaml::to_string(&manifests[key]).unwrap()
        );
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects.iter().find(|object| object["kind"] == kind && object["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn has(objects: &[Value], kind: &str) -> bool {
    objects.iter().any(|object| object["kind"] == kind)
}

/// The host configuration the chart renders, parsed and validated as the host does (against the built policies).
fn host_config(objects: &[Value]) -> HostConfig {
    let text = find(objects, "ConfigMap", "wasp-config")["data"]["config.yaml"].as_str().unwrap();
    let mut config = HostConfig::parse(text).unwrap_or_else(|error| panic!("{error:#}\n{text}"));
    config.policy_dir = common::repo_root().join("plugins/out");
    config.validate().unwrap_or_else(|error| panic!("{error:#}\n{text}"));
    config
}

fn values_file(dir: &tempfile::TempDir, yaml: &str) -> String {
    let path = dir.path().join("values.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn helm_lints_the_chart_with_every_certificate_source_and_without_webhooks() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let chart = helm::chart();
    for values in [
        &[][..],
        &["--set", "webhooks.certificate.source=cert-manager"],
        &["--set", "webhooks.certificate.source=external"],
        &["--set", "webhooks.enabled=false"],
        &["--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true"],
    ] {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        args.extend_from_slice(values);
        let linted = helm::run(home.path(), None, &args);
        assert!(linted.ok, "helm {}: {}{}", args.join(" "), linted.stdout, linted.stderr);
        assert!(linted.stdout.contains("1 chart(s) linted, 0 chart(s) failed"), "{}", linted.stdout);
    }
}

#[test]
fn with_an_external_certificate_the_chart_renders_exactly_manifests() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    let chart = by_key(helm::render("wasp-system", &["--set", "webhooks.certificate.source=external"]));
    assert_same(&chart, &manifests(&[]));
    let cert_manager = by_key(helm::render("wasp-system", &["--set", "webhooks.certificate.source=cert-manager"]));
    assert_same(&cert_manager, &manifests(&["cert-manager/webhook-certificate.yaml"]));
}

#[test]
fn by_default_the_chart_makes_a_certificate_the_api_server_can_verify() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    let objects = helm::render("wasp-system", &[]);
    // Beside the Secret and the caBundles, the install is manifests/'s.
    let mut rendered = by_key(objects.clone());
    assert!(rendered.remove(&("Secret".into(), "wasp-system".into(), "wasp-webhook-tls".into())).is_some(), "no Secret wasp-webhook-tls");
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let configuration = rendered.get_mut(&(kind.into(), String::new(), "wasp".into())).unwrap();
        configuration["webhooks"][0]["clientConfig"].as_mapping_mut().unwrap().remove("caBundle").expect("a caBundle");
        // The chart's certificate is not cert-manager's to replace.
        assert!(configuration["metadata"].get("annotations").is_none(), "{configuration:?}");
        configuration["metadata"]["annotations"] = serde_yaml::from_str("{cert-manager.io/inject-ca-from: wasp-system/wasp-webhook}").unwrap();
    }
    assert_same(&rendered, &manifests(&[]));

    // Checked as the API server checks it when it dials the webhook (the host's own check, admission/callable.rs).
    let secret = find(&objects, "Secret", "wasp-webhook-tls");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let decode = |value: &Value| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value.as_str().unwrap()).unwrap();
    let serving: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&decode(&secret["data"]["tls.crt"])).map(Result::unwrap).collect();
    assert!(!decode(&secret["data"]["tls.key"]).is_empty());
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let client_config: WebhookClientConfig = serde_yaml::from_value(find(&objects, kind, "wasp")["webhooks"][0]["clientConfig"].clone()).unwrap();
        assert_eq!(client_config.ca_bundle.as_ref().unwrap().0, decode(&secret["data"]["ca.crt"]), "{kind}'s caBundle is the Secret's CA");
        wasp::admission::callable::check(&client_config, &serving, UnixTime::now()).unwrap_or_else(|why| panic!("{kind}: {why}"));
    }
    // Another namespace: the certificate names the Service there.
    let elsewhere = helm::render("team-wasp", &[]);
    let client_config: WebhookClientConfig =
        serde_yaml::from_value(find(&elsewhere, "ValidatingWebhookConfiguration", "wasp")["webhooks"][0]["clientConfig"].clone()).unwrap();
    let secret = find(&elsewhere, "Secret", "wasp-webhook-tls");
    let serving: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&decode(&secret["data"]["tls.crt"])).map(Result::unwrap).collect();
    wasp::admission::callable::check(&client_config, &serving, UnixTime::now()).unwrap();
    // `helm template` reaches no cluster: each render makes a new CA (an upgrade keeps the installed one:
    // tests/real_cluster.rs).
    assert_ne!(secret["data"]["ca.crt"], find(&objects, "Secret", "wasp-webhook-tls")["data"]["ca.crt"]);
}

#[test]
fn every_value_reaches_its_object_and_the_host_runs_the_configuration() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let values = values_file(
        &dir,
        r#"
image: {repository: registry.example.com/wasp, tag: "1.2.3", pullPolicy: Always}
imagePullSecrets: [{name: pull}]
replicas: 3
priorityClassName: ""
logLevel: wasp=debug
extraArgs: [--guest-memory-mib, "768"]
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
podAnnotations: {example.com/team: platform}
podLabels: {example.com/cost-center: platform}
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]}}}
extraEnv: [{name: HTTPS_PROXY, value: "http://proxy:3128"}]
podSecurityContext: {runAsUser: null}
serviceAccount: {annotations: {iam.example.com/role: wasp}}
terminationGracePeriodSeconds: 45
policyConfigMaps: [team-policies, wasp-policies]
scheduler:
  profiles:
  - schedulerName: wasp
    filters: [resources-fit]
    scores: [{policy: least-allocated, weight: 1}, {policy: balanced-allocation, weight: 1}]
  - schedulerName: wasp-pack
    filters: [resources-fit]
    scores: [{policy: most-allocated, weight: 1}]
rescheduler: {enabled: false}
autoscaler: {enabled: false}
admission: {mode: warn}
webhooks:
  failurePolicy: Fail
  namespaceOptIn: label
  excludedNamespaces: [kube-system, monitoring]
"#,
    );
    let objects = helm::render("team-wasp", &["-f", &values]);
    // Every namespaced object in the release's namespace (but the binding to kube-system's Role that reads the
    // cluster's client CA); the ServiceAccount the bindings name is there too.
    for object in &objects {
        let namespace = object["metadata"]["namespace"].as_str();
        let cluster_scoped =
            ["ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"];
        match (cluster_scoped.contains(&object["kind"].as_str().unwrap()), object["metadata"]["name"].as_str()) {
            (true, _) => assert_eq!(namespace, None, "{:?}", key(object)),
            (false, Some("wasp-auth-reader")) => assert_eq!(namespace, Some("kube-system")),
            (false, _) => assert_eq!(namespace, Some("team-wasp"), "{:?}", key(object)),
        }
        for subject in object["subjects"].as_sequence().into_iter().flatten() {
            assert_eq!(subject["namespace"], "team-wasp", "{:?}", key(object));
        }
    }

    let config = host_config(&objects);
    assert_eq!(config.leader_election.lease_namespace, "team-wasp");
    let profiles: Vec<&str> = config.scheduler.profiles.iter().map(|profile| profile.scheduler_name.as_str()).collect();
    assert_eq!(profiles, ["wasp", "wasp-pack"]);
    assert!(config.rescheduler.is_none() && config.autoscaler.is_none());
    assert_eq!(config.admission.mode, AdmissionMode::Warn);
    assert!(!config.policies.is_empty(), "the default per-policy settings stay");

    let deployment = find(&objects, "Deployment", "wasp-scheduler");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(container["image"], "registry.example.com/wasp:1.2.3");
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "pull");
    assert!(pod["spec"].get("priorityClassName").is_none());
    assert_eq!(pod["spec"]["nodeSelector"]["node-role.kubernetes.io/control-plane"], "");
    assert_eq!(pod["spec"]["tolerations"][0]["effect"], "NoSchedule");
    assert_eq!(pod["metadata"]["annotations"]["example.com/team"], "platform");
    assert_eq!(pod["metadata"]["labels"]["example.com/cost-center"], "platform");
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "kubernetes.io/arch"
    );
    assert_eq!(
        pod["spec"]["securityContext"],
        serde_yaml::from_str::<Value>("{runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}").unwrap(),
        "no runAsUser for platforms that assign one"
    );
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 45);
    assert_eq!(find(&objects, "ServiceAccount", "wasp")["metadata"]["annotations"]["iam.example.com/role"], "wasp");
    let proxy = container["env"].as_sequence().unwrap().iter().find(|variable| variable["name"] == "HTTPS_PROXY").expect("the extra environment");
    assert_eq!(proxy["value"], "http://proxy:3128");
    // Three replicas: the budget keeps two up; one replica gets none (it would block every drain).
    assert_eq!(find(&objects, "PodDisruptionBudget", "wasp-scheduler")["spec"]["minAvailable"], 1);
    assert!(!has(&helm::render("team-wasp", &["-f", &values, "--set", "replicas=1"]), "PodDisruptionBudget"));
    let args: Vec<&str> = container["args"].as_sequence().unwrap().iter().map(|arg| arg.as_str().unwrap()).collect();
    assert!(args.ends_with(&["--guest-memory-mib", "768"]), "{args:?}");
    assert!(args.contains(&"--webhook-listen"), "{args:?}");
    let log = container["env"].as_sequence().unwrap().iter().find(|variable| variable["name"] == "RUST_LOG").unwrap();
    assert_eq!(log["value"], "wasp=debug");
    let sources: Vec<&str> =
        pod["spec"]["volumes"][0]["projected"]["sources"].as_sequence().unwrap().iter().map(|source| source["configMap"]["name"].as_str().unwrap()).collect();
    assert_eq!(sources, ["team-policies", "wasp-policies"]);

    let validating = &find(&objects, "ValidatingWebhookConfiguration", "wasp")["webhooks"][0];
    let mutating = &find(&objects, "MutatingWebhookConfiguration", "wasp")["webhooks"][0];
    for webhook in [validating, mutating] {
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["clientConfig"]["service"]["namespace"], "team-wasp");
        let excluded: Vec<&str> =
            webhook["namespaceSelector"]["matchExpressions"][0]["values"].as_sequence().unwrap().iter().map(|name| name.as_str().unwrap()).collect();
        assert_eq!(excluded, ["kube-system", "monitoring", "team-wasp"]);
    }
    let opted_in = &mutating["namespaceSelector"]["matchExpressions"][1];
    assert_eq!((&opted_in["key"], &opted_in["operator"]), (&Value::from("wasp.dev/scheduler"), &Value::from("Exists")));
    assert!(validating["namespaceSelector"]["matchExpressions"].as_sequence().unwrap().len() == 1, "validation is for every namespace");

    // Without webhooks: nothing registered, served or mounted for them; the rest as before.
    let objects = helm::render("team-wasp", &["-f", &values, "--set", "webhooks.enabled=false"]);
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "Secret"] {
        assert!(!has(&objects, kind), "{kind} rendered without webhooks");
    }
    assert!(!objects.iter().any(|object| object["metadata"]["name"] == "wasp-webhook"), "the webhook Service rendered without webhooks");
    let pod = &find(&objects, "Deployment", "wasp-scheduler")["spec"]["template"]["spec"];
    let rendered = serde_yaml::to_string(pod).unwrap();
    assert!(!rendered.contains("webhook") && !rendered.contains("tls"), "{rendered}");
    host_config(&objects);
}

#[test]
fn the_monitoring_objects_are_manifests_monitoring() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    let objects = helm::render(
        "ops",
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set",
            "monitoring.dashboard.enabled=true",
            "--set",
            "monitoring.prometheusRule.labels.release=prometheus",
        ],
    );
    let shipped = helm::objects(&std::fs::read_to_string(common::repo_root().join("manifests/monitoring/prometheus-rules.yaml")).unwrap()).remove(0);
    let rule = find(&objects, "PrometheusRule", "wasp");
    // The alerts' `{{ $labels.policy }}` reach Prometheus untouched: the chart reads the rules as a file.
    assert_eq!(rule["spec"], shipped["spec"]);
    assert_eq!(rule["metadata"]["namespace"], "ops");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let dashboard = find(&objects, "ConfigMap", "wasp-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value = serde_json::from_str(dashboard["data"]["wasp-dashboard.json"].as_str().unwrap()).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::repo_root().join("manifests/monitoring/wasp-dashboard.json")).unwrap()).unwrap();
    assert_eq!(json, file);
    // Off by default: the Prometheus Operator's CRDs may not be installed.
    assert!(!has(&helm::render("ops", &[]), "PrometheusRule"));
}

#[test]
fn the_chart_works_as_a_dependency_and_without_its_optional_sections() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    // A parent chart passes `global`; a user may null a section out.
    for args in [&["--set", "global.registry=example.com"][..], &["--set", "monitoring=null"]] {
        let objects = helm::render("wasp-system", args);
        assert!(has(&objects, "Deployment"), "{args:?}");
    }
}

#[test]
fn bad_values_are_refused_naming_the_value() {
    if !common::can_run(&[common::helm::missing()]) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let chart = helm::chart();
    for (value, named) in [
        ("reschduler.interval=1m", "additional properties 'reschduler' not allowed"),
        ("webhooks.certificate.source=vault", "'/webhooks/certificate/source': value must be one of 'helm', 'cert-manager', 'external'"),
        ("replicas=two", "'/replicas': got string, want integer"),
        ("webhooks.failurePolicy=Open", "'/webhooks/failurePolicy': value must be one of 'Ignore', 'Fail'"),
        ("admission.mode=block", "'/admission/mode': value must be one of 'deny', 'warn', 'strict'"),
        ("webhooks.certificate.days=null", "'/webhooks/certificate': missing property 'days'"),
    ] {
        let rendered = helm::run(home.path(), None, &["template", "wasp", chart.to_str().unwrap(), "--set", value]);
        assert!(!rendered.ok, "--set {value} was accepted");
        assert!(rendered.stderr.contains(named), "--set {value}: {}", rendered.stderr);
    }
}
