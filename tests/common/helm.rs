//! helm itself, built from its Go module by scripts/build-controlplane.sh (tools/helm), and charts/wasp rendered
//! by it.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::control_plane::Output;

/// What the tests that run helm lack here, if anything (see [`super::can_run`]).
pub fn missing() -> Option<String> {
    super::built("target/tools/helm", "build it with scripts/build-controlplane.sh (scripts/test.sh does)")
}

fn binary() -> PathBuf {
    let path = super::repo_root().join("target/tools/helm");
    assert!(path.exists(), "{} is missing: build it with scripts/build-controlplane.sh (scripts/test.sh does)", path.display());
    path
}

/// The chart, charts/wasp.
pub fn chart() -> PathBuf {
    super::repo_root().join("charts/wasp")
}

/// `helm ARGS` against the cluster of `kubeconfig` (none: no cluster), with a home of its own under `home`; the
/// output, whatever the outcome.
pub fn run(home: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Output {
    let mut helm = Command::new(binary());
    helm.args(args)
        .current_dir(super::repo_root())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    match kubeconfig {
        Some(kubeconfig) => helm.env("KUBECONFIG", kubeconfig),
        // Nothing to reach: `helm template` and `helm lint` never ask a cluster.
        None => helm.env("KUBECONFIG", home.join("no-cluster")),
    };
    let output = helm.output().unwrap();
    Output { ok: output.status.success(), stdout: String::from_utf8_lossy(&output.stdout).into(), stderr: String::from_utf8_lossy(&output.stderr).into() }
}

/// `helm template wasp charts/wasp --namespace NAMESPACE --include-crds ARGS`: every object it renders.
pub fn render(namespace: &str, args: &[&str]) -> Vec<serde_yaml::Value> {
    let home = tempfile::tempdir().unwrap();
    let chart = chart();
    let mut all = vec!["template", "wasp", chart.to_str().unwrap(), "--namespace", namespace, "--include-crds"];
    all.extend_from_slice(args);
    let rendered = run(home.path(), None, &all);
    assert!(rendered.ok, "helm {}: {}", all.join(" "), rendered.stderr);
    objects(&rendered.stdout)
}

/// The objects of a multi-document YAML text (empty documents skipped).
pub fn objects(text: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|object: &serde_yaml::Value| !object.is_null())
        .collect()
}
