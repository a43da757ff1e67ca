"""Lists every kind the simulator serves through the Python client's typed models (which refuse null in
required fields) and prints how many objects of each it read. Run by tests/python_client.rs."""
import sys

from kubernetes import client, config

config.load_kube_config()
core = client.CoreV1Api()
apps = client.AppsV1Api()
calls = {
    "pods": core.list_pod_for_all_namespaces,
    "nodes": core.list_node,
    "namespaces": core.list_namespace,
    "events": core.list_event_for_all_namespaces,
    "configmaps": core.list_config_map_for_all_namespaces,
    "secrets": core.list_secret_for_all_namespaces,
    "serviceaccounts": core.list_service_account_for_all_namespaces,
    "services": core.list_service_for_all_namespaces,
    "events.k8s.io": client.EventsV1Api().list_event_for_all_namespaces,
    "leases": client.CoordinationV1Api().list_lease_for_all_namespaces,
    "deployments": apps.list_deployment_for_all_namespaces,
    "replicasets": apps.list_replica_set_for_all_namespaces,
    "statefulsets": apps.list_stateful_set_for_all_namespaces,
    "poddisruptionbudgets": client.PolicyV1Api().list_pod_disruption_budget_for_all_namespaces,
    "clusterroles": client.RbacAuthorizationV1Api().list_cluster_role,
    "rolebindings": client.RbacAuthorizationV1Api().list_role_binding_for_all_namespaces,
    "persistentvolumeclaims": core.list_persistent_volume_claim_for_all_namespaces,
    "persistentvolumes": core.list_persistent_volume,
    "storageclasses": client.StorageV1Api().list_storage_class,
}
failed = False
for name, call in calls.items():
    try:
        items = call().items
        print(f"{name} {len(items)}")
    except Exception as error:  # the typed models raise ValueError on a null required field
        print(f"{name} FAILED: {error!r}", file=sys.stderr)
        failed = True
for pod in core.list_pod_for_all_namespaces().items:
    for status in pod.status.container_statuses or []:
        assert status.image_id and status.ready is not None, status
sys.exit(1 if failed else 0)
