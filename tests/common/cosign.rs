//! cosign itself, built from its Go module by scripts/build-controlplane.sh (tools/cosign), run offline: it uploads
//! nothing to a transparency log (`--tlog-upload=false`) and checks none (`--insecure-ignore-tlog`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The password of the keys the tests make (`COSIGN_PASSWORD`, for cosign and wasp alike).
pub const PASSWORD: &str = "correct horse battery staple";

/// What the tests that run cosign lack here, if anything (see [`super::can_run`]).
pub fn missing() -> Option<String> {
    super::built("target/tools/cosign", "build it with scripts/build-controlplane.sh (scripts/test.sh does)")
}

fn binary() -> PathBuf {
    let path = super::repo_root().join("target/tools/cosign");
    assert!(path.exists(), "{} is missing: build it with scripts/build-controlplane.sh (scripts/test.sh does)", path.display());
    path
}

/// `cosign ARGS` in `dir` with the tests' password and a home and TUF cache of its own; the output, whatever the
/// outcome.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    run_with(dir, args, &[])
}

/// [`run`] with more environment (a registry's CA and credentials).
pub fn run_with(dir: &Path, args: &[&str], environment: &[(&str, PathBuf)]) -> Output {
    Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("TUF_ROOT", dir.join(".tuf"))
        .env("HOME", dir)
        .envs(environment.iter().map(|(name, value)| (*name, value)))
        .output()
        .expect("cosign runs")
}

/// `cosign generate-key-pair` in `dir`: cosign.key and cosign.pub.
pub fn generate_key_pair(dir: &Path) {
    must(dir, &["generate-key-pair"]);
}

/// `cosign sign-blob --key KEY FILE` into `signature`, offline.
pub fn sign(dir: &Path, key: &str, file: &str, signature: &str) {
    must(dir, &["sign-blob", "--yes", "--key", key, "--tlog-upload=false", "--output-signature", signature, file]);
}

/// `cosign verify-blob --key KEY --signature SIGNATURE FILE`, offline.
pub fn verify(dir: &Path, key: &str, signature: &str, file: &str) -> Output {
    run(dir, &["verify-blob", "--key", key, "--signature", signature, "--insecure-ignore-tlog=true", file])
}

fn must(dir: &Path, args: &[&str]) {
    let output = run(dir, args);
    assert!(output.status.success(), "cosign {}: {}{}", args.join(" "), String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
}
