//! Policies through a real OCI registry on loopback (`common::oci_registry`: the CNCF distribution registry with TLS
//! and basic auth): `wasp policy push` and `pull` by tag and by digest in the wasm artifact layout, a tampered blob
//! refused, and signatures attached as cosign attaches them, checked both ways against cosign itself.

mod common;

use common::oci_registry::Registry;
use std::path::Path;
use std::process::{Command, Output};

fn wasp(dir: &Path, registry: &Registry, args: &[&str]) -> Output {
    let registry_flags = ["--registry-config", registry.credentials.to_str().unwrap(), "--registry-ca", registry.ca_file.to_str().unwrap()];
    Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(args)
        .args(registry_flags)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", common::cosign::PASSWORD)
        .output()
        .expect("wasp runs")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn succeeded(what: &str, output: &Output) -> String {
    assert!(output.status.success(), "{what} failed: {}", text(output));
    text(output)
}

fn failed(what: &str, output: &Output) -> String {
    assert!(!output.status.success(), "{what} should have failed: {}", text(output));
    text(output)
}

/// The `oci://...@sha256:...` a push printed as pinned.
fn pinned(pushed: &str) -> String {
    pushed.lines().find_map(|line| line.strip_prefix("pinned: ")).unwrap_or_else(|| panic!("no pinned reference in {pushed}")).to_string()
}

/// A folder with the component `least-allocated.wasm` and cosign's key pair.
fn workspace() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let component = common::policy_wasm("least-allocated").1;
    std::fs::write(dir.path().join("least-allocated.wasm"), &component).unwrap();
    common::cosign::generate_key_pair(dir.path());
    (dir, component)
}

#[test]
fn a_component_pushed_is_pulled_by_tag_and_by_digest_in_the_wasm_layout_and_a_tampered_blob_is_refused() {
    if !common::can_run(&[common::cosign::missing(), common::oci_registry::missing()]) {
        return;
    }
    let registry = Registry::start();
    let (dir, component) = workspace();
    let path = dir.path();
    let reference = format!("{}:1.0", registry.reference("team/least-allocated"));
    let pushed = succeeded("wasp policy push", &wasp(path, &registry, &["policy", "push", "least-allocated.wasm", &reference]));
    let by_digest = pinned(&pushed);
    for (what, source) in [("by tag", reference.as_str()), ("by digest", by_digest.as_str())] {
        let output = path.join(format!("pulled-{}.wasm", what.replace(' ', "-")));
        let pulled = succeeded(&format!("wasp policy pull {what}"), &wasp(path, &registry, &["policy", "pull", source, "--output", output.to_str().unwrap()]));
        assert!(pulled.contains(&by_digest["oci://".len()..]), "{pulled}");
        assert_eq!(std::fs::read(&output).unwrap(), component, "{what}");
    }

    // The layout the CNCF TAG Runtime's wasm artifact spec gives, as the registry stores it.
    let digest = by_digest.rsplit_once('@').unwrap().1;
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(registry.blob_file(digest)).unwrap()).unwrap();
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.wasm.config.v0+json");
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_string();
    assert_eq!(layer, format!("sha256:{}", wasp::registry::source::sha256_hex(&component)));
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(registry.blob_file(manifest["config"]["digest"].as_str().unwrap())).unwrap()).unwrap();
    assert_eq!((config["architecture"].as_str(), config["os"].as_str()), (Some("wasm"), Some("wasip2")));

    // Without the credentials the registry refuses; with a wrong password too.
    let anonymous = Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(["policy", "pull", &reference, "--output", "x.wasm", "--registry-ca", registry.ca_file.to_str().unwrap()])
        .current_dir(path)
        .env("HOME", path)
        .output()
        .unwrap();
    let refused = failed("an anonymous pull", &anonymous);
    assert!(refused.contains("pulling"), "{refused}");

    // One bit of the stored component flipped: the pull checks the digest and refuses it.
    let blob = registry.blob_file(&layer);
    let mut stored = std::fs::read(&blob).unwrap();
    let middle = stored.len() / 2;
    stored[middle] ^= 1;
    std::fs::write(&blob, stored).unwrap();
    let refused = failed("pulling a tampered blob", &wasp(path, &registry, &["policy", "pull", &by_digest, "--output", "tampered.wasm"]));
    assert!(refused.to_lowercase().contains("digest"), "{refused}");
    assert!(!path.join("tampered.wasm").exists(), "nothing is written from a refused pull");
}

#[test]
fn signatures_attached_by_wasp_check_with_cosign_and_cosigns_with_wasp() {
    if !common::can_run(&[common::cosign::missing(), common::oci_registry::missing()]) {
        return;
    }
    let registry = Registry::start();
    let (dir, _) = workspace();
    let path = dir.path();
    let environment = registry.cosign_environment();

    // wasp pushes and signs; cosign verifies the image signature.
    let reference = format!("{}:signed", registry.reference("team/least-allocated"));
    let pushed =
        succeeded("wasp policy push --sign-key", &wasp(path, &registry, &["policy", "push", "least-allocated.wasm", &reference, "--sign-key", "cosign.key"]));
    assert!(pushed.contains("signature attached as"), "{pushed}");
    let by_digest = pinned(&pushed);
    let bare = &by_digest["oci://".len()..];
    let verified = common::cosign::run_with(path, &["verify", "--key", "cosign.pub", "--insecure-ignore-tlog=true", bare], &environment);
    assert!(verified.status.success(), "cosign verify: {}", text(&verified));
    let pulled = succeeded("wasp policy pull --key", &wasp(path, &registry, &["policy", "pull", &reference, "--output", "a.wasm", "--key", "cosign.pub"]));
    assert!(pulled.contains("signed by cosign.pub"), "{pulled}");

    // Another key did not sign it: refused, naming the key.
    let generated = Command::new(env!("CARGO_BIN_EXE_wasp"))
        .args(["policy", "generate-key-pair", "--output-key-prefix", "other"])
        .current_dir(path)
        .env("COSIGN_PASSWORD", "")
        .output()
        .unwrap();
    succeeded("wasp policy generate-key-pair", &generated);
    let refused = failed("pulling with another key", &wasp(path, &registry, &["policy", "pull", &reference, "--output", "b.wasm", "--key", "other.pub"]));
    assert!(refused.contains("is by any of the keys other.pub") && refused.contains("no signature attached to sha256:"), "{refused}");
    assert!(!path.join("b.wasm").exists(), "nothing is written from a refused pull");

    // An unsigned push: no signature attached.
    let unsigned = format!("{}:unsigned", registry.reference("team/zone-pin"));
    std::fs::write(path.join("zone-pin.wasm"), common::fixture_wasm("zone-pin-east").1).unwrap();
    succeeded("an unsigned push", &wasp(path, &registry, &["policy", "push", "zone-pin.wasm", &unsigned]));
    let refused =
        failed("pulling an unsigned component with --key", &wasp(path, &registry, &["policy", "pull", &unsigned, "--output", "c.wasm", "--key", "cosign.pub"]));
    assert!(refused.contains("no signature is attached"), "{refused}");

    // cosign signs what wasp pushed unsigned; wasp verifies cosign's signature.
    let pushed = succeeded("the push cosign signs", &wasp(path, &registry, &["policy", "push", "zone-pin.wasm", &unsigned]));
    let signed =
        common::cosign::run_with(path, &["sign", "--yes", "--key", "cosign.key", "--tlog-upload=false", &pinned(&pushed)["oci://".len()..]], &environment);
    assert!(signed.status.success(), "cosign sign: {}", text(&signed));
    let pulled = succeeded(
        "wasp policy pull of cosign's signature",
        &wasp(path, &registry, &["policy", "pull", &unsigned, "--output", "d.wasm", "--key", "cosign.pub"]),
    );
    assert!(pulled.contains("signed by cosign.pub"), "{pulled}");
}

/// A host's policy directory and configuration taking `zone-pin` from `source`, signed by cosign.pub.
struct HostFiles {
    dir: tempfile::TempDir,
    cache: std::path::PathBuf,
}

impl HostFiles {
    fn new(workspace: &Path, registry: &Registry) -> HostFiles {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        for name in ["resources-fit", "least-allocated"] {
            std::fs::write(dir.path().join(format!("policies/{name}.wasm")), common::policy_wasm(name).1).unwrap();
        }
        std::fs::copy(workspace.join("cosign.pub"), dir.path().join("cosign.pub")).unwrap();
        std::fs::copy(&registry.credentials, dir.path().join("dockerconfig.json")).unwrap();
        std::fs::copy(&registry.ca_file, dir.path().join("registry-ca.crt")).unwrap();
        let cache = dir.path().join("cache");
        HostFiles { dir, cache }
    }

    fn configure(&self, source: &str) {
        let config = format!(
            "policyDir: policies\nregistries: {{credentials: dockerconfig.json, caFile: registry-ca.crt}}\n\
             scheduler: {{profiles: [{{schedulerName: wasp, filters: [resources-fit, zone-pin], scores: [{{policy: least-allocated}}]}}]}}\n\
             policies:\n  zone-pin:\n    source: {source}\n    verification: {{keys: [cosign.pub], require: true}}\n"
        );
        std::fs::write(self.dir.path().join("config.yaml"), config).unwrap();
    }

    /// A host's policy registry, as `wasp run --cache-dir` starts it.
    fn start(&self) -> anyhow::Result<wasp::registry::PolicyRegistry> {
        let config_path = self.dir.path().join("config.yaml");
        let config = wasp::config::HostConfig::load(&config_path)?;
        let runtime = wasp::runtime::Runtime::new(Some(self.cache.clone()))?;
        wasp::registry::PolicyRegistry::new(&runtime, config, Some(config_path))
    }
}

fn zone_pin(registry: &wasp::registry::PolicyRegistry) -> wasp::registry::PolicyStatus {
    registry.status().policies.into_iter().find(|policy| policy.name == "zone-pin").unwrap()
}

#[test]
fn a_policy_from_a_registry_is_pulled_verified_and_served_and_a_registry_down_never_stops_what_was_pulled() {
    if !common::can_run(&[common::cosign::missing(), common::oci_registry::missing()]) {
        return;
    }
    let mut registry = Registry::start();
    let (dir, _) = workspace();
    let path = dir.path();
    let east = common::fixture_wasm("zone-pin-east").1;
    let west = common::fixture_wasm("zone-pin-west").1;
    std::fs::write(path.join("east.wasm"), &east).unwrap();
    std::fs::write(path.join("west.wasm"), &west).unwrap();
    let repository = registry.reference("team/zone-pin");
    let push = |file: &str, tag: &str, sign: bool| {
        let mut args = vec!["policy", "push", file, tag];
        if sign {
            args.extend(["--sign-key", "cosign.key"]);
        }
        pinned(&succeeded("wasp policy push", &wasp(path, &registry, &args)))
    };
    let east_pinned = push("east.wasm", &format!("{repository}:east"), true);
    let unsigned_pinned = push("west.wasm", &format!("{repository}:west-unsigned"), false);
    let west_pinned = push("west.wasm", &format!("{repository}:west"), true);
    let sha256 = |bytes: &[u8]| wasp::registry::source::sha256_hex(bytes);

    let host = HostFiles::new(path, &registry);
    host.configure(&east_pinned);
    let serving = host.start().unwrap();
    let status = zone_pin(&serving);
    assert_eq!((status.sha256.as_str(), status.source.as_str()), (sha256(&east).as_str(), east_pinned.as_str()));
    assert!(status.signed_by.as_deref().is_some_and(|key| key.ends_with("cosign.pub")), "{status:?}");

    // A tag whose manifest nobody signed: resolved, pulled, refused for its signature; east keeps serving.
    host.configure(&format!("{repository}:west-unsigned"));
    let report = serving.reload();
    assert!(!report.config_swapped, "{report:?}");
    assert!(report.error_messages().contains("refused before it was compiled: no signature is attached"), "{report:?}");
    assert_eq!(zone_pin(&serving).sha256, sha256(&east));
    // Signed after the pull (by cosign): the next rescan pulls it again, though no file changed, and takes it.
    let signed = common::cosign::run_with(
        path,
        &["sign", "--yes", "--key", "cosign.key", "--tlog-upload=false", &unsigned_pinned["oci://".len()..]],
        &registry.cosign_environment(),
    );
    assert!(signed.status.success(), "cosign sign: {}", text(&signed));
    let report = serving.reload();
    assert!(!report.unchanged && report.config_swapped, "{report:?}");
    let status = zone_pin(&serving);
    assert_eq!(status.source, format!("{repository}:west-unsigned@{}", unsigned_pinned.rsplit_once('@').unwrap().1));

    // The registry is down: a new digest cannot be pulled; the reason says so and what served keeps serving.
    registry.stop();
    host.configure(&west_pinned);
    let report = serving.reload();
    assert!(report.errors.iter().any(|refusal| refusal.reason == wasp::registry::RefusalReason::Registry && refusal.message.contains("pulling")), "{report:?}");
    assert_eq!(zone_pin(&serving).source, status.source);
    // Back up: the next rescan pulls it, though no file changed.
    registry.restart();
    let report = serving.reload();
    assert!(!report.unchanged && report.config_swapped, "{report:?}");
    assert_eq!((zone_pin(&serving).sha256, zone_pin(&serving).source), (sha256(&west), west_pinned.clone()));

    // A tag is resolved once and reported; a restart while the registry is down serves from the store.
    host.configure(&format!("{repository}:west"));
    serving.reload();
    assert_eq!(zone_pin(&serving).source, format!("{repository}:west@{}", west_pinned.rsplit_once('@').unwrap().1));
    registry.stop();
    drop(serving);
    let restarted = host.start().expect("a restart needs no registry for what it pulled before");
    assert_eq!(zone_pin(&restarted).sha256, sha256(&west));
    assert!(zone_pin(&restarted).signed_by.is_some(), "verified again from the store, offline");
}
