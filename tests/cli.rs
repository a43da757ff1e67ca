//! The `wasp` binary as a user runs it.

mod common;

use common::repo_root;
use std::collections::BTreeMap;
use std::process::Command;

fn wasp(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_wasp")).args(args).current_dir(repo_root()).output().unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn inspect_shows_what_a_component_is() {
    let (ok, stdout, _) = wasp(&["policy", "inspect", "plugins/out/taint-toleration.wasm"]);
    assert!(ok);
    assert!(stdout.contains("name       taint-toleration"), "{stdout}");
    assert!(stdout.contains("kinds      filter, score"), "{stdout}");
    assert!(stdout.contains("contract   wasp:policy@0.10.0"), "{stdout}");

    let (ok, stdout, _) = wasp(&["policy", "inspect", "--json", "plugins/out/hpa.wasm"]);
    assert!(ok);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["kinds"], serde_json::json!(["scale"]));
    assert_eq!(report["defaultSettings"]["tolerance"], 0.1);
    assert_eq!(report["sha256"].as_str().unwrap().len(), 64);

    // Compressed, it is the same component: the host and every command read `NAME.wasm.zst` uncompressed.
    let directory = tempfile::tempdir().unwrap();
    let compressed = directory.path().join("hpa.wasm.zst");
    let hpa = std::fs::read(repo_root().join("plugins/out/hpa.wasm")).unwrap();
    std::fs::write(&compressed, wasp::registry::bundle::compress(&hpa).unwrap()).unwrap();
    let (ok, stdout, stderr) = wasp(&["policy", "inspect", "--json", compressed.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let from_compressed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((&from_compressed["sha256"], &from_compressed["size"]), (&report["sha256"], &report["size"]));
}

#[test]
fn eval_prints_a_verdict_per_node() {
    let args = ["--pod", "examples/eval/pod.yaml", "--nodes", "examples/eval/nodes.yaml", "--pods", "examples/eval/bound-pods.yaml"];
    let (ok, stdout, stderr) = wasp(&[&["policy", "eval", "plugins/out/resources-fit.wasm"][..], &args].concat());
    assert!(ok, "{stderr}");
    let rows: Vec<Vec<&str>> = stdout.lines().skip(2).take_while(|line| !line.is_empty()).map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["small", "reject", "-", "Insufficient", "cpu"]);
    assert_eq!(rows[1], ["large", "pass", "-"], "16 CPUs minus 12 requested leave room for 3");
    // Then the record `wasp explain pod` would show, with the policy as the whole profile.
    assert!(stdout.contains("\nFILTER         EVALUATED  REJECTED  REASONS\nresources-fit  3          1         1 Insufficient cpu\n"), "{stdout}");
    assert!(stdout.contains("drawn among 2 feasible nodes: the profile has no score policy"), "{stdout}");

    let settings = r#"{"resources": [{"name": "cpu", "weight": 1}]}"#;
    let (ok, stdout, stderr) = wasp(&[&["policy", "eval", "plugins/out/least-allocated.wasm", "--settings", settings][..], &args].concat());
    assert!(ok, "{stderr}");
    // cpu only: small (2-3 overcommitted) 0, large (16-15)/16 = 6, gpu (8-3)/8 = 62.
    let scores: Vec<&str> = stdout.lines().skip(2).take_while(|line| !line.is_empty()).map(|line| line.split_whitespace().nth(2).unwrap()).collect();
    assert_eq!(scores, ["0", "6", "62"]);
    assert!(stdout.contains("Result:  placed on gpu (the highest score of 3 feasible nodes)\n"), "{stdout}");
    assert!(stdout.contains("\ngpu *  62 (62)               62\n"), "{stdout}");
}

#[test]
fn bad_input_fails_with_the_file_and_reason() {
    let (ok, _, stderr) = wasp(&["policy", "inspect", "Cargo.toml"]);
    assert!(!ok);
    assert!(stderr.contains("policy Cargo.toml: not a WebAssembly binary"), "{stderr}");

    let (ok, _, stderr) =
        wasp(&["policy", "eval", "plugins/out/resources-fit.wasm", "--pod", "examples/eval/nodes.yaml", "--nodes", "examples/eval/nodes.yaml"]);
    assert!(!ok);
    assert!(stderr.contains("examples/eval/nodes.yaml: document 1, item 1: expected kind Pod, found Node"), "{stderr}");

    let (ok, _, stderr) = wasp(&["policy", "eval", "plugins/out/resources-fit.wasm", "--pod", "missing.yaml", "--nodes", "examples/eval/nodes.yaml"]);
    assert!(!ok);
    assert!(stderr.contains("reading missing.yaml"), "{stderr}");

    let (ok, _, stderr) = wasp(&[
        "policy",
        "eval",
        "plugins/out/hpa.wasm",
        "--settings",
        r#"{"tolerance": 2}"#,
        "--pod",
        "examples/eval/pod.yaml",
        "--nodes",
        "examples/eval/nodes.yaml",
    ]);
    assert!(!ok);
    assert!(stderr.contains("settings rejected: invalid settings for hpa: tolerance: 2 is outside [0, 1)"), "{stderr}");
}

#[test]
fn configmap_carries_the_components_and_refuses_more_than_a_mebibyte() {
    let (ok, stdout, stderr) = wasp(&["configmap", "--from-dir", "plugins/out", "--name", "p", "--namespace", "ns"]);
    // The default set is ~2.3 MB: too much for one ConfigMap, and the error says so with the sizes.
    assert!(!ok);
    assert!(stderr.contains("more than a ConfigMap holds (1024 KiB)"), "{stderr}");
    let fit_size = std::fs::metadata(repo_root().join("plugins/out/resources-fit.wasm")).unwrap().len() / 1024;
    assert!(stderr.contains(&format!("resources-fit.wasm {fit_size} KiB")), "{stderr}");
    assert!(stdout.is_empty());

    let directory = tempfile::tempdir().unwrap();
    let fit = std::fs::read(repo_root().join("plugins/out/resources-fit.wasm")).unwrap();
    std::fs::write(directory.path().join("resources-fit.wasm"), &fit).unwrap();
    std::fs::write(directory.path().join("notes.txt"), "ignored").unwrap();
    let (ok, stdout, stderr) = wasp(&["configmap", "--from-dir", directory.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(config_map.metadata.name.as_deref(), Some("wasp-policies"));
    let binary = config_map.binary_data.unwrap();
    assert_eq!(binary.keys().collect::<Vec<_>>(), ["resources-fit.wasm"]);
    assert_eq!(binary["resources-fit.wasm"].0, fit, "round-trips byte for byte");
    // A compressed component goes in as it is; in a bundle, as the component it holds.
    std::fs::remove_file(directory.path().join("resources-fit.wasm")).unwrap();
    let compressed = wasp::registry::bundle::compress(&fit).unwrap();
    std::fs::write(directory.path().join("resources-fit.wasm.zst"), &compressed).unwrap();
    let (ok, stdout, stderr) = wasp(&["configmap", "--from-dir", directory.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(config_map.binary_data.unwrap()["resources-fit.wasm.zst"].0, compressed);
    let (ok, stdout, stderr) = wasp(&["configmap", "--from-dir", directory.path().to_str().unwrap(), "--bundle"]);
    assert!(ok, "{stderr}");
    let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_str(&stdout).unwrap();
    let bundled = wasp::registry::bundle::unpack(&config_map.binary_data.unwrap()["policies.tar.zst"].0).unwrap();
    assert_eq!(bundled, [("resources-fit.wasm".to_string(), fit.clone())]);
    // Both forms of one policy (what `wasp policy build` leaves in a crate): which one to ship is the user's call.
    std::fs::write(directory.path().join("resources-fit.wasm"), &fit).unwrap();
    let (ok, _, stderr) = wasp(&["configmap", "--from-dir", directory.path().to_str().unwrap()]);
    assert!(!ok && stderr.contains("resources-fit is there both as resources-fit.wasm and resources-fit.wasm.zst; keep one"), "{stderr}");

    // --split: every file once, in ConfigMaps of at most 1 MiB each.
    let (ok, stdout, stderr) = wasp(&["configmap", "--from-dir", "plugins/out", "--split"]);
    assert!(ok, "{stderr}");
    let mut seen = BTreeMap::new();
    for (index, document) in stdout.split("---\n").enumerate() {
        let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_str(document).unwrap();
        assert_eq!(config_map.metadata.name, Some(format!("wasp-policies-{}", index + 1)));
        let binary = config_map.binary_data.unwrap();
        assert!(binary.values().map(|bytes| bytes.0.len()).sum::<usize>() <= 1 << 20);
        seen.extend(binary.into_iter().map(|(name, bytes)| (name, bytes.0.len())));
    }
    let expected: BTreeMap<String, usize> = std::fs::read_dir(repo_root().join("plugins/out"))
        .unwrap()
        .flatten()
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.metadata().unwrap().len() as usize))
        .collect();
    assert_eq!(seen, expected);

    // --bundle: the whole default set in one ConfigMap, well under 1 MiB; the registry reads every policy
    // back out of it, byte for byte, from a directory that holds only the bundle.
    let (ok, stdout, stderr) = wasp(&["configmap", "--from-dir", "plugins/out", "--bundle"]);
    assert!(ok, "{stderr}");
    let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(config_map.metadata.name.as_deref(), Some("wasp-policies"));
    let binary = config_map.binary_data.unwrap();
    assert_eq!(binary.keys().collect::<Vec<_>>(), ["policies.tar.zst"]);
    let bundle = &binary["policies.tar.zst"].0;
    assert!(bundle.len() * 4 / 3 < 1 << 20, "{} bytes, {} in base64", bundle.len(), bundle.len() * 4 / 3);
    let mounted = tempfile::tempdir().unwrap();
    std::fs::write(mounted.path().join("policies.tar.zst"), bundle).unwrap();
    let snapshot = wasp::registry::source::SourceSnapshot::read(mounted.path(), None);
    assert!(snapshot.unreadable.is_empty(), "{:?}", snapshot.unreadable);
    let unpacked: BTreeMap<String, usize> = snapshot.policies.iter().map(|(name, file)| (format!("{name}.wasm"), file.bytes.len())).collect();
    assert_eq!(unpacked, expected);
    assert_eq!(snapshot.policies["resources-fit"].bytes, fit);
    assert!(snapshot.policies["resources-fit"].path.to_string_lossy().ends_with("policies.tar.zst:resources-fit.wasm"));
}

#[test]
fn simulate_summarizes_a_large_cluster_and_lists_a_small_one() {
    let directory = tempfile::tempdir().unwrap();
    let scenario = directory.path().join("thirty.yaml");
    std::fs::write(
        &scenario,
        "name: thirty\nkubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 30, cpu: '4', memory: 16Gi, zones: [a, b, c]}]\n\
         workloads: [{name: web, kind: Pods, replicas: 60, schedulerName: wasp, cpu: 500m, memory: 1Gi}]\n",
    )
    .unwrap();
    let scenario = scenario.to_str().unwrap();
    let (ok, stdout, stderr) = wasp(&["simulate", "--scenario", scenario, "--timeout", "30s"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("30 nodes (--full lists each)"), "{stdout}");
    let pods_row = stdout.lines().find(|line| line.starts_with("pods ")).unwrap();
    let quantiles: Vec<f64> = pods_row.split_whitespace().skip(1).map(|value| value.parse().unwrap()).collect();
    assert_eq!(quantiles.len(), 5, "{pods_row}");
    assert!(quantiles[4] <= 3.0 && quantiles[0] >= 1.0, "least-allocated spreads 60 pods over 30 nodes: {pods_row}");
    let zones: Vec<&str> = stdout.lines().skip_while(|line| !line.starts_with("ZONE")).skip(1).take(3).collect();
    assert!(zones.iter().all(|line| line.split_whitespace().nth(1) == Some("10")), "ten nodes per zone: {zones:?}");
    assert!(stdout.contains("most loaded:") && !stdout.contains("NODE         "), "{stdout}");
    assert!(stdout.contains("60 bound"), "{stdout}");

    let (ok, stdout, _) = wasp(&["simulate", "--scenario", scenario, "--timeout", "30s", "--full"]);
    assert!(ok);
    assert_eq!(stdout.lines().filter(|line| line.starts_with("n-")).count(), 30, "{stdout}");
}

#[test]
fn certs_prints_a_secret_the_webhook_serves_and_the_ca_bundle() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = wasp(&["certs", "--namespace", "wasp-system", "--name", "127.0.0.1", "--out-dir", out]);
    assert!(ok, "{stderr}");
    let secret: k8s_openapi::api::core::v1::Secret = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(
        (secret.type_.as_deref(), secret.metadata.name.as_deref(), secret.metadata.namespace.as_deref()),
        (Some("kubernetes.io/tls"), Some("wasp-webhook-tls"), Some("wasp-system"))
    );
    let data = secret.data.unwrap();
    use std::os::unix::fs::PermissionsExt;
    let key_mode = std::fs::metadata(dir.path().join("tls.key")).unwrap().permissions().mode() & 0o777;
    assert_eq!(key_mode, 0o600, "the private key is its owner's only");
    for (key, file) in [("tls.crt", "tls.crt"), ("tls.key", "tls.key"), ("ca.crt", "ca.crt")] {
        assert_eq!(data[key].0, std::fs::read(dir.path().join(file)).unwrap(), "{key} as written to --out-dir");
    }
    // The webhook accepts the pair, and the printed caBundle is the CA that signed it.
    let files = wasp::admission::tls::CertificateFiles { certificate: dir.path().join("tls.crt"), private_key: dir.path().join("tls.key") };
    assert!(wasp::admission::tls::ReloadingCertificate::load(files).is_ok());
    let bundle = base64::engine::general_purpose::STANDARD.encode(&data["ca.crt"].0);
    assert!(stderr.contains(&bundle), "{stderr}");
    assert!(stderr.contains("kubectl patch validatingwebhookconfiguration wasp --type=json"), "{stderr}");
    assert!(stderr.contains("wasp-webhook.wasp-system.svc"), "{stderr}");
    // A name that is neither a DNS name nor an address is refused with the reason.
    let (ok, _, stderr) = wasp(&["certs", "--name", "not a name!"]);
    assert!(!ok);
    assert!(stderr.contains("a name is neither a DNS name nor an IP address"), "{stderr}");
}

#[test]
fn a_new_policy_is_scaffolded_and_what_it_writes_loads_with_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = wasp(&["policy", "new", "keep-off-spot", "--kind", "filter,score", "--dir", dir.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("cargo test && wasp policy build"), "{stdout}");
    let root = dir.path().join("keep-off-spot");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("[workspace]") && manifest.contains("lto = true") && manifest.contains("wasp-sdk = { path = "), "{manifest}");
    let source = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    assert!(source.contains("impl Filter for KeepOffSpot") && source.contains("impl Score for KeepOffSpot") && !source.contains("impl Evict"), "{source}");
    let (ok, _, stderr) = wasp(&["policy", "new", "keep-off-spot", "--kind", "filter", "--dir", dir.path().to_str().unwrap()]);
    assert!(!ok && stderr.contains("exists already"), "{stderr}");
    // The same template with every kind, built by scripts/build-policies.sh from tests/fixtures/scaffolded.
    let (ok, stdout, stderr) = wasp(&["policy", "inspect", "target/wasm-fixtures/scaffolded.wasm"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("kinds      filter, score, evict, scale"), "{stdout}");
    assert!(stdout.contains(r#"settings   {"label":"example.com/scaffolded"}"#), "{stdout}");
}

#[test]
fn simulate_shows_a_bin_packing_profile_beside_a_spreading_one() {
    let (ok, stdout, stderr) =
        wasp(&["simulate", "--scenario", "sim/scenarios/batch-and-services.yaml", "--config", "examples/config/batch-and-services.yaml", "--timeout", "30s"]);
    assert!(ok, "{stderr}");
    // 20 batch pods of 700m fit on one or two 16-CPU nodes next to the services (whichever profile goes first);
    // least-allocated and anti-affinity put the services on every node.
    assert!(stdout.contains("profile wasp: 12 pods on 6 of 6 nodes"), "{stdout}");
    let batch = stdout.lines().find(|line| line.starts_with("profile wasp-batch:")).unwrap();
    let nodes: usize = batch.split(" on ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(batch.starts_with("profile wasp-batch: 20 pods") && nodes <= 2, "most-allocated packs: {batch}");
}

/// The shipped zonal-disks scenario: every StatefulSet replica's disk is made in the zone of its node, and the
/// report shows both.
#[test]
fn simulate_shows_each_claim_in_the_zone_of_its_pods_node() {
    let (ok, stdout, stderr) = wasp(&["simulate", "--scenario", "sim/scenarios/zonal-disks.yaml", "--timeout", "30s"]);
    assert!(ok, "{stderr}");
    let rows: Vec<Vec<&str>> = stdout.lines().filter(|line| line.starts_with("data-db-")).map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    for row in rows {
        // CLAIM STATUS VOLUME-ZONE POD NODE NODE-ZONE
        assert_eq!((row[1], row[2]), ("Bound", row[5]), "{stdout}");
    }
}

#[test]
fn simulate_tries_a_policy_file_without_a_configuration() {
    let directory = tempfile::tempdir().unwrap();
    let scenario = directory.path().join("zones.yaml");
    std::fs::write(
        &scenario,
        "name: zones\nkubelet: {readyDelay: 10ms}\nnodeGroups: [{name: n, count: 4, cpu: '4', memory: 16Gi, zones: [east, west]}]\n\
         workloads: [{name: web, kind: Pods, replicas: 6, schedulerName: wasp, cpu: 100m}]\n",
    )
    .unwrap();
    let west = common::fixture_wasm("zone-pin-west").0;
    let scenario = scenario.to_str().unwrap();
    // `wasp policy test` is the same run under the policy commands.
    for command in [&["simulate", "--scenario", scenario, "--policy", &west, "--timeout", "30s"][..], &["policy", "test", &west, "--scenario", scenario]] {
        let (ok, stdout, stderr) = wasp(command);
        assert!(ok, "{stderr}");
        assert!(stdout.contains("trying zone-pin 0.1.0 from ") && stdout.contains(": a filter in every profile"), "{stdout}");
        // Zones alternate: n-1 and n-3 are west. Without the tried filter least-allocated would use all four nodes.
        let rows: Vec<&str> = stdout.lines().filter(|line| line.starts_with("n-")).collect();
        let used: Vec<&str> = rows.iter().filter(|row| row.split_whitespace().nth(1) != Some("0")).map(|row| row.split_whitespace().next().unwrap()).collect();
        assert_eq!(used, ["n-1", "n-3"], "{command:?}: {stdout}");
    }
    let (ok, _, stderr) = wasp(&["simulate", "--scenario", scenario, "--policy", "README.md"]);
    assert!(!ok && stderr.contains("README.md"), "a file that is no component is refused by name: {stderr}");
}
