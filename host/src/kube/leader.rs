//! Leader election on a `coordination.k8s.io/v1` Lease, with kube-scheduler's defaults (lease 15 s, renew
//! deadline 10 s, retry 2 s). Only the holder runs the loops; a standby (already synced and Ready) takes over
//! once the lease expires. Writes use the Lease's resourceVersion, so two candidates can never both win the same
//! term.
//!
//! Expiry is judged as client-go judges it: by when *this* process last saw the record change, plus the lease
//! duration, never by comparing the holder's `renewTime` with the local clock (the nodes' clocks may differ).
//!
//! A holder that stops on purpose releases the Lease (client-go's `ReleaseOnCancel`: no holder, a one-second
//! duration), and a standby watches the Lease between attempts, so it takes over as soon as the release is
//! written rather than at its next retry.

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Below this, candidates would write the Lease many times a second.
const MIN_RETRY_PERIOD: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElection {
    /// The Lease's name; give each wasp deployment its own.
    #[serde(default = "default_name")]
    pub lease_name: String,
    #[serde(default = "default_namespace")]
    pub lease_namespace: String,
    #[serde(default = "lease_duration", with = "humantime_serde")]
    pub lease_duration: Duration,
    #[serde(default = "renew_deadline", with = "humantime_serde")]
    pub renew_deadline: Duration,
    #[serde(default = "retry_period", with = "humantime_serde")]
    pub retry_period: Duration,
}

/// The name wasp has always used: replicas of different versions must contend for the same Lease during a
/// rolling update, or two would lead at once.
fn default_name() -> String {
    "wasp-scheduler".into()
}
fn default_namespace() -> String {
    "kube-system".into()
}
fn lease_duration() -> Duration {
    Duration::from_secs(15)
}
fn renew_deadline() -> Duration {
    Duration::from_secs(10)
}
fn retry_period() -> Duration {
    Duration::from_secs(2)
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            lease_name: default_name(),
            lease_namespace: default_namespace(),
            lease_duration: lease_duration(),
            renew_deadline: renew_deadline(),
            retry_period: retry_period(),
        }
    }
}

impl LeaderElection {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.retry_period < MIN_RETRY_PERIOD {
            anyhow::bail!(
                "leaderElection.retryPeriod: {} is shorter than {}",
                humantime::format_duration(self.retry_period),
                humantime::format_duration(MIN_RETRY_PERIOD)
            );
        }
        if self.lease_name.is_empty() || self.lease_namespace.is_empty() {
            anyhow::bail!("leaderElection.leaseName and leaseNamespace must not be empty");
        }
        if self.renew_deadline >= self.lease_duration {
            anyhow::bail!("leaderElection.renewDeadline must be shorter than leaderElection.leaseDuration");
        }
        if self.retry_period >= self.renew_deadline {
            anyhow::bail!("leaderElection.retryPeriod must be shorter than leaderElection.renewDeadline");
        }
        Ok(())
    }
}

/// Annotations the holder keeps on the Lease (where its endpoints are), read at every write.
pub type Advertise = Box<dyn Fn() -> BTreeMap<String, String> + Send + Sync>;

/// A candidate for the lease.
pub struct Candidate {
    api: Api<Lease>,
    settings: LeaderElection,
    identity: String,
    advertise: Advertise,
    /// The record as last seen, and when this process saw it change.
    observed: Option<(LeaseSpec, Instant)>,
}

fn timed_out() -> kube::Error {
    kube::Error::Service("the Lease request did not answer within the renew deadline".into())
}

enum Attempt {
    Won,
    HeldByOther(String),
}

impl Candidate {
    pub fn new(client: Client, settings: LeaderElection, identity: &str) -> Self {
        Candidate {
            api: Api::namespaced(client, &settings.lease_namespace),
            settings,
            identity: identity.to_string(),
            advertise: Box::new(BTreeMap::new),
            observed: None,
        }
    }

    /// Writes `advertise`'s annotations on the Lease whenever this candidate takes or renews it.
    pub fn advertising(mut self, advertise: Advertise) -> Self {
        self.advertise = advertise;
        self
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Notes the record as read now; returns whether it has not changed for longer than its lease duration.
    fn observe_expired(&mut self, spec: &LeaseSpec) -> bool {
        let now = Instant::now();
        match &self.observed {
            Some((seen, _)) if seen == spec => {}
            _ => self.observed = Some((spec.clone(), now)),
        }
        let seen_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
        now.duration_since(seen_at) > duration
    }

    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        let same_holder = previous.and_then(|spec| spec.holder_identity.as_deref()) == Some(self.identity.as_str());
        let transitions = previous.and_then(|spec| spec.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.settings.lease_duration.as_secs().max(1) as i32),
            acquire_time: if same_holder { previous.and_then(|spec| spec.acquire_time.clone()) } else { Some(now.clone()) },
            renew_time: Some(now),
            lease_transitions: Some(if same_holder || previous.is_none() { transitions } else { transitions + 1 }),
            ..Default::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let name = &self.settings.lease_name.clone();
        match self.api.get_opt(name).await? {
            None => {
                let annotations = Some((self.advertise)()).filter(|annotations| !annotations.is_empty());
                let lease = Lease { metadata: ObjectMeta { name: Some(name.clone()), annotations, ..Default::default() }, spec: Some(self.spec(None)) };
                self.api.create(&PostParams::default(), &lease).await?;
                Ok(Attempt::Won)
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.clone().unwrap_or_default();
                let expired = self.observe_expired(&spec);
                if holder != self.identity && !holder.is_empty() && !expired {
                    return Ok(Attempt::HeldByOther(holder));
                }
                // The resourceVersion in `lease` makes this a compare-and-swap.
                lease.spec = Some(self.spec(Some(&spec)));
                let advertised = (self.advertise)();
                if !advertised.is_empty() {
                    lease.metadata.annotations.get_or_insert_default().extend(advertised);
                }
                self.api.replace(name, &PostParams::default(), &lease).await?;
                Ok(Attempt::Won)
            }
        }
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&mut self) {
        let mut last_holder = String::new();
        let mut last_error = String::new();
        // Any change of the Lease (a renewal, a release) is a reason to look at once; the retry period remains
        // the pace when the watch cannot be had (a Role without `watch`, say: the errors are retried quietly).
        let selector = watcher::Config::default().fields(&format!("metadata.name={}", self.settings.lease_name));
        let mut changes = watcher(self.api.clone(), selector).default_backoff().filter_map(|event| async move { event.ok() }).boxed();
        loop {
            let attempt = tokio::time::timeout(self.settings.renew_deadline, self.try_acquire_or_renew()).await;
            match attempt.unwrap_or_else(|_| Err(timed_out())) {
                // Said at warning level when it changes (a missing Role, an unreachable API server), else a
                // standby that can never lead would look like one waiting its turn.
                Err(error) if error.to_string() != last_error => {
                    tracing::warn!(lease = %self.settings.lease_name, %error, "lease attempt failed; retrying");
                    last_error = error.to_string();
                }
                Ok(Attempt::Won) => {
                    tracing::info!(lease = %self.settings.lease_name, identity = %self.identity, "became leader");
                    return;
                }
                Ok(Attempt::HeldByOther(holder)) => {
                    if holder != last_holder {
                        tracing::info!(lease = %self.settings.lease_name, %holder, "standing by");
                        last_holder = holder;
                    }
                }
                Err(error) => tracing::debug!(lease = %self.settings.lease_name, %error, "lease attempt failed"),
            }
            let retry = tokio::time::sleep(self.settings.retry_period);
            tokio::pin!(retry);
            loop {
                tokio::select! {
                    _ = &mut retry => break,
                    change = changes.next() => match change {
                        // The watch's first list repeats what was just read.
                        Some(watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone) => {}
                        Some(_) => break,
                        None => {
                            retry.as_mut().await;
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Gives the Lease up if this candidate holds it, as client-go's `ReleaseOnCancel` does (no holder, a
    /// duration of one second, the transitions kept), so a standby leads at once instead of after the lease
    /// duration. Only after the loops stopped: from here on, another replica may act.
    pub async fn release(&mut self) {
        let name = self.settings.lease_name.clone();
        let released = tokio::time::timeout(self.settings.renew_deadline, async {
            loop {
                let Some(mut lease) = self.api.get_opt(&name).await? else { return Ok(false) };
                let spec = lease.spec.clone().unwrap_or_default();
                if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                    return Ok(false);
                }
                let now = MicroTime(jiff::Timestamp::now());
                lease.spec = Some(LeaseSpec {
                    holder_identity: Some(String::new()),
                    lease_duration_seconds: Some(1),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: spec.lease_transitions,
                    ..Default::default()
                });
                match self.api.replace(&name, &PostParams::default(), &lease).await {
                    Ok(_) => return Ok(true),
                    // A renewal that was in flight when the loops stopped landed in between: read again.
                    Err(kube::Error::Api(status)) if status.code == 409 => continue,
                    Err(error) => return Err(error),
                }
            }
        })
        .await
        .unwrap_or_else(|_| Err(timed_out()));
        match released {
            Ok(true) => tracing::info!(lease = %name, identity = %self.identity, "released the lease"),
            Ok(false) => tracing::info!(lease = %name, "not the lease's holder; nothing to release"),
            // The Lease then expires after its duration, as if this process had died.
            Err(error) => tracing::warn!(lease = %name, %error, "releasing the lease failed"),
        }
    }

    /// Renews the lease every retry period; returns when it could not be renewed within the renew deadline,
    /// or someone else took it. The caller must stop acting as leader then.
    pub async fn hold(&mut self) {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            // A request that hangs must not outlive the deadline: by then a standby may lead (client-go bounds
            // each renewal the same way).
            let left = self.settings.renew_deadline.saturating_sub(renewed.elapsed());
            let attempt = tokio::time::timeout(left, self.try_acquire_or_renew()).await;
            match attempt.unwrap_or_else(|_| Err(timed_out())) {
                Ok(Attempt::Won) => renewed = Instant::now(),
                Ok(Attempt::HeldByOther(holder)) => {
                    tracing::error!(lease = %self.settings.lease_name, %holder, "lost the lease to another holder");
                    return;
                }
                Err(error) => {
                    tracing::warn!(lease = %self.settings.lease_name, %error, "renewing the lease failed");
                    if renewed.elapsed() >= self.settings.renew_deadline {
                        tracing::error!(lease = %self.settings.lease_name, "renew deadline passed; giving up leadership");
                        return;
                    }
                }
            }
        }
    }
}
