//! `wasp policy new` and `wasp policy build`: a policy crate that builds outside this repository (its own
//! release profile for small, fast components), with an example rule per kind and a passing test; and the build
//! of such a crate into a component, checked as the host will load it.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The kinds `wasp policy new --kind` knows.
const KINDS: [&str; 4] = ["filter", "score", "evict", "scale"];

/// `my-policy` -> `MyPolicy`.
fn type_name(name: &str) -> String {
    name.split('-').map(|part| part[..1].to_uppercase() + &part[1..]).collect()
}

/// A policy name is a file name and a Kubernetes-style name: lowercase letters, digits and dashes.
fn check_name(name: &str) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--");
    if !valid {
        bail!("{name:?}: a policy name is lowercase letters, digits and single dashes, starting with a letter (it becomes the file name {name}.wasm)");
    }
    Ok(())
}

/// Where the generated crate finds `wasp-sdk`: the SDK this binary was built with, when it is still there.
fn default_sdk() -> Option<PathBuf> {
    super::in_build_checkout("sdk/Cargo.toml").and_then(|manifest| manifest.parent().map(Path::to_path_buf))
}

fn cargo_toml(name: &str, sdk: &Path) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

# A crate of its own, not a member of any workspace above it.
[workspace]

[lib]
crate-type = ["cdylib", "rlib"]   # cdylib: the component; rlib: native tests

[dependencies]
wasp-sdk = {{ path = "{sdk}" }}
serde = {{ version = "1", features = ["derive"] }}

# Small and fast components: a ConfigMap holds 1 MiB, and per-node loops run ~2.5x faster at opt-level 3.
[profile.release]
opt-level = 3
lto = true
codegen-units = 1
strip = true
panic = "abort"

# serde_json's float printer: at opt-level "s" its tables take 200 bytes instead of 16.8 KB.
[profile.release.package.zmij]
opt-level = "s"
"#,
        sdk = sdk.display()
    )
}

fn lib_rs(name: &str, kinds: &[&str]) -> String {
    let ty = type_name(name);
    let has = |kind: &str| kinds.contains(&kind);
    let mut imports = vec!["Policy"];
    let mut uses = vec!["use serde::{Deserialize, Serialize};".to_string()];
    if has("filter") || has("score") {
        imports.extend(["Cluster", "NodeInfo"]);
        uses.push("use wasp_sdk::types::Pod;".into());
    }
    if has("filter") {
        imports.extend(["Filter", "Verdict"]);
    }
    if has("score") {
        imports.push("Score");
    }
    if has("evict") {
        imports.extend(["Evict", "ViewScope"]);
        if !imports.contains(&"Cluster") {
            imports.push("Cluster");
        }
        uses.push("use wasp_sdk::types::{EvictContext, Eviction};".into());
    }
    if has("scale") {
        imports.push("Scale");
        uses.push("use wasp_sdk::autoscaling::{Proposals, DEFAULT_TOLERANCE};".into());
        uses.push("use wasp_sdk::types::{ScaleDecision, ScaleRequest};".into());
    }
    uses.push(format!("use wasp_sdk::{{{}}};", imports.join(", ")));
    let mut rules = Vec::new();
    let mut tests = Vec::new();
    if has("filter") {
        rules.push(format!(
            r#"/// Nodes labelled `<label>=avoid` are rejected, with a reason the scheduler counts in its
/// `0/N nodes are available: ...` message.
impl Filter for {ty} {{
    fn filter(&self, _pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> Verdict {{
        match node.node.label(&self.settings.label) {{
            Some("avoid") => Verdict::reject(format!("node(s) labelled {{}}=avoid", self.settings.label)),
            _ => Verdict::Pass,
        }}
    }}
}}"#
        ));
        tests.push(format!(
            r#"    #[test]
    fn nodes_to_avoid_are_rejected() {{
        let mut cluster = Cluster::new();
        let avoided = cluster.add_node(NodeBuilder::new("a").label("example.com/{name}", "avoid").build());
        let other = cluster.add_node(NodeBuilder::new("b").build());
        let policy = build::<{ty}>("").unwrap();
        let pod = PodBuilder::new("p").build();
        assert_eq!(policy.filter(&pod, cluster.node(avoided).unwrap(), &cluster), Verdict::reject("node(s) labelled example.com/{name}=avoid"));
        assert_eq!(policy.filter(&pod, cluster.node(other).unwrap(), &cluster), Verdict::Pass);
    }}"#
        ));
    }
    if has("score") {
        rules.push(format!(
            r#"/// Nodes labelled `<label>=prefer` score 100, the others 0.
impl Score for {ty} {{
    fn score(&self, _pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {{
        if node.node.label(&self.settings.label) == Some("prefer") {{ 100 }} else {{ 0 }}
    }}
}}"#
        ));
        tests.push(format!(
            r#"    #[test]
    fn preferred_nodes_score_higher() {{
        let mut cluster = Cluster::new();
        let preferred = cluster.add_node(NodeBuilder::new("a").label("example.com/{name}", "prefer").build());
        let other = cluster.add_node(NodeBuilder::new("b").build());
        let policy = build::<{ty}>("").unwrap();
        assert_eq!(policy.score_all(&PodBuilder::new("p").build(), &cluster, &[preferred, other]), vec![100, 0]);
    }}"#
        ));
    }
    if has("evict") {
        rules.push(format!(
            r#"/// Pods on nodes labelled `<label>=retire` are proposed; the host decides within its limits and budgets.
impl Evict for {ty} {{
    fn propose(&self, cluster: &Cluster, _context: &EvictContext) -> Vec<Eviction> {{
        let retiring = cluster.nodes().filter(|node| node.node.label(&self.settings.label) == Some("retire"));
        retiring
            .flat_map(|node| cluster.pods_on(node).map(move |bound| Eviction::new(bound.id, format!("node {{}} is retiring", node.name()))))
            .collect()
    }}
}}"#
        ));
        tests.push(format!(
            r#"    #[test]
    fn pods_on_retiring_nodes_are_proposed() {{
        let mut cluster = Cluster::new();
        let retiring = cluster.add_node(NodeBuilder::new("old").label("example.com/{name}", "retire").build());
        let other = cluster.add_node(NodeBuilder::new("new").build());
        let moved = cluster.bind(PodBuilder::new("a").running().build(), retiring);
        cluster.bind(PodBuilder::new("b").running().build(), other);
        let policy = build::<{ty}>("").unwrap();
        let proposed: Vec<_> = policy.propose(&cluster, &EvictContext::at(0)).into_iter().map(|eviction| eviction.pod).collect();
        assert_eq!(proposed, vec![moved]);
    }}"#
        ));
    }
    if has("scale") {
        rules.push(format!(
            r#"/// The HPA's rule: each metric proposes replicas, the largest proposal wins. The host applies min/max,
/// stabilization and rate limits whatever this returns.
impl Scale for {ty} {{
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {{
        let Proposals {{ proposals, details, failures }} = Proposals::of(request, DEFAULT_TOLERANCE);
        let desired = proposals.iter().map(|proposal| proposal.replicas).max().ok_or_else(|| failures.join("; "))?;
        Ok(ScaleDecision::horizontal(desired, details.join("; "), proposals))
    }}
}}"#
        ));
        tests.push(format!(
            r#"    #[test]
    fn twice_the_target_doubles_the_replicas() {{
        let metric = MetricBuilder::utilization("cpu", 50.0).ready(100.0).ready(100.0).build();
        let policy = build::<{ty}>("").unwrap();
        assert_eq!(policy.recommend(&scale_request(2, 1, 10, vec![metric])).unwrap().desired_replicas, 4);
    }}"#
        ));
    }
    let view = if has("evict") { "\n    const VIEW: ViewScope = ViewScope::NodesAndPods;" } else { "" };
    let mut test_uses = vec!["    use super::*;".to_string(), "    use wasp_sdk::testing::build;".to_string()];
    if has("filter") || has("score") || has("evict") {
        test_uses.push("    use wasp_sdk::testing::{NodeBuilder, PodBuilder};".into());
    }
    if has("scale") {
        test_uses.push("    use wasp_sdk::testing::{scale_request, MetricBuilder};".into());
    }
    format!(
        r##"//! `{name}`: written by `wasp policy new`. Replace the example rules with yours; keep the tests passing.

{uses}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {{
    /// The node label the example rules read.
    pub label: String,
}}

impl Default for Settings {{
    fn default() -> Self {{
        Settings {{ label: "example.com/{name}".into() }}
    }}
}}

pub struct {ty} {{
    settings: Settings,
}}

impl Policy for {ty} {{
    type Settings = Settings;
    const NAME: &'static str = "{name}";{view}
    const SETTINGS_DOC: &'static str = "label: the node label the rules read (default example.com/{name})";

    fn new(settings: Settings) -> Result<Self, String> {{
        if settings.label.is_empty() {{
            return Err("label: must not be empty".into());
        }}
        Ok({ty} {{ settings }})
    }}
}}

{rules}

wasp_sdk::export_policy!({ty});

#[cfg(test)]
mod tests {{
{test_uses}

{tests}

    #[test]
    fn bad_settings_name_the_field() {{
        assert_eq!(build::<{ty}>(r#"{{"label": ""}}"#).err().unwrap(), "invalid settings for {name}: label: must not be empty");
    }}
}}
"##,
        uses = uses.join("\n"),
        rules = rules.join("\n\n"),
        test_uses = test_uses.join("\n"),
        tests = tests.join("\n\n"),
    )
}

fn readme(name: &str, kinds: &[&str]) -> String {
    format!(
        "# {name}\n\nA wasp policy ({kinds}), made by `wasp policy new`.\n\n```sh\ncargo test                 # native tests\nwasp policy build          # -> {name}.wasm, checked as the host loads it\nwasp policy eval {name}.wasm --pod pod.yaml --nodes nodes.yaml\n```\n\nTo run it: copy `{name}.wasm` into the host's policy directory (the file name must be the policy's name) and\nname it in the configuration (a profile's `filters`/`scores`, a rescheduler strategy, or an autoscaler policy);\nthe running host swaps it in without a restart.\n",
        kinds = kinds.join(", ")
    )
}

/// `wasp policy new NAME --kind ... [--dir DIR] [--sdk PATH]`: writes DIR/NAME and returns its path.
pub fn new_policy(name: &str, kinds: &[String], dir: &Path, sdk: Option<&Path>) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    let kinds: Vec<&str> = kinds.iter().flat_map(|kind| kind.split(',')).map(str::trim).filter(|kind| !kind.is_empty()).collect();
    if kinds.is_empty() {
        bail!("--kind: name at least one of {}", KINDS.join(", "));
    }
    if let Some(unknown) = kinds.iter().find(|kind| !KINDS.contains(kind)) {
        bail!("--kind: {unknown:?} is not one of {}", KINDS.join(", "));
    }
    let sdk = match sdk {
        Some(path) => path.canonicalize().with_context(|| format!("--sdk {}", path.display()))?,
        None => default_sdk().context("--sdk: where is wasp-sdk? (the path of the sdk/ folder of a wasp checkout)")?,
    };
    if !sdk.join("Cargo.toml").is_file() {
        bail!("--sdk {}: no Cargo.toml there", sdk.display());
    }
    let root = dir.join(name);
    if root.exists() {
        bail!("{} exists already", root.display());
    }
    std::fs::create_dir_all(root.join("src")).with_context(|| format!("creating {}", root.display()))?;
    for (file, text) in [("Cargo.toml", cargo_toml(name, &sdk)), ("src/lib.rs", lib_rs(name, &kinds)), ("README.md", readme(name, &kinds))] {
        std::fs::write(root.join(file), text).with_context(|| format!("writing {}", root.join(file).display()))?;
    }
    Ok(root)
}

/// `wasp policy build [DIR]`: builds the crate for `wasm32-wasip2` in release (installing the target if
/// missing), copies the component to DIR/<name>.wasm and writes it compressed to DIR/<name>.wasm.zst; returns the
/// `.wasm`'s path.
pub fn build_policy(dir: &Path) -> anyhow::Result<PathBuf> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        bail!("{}: no Cargo.toml (run `wasp policy build` in the policy's crate, or name its folder)", dir.display());
    }
    // Cargo says what the package is called and where it builds (CARGO_TARGET_DIR, a workspace above...).
    let metadata = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .output()
        .context("running cargo metadata")?;
    if !metadata.status.success() {
        bail!("cargo metadata: {}", String::from_utf8_lossy(&metadata.stderr).trim());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).context("reading cargo metadata")?;
    let name = metadata.pointer("/packages/0/name").and_then(serde_json::Value::as_str).context("cargo metadata lists no package")?.to_string();
    let target = metadata["target_directory"].as_str().map(PathBuf::from).context("cargo metadata gives no target directory")?;
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).lines().any(|line| line == "wasm32-wasip2"));
    if installed.is_ok_and(|installed| !installed) {
        let status = Command::new("rustup").args(["target", "add", "wasm32-wasip2"]).status().context("running rustup")?;
        if !status.success() {
            bail!("rustup target add wasm32-wasip2 failed");
        }
    }
    let status =
        Command::new("cargo").args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"]).arg(&manifest).status().context("running cargo")?;
    if !status.success() {
        bail!("cargo build failed for {}", manifest.display());
    }
    let built = target.join("wasm32-wasip2/release").join(format!("{}.wasm", name.replace('-', "_")));
    let out = dir.join(format!("{name}.wasm"));
    std::fs::copy(&built, &out).with_context(|| format!("copying {} to {}", built.display(), out.display()))?;
    let bytes = std::fs::read(&out).with_context(|| format!("reading {}", out.display()))?;
    let compressed = out.with_extension("wasm.zst");
    std::fs::write(&compressed, crate::registry::bundle::compress(&bytes)?).with_context(|| format!("writing {}", compressed.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tests/fixtures/scaffolded` is built and tested with the workspace (and loaded as a component by
    /// tests/cli.rs): it must be exactly what the template writes. To update it after changing the template:
    /// `wasp policy new scaffolded --kind filter,score,evict,scale --dir /tmp` and copy its src/lib.rs.
    #[test]
    fn the_built_fixture_is_what_the_template_writes() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/scaffolded/src/lib.rs");
        assert_eq!(std::fs::read_to_string(fixture).unwrap(), lib_rs("scaffolded", &KINDS), "regenerate tests/fixtures/scaffolded/src/lib.rs");
    }

    #[test]
    fn names_and_kinds_are_checked() {
        let dir = std::env::temp_dir();
        let error = new_policy("My_Policy", &["filter".into()], &dir, None).unwrap_err().to_string();
        assert!(error.starts_with(r#""My_Policy": a policy name is lowercase letters"#), "{error}");
        let error = new_policy("ok", &["filter,sorce".into()], &dir, None).unwrap_err().to_string();
        assert_eq!(error, r#"--kind: "sorce" is not one of filter, score, evict, scale"#);
        assert_eq!(type_name("remove-old-pods"), "RemoveOldPods");
    }
}
