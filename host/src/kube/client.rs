//! The API client every loop shares: kube's default retries are off (it retries 429/503/504 for minutes, while
//! each loop has its own backoff), and requests in flight are bounded for the whole process.

use anyhow::Context;
use std::sync::Arc;

/// Requests in flight at once, over every loop. Bindings, events and evictions are sent from their own tasks;
/// unbounded, a burst of thousands of decisions would open as many connections (HTTP/1) and exhaust file
/// descriptors on both sides.
pub const MAX_IN_FLIGHT: usize = 64;

/// A kube client and the process-wide request budget.
#[derive(Clone)]
pub struct ApiClient {
    pub client: kube::Client,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl ApiClient {
    pub fn new(client: kube::Client) -> ApiClient {
        ApiClient { client, in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)) }
    }

    /// A client for `config` with kube's own retries off.
    pub fn from_config(mut config: kube::Config) -> anyhow::Result<ApiClient> {
        config.default_retry = false;
        Ok(ApiClient::new(kube::Client::try_from(config).context("building the API client")?))
    }

    /// The kubeconfig, or the in-cluster service account; checks the API server answers.
    pub async fn connect() -> anyhow::Result<ApiClient> {
        Self::connect_with(None).await
    }

    /// Like [`connect`](Self::connect), with the kubeconfig at `kubeconfig` when given.
    pub async fn connect_with(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<ApiClient> {
        let config = match kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading the kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("using the kubeconfig {}", path.display()))?
            }
            None => kube::Config::infer().await.context("loading the kubeconfig or in-cluster configuration")?,
        };
        let api = ApiClient::from_config(config)?;
        let version = api.client.apiserver_version().await.context("the API server is unreachable")?;
        tracing::info!(version = %version.git_version, "connected to the API server");
        Ok(api)
    }

    /// Waits for a slot in the request budget; hold it for the request's duration.
    pub async fn permit(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.in_flight.acquire().await.expect("the semaphore is never closed")
    }
}
