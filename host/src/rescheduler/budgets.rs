//! PodDisruptionBudgets as the plan sees them, judged as the Eviction API judges them (kube-apiserver's
//! `pkg/registry/core/pod/storage/eviction.go`): a pod that is Pending, finished or terminating passes without a
//! budget; a pod selected by two budgets is refused; an unready pod passes without spending when its budget says
//! `unhealthyPodEvictionPolicy: AlwaysAllow`, or (the default, `IfHealthyBudget`) while the budget has its desired
//! healthy pods, and otherwise needs a disruption like a Ready pod; a budget whose status is older than its spec
//! refuses everything. Each planned eviction that spends takes one of `status.disruptionsAllowed`. The Eviction
//! API stays the authority (it answers 429); this is what lets a plan, and a dry run, show which evictions a
//! budget would refuse before any is sent.

use crate::contract::types::{Pod, PodPhase};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use wasp_sdk::types::LabelSelector;

#[derive(Clone)]
struct Budget {
    namespace: String,
    name: String,
    /// None: the budget selects no pod (a null selector in policy/v1).
    selector: Option<LabelSelector>,
    allowed: i32,
    current_healthy: i32,
    desired_healthy: i32,
    /// `status.observedGeneration` is behind `metadata.generation`: the disruption controller has not yet
    /// judged the current spec.
    stale: bool,
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`.
    unhealthy_always_allowed: bool,
}

/// What evicting one pod would do to its budget.
enum Verdict {
    /// Allowed without spending a disruption.
    Free,
    /// Allowed, spending one disruption.
    Spends(usize),
    Refused(String),
}

impl Budget {
    fn judge(&self, index: usize, ready: bool) -> Verdict {
        let healthy_enough = self.current_healthy >= self.desired_healthy && self.desired_healthy > 0;
        if !ready && (self.unhealthy_always_allowed || healthy_enough) {
            return Verdict::Free;
        }
        let name = format!("PodDisruptionBudget {}/{}", self.namespace, self.name);
        if self.stale {
            return Verdict::Refused(format!("{name} is still being processed by the disruption controller"));
        }
        if self.allowed > 0 {
            return Verdict::Spends(index);
        }
        let unready = if ready { "" } else { "; the pod is not Ready and the budget's unhealthyPodEvictionPolicy is IfHealthyBudget" };
        Verdict::Refused(format!(
            "{name} allows no more disruptions (it needs {} healthy pods and has {}{unready})",
            self.desired_healthy, self.current_healthy
        ))
    }
}

/// The budgets of the cluster, or none known (they could not be read: the plan says so).
#[derive(Default, Clone)]
pub struct Budgets {
    budgets: Vec<Budget>,
}

impl Budgets {
    /// Budgets from the API's objects; one whose selector cannot be read is kept as "selects nothing" and named
    /// in the returned warnings.
    pub fn from_objects(objects: &[PodDisruptionBudget]) -> (Budgets, Vec<String>) {
        let mut warnings = Vec::new();
        let budgets = objects
            .iter()
            .map(|object| {
                let namespace = object.metadata.namespace.clone().unwrap_or_default();
                let name = object.metadata.name.clone().unwrap_or_default();
                let spec = object.spec.as_ref();
                let selector = spec.and_then(|spec| spec.selector.as_ref()).and_then(|selector| {
                    let owner = format!("PodDisruptionBudget {namespace}/{name}");
                    crate::cluster::convert::label_selector(&owner, "spec.selector", selector).map_err(|error| warnings.push(error.to_string())).ok()
                });
                let status = object.status.clone().unwrap_or_default();
                Budget {
                    namespace,
                    name,
                    selector,
                    allowed: status.disruptions_allowed.unwrap_or(0),
                    current_healthy: status.current_healthy.unwrap_or(0),
                    desired_healthy: status.desired_healthy.unwrap_or(0),
                    stale: status.observed_generation.unwrap_or(0) < object.metadata.generation.unwrap_or(0),
                    unhealthy_always_allowed: spec.and_then(|spec| spec.unhealthy_pod_eviction_policy.as_deref()) == Some("AlwaysAllow"),
                }
            })
            .collect();
        (Budgets { budgets }, warnings)
    }

    fn verdict(&self, pod: &Pod) -> Verdict {
        if pod.terminating || matches!(pod.phase, PodPhase::Pending | PodPhase::Succeeded | PodPhase::Failed) {
            return Verdict::Free;
        }
        let mut selecting = self
            .budgets
            .iter()
            .enumerate()
            .filter(|(_, budget)| budget.namespace == pod.namespace && budget.selector.as_ref().is_some_and(|selector| selector.matches(&pod.labels)));
        match (selecting.next(), selecting.next()) {
            (None, _) => Verdict::Free,
            (Some(_), Some(_)) => Verdict::Refused("more than one PodDisruptionBudget selects the pod; the Eviction API refuses such pods".into()),
            (Some((index, budget)), None) => budget.judge(index, pod.ready),
        }
    }

    /// Why evicting `pod` now would be refused, if it would.
    pub fn refusal(&self, pod: &Pod) -> Option<String> {
        match self.verdict(pod) {
            Verdict::Refused(why) => Some(why),
            Verdict::Free | Verdict::Spends(_) => None,
        }
    }

    /// A planned eviction of `pod` spends one disruption of its budget if it needs one; a Ready pod also leaves
    /// the budget one healthy pod short (as the disruption controller will count it), which later unready pods
    /// of the same budget are judged by.
    pub fn spend(&mut self, pod: &Pod) {
        if let Verdict::Spends(index) = self.verdict(pod) {
            let budget = &mut self.budgets[index];
            budget.allowed -= 1;
            if pod.ready {
                budget.current_healthy -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdb(yaml: &str) -> PodDisruptionBudget {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn pod(labels: &str, ready: bool) -> Pod {
        let source: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&format!(
            "metadata: {{name: p, namespace: shop, labels: {{{labels}}}}}\nspec: {{containers: [{{name: a}}]}}\nstatus: {{phase: Running, conditions: [{{type: Ready, status: '{}'}}]}}",
            if ready { "True" } else { "False" }
        ))
        .unwrap();
        crate::cluster::convert::pod(&source).unwrap()
    }

    #[test]
    fn planned_evictions_spend_the_budget() {
        let (mut budgets, warnings) = Budgets::from_objects(&[pdb(
            "metadata: {name: web, namespace: shop}\nspec: {minAvailable: 2, selector: {matchLabels: {app: web}}}\nstatus: {disruptionsAllowed: 1, currentHealthy: 3, desiredHealthy: 2, expectedPods: 3}",
        )]);
        assert!(warnings.is_empty());
        let web = pod("app: web", true);
        assert_eq!(budgets.refusal(&web), None);
        budgets.spend(&web);
        assert_eq!(budgets.refusal(&web).as_deref(), Some("PodDisruptionBudget shop/web allows no more disruptions (it needs 2 healthy pods and has 2)"));
        assert_eq!(budgets.refusal(&pod("app: db", true)), None, "not selected");
    }

    #[test]
    fn an_unready_pod_goes_free_only_while_its_budget_is_healthy_or_always_allows() {
        let status = |current: i32, desired: i32, allowed: i32| {
            format!("status: {{disruptionsAllowed: {allowed}, currentHealthy: {current}, desiredHealthy: {desired}, expectedPods: 3, observedGeneration: 1}}")
        };
        let budget = |policy: &str, status: String| {
            Budgets::from_objects(&[pdb(&format!(
                "metadata: {{name: web, namespace: shop, generation: 1}}\nspec: {{minAvailable: 2, selector: {{matchLabels: {{app: web}}}}{policy}}}\n{status}"
            ))])
            .0
        };
        let unready = pod("app: web", false);
        // Healthy budget: the unready pod goes without spending (the Ready one still may spend the one left).
        let mut healthy = budget("", status(2, 2, 0));
        assert_eq!(healthy.refusal(&unready), None);
        healthy.spend(&unready);
        assert_eq!(healthy.refusal(&unready), None, "it spent nothing");
        // Below its desired healthy count (IfHealthyBudget, the default): the unready pod needs a disruption.
        let short = budget("", status(1, 2, 0));
        assert_eq!(
            short.refusal(&unready).as_deref(),
            Some("PodDisruptionBudget shop/web allows no more disruptions (it needs 2 healthy pods and has 1; the pod is not Ready and the budget's unhealthyPodEvictionPolicy is IfHealthyBudget)")
        );
        assert_eq!(budget(", unhealthyPodEvictionPolicy: AlwaysAllow", status(1, 2, 0)).refusal(&unready), None);
        // A budget that desires no healthy pod is not "healthy" to the Eviction API: the pod spends.
        let mut empty = budget("", status(0, 0, 1));
        assert_eq!(empty.refusal(&unready), None);
        empty.spend(&unready);
        assert!(empty.refusal(&unready).is_some(), "the one disruption is spent");
        // A Ready pod planned out spends the one disruption and a healthy pod: the budget still has its desired
        // two, so the unready pod still goes; a second Ready pod does not.
        let mut drained = budget("", status(3, 2, 1));
        drained.spend(&pod("app: web", true));
        assert_eq!(drained.refusal(&unready), None);
        assert!(drained.refusal(&pod("app: web", true)).unwrap().contains("needs 2 healthy pods and has 2"));
    }

    #[test]
    fn a_stale_budget_refuses_and_pending_or_finished_pods_need_none() {
        let (budgets, _) = Budgets::from_objects(&[pdb(
            "metadata: {name: web, namespace: shop, generation: 2}\nspec: {minAvailable: 1, selector: {matchLabels: {app: web}}}\nstatus: {disruptionsAllowed: 3, currentHealthy: 4, desiredHealthy: 1, expectedPods: 4, observedGeneration: 1}",
        )]);
        let web = pod("app: web", true);
        assert_eq!(budgets.refusal(&web).as_deref(), Some("PodDisruptionBudget shop/web is still being processed by the disruption controller"));
        let mut pending = web.clone();
        pending.phase = PodPhase::Pending;
        assert_eq!(budgets.refusal(&pending), None);
        let mut terminating = web.clone();
        terminating.terminating = true;
        assert_eq!(budgets.refusal(&terminating), None);
    }

    #[test]
    fn two_budgets_on_one_pod_and_unreadable_selectors() {
        let (budgets, warnings) = Budgets::from_objects(&[
            pdb("metadata: {name: a, namespace: shop}\nspec: {selector: {}}\nstatus: {disruptionsAllowed: 5, currentHealthy: 0, desiredHealthy: 0, expectedPods: 0}"),
            pdb("metadata: {name: b, namespace: shop}\nspec: {selector: {matchLabels: {app: web}}}\nstatus: {disruptionsAllowed: 5, currentHealthy: 0, desiredHealthy: 0, expectedPods: 0}"),
            pdb("metadata: {name: c, namespace: shop}\nspec: {selector: {matchExpressions: [{key: app, operator: Gt, values: ['1']}]}}"),
        ]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("PodDisruptionBudget shop/c: spec.selector.matchExpressions[0].operator"), "{}", warnings[0]);
        assert!(budgets.refusal(&pod("app: web", true)).unwrap().starts_with("more than one PodDisruptionBudget"));
        assert_eq!(budgets.refusal(&pod("app: db", true)), None, "the empty selector of `a` selects it, with budget left");
    }
}
