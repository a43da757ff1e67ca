//! The host's configuration file: where policies live and how each runs ([`PolicyConfig`]), the scheduler's
//! profiles, the policies the rescheduler and autoscaler may use, and leader election. Validated as a whole,
//! with errors that name the field; out-of-range values are errors, not surprises at run time.

mod admission;
mod autoscaler;
mod policy;
mod registries;
mod rescheduler;
mod verification;

pub use admission::{AdmissionMode, AdmissionSection};
pub use autoscaler::AutoscalerSection;
pub use policy::{OperationDeadlines, PolicyConfig};
pub use registries::Registries;
pub use rescheduler::{EvictionLimits, NamespaceFilter, Pacing, Protections, ReschedulerSection, Strategy, SYSTEM_CRITICAL_PRIORITY};
pub use verification::Verification;

use crate::contract::types::PolicyKind;
use crate::kube::leader::LeaderElection;
use anyhow::bail;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A configuration larger than a ConfigMap can hold is not one.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// Deeper nesting than any real configuration needs; parsing deep nesting is quadratic, so it is refused before.
pub const MAX_NESTING: usize = 64;

/// Works out of the box with the default policy set in `plugins/out`.
pub const DEFAULT_CONFIG: &str = include_str!("default-config.yaml");

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostConfig {
    /// Directory with the policy components (`<name>.wasm`, `<name>.wasm.zst` or bundles `*.tar.zst`).
    pub policy_dir: PathBuf,
    /// Per-policy settings and limits; policies not listed run with their defaults.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyConfig>,
    /// The keys that must have signed every policy (unless the policy has its own `verification`).
    #[serde(default)]
    pub verification: Verification,
    /// How the registries of policies with an OCI `source` are reached.
    #[serde(default)]
    pub registries: Registries,
    pub scheduler: SchedulerSection,
    /// Present: the rescheduler's evict policies are loaded and kept current.
    #[serde(default)]
    pub rescheduler: Option<ReschedulerSection>,
    /// Present: Autoscalers are reconciled with the scale policies it lists, loaded and kept current.
    #[serde(default)]
    pub autoscaler: Option<AutoscalerSection>,
    /// What the admission webhooks (served when `wasp run` has a certificate) and the stray-pod check decide.
    #[serde(default)]
    pub admission: AdmissionSection,
    /// Leader election for `wasp run`: the holder of the Lease runs every loop; the others stand by, warm.
    #[serde(default)]
    pub leader_election: LeaderElection,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchedulerSection {
    pub profiles: Vec<Profile>,
    /// Share of nodes to find feasible before scoring, 0 for kube-scheduler's adaptive rule.
    #[serde(default)]
    pub percentage_of_nodes_to_score: u32,
    /// What one namespace's waiting pods may hold in the host together (see `cluster::waiting_budget`).
    #[serde(default = "default_waiting_mib_per_namespace")]
    pub waiting_pods_mib_per_namespace: u32,
}

impl SchedulerSection {
    pub fn waiting_bytes_per_namespace(&self) -> usize {
        (self.waiting_pods_mib_per_namespace as usize) << 20
    }
}

fn default_waiting_mib_per_namespace() -> u32 {
    (crate::cluster::waiting_budget::MAX_NAMESPACE_WAITING_BYTES >> 20) as u32
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Profile {
    pub scheduler_name: String,
    #[serde(default)]
    pub filters: Vec<String>,
    #[serde(default)]
    pub scores: Vec<WeightedPolicy>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WeightedPolicy {
    pub policy: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// Who uses a policy, and as what kind: for messages and for checking a new version still serves its users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyUser {
    Profile { scheduler_name: String, kind: PolicyKind },
    Rescheduler,
    Autoscaler,
}

impl PolicyUser {
    pub fn kind(&self) -> PolicyKind {
        match self {
            PolicyUser::Profile { kind, .. } => *kind,
            PolicyUser::Rescheduler => PolicyKind::Evict,
            PolicyUser::Autoscaler => PolicyKind::Scale,
        }
    }
}

impl std::fmt::Display for PolicyUser {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyUser::Profile { scheduler_name, kind } => write!(formatter, "profile {scheduler_name} (as {kind})"),
            PolicyUser::Rescheduler => formatter.write_str("the rescheduler (as evict)"),
            PolicyUser::Autoscaler => formatter.write_str("the autoscaler (as scale)"),
        }
    }
}

/// Users joined for a message: `profile wasp (as filter), the rescheduler (as evict)`.
pub fn describe_users(users: &[PolicyUser]) -> String {
    users.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Refuses flow collections (`[`, `{`) nested deeper than [`MAX_NESTING`], counting outside quoted strings.
/// Block nesting is bounded by the size limit: each level costs a line of indentation.
fn check_nesting(text: &str) -> anyhow::Result<()> {
    let (mut depth, mut quote) = (0usize, None);
    for (line, content) in text.lines().enumerate() {
        let mut previous = ' ';
        for character in content.chars() {
            match (quote, character) {
                (Some(open), close) if close == open && previous != '\\' => quote = None,
                (Some(_), _) => {}
                (None, '#') if previous.is_whitespace() => break,
                (None, '"' | '\'') => quote = Some(character),
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        bail!("line {}: nested deeper than {MAX_NESTING} levels", line + 1);
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = character;
        }
    }
    Ok(())
}

impl HostConfig {
    pub fn parse(text: &str) -> anyhow::Result<HostConfig> {
        if text.len() > MAX_CONFIG_BYTES {
            bail!("the configuration is {} bytes, more than the {MAX_CONFIG_BYTES} a ConfigMap holds", text.len());
        }
        check_nesting(text)?;
        let config: HostConfig = serde_yaml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    pub fn load(path: &Path) -> anyhow::Result<HostConfig> {
        use anyhow::Context;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse_at(&text, path).with_context(|| format!("configuration {}", path.display()))
    }

    /// The configuration read from the file at `path`: a relative `policyDir` (or key file) is relative to the
    /// file's folder, as a user reading the file expects, not to wherever the host was started.
    pub fn parse_at(text: &str, path: &Path) -> anyhow::Result<HostConfig> {
        let mut config = Self::parse(text)?;
        let folder = path.parent().filter(|folder| !folder.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if config.policy_dir.is_relative() {
            config.policy_dir = folder.join(&config.policy_dir);
        }
        config.verification.resolve_keys(folder);
        config.registries.resolve_paths(folder);
        for verification in config.policies.values_mut().filter_map(|policy| policy.verification.as_mut()) {
            verification.resolve_keys(folder);
        }
        Ok(config)
    }

    /// The keys that must have signed `policy`: its own `verification`, else the general one.
    pub fn verification_for(&self, policy: &str) -> &Verification {
        self.policies.get(policy).and_then(|config| config.verification.as_ref()).unwrap_or(&self.verification)
    }

    /// Every key file the policies in use are checked with, once.
    pub fn key_files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.policy_names().iter().flat_map(|name| self.verification_for(name).keys.iter().map(PathBuf::as_path)).collect();
        files.sort();
        files.dedup();
        files
    }

    /// The built-in configuration (the default policy set in `plugins/out`).
    pub fn built_in() -> HostConfig {
        Self::parse(DEFAULT_CONFIG).expect("the built-in configuration is valid (tested)")
    }

    /// Every policy something uses, with its users, in order of first use.
    pub fn policy_users(&self) -> Vec<(String, Vec<PolicyUser>)> {
        let mut users: Vec<(String, Vec<PolicyUser>)> = Vec::new();
        let mut add = |name: &str, user: PolicyUser| match users.iter_mut().find(|(known, _)| known == name) {
            Some((_, list)) if !list.contains(&user) => list.push(user),
            Some(_) => {}
            None => users.push((name.to_string(), vec![user])),
        };
        for profile in &self.scheduler.profiles {
            let of = |kind| PolicyUser::Profile { scheduler_name: profile.scheduler_name.clone(), kind };
            for name in &profile.filters {
                add(name, of(PolicyKind::Filter));
            }
            for score in &profile.scores {
                add(&score.policy, of(PolicyKind::Score));
            }
        }
        for policy in self.rescheduler.iter().flat_map(|section| section.evict_policies()) {
            add(policy, PolicyUser::Rescheduler);
        }
        for name in self.autoscaler.iter().flat_map(|section| &section.policies) {
            add(name, PolicyUser::Autoscaler);
        }
        users
    }

    /// Every policy something uses, once.
    pub fn policy_names(&self) -> Vec<String> {
        self.policy_users().into_iter().map(|(name, _)| name).collect()
    }

    /// Who uses `policy`.
    pub fn users_of(&self, policy: &str) -> Vec<PolicyUser> {
        self.policy_users().into_iter().find(|(name, _)| name == policy).map(|(_, users)| users).unwrap_or_default()
    }

    /// Checks the configuration as a whole (parsing does this; call it after changing one in code).
    pub fn validate(&self) -> anyhow::Result<()> {
        self.leader_election.validate()?;
        let scheduler = &self.scheduler;
        if scheduler.profiles.is_empty() {
            bail!("scheduler.profiles: at least one profile is needed");
        }
        if scheduler.percentage_of_nodes_to_score > 100 {
            bail!("scheduler.percentageOfNodesToScore: {} is more than 100", scheduler.percentage_of_nodes_to_score);
        }
        if !(1..=4096).contains(&scheduler.waiting_pods_mib_per_namespace) {
            bail!("scheduler.waitingPodsMibPerNamespace: {} is outside 1..=4096", scheduler.waiting_pods_mib_per_namespace);
        }
        for (index, profile) in scheduler.profiles.iter().enumerate() {
            let field = format!("scheduler.profiles[{index}]");
            if profile.scheduler_name.is_empty() {
                bail!("{field}.schedulerName: must not be empty");
            }
            if scheduler.profiles[..index].iter().any(|earlier| earlier.scheduler_name == profile.scheduler_name) {
                bail!("{field}.schedulerName: {:?} is used by two profiles", profile.scheduler_name);
            }
            for (position, score) in profile.scores.iter().enumerate() {
                if !(1..=100).contains(&score.weight) {
                    bail!("{field}.scores[{position}].weight: {} is outside 1..100", score.weight);
                }
            }
        }
        if let Some(section) = &self.rescheduler {
            let profiles: Vec<&str> = scheduler.profiles.iter().map(|profile| profile.scheduler_name.as_str()).collect();
            section.validate(&profiles)?;
        }
        if let Some(section) = &self.autoscaler {
            section.validate()?;
        }
        let profiles: Vec<&str> = scheduler.profiles.iter().map(|profile| profile.scheduler_name.as_str()).collect();
        self.admission.validate(&profiles)?;
        self.verification.validate("verification")?;
        for (name, policy) in &self.policies {
            policy.validate(&format!("policies.{name}"))?;
        }
        let used = self.policy_names();
        if let Some(unused) = self.policies.keys().find(|name| !used.contains(name)) {
            bail!("policies.{unused}: nothing uses this policy (no profile, rescheduler strategy or autoscaler entry names it)");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_error(text: &str) -> String {
        format!("{:#}", HostConfig::parse(text).unwrap_err())
    }

    #[test]
    fn a_relative_policy_dir_is_relative_to_the_configuration_file() {
        let text = "policyDir: ../../plugins/out\nscheduler: {profiles: [{schedulerName: a}]}";
        let config = HostConfig::parse_at(text, Path::new("examples/config/x.yaml")).unwrap();
        assert_eq!(config.policy_dir, Path::new("examples/config/../../plugins/out"));
        let absolute = HostConfig::parse_at("policyDir: /etc/wasp/policies\nscheduler: {profiles: [{schedulerName: a}]}", Path::new("/x/c.yaml")).unwrap();
        assert_eq!(absolute.policy_dir, Path::new("/etc/wasp/policies"));
        let bare = HostConfig::parse_at(text, Path::new("c.yaml")).unwrap();
        assert_eq!(bare.policy_dir, Path::new("./../../plugins/out"));
    }

    #[test]
    fn the_built_in_configuration_is_valid() {
        let config = HostConfig::built_in();
        assert_eq!(config.scheduler.profiles[0].scheduler_name, "wasp");
        assert!(config.policy_names().contains(&"resources-fit".to_string()));
    }

    #[test]
    fn errors_name_the_field() {
        let error = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a, scores: [{policy: p, weight: 0}]}]}");
        assert_eq!(error, "scheduler.profiles[0].scores[0].weight: 0 is outside 1..100");
        let error = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a}, {schedulerName: a}]}");
        assert!(error.contains("scheduler.profiles[1].schedulerName: \"a\" is used by two profiles"), "{error}");
        let error = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a, filtres: []}]}");
        assert!(error.contains("unknown field `filtres`"), "{error}");
        let error = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a}]}\npolicies: {ghost: {}}");
        assert!(error.starts_with("policies.ghost: nothing uses this policy"), "{error}");
        let error = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a}]}\nrescheduler: {strategies: []}");
        assert!(error.starts_with("rescheduler.strategies: at least one strategy (or preemption)"), "{error}");
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let base = "policyDir: x\nscheduler: {profiles: [{schedulerName: a, filters: [p]}]}\n";
        for (policy, expected) in [
            ("{memoryMib: 0}", "policies.p.memoryMib: 0 is outside 1..=4096"),
            ("{memoryMib: 100000}", "policies.p.memoryMib: 100000 is outside 1..=4096"),
            ("{deadline: 0s}", "policies.p.deadline: 0s is outside 1ms..=1m"),
            ("{deadline: 2h}", "policies.p.deadline: 2h is outside 1ms..=1m"),
            ("{deadlines: {evict: 0s}}", "policies.p.deadlines.evict: 0s is outside 1ms..=1m"),
        ] {
            assert_eq!(parse_error(&format!("{base}policies: {{p: {policy}}}")), expected, "{policy}");
        }
        let deep = format!("{base}policies: {{p: {{settings: {{a: {}{}}}}}}}", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        assert_eq!(parse_error(&deep), "line 3: nested deeper than 64 levels");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert!(HostConfig::parse(&format!("{base}policies: {{p: {{settings: {{a: \"[[[[\"}}}}}}")).is_ok(), "brackets in strings are text");
        let huge = format!("{base}# {}", "x".repeat(MAX_CONFIG_BYTES));
        assert!(parse_error(&huge).contains("more than the 1048576 a ConfigMap holds"));
        let error = parse_error(&format!("{base}leaderElection: {{retryPeriod: 0s}}"));
        assert!(error.starts_with("leaderElection.retryPeriod: 0s is shorter than 100ms"), "{error}");
    }

    #[test]
    fn the_rescheduler_section_is_checked_with_field_names() {
        let base = "policyDir: x\nscheduler: {profiles: [{schedulerName: a}]}\nrescheduler: {strategies: [{policy: e}], ";
        for (section, expected) in [
            ("interval: 0s}", "rescheduler.interval: 0s is outside 1s..=1day"),
            ("fitProfile: b}", "rescheduler.fitProfile: \"b\" is not a scheduler profile (known: a)"),
            ("protections: {namespaces: {include: [a], exclude: [b]}}}", "rescheduler.protections.namespaces: set include or exclude, not both"),
            ("limits: {maxPerRun: 0}}", "rescheduler.limits.maxPerRun: 0 would forbid every eviction (leave it out for no limit, or use dryRun)"),
            ("pacing: {maxEvictionsPerWorkload: 0}}", "rescheduler.pacing.maxEvictionsPerWorkload: 0 would forbid every eviction (leave the rescheduler out instead)"),
            ("pacing: {window: 0s}}", "rescheduler.pacing.window: 0s is outside 1m..=7days"),
            ("protections: {labelSelector: {matchExpressions: [{key: k, operator: Gt, values: ['1']}]}}}", "the rescheduler's configuration: rescheduler.protections.labelSelector.matchExpressions[0].operator: Gt and Lt are not label selector operators"),
        ] {
            assert_eq!(parse_error(&format!("{base}{section}")), expected, "{section}");
        }
        let twice = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a}]}\nrescheduler: {strategies: [{policy: e}, {policy: e}]}");
        let admission = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a}]}\nadmission: {otherSchedulers: [default-scheduler, a]}");
        assert_eq!(admission, "admission.otherSchedulers[1]: \"a\" is a wasp profile; list only schedulers wasp does not run");
        let mode = parse_error("policyDir: x\nscheduler: {profiles: [{schedulerName: a}]}\nadmission: {mode: warning}");
        assert!(mode.contains("unknown variant `warning`, expected one of `deny`, `warn`, `strict`"), "{mode}");
        assert_eq!(twice, "rescheduler.strategies[1].policy: e is listed twice");
        let defaults = HostConfig::parse(&format!("{base}dryRun: true}}")).unwrap().rescheduler.unwrap();
        assert_eq!((defaults.interval.as_secs(), defaults.limits.max_per_run, defaults.limits.max_per_workload), (300, Some(10), Some(1)));
    }

    #[test]
    fn every_loop_section_names_policies_and_users_are_typed() {
        let config = HostConfig::parse(
            "policyDir: x\nscheduler: {profiles: [{schedulerName: a, filters: [p], scores: [{policy: p}]}]}\n\
             rescheduler: {strategies: [{policy: e}, {policy: p}]}\nautoscaler: {policies: [hpa]}\npolicies: {hpa: {}, e: {}}",
        )
        .unwrap();
        assert_eq!(config.policy_names(), ["p", "e", "hpa"]);
        assert_eq!(describe_users(&config.users_of("p")), "profile a (as filter), profile a (as score), the rescheduler (as evict)");
        assert_eq!(config.users_of("hpa"), [PolicyUser::Autoscaler]);
    }
}
