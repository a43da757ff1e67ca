//! `wasp explain pod|eviction|autoscaler [NAMESPACE/]NAME`: the leading host's last decision record for the object
//! (see [`crate::explain`]), as a table for people or `-o json` for tools. Installed as `kubectl-wasp`, the same
//! binary is kubectl's plugin: `kubectl wasp explain pod web-7`.

use crate::explain::client::{ask, find_leader, Answer};
use crate::explain::{render, EvictionRecord, Kind, PlacementRecord, ScaleRecord};
use anyhow::Context;
use clap::{Args, ValueEnum};

#[derive(Args)]
pub struct ExplainArgs {
    /// What to explain: a pod's placement, a pod's eviction (or why it was left), an Autoscaler's last sync.
    #[arg(value_enum)]
    kind: Kind,
    /// NAMESPACE/NAME, or NAME in --namespace.
    object: String,
    /// The object's namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
    /// The Lease wasp's replicas elect a leader with (`leaderElection` in its configuration; the shipped manifests
    /// use wasp-system/wasp-scheduler).
    #[arg(long, default_value = "wasp-system")]
    lease_namespace: String,
    #[arg(long, default_value = "wasp-scheduler")]
    lease_name: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

pub fn run(args: ExplainArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(explain(args))
}

async fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer().await.context("reading the kubeconfig (KUBECONFIG, ~/.kube/config, or the in-cluster service account)")?;
    let key = match args.object.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => format!("{namespace}/{name}"),
        Some(_) => anyhow::bail!("{:?}: expected NAMESPACE/NAME or NAME", args.object),
        None => format!("{}/{}", args.namespace.as_deref().unwrap_or(&config.default_namespace), args.object),
    };
    let client = crate::kube::client::ApiClient::from_config(config.clone()).context("connecting to the API server")?.client;
    let leader = find_leader(client, &args.lease_namespace, &args.lease_name).await?;
    let path = format!("/explain/{}/{key}", args.kind.path());
    let record = match ask(&config, &leader, &path).await? {
        Answer::Record(record) => record,
        Answer::NoRecord(why) => anyhow::bail!("{} (asked the leader {})", why.trim(), leader.holder),
    };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&record)?),
        Output::Table => print!("{}", table(args.kind, record)?),
    }
    Ok(())
}

/// The record as people read it.
fn table(kind: Kind, record: serde_json::Value) -> anyhow::Result<String> {
    let unreadable = || format!("the leader answered a {} record this wasp cannot read (a different version?)", kind.path().trim_end_matches('s'));
    Ok(match kind {
        Kind::Pod => render::placement(&serde_json::from_value::<PlacementRecord>(record).with_context(unreadable)?),
        Kind::Eviction => render::eviction(&serde_json::from_value::<EvictionRecord>(record).with_context(unreadable)?),
        Kind::Autoscaler => render::scale(&serde_json::from_value::<ScaleRecord>(record).with_context(unreadable)?),
    })
}
