//! What the webhooks decide about one pod, from the live configuration and the pod's namespace. Pure functions:
//! every rule is tested here without HTTP.

use crate::config::{AdmissionMode, HostConfig};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use std::collections::BTreeMap;

/// The namespace's scheduler: pods created there without one get it.
pub const NAMESPACE_SCHEDULER: &str = "wasp.dev/scheduler";
/// `enforce`: pods of the namespace may name no other scheduler.
pub const NAMESPACE_SCHEDULER_POLICY: &str = "wasp.dev/scheduler-policy";
/// The annotation that chose a scheduler before `spec.schedulerName` existed; a pod that says both must agree.
pub const LEGACY_SCHEDULER_ANNOTATION: &str = "scheduler.alpha.kubernetes.io/name";
/// What the API server writes into `spec.schedulerName` when a pod names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// The schedulers that run in the cluster: wasp's live profiles and the others the configuration lists.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownSchedulers {
    names: Vec<String>,
    /// This host's own profiles among them.
    own: Vec<String>,
}

impl KnownSchedulers {
    /// The configuration's profiles and `otherSchedulers`, and the schedulers `seen_binding` pods.
    pub fn of(config: &HostConfig, seen_binding: impl IntoIterator<Item = String>) -> KnownSchedulers {
        let own: Vec<String> = config.scheduler.profiles.iter().map(|profile| profile.scheduler_name.clone()).collect();
        let mut names: Vec<String> = own.iter().cloned().chain(config.admission.other_schedulers.iter().cloned()).chain(seen_binding).collect();
        names.sort();
        names.dedup();
        KnownSchedulers { names, own }
    }

    pub fn runs(&self, name: &str) -> bool {
        self.names.iter().any(|known| known == name)
    }

    /// `no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp; did you mean "wasp"?`
    pub fn unknown(&self, name: &str) -> String {
        let mut message = format!("no scheduler named {name:?} runs in this cluster; known: {}", self.names.join(", "));
        if let Some(close) = self.closest(name) {
            message.push_str(&format!("; did you mean {close:?}?"));
        }
        message
    }

    /// The known name a typo most likely meant: within two edits, and fewer edits than half the name's length
    /// (so `a` does not "mean" `wasp`).
    fn closest(&self, name: &str) -> Option<&str> {
        let distance = |known: &str| strsim::damerau_levenshtein(name, known);
        let (best, edits) = self.names.iter().map(|known| (known.as_str(), distance(known))).min_by_key(|(_, edits)| *edits)?;
        (edits > 0 && edits <= 2 && edits * 2 < name.chars().count().max(best.chars().count())).then_some(best)
    }
}

/// What a namespace says about its pods' scheduler, from its annotations (or labels, which a webhook's
/// `namespaceSelector` can match).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamespaceChoice {
    pub namespace: String,
    pub scheduler: Option<String>,
    pub enforce: bool,
}

impl NamespaceChoice {
    pub fn of(namespace: &Namespace) -> NamespaceChoice {
        let empty = BTreeMap::new();
        let annotations = namespace.metadata.annotations.as_ref().unwrap_or(&empty);
        let labels = namespace.metadata.labels.as_ref().unwrap_or(&empty);
        let said = |key: &str| annotations.get(key).or_else(|| labels.get(key)).map(|value| value.trim().to_string()).filter(|value| !value.is_empty());
        NamespaceChoice {
            namespace: namespace.metadata.name.clone().unwrap_or_default(),
            scheduler: said(NAMESPACE_SCHEDULER),
            enforce: said(NAMESPACE_SCHEDULER_POLICY).is_some_and(|policy| policy == "enforce"),
        }
    }
}

/// The scheduler the pod names: the API server's default when it names none.
pub fn scheduler_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|spec| spec.scheduler_name.as_deref()).filter(|name| !name.is_empty()).unwrap_or(DEFAULT_SCHEDULER)
}

/// The mutating webhook's answer: the namespace's scheduler for a pod that chose none. The API server has
/// already defaulted an omitted `schedulerName` to `default-scheduler`, so that name counts as no choice.
pub fn namespace_default(pod: &Pod, namespace: &NamespaceChoice) -> Option<String> {
    let chosen = namespace.scheduler.as_ref()?;
    (scheduler_of(pod) == DEFAULT_SCHEDULER && chosen != DEFAULT_SCHEDULER).then(|| chosen.clone())
}

/// The validating webhook's answer, with a message a person understands at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    /// Admitted with an admission warning (kubectl prints it).
    Warn(String),
    Deny(String),
}

/// Judges the pod under `mode`: a conflict, or (in `deny` mode) a near miss of a known name, is refused; an
/// unknown name that resembles none is admitted with a warning, since it may be a scheduler wasp has not seen
/// at work yet; `strict` refuses every unknown name, `warn` refuses nothing.
pub fn validate(pod: &Pod, namespace: &NamespaceChoice, known: &KnownSchedulers, mode: AdmissionMode) -> Verdict {
    let refuse = |message: String| match mode {
        AdmissionMode::Warn => Verdict::Warn(message),
        AdmissionMode::Deny | AdmissionMode::Strict => Verdict::Deny(message),
    };
    let name = scheduler_of(pod);
    let legacy = pod.metadata.annotations.as_ref().and_then(|annotations| annotations.get(LEGACY_SCHEDULER_ANNOTATION));
    if let Some(legacy) = legacy.filter(|legacy| legacy.as_str() != name) {
        return refuse(format!(
            "the pod names scheduler {name:?} in spec.schedulerName but {legacy:?} in its annotation {LEGACY_SCHEDULER_ANNOTATION}; remove the annotation or make them agree"
        ));
    }
    if let Some(required) = namespace.scheduler.as_deref().filter(|required| namespace.enforce && *required != name) {
        return refuse(format!(
            "namespace {} requires scheduler {required:?} ({NAMESPACE_SCHEDULER_POLICY}: enforce); the pod names {name:?}",
            namespace.namespace
        ));
    }
    let claims = crate::cluster::convert::resource_claims(pod);
    if known.own.iter().any(|own| own == name) && !claims.is_empty() {
        // Admitted: refusing would break what a chart creates; the pod waits, and says why, as the scheduler says.
        return Verdict::Warn(format!("{}; admitted: it waits unbound under scheduler {name:?}", crate::scheduler::devices_not_allocated(&claims)));
    }
    if known.runs(name) {
        return Verdict::Admit;
    }
    let mut message = known.unknown(name);
    if namespace.scheduler.as_deref() == Some(name) {
        message.push_str(&format!(" (the name comes from namespace {}'s {NAMESPACE_SCHEDULER})", namespace.namespace));
    }
    match mode {
        AdmissionMode::Deny if known.closest(name).is_none() => Verdict::Warn(format!(
            "{message}; admitted: the pod waits until a scheduler of that name runs (list it in admission.otherSchedulers to silence this)"
        )),
        _ => refuse(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> KnownSchedulers {
        let config = HostConfig::parse("policyDir: x\nscheduler: {profiles: [{schedulerName: wasp}, {schedulerName: wasp-batch}]}").unwrap();
        KnownSchedulers::of(&config, [])
    }

    fn validate(pod: &Pod, namespace: &NamespaceChoice, known: &KnownSchedulers) -> Result<(), String> {
        match super::validate(pod, namespace, known, AdmissionMode::Strict) {
            Verdict::Admit => Ok(()),
            Verdict::Warn(message) | Verdict::Deny(message) => Err(message),
        }
    }

    #[test]
    fn by_default_only_near_misses_and_conflicts_are_refused_and_other_unknown_names_are_warned() {
        let judge = |scheduler: &str, mode: AdmissionMode| super::validate(&pod(Some(scheduler), None), &namespace(None, false), &known(), mode);
        assert!(matches!(judge("wsap", AdmissionMode::Deny), Verdict::Deny(message) if message.ends_with(r#"did you mean "wasp"?"#)));
        let Verdict::Warn(warning) = judge("volcano", AdmissionMode::Deny) else { panic!("volcano is not refused by default") };
        assert_eq!(
            warning,
            r#"no scheduler named "volcano" runs in this cluster; known: default-scheduler, wasp, wasp-batch; admitted: the pod waits until a scheduler of that name runs (list it in admission.otherSchedulers to silence this)"#
        );
        assert!(matches!(judge("volcano", AdmissionMode::Strict), Verdict::Deny(_)));
        assert!(matches!(judge("wsap", AdmissionMode::Warn), Verdict::Warn(_)));
        let conflict = super::validate(&pod(Some("wasp"), Some("wasp-batch")), &namespace(None, false), &known(), AdmissionMode::Deny);
        assert!(matches!(conflict, Verdict::Deny(_)), "{conflict:?}");
        // A scheduler seen binding pods is known, whatever the configuration lists.
        let config = HostConfig::parse("policyDir: x\nscheduler: {profiles: [{schedulerName: wasp}]}").unwrap();
        let learned = KnownSchedulers::of(&config, ["volcano".to_string()]);
        assert_eq!(super::validate(&pod(Some("volcano"), None), &namespace(None, false), &learned, AdmissionMode::Strict), Verdict::Admit);
    }

    fn pod(scheduler: Option<&str>, legacy: Option<&str>) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}})).unwrap();
        pod.spec.as_mut().unwrap().scheduler_name = scheduler.map(str::to_string);
        if let Some(legacy) = legacy {
            pod.metadata.annotations = Some([(LEGACY_SCHEDULER_ANNOTATION.to_string(), legacy.to_string())].into());
        }
        pod
    }

    fn namespace(scheduler: Option<&str>, enforce: bool) -> NamespaceChoice {
        NamespaceChoice { namespace: "team-a".into(), scheduler: scheduler.map(str::to_string), enforce }
    }

    #[test]
    fn an_unknown_scheduler_is_refused_with_the_known_names_and_a_guess() {
        let error = validate(&pod(Some("wsap"), None), &namespace(None, false), &known()).unwrap_err();
        assert_eq!(error, r#"no scheduler named "wsap" runs in this cluster; known: default-scheduler, wasp, wasp-batch; did you mean "wasp"?"#);
        let error = validate(&pod(Some("volcano"), None), &namespace(None, false), &known()).unwrap_err();
        assert_eq!(error, r#"no scheduler named "volcano" runs in this cluster; known: default-scheduler, wasp, wasp-batch"#, "nothing close");
        assert!(known().unknown("wasp-bacth").ends_with(r#"did you mean "wasp-batch"?"#));
        assert!(!known().unknown("a").contains("did you mean"), "one letter is no typo of wasp");
        for admitted in [Some("wasp"), Some("wasp-batch"), Some("default-scheduler"), None, Some("")] {
            assert_eq!(validate(&pod(admitted, None), &namespace(None, false), &known()), Ok(()), "{admitted:?}");
        }
    }

    #[test]
    fn a_pod_with_resource_claims_for_a_wasp_profile_is_admitted_with_a_warning() {
        let mut with_claim = pod(Some("wasp"), None);
        let claims = serde_json::json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]);
        with_claim.spec.as_mut().unwrap().resource_claims = Some(serde_json::from_value(claims).unwrap());
        let Verdict::Warn(warning) = super::validate(&with_claim, &namespace(None, false), &known(), AdmissionMode::Strict) else { panic!("not warned") };
        assert!(warning.starts_with("pod has resource claims (gpu), and wasp does not allocate devices"), "{warning}");
        assert!(warning.ends_with(r#"admitted: it waits unbound under scheduler "wasp""#), "{warning}");
        with_claim.spec.as_mut().unwrap().scheduler_name = None;
        assert_eq!(super::validate(&with_claim, &namespace(None, false), &known(), AdmissionMode::Strict), Verdict::Admit, "kube-scheduler allocates devices");
    }

    #[test]
    fn conflicting_choices_are_refused() {
        let error = validate(&pod(Some("wasp"), Some("wasp-batch")), &namespace(None, false), &known()).unwrap_err();
        assert!(error.starts_with(r#"the pod names scheduler "wasp" in spec.schedulerName but "wasp-batch" in its annotation"#), "{error}");
        assert_eq!(validate(&pod(Some("wasp"), Some("wasp")), &namespace(None, false), &known()), Ok(()), "agreeing is fine");
        let error = validate(&pod(Some("wasp"), None), &namespace(Some("wasp-batch"), true), &known()).unwrap_err();
        assert_eq!(error, r#"namespace team-a requires scheduler "wasp-batch" (wasp.dev/scheduler-policy: enforce); the pod names "wasp""#);
        assert_eq!(validate(&pod(Some("wasp"), None), &namespace(Some("wasp-batch"), false), &known()), Ok(()), "a default, not a rule");
        let error = validate(&pod(Some("wsap"), None), &namespace(Some("wsap"), false), &known()).unwrap_err();
        assert!(error.ends_with("(the name comes from namespace team-a's wasp.dev/scheduler)"), "{error}");
    }

    #[test]
    fn a_namespace_default_applies_only_to_pods_that_chose_no_scheduler() {
        assert_eq!(namespace_default(&pod(None, None), &namespace(Some("wasp"), false)), Some("wasp".into()));
        assert_eq!(namespace_default(&pod(Some(DEFAULT_SCHEDULER), None), &namespace(Some("wasp"), false)), Some("wasp".into()), "defaulted by the API server");
        assert_eq!(namespace_default(&pod(Some("wasp-batch"), None), &namespace(Some("wasp"), false)), None, "the pod's own choice wins");
        assert_eq!(namespace_default(&pod(None, None), &namespace(None, false)), None);
    }

    #[test]
    fn a_namespace_says_its_choice_by_annotation_or_label() {
        let namespace = |metadata: serde_json::Value| NamespaceChoice::of(&serde_json::from_value(serde_json::json!({"metadata": metadata})).unwrap());
        let annotated = namespace(serde_json::json!({"name": "a", "annotations": {NAMESPACE_SCHEDULER: "wasp", NAMESPACE_SCHEDULER_POLICY: "enforce"}}));
        assert_eq!(annotated, NamespaceChoice { namespace: "a".into(), scheduler: Some("wasp".into()), enforce: true });
        let labelled = namespace(serde_json::json!({"name": "b", "labels": {NAMESPACE_SCHEDULER: "wasp-batch"}}));
        assert_eq!((labelled.scheduler.as_deref(), labelled.enforce), (Some("wasp-batch"), false));
        let both = namespace(serde_json::json!({"name": "c", "labels": {NAMESPACE_SCHEDULER: "x"}, "annotations": {NAMESPACE_SCHEDULER: "wasp"}}));
        assert_eq!(both.scheduler.as_deref(), Some("wasp"), "the annotation wins");
    }
}
