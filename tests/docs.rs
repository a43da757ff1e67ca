//! The documentation as a reader follows it: every relative link of the README, docs/ and the other pages of the
//! tree leads to a file that exists, and every `#anchor` to a heading of that page (GitHub's slugs); the default
//! policy set in docs/policies.md is the set of policy crates in plugins/; the README's test command is the one
//! `.ci/run` runs.

use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The Markdown pages a reader reaches from the README.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    for page in ["README.md", "sdk/README.md", "sdk/RATIONALE.md", "sim/README.md", "host/RATIONALE.md", "controlplane/README.md"] {
        pages.push(root.join(page));
    }
    pages.sort();
    pages
}

/// A page's links (destination, as written) and its headings' anchors, as GitHub makes them.
struct Page {
    links: Vec<String>,
    anchors: BTreeSet<String>,
}

fn read_page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut links = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => links.push(dest_url.to_string()),
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(text) | Event::Code(text) => {
                if let Some(heading) = heading.as_mut() {
                    heading.push_str(&text);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let slug = github_slug(&heading.take().unwrap());
                // Repeated headings get -1, -2, ... in order.
                let count = seen.entry(slug.clone()).or_default();
                anchors.insert(if *count == 0 { slug.clone() } else { format!("{slug}-{count}") });
                *count += 1;
            }
            _ => {}
        }
    }
    Page { links, anchors }
}

/// GitHub's heading anchor: lower case, punctuation but `-` and `_` dropped, each space a `-`.
fn github_slug(heading: &str) -> String {
    heading.trim().to_lowercase().chars().filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_')).map(|c| if c == ' ' { '-' } else { c }).collect()
}

#[test]
fn every_link_between_pages_leads_to_a_file_and_a_heading_that_exist() {
    let root = repo_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let folder = page.parent().unwrap();
        let name = page.strip_prefix(&root).unwrap().display().to_string();
        for link in read_page(&page).links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').map_or((link.as_str(), None), |(file, anchor)| (file, Some(anchor)));
            let target = if file.is_empty() { page.clone() } else { folder.join(file) };
            if !target.exists() {
                broken.push(format!("{name}: {link}: no file {}", target.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                if target.extension().is_some_and(|extension| extension == "md") && !read_page(&target).anchors.contains(anchor) {
                    broken.push(format!("{name}: {link}: no heading with the anchor #{anchor} in {}", target.strip_prefix(&root).unwrap_or(&target).display()));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links found: is the parser reading the pages?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_the_ones_github_makes() {
    assert_eq!(github_slug("Hot reload: `cargo bench -p wasp --bench reload`"), "hot-reload-cargo-bench--p-wasp---bench-reload");
    assert_eq!(github_slug("`wasp simulate`: the whole story"), "wasp-simulate-the-whole-story");
    assert_eq!(github_slug("Why: wasp explain"), "why-wasp-explain");
}

#[test]
fn the_default_policy_set_page_lists_every_policy_crate_once() {
    let root = repo_root();
    // The rows of the first table: | `name` | kinds | what it does |
    let text = std::fs::read_to_string(root.join("docs/policies.md")).unwrap();
    let mut listed = Vec::new();
    let mut in_table = false;
    let mut cell: Option<String> = None;
    let mut column = 0;
    for event in Parser::new_ext(&text, pulldown_cmark::Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Table(_)) if listed.is_empty() => in_table = true,
            Event::End(TagEnd::Table) => in_table = false,
            // The header row names the columns.
            Event::Start(Tag::TableHead) => in_table = false,
            Event::End(TagEnd::TableHead) => in_table = listed.is_empty(),
            Event::Start(Tag::TableRow) => column = 0,
            Event::Start(Tag::TableCell) if in_table => cell = (column == 0).then(String::new),
            Event::Code(code) => {
                if let Some(cell) = cell.as_mut() {
                    cell.push_str(&code);
                }
            }
            Event::End(TagEnd::TableCell) if in_table => {
                if let Some(name) = cell.take() {
                    listed.push(name);
                }
                column += 1;
            }
            _ => {}
        }
    }
    let crates: BTreeSet<String> = std::fs::read_dir(root.join("plugins"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").exists())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        // The tutorial's policy, not part of the default set (sdk/README.md).
        .filter(|name| name != "prefer-zone")
        .collect();
    let listed_set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(listed.len(), listed_set.len(), "a policy listed twice: {listed:?}");
    assert_eq!(listed_set, crates, "docs/policies.md's table and plugins/ differ");
}

#[test]
fn the_readmes_test_command_is_the_one_ci_runs() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(readme.contains("\n./scripts/test.sh\n"), "the README's two commands lost the test command");
    assert!(ci.lines().any(|line| line.trim() == "bash scripts/test.sh"), ".ci/run no longer runs scripts/test.sh");
}

#[test]
fn the_command_line_reference_is_the_binarys_help() {
    let path = repo_root().join("docs/cli-reference.md");
    let generated = wasp::cli::reference::markdown();
    if std::env::var_os("WASP_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let page = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        page == generated,
        "docs/cli-reference.md is stale: WASP_UPDATE_DOCS=1 cargo test -p wasp --no-default-features --features sim --test docs writes it again"
    );
}

#[test]
fn the_number_of_policies_the_pages_give_is_the_builds() {
    let root = repo_root();
    // plugins/out holds one component per policy crate, the tutorial's example included: the bundle packs them all.
    let crates = std::fs::read_dir(root.join("plugins")).unwrap().filter(|entry| entry.as_ref().unwrap().path().join("Cargo.toml").exists()).count();
    let status = std::fs::read_to_string(root.join("docs/status.md")).unwrap();
    // "... all 31 in one bundle of 453 KiB ...": the word before the phrase.
    let before = status.split_once(" in one bundle").map_or("", |(before, _)| before);
    let stated = before.rsplit(' ').next().unwrap_or("");
    assert_eq!(stated.parse::<usize>().ok(), Some(crates), "docs/status.md says \"all {stated} in one bundle\"; plugins/ has {crates} policy crates");
}
