//! The admission section: what the webhooks do with a pod that names a scheduler nobody runs, which schedulers
//! other than wasp's profiles run in the cluster, and when a pod that slipped past the webhook is reported.

use anyhow::bail;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AdmissionMode {
    /// Refuse the pod: it would wait forever with no event and no condition.
    #[default]
    Deny,
    /// Admit the pod with an admission warning (kubectl prints it): for trying the webhook on a live cluster.
    Warn,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmissionSection {
    #[serde(default)]
    pub mode: AdmissionMode,
    /// Schedulers of the cluster besides wasp's profiles; pods naming them are admitted.
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
