//! What `wasp run` is made of: the shared ground (API client, identity, cluster informers, policy registry,
//! event recorder, HTTP endpoints, leader election) and the loops that stand on it.
//!
//! Order matters for high availability: informers start and sync before the host campaigns for the Lease, so a
//! standby is warm and Ready (a rolling update of the 2-replica Deployment can finish), and a failover starts
//! deciding at once on a full view. Only the holder of the Lease runs the loops.
//!
//! The scheduler, the rescheduler, the autoscaler and the stray-pod check run side by side; every replica
//! serves the admission webhooks, leader or not. The rescheduler and autoscaler loops run
//! whether or not the configuration has their sections, so a reload that adds one takes effect without a restart.

use crate::admission::metrics::AdmissionMetrics;
use crate::admission::stray::StrayPods;
use crate::admission::tls::ReloadingCertificate;
use crate::admission::webhook::{TlsListener, Webhooks};
use crate::admission::WebhookServing;
use crate::autoscaler::metrics::AutoscalerMetrics;
use crate::autoscaler::AutoscalerLoop;
use crate::cluster::{informer, SharedCluster};
use crate::config::HostConfig;
use crate::explain::DecisionRecords;
use crate::kube::leader::{Candidate, LeaderElection};
use crate::kube::{ApiClient, EventRecorder, HostIdentity};
use crate::registry::watch::{PolicyWatcher, WatchOptions};
use crate::registry::PolicyRegistry;
use crate::rescheduler::metrics::ReschedulerMetrics;
use crate::rescheduler::Rescheduler;
use crate::runtime::Runtime;
use crate::scheduler::binder::Binder;
use crate::scheduler::metrics::SchedulerMetrics;
use crate::scheduler::Scheduler;
use crate::serve::Endpoints;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The reporting component of events about the host itself (a refused reload, say).
pub const COMPONENT: &str = "wasp";

/// No pod taken from a non-empty active queue for this long: the scheduler is wedged (a decision takes
/// milliseconds; each policy call has its own deadline).
const SCHEDULER_WEDGED_AFTER: std::time::Duration = std::time::Duration::from_secs(120);
/// A rescheduling run or an autoscaling pass under way for this long is wedged (measured: under 2 s at 5000 nodes
/// and 50k pods; every request has a timeout).
const LOOP_WEDGED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// How often the records of objects that are gone are dropped.
const RECORDS_PRUNED_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A liveness check that fails when a loop's `unit` of work (a run, a pass) has been under way too long.
fn wedged_when_busy(
    unit: &'static str,
    limit: std::time::Duration,
    busy_for: impl Fn() -> Option<std::time::Duration> + Send + Sync + 'static,
) -> crate::serve::ReadinessCheck {
    Box::new(move || {
        let Some(busy) = busy_for() else { return Some(Ok(())) };
        Some(match busy > limit {
            true => Err(format!("its {unit} has been under way for {}s", busy.as_secs())),
            false => Ok(()),
        })
    })
}

pub struct Host {
    pub api: ApiClient,
    pub identity: Arc<HostIdentity>,
    pub cluster: Arc<SharedCluster>,
    pub policies: Arc<PolicyRegistry>,
    pub events: EventRecorder,
    pub scheduler: Arc<Scheduler>,
    pub rescheduler: Arc<Rescheduler>,
    pub autoscaler: Arc<AutoscalerLoop>,
    pub stray_pods: Arc<StrayPods>,
    pub endpoints: Arc<Endpoints>,
    /// The loops' decision records (`/explain`).
    pub records: Arc<DecisionRecords>,
    /// What the Lease says of this host while it leads: where `wasp explain` reaches it.
    advertised: Arc<Mutex<Option<Advertised>>>,
    admission_metrics: AdmissionMetrics,
    webhooks: Arc<AtomicU8>,
    informers: Mutex<Option<informer::Informers>>,
    /// Cancelled by [`Host::stop`]: the loops take no new work, the webhook server takes no new connection.
    stopping: CancellationToken,
    /// The webhook server, which a shutdown waits for.
    servers: TaskTracker,
}

/// Whether `wasp run` serves the webhooks, as `/readyz` reports it: a replica that should serve them is not
/// Ready until it does, so the Service sends the API server's calls only to replicas that answer.
const WEBHOOKS_OFF: u8 = 0;
const WEBHOOKS_STARTING: u8 = 1;
const WEBHOOKS_SERVING: u8 = 2;

impl Host {
    pub fn new(api: ApiClient, policies: Arc<PolicyRegistry>, identity: HostIdentity) -> Arc<Host> {
        let identity = Arc::new(identity);
        let cluster = Arc::new(SharedCluster::default());
        cluster.waiting_budget.set_limit(policies.current().config.scheduler.waiting_bytes_per_namespace());
        policies.canary_on(cluster.clone());
        let events = EventRecorder::new(api.clone(), COMPONENT, identity.clone());
        let records = Arc::new(DecisionRecords::default());
        let mut endpoints = Endpoints::new(policies.clone(), records.clone());
        let scheduler_metrics = SchedulerMetrics::register(&mut endpoints.metrics);
        // Each loop sends through a request budget of its own (see `kube::client`).
        let scheduler_api = api.with_own_budget(crate::kube::client::SCHEDULER_IN_FLIGHT);
        let scheduler_events = events.sending_through(api.with_own_budget(crate::kube::client::SCHEDULER_EVENTS_IN_FLIGHT));
        let binder = Binder::new(scheduler_api, scheduler_events, cluster.clone());
        let scheduler = Scheduler::new(policies.clone(), cluster.clone(), binder, scheduler_metrics, records.clone());
        let rescheduler_metrics = ReschedulerMetrics::register(&mut endpoints.metrics);
        let rescheduler_api = api.with_own_budget(crate::kube::client::LOOP_IN_FLIGHT);
        let host_namespace = std::env::var("POD_NAMESPACE").ok().filter(|namespace| !namespace.is_empty());
        let rescheduler = Rescheduler::new(
            policies.clone(),
            cluster.clone(),
            rescheduler_api.clone(),
            &events.sending_through(rescheduler_api),
            rescheduler_metrics,
            host_namespace,
            records.clone(),
        );
        let reported = rescheduler.clone();
        endpoints.status_section("rescheduler", Box::new(move || serde_json::json!({"lastRun": reported.last_run()})));
        let autoscaler_metrics = AutoscalerMetrics::register(&mut endpoints.metrics);
        let autoscaler_api = api.with_own_budget(crate::kube::client::LOOP_IN_FLIGHT);
        let autoscaler = AutoscalerLoop::new(
            policies.clone(),
            cluster.clone(),
            autoscaler_api.clone(),
            &events.sending_through(autoscaler_api),
            autoscaler_metrics,
            records.clone(),
        );
        let reported = autoscaler.clone();
        endpoints.status_section("autoscaler", Box::new(move || serde_json::json!({"lastPass": reported.last_pass()})));
        let admission_metrics = AdmissionMetrics::register(&mut endpoints.metrics);
        let stray_pods = StrayPods::new(cluster.clone(), policies.clone(), &events, admission_metrics.clone());
        let webhooks = Arc::new(AtomicU8::new(WEBHOOKS_OFF));
        let scraped = scheduler.clone();
        endpoints.on_scrape(Box::new(move || scraped.update_metrics()));
        let informed = cluster.clone();
        endpoints.readiness_check(
            "informers",
            Box::new(move || {
                let synced = informed.synced();
                Some(match synced.all() {
                    true => Ok(()),
                    false => {
                        let errors = informed.watch_errors();
                        let why = if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) };
                        Err(format!("waiting for the first list of {}{why}", synced.missing().join(", ")))
                    }
                })
            }),
        );
        let registry = policies.clone();
        endpoints.readiness_check(
            "policies",
            Box::new(move || match registry.current().number {
                0 => Some(Err("no policy generation serves yet".into())),
                _ => Some(Ok(())),
            }),
        );
        // Listed only where `wasp run` serves the webhooks.
        let serving = webhooks.clone();
        endpoints.readiness_check(
            "webhooks",
            Box::new(move || match serving.load(Ordering::Relaxed) {
                WEBHOOKS_OFF => None,
                WEBHOOKS_STARTING => Some(Err("waiting for the first list of namespaces".into())),
                _ => Some(Ok(())),
            }),
        );
        // Liveness: a loop with work that does not move is wedged, and a restart is the cure (a standby takes
        // over meanwhile). Listed only while this host runs the loops.
        let scheduling = scheduler.clone();
        endpoints.liveness_check(
            "scheduler",
            Box::new(move || {
                if !scheduling.is_running() {
                    return None;
                }
                let (waiting, quiet) = (scheduling.queue().sizes().active, scheduling.heartbeat.quiet_for());
                Some(match waiting > 0 && quiet > SCHEDULER_WEDGED_AFTER {
                    true => Err(format!("{waiting} pods wait in the active queue and no pod was taken for {}s", quiet.as_secs())),
                    false => Ok(()),
                })
            }),
        );
        let running = rescheduler.clone();
        endpoints.liveness_check("rescheduler", wedged_when_busy("run", LOOP_WEDGED_AFTER, move || running.heartbeat.busy_for()));
        let passing = autoscaler.clone();
        endpoints.liveness_check("autoscaler", wedged_when_busy("pass", LOOP_WEDGED_AFTER, move || passing.heartbeat.busy_for()));
        // Out of the Service's endpoints as soon as a shutdown begins (listed only then).
        let stopping = CancellationToken::new();
        let shutting_down = stopping.clone();
        endpoints.readiness_check("shutdown", Box::new(move || shutting_down.is_cancelled().then(|| Err("shutting down".to_string()))));
        let endpoints = Arc::new(endpoints);
        let informers = Mutex::new(None);
        let advertised = Arc::new(Mutex::new(None));
        Arc::new(Host {
            api,
            identity,
            cluster,
            policies,
            events,
            scheduler,
            rescheduler,
            autoscaler,
            stray_pods,
            endpoints,
            records,
            advertised,
            admission_metrics,
            webhooks,
            informers,
            stopping,
            servers: TaskTracker::new(),
        })
    }

    /// A host on `api` with `config` (policy files still reload when watched, the configuration does not).
    pub fn with_config(config: &HostConfig, runtime: &Arc<Runtime>, api: ApiClient) -> anyhow::Result<Arc<Host>> {
        let policies = PolicyRegistry::new(runtime, config.clone(), None)?;
        Ok(Host::new(api, Arc::new(policies), HostIdentity::named("wasp", None)))
    }

    /// Starts the informers (once); loops and `/readyz` wait for their first list.
    pub fn start_informers(&self) {
        let mut informers = self.informers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if informers.is_none() {
            *informers = Some(informer::spawn(self.api.client.clone(), self.cluster.clone()));
        }
    }

    /// Serves `/metrics`, `/healthz`, `/readyz` and `/policies` on `address`; returns the bound address.
    pub async fn serve(&self, address: SocketAddr) -> anyhow::Result<SocketAddr> {
        crate::serve::serve(self.endpoints.clone(), address).await
    }

    /// Serves `/metrics`, `/healthz`, `/readyz` and `/policies` over HTTPS on `address`, as kube-scheduler serves
    /// its secure port: the probes open, the rest for users the API server authenticates and authorizes. The
    /// certificate comes from `certificate` (re-read every 10 s), else one is made at start. Returns the bound
    /// address.
    ///
    /// While this host leads, its Lease carries `advertised_address` (default: the Pod's IP from `POD_IP`, else the
    /// bound address) and the certificate's SHA-256, for `wasp explain` to reach it and pin the certificate.
    pub async fn serve_secure(
        &self,
        address: SocketAddr,
        certificate: Option<crate::admission::tls::CertificateFiles>,
        advertised_address: Option<&str>,
    ) -> anyhow::Result<SocketAddr> {
        let certificate = match certificate {
            Some(files) => {
                let loaded = ReloadingCertificate::load(files)?;
                tokio::spawn(loaded.clone().keep_current(std::time::Duration::from_secs(10)));
                loaded
            }
            None => {
                let generated = crate::admission::certs::generate(&["localhost".to_string(), "127.0.0.1".to_string()], 365)?;
                ReloadingCertificate::in_memory(&generated.certificate, &generated.private_key)?
            }
        };
        // The probes come through here: one address may not take every slot.
        let limits = crate::admission::webhook::ServingLimits { max_connections_per_peer: Some(100), ..Default::default() };
        // Client certificates are asked for (optionally) and judged per request against the cluster's client CA.
        let client_certificates = Arc::new(crate::serve::client_certs::RequestClientCertificate::new(&rustls::crypto::ring::default_provider()));
        let listener = TlsListener::bind_with(&certificate, Some(client_certificates), address).await?.with_limits(limits);
        let bound = listener.local_addr()?;
        let auth = Arc::new(crate::serve::auth::Delegated::new(self.api.client.clone()));
        let router = crate::serve::router(self.endpoints.clone(), Some(auth));
        self.servers.spawn(listener.serve(router, self.stopping.clone()));
        let endpoint = advertised_address.map_or_else(|| default_advertised(bound), str::to_string);
        *self.advertised.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Advertised { endpoint: format!("https://{endpoint}"), certificate });
        Ok(bound)
    }

    /// Serves the admission webhooks over TLS; returns the bound address. Fails at once when the certificate
    /// files do not hold a certificate and its key, or the address cannot be bound; answers from when the
    /// namespaces are listed (`/readyz` says so until then).
    pub async fn serve_webhooks(&self, serving: WebhookServing) -> anyhow::Result<SocketAddr> {
        let certificate = ReloadingCertificate::load(serving.certificate.clone())?;
        let listener = TlsListener::bind(&certificate, serving.address).await?.with_limits(serving.limits);
        let address = listener.local_addr()?;
        self.webhooks.store(WEBHOOKS_STARTING, Ordering::Relaxed);
        let namespaces = crate::admission::watch_namespaces(self.api.client.clone());
        let webhooks =
            Arc::new(Webhooks::new(self.policies.clone(), namespaces.clone(), self.admission_metrics.clone(), self.cluster.clone(), self.api.client.clone()));
        let state = self.webhooks.clone();
        let stop = self.stopping.clone();
        self.servers.spawn(async move {
            let ready = tokio::select! {
                ready = namespaces.wait_until_ready() => ready.is_ok(),
                _ = stop.cancelled() => false,
            };
            if ready {
                state.store(WEBHOOKS_SERVING, Ordering::Relaxed);
                listener.serve(crate::admission::webhook::router(webhooks), stop).await;
            }
        });
        tokio::spawn(crate::admission::callable::watch(
            self.api.client.clone(),
            certificate.clone(),
            self.events.clone(),
            self.admission_metrics.clone(),
            self.stopping.clone(),
        ));
        tokio::spawn(certificate.keep_current(serving.reload_interval));
        Ok(address)
    }

    /// Reloads policies and configuration whenever their files change: a refusal is logged, counted and
    /// recorded as a Warning event on the host's Pod; loops hear of what now serves.
    pub fn watch_policies(self: &Arc<Self>, options: WatchOptions) -> anyhow::Result<PolicyWatcher> {
        let host = Arc::downgrade(self);
        PolicyWatcher::spawn(self.policies.clone(), options, move |report| {
            let Some(host) = host.upgrade() else { return };
            if report.config_swapped {
                host.cluster.waiting_budget.set_limit(host.policies.current().config.scheduler.waiting_bytes_per_namespace());
                host.scheduler.admit_pending();
            }
            if report.config_swapped || !report.swapped.is_empty() {
                host.scheduler.policies_changed();
            }
            if !report.errors.is_empty() {
                let (events, message) = (host.events.clone(), report.error_messages());
                tokio::spawn(async move { events.host_event("Warning", "PolicyReloadFailed", &message).await });
            }
        })
    }

    /// Begins a graceful shutdown: `/readyz` fails, the loops take no new work and return once what they sent is
    /// answered ([`run_loops`](Self::run_loops) and [`run_as_leader`](Self::run_as_leader) then return), the
    /// webhook server takes no new connection and finishes the reviews it has.
    pub fn stop(&self) {
        self.stopping.cancel();
    }

    /// After [`stop`](Self::stop): returns once the webhook server answered the reviews it had and closed.
    pub async fn servers_stopped(&self) {
        self.servers.close();
        self.servers.wait().await;
    }

    /// Runs the loops the configuration enables until the task is dropped or [`stop`](Self::stop) is called and
    /// the work in flight is done (no leader election: one replica).
    /// Each loop is a task of its own: polled together in one task, the scheduler, which does not wait while its
    /// queue holds pods, let no other loop run during a burst (a rescheduling run and the autoscaler's first pass
    /// waited 97 s for 50k pods to be placed).
    pub async fn run_loops(self: Arc<Self>) {
        self.start_informers();
        let mut loops = tokio::task::JoinSet::new();
        loops.spawn(self.scheduler.clone().run(self.stopping.clone()));
        loops.spawn(self.rescheduler.clone().run(self.stopping.clone()));
        loops.spawn(self.autoscaler.clone().run(self.stopping.clone()));
        loops.spawn(self.stray_pods.clone().run(self.stopping.clone()));
        loops.spawn(self.clone().report_breaker_trips(self.stopping.clone()));
        loops.spawn(self.clone().prune_records(self.stopping.clone()));
        // Dropping the set (when the Lease is lost) stops every loop. A loop that panics takes the process down,
        // as it did when they shared a task: a replica that holds the Lease but no longer schedules must restart.
        while let Some(ended) = loops.join_next().await {
            if let Err(error) = ended {
                if error.is_panic() {
                    loops.abort_all();
                    std::panic::resume_unwind(error.into_panic());
                }
            }
        }
    }

    /// A Warning `PolicyCircuitOpen` on the host's Pod for each policy whose circuit breaker opens, until `stop`;
    /// when its cooldown ends, the pods parked meanwhile (a fail-closed filter rejected them) are tried again, so
    /// one call tries the policy and they do not wait for the next unrelated change.
    async fn report_breaker_trips(self: Arc<Self>, stop: CancellationToken) {
        let mut trips = self.policies.breaker_trips();
        loop {
            let trip = tokio::select! {
                trip = trips.recv() => trip,
                _ = stop.cancelled() => return,
            };
            match trip {
                Ok(trip) => {
                    let scheduler = self.scheduler.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(trip.cooldown).await;
                        scheduler.policies_changed();
                    });
                    self.events.host_event("Warning", "PolicyCircuitOpen", &trip.message).await;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => tracing::warn!(missed, "circuit breaker trips not reported as events"),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Every minute, drops the decision records of pods that are gone and of evictions past their age (the
    /// autoscaler drops those of deleted Autoscalers at each pass).
    async fn prune_records(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RECORDS_PRUNED_EVERY) => {}
                _ = stop.cancelled() => return,
            }
            self.records.placements.retain(|uid| self.cluster.knows_pod(uid));
            self.records.evictions.retain(|_| true);
        }
    }

    /// Syncs the informers, then runs the loops only while holding the Lease. Returns [`Leadership::Lost`] when
    /// the Lease is lost (the caller should exit, as kube-scheduler does, so a restart begins from a clean state),
    /// or [`Leadership::Released`] after [`stop`](Self::stop): the loops finished what they had in flight, still
    /// renewing, and then the Lease was released so a standby leads at once.
    pub async fn run_as_leader(self: Arc<Self>, settings: LeaderElection) -> Leadership {
        self.start_informers();
        tokio::select! {
            _ = self.cluster.wait_until_ready() => {}
            _ = self.stopping.cancelled() => return Leadership::Released,
        }
        let advertised = self.advertised.clone();
        let annotations = move || advertised.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).as_ref().map(Advertised::annotations).unwrap_or_default();
        let mut candidate = Candidate::new(self.api.client.clone(), settings, &self.identity.instance).advertising(Box::new(annotations));
        tokio::select! {
            _ = candidate.acquire() => {}
            _ = self.stopping.cancelled() => {
                // An attempt cut short may have been written: let go of the Lease if it is ours.
                candidate.release().await;
                return Leadership::Released;
            }
        }
        tokio::select! {
            _ = self.clone().run_loops() => {}
            _ = candidate.hold() => return Leadership::Lost,
        }
        candidate.release().await;
        Leadership::Released
    }
}

/// Where the leader's secure port is reached, as its Lease says it.
struct Advertised {
    /// `https://HOST:PORT`.
    endpoint: String,
    certificate: Arc<ReloadingCertificate>,
}

impl Advertised {
    fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        use crate::explain::client::{CERTIFICATE_ANNOTATION, ENDPOINT_ANNOTATION};
        [(ENDPOINT_ANNOTATION.to_string(), self.endpoint.clone()), (CERTIFICATE_ANNOTATION.to_string(), self.certificate.fingerprint())].into()
    }
}

/// The address others reach `bound` at: the Pod's IP (`POD_IP`, from the downward API) on its port, else the
/// bound address itself, `127.0.0.1` for an unspecified one.
fn default_advertised(bound: SocketAddr) -> String {
    let pod_ip = std::env::var("POD_IP").ok().and_then(|ip| ip.parse::<std::net::IpAddr>().ok());
    let ip = match (pod_ip, bound.ip()) {
        (Some(ip), _) => ip,
        (None, ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        (None, ip) => ip,
    };
    SocketAddr::new(ip, bound.port()).to_string()
}

/// How [`Host::run_as_leader`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Another holder took the Lease, or it could not be renewed in time.
    Lost,
    /// Stopped on purpose; the Lease was released if held.
    Released,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_run_under_way_longer_than_its_limit_fails_liveness() {
        let heartbeat = Arc::new(crate::serve::Heartbeat::default());
        let watched = heartbeat.clone();
        let check = wedged_when_busy("run", Duration::from_millis(20), move || watched.busy_for());
        assert_eq!(check(), Some(Ok(())), "idle");
        let busy = heartbeat.busy();
        assert_eq!(check(), Some(Ok(())), "just begun");
        std::thread::sleep(Duration::from_millis(30));
        assert!(check().unwrap().unwrap_err().starts_with("its run has been under way for"), "wedged");
        drop(busy);
        assert_eq!(check(), Some(Ok(())), "ended");
        assert!(heartbeat.quiet_for() < Duration::from_millis(20), "the end of a run is a beat");
    }
}
