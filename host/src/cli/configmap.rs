//! `wasp configmap --from-dir DIR --name NAME`: a ConfigMap with every `.wasm` in DIR under `binaryData`, ready
//! for `kubectl create` or `kubectl replace`. Refuses, with the sizes, one the API server would reject (1 MiB).
//! With `--bundle`, one ConfigMap holding them all as one compressed bundle `policies.tar.zst` (the default set
//! of ~6 MB takes ~0.35 MB: see `registry::bundle`). With `--split`, as many ConfigMaps `NAME-1`, `NAME-2`, ... as
//! the loose files need, for a projected volume that mounts them as one directory (manifests/30-deployment.yaml).
//! Signatures (`NAME.wasm.sig`, see `registry::signature`) go with their components, into the bundle or beside them.

use crate::registry::bundle::{read_component, COMPRESSED_SUFFIX};
use crate::registry::signature::SIGNATURE_SUFFIX;
use anyhow::{bail, Context};
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What etcd and the API server accept for one ConfigMap (data and binaryData together).
const CONFIGMAP_LIMIT: usize = 1024 * 1024;

#[derive(Args)]
pub struct ConfigMapArgs {
    /// Directory with the policy components (`*.wasm`, or compressed `*.wasm.zst`).
    #[arg(long)]
    from_dir: PathBuf,
    #[arg(long, default_value = "wasp-policies")]
    name: String,
    #[arg(long, default_value = "wasp-system")]
    namespace: String,
    /// Spread the files over ConfigMaps NAME-1, NAME-2, ... of at most 1 MiB each.
    #[arg(long, conflicts_with = "bundle")]
    split: bool,
    /// One ConfigMap with every file in one compressed bundle, `policies.tar.zst`.
    #[arg(long)]
    bundle: bool,
}

/// The key of the bundle in the ConfigMap, and so its file name in the policy directory.
const BUNDLE_FILE: &str = "policies.tar.zst";

pub fn run(args: ConfigMapArgs) -> anyhow::Result<()> {
    let (mut files, mut policies) = (BTreeMap::new(), std::collections::BTreeSet::new());
    let entries = std::fs::read_dir(&args.from_dir).with_context(|| format!("reading {}", args.from_dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|name| name.to_str()).context("file name")?.to_string();
        if name.ends_with(SIGNATURE_SUFFIX) {
            files.insert(name, std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?);
        } else if name.ends_with(".wasm") || name.ends_with(COMPRESSED_SUFFIX) {
            // A bundle holds components, which it compresses together.
            let (name, bytes) = match name.strip_suffix(".zst") {
                Some(component) if args.bundle => (component.to_string(), read_component(&path)?),
                _ => (name, std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?),
            };
            let component = name.strip_suffix(".zst").unwrap_or(&name);
            let policy = component.strip_suffix(".wasm").unwrap_or(component).to_string();
            if !policies.insert(policy.clone()) {
                bail!("{}: {policy} is there both as {policy}.wasm and {policy}.wasm.zst; keep one", args.from_dir.display());
            }
            files.insert(name, bytes);
        }
    }
    if policies.is_empty() {
        bail!("{}: no .wasm or .wasm.zst files", args.from_dir.display());
    }
    let total: usize = files.values().map(Vec::len).sum();
    let sizes = || {
        let sizes: Vec<String> = files.iter().map(|(name, bytes)| format!("{name} {} KiB", bytes.len() / 1024)).collect();
        sizes.join(", ")
    };
    if let Some((name, bytes)) = files.iter().find(|(_, bytes)| bytes.len() > CONFIGMAP_LIMIT) {
        bail!("{name} takes {} KiB, more than a ConfigMap holds (1024 KiB): build it smaller", bytes.len() / 1024);
    }
    if args.bundle {
        let components: Vec<(String, Vec<u8>)> = files.into_iter().collect();
        let bundle = crate::registry::bundle::pack(&components)?;
        if bundle.len() > CONFIGMAP_LIMIT {
            bail!("the bundle of {} policies takes {} KiB, more than a ConfigMap holds (1024 KiB): use --split", policies.len(), bundle.len() / 1024);
        }
        let signed = components.iter().filter(|(name, _)| name.strip_suffix(SIGNATURE_SUFFIX).is_some_and(|policy| policies.contains(policy))).count();
        eprintln!("{} policies ({signed} signed), {} KiB, bundled into {BUNDLE_FILE} of {} KiB", policies.len(), total / 1024, bundle.len() / 1024);
        print!("{}", config_map(&args.name, &args.namespace, BTreeMap::from([(BUNDLE_FILE.to_string(), bundle)]))?);
        return Ok(());
    }
    let groups = if args.split {
        pack(files)
    } else if total > CONFIGMAP_LIMIT {
        bail!(
            "the policies take {} KiB, more than a ConfigMap holds (1024 KiB): {}; use --bundle to compress them into \
             one file, or --split to spread them over several ConfigMaps mounted as one directory (see manifests/)",
            total / 1024,
            sizes()
        );
    } else {
        vec![files]
    };
    let count = groups.len();
    let mut documents = Vec::new();
    for (index, group) in groups.into_iter().enumerate() {
        let name = if args.split { format!("{}-{}", args.name, index + 1) } else { args.name.clone() };
        documents.push(config_map(&name, &args.namespace, group)?);
    }
    if args.split {
        eprintln!("{count} ConfigMaps ({}-1..{}-{count}) for {} KiB of policies", args.name, args.name, total / 1024);
    }
    print!("{}", documents.join("---\n"));
    Ok(())
}

/// First-fit decreasing: few ConfigMaps, none over the limit.
fn pack(files: BTreeMap<String, Vec<u8>>) -> Vec<BTreeMap<String, Vec<u8>>> {
    let mut by_size: Vec<(String, Vec<u8>)> = files.into_iter().collect();
    by_size.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut groups: Vec<(usize, BTreeMap<String, Vec<u8>>)> = Vec::new();
    for (name, bytes) in by_size {
        let size = bytes.len();
        match groups.iter_mut().find(|(used, _)| used + size <= CONFIGMAP_LIMIT) {
            Some((used, group)) => {
                *used += size;
                group.insert(name, bytes);
            }
            None => groups.push((size, BTreeMap::from([(name, bytes)]))),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

fn config_map(name: &str, namespace: &str, files: BTreeMap<String, Vec<u8>>) -> anyhow::Result<String> {
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_string(), "wasp".to_string())])),
            ..Default::default()
        },
        binary_data: Some(files.into_iter().map(|(name, bytes)| (name, ByteString(bytes))).collect()),
        ..Default::default()
    };
    let mut document = serde_json::to_value(&config_map)?;
    document["apiVersion"] = "v1".into();
    document["kind"] = "ConfigMap".into();
    Ok(serde_yaml::to_string(&document)?)
}
