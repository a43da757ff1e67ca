//! wasp installed on a control plane exactly as the README's "Install on a cluster" gives it: `kubectl apply -f
//! manifests/`, the default policy set as one ConfigMap (`wasp configmap --bundle | kubectl create -f -`), and the
//! webhooks' certificate from `wasp certs` with the patches it prints, run as printed.

use super::control_plane::ControlPlane;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `wasp ARGS` (the test build) in the repository's root; fails the test if it fails.
pub fn wasp(args: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_wasp")).args(args).current_dir(super::repo_root()).output().unwrap();
    assert!(output.status.success(), "wasp {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    output
}

/// Installs wasp as the README says; returns the folder `wasp certs --out-dir` wrote ca.crt, tls.crt and
/// tls.key into.
pub fn readme_install(cluster: &ControlPlane) -> PathBuf {
    let manifests = super::repo_root().join("manifests");
    cluster.must(&["apply", "-f", manifests.to_str().unwrap()]);
    create_policy_bundle(cluster);
    let tls = cluster.dir.path().join("wasp-tls");
    let certs = wasp(&["certs", "--out-dir", tls.to_str().unwrap()]);
    let applied = cluster.kubectl_input(&["apply", "-f", "-"], &String::from_utf8(certs.stdout).unwrap());
    assert!(applied.ok, "the webhook Secret: {}", applied.stderr);
    let instructions = String::from_utf8(certs.stderr).unwrap();
    let patches: Vec<&str> = instructions.lines().map(str::trim).filter(|line| line.starts_with("kubectl patch")).collect();
    assert_eq!(patches.len(), 2, "wasp certs prints a patch per webhook configuration: {instructions}");
    for patch in patches {
        let status = Command::new("sh").arg("-c").arg(patch).env("KUBECONFIG", &cluster.kubeconfig).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "{patch}");
    }
    tls
}

/// The default policy set as one ConfigMap, as the README's install creates it.
pub fn create_policy_bundle(cluster: &ControlPlane) {
    let bundle = wasp(&["configmap", "--from-dir", "plugins/out", "--bundle"]);
    let created = cluster.kubectl_input(&["create", "-f", "-"], &String::from_utf8(bundle.stdout).unwrap());
    assert!(created.ok, "the policy bundle ConfigMap: {}", created.stderr);
}
