//! `wasp certs`: a CA and a serving certificate for the webhook's Service, for clusters without cert-manager.
//! Prints the `kubernetes.io/tls` Secret to apply (`wasp certs | kubectl apply -f -`) and, on stderr, the
//! `caBundle` with the commands that put it into the webhook configurations.

use crate::admission::certs;
use anyhow::Context;
use base64::Engine;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct CertsArgs {
    /// The webhook Service's namespace.
    #[arg(long, default_value = "wasp-system")]
    namespace: String,
    /// The webhook Service's name.
    #[arg(long, default_value = "wasp-webhook")]
    service: String,
    /// The Secret's name (the Deployment mounts `wasp-webhook-tls`).
    #[arg(long, default_value = "wasp-webhook-tls")]
    secret: String,
    /// Days the serving certificate is valid (the CA: ten times as long).
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// More names for the serving certificate, DNS names or IP addresses (127.0.0.1 to run `wasp run` locally).
    #[arg(long = "name")]
    names: Vec<String>,
    /// Also write ca.crt, tls.crt and tls.key here (for `wasp run --tls-cert-file` outside a cluster).
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    let mut names = certs::service_names(&args.service, &args.namespace);
    names.extend(args.names.iter().cloned());
    let generated = certs::generate(&names, args.days)?;
    let base64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // The private key is readable by its owner only (0600), an existing file's permissions included.
        for (file, text, mode) in [("ca.crt", &generated.ca, 0o644), ("tls.crt", &generated.certificate, 0o644), ("tls.key", &generated.private_key, 0o600)] {
            let path = dir.join(file);
            write_with_mode(&path, text.as_bytes(), mode).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": args.secret, "namespace": args.namespace},
        "data": {"ca.crt": base64(&generated.ca), "tls.crt": base64(&generated.certificate), "tls.key": base64(&generated.private_key)},
    });
    print!("{}", serde_yaml::to_string(&secret)?);
    let bundle = base64(&generated.ca);
    eprintln!("Serving certificate for {} (valid {} days). The caBundle of the webhook configurations:\n{bundle}\n", names.join(", "), args.days);
    eprintln!("Put it in place with:");
    // `add` sets the member whether or not the configuration has one; `replace` fails on the shipped manifests,
    // which carry no caBundle.
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        eprintln!("  kubectl patch {kind} wasp --type=json -p '[{{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"{bundle}\"}}]'");
    }
    Ok(())
}

/// Writes `bytes` to `path` with permissions `mode`, set before the bytes go in.
fn write_with_mode(path: &std::path::Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)
}
