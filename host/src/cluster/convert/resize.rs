//! What a pod resized in place takes from its node (in-place pod vertical scaling, GA in Kubernetes 1.35).
//!
//! After a resize, a pod's spec says what it asks for, while its status says what the kubelet has allocated and
//! what the containers actually run with; until the kubelet has caught up, the node holds the most of the three.
//! kube-scheduler counts a bound pod so (`k8s.io/component-helpers/resource.PodRequests` with
//! `UseStatusResources`, v1.37.2), and so does the host:
//!
//! - the pod's requests are, resource by resource, the largest of the spec's, the allocated and the actuated
//!   aggregates (each computed with the sidecar rules). The allocated and actuated aggregates are the pod-level
//!   `status.allocatedResources` and `status.resources.requests` when the kubelet reports both (1.36+ kubelets,
//!   `InPlacePodLevelResourcesVerticalScaling`), or else the containers' `allocatedResources` and
//!   `resources.requests`, each falling back to the spec for a container the status does not report;
//! - a resize the kubelet found infeasible (`PodResizePending` with reason `Infeasible`) will never be
//!   allocated, so the spec is left out: the pod counts what it was allocated and runs with;
//! - pod-level requests (`spec.resources`) take the largest of the spec's and the pod-level status's.
//!
//! kwok does not resize: a resize on a kwok node changes the spec and nothing in the status, so the pod counts
//! its new spec at once (as kube-scheduler counts it there too).
//!
//! The contract's pod record has containers and no status resources, so the difference is folded into the first
//! app container (as pod-level requests are, in [`super::Context::fold_pod_level_requests`]): the effective
//! requests every policy computes are then kube-scheduler's. Lowering a resource (only for an infeasible resize)
//! cannot go below what the other containers ask; the pod is then counted for more, never less.

use super::{Context, ConvertError};
use crate::cluster::state::{to_resources, to_vector};
use crate::contract::types::{Container, Resources};
use k8s_openapi::api::core::v1 as core;
use wasp_sdk::resources::{effective_requests, ContainerRequest, ResourceVector};

/// The pod condition a kubelet sets while a resize waits (`Deferred`) or cannot be done (`Infeasible`).
const RESIZE_PENDING: &str = "PodResizePending";
const INFEASIBLE: &str = "Infeasible";

/// kube-scheduler's `IsPodResizeInfeasible`: the first `PodResizePending` condition says `Infeasible`.
fn resize_infeasible(status: &core::PodStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .find(|condition| condition.type_ == RESIZE_PENDING)
        .is_some_and(|condition| condition.reason.as_deref() == Some(INFEASIBLE))
}

/// The pod-level requests the node holds (`effectivePodLevelResources`): the spec's, unless the resize is
/// infeasible, and what the pod-level status reports allocated and actuated, whichever is largest.
pub(super) fn pod_level_requests(context: &Context, spec_requests: Resources, status: Option<&core::PodStatus>) -> Result<Resources, ConvertError> {
    let Some(status) = status.filter(|status| status.resources.is_some()) else { return Ok(spec_requests) };
    let mut largest = if resize_infeasible(status) { ResourceVector::default() } else { to_vector(&spec_requests) };
    let actuated = status.resources.as_ref().and_then(|resources| resources.requests.as_ref());
    largest.max_with(&to_vector(&context.resources("status.resources.requests", actuated)?));
    largest.max_with(&to_vector(&context.resources("status.allocatedResources", status.allocated_resources.as_ref())?));
    Ok(to_resources(&largest))
}

/// Folds what the status says the pod holds into `containers` (see the module's comment). `containers` and
/// `init_containers` carry the spec's requests; `sidecars` names the init containers that keep running.
pub(super) fn hold_resized(
    context: &Context,
    status: Option<&core::PodStatus>,
    containers: &mut [Container],
    init_containers: &[Container],
    sidecars: &[String],
) -> Result<(), ConvertError> {
    let Some(status) = status else { return Ok(()) };
    let infeasible = resize_infeasible(status);
    let aggregate = |app: Vec<ResourceVector>, init: Vec<ResourceVector>| {
        let init = init_containers.iter().zip(init).map(|(container, requests)| ContainerRequest { requests, sidecar: sidecars.contains(&container.name) });
        effective_requests(app, init, &ResourceVector::default(), false)
    };
    let spec_of = |list: &[Container]| list.iter().map(|container| to_vector(&container.requests)).collect::<Vec<_>>();
    let spec = aggregate(spec_of(containers), spec_of(init_containers));
    let pod_level_actuated = status.resources.as_ref().and_then(|resources| resources.requests.as_ref());
    let (allocated, actuated) = match (&status.allocated_resources, pod_level_actuated) {
        (Some(allocated), Some(actuated)) => (
            to_vector(&context.resources("status.allocatedResources", Some(allocated))?),
            to_vector(&context.resources("status.resources.requests", Some(actuated))?),
        ),
        _ => {
            let (app_allocated, app_actuated) = from_container_statuses(context, status, containers, infeasible)?;
            let (init_allocated, init_actuated) = from_container_statuses(context, status, init_containers, infeasible)?;
            (aggregate(app_allocated, init_allocated), aggregate(app_actuated, init_actuated))
        }
    };
    let mut held = if infeasible { ResourceVector::default() } else { spec.clone() };
    held.max_with(&allocated);
    held.max_with(&actuated);
    if held == spec {
        return Ok(());
    }
    // What the app containers and sidecars ask beside the first: the first container is set so that the sum
    // of all of them is what the node holds.
    let mut others = ResourceVector::default();
    containers
        .iter()
        .skip(1)
        .chain(init_containers.iter().filter(|container| sidecars.contains(&container.name)))
        .for_each(|container| others.add(&to_vector(&container.requests)));
    let Some(first) = containers.first_mut() else { return Ok(()) };
    let mut requests = to_vector(&first.requests);
    let names = held.scalar.keys().chain(spec.scalar.keys()).cloned().collect::<std::collections::BTreeSet<_>>();
    let fold = |held: u64, spec: u64, others: u64, amount: &mut u64| {
        if held != spec {
            *amount = held.saturating_sub(others);
        }
    };
    fold(held.cpu_millis, spec.cpu_millis, others.cpu_millis, &mut requests.cpu_millis);
    fold(held.memory_bytes, spec.memory_bytes, others.memory_bytes, &mut requests.memory_bytes);
    fold(held.ephemeral_storage_bytes, spec.ephemeral_storage_bytes, others.ephemeral_storage_bytes, &mut requests.ephemeral_storage_bytes);
    for name in names {
        let amount = requests.scalar.entry(name.clone()).or_default();
        fold(held.get(&name), spec.get(&name), others.get(&name), amount);
    }
    requests.scalar.retain(|_, amount| *amount > 0);
    first.requests = to_resources(&requests);
    Ok(())
}

/// Each container's allocated and actuated requests from its status (`containerAllocatedRequests`,
/// `containerActuatedRequests`): a container the status does not report counts its spec, or nothing when the
/// resize is infeasible.
fn from_container_statuses(
    context: &Context,
    status: &core::PodStatus,
    containers: &[Container],
    infeasible: bool,
) -> Result<(Vec<ResourceVector>, Vec<ResourceVector>), ConvertError> {
    let reported = status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten());
    let mut allocated = Vec::with_capacity(containers.len());
    let mut actuated = Vec::with_capacity(containers.len());
    for container in containers {
        let found = reported.clone().find(|container_status| container_status.name == container.name);
        let otherwise = if infeasible { ResourceVector::default() } else { to_vector(&container.requests) };
        let field = |name: &str| format!("status.containerStatuses[{}].{name}", container.name);
        let allocated_here = match found.and_then(|found| found.allocated_resources.as_ref()) {
            Some(list) => Some(to_vector(&context.resources(&field("allocatedResources"), Some(list))?)),
            None => None,
        };
        let actuated_here = match found.and_then(|found| found.resources.as_ref()).and_then(|resources| resources.requests.as_ref()) {
            Some(list) => Some(to_vector(&context.resources(&field("resources.requests"), Some(list))?)),
            None => None,
        };
        actuated.push(actuated_here.or_else(|| allocated_here.clone()).unwrap_or_else(|| otherwise.clone()));
        allocated.push(allocated_here.unwrap_or(otherwise));
    }
    Ok((allocated, actuated))
}

#[cfg(test)]
mod tests {
    use crate::cluster::state::pod_requests;
    use k8s_openapi::api::core::v1 as core;

    /// The CPU and memory (MiB) a pod takes from its node, as the host counts it for fitting.
    fn held(manifest: &str) -> (u64, u64) {
        let source: core::Pod = serde_yaml::from_str(manifest).unwrap();
        let (fit, _) = pod_requests(&super::super::pod(&source).unwrap());
        (fit.cpu_millis, fit.memory_bytes >> 20)
    }

    /// A bound pod with one container `app` asking `spec`, and `status` (YAML under `status:`).
    fn resized(spec: &str, status: &str) -> String {
        format!("metadata: {{name: web}}\nspec:\n  nodeName: n1\n  containers: [{{name: app, resources: {{requests: {spec}}}}}]\nstatus:\n{status}")
    }

    #[test]
    fn a_resize_the_kubelet_has_not_finished_holds_the_most_of_spec_allocated_and_actuated() {
        // Up, deferred: the node holds the new spec (kube-scheduler reserves it before the kubelet can).
        let deferred = "  conditions: [{type: PodResizePending, status: 'True', reason: Deferred}]\n  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: '1', memory: 64Mi}, resources: {requests: {cpu: '1', memory: 64Mi}}}]\n";
        assert_eq!(held(&resized("{cpu: 1500m, memory: 64Mi}", deferred)), (1500, 64));
        // Down, allocated but still running with more: the node holds what the container runs with.
        let in_progress = "  conditions: [{type: PodResizeInProgress, status: 'True'}]\n  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: 500m, memory: 32Mi}, resources: {requests: {cpu: 1500m, memory: 64Mi}}}]\n";
        assert_eq!(held(&resized("{cpu: 500m, memory: 32Mi}", in_progress)), (1500, 64));
        // Done: the three agree.
        let done = "  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: 500m}, resources: {requests: {cpu: 500m}}}]\n";
        assert_eq!(held(&resized("{cpu: 500m}", done)), (500, 0));
        // Allocated and not yet actuated: the allocation stands in for what the status does not report.
        let allocated = "  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: '2'}}]\n";
        assert_eq!(held(&resized("{cpu: 500m}", allocated)), (2000, 0));
    }

    #[test]
    fn an_infeasible_resize_counts_what_the_pod_was_allocated_not_its_spec() {
        let infeasible = "  conditions: [{type: PodResizePending, status: 'True', reason: Infeasible, message: 'Node did not have enough capacity'}]\n  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: '1'}, resources: {requests: {cpu: '1'}}}]\n";
        assert_eq!(held(&resized("{cpu: '30'}", infeasible)), (1000, 0));
    }

    #[test]
    fn the_pod_level_status_of_a_current_kubelet_is_read_when_it_reports_both() {
        // A 1.37 kubelet reports the pod's totals (with overhead, which kube-scheduler then adds again: counted
        // as it counts it).
        let status = "  allocatedResources: {cpu: '1', memory: 128Mi}\n  resources: {requests: {cpu: 1200m, memory: 128Mi}}\n  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: 100m}}]\n";
        assert_eq!(held(&resized("{cpu: 500m, memory: 64Mi}", status)), (1200, 128));
        // Only one of the two: the containers' statuses are read.
        let half = "  allocatedResources: {cpu: '4'}\n  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: 700m}}]\n";
        assert_eq!(held(&resized("{cpu: 500m}", half)), (700, 0));
    }

    #[test]
    fn sidecars_and_init_containers_are_counted_by_their_rules_in_every_source() {
        // The init container's step (2 CPU) is larger than the app's allocation (1 CPU) would make the pod: 2.
        let pod = |allocated: &str| {
            format!(
                "metadata: {{name: web}}\nspec:\n  nodeName: n1\n  initContainers: [{{name: setup, resources: {{requests: {{cpu: '2'}}}}}}, {{name: proxy, restartPolicy: Always, resources: {{requests: {{cpu: 200m}}}}}}]\n  containers: [{{name: app, resources: {{requests: {{cpu: 500m}}}}}}, {{name: side, resources: {{requests: {{cpu: 100m}}}}}}]\nstatus:\n  containerStatuses: [{{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {{cpu: {allocated}}}}}]\n"
            )
        };
        assert_eq!(held(&pod("'1'")), (2000, 0));
        // 3 CPU allocated to the app: the app containers and the sidecar (3 + 0.1 + 0.2) are more than the init step.
        assert_eq!(held(&pod("'3'")), (3300, 0));
    }

    #[test]
    fn pod_level_requests_hold_the_most_of_spec_and_pod_level_status() {
        let manifest = "metadata: {name: web}\nspec:\n  nodeName: n1\n  resources: {requests: {cpu: '1', memory: 256Mi}}\n  containers: [{name: app}]\nstatus:\n  allocatedResources: {cpu: '2', memory: 256Mi}\n  resources: {requests: {cpu: '2', memory: 256Mi}}\n";
        assert_eq!(held(manifest), (2000, 256));
    }

    #[test]
    fn a_pod_without_status_resources_counts_its_spec_and_bad_quantities_name_their_field() {
        let plain = "  phase: Running\n  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0}]\n";
        assert_eq!(held(&resized("{cpu: 300m}", plain)), (300, 0));
        let bad = "  containerStatuses: [{name: app, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: lots}}]\n";
        let source: core::Pod = serde_yaml::from_str(&resized("{cpu: 300m}", bad)).unwrap();
        let error = super::super::pod(&source).unwrap_err();
        assert_eq!((error.object.as_str(), error.field.as_str()), ("pod default/web", "status.containerStatuses[app].allocatedResources.cpu"));
    }
}
