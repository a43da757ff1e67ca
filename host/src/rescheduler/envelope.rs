//! Protections: which pods the rescheduler never evicts, whatever a policy proposes. Defaults as the
//! descheduler's `DefaultEvictor`; the pod's own annotation `wasp.dev/evict` (`never`, `allow`) has the last
//! word over the protections a pod's owner may waive.

use crate::cluster::{EvictionConsent, PodMeta, EVICT_ANNOTATION};
use crate::config::{Protections, SYSTEM_CRITICAL_PRIORITY};
use crate::contract::types::Pod;
use wasp_sdk::types::LabelSelector;

/// The protections of one configuration, with its label selector converted once.
pub struct Envelope {
    protections: Protections,
    selector: Option<LabelSelector>,
    /// `kube-system` and the host's own namespace, unless `evictSystemNamespacePods`.
    system_namespaces: Vec<String>,
}

/// Where the cluster's own components run (DNS, metrics, the CNI's controllers).
const KUBE_SYSTEM: &str = "kube-system";

impl Envelope {
    /// `host_namespaces`: the host's own (where it runs, where its Lease is).
    pub fn new(protections: &Protections, host_namespaces: &[&str]) -> Envelope {
        // Validated with the configuration; a selector that fails here would have been refused there.
        let selector = protections.label_selector.as_ref().and_then(|selector| {
            crate::cluster::convert::label_selector("the rescheduler's configuration", "rescheduler.protections.labelSelector", selector).ok()
        });
        let system_namespaces = match protections.evict_system_namespace_pods {
            true => Vec::new(),
            false => [KUBE_SYSTEM].iter().chain(host_namespaces).map(|namespace| namespace.to_string()).collect(),
        };
        Envelope { protections: protections.clone(), selector, system_namespaces }
    }

    /// Why `pod` must stay, if it must; `now` is in seconds since the Unix epoch.
    pub fn protection(&self, pod: &Pod, meta: &PodMeta, now: i64) -> Option<String> {
        let rules = &self.protections;
        // Never waived: evicting these does nothing useful or cannot work.
        if pod.mirror {
            return Some("static pod (mirror)".into());
        }
        if pod.terminating {
            return Some("already terminating".into());
        }
        let owner_kind = pod.owner.as_ref().filter(|owner| owner.controller).map(|owner| owner.kind.as_str());
        if owner_kind == Some("DaemonSet") && !rules.evict_daemon_set_pods {
            return Some("DaemonSet pod (its replacement would land on the same node)".into());
        }
        match &meta.consent {
            EvictionConsent::Never => return Some(format!("annotation {EVICT_ANNOTATION}: never")),
            EvictionConsent::Unreadable(value) => {
                return Some(format!("annotation {EVICT_ANNOTATION}: {value:?} is neither never nor allow; treated as never"))
            }
            EvictionConsent::Allow => return self.selection(pod, now),
            EvictionConsent::Default => {}
        }
        if !meta.resource_claims.is_empty() {
            return Some(format!(
                "uses resource claims ({}): the host cannot tell yet whether its devices can be allocated elsewhere (dynamic resource allocation)",
                meta.resource_claims.join(", ")
            ));
        }
        if let Some(group) = &meta.pod_group {
            return Some(format!("member of pod group {group:?}: evicting one member alone can break its gang, and the rescheduler does not move gangs (yet)"));
        }
        if pod.priority >= SYSTEM_CRITICAL_PRIORITY && !rules.evict_system_critical_pods {
            return Some(format!("system-critical priority {}", pod.priority));
        }
        let failed = pod.phase == crate::contract::types::PodPhase::Failed;
        if owner_kind.is_none() && !rules.evict_bare_pods && !(failed && rules.evict_failed_bare_pods) {
            return Some("no controller would recreate it (bare pod)".into());
        }
        if pod.local_storage && !rules.evict_local_storage_pods {
            return Some("uses local storage (emptyDir or hostPath)".into());
        }
        if pod.pvc && rules.ignore_pvc_pods {
            return Some("uses a PersistentVolumeClaim (ignorePvcPods)".into());
        }
        self.selection(pod, now)
    }

    /// The configuration's choice of pods (namespaces, selector, age, priority): an annotation does not waive it.
    fn selection(&self, pod: &Pod, now: i64) -> Option<String> {
        let rules = &self.protections;
        if self.system_namespaces.contains(&pod.namespace) {
            let whose = if pod.namespace == KUBE_SYSTEM { "the cluster's own" } else { "the host's own" };
            return Some(format!("namespace {} is {whose} (protections.evictSystemNamespacePods)", pod.namespace));
        }
        let namespaces = &rules.namespaces;
        if !namespaces.include.is_empty() && !namespaces.include.contains(&pod.namespace) {
            return Some(format!("namespace {} is not in protections.namespaces.include", pod.namespace));
        }
        if namespaces.exclude.contains(&pod.namespace) {
            return Some(format!("namespace {} is excluded", pod.namespace));
        }
        if self.selector.as_ref().is_some_and(|selector| !selector.matches(&pod.labels)) {
            return Some("labels do not match protections.labelSelector".into());
        }
        if let Some(minimum) = rules.min_pod_age {
            let age = now.saturating_sub(pod.created_at);
            if age < minimum.as_secs() as i64 {
                return Some(format!("younger than minPodAge ({age}s < {}s)", minimum.as_secs()));
            }
        }
        if rules.priority_threshold.is_some_and(|threshold| pod.priority >= threshold) {
            return Some(format!("priority {} is at or above priorityThreshold", pod.priority));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::convert;

    fn pod(yaml: &str) -> (Pod, PodMeta) {
        let source: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(yaml).unwrap();
        (convert::pod(&source).unwrap(), convert::pod_meta(&source))
    }

    const OWNED: &str = "metadata: {name: web-1, namespace: shop, uid: u1, creationTimestamp: '2026-01-01T00:00:00Z', ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: r, controller: true}]}\nspec: {containers: [{name: app}]}";

    fn with(extra_metadata: &str, spec: &str) -> (Pod, PodMeta) {
        pod(&format!(
            "metadata: {{name: p, namespace: shop, uid: u, creationTimestamp: '2026-01-01T00:00:00Z', {extra_metadata}}}\nspec: {{containers: [{{name: app}}], {spec}}}"
        ))
    }

    const OWNER: &str = "ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: r, controller: true}]";
    const NOW: i64 = 1_767_225_600 + 3600;

    #[test]
    fn kube_system_and_the_hosts_namespace_are_protected_unless_the_operator_says_otherwise() {
        let in_namespace = |namespace: &str| pod(&OWNED.replace("namespace: shop", &format!("namespace: {namespace}")));
        let envelope = Envelope::new(&Protections::default(), &["wasp-system"]);
        let allowed = |namespace: &str| {
            let (pod, mut meta) = in_namespace(namespace);
            meta.consent = EvictionConsent::Allow;
            envelope.protection(&pod, &meta, NOW)
        };
        assert_eq!(
            allowed("kube-system").as_deref(),
            Some("namespace kube-system is the cluster's own (protections.evictSystemNamespacePods)"),
            "an annotation does not waive it"
        );
        assert_eq!(allowed("wasp-system").as_deref(), Some("namespace wasp-system is the host's own (protections.evictSystemNamespacePods)"));
        assert_eq!(allowed("shop"), None);
        let opted_out = Envelope::new(&Protections { evict_system_namespace_pods: true, ..Default::default() }, &["wasp-system"]);
        let (pod, meta) = in_namespace("kube-system");
        assert_eq!(opted_out.protection(&pod, &meta, NOW), None);
    }

    #[test]
    fn defaults_follow_the_descheduler() {
        let envelope = Envelope::new(&Protections::default(), &[]);
        let (owned, meta) = pod(OWNED);
        assert_eq!(envelope.protection(&owned, &meta, NOW), None, "a ReplicaSet's pod may move");
        let cases = [
            (with("", ""), "no controller would recreate it (bare pod)"),
            (
                with("ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: d, uid: d, controller: true}]", ""),
                "DaemonSet pod (its replacement would land on the same node)",
            ),
            (with(&format!("{OWNER}, annotations: {{kubernetes.io/config.mirror: x}}"), ""), "static pod (mirror)"),
            (with(OWNER, "priority: 2000001000"), "system-critical priority 2000001000"),
            (with(OWNER, "volumes: [{name: v, emptyDir: {}}]"), "uses local storage (emptyDir or hostPath)"),
            (with(&format!("{OWNER}, deletionTimestamp: '2026-01-01T00:00:01Z'"), ""), "already terminating"),
            (
                with(OWNER, "resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]"),
                "uses resource claims (gpu): the host cannot tell yet whether its devices can be allocated elsewhere (dynamic resource allocation)",
            ),
        ];
        for ((pod, meta), expected) in cases {
            assert_eq!(envelope.protection(&pod, &meta, NOW).as_deref(), Some(expected));
        }
        let (with_claim, meta) = with(OWNER, "volumes: [{name: v, persistentVolumeClaim: {claimName: c}}]");
        assert_eq!(envelope.protection(&with_claim, &meta, NOW), None, "PVC pods move unless ignorePvcPods");
        let ignoring = Envelope::new(&Protections { ignore_pvc_pods: true, ..Default::default() }, &[]);
        assert!(ignoring.protection(&with_claim, &meta, NOW).is_some());
    }

    #[test]
    fn failed_bare_pods_only_with_evict_failed_bare_pods() {
        let (failed, meta) = pod("metadata: {name: p, namespace: shop, uid: u}\nspec: {containers: [{name: app}]}\nstatus: {phase: Failed}");
        let (running, running_meta) = with("", "");
        assert!(Envelope::new(&Protections::default(), &[]).protection(&failed, &meta, NOW).is_some(), "kept by default, as the descheduler");
        let clearing = Envelope::new(&Protections { evict_failed_bare_pods: true, ..Default::default() }, &[]);
        assert_eq!(clearing.protection(&failed, &meta, NOW), None);
        assert!(clearing.protection(&running, &running_meta, NOW).is_some(), "a running bare pod stays protected");
    }

    #[test]
    fn the_annotation_decides_what_the_owner_may_waive() {
        let envelope = Envelope::new(&Protections::default(), &[]);
        let (never, meta) = with(&format!("{OWNER}, annotations: {{wasp.dev/evict: never}}"), "");
        assert_eq!(envelope.protection(&never, &meta, NOW).as_deref(), Some("annotation wasp.dev/evict: never"));
        let (typo, meta) = with(&format!("{OWNER}, annotations: {{wasp.dev/evict: nevr}}"), "");
        assert!(envelope.protection(&typo, &meta, NOW).unwrap().contains("\"nevr\" is neither never nor allow"));
        let (bare_allowed, meta) = with("annotations: {wasp.dev/evict: allow}", "volumes: [{name: v, emptyDir: {}}]");
        assert_eq!(envelope.protection(&bare_allowed, &meta, NOW), None, "allow waives bare-pod and local-storage");
        let (devices_allowed, meta) =
            with(&format!("{OWNER}, annotations: {{wasp.dev/evict: allow}}"), "resourceClaims: [{name: gpu, resourceClaimName: gpu-0}]");
        assert_eq!(envelope.protection(&devices_allowed, &meta, NOW), None, "the owner may say its devices will be found elsewhere");
        let (member, meta) = with(OWNER, "schedulingGroup: {podGroupName: train}");
        assert!(envelope.protection(&member, &meta, NOW).unwrap().starts_with("member of pod group \"train\""));
        let (member_allowed, meta) = with(&format!("{OWNER}, annotations: {{wasp.dev/evict: allow}}"), "schedulingGroup: {podGroupName: train}");
        assert_eq!(envelope.protection(&member_allowed, &meta, NOW), None, "the owner may say its gang survives it");
        let (daemon, meta) =
            with("annotations: {wasp.dev/evict: allow}, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: d, uid: d, controller: true}]", "");
        assert!(envelope.protection(&daemon, &meta, NOW).is_some(), "a DaemonSet pod would come back on the same node");
        let excluding = Envelope::new(
            &Protections { namespaces: crate::config::NamespaceFilter { include: vec![], exclude: vec!["shop".into()] }, ..Default::default() },
            &[],
        );
        assert_eq!(
            excluding.protection(&bare_allowed, &meta, NOW).as_deref(),
            Some("namespace shop is excluded"),
            "allow does not override the operator's selection"
        );
    }

    #[test]
    fn selection_by_namespace_labels_age_and_priority() {
        let (owned, meta) = pod(OWNED);
        let protections = |yaml: &str| Envelope::new(&serde_yaml::from_str::<Protections>(yaml).unwrap(), &[]);
        assert!(protections("namespaces: {include: [other]}").protection(&owned, &meta, NOW).unwrap().contains("not in protections.namespaces.include"));
        assert!(protections("labelSelector: {matchLabels: {tier: batch}}").protection(&owned, &meta, NOW).is_some());
        assert_eq!(protections("minPodAge: 2h").protection(&owned, &meta, NOW).as_deref(), Some("younger than minPodAge (3600s < 7200s)"));
        assert_eq!(protections("minPodAge: 30m").protection(&owned, &meta, NOW), None);
        assert!(protections("priorityThreshold: 0").protection(&owned, &meta, NOW).is_some());
    }
}
