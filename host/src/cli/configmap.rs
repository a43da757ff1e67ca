//! `wasp configmap --from-dir DIR --name NAME`: a ConfigMap with every `.wasm` in DIR under `binaryData`, ready
//! for `kubectl apply` or `kubectl replace`. Refuses, with the sizes, one the API server would reject (1 MiB).

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
    /// Directory with the policy components (`*.wasm`).
    #[arg(long)]
    from_dir: PathBuf,
    #[arg(long, default_value = "wasp-policies")]
    name: String,
    #[arg(long, default_value = "wasp-system")]
    namespace: String,
}

pub fn run(args: ConfigMapArgs) -> anyhow::Result<()> {
    let mut files = BTreeMap::new();
    let entries = std::fs::read_dir(&args.from_dir).with_context(|| format!("reading {}", args.from_dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "wasm") {
            let name = path.file_name().and_then(|name| name.to_str()).context("file name")?.to_string();
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            files.insert(name, bytes);
        }
    }
    if files.is_empty() {
        bail!("{}: no .wasm files", args.from_dir.display());
    }
    let total: usize = files.values().map(Vec::len).sum();
    if total > CONFIGMAP_LIMIT {
        let mut sizes: Vec<String> = files.iter().map(|(name, bytes)| format!("{name} {} KiB", bytes.len() / 1024)).collect();
        sizes.sort();
        bail!(
            "the policies take {} KiB, more than a ConfigMap holds (1024 KiB): {}; split them over several ConfigMaps or build them smaller",
            total / 1024,
            sizes.join(", ")
        );
    }
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(args.name),
            namespace: Some(args.namespace),
            labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_string(), "wasp".to_string())])),
            ..Default::default()
        },
        binary_data: Some(files.into_iter().map(|(name, bytes)| (name, ByteString(bytes))).collect()),
        ..Default::default()
    };
    let mut document = serde_json::to_value(&config_map)?;
    document["apiVersion"] = "v1".into();
    document["kind"] = "ConfigMap".into();
    print!("{}", serde_yaml::to_string(&document)?);
    Ok(())
}
