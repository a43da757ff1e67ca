//! Running a simulator: the HTTP server on a loopback port, the controllers, the scenario, and a kubeconfig
//! that points kubectl and kube-rs at it.

use crate::api::{router, ServerState};
use crate::faults::FaultPlan;
use crate::metrics::LoadModel;
use crate::scenario::Scenario;
use crate::store::Store;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Knobs of the server itself (the cluster is the scenario's).
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    /// Changes kept for resuming watches; older resource versions get 410 Gone.
    pub history: usize,
    pub bookmark_interval: Duration,
    /// Refuse requests without a bearer token (401). Off by default: tools that send no token act as the admin.
    pub require_auth: bool,
    /// Append every answered request to a resource to this file ([`crate::audit`]).
    pub audit_log: Option<std::path::PathBuf>,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        SimulatorOptions { history: crate::store::DEFAULT_HISTORY, bookmark_interval: Duration::from_secs(5), require_auth: false, audit_log: None }
    }
}

pub struct Simulator {
    pub store: Arc<Store>,
    pub state: Arc<ServerState>,
    pub address: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// The controllers and the scenario's timed events: stopped with the simulator, or they would keep working
    /// on a store nobody reads.
    background: Vec<tokio::task::AbortHandle>,
}

impl Simulator {
    /// Serves `scenario` on `bind` (port 0 picks a free port). Must run inside a tokio runtime.
    pub async fn start(scenario: &Scenario, bind: SocketAddr) -> anyhow::Result<Simulator> {
        Self::start_with(scenario, bind, SimulatorOptions::default()).await
    }

    pub async fn start_with(scenario: &Scenario, bind: SocketAddr, options: SimulatorOptions) -> anyhow::Result<Simulator> {
        let store = Arc::new(Store::with_history(options.history));
        let load = Arc::new(LoadModel::default());
        scenario.apply(&store, &load).map_err(|error| anyhow::anyhow!("applying the scenario: {}", error.message))?;
        let state = Arc::new(ServerState {
            store: store.clone(),
            faults: FaultPlan::new(scenario.faults.clone()),
            load: load.clone(),
            bookmark_interval: options.bookmark_interval,
            require_auth: options.require_auth,
            audit: match &options.audit_log {
                Some(path) => Some(crate::audit::AuditLog::open(path).with_context(|| format!("opening the audit log {}", path.display()))?),
                None => None,
            },
        });
        let background =
            vec![crate::controllers::spawn(store.clone(), scenario.kubelet.clone()).abort_handle(), scenario.spawn_events(store.clone(), load).abort_handle()];
        let listener = tokio::net::TcpListener::bind(bind).await.with_context(|| format!("binding {bind}"))?;
        let address = listener.local_addr()?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = router(state.clone());
        // Watch events are small writes: without TCP_NODELAY, Nagle's algorithm holds one back until the last is
        // acknowledged (real API servers, in Go, set it on every connection). Under `wasp simulate`'s paused clock
        // each such real wait lets simulated time jump ahead: seconds of it before a new pod was seen.
        let listener = axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
            let _ = stream.set_nodelay(true);
        });
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(error) = serve.await {
                tracing::error!(%error, "simulator server stopped");
            }
        });
        tracing::info!(%address, scenario = %scenario.name, nodes = scenario.node_names().len(), "simulated API server listening");
        Ok(Simulator { store, state, address, shutdown: Some(shutdown), background })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A kubeconfig with one context, `wasp-sim`, pointing at this server.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: wasp-sim\n  cluster:\n    server: {}\ncontexts:\n- name: wasp-sim\n  context:\n    cluster: wasp-sim\n    user: wasp-sim\n    namespace: default\ncurrent-context: wasp-sim\nusers:\n- name: wasp-sim\n  user:\n    token: wasp-sim\n",
            self.url()
        )
    }

    /// The token of a ServiceAccount (which must exist), as `POST .../serviceaccounts/{name}/token` returns it.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> anyhow::Result<String> {
        crate::auth::service_account_token(&self.store, namespace, name).map_err(|error| anyhow::anyhow!("{}", error.message))
    }

    /// A kubeconfig like [`Simulator::kubeconfig`] whose user presents `token` (say, a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, token: &str, namespace: &str) -> String {
        self.kubeconfig()
            .replace("    namespace: default\n", &format!("    namespace: {namespace}\n"))
            .replace(&format!("    token: {}\n", crate::auth::ADMIN_TOKEN), &format!("    token: {token}\n"))
    }

    /// Points Service `namespace/name` at `address` for admission webhook calls (the simulator has no cluster
    /// network): stores its Endpoints, replacing any, with that one ready address and port. The namespace must
    /// exist.
    pub fn set_service_endpoint(&self, namespace: &str, name: &str, address: SocketAddr) -> anyhow::Result<()> {
        let endpoints = crate::resources::find("", "v1", "endpoints").expect("endpoints are served");
        let subsets = serde_json::json!([{"addresses": [{"ip": address.ip().to_string()}], "ports": [{"port": address.port(), "protocol": "TCP"}]}]);
        let failed = |error: crate::error::ApiError| anyhow::anyhow!("endpoints {namespace}/{name}: {}", error.message);
        match self.store.get(endpoints, Some(namespace), name) {
            Ok(_) => self.store.mutate(endpoints, Some(namespace), name, |object| {
                object["subsets"] = subsets;
                Ok(())
            }),
            Err(_) => self.store.create(endpoints, Some(namespace), serde_json::json!({"metadata": {"name": name}, "subsets": subsets})),
        }
        .map(drop)
        .map_err(failed)
    }

    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.kubeconfig()).with_context(|| format!("writing {}", path.display()))
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        for task in &self.background {
            task.abort();
        }
    }
}
