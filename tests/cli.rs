//! The `wasp` binary as a user runs it.

mod common;

use common::repo_root;
use std::process::Command;

fn wasp(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_wasp")).args(args).current_dir(repo_root()).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn inspect_shows_what_a_component_is() {
    let (ok, stdout, _) = wasp(&["policy", "inspect", "plugins/out/taint-toleration.wasm"]);
    assert!(ok);
    assert!(stdout.contains("name       taint-toleration"), "{stdout}");
    assert!(stdout.contains("kinds      filter, score"), "{stdout}");
    assert!(stdout.contains("contract   wasp:policy@0.1.0"), "{stdout}");

    let (ok, stdout, _) = wasp(&["policy", "inspect", "--json", "plugins/out/hpa.wasm"]);
    assert!(ok);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["kinds"], serde_json::json!(["scale"]));
    assert_eq!(report["defaultSettings"]["tolerance"], 0.1);
    assert_eq!(report["sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn eval_prints_a_verdict_per_node() {
    let args = ["--pod", "examples/eval/pod.yaml", "--nodes", "examples/eval/nodes.yaml", "--pods", "examples/eval/bound-pods.yaml"];
    let (ok, stdout, stderr) = wasp(&[&["policy", "eval", "plugins/out/resources-fit.wasm"][..], &args].concat());
    assert!(ok, "{stderr}");
    let rows: Vec<Vec<&str>> = stdout.lines().skip(2).map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["small", "reject", "-", "Insufficient", "cpu"]);
    assert_eq!(rows[1], ["large", "pass", "-"], "16 CPUs minus 12 requested leave room for 3");

    let settings = r#"{"resources": [{"name": "cpu", "weight": 1}]}"#;
    let (ok, stdout, stderr) =
        wasp(&[&["policy", "eval", "plugins/out/least-allocated.wasm", "--settings", settings][..], &args].concat());
    assert!(ok, "{stderr}");
    // cpu only: small (2-3 overcommitted) 0, large (16-15)/16 = 6, gpu (8-3)/8 = 62.
    let scores: Vec<&str> = stdout.lines().skip(2).map(|line| line.split_whitespace().nth(2).unwrap()).collect();
    assert_eq!(scores, ["0", "6", "62"]);
}

#[test]
fn bad_input_fails_with_the_file_and_reason() {
    let (ok, _, stderr) = wasp(&["policy", "inspect", "Cargo.toml"]);
    assert!(!ok);
    assert!(stderr.contains("policy Cargo.toml: not a WebAssembly binary"), "{stderr}");

    let (ok, _, stderr) = wasp(&["policy", "eval", "plugins/out/resources-fit.wasm", "--pod", "examples/eval/nodes.yaml", "--nodes", "examples/eval/nodes.yaml"]);
    assert!(!ok);
    assert!(stderr.contains("examples/eval/nodes.yaml: document 1, item 1: expected kind Pod, found Node"), "{stderr}");

    let (ok, _, stderr) = wasp(&["policy", "eval", "plugins/out/resources-fit.wasm", "--pod", "missing.yaml", "--nodes", "examples/eval/nodes.yaml"]);
    assert!(!ok);
    assert!(stderr.contains("reading missing.yaml"), "{stderr}");

    let (ok, _, stderr) = wasp(&["policy", "eval", "plugins/out/hpa.wasm", "--settings", r#"{"tolerance": 2}"#, "--pod", "examples/eval/pod.yaml", "--nodes", "examples/eval/nodes.yaml"]);
    assert!(!ok);
    assert!(stderr.contains("settings rejected: invalid settings for hpa: tolerance: 2 is outside [0, 1)"), "{stderr}");
}
