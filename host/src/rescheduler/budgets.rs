//! PodDisruptionBudgets as the plan sees them: each budget's `status.disruptionsAllowed`, spent by every
//! planned eviction of a Ready pod it selects. The Eviction API stays the authority (it answers 429); this is
//! what lets a plan, and a dry run, show which evictions a budget would refuse before any is sent.

use crate::contract::types::Pod;
use wasp_sdk::types::LabelSelector;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

#[derive(Clone)]
struct Budget {
    namespace: String,
    name: String,
    /// None: the budget selects no pod (a null selector in policy/v1).
    selector: Option<LabelSelector>,
    allowed: i32,
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
                let selector = object.spec.as_ref().and_then(|spec| spec.selector.as_ref()).and_then(|selector| {
                    let owner = format!("PodDisruptionBudget {namespace}/{name}");
                    crate::cluster::convert::label_selector(&owner, "spec.selector", selector)
                        .map_err(|error| warnings.push(error.to_string()))
                        .ok()
                });
                let allowed = object.status.as_ref().map_or(0, |status| status.disruptions_allowed);
                Budget { namespace, name, selector, allowed }
            })
            .collect();
        (Budgets { budgets }, warnings)
    }

    fn selecting<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = usize> + 'a {
        self.budgets.iter().enumerate().filter_map(move |(index, budget)| {
            let selects = budget.namespace == pod.namespace && budget.selector.as_ref().is_some_and(|selector| selector.matches(&pod.labels));
            selects.then_some(index)
        })
    }

    /// Why evicting `pod` now would be refused, if it would. An unready pod spends no budget.
    pub fn refusal(&self, pod: &Pod) -> Option<String> {
        let selecting: Vec<usize> = self.selecting(pod).collect();
        match selecting.as_slice() {
            [] => None,
            [_, _, ..] => Some("more than one PodDisruptionBudget selects the pod; the Eviction API refuses such pods".into()),
            [_] if !pod.ready => None,
            [index] => {
                let budget = &self.budgets[*index];
                (budget.allowed <= 0).then(|| format!("PodDisruptionBudget {}/{} allows no more disruptions", budget.namespace, budget.name))
            }
        }
    }

    /// A planned eviction of `pod` spends one disruption of its budget.
    pub fn spend(&mut self, pod: &Pod) {
        if !pod.ready {
            return;
        }
        let selecting: Vec<usize> = self.selecting(pod).collect();
        for index in selecting {
            self.budgets[index].allowed -= 1;
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
            "metadata: {{name: p, namespace: shop, labels: {{{labels}}}}}\nspec: {{containers: [{{name: a}}]}}\nstatus: {{conditions: [{{type: Ready, status: '{}'}}]}}",
            if ready { "True" } else { "False" }
        ))
        .unwrap();
        crate::cluster::convert::pod(&source).unwrap()
    }

    #[test]
    fn planned_evictions_spend_the_budget_and_unready_pods_spend_nothing() {
        let (mut budgets, warnings) = Budgets::from_objects(&[pdb(
            "metadata: {name: web, namespace: shop}\nspec: {minAvailable: 2, selector: {matchLabels: {app: web}}}\nstatus: {disruptionsAllowed: 1, currentHealthy: 3, desiredHealthy: 2, expectedPods: 3}",
        )]);
        assert!(warnings.is_empty());
        let web = pod("app: web", true);
        assert_eq!(budgets.refusal(&web), None);
        budgets.spend(&web);
        assert_eq!(budgets.refusal(&web).as_deref(), Some("PodDisruptionBudget shop/web allows no more disruptions"));
        assert_eq!(budgets.refusal(&pod("app: web", false)), None, "an unready pod is not protected by the budget");
        assert_eq!(budgets.refusal(&pod("app: db", true)), None, "not selected");
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
