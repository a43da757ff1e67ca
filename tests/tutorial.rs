//! `sdk/README.md` is the tutorial, and this runs it as a new user would: every `sh` block in order, in a fresh
//! home directory, with the `wasp` under test first on the PATH. The policy is the README's own Rust (sections 2
//! and 3), written into the scaffolded crate where section 2 says. The last blocks start `wasp sim serve` and
//! `wasp run`, and swap the policy in the running host; this checks what the host decided before and after.

mod common;

use common::repo_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fenced blocks of `language` in `markdown`, each with the `## ` heading it is under.
fn blocks(markdown: &str, language: &str) -> Vec<(String, String)> {
    let (mut heading, mut open, mut found) = (String::new(), None::<String>, Vec::new());
    for line in markdown.lines() {
        match &mut open {
            Some(body) if line == "```" => {
                found.push((heading.clone(), std::mem::take(body)));
                open = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None if line.starts_with("## ") => heading = line.to_string(),
            None if line.strip_prefix("```") == Some(language) => open = Some(String::new()),
            None => {}
        }
    }
    found
}

/// The bodies of the blocks under the heading `## <number>. ...`.
fn in_section<'a>(blocks: &'a [(String, String)], number: &str) -> Vec<&'a str> {
    let heading_start = format!("## {number}. ");
    blocks.iter().filter(|(heading, _)| heading.starts_with(&heading_start)).map(|(_, body)| body.as_str()).collect()
}

fn tutorial_rust(readme: &str) -> String {
    let rust = blocks(readme, "rust");
    let (policy, tests) = (in_section(&rust, "2"), in_section(&rust, "3"));
    assert_eq!((policy.len(), tests.len()), (1, 1), "section 2 holds the policy, section 3 its tests");
    format!("{}\n{}", policy[0], tests[0])
}

#[test]
fn the_example_crate_in_this_repository_is_the_tutorials_policy() {
    let readme = std::fs::read_to_string(repo_root().join("sdk/README.md")).unwrap();
    let source = std::fs::read_to_string(repo_root().join("plugins/prefer-zone/src/lib.rs")).unwrap();
    assert_eq!(source, tutorial_rust(&readme), "plugins/prefer-zone/src/lib.rs must be sdk/README.md's sections 2 and 3");
}

/// Kills what a block left running (the simulator and the host) when the test ends, passed or not.
struct ProcessGroups(Vec<u32>);

impl Drop for ProcessGroups {
    fn drop(&mut self) {
        for group in &self.0 {
            let _ = Command::new("kill").arg("--").arg(format!("-{group}")).stderr(std::process::Stdio::null()).status();
        }
    }
}

fn home_of_tools(variable: &str, default: &str) -> PathBuf {
    std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(default))
}

/// Runs one block with bash (`-euo pipefail`: any failing command fails it) in its own process group.
fn run_block(block: &str, home: &Path, groups: &mut ProcessGroups) -> String {
    let folder = [home.join("policies/prefer-zone"), home.to_path_buf()].into_iter().find(|dir| dir.is_dir()).unwrap();
    let binaries = Path::new(env!("CARGO_BIN_EXE_wasp")).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(std::iter::once(binaries).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()))).unwrap();
    // The user's cargo and rustup stay where they are; a target directory under ours keeps reruns incremental.
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from).join("tutorial");
    let mut command = Command::new("timeout");
    command
        .args(["600", "bash", "-euo", "pipefail", "-c", block])
        .current_dir(&folder)
        .env("HOME", home)
        .env("WASP", repo_root())
        .env("PATH", path)
        .env("CARGO_HOME", home_of_tools("CARGO_HOME", ".cargo"))
        .env("RUSTUP_HOME", home_of_tools("RUSTUP_HOME", ".rustup"))
        .env("CARGO_TARGET_DIR", target)
        .env_remove("KUBECONFIG");
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("bash and timeout are installed");
    groups.0.push(child.id());
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "this block of sdk/README.md failed ({}):\n{block}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    stdout.into_owned()
}

fn kubectl(home: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl").args(args).env("KUBECONFIG", home.join("try/kubeconfig")).output().expect("kubectl is installed");
    assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The zones of the nodes the pods labelled `app=<app>` run on.
fn zones_of(home: &Path, app: &str) -> Vec<String> {
    let nodes = kubectl(home, &["get", "pods", "-l", &format!("app={app}"), "-o", "jsonpath={.items[*].spec.nodeName}"]);
    let zone_path = r"jsonpath={.metadata.labels.topology\.kubernetes\.io/zone}";
    nodes.split_whitespace().map(|node| kubectl(home, &["get", "node", node, "-o", zone_path])).collect()
}

#[test]
fn the_tutorial_runs_from_a_new_crate_to_a_swap_in_a_running_host() {
    let readme = std::fs::read_to_string(repo_root().join("sdk/README.md")).unwrap();
    let commands = blocks(&readme, "sh");
    let home = tempfile::tempdir().unwrap();
    let mut groups = ProcessGroups(Vec::new());

    for block in in_section(&commands, "1") {
        run_block(block, home.path(), &mut groups);
    }
    let crate_dir = home.path().join("policies/prefer-zone");
    assert!(crate_dir.join("prefer-zone.wasm").is_file(), "section 1 builds the scaffolded policy");
    // What a user's trivial policy costs in a ConfigMap: the compressed component `wasp policy build` writes,
    // under 68 KB (60.2 KB on 2026-12-02; 64.7 KB on contract 0.10, whose scale records every component lifts,
    // since every component exports `scale`: docs/performance.md, "Component sizes").
    let compressed = std::fs::metadata(crate_dir.join("prefer-zone.wasm.zst")).unwrap().len();
    assert!(compressed < 68_000, "the scaffolded policy takes {compressed} bytes compressed, over 68 KB (it took 64.7 KB)");
    std::fs::write(crate_dir.join("src/lib.rs"), tutorial_rust(&readme)).unwrap();
    for block in [in_section(&commands, "3"), in_section(&commands, "4")].concat() {
        run_block(block, home.path(), &mut groups);
    }

    let serve = in_section(&commands, "5");
    assert_eq!(serve.len(), 2, "section 5: serve the policy, then swap it");
    let listed = run_block(serve[0], home.path(), &mut groups);
    assert!(listed.contains("batch-"), "kubectl lists the pods: {listed}");
    let zones = zones_of(home.path(), "batch");
    assert_eq!(zones.len(), 4, "every batch pod is bound: {zones:?}");
    assert!(zones.iter().all(|zone| zone == "zone-b"), "the policy's zone setting decided where the batch pods went: {zones:?}");

    let before = std::fs::read_to_string(home.path().join("try/wasp.log")).unwrap();
    run_block(serve[1], home.path(), &mut groups);
    let policies = served_policies();
    assert!(policies.contains("\"version\":\"0.2.0\""), "{policies}");
    let log = std::fs::read_to_string(home.path().join("try/wasp.log")).unwrap();
    assert!(log.starts_with(&before), "the same host process kept writing its log: it was not restarted");
}

/// `/policies` of the host the tutorial started.
fn served_policies() -> String {
    let output = Command::new("curl").args(["-s", "127.0.0.1:10251/policies"]).output().expect("curl is installed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}
