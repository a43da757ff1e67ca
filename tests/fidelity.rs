//! Differential fidelity: one kubectl walk (create, get, list with selectors, Tables, the three patch types,
//! errors, binding, eviction, scale, watches from a resourceVersion), and the requests of client-go's protobuf
//! clients (controlplane/protobuf.go), sent to the simulator and to the real kube-apiserver (controlplane/), the
//! answers normalised (uids, resourceVersions, times, addresses) and compared field by field. Every difference
//! must be one `KNOWN` names, each explained in sim/README.md ("What still differs"): a new one fails the test,
//! and so does a known one that went away (the table must follow the simulator).

mod common;

use common::control_plane::{self, ControlPlane};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use wasp_sim::{Scenario, Simulator, SimulatorOptions};

/// Differences a client can see: a fragment of the field's path, and why (the table in sim/README.md).
const KNOWN: &[(&str, &str)] = &[
    (".spec.tolerations", "DefaultTolerationSeconds admission (not-ready and unreachable, 300 s) is not simulated"),
    (".spec.volumes", "ServiceAccount admission (the kube-api-access projected volume) is not simulated"),
    (".volumeMounts", "ServiceAccount admission (the kube-api-access mount) is not simulated"),
    (".spec.serviceAccount", "ServiceAccount admission (serviceAccount, serviceAccountName: default) is not simulated"),
    (".imagePullPolicy", "pod defaulting: imagePullPolicy"),
    (".terminationMessagePath", "pod defaulting: terminationMessagePath"),
    (".terminationMessagePolicy", "pod defaulting: terminationMessagePolicy"),
    (".spec.dnsPolicy", "pod defaulting: dnsPolicy"),
    (".spec.template.spec.dnsPolicy", "pod template defaulting: dnsPolicy"),
    (".spec.enableServiceLinks", "pod defaulting: enableServiceLinks"),
    (".spec.preemptionPolicy", "Priority admission: preemptionPolicy"),
    (".restartPolicy", "pod defaulting: restartPolicy"),
    (".securityContext", "pod defaulting: an empty securityContext"),
    (".terminationGracePeriodSeconds", "pod defaulting: terminationGracePeriodSeconds"),
    (".spec.template.spec.containers[0].resources", "pod template defaulting: an empty resources"),
    (".spec.progressDeadlineSeconds", "Deployment defaulting: progressDeadlineSeconds"),
    (".spec.revisionHistoryLimit", "Deployment defaulting: revisionHistoryLimit"),
    (".spec.strategy", "Deployment defaulting: strategy"),
    ("create deployment .out.status", "a new Deployment's status: {} from kube-apiserver, {replicas: 0} from the simulator"),
    (".answered", "a protobuf client's answers come in JSON, its second choice (client-go decodes either)"),
];

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: solo, namespace: default, labels: {app: solo}}\nspec:\n  schedulerName: nobody\n  containers: [{name: app, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]\n";
const BAD_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: default}\nspec:\n  containers: []\n";
const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      schedulerName: nobody\n      containers: [{name: app, image: nginx}]\n";

/// One step's answer: kubectl's success, its output (parsed when JSON, else its lines) and its error text.
fn answer(kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Value {
    let output = control_plane::kubectl_with(kubeconfig, args, input);
    let lines = || Value::Array(output.stdout.lines().map(|line| Value::String(line.split_whitespace().collect::<Vec<_>>().join(" "))).collect());
    // One JSON document, or a watch stream's events one after the other.
    let documents: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(&output.stdout).into_iter::<Value>().collect();
    let body = match documents {
        Ok(mut documents) if documents.len() == 1 => documents.pop().unwrap(),
        Ok(documents) if !documents.is_empty() => Value::Array(documents),
        _ => lines(),
    };
    serde_json::json!({"ok": output.ok, "out": body, "err": output.stderr.trim()})
}

/// The walk, step name -> answer.
fn walk(kubeconfig: &Path) -> BTreeMap<String, Value> {
    let mut answers = BTreeMap::new();
    let mut step = |name: &str, args: &[&str], input: Option<&str>| {
        let answer = answer(kubeconfig, args, input);
        answers.insert(name.to_string(), answer.clone());
        answer
    };
    step("01 create pod", &["create", "-f", "-", "-o", "json"], Some(POD));
    step("02 get pod", &["get", "pod", "solo", "-o", "json"], None);
    step("03 list by label", &["get", "pods", "-l", "app=solo", "-o", "json"], None);
    step("04 list by field", &["get", "pods", "--field-selector", "metadata.name=solo", "-o", "json"], None);
    step("05 list by set selector", &["get", "pods", "-l", "app in (solo,other),!tier", "-o", "json"], None);
    step("06 table", &["get", "pods", "solo"], None);
    step("07 merge patch", &["patch", "pod", "solo", "--type=merge", "-p", r#"{"metadata":{"labels":{"tier":"web"}}}"#, "-o", "json"], None);
    step(
        "08 json patch",
        &["patch", "pod", "solo", "--type=json", "-p", r#"[{"op":"add","path":"/metadata/annotations","value":{"note":"x"}}]"#, "-o", "json"],
        None,
    );
    step("09 strategic patch", &["patch", "pod", "solo", "--type=strategic", "-p", r#"{"metadata":{"labels":{"zone":"a"}}}"#, "-o", "json"], None);
    step("10 not found", &["get", "pod", "missing"], None);
    step("11 not found raw", &["get", "--raw", "/api/v1/namespaces/default/pods/missing"], None);
    step("12 already exists", &["create", "-f", "-"], Some(POD));
    step("13 invalid", &["create", "-f", "-"], Some(BAD_POD));
    step(
        "13a boolean label",
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: Pod\nmetadata: {name: flag, namespace: default, labels: {debug: true}}\nspec: {containers: [{name: app, image: nginx}]}\n"),
    );
    step(
        "13b selector not matching its template",
        &["create", "-f", "-"],
        Some(&DEPLOYMENT.replace("name: web", "name: mismatched").replace("labels: {app: web}", "labels: {app: other}")),
    );
    step(
        "14 binding",
        &["create", "--raw", "/api/v1/namespaces/default/pods/solo/binding", "-f", "-"],
        Some(r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"solo"},"target":{"kind":"Node","name":"worker-0"}}"#),
    );
    step("15 bound pod", &["get", "pod", "solo", "-o", "jsonpath={.spec.nodeName}"], None);
    step(
        "16 second binding",
        &["create", "--raw", "/api/v1/namespaces/default/pods/solo/binding", "-f", "-"],
        Some(r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"solo"},"target":{"kind":"Node","name":"worker-1"}}"#),
    );
    step("17 create deployment", &["create", "-f", "-", "-o", "json"], Some(DEPLOYMENT));
    step("18 get scale", &["get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale"], None);
    step("19 scale", &["scale", "deployment", "web", "--replicas=3"], None);
    step("20 scale stale", &["scale", "deployment", "web", "--replicas=4", "--resource-version=1"], None);
    step(
        "21 eviction",
        &["create", "--raw", "/api/v1/namespaces/default/pods/solo/eviction", "-f", "-"],
        Some(r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"solo","namespace":"default"}}"#),
    );
    step(
        "22 eviction of missing",
        &["create", "--raw", "/api/v1/namespaces/default/pods/missing/eviction", "-f", "-"],
        Some(r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"missing","namespace":"default"}}"#),
    );
    step("23 delete", &["delete", "deployment", "web"], None);
    // Watches replayed from a resourceVersion, as an informer resumes: every change since, in order, filtered
    // by selectors; the stream ends at timeoutSeconds. From resourceVersion 1: the whole history, not compacted
    // yet (kube-root-ca.crt left out: the simulator publishes none, see sim/README.md).
    let created = step("24 create watched", &["create", "configmap", "watched", "--from-literal=k=1", "-o", "json"], None);
    let since = created["out"]["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    step("25 label watched", &["label", "configmap", "watched", "watch=yes"], None);
    step("26 create other", &["create", "configmap", "other", "--from-literal=k=1"], None);
    step("27 patch watched", &["patch", "configmap", "watched", "--type=merge", "-p", r#"{"data":{"k":"2"}}"#], None);
    step("28 patch other", &["patch", "configmap", "other", "--type=merge", "-p", r#"{"data":{"k":"2"}}"#], None);
    step("29 delete watched", &["delete", "configmap", "watched"], None);
    let watch = |query: &str| format!("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1&resourceVersion={since}{query}");
    step("30 watch", &["get", "--raw", &watch("")], None);
    step("31 watch by label", &["get", "--raw", &watch("&labelSelector=watch%3Dyes")], None);
    step("32 watch by field", &["get", "--raw", &watch("&fieldSelector=metadata.name%3Dother")], None);
    step(
        "33 watch from the past",
        &["get", "--raw", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1&resourceVersion=1&fieldSelector=metadata.name!%3Dkube-root-ca.crt"],
        None,
    );
    answers.extend(protobuf_walk(kubeconfig));
    answers
}

/// The requests of client-go's protobuf clients (kube-scheduler's, kube-controller-manager's, kwok's: protobuf
/// bodies, `Accept: protobuf, json`), made by `wasp-controlplane protobuf-walk`: step name -> answer.
fn protobuf_walk(kubeconfig: &Path) -> BTreeMap<String, Value> {
    let output =
        std::process::Command::new(control_plane::binary()).args(["protobuf-walk", "--kubeconfig"]).arg(kubeconfig).output().expect("wasp-controlplane runs");
    assert!(output.status.success(), "wasp-controlplane protobuf-walk failed against {}: {}", kubeconfig.display(), String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let mut answer: Value = serde_json::from_str(line).unwrap_or_else(|error| panic!("protobuf-walk printed {line:?}: {error}"));
            let step = answer.as_object_mut().unwrap().remove("step").unwrap();
            (step.as_str().unwrap().to_string(), answer)
        })
        .collect()
}

/// Removes what legitimately differs between two servers: identities, versions, times, addresses.
fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "managedFields",
                "generation",
                "startTime",
                "podIP",
                "podIPs",
                "hostIP",
                "hostIPs",
                "lastTransitionTime",
                "lastProbeTime",
                "observedGeneration",
                "eventTime",
            ] {
                map.remove(key);
            }
            for child in map.values_mut() {
                normalise(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        Value::String(text) => {
            // A resourceVersion named in a message ("Expected resource version to be 1, was 26").
            if let Some((head, _)) = text.split_once(", was ") {
                *text = format!("{head}, was <resourceVersion>");
            }
            // Ages in tables ("3s", "1m2s").
            if text.split(' ').any(|word| {
                !word.is_empty()
                    && word.chars().next().unwrap().is_ascii_digit()
                    && word.ends_with('s')
                    && word.trim_end_matches(|c: char| c.is_ascii_alphanumeric()).is_empty()
            }) {
                *text = text
                    .split(' ')
                    .map(|word| if word.chars().next().is_some_and(|c| c.is_ascii_digit()) && word.ends_with('s') { "<age>" } else { word })
                    .collect::<Vec<_>>()
                    .join(" ");
            }
        }
        _ => {}
    }
}

/// Path -> value of every leaf.
fn leaves(prefix: String, value: &Value, into: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) if !map.is_empty() => map.iter().for_each(|(key, child)| leaves(format!("{prefix}.{key}"), child, into)),
        Value::Array(items) if !items.is_empty() => items.iter().enumerate().for_each(|(index, child)| leaves(format!("{prefix}[{index}]"), child, into)),
        other => {
            into.insert(prefix, other.to_string());
        }
    }
}

fn simulator_kubeconfig(home: &Path) -> (tokio::runtime::Runtime, Simulator, PathBuf) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let scenario =
        Scenario::parse("kubelet: {readyDelay: 50ms, terminationDelay: 50ms}\nnodeGroups: [{name: worker, count: 2, cpu: '4', memory: 16Gi}]\n").unwrap();
    let simulator = runtime.block_on(Simulator::start_with(&scenario, "127.0.0.1:0".parse().unwrap(), SimulatorOptions::default())).unwrap();
    let kubeconfig = home.join("kubeconfig");
    simulator.write_kubeconfig(&kubeconfig).unwrap();
    (runtime, simulator, kubeconfig)
}

#[test]
fn the_simulator_answers_kubectl_as_the_real_api_server_does_but_for_the_known_differences() {
    if !common::can_run(&[common::control_plane::missing()]) {
        return;
    }
    let real = ControlPlane::start();
    real.create_nodes("worker", 2, &["zone-a"], "4", "16Gi");
    let real_answers = walk(&real.kubeconfig);

    let sim_home = tempfile::tempdir().unwrap();
    let (_runtime, _simulator, sim_kubeconfig) = simulator_kubeconfig(sim_home.path());
    let sim_answers = walk(&sim_kubeconfig);

    let mut differences = BTreeSet::new();
    let mut report = Vec::new();
    for (step, real_answer) in &real_answers {
        let (mut real_answer, mut sim_answer) = (real_answer.clone(), sim_answers[step].clone());
        normalise(&mut real_answer);
        normalise(&mut sim_answer);
        let (mut real_leaves, mut sim_leaves) = (BTreeMap::new(), BTreeMap::new());
        leaves(String::new(), &real_answer, &mut real_leaves);
        leaves(String::new(), &sim_answer, &mut sim_leaves);
        let paths: BTreeSet<&String> = real_leaves.keys().chain(sim_leaves.keys()).collect();
        for path in paths {
            let (real_value, sim_value) = (real_leaves.get(path), sim_leaves.get(path));
            if real_value != sim_value {
                differences.insert(format!("{step} {path}"));
                report.push(format!(
                    "{step} {path}: real {} | sim {}",
                    real_value.map_or("(absent)", String::as_str),
                    sim_value.map_or("(absent)", String::as_str)
                ));
            }
        }
    }
    let is_known = |difference: &str| KNOWN.iter().any(|(fragment, _)| difference.contains(fragment));
    let new: Vec<&String> = report.iter().filter(|line| !is_known(line.split_once(": ").unwrap().0)).collect();
    let gone: Vec<&str> =
        KNOWN.iter().map(|(fragment, _)| *fragment).filter(|fragment| !differences.iter().any(|difference| difference.contains(fragment))).collect();
    eprintln!("{} differences, {} of them known", report.len(), report.len() - new.len());
    assert!(
        new.is_empty() && gone.is_empty(),
        "differences not in KNOWN:\n{}\nKNOWN differences that went away: {gone:?}",
        new.iter().map(|line| line.as_str()).collect::<Vec<_>>().join("\n")
    );
}
