//! The API client every loop shares: kube's default retries are off (it retries 429/503/504 for minutes, while
//! each loop has its own backoff), and requests in flight are bounded, per loop.

use anyhow::Context;
use std::sync::Arc;

/// Requests in flight at once for what has no budget of its own (admission's events, the CLI's commands).
/// Bindings, events and evictions are sent from their own tasks; unbounded, a burst of thousands of decisions
/// would open as many connections (HTTP/1) and exhaust file descriptors on both sides.
pub const MAX_IN_FLIGHT: usize = 64;
/// The scheduler's budget: its bindings and status patches.
pub const SCHEDULER_IN_FLIGHT: usize = 64;
/// The scheduler's events' budget, apart from its bindings: permits are handed out in order, and sharing one
/// budget, the `Scheduled` events of a 10,000-pod burst (each asked for after its binding) were still queued
/// when the burst ended, and a new pod's binding waited behind them: seconds from creation to binding on an
/// idle scheduler (the side-by-side benchmark at 5000 nodes: p50 4.5 s, p99 12 s; kube-scheduler 31 / 350 ms).
pub const SCHEDULER_EVENTS_IN_FLIGHT: usize = 16;
/// The rescheduler's and the autoscaler's budget each (the autoscaler reconciles 16 workloads at once). A budget
/// per loop, because permits are handed out in order: sharing one, a rescheduling run waited 97 s for its
/// PodDisruptionBudgets behind the scheduler's bindings and events for 50k pods, and an autoscaler's scale would
/// have waited as long.
pub const LOOP_IN_FLIGHT: usize = 16;

/// How wasp names itself to the API server (kube-rs sends no `User-Agent` of its own): the audit log, the API
/// server's logs and its request metrics tell wasp's requests apart from other clients of the same identity.
pub const USER_AGENT: &str = concat!("wasp/", env!("CARGO_PKG_VERSION"));

/// A kube client and a request budget.
#[derive(Clone)]
pub struct ApiClient {
    pub client: kube::Client,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl ApiClient {
    pub fn new(client: kube::Client) -> ApiClient {
        ApiClient { client, in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)) }
    }

    /// The same client with a request budget of its own, which no other loop's burst fills.
    pub fn with_own_budget(&self, permits: usize) -> ApiClient {
        ApiClient { client: self.client.clone(), in_flight: Arc::new(tokio::sync::Semaphore::new(permits)) }
    }

    /// A client for `config` with kube's own retries off, sending wasp's [`USER_AGENT`].
    pub fn from_config(mut config: kube::Config) -> anyhow::Result<ApiClient> {
        config.default_retry = false;
        config.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loop_with_a_budget_of_its_own_is_not_held_behind_another_loops_burst() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let shared = ApiClient::from_config(config).unwrap();
        let scheduler = shared.with_own_budget(SCHEDULER_IN_FLIGHT);
        let rescheduler = shared.with_own_budget(LOOP_IN_FLIGHT);
        let burst: Vec<_> = futures::future::join_all((0..SCHEDULER_IN_FLIGHT).map(|_| scheduler.permit())).await;
        assert_eq!(scheduler.in_flight.available_permits(), 0, "the scheduler's burst holds its whole budget");
        let own = tokio::time::timeout(std::time::Duration::from_secs(5), rescheduler.permit()).await;
        assert!(own.is_ok(), "the rescheduler's request goes at once");
        assert_eq!(shared.in_flight.available_permits(), MAX_IN_FLIGHT, "and the rest of the process's budget is untouched");
        drop(burst);
    }
}
