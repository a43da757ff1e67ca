//! `wasp policy new|build|inspect|eval|test|sign|verify|generate-key-pair`: start a policy crate, build it, look
//! inside a component, run it on Kubernetes YAML or on a simulated cluster, sign it and check its signature.

use super::manifests;
use crate::cluster::{convert, ClusterState};
use crate::contract::types::PolicyKind;
use crate::contract::{EvictContext, PendingPod};
use crate::policy::{LoadedPolicy, PolicyOptions};
use crate::registry::signature;
use crate::runtime::Runtime;
use crate::scheduler::cycle;
use anyhow::Context;
use clap::Subcommand;
use k8s_openapi::api::core::v1 as core;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Start a policy crate (builds outside this repository): an example rule per kind and passing tests.
    New {
        /// The policy's name: lowercase, digits and dashes; also the component's file name.
        name: String,
        /// What it decides: filter, score, evict, scale (comma-separated or repeated).
        #[arg(long = "kind", required = true)]
        kinds: Vec<String>,
        /// Where the crate's folder is made.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The wasp-sdk to depend on (default: the sdk/ of the checkout this wasp was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build a policy crate into a wasm32-wasip2 component (NAME.wasm in the crate, and NAME.wasm.zst compressed)
    /// and check it as the host loads it.
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Name, version, kinds, contract version, size and settings of a component.
    Inspect {
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a component's filter and score (or evict) on a pod and nodes from Kubernetes YAML.
    Eval {
        file: PathBuf,
        /// The pod to place (YAML).
        #[arg(long)]
        pod: PathBuf,
        /// The nodes (YAML: several documents or a List).
        #[arg(long)]
        nodes: PathBuf,
        /// Pods already bound to the nodes (`spec.nodeName` set): they count toward usage.
        #[arg(long)]
        pods: Option<PathBuf>,
        /// Settings as a JSON file, or inline JSON.
        #[arg(long)]
        settings: Option<String>,
    },
    /// Sign a component with cosign's private key file (as `cosign sign-blob --key`; the password from
    /// COSIGN_PASSWORD). The uncompressed component is signed: the signature holds for NAME.wasm, NAME.wasm.zst and
    /// the component in a bundle.
    Sign {
        file: PathBuf,
        /// cosign's private key (`cosign generate-key-pair` or `wasp policy generate-key-pair`).
        #[arg(long)]
        key: PathBuf,
        /// Where the signature goes (default: NAME.wasm.sig beside the component, where the host looks).
        #[arg(long)]
        output_signature: Option<PathBuf>,
    },
    /// Check a component's signature with a public key, as the host does before loading it (and as
    /// `cosign verify-blob --key` does).
    Verify {
        file: PathBuf,
        /// A public key (PEM), such as cosign.pub; repeat for several: one of them must have signed.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        /// The signature (default: NAME.wasm.sig beside the component).
        #[arg(long)]
        signature: Option<PathBuf>,
    },
    /// Write a new key pair in cosign's format (PREFIX.key encrypted with COSIGN_PASSWORD, PREFIX.pub), for teams
    /// without cosign; cosign's own keys work the same.
    GenerateKeyPair {
        #[arg(long, default_value = "cosign")]
        output_key_prefix: String,
    },
    /// Push a component to an OCI registry (the CNCF wasm artifact layout), optionally signed as `cosign sign --key`
    /// signs an image.
    Push {
        file: PathBuf,
        /// oci://REGISTRY/REPOSITORY:TAG
        reference: String,
        /// cosign's private key: attach a signature of the pushed manifest (password from COSIGN_PASSWORD).
        #[arg(long)]
        sign_key: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Pull a component from an OCI registry by tag or digest, checking its attached signature with --key.
    Pull {
        /// oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:HEX
        reference: String,
        /// Where the component goes.
        #[arg(long, short)]
        output: PathBuf,
        /// A public key (PEM, such as cosign.pub); repeat for several: one of them must have signed the manifest.
        #[arg(long = "key")]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Try a component on a simulated cluster: `wasp simulate --policy FILE.wasm` with the scenario given.
    #[cfg(feature = "sim")]
    Test {
        file: PathBuf,
        /// The scenario (see sim/scenarios/).
        #[arg(long)]
        scenario: PathBuf,
        /// Host configuration the component joins; the built-in default uses the policies in plugins/out.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

pub fn run(command: PolicyCommand) -> anyhow::Result<()> {
    match command {
        PolicyCommand::New { name, kinds, dir, sdk } => {
            let root = super::scaffold::new_policy(&name, &kinds, &dir, sdk.as_deref())?;
            println!("created {}\n  cd {} && cargo test && wasp policy build", root.display(), root.display());
            Ok(())
        }
        PolicyCommand::Build { dir } => {
            let component = super::scaffold::build_policy(&dir)?;
            inspect(&component, false)?;
            let compressed = component.with_extension("wasm.zst");
            let size = std::fs::metadata(&compressed).with_context(|| format!("reading {}", compressed.display()))?.len();
            println!("compressed {size} bytes in {} (the host loads either file)", compressed.display());
            Ok(())
        }
        PolicyCommand::Inspect { file, json } => inspect(&file, json),
        PolicyCommand::Eval { file, pod, nodes, pods, settings } => eval(&file, &pod, &nodes, pods.as_deref(), settings.as_deref()),
        PolicyCommand::Sign { file, key, output_signature } => sign(&file, &key, output_signature),
        PolicyCommand::Verify { file, keys, signature } => verify(&file, &keys, signature),
        PolicyCommand::GenerateKeyPair { output_key_prefix } => generate_key_pair(&output_key_prefix),
        PolicyCommand::Push { file, reference, sign_key, registry } => block_on(push(&file, &reference, sign_key.as_deref(), &registry.options())),
        PolicyCommand::Pull { reference, output, keys, registry } => block_on(pull(&reference, &output, &keys, &registry.options())),
        #[cfg(feature = "sim")]
        PolicyCommand::Test { file, scenario, config } => super::simulate::run(super::simulate::SimulateArgs::trying(file, scenario, config)),
    }
}

pub(super) fn load(file: &Path, settings: String) -> anyhow::Result<LoadedPolicy> {
    let wasm = crate::registry::bundle::read_component(file)?;
    let runtime = Runtime::new(None)?;
    let options = PolicyOptions { settings, ..Default::default() };
    Ok(LoadedPolicy::load(&runtime, &file.display().to_string(), &wasm, options)?)
}

fn inspect(file: &Path, json: bool) -> anyhow::Result<()> {
    let policy = load(file, String::new())?;
    let descriptor = &policy.descriptor;
    let kinds: Vec<&str> = descriptor.kinds.iter().map(|kind| kind.as_str()).collect();
    let defaults: serde_json::Value = serde_json::from_str(&descriptor.default_settings)?;
    if json {
        let report = serde_json::json!({
            "name": descriptor.name,
            "version": descriptor.version,
            "kinds": kinds,
            "view": descriptor.view.as_str(),
            "contract": format!("wasp:policy@{}", policy.contract_version),
            "size": policy.size,
            "sha256": policy.digest,
            "defaultSettings": defaults,
            "settingsDoc": descriptor.settings_doc,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("name       {}", descriptor.name);
    println!("version    {}", descriptor.version);
    println!("kinds      {}", kinds.join(", "));
    println!("view       {}", descriptor.view.as_str());
    println!("contract   wasp:policy@{}", policy.contract_version);
    println!("size       {} bytes", policy.size);
    println!("sha256     {}", policy.digest);
    println!("settings   {}", serde_json::to_string(&defaults)?);
    for line in descriptor.settings_doc.lines() {
        println!("           {line}");
    }
    Ok(())
}

/// `COSIGN_PASSWORD`, empty when unset (cosign would prompt; wasp runs where nobody can answer).
fn password() -> Vec<u8> {
    std::env::var_os(signature::PASSWORD_VARIABLE).map(|value| value.into_encoded_bytes()).unwrap_or_default()
}

fn sign(file: &Path, key: &Path, output: Option<PathBuf>) -> anyhow::Result<()> {
    let component = crate::registry::bundle::read_component(file)?;
    let signer = signature::SigningKey::read(key, &password()).map_err(anyhow::Error::msg)?;
    let output = output.unwrap_or_else(|| signature::signature_path(file));
    std::fs::write(&output, signer.sign(&component).map_err(anyhow::Error::msg)?).with_context(|| format!("writing {}", output.display()))?;
    println!("signed {} (sha256 {}) into {}", file.display(), crate::registry::source::sha256_hex(&component), output.display());
    Ok(())
}

fn verify(file: &Path, keys: &[PathBuf], signature_file: Option<PathBuf>) -> anyhow::Result<()> {
    let component = crate::registry::bundle::read_component(file)?;
    let keys = keys.iter().map(|path| signature::PublicKey::read(path)).collect::<Result<Vec<_>, _>>().map_err(anyhow::Error::msg)?;
    let signature_file = signature_file.unwrap_or_else(|| signature::signature_path(file));
    let text = crate::registry::source::read_regular(&signature_file, signature::MAX_SIGNATURE_BYTES)
        .with_context(|| format!("reading the signature {}", signature_file.display()))?;
    let key = signature::verify(&keys.iter().collect::<Vec<_>>(), &component, Some(&text)).map_err(|error| anyhow::anyhow!("{}: {error}", file.display()))?;
    println!("verified {} (sha256 {}): signed by {}", file.display(), crate::registry::source::sha256_hex(&component), key.name);
    Ok(())
}

fn generate_key_pair(prefix: &str) -> anyhow::Result<()> {
    // A key is never encrypted with an empty password by accident (set it empty to mean it).
    anyhow::ensure!(
        std::env::var_os(signature::PASSWORD_VARIABLE).is_some(),
        "set {} to the password that encrypts the private key",
        signature::PASSWORD_VARIABLE
    );
    let (private, public) = signature::generate_key_pair(&password()).map_err(anyhow::Error::msg)?;
    let (private_path, public_path) = (format!("{prefix}.key"), format!("{prefix}.pub"));
    // Never over an existing key (a lost private key cannot be recovered), and readable by its owner only.
    let write_new = |path: &str, text: &str, mode: u32| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .with_context(|| format!("writing {path} (an existing file is not overwritten)"))?;
        file.write_all(text.as_bytes()).with_context(|| format!("writing {path}"))
    };
    write_new(&private_path, &private, 0o600)?;
    write_new(&public_path, &public, 0o644)?;
    println!("private key written to {private_path} (encrypted with {}), public key to {public_path}", signature::PASSWORD_VARIABLE);
    Ok(())
}

/// How `push` and `pull` reach a registry.
#[derive(clap::Args)]
pub struct RegistryArgs {
    /// A Docker config file with the registry's credentials (default: $DOCKER_CONFIG/config.json or
    /// ~/.docker/config.json when there is one).
    #[arg(long)]
    registry_config: Option<PathBuf>,
    /// CA certificates (PEM) to trust besides the system's, for a registry with a private CA.
    #[arg(long)]
    registry_ca: Option<PathBuf>,
}

impl RegistryArgs {
    fn options(&self) -> crate::oci::RegistryOptions {
        let docker_config =
            std::env::var_os("DOCKER_CONFIG").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker")));
        let default = docker_config.map(|dir| dir.join("config.json")).filter(|file| file.exists());
        crate::config::Registries { credentials: self.registry_config.clone().or(default), ca_file: self.registry_ca.clone() }.options()
    }
}

fn block_on<T>(future: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(future)
}

async fn push(file: &Path, reference: &str, sign_key: Option<&Path>, options: &crate::oci::RegistryOptions) -> anyhow::Result<()> {
    let component = crate::registry::bundle::read_component(file)?;
    // Refused before anything is pushed: a signing key that does not open, or a file that is not a component.
    let signer = sign_key.map(|key| signature::SigningKey::read(key, &password())).transpose().map_err(anyhow::Error::msg)?;
    crate::policy::check_binary_kind(&component).map_err(|error| anyhow::anyhow!("{}: {error}", file.display()))?;
    let reference = crate::oci::parse_reference(reference)?;
    let client = crate::oci::RegistryClient::new(options, &reference)?;
    let digest = client.push(&reference, component).await?;
    println!("pushed {} to {} ({digest})", file.display(), reference.whole());
    println!("pinned: {}{}", crate::oci::SCHEME, reference.clone_with_digest(digest.clone()).whole());
    if let Some(signer) = signer {
        let signatures = client.attach_signature(&reference, &digest, &signer).await?;
        println!("signature attached as {}", signatures.whole());
    }
    Ok(())
}

async fn pull(reference: &str, output: &Path, keys: &[PathBuf], options: &crate::oci::RegistryOptions) -> anyhow::Result<()> {
    let keys = keys.iter().map(|path| signature::PublicKey::read(path)).collect::<Result<Vec<_>, _>>().map_err(anyhow::Error::msg)?;
    let reference = crate::oci::parse_reference(reference)?;
    let client = crate::oci::RegistryClient::new(options, &reference)?;
    let pulled = client.fetch(&reference).await?;
    let pinned = reference.clone_with_digest(pulled.digest.clone());
    if !keys.is_empty() {
        let key = pulled.signer(&keys.iter().collect::<Vec<_>>()).map_err(|error| anyhow::anyhow!("{}: {error}", reference.whole()))?;
        println!("verified {}: signed by {}", pinned.whole(), key.name);
    }
    std::fs::write(output, &pulled.component).with_context(|| format!("writing {}", output.display()))?;
    println!("pulled {}{} into {} (sha256 {})", crate::oci::SCHEME, pinned.whole(), output.display(), crate::registry::source::sha256_hex(&pulled.component));
    Ok(())
}

fn read_settings(settings: Option<&str>) -> anyhow::Result<String> {
    match settings {
        None => Ok(String::new()),
        Some(inline) if inline.trim_start().starts_with('{') => Ok(inline.to_string()),
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading settings {path}")),
    }
}

fn eval(file: &Path, pod_file: &Path, nodes_file: &Path, pods_file: Option<&Path>, settings: Option<&str>) -> anyhow::Result<()> {
    let policy = std::sync::Arc::new(load(file, read_settings(settings)?)?);
    let mut cluster = ClusterState::new();
    for node in manifests::read_objects::<core::Node>(nodes_file, "Node")? {
        cluster.upsert_node(convert::node(&node).with_context(|| nodes_file.display().to_string())?);
    }
    if let Some(pods_file) = pods_file {
        for source in manifests::read_objects::<core::Pod>(pods_file, "Pod")? {
            let Some(node_name) = source.spec.as_ref().and_then(|spec| spec.node_name.clone()) else {
                tracing::warn!(pod = %convert::pod_key(&source), "skipping pod without spec.nodeName");
                continue;
            };
            let pod = convert::pod(&source).with_context(|| pods_file.display().to_string())?;
            cluster.upsert_pod(pod, &node_name);
        }
    }
    let pods = manifests::read_objects::<core::Pod>(pod_file, "Pod")?;
    let [source] = pods.as_slice() else {
        anyhow::bail!("{}: expected exactly one Pod, found {}", pod_file.display(), pods.len());
    };
    let pod = convert::pod(source).with_context(|| pod_file.display().to_string())?;

    if policy.implements(PolicyKind::Evict) {
        // The pod file's pod is the one pending pod a policy may make room for.
        let pending = vec![PendingPod { pod: pod.clone(), reason: String::new() }];
        let proposals = policy.propose(&cluster, &EvictContext { now: jiff::Timestamp::now().as_second(), pending, failed: cluster.failed_pods() })?;
        println!("{} eviction(s) proposed by {}", proposals.len(), policy.name());
        for proposal in proposals {
            if let Some((pod, node)) = cluster.pod_by_id(proposal.pod) {
                println!("  {}/{} on {node}: {}", pod.namespace, pod.name, proposal.reason);
            }
        }
    }
    if !policy.implements(PolicyKind::Filter) && !policy.implements(PolicyKind::Score) {
        return Ok(());
    }
    let ids = cluster.node_ids();
    let verdicts: Vec<Option<String>> = if policy.implements(PolicyKind::Filter) {
        let result = policy.filter(&cluster, &pod, &ids)?;
        result.verdicts.iter().map(|&code| (code != 0).then(|| result.rejections[code as usize - 1].join(", "))).collect()
    } else {
        vec![None; ids.len()]
    };
    // Like kube-scheduler, only feasible nodes are scored (normalization depends on the candidate set).
    let feasible: Vec<u32> = ids.iter().zip(&verdicts).filter(|(_, verdict)| verdict.is_none()).map(|(id, _)| *id).collect();
    let scores = if policy.implements(PolicyKind::Score) && !feasible.is_empty() { policy.score(&cluster, &pod, &feasible)? } else { Vec::new() };
    let width = ids.iter().filter_map(|id| cluster.node_name(*id)).map(str::len).max().unwrap_or(4).max(4);
    println!("pod {}/{} with {}", pod.namespace, pod.name, policy.name());
    println!("{:<width$}  {:<7}  {:>5}  REASONS", "NODE", "FILTER", "SCORE");
    for (id, verdict) in ids.iter().zip(&verdicts) {
        let name = cluster.node_name(*id).unwrap_or("?");
        let score = feasible.iter().position(|candidate| candidate == id).and_then(|index| scores.get(index));
        let score = score.map_or("-".to_string(), |score| score.to_string());
        let (filter, reasons) = match verdict {
            None => ("pass", ""),
            Some(reasons) => ("reject", reasons.as_str()),
        };
        println!("{name:<width$}  {filter:<7}  {score:>5}  {reasons}");
    }
    // The record `wasp explain pod` shows in a cluster, with this policy as the whole profile.
    let alone: std::sync::Arc<dyn crate::policy::SchedulingPolicy> = policy.clone();
    let profile = crate::registry::ProfilePolicies {
        scheduler_name: format!("{} alone", policy.name()),
        filters: if policy.implements(PolicyKind::Filter) { vec![alone.clone()] } else { Vec::new() },
        scores: if policy.implements(PolicyKind::Score) { vec![(alone, 1)] } else { Vec::new() },
    };
    let started = std::time::Instant::now();
    let (decision, trace) = cycle::schedule(&profile, &cluster, &pod, None, &mut cycle::Cursor::default(), 100, &Default::default());
    println!();
    print!("{}", crate::explain::render::placement(&crate::scheduler::placement_record(&pod, &profile, &decision, trace, started.elapsed())));
    Ok(())
}
