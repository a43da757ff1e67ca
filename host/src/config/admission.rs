//! The admission section: what the webhooks do with a pod that names a scheduler nobody runs, which schedulers
//! other than wasp's profiles run in the cluster, and when a pod that slipped past the webhook is reported.

use anyhow::bail;
use serde::Deserialize;
use std::time::Duration;

/// What the validating webhook does with a pod whose scheduler name is not known to run. Conflicts (the legacy
/// annotation, a namespace that enforces its scheduler) are refused in `deny` and `strict` modes.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AdmissionMode {
    /// Refuse a near miss of a known name (a typo: the pod would wait forever), admit any other unknown name
    /// with a warning: installing wasp must not break a scheduler it has not heard of (Volcano, YuniKorn, ...).
    #[default]
    Deny,
    /// Admit every pod, with a warning (kubectl prints it) where `deny` would refuse: for trying the webhook on a
    /// live cluster.
    Warn,
    /// Refuse every name that is neither a profile, nor in `otherSchedulers`, nor seen binding pods.
    Strict,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmissionSection {
    #[serde(default)]
    pub mode: AdmissionMode,
    /// Schedulers of the cluster besides wasp's profiles; pods naming them are admitted. Schedulers the host sees
    /// binding pods are known too, without being listed here.
    #[serde(default = "default_other_schedulers")]
    pub other_schedulers: Vec<String>,
    /// A pending pod naming an unknown scheduler for this long gets a `NoSuchScheduler` event.
    #[serde(default = "default_stray_pod_grace", with = "humantime_serde")]
    pub stray_pod_grace: Duration,
}

impl Default for AdmissionSection {
    fn default() -> Self {
        AdmissionSection { mode: AdmissionMode::Deny, other_schedulers: default_other_schedulers(), stray_pod_grace: default_stray_pod_grace() }
    }
}

fn default_other_schedulers() -> Vec<String> {
    vec!["default-scheduler".into()]
}

fn default_stray_pod_grace() -> Duration {
    Duration::from_secs(10)
}

impl AdmissionSection {
    pub fn validate(&self, profiles: &[&str]) -> anyhow::Result<()> {
        for (index, name) in self.other_schedulers.iter().enumerate() {
            if name.is_empty() {
                bail!("admission.otherSchedulers[{index}]: must not be empty");
            }
            if profiles.contains(&name.as_str()) {
                bail!("admission.otherSchedulers[{index}]: {name:?} is a wasp profile; list only schedulers wasp does not run");
            }
        }
        if self.stray_pod_grace > Duration::from_secs(3600) {
            bail!("admission.strayPodGrace: {} is more than 1h", humantime::format_duration(self.stray_pod_grace));
        }
        Ok(())
    }
}
