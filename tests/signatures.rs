//! Policy signatures against cosign itself (see `common::cosign`): cosign's keys and signatures are taken by
//! `wasp policy verify` and by the host, wasp's are taken by `cosign verify-blob`, and a key pair wasp generates is
//! one cosign signs with.

mod common;

use common::cosign::{self, PASSWORD};
use std::path::Path;
use std::process::{Command, Output};
use wasp::config::HostConfig;
use wasp::registry::PolicyRegistry;

fn wasp(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasp")).args(args).current_dir(dir).env("COSIGN_PASSWORD", PASSWORD).output().expect("wasp runs")
}

fn succeeded(what: &str, output: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{what} failed: {text}");
    text
}

fn failed(what: &str, output: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!output.status.success(), "{what} should have failed: {text}");
    text
}

/// A folder with one component, `least-allocated.wasm`, its compressed form and cosign's key pair.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let component = common::policy_wasm("least-allocated").1;
    std::fs::write(dir.path().join("least-allocated.wasm"), &component).unwrap();
    std::fs::write(dir.path().join("least-allocated.wasm.zst"), wasp::registry::bundle::compress(&component).unwrap()).unwrap();
    cosign::generate_key_pair(dir.path());
    dir
}

#[test]
fn what_cosign_signs_wasp_verifies_and_the_host_serves_loose_or_compressed() {
    if !common::can_run(&[common::cosign::missing()]) {
        return;
    }
    let dir = workspace();
    let path = dir.path();
    cosign::sign(path, "cosign.key", "least-allocated.wasm", "least-allocated.wasm.sig");
    let verified = succeeded("wasp policy verify", &wasp(path, &["policy", "verify", "least-allocated.wasm", "--key", "cosign.pub"]));
    assert!(verified.contains("signed by cosign.pub"), "{verified}");
    // The signature is over the component, so it holds for the compressed file too.
    succeeded("wasp policy verify of the .zst", &wasp(path, &["policy", "verify", "least-allocated.wasm.zst", "--key", "cosign.pub"]));

    // The host, with signatures required: the compressed component and cosign's signature beside it.
    let policies = path.join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::copy(path.join("least-allocated.wasm.zst"), policies.join("least-allocated.wasm.zst")).unwrap();
    std::fs::copy(path.join("least-allocated.wasm.sig"), policies.join("least-allocated.wasm.sig")).unwrap();
    let config_text = "policyDir: policies\nverification: {keys: [cosign.pub], require: true}\nscheduler: {profiles: [{schedulerName: wasp, scores: [{policy: least-allocated}]}]}\n";
    std::fs::write(path.join("config.yaml"), config_text).unwrap();
    let config = HostConfig::load(&path.join("config.yaml")).unwrap();
    let registry = PolicyRegistry::new(&common::runtime(), config, Some(path.join("config.yaml"))).unwrap();
    let status = registry.status();
    assert_eq!(status.policies[0].signed_by.as_deref(), Some(path.join("cosign.pub").to_str().unwrap()));

    // One byte changed after signing: cosign and wasp both refuse it.
    let mut tampered = std::fs::read(path.join("least-allocated.wasm")).unwrap();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 1;
    std::fs::write(path.join("tampered.wasm"), tampered).unwrap();
    failed("cosign verify-blob of a tampered component", &cosign::verify(path, "cosign.pub", "least-allocated.wasm.sig", "tampered.wasm"));
    let refused = failed(
        "wasp policy verify of a tampered component",
        &wasp(path, &["policy", "verify", "tampered.wasm", "--key", "cosign.pub", "--signature", "least-allocated.wasm.sig"]),
    );
    assert!(refused.contains("tampered.wasm: its signature is not by any of the keys cosign.pub"), "{refused}");
}

#[test]
fn what_wasp_signs_with_a_cosign_key_cosign_verifies() {
    if !common::can_run(&[common::cosign::missing()]) {
        return;
    }
    let dir = workspace();
    let path = dir.path();
    // From the compressed file: the signature is over the uncompressed component, which cosign checks.
    let signed = succeeded("wasp policy sign", &wasp(path, &["policy", "sign", "least-allocated.wasm.zst", "--key", "cosign.key"]));
    assert!(signed.contains("into least-allocated.wasm.sig"), "{signed}");
    let checked = succeeded("cosign verify-blob", &cosign::verify(path, "cosign.pub", "least-allocated.wasm.sig", "least-allocated.wasm"));
    assert!(checked.contains("Verified OK"), "{checked}");
    failed("cosign verify-blob of the compressed bytes", &cosign::verify(path, "cosign.pub", "least-allocated.wasm.sig", "least-allocated.wasm.zst"));
    // A wrong password is named as such.
    let output = Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(["policy", "sign", "least-allocated.wasm", "--key", "cosign.key", "--output-signature", "other.sig"])
        .current_dir(path)
        .env("COSIGN_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert!(failed("signing with a wrong password", &output).contains("the password (COSIGN_PASSWORD) is wrong"));
}

#[test]
fn a_key_pair_wasp_generates_is_one_cosign_signs_and_verifies_with() {
    if !common::can_run(&[common::cosign::missing()]) {
        return;
    }
    let dir = workspace();
    let path = dir.path();
    succeeded("wasp policy generate-key-pair", &wasp(path, &["policy", "generate-key-pair", "--output-key-prefix", "team"]));
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path.join("team.key")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the private key is its owner's alone");
    let again = failed("generating over an existing key", &wasp(path, &["policy", "generate-key-pair", "--output-key-prefix", "team"]));
    assert!(again.contains("an existing file is not overwritten"), "{again}");
    cosign::sign(path, "team.key", "least-allocated.wasm", "by-cosign.sig");
    succeeded("wasp policy verify", &wasp(path, &["policy", "verify", "least-allocated.wasm", "--key", "team.pub", "--signature", "by-cosign.sig"]));
    succeeded("cosign verify-blob with wasp's public key", &cosign::verify(path, "team.pub", "by-cosign.sig", "least-allocated.wasm"));
    // Signed by one key, checked against another: refused, naming the key it was checked with.
    let wrong = failed(
        "verifying with cosign's other key",
        &wasp(path, &["policy", "verify", "least-allocated.wasm", "--key", "cosign.pub", "--signature", "by-cosign.sig"]),
    );
    assert!(wrong.contains("not by any of the keys cosign.pub"), "{wrong}");
}

#[test]
fn a_bundle_made_by_wasp_configmap_carries_the_signatures_and_the_host_checks_them() {
    if !common::can_run(&[common::cosign::missing()]) {
        return;
    }
    let dir = workspace();
    let path = dir.path();
    let signed = path.join("signed");
    std::fs::create_dir(&signed).unwrap();
    std::fs::copy(path.join("least-allocated.wasm"), signed.join("least-allocated.wasm")).unwrap();
    cosign::sign(path, "cosign.key", "signed/least-allocated.wasm", "signed/least-allocated.wasm.sig");
    let output = wasp(path, &["configmap", "--from-dir", "signed", "--bundle"]);
    let summary = succeeded("wasp configmap --bundle", &output);
    assert!(summary.contains("1 policies (1 signed)"), "{summary}");
    let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_yaml::from_slice(&output.stdout).unwrap();
    let bundle = &config_map.binary_data.unwrap()["policies.tar.zst"].0;
    let policies = path.join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("policies.tar.zst"), bundle).unwrap();
    let config_text = "policyDir: policies\nverification: {keys: [cosign.pub], require: true}\nscheduler: {profiles: [{schedulerName: wasp, scores: [{policy: least-allocated}]}]}\n";
    std::fs::write(path.join("config.yaml"), config_text).unwrap();
    let config = HostConfig::load(&path.join("config.yaml")).unwrap();
    let registry = PolicyRegistry::new(&common::runtime(), config, Some(path.join("config.yaml"))).unwrap();
    assert!(registry.status().policies[0].signed_by.as_deref().is_some_and(|key| key.ends_with("cosign.pub")));
}
