//! Shared helpers for the integration tests: where the built components are, and Kubernetes objects from YAML.
#![allow(dead_code)]

pub mod atomic_writer;
pub mod control_plane;
pub mod cosign;
pub mod helm;
pub mod install;
pub mod oci_registry;

use k8s_openapi::api::core::v1 as core;
use std::path::PathBuf;
use std::sync::Arc;
use wasp::cluster::{convert, ClusterState};
use wasp::contract::types::Pod;
use wasp::policy::{LoadedPolicy, PolicyOptions};
use wasp::runtime::Runtime;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Whether the running test can run on this machine: `needs` holds, for each thing it needs, what is missing
/// and how to get it (None: it is there). Outside CI a test that lacks something is skipped, saying so on stderr
/// with its name; in CI (`CI` set, as `.ci/run` sets it) it fails instead, so nothing is skipped there unseen.
pub fn can_run(needs: &[Option<String>]) -> bool {
    let missing: Vec<&str> = needs.iter().flatten().map(String::as_str).collect();
    if missing.is_empty() {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    let reason = missing.join("; ");
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {reason}");
    }
    // Past the test harness's capture of `eprintln!`, so the skip shows in a plain `cargo test`.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {reason}");
    false
}

/// What is missing when the file `relative` to the repository is not there, and the command that makes it.
pub fn built(relative: &str, how: &str) -> Option<String> {
    let path = repo_root().join(relative);
    (!path.exists()).then(|| format!("{} is missing: {how}", path.display()))
}

fn read_built(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}; build the components first with scripts/build-policies.sh", path.display()))
}

/// A default policy component from plugins/out.
pub fn policy_wasm(name: &str) -> (String, Vec<u8>) {
    let path = repo_root().join("plugins/out").join(format!("{name}.wasm"));
    (path.display().to_string(), read_built(path))
}

pub fn fixture_wasm(name: &str) -> (String, Vec<u8>) {
    let path = repo_root().join("target/wasm-fixtures").join(format!("{name}.wasm"));
    (path.display().to_string(), read_built(path))
}

pub fn runtime() -> Arc<Runtime> {
    Runtime::new(None).unwrap()
}

pub fn load(runtime: &Arc<Runtime>, name: &str, settings: &str) -> LoadedPolicy {
    let (source, wasm) = policy_wasm(name);
    let options = PolicyOptions { settings: settings.into(), ..Default::default() };
    LoadedPolicy::load(runtime, &source, &wasm, options).unwrap_or_else(|error| panic!("{error}"))
}

pub fn node(yaml: &str) -> wasp::contract::types::Node {
    let source: core::Node = serde_yaml::from_str(yaml).unwrap();
    convert::node(&source).unwrap()
}

pub fn pod(yaml: &str) -> Pod {
    let source: core::Pod = serde_yaml::from_str(yaml).unwrap();
    convert::pod(&source).unwrap()
}

/// A Ready node with the given CPU, memory and labels (`k=v,k2=v2`).
pub fn simple_node(name: &str, cpu: &str, memory: &str, labels: &str) -> wasp::contract::types::Node {
    let labels: Vec<String> = labels.split(',').filter(|pair| !pair.is_empty()).map(|pair| pair.replacen('=', ": ", 1)).collect();
    node(&format!(
        "metadata: {{name: {name}, labels: {{{}}}}}\nstatus: {{allocatable: {{cpu: '{cpu}', memory: {memory}, pods: '110'}}, conditions: [{{type: Ready, status: 'True'}}]}}",
        labels.join(", ")
    ))
}

/// A pod with one container requesting `cpu`, and the given labels.
pub fn simple_pod(name: &str, cpu: &str, labels: &str) -> Pod {
    let labels: Vec<String> = labels.split(',').filter(|pair| !pair.is_empty()).map(|pair| pair.replacen('=', ": ", 1)).collect();
    pod(&format!(
        "metadata: {{name: {name}, namespace: default, uid: uid-{name}, labels: {{{}}}}}\nspec: {{containers: [{{name: app, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}",
        labels.join(", ")
    ))
}

pub fn cluster_of(nodes: Vec<wasp::contract::types::Node>) -> ClusterState {
    let mut cluster = ClusterState::new();
    for node in nodes {
        cluster.upsert_node(node);
    }
    cluster
}

/// Rejection reasons per candidate ("" for a pass), resolving the compact filter result.
pub fn reasons(result: &wasp::contract::types::FilterResult) -> Vec<String> {
    result.verdicts.iter().map(|&code| if code == 0 { String::new() } else { result.rejections[code as usize - 1].join(", ") }).collect()
}

/// GET `path` from a local HTTP server: status and body.
pub async fn http_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get(format!("http://{address}{path}")).body(http_body_util::Empty::<bytes::Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Polls `condition` for up to 10 s; fails the test naming `what` if it never holds.
pub async fn eventually(what: &str, condition: impl FnMut() -> bool) {
    eventually_within(what, std::time::Duration::from_secs(10), condition).await
}

pub async fn eventually_within(what: &str, patience: std::time::Duration, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + patience;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Polls `check` until it answers `Ok`, failing the test with `what` and the last answer once `patience` is
/// spent. The 50 ms sleep is the poll interval of this deadline-bounded wait, never a wait of its own.
pub async fn wait_for<T, F, Fut>(what: &str, patience: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = std::time::Instant::now() + patience;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) if std::time::Instant::now() >= deadline => panic!("timed out after {patience:?} waiting for {what}: {state}"),
            // The poll interval of this deadline-bounded condition wait.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

/// A counter's value once it has reached `expected` (or after 10 s): the API shows a binding a moment before
/// the scheduler counts it. Callers that must see no excess compare the counter with what the server received.
pub async fn settled(counter: &std::sync::atomic::AtomicU64, expected: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while counter.load(std::sync::atomic::Ordering::Relaxed) < expected && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    counter.load(std::sync::atomic::Ordering::Relaxed)
}
