//! What kube-controller-manager's PersistentVolume controller and a CSI driver's external-provisioner do for
//! claims: a claim that names a volume is bound to it; a claim of a StorageClass is provisioned, at once with
//! `volumeBindingMode: Immediate`, or once the scheduler has picked a node with `WaitForFirstConsumer` (it
//! writes the node into the claim's `volume.kubernetes.io/selected-node` annotation). A provisioned volume is
//! zonal, like a cloud disk: its node affinity names the zone it was made in, and a pod that uses it can only
//! run there. A deleted claim's provisioned volume goes with it (`reclaimPolicy: Delete`).
//!
//! A volume whose `claimRef` names a pending claim (kube-scheduler's volume binder writes it for a
//! `WaitForFirstConsumer` claim it gives an existing volume) is bound to it. Not done: the controller's own
//! matching of `Immediate` claims to existing, unclaimed volumes. A class whose provisioner is
//! `kubernetes.io/no-provisioner` provisions nothing, and neither is a claim with a `selector` provisioned.

use crate::error::ApiError;
use crate::resources::{self, ResourceType};
use crate::store::{name_of, namespace_of, Store};
use serde_json::{json, Value};

/// Where the scheduler says a `WaitForFirstConsumer` claim's pod goes.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const ZONE: &str = "topology.kubernetes.io/zone";
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const DEFAULT_CLASS_BETA: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The provisioner of classes for volumes made by hand (local volumes): nothing is provisioned.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

pub fn claims() -> &'static ResourceType {
    resources::find("", "v1", "persistentvolumeclaims").expect("served")
}

pub fn volumes() -> &'static ResourceType {
    resources::find("", "v1", "persistentvolumes").expect("served")
}

pub fn classes() -> &'static ResourceType {
    resources::find("storage.k8s.io", "v1", "storageclasses").expect("served")
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str).filter(|text| !text.is_empty())
}

fn is_default(class: &Value) -> bool {
    [DEFAULT_CLASS, DEFAULT_CLASS_BETA]
        .iter()
        .any(|key| class.pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1"))).and_then(Value::as_str) == Some("true"))
}

/// Binds or provisions `claim` if it is pending and can be.
pub fn reconcile_claim(store: &Store, claim: &Value) -> Result<(), ApiError> {
    if text(claim, "/status/phase") == Some("Bound") || claim.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    // A claim that names no class gets the default one written into it (the DefaultStorageClass admission
    // plugin, and the PersistentVolume controller for claims made before a default existed); `""` stays none.
    if claim.pointer("/spec/storageClassName").is_none_or(Value::is_null) && text(claim, "/spec/volumeName").is_none() {
        if let Some(default) = store.all(classes()).into_iter().find(|class| is_default(class)) {
            store.mutate(claims(), Some(namespace_of(claim)), name_of(claim), |claim| {
                claim["spec"]["storageClassName"] = json!(name_of(&default));
                Ok(())
            })?;
        }
        return Ok(());
    }
    if let Some(volume_name) = text(claim, "/spec/volumeName") {
        let Ok(volume) = store.get(volumes(), None, volume_name) else { return Ok(()) };
        return bind(store, claim, &volume);
    }
    if let Some(volume) = store.all(volumes()).into_iter().find(|volume| claimed_by(volume, claim)) {
        return bind(store, claim, &volume);
    }
    let Some(class) = text(claim, "/spec/storageClassName").and_then(|name| store.get(classes(), None, name).ok()) else { return Ok(()) };
    // The external-provisioner refuses a claim with a selector ("claim Selector is not supported").
    if text(&class, "/provisioner") == Some(NO_PROVISIONER) || claim.pointer("/spec/selector").is_some_and(|selector| !selector.is_null()) {
        return Ok(());
    }
    let zone = match text(&class, "/volumeBindingMode") {
        Some("WaitForFirstConsumer") => {
            let Some(node) = text(claim, &format!("/metadata/annotations/{}", SELECTED_NODE.replace('/', "~1"))) else { return Ok(()) };
            let Ok(node) = store.get(resources::nodes(), None, node) else { return Ok(()) };
            node.pointer(&format!("/metadata/labels/{}", ZONE.replace('/', "~1"))).and_then(Value::as_str).map(str::to_string)
        }
        _ => immediate_zone(store, &class),
    };
    let volume = provision(store, claim, &class, zone.as_deref())?;
    bind(store, claim, &volume)
}

/// A volume whose `claimRef` names `claim` (by namespace and name, and uid when it has one) and is not bound yet.
fn claimed_by(volume: &Value, claim: &Value) -> bool {
    let Some(claim_ref) = volume.pointer("/spec/claimRef") else { return false };
    text(volume, "/status/phase") != Some("Bound")
        && claim_ref["namespace"].as_str() == Some(namespace_of(claim))
        && claim_ref["name"].as_str() == Some(name_of(claim))
        && claim_ref.get("uid").and_then(Value::as_str).is_none_or(|uid| Some(uid) == text(claim, "/metadata/uid"))
}

/// A volume given to a claim (its `claimRef` written): the claim is bound to it.
pub fn reconcile_volume(store: &Store, volume: &Value) -> Result<(), ApiError> {
    let Some(claim_ref) = volume.pointer("/spec/claimRef") else { return Ok(()) };
    let (Some(namespace), Some(name)) = (claim_ref["namespace"].as_str(), claim_ref["name"].as_str()) else { return Ok(()) };
    match store.get(claims(), Some(namespace), name) {
        Ok(claim) if text(&claim, "/status/phase") != Some("Bound") && claimed_by(volume, &claim) => bind(store, &claim, volume),
        _ => Ok(()),
    }
}

/// Where an `Immediate` claim is made: the first zone the class allows, else the zone of the first node that has one.
fn immediate_zone(store: &Store, class: &Value) -> Option<String> {
    let allowed = class.pointer("/allowedTopologies").and_then(Value::as_array).into_iter().flatten();
    let from_class = allowed
        .flat_map(|term| term["matchLabelExpressions"].as_array().into_iter().flatten())
        .find(|expression| expression["key"] == ZONE)
        .and_then(|expression| expression.pointer("/values/0").and_then(Value::as_str).map(str::to_string));
    from_class.or_else(|| {
        let mut zones: Vec<String> = store
            .all(resources::nodes())
            .iter()
            .filter_map(|node| node.pointer(&format!("/metadata/labels/{}", ZONE.replace('/', "~1"))).and_then(Value::as_str).map(str::to_string))
            .collect();
        zones.sort();
        zones.into_iter().next()
    })
}

fn provision(store: &Store, claim: &Value, class: &Value, zone: Option<&str>) -> Result<std::sync::Arc<Value>, ApiError> {
    let uid = text(claim, "/metadata/uid").unwrap_or_default();
    let name = format!("pvc-{uid}");
    if let Ok(existing) = store.get(volumes(), None, &name) {
        return Ok(existing);
    }
    let driver = text(class, "/provisioner").unwrap_or("sim.wasp.dev");
    let mut spec = json!({
        "capacity": {"storage": claim.pointer("/spec/resources/requests/storage").cloned().unwrap_or(json!("1Gi"))},
        "accessModes": claim.pointer("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"])),
        "persistentVolumeReclaimPolicy": text(class, "/reclaimPolicy").unwrap_or("Delete"),
        "storageClassName": name_of(class),
        "volumeMode": text(claim, "/spec/volumeMode").unwrap_or("Filesystem"),
        "csi": {"driver": driver, "volumeHandle": name},
    });
    if let Some(zone) = zone {
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}});
    }
    let volume = json!({
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": driver}},
        "spec": spec,
    });
    tracing::debug!(claim = %format!("{}/{}", namespace_of(claim), name_of(claim)), volume = %name, zone, "provisioned");
    store.create(volumes(), None, volume)
}

/// The volume claimed by the claim and the claim bound to the volume, as the PersistentVolume controller does.
fn bind(store: &Store, claim: &Value, volume: &Value) -> Result<(), ApiError> {
    let claim_ref =
        json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace_of(claim), "name": name_of(claim), "uid": claim["metadata"]["uid"]});
    let uid = claim["metadata"]["uid"].clone();
    // Checked under the store's lock, in the write: two claims never both take one volume.
    let claimed = store.mutate(volumes(), None, name_of(volume), |volume| {
        if volume.pointer("/spec/claimRef/uid").is_some_and(|taken| *taken != uid) {
            return Err(ApiError::conflict("persistentvolumes", "", name_of(volume), "the volume is bound to another claim"));
        }
        volume["spec"]["claimRef"] = claim_ref;
        volume["status"] = json!({"phase": "Bound"});
        Ok(())
    });
    if let Err(error) = claimed {
        tracing::debug!(volume = name_of(volume), claim = name_of(claim), %error, "volume not bound");
        return Ok(());
    }
    let (capacity, modes) = (volume.pointer("/spec/capacity").cloned(), volume.pointer("/spec/accessModes").cloned());
    store.mutate(claims(), Some(namespace_of(claim)), name_of(claim), |claim| {
        claim["spec"]["volumeName"] = json!(name_of(volume));
        let annotations = &mut claim["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations["pv.kubernetes.io/bind-completed"] = json!("yes");
        claim["status"] = json!({"phase": "Bound", "capacity": capacity, "accessModes": modes});
        Ok(())
    })?;
    Ok(())
}

/// A deleted claim's provisioned volume is deleted too when its reclaim policy says so.
pub fn claim_deleted(store: &Store, claim: &Value) {
    let name = format!("pvc-{}", text(claim, "/metadata/uid").unwrap_or_default());
    let _ = store.remove_if(volumes(), None, &name, |volume| text(volume, "/spec/persistentVolumeReclaimPolicy") == Some("Delete"));
}
