//! manifests/monitoring/: the Grafana dashboard and the PrometheusRule alerts. Every metric they name must be one
//! a running host serves, of the type the name implies (a `_total` is a counter's, a `_bucket` a histogram's),
//! checked against a real scrape of `/metrics`; the rules must pass `promtool check rules` and the alert tests of
//! tests/fixtures/monitoring/ (`promtool test rules`; Debian's `prometheus` package, which .ci/run installs).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::ApiClient;
use wasp::runtime::Runtime;
use wasp_sim::{Scenario, Simulator};

fn monitoring(file: &str) -> String {
    std::fs::read_to_string(common::repo_root().join("manifests/monitoring").join(file)).unwrap()
}

/// The rules of the PrometheusRule, as a plain Prometheus rule file.
fn rule_groups() -> serde_yaml::Value {
    let rule: serde_yaml::Value = serde_yaml::from_str(&monitoring("prometheus-rules.yaml")).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

/// Every `wasp_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("wasp_") {
        let name: String = rest[start..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
        rest = &rest[start + name.len()..];
        names.insert(name);
    }
    names
}

/// The queries of the dashboard's panels and the rules' expressions.
fn queries() -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(&monitoring("wasp-dashboard.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "the dashboard has {} panels", panels.len());
    let mut queries: Vec<String> =
        panels.iter().flat_map(|panel| panel["targets"].as_array().unwrap().iter().map(|target| target["expr"].as_str().unwrap().to_string())).collect();
    for group in rule_groups()["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            queries.push(rule["expr"].as_str().unwrap().to_string());
        }
    }
    queries
}

/// Series that exist only in some installs, and where they are checked instead.
const SERVED_ELSEWHERE: [(&str, &str); 1] = [(
    "wasp_admission_webhook_callable",
    "set once the webhook configurations are checked (wasp run with --tls-cert-file): tests/manifests.rs and tests/real_cluster.rs read it",
)];

/// The metric families a host serves, by name, with their type (`# TYPE` lines of a scrape): a host with a
/// profile, a rescheduler strategy and autoscaler policies, once it has bound a pod and run each loop once.
async fn served_families() -> BTreeMap<String, String> {
    let scenario = Scenario::parse(
        "nodeGroups: [{name: n, count: 2, cpu: '4', memory: 16Gi}]\nworkloads: [{name: web, replicas: 1, schedulerName: wasp, cpu: 100m, memory: 64Mi}]\n",
    )
    .unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let built_in = std::fs::read_to_string(common::repo_root().join("host/src/config/default-config.yaml")).unwrap();
    let with_loops = format!(
        "{}\nrescheduler: {{interval: 1s, strategies: [{{policy: remove-pods-violating-node-taints}}]}}\nautoscaler: {{policies: [hpa]}}\n",
        built_in.replace("policyDir: plugins/out", &format!("policyDir: {}", common::repo_root().join("plugins/out").display()))
    );
    let config = HostConfig::parse(&with_loops).unwrap();
    let host = Host::with_config(&config, &Runtime::new(None).unwrap(), api).unwrap();
    let _loops = tokio::spawn(host.clone().run_loops());
    let address = host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let body = common::wait_for("a pod bound and each loop run once", std::time::Duration::from_secs(30), || async {
        let (status, body) = common::http_get(address, "/metrics").await;
        // The autoscaler's pass starts (and makes its policies' series) without the Autoscaler CRD installed.
        let ran =
            ["wasp_schedule_attempts_total{", "wasp_rescheduler_run_duration_seconds_count ", "wasp_autoscaler_recommendations_total{"].iter().all(|sample| {
                body.lines().any(|line| {
                    line.starts_with(sample) && !line.ends_with(" 0")
                        || line.starts_with("wasp_autoscaler_recommendations_total{") && sample.starts_with("wasp_autoscaler")
                })
            });
        match status == 200 && ran {
            true => Ok(body),
            false => Err(format!(
                "{status}: {}",
                body.lines()
                    .filter(|line| line.contains("attempts") || line.contains("_count ") || line.contains("recommendations"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
    })
    .await;
    body.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_use_is_served_with_its_type() {
    let families = served_families().await;
    let referenced: BTreeSet<String> = queries().iter().flat_map(|query| metric_names(query)).collect();
    assert!(referenced.len() >= 12, "{referenced:?}");
    for name in referenced.iter().filter(|name| !SERVED_ELSEWHERE.iter().any(|(elsewhere, _)| name == elsewhere)) {
        let (family, kind) = [("_total", "counter"), ("_bucket", "histogram"), ("_sum", "histogram"), ("_count", "histogram")]
            .into_iter()
            .find_map(|(suffix, kind)| name.strip_suffix(suffix).filter(|family| families.contains_key(*family)).map(|family| (family, kind)))
            .unwrap_or((name.as_str(), "gauge"));
        assert_eq!(families.get(family).map(String::as_str), Some(kind), "{name} in manifests/monitoring is not a served {kind} (served: {families:?})");
    }
}

#[test]
fn the_alert_rules_pass_promtool_and_fire_as_their_tests_say() {
    let promtool = Command::new("promtool").arg("--version").output();
    let missing =
        (!promtool.is_ok_and(|output| output.status.success())).then(|| "promtool is missing: install Debian's prometheus package (.ci/run does)".to_string());
    if !common::can_run(&[missing]) {
        return;
    }
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("rules.yaml"), serde_yaml::to_string(&rule_groups()).unwrap()).unwrap();
    std::fs::copy(common::repo_root().join("tests/fixtures/monitoring/alerts-test.yaml"), directory.path().join("alerts-test.yaml")).unwrap();
    for arguments in [["check", "rules", "rules.yaml"], ["test", "rules", "alerts-test.yaml"]] {
        let output = Command::new("promtool").args(arguments).current_dir(directory.path()).output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "promtool {}: {said}", arguments.join(" "));
    }
}
