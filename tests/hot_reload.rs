//! Hot reload: policies and configuration swapped from a directory written exactly like the kubelet writes a
//! ConfigMap volume, while the scheduler works on the simulator, with no decision lost.

mod common;

use common::atomic_writer::AtomicWriter;
use common::{fixture_wasm, policy_wasm};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasp::config::HostConfig;
use wasp::host::Host;
use wasp::kube::{ApiClient, HostIdentity, ObjectRef};
use wasp::registry::signature::{self, SigningKey};
use wasp::registry::watch::{PolicyWatcher, WatchOptions};
use wasp::registry::{PolicyRegistry, RefusalReason};
use wasp::runtime::Runtime;
use wasp_sim::{Scenario, Simulator};

/// Two zones of ten nodes, room for 500 pods each.
const TWO_ZONES: &str = r#"
kubelet: {readyDelay: 10ms}
nodeGroups:
- {name: east, count: 10, cpu: "64", memory: 256Gi, pods: 500, zones: [east]}
- {name: west, count: 10, cpu: "64", memory: 256Gi, pods: 500, zones: [west]}
"#;

fn east() -> Vec<u8> {
    fixture_wasm("zone-pin-east").1
}

fn west() -> Vec<u8> {
    fixture_wasm("zone-pin-west").1
}

fn sha256(bytes: &[u8]) -> String {
    wasp::registry::source::sha256_hex(bytes)
}

/// A policy volume with resources-fit, least-allocated, misbehaving and the given zone-pin build.
struct PolicyVolume {
    root: tempfile::TempDir,
    policies: AtomicWriter,
    config: AtomicWriter,
    files: BTreeMap<String, Vec<u8>>,
}

const CONFIG: &str = r#"
scheduler:
  profiles:
  - schedulerName: wasp
    filters: [resources-fit, zone-pin]
    scores: [{policy: least-allocated, weight: 1}]
"#;

impl PolicyVolume {
    fn new(zone_pin: Vec<u8>) -> PolicyVolume {
        let root = tempfile::tempdir().unwrap();
        let policies = AtomicWriter::new(&root.path().join("policies"));
        let config = AtomicWriter::new(&root.path().join("config"));
        let mut files = BTreeMap::new();
        for name in ["resources-fit", "least-allocated"] {
            files.insert(format!("{name}.wasm"), policy_wasm(name).1);
        }
        files.insert("misbehaving.wasm".into(), fixture_wasm("misbehaving").1);
        files.insert("zone-pin.wasm".into(), zone_pin);
        policies.write(&files);
        let volume = PolicyVolume { root, policies, config, files };
        volume.write_config(CONFIG);
        volume
    }

    fn write_config(&self, body: &str) {
        let text = format!("policyDir: {}\n{body}", self.policies.path().display());
        self.config.write(&BTreeMap::from([("config.yaml".to_string(), text.into_bytes())]));
    }

    fn config_path(&self) -> std::path::PathBuf {
        self.config.path().join("config.yaml")
    }

    fn set(&mut self, file: &str, bytes: Option<Vec<u8>>) {
        match bytes {
            Some(bytes) => self.files.insert(file.into(), bytes),
            None => self.files.remove(file),
        };
        self.policies.write(&self.files);
    }

    fn registry(&self) -> Arc<PolicyRegistry> {
        let config = HostConfig::load(&self.config_path()).unwrap();
        Arc::new(PolicyRegistry::new(&Runtime::new(None).unwrap(), config, Some(self.config_path())).unwrap())
    }
}

fn fast_watch() -> WatchOptions {
    WatchOptions { debounce: Duration::from_millis(30), ..Default::default() }
}

fn serving_digest(registry: &PolicyRegistry, policy: &str) -> String {
    registry.current().policies[policy].digest.clone()
}

fn last_error(registry: &PolicyRegistry, policy: &str) -> Option<String> {
    registry.status().policies.into_iter().find(|status| status.name == policy).and_then(|status| status.last_error)
}

struct Cluster {
    _simulator: Simulator,
    client: Client,
    host: Arc<Host>,
    _watcher: PolicyWatcher,
    _worker: tokio::task::JoinHandle<()>,
}

async fn start_cluster(volume: &PolicyVolume) -> Cluster {
    let scenario = Scenario::parse(TWO_ZONES).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let host_pod = ObjectRef::pod("default", "wasp-host", "");
    let host = Host::new(api.clone(), volume.registry(), HostIdentity::named("wasp-host", Some(host_pod)));
    let watcher = host.watch_policies(fast_watch()).unwrap();
    let worker = tokio::spawn(host.clone().run_loops());
    Cluster { _simulator: simulator, client: api.client, host, _watcher: watcher, _worker: worker }
}

impl Cluster {
    async fn create_pods(&self, prefix: &str, count: usize, scheduler_name: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        for index in 0..count {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{prefix}-{index}"), "labels": {"batch": prefix}},
                "spec": {"schedulerName": scheduler_name, "containers": [{"name": "a", "resources": {"requests": {"cpu": "10m"}}}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }
    }

    /// Waits until `count` FailedScheduling events (as the API server recorded them) say `policy` failed.
    async fn failed_by(&self, policy: &str, count: usize) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let reason = format!("policy {policy} failed");
        common::wait_for(&format!("{count} pods failed by {policy}"), Duration::from_secs(20), || async {
            let listed = events.list(&ListParams::default()).await.map_err(|error| error.to_string())?.items;
            let failed = listed
                .iter()
                .filter(|event| {
                    event.reason.as_deref() == Some("FailedScheduling") && event.message.as_deref().is_some_and(|message| message.contains(&reason))
                })
                .count();
            if failed == count {
                Ok(())
            } else {
                Err(format!("{failed} so far"))
            }
        })
        .await
    }

    /// Waits until the `count` pods created as `batch` are bound.
    async fn bound_batch(&self, batch: &str, count: usize) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listed = pods.list(&ListParams::default().labels(&format!("batch={batch}"))).await.unwrap().items;
            if listed.iter().filter(|pod| pod.spec.as_ref().is_some_and(|spec| spec.node_name.is_some())).count() >= count {
                return;
            }
            assert!(Instant::now() < deadline, "batch {batch} was not bound");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Pod name -> node name, once all `count` pods are bound.
    async fn bound(&self, count: usize) -> BTreeMap<String, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let placed: BTreeMap<String, String> =
                pods.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|pod| Some((pod.metadata.name?, pod.spec?.node_name?))).collect();
            if placed.len() >= count {
                return placed;
            }
            assert!(Instant::now() < deadline, "only {} of {count} pods bound", placed.len());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_swaps_while_placing_2000_pods_lose_no_decision() {
    let mut volume = PolicyVolume::new(east());
    let cluster = start_cluster(&volume).await;
    let registry = cluster.host.policies.clone();
    let versions = [("east", east()), ("west", west())];
    for round in 0..50 {
        let (zone, bytes) = &versions[(round + 1) % 2];
        volume.set("zone-pin.wasm", Some(bytes.clone()));
        // These race the swap: either version may place them.
        cluster.create_pods(&format!("r{round}-racing"), 20, "wasp").await;
        let digest = sha256(bytes);
        common::eventually(&format!("round {round}: zone-pin {zone} serving"), || serving_digest(&registry, "zone-pin") == digest).await;
        // These are queued after the swap: the new version must place them, so they are placed before the next.
        let after = format!("r{round}-after-{zone}");
        cluster.create_pods(&after, 20, "wasp").await;
        cluster.bound_batch(&after, 20).await;
    }
    let placed = cluster.bound(2000).await;
    assert_eq!(placed.len(), 2000);
    for (pod, node) in &placed {
        if let Some((_, zone)) = pod.split_once("-after-") {
            let zone = zone.split('-').next().unwrap();
            assert!(node.starts_with(zone), "{pod} was queued after zone-pin {zone} served, but went to {node}");
        }
    }
    let stats = &cluster.host.scheduler.stats;
    assert_eq!(common::settled(&stats.scheduled, 2000).await, 2000);
    assert_eq!(stats.bind_requests.load(Ordering::Relaxed), 2000, "the host sent one binding per pod: none bound twice");
    assert_eq!(stats.bind_errors.load(Ordering::Relaxed), 0, "no binding conflicted");
    assert_eq!(stats.unschedulable.load(Ordering::Relaxed), 0, "no cycle failed");
    assert_eq!(registry.current().number, 51, "one generation per swap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_update_keeps_the_old_policy_with_an_event_and_a_fixed_one_is_picked_up() {
    let mut volume = PolicyVolume::new(east());
    let cluster = start_cluster(&volume).await;
    let registry = cluster.host.policies.clone();
    let east_digest = sha256(&east());

    volume.set("zone-pin.wasm", Some(b"\0asm\x0d\0\x01\0 truncated component".to_vec()));
    common::eventually("the corrupt update to be refused", || last_error(&registry, "zone-pin").is_some()).await;
    let error = last_error(&registry, "zone-pin").unwrap();
    assert!(error.contains("zone-pin.wasm: does not compile"), "{error}");
    assert!(error.contains("keeps serving"), "{error}");
    assert_eq!(serving_digest(&registry, "zone-pin"), east_digest);
    cluster.create_pods("during-corrupt", 10, "wasp").await;
    assert!(cluster.bound(10).await.values().all(|node| node.starts_with("east")), "the old version kept deciding");

    // Another policy's component under this name: refused by name.
    volume.set("zone-pin.wasm", Some(fixture_wasm("misbehaving").1));
    common::eventually("the misnamed update to be refused", || last_error(&registry, "zone-pin").is_some_and(|error| error.contains("calls itself"))).await;
    assert_eq!(serving_digest(&registry, "zone-pin"), east_digest);

    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(10);
    let reload_events = loop {
        let found: Vec<Event> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("PolicyReloadFailed"))
            .collect();
        if found.len() >= 2 {
            break found;
        }
        assert!(Instant::now() < deadline, "PolicyReloadFailed events: {found:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(reload_events.iter().all(|event| event.type_.as_deref() == Some("Warning") && event.involved_object.name.as_deref() == Some("wasp-host")));
    assert!(reload_events.iter().any(|event| event.message.as_deref().unwrap_or("").contains("does not compile")));

    volume.set("zone-pin.wasm", Some(west()));
    common::eventually("the fixed update to serve", || serving_digest(&registry, "zone-pin") == sha256(&west())).await;
    assert_eq!(last_error(&registry, "zone-pin"), None, "the error clears once a good version serves");
    cluster.create_pods("after-fix", 10, "wasp").await;
    let placed = cluster.bound(20).await;
    assert!(placed.iter().filter(|(pod, _)| pod.starts_with("after-fix")).all(|(_, node)| node.starts_with("west")));
    let status = registry.status();
    assert_eq!(status.generation, 2, "refusals made no generation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_updates_coalesce_into_one_reload() {
    let mut volume = PolicyVolume::new(east());
    let registry = volume.registry();
    let _watcher = PolicyWatcher::spawn(registry.clone(), WatchOptions { debounce: Duration::from_millis(200), ..Default::default() }, |_| {}).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for bytes in [west(), east(), west(), east(), west()] {
        volume.set("zone-pin.wasm", Some(bytes));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    common::eventually("the last update to serve", || serving_digest(&registry, "zone-pin") == sha256(&west())).await;
    // No fixed window: one more write, and once it serves, the generations count every swap the burst made (a
    // second swap of the burst would come before this one's).
    volume.set("zone-pin.wasm", Some(east()));
    common::eventually("the marker update to serve", || serving_digest(&registry, "zone-pin") == sha256(&east())).await;
    assert_eq!(registry.current().number, 3, "five writes within the quiet time make one swap, the marker another");
}

/// The value of a counter in the registry's metrics, as `/metrics` shows it.
fn counter(registry: &PolicyRegistry, name: &str) -> f64 {
    let mut metrics = prometheus_client::registry::Registry::default();
    registry.register_metrics(&mut metrics);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics).unwrap();
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok()).unwrap_or_else(|| panic!("{name} not in\n{text}"))
}

/// A plain directory, as when trying `wasp run` locally: the components and the configuration side by side as
/// regular files, with the host's log written next to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_watcher_does_not_read_the_directory_again_and_other_files_are_ignored() {
    let directory = tempfile::tempdir().unwrap();
    let volume = PolicyVolume::new(east());
    for (file, bytes) in &volume.files {
        std::fs::write(directory.path().join(file), bytes).unwrap();
    }
    let config_path = directory.path().join("config.yaml");
    std::fs::write(&config_path, format!("policyDir: .\n{CONFIG}")).unwrap();
    let config = HostConfig::load(&config_path).unwrap();
    let registry = Arc::new(PolicyRegistry::new(&Runtime::new(None).unwrap(), config, Some(config_path)).unwrap());
    let reads = || counter(&registry, "wasp_policy_directory_reads_total");
    let _watcher = PolicyWatcher::spawn(registry.clone(), fast_watch(), |_| {}).unwrap();
    common::eventually("the first rescan", || reads() >= 1.0).await;
    // A reload reads every component, which inotify reports; those reads are not changes. Over a second of 30 ms
    // debounces, taking them for changes would read the directory dozens of times. The sleeps below are the
    // observation window of an assertion that nothing happens, not waits for a condition: no condition marks
    // "the watcher ignored it", and a busy machine can only make correct code pass the same way.
    tokio::time::sleep(Duration::from_secs(1)).await; // observation window: idle
    for line in 0..10 {
        std::fs::write(directory.path().join("wasp.log"), format!("line {line}\n")).unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await; // spaces the writes over separate debounce windows
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // observation window: after the last write
    assert_eq!(reads(), 1.0, "idle, and a log written next to the configuration, read nothing");
    std::fs::write(directory.path().join("zone-pin.wasm"), west()).unwrap();
    common::eventually("the new version to serve", || serving_digest(&registry, "zone-pin") == sha256(&west())).await;
    assert!(reads() >= 2.0);
}

#[test]
fn deleting_a_policy_in_use_is_refused_and_unchanged_files_do_nothing() {
    let mut volume = PolicyVolume::new(east());
    let registry = volume.registry();
    let report = registry.reload();
    assert!(report.unchanged, "same files, nothing to do: {report:?}");

    volume.set("zone-pin.wasm", None);
    let report = registry.reload();
    assert_eq!(report.errors.len(), 1, "{report:?}");
    let error = &report.errors[0];
    assert_eq!(error.reason, RefusalReason::Missing);
    assert!(error.message.starts_with("policy zone-pin: "), "{}", error.message);
    let serving = format!("version {} ({}) keeps serving", registry.current().policies["zone-pin"].descriptor.version, &sha256(&east())[..12]);
    assert!(error.message.ends_with(&format!("/zone-pin.wasm was removed, but profile wasp (as filter) uses it; {serving}")), "{}", error.message);
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()), "the loaded version keeps serving");
    assert_eq!(registry.current().number, 1);

    // Once no profile uses it, the configuration that drops it is taken.
    volume.write_config("scheduler: {profiles: [{schedulerName: wasp, filters: [resources-fit]}]}");
    let report = registry.reload();
    assert!(report.errors.is_empty() && report.config_swapped, "{report:?}");
    assert!(!registry.current().policies.contains_key("zone-pin"));
}

#[test]
fn a_bundle_swaps_only_the_policies_that_changed_and_a_loose_file_overrides_it() {
    let mut volume = PolicyVolume::new(east());
    let loose = volume.files.clone();
    let bundle = |zone_pin: Vec<u8>| {
        let mut components: Vec<(String, Vec<u8>)> =
            loose.iter().filter(|(name, _)| *name != "zone-pin.wasm").map(|(name, bytes)| (name.clone(), bytes.clone())).collect();
        components.push(("zone-pin.wasm".into(), zone_pin));
        wasp::registry::bundle::pack(&components).unwrap()
    };
    // The same policies, now delivered as one bundle: nothing to swap.
    volume.files.clear();
    volume.set("policies.tar.zst", Some(bundle(east())));
    let registry = volume.registry();
    let report = registry.reload();
    assert!(report.unchanged || (report.swapped.is_empty() && report.errors.is_empty()), "{report:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()));
    // A new bundle in which one policy changed: that one swaps, the others keep their versions.
    let before = serving_digest(&registry, "resources-fit");
    volume.set("policies.tar.zst", Some(bundle(west())));
    let report = registry.reload();
    assert_eq!(report.swapped, ["zone-pin"], "{report:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&west()));
    assert_eq!(serving_digest(&registry, "resources-fit"), before);
    let source = registry.status().policies.into_iter().find(|status| status.name == "zone-pin").unwrap().source;
    assert!(source.ends_with("policies.tar.zst:zone-pin.wasm"), "{source}");
    // A loose file next to the bundle replaces its policy; a damaged bundle is refused and what served stays.
    volume.set("zone-pin.wasm", Some(east()));
    assert_eq!(registry.reload().swapped, ["zone-pin"]);
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()));
    volume.set("policies.tar.zst", Some(b"half a bundle".to_vec()));
    let report = registry.reload();
    assert!(report.error_messages().contains("policies.tar.zst: not zstd"), "{:?}", report.error_messages());
    assert_eq!(serving_digest(&registry, "resources-fit"), before, "the loaded version keeps serving");
}

#[test]
fn a_compressed_component_serves_as_its_uncompressed_self() {
    let mut volume = PolicyVolume::new(east());
    let registry = volume.registry();
    registry.reload();
    let compress = |bytes: &[u8]| wasp::registry::bundle::compress(bytes).unwrap();
    // The same component, now compressed: the same policy, nothing to swap.
    volume.set("zone-pin.wasm", None);
    volume.set("zone-pin.wasm.zst", Some(compress(&east())));
    let report = registry.reload();
    assert!(report.swapped.is_empty() && report.errors.is_empty(), "{report:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()));
    // A new version, compressed, swaps in.
    volume.set("zone-pin.wasm.zst", Some(compress(&west())));
    assert_eq!(registry.reload().swapped, ["zone-pin"]);
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&west()));
    let source = registry.status().policies.into_iter().find(|status| status.name == "zone-pin").unwrap().source;
    assert!(source.ends_with("zone-pin.wasm.zst"), "{source}");
    // Next to a bundle that also has zone-pin, the loose file still decides.
    let bundle = wasp::registry::bundle::pack(&[("zone-pin.wasm".to_string(), east())]).unwrap();
    volume.set("policies.tar.zst", Some(bundle));
    assert!(registry.reload().swapped.is_empty());
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&west()));
    // Cut short by a writer: refused with the reason, and the loaded version keeps serving (not the bundle's).
    let damaged = compress(&east());
    volume.set("zone-pin.wasm.zst", Some(damaged[..damaged.len() / 2].to_vec()));
    let report = registry.reload();
    assert!(report.swapped.is_empty(), "{report:?}");
    let errors = report.error_messages();
    assert!(errors.contains("policy zone-pin: ") && errors.contains("zone-pin.wasm.zst: damaged"), "{errors:?}");
    assert!(errors.contains(&format!("({}) keeps serving", &sha256(&west())[..12])), "{errors:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&west()));
}

#[test]
fn a_new_version_that_no_longer_implements_what_its_users_need_is_refused() {
    let mut volume = PolicyVolume::new(east());
    let registry = volume.registry();
    volume.set("zone-pin.wasm", Some(fixture_wasm("zone-pin-score").1));
    let report = registry.reload();
    assert_eq!(report.errors.len(), 1, "{report:?}");
    let error = &report.errors[0];
    assert_eq!(error.reason, RefusalReason::Kinds);
    assert!(error.message.contains("zone-pin.wasm: it implements [score], but profile wasp (as filter) needs filter"), "{}", error.message);
    assert!(error.message.ends_with("keeps serving"), "{}", error.message);
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()), "the last good version serves");
    assert_eq!(registry.current().number, 1);
    let status = registry.status();
    let zone_pin = status.policies.iter().find(|policy| policy.name == "zone-pin").unwrap();
    assert_eq!(zone_pin.last_error.as_deref(), Some(error.message.as_str()), "/policies shows it");
    assert_eq!(zone_pin.used_by, ["profile wasp (as filter)"]);

    // Used as a score instead, the same file serves.
    volume.write_config("scheduler: {profiles: [{schedulerName: wasp, filters: [resources-fit], scores: [{policy: zone-pin}]}]}");
    let report = registry.reload();
    assert!(report.errors.is_empty() && report.config_swapped, "{report:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&fixture_wasm("zone-pin-score").1));
}

#[test]
fn the_rescheduler_and_autoscaler_sections_load_canary_and_name_their_policies() {
    let mut volume = PolicyVolume::new(east());
    for name in ["hpa", "remove-pods-violating-node-taints"] {
        volume.set(&format!("{name}.wasm"), Some(policy_wasm(name).1));
    }
    let registry = volume.registry();
    volume.write_config(&format!("{CONFIG}rescheduler: {{strategies: [{{policy: remove-pods-violating-node-taints}}]}}\nautoscaler: {{policies: [hpa]}}\n"));
    let report = registry.reload();
    assert!(report.errors.is_empty() && report.config_swapped, "the shipped hpa passes its canary: {report:?}");
    let generation = registry.current();
    assert_eq!(generation.plans.eviction.len(), 1);
    assert!(generation.plans.scaling.contains_key("hpa"));
    assert_eq!(registry.status().autoscaler_policies, ["hpa"]);

    // Removing a file the rescheduler uses is refused, naming it.
    volume.set("remove-pods-violating-node-taints.wasm", None);
    let report = registry.reload();
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert!(report.errors[0].message.contains("was removed, but the rescheduler (as evict) uses it"), "{}", report.errors[0].message);

    // A score policy named as a scale policy is refused as a whole configuration.
    volume.set("remove-pods-violating-node-taints.wasm", Some(policy_wasm("remove-pods-violating-node-taints").1));
    volume.write_config(&format!("{CONFIG}autoscaler: {{policies: [least-allocated]}}\n"));
    let report = registry.reload();
    assert!(!report.config_swapped);
    // least-allocated already serves (as a score): the configuration's resolution names the field.
    assert!(report.error_messages().contains("autoscaler.policies[0]: policy least-allocated does not implement scale"), "{report:?}");
}

#[test]
fn a_configuration_swaps_or_is_refused_as_a_whole() {
    let mut volume = PolicyVolume::new(east());
    let registry = volume.registry();
    let refused = |report: &wasp::registry::ReloadReport, reason: RefusalReason, message: &str| {
        assert_eq!(report.errors.len(), 1, "{report:?}");
        let error = &report.errors[0];
        assert_eq!(error.reason, reason, "{}", error.message);
        assert!(error.message.contains("refused, the previous one keeps serving") && error.message.contains(message), "{}", error.message);
        assert!(!report.config_swapped);
        assert_eq!(registry.status().config_error.as_deref(), Some(error.message.as_str()));
    };

    // Names a policy that is not in the directory.
    volume.write_config("scheduler: {profiles: [{schedulerName: wasp, filters: [resources-fit, ghost]}]}");
    refused(&registry.reload(), RefusalReason::Missing, "ghost.wasm does not exist (used by profile wasp (as filter))");
    // Settings the policy rejects.
    volume.write_config("scheduler: {profiles: [{schedulerName: wasp, filters: [misbehaving]}]}\npolicies: {misbehaving: {settings: {reject-settings: true}}}");
    refused(
        &registry.reload(),
        RefusalReason::InvalidPolicy,
        "misbehaving.wasm: settings rejected: invalid settings for misbehaving: reject-settings: asked to reject",
    );
    // A policy that traps in the canary.
    volume.write_config("scheduler: {profiles: [{schedulerName: wasp, filters: [misbehaving]}]}\npolicies: {misbehaving: {settings: {filter: trap}}}");
    refused(&registry.reload(), RefusalReason::Canary, "canary filter call failed");
    // Malformed YAML.
    volume.write_config("scheduler: {profiles: [{schedulerName: wasp, filters: [");
    refused(&registry.reload(), RefusalReason::Config, "config.yaml refused");
    // Out of range.
    volume.write_config(&format!("{CONFIG}policies: {{resources-fit: {{deadline: 0s}}}}"));
    refused(&registry.reload(), RefusalReason::Config, "policies.resources-fit.deadline: 0s is outside 1ms..=1m");
    assert_eq!(registry.current().number, 1, "nothing swapped");
    assert_eq!(registry.current().config.scheduler.profiles[0].filters, ["resources-fit", "zone-pin"]);

    // A policy update refused, then the file restored together with a new configuration: no error remains.
    volume.set("zone-pin.wasm", Some(b"not wasm".to_vec()));
    let report = registry.reload();
    assert!(report.errors.iter().any(|error| error.message.contains("zone-pin.wasm: not a WebAssembly binary")), "{report:?}");
    assert!(last_error(&registry, "zone-pin").is_some());
    volume.set("zone-pin.wasm", Some(east()));

    // A good one: new weights, a second profile, new settings for a loaded policy.
    volume.write_config(
        "scheduler:\n  profiles:\n  - {schedulerName: wasp, filters: [resources-fit, zone-pin], scores: [{policy: least-allocated, weight: 5}]}\n\
         \x20 - {schedulerName: other, filters: [misbehaving]}\npolicies: {misbehaving: {settings: {filter: ok}}}",
    );
    let report = registry.reload();
    assert!(report.errors.is_empty() && report.config_swapped, "{report:?}");
    assert_eq!(report.swapped, ["misbehaving"]);
    let generation = registry.current();
    assert_eq!(generation.number, 2);
    assert_eq!(generation.plans.scheduling["wasp"].scores[0].1, 5);
    assert!(generation.plans.scheduling.contains_key("other"));
    assert_eq!(registry.status().config_error, None);
    assert_eq!(last_error(&registry, "zone-pin"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_added_by_configuration_takes_pods_that_were_waiting_for_it() {
    let volume = PolicyVolume::new(west());
    let cluster = start_cluster(&volume).await;
    cluster.create_pods("early", 5, "batch").await;
    let waiting = || cluster.host.cluster.pending_pods().iter().filter(|pod| pod.scheduler_name == "batch").count();
    common::eventually("the informer to see the five pods", || waiting() == 5).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let unbound = pods.list(&ListParams::default()).await.unwrap().items.iter().filter(|pod| pod.spec.as_ref().unwrap().node_name.is_none()).count();
    assert_eq!(unbound, 5, "no profile is called batch yet");
    volume.write_config(&format!("{CONFIG}  - {{schedulerName: batch, filters: [resources-fit, zone-pin]}}\n"));
    let placed = cluster.bound(5).await;
    assert!(placed.values().all(|node| node.starts_with("west")));
    let body = get_policies(&cluster).await;
    assert!(body["profiles"].as_array().unwrap().iter().any(|profile| profile["schedulerName"] == "batch"), "{body}");
}

/// `/policies` as a user's HTTP client sees it.
async fn get_policies(cluster: &Cluster) -> serde_json::Value {
    let address = cluster.host.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (status, body) = common::http_get(address, "/policies").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_a_broken_policy_failed_are_placed_as_soon_as_a_fixed_version_serves() {
    let volume = PolicyVolume::new(east());
    let broken = "scheduler: {profiles: [{schedulerName: wasp, filters: [resources-fit, misbehaving]}]}\n\
                  policies: {misbehaving: {failureMode: fail-closed, settings: {filter: trap, only-with-label: batch}}}";
    volume.write_config(broken);
    let cluster = start_cluster(&volume).await;
    cluster.create_pods("waiting", 3, "wasp").await;
    cluster.failed_by("misbehaving", 3).await;
    let fixed_at = Instant::now();
    volume.write_config(&broken.replace("filter: trap", "filter: ok"));
    cluster.bound_batch("waiting", 3).await;
    assert!(fixed_at.elapsed() < Duration::from_secs(30), "placed {:?} after the fix, not after the 5-minute flush", fixed_at.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_runs_on_the_live_cluster_so_a_policy_cannot_tell_it_apart() {
    let volume = PolicyVolume::new(east());
    let cluster = start_cluster(&volume).await;
    cluster.create_pods("live", 2, "wasp").await;
    cluster.bound_batch("live", 2).await;
    // Misbehaves only on pods labelled `batch`, as every pod of this cluster is: the built-in sample has no such
    // pod, the live cluster does.
    let registry = cluster.host.policies.clone();
    volume.write_config(
        "scheduler: {profiles: [{schedulerName: wasp, filters: [resources-fit, zone-pin, misbehaving]}]}\n\
         policies: {misbehaving: {settings: {filter: trap, only-with-label: batch}}}",
    );
    common::eventually("the configuration to be refused", || registry.status().config_error.is_some()).await;
    let error = registry.status().config_error.unwrap();
    assert!(error.contains("canary filter call failed: filter trapped"), "{error}");
}

/// A team's signing key, its public half written into the volume's folder (as a mounted Secret would be).
struct TeamKey {
    signer: SigningKey,
    public_key: std::path::PathBuf,
}

impl TeamKey {
    fn new(volume: &PolicyVolume, name: &str) -> TeamKey {
        let (private, public) = signature::generate_key_pair(b"").unwrap();
        let public_key = volume.root.path().join(format!("{name}.pub"));
        std::fs::write(&public_key, public).unwrap();
        TeamKey { signer: SigningKey::decrypt(name, private.as_bytes(), b"").unwrap(), public_key }
    }

    fn sign(&self, component: &[u8]) -> Vec<u8> {
        self.signer.sign(component).unwrap().into_bytes()
    }

    /// Signs every component of the volume, and requires signatures by this key of every policy.
    fn sign_volume(&self, volume: &mut PolicyVolume) {
        let components: Vec<(String, Vec<u8>)> =
            volume.files.iter().filter(|(file, _)| file.ends_with(".wasm")).map(|(file, bytes)| (file.clone(), bytes.clone())).collect();
        for (file, bytes) in components {
            volume.files.insert(format!("{file}.sig"), self.sign(&bytes));
        }
        volume.policies.write(&volume.files);
        volume.write_config(&format!("verification: {{keys: [{}], require: true}}\n{CONFIG}", self.public_key.display()));
    }
}

fn signed_by(registry: &PolicyRegistry, policy: &str) -> Option<String> {
    registry.status().policies.into_iter().find(|status| status.name == policy).and_then(|status| status.signed_by)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_signatures_required_an_unsigned_or_wrongly_signed_update_is_refused_and_the_signed_version_keeps_deciding() {
    let mut volume = PolicyVolume::new(east());
    let team = TeamKey::new(&volume, "team");
    team.sign_volume(&mut volume);
    let cluster = start_cluster(&volume).await;
    let registry = cluster.host.policies.clone();
    let key = team.public_key.display().to_string();
    assert_eq!(signed_by(&registry, "zone-pin").as_deref(), Some(key.as_str()));

    // West, still with east's signature beside it: the signature does not check.
    volume.set("zone-pin.wasm", Some(west()));
    common::eventually("the wrongly signed update to be refused", || last_error(&registry, "zone-pin").is_some()).await;
    let error = last_error(&registry, "zone-pin").unwrap();
    assert!(error.contains("zone-pin.wasm: refused before it was compiled: its signature is not by any of the keys"), "{error}");
    assert!(error.contains(&key) && error.contains("keeps serving"), "{error}");
    // Garbage with no signature: refused for the signature, never compiled (that would say "does not compile").
    volume.set("zone-pin.wasm.sig", None);
    volume.set("zone-pin.wasm", Some(b"\0asm\x0d\0\x01\0 not a component".to_vec()));
    common::eventually("the unsigned update to be refused", || last_error(&registry, "zone-pin").is_some_and(|error| error.contains("it is not signed"))).await;
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()));
    cluster.create_pods("while-refused", 10, "wasp").await;
    assert!(cluster.bound(10).await.values().all(|node| node.starts_with("east")), "the signed version kept deciding");
    assert!(counter(&registry, "wasp_policy_reloads_total{result=\"failure\",reason=\"signature\"}") >= 2.0);
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    common::wait_for("a PolicyReloadFailed event naming the signature", Duration::from_secs(10), || async {
        let listed = events.list(&ListParams::default()).await.map_err(|error| error.to_string())?.items;
        let reasons: Vec<(Option<String>, Option<String>)> = listed.into_iter().map(|event| (event.reason, event.message)).collect();
        let found = reasons.iter().any(|(reason, message)| {
            reason.as_deref() == Some("PolicyReloadFailed") && message.as_deref().unwrap_or("").contains("refused before it was compiled")
        });
        if found {
            Ok(())
        } else {
            Err(format!("{reasons:?}"))
        }
    })
    .await;

    // West signed by the team: it serves.
    volume.set("zone-pin.wasm.sig", Some(team.sign(&west())));
    volume.set("zone-pin.wasm", Some(west()));
    common::eventually("the signed update to serve", || serving_digest(&registry, "zone-pin") == sha256(&west())).await;
    assert_eq!(last_error(&registry, "zone-pin"), None);
    cluster.create_pods("after-signed", 10, "wasp").await;
    let placed = cluster.bound(20).await;
    assert!(placed.iter().filter(|(pod, _)| pod.starts_with("after-signed")).all(|(_, node)| node.starts_with("west")));
}

/// A restarted host finds a file that does not compile in its policy directory (issue 58, item 4): it serves
/// every profile that does not use it, the profile that does answers by the failure mode with the reason, and
/// the first version that loads swaps in without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_started_beside_a_policy_that_does_not_compile_serves_the_rest_and_takes_its_first_good_version() {
    let mut volume = PolicyVolume::new(b"\0asm\x0d\0\x01\0 truncated component".to_vec());
    let two_profiles = format!("{CONFIG}  - schedulerName: plain\n    filters: [resources-fit]\n");
    volume.write_config(&two_profiles);
    let config = HostConfig::load(&volume.config_path()).unwrap();
    let (registry, refused) = PolicyRegistry::start(&Runtime::new(None).unwrap(), config, Some(volume.config_path())).expect("the host starts");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].reason, RefusalReason::InvalidPolicy);
    assert!(refused[0].message.contains("zone-pin.wasm: does not compile"), "{}", refused[0].message);
    let registry = Arc::new(registry);
    let scenario = Scenario::parse(TWO_ZONES).unwrap();
    let simulator = Simulator::start(&scenario, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = ApiClient::from_config(kube::Config::new(simulator.url().parse().unwrap())).unwrap();
    let host = Host::new(api.clone(), registry.clone(), HostIdentity::named("wasp-host", Some(ObjectRef::pod("default", "wasp-host", ""))));
    let watcher = host.watch_policies(fast_watch()).unwrap();
    let cluster = Cluster { _simulator: simulator, client: api.client, host: host.clone(), _watcher: watcher, _worker: tokio::spawn(host.clone().run_loops()) };

    let policies = get_policies(&cluster).await;
    let zone_pin = policies["policies"].as_array().unwrap().iter().find(|policy| policy["name"] == "zone-pin").unwrap().clone();
    assert_eq!(zone_pin["loaded"], false, "{zone_pin}");
    assert!(zone_pin["lastError"].as_str().unwrap().contains("does not compile"), "{zone_pin}");
    cluster.create_pods("plain", 10, "plain").await;
    cluster.bound_batch("plain", 10).await;
    cluster.create_pods("waiting", 3, "wasp").await;
    cluster.failed_by("zone-pin", 3).await;

    // A configuration change is taken beside the stand-in, which stays refused (its file is not compiled again).
    volume.write_config(&two_profiles.replace("weight: 1", "weight: 2"));
    common::eventually("the changed configuration to serve", || registry.current().number == 2).await;
    assert!(registry.current().policies["zone-pin"].refusal().is_some());
    assert!(last_error(&registry, "zone-pin").is_some_and(|error| error.contains("does not compile")), "the refusal stands");

    volume.set("zone-pin.wasm", Some(east()));
    common::eventually("the first good version to serve", || serving_digest(&registry, "zone-pin") == sha256(&east())).await;
    assert_eq!(last_error(&registry, "zone-pin"), None);
    cluster.bound_batch("waiting", 3).await;
    let placed = cluster.bound(13).await;
    assert!(placed.iter().filter(|(pod, _)| pod.starts_with("waiting")).all(|(_, node)| node.starts_with("east")), "{placed:?}");
}

#[test]
fn a_host_that_requires_signatures_does_not_start_with_an_unsigned_policy() {
    let mut volume = PolicyVolume::new(east());
    let team = TeamKey::new(&volume, "team");
    team.sign_volume(&mut volume);
    volume.set("zone-pin.wasm.sig", None);
    let config = HostConfig::load(&volume.config_path()).unwrap();
    let error = PolicyRegistry::new(&Runtime::new(None).unwrap(), config, Some(volume.config_path())).err().expect("refused");
    let message = format!("{error:#}");
    assert!(message.contains("zone-pin.wasm: refused before it was compiled: it is not signed (no .wasm.sig file)"), "{message}");
}

#[test]
fn a_rotated_key_checks_every_signature_again_and_without_require_only_a_bad_signature_is_refused() {
    let mut volume = PolicyVolume::new(east());
    let team = TeamKey::new(&volume, "team");
    team.sign_volume(&mut volume);
    let registry = volume.registry();
    // The Secret now holds another key: the signatures by the old one no longer check; what serves stays.
    let (_, other_public) = signature::generate_key_pair(b"").unwrap();
    std::fs::write(&team.public_key, other_public).unwrap();
    let report = registry.reload();
    assert!(!report.unchanged, "a changed key is a change");
    assert_eq!(report.errors.len(), 3, "every policy the configuration names checked again: {report:?}");
    assert!(report.errors.iter().all(|refusal| refusal.reason == RefusalReason::Signature), "{report:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&east()));

    // Without require, an unsigned component is taken (shown unsigned); a signature that is there must check.
    volume.write_config(&format!("verification: {{keys: [{}]}}\n{CONFIG}", team.public_key.display()));
    volume.set("zone-pin.wasm.sig", None);
    volume.set("zone-pin.wasm", Some(west()));
    let report = registry.reload();
    assert!(!report.config_swapped, "a configuration is taken as a whole, or not: {report:?}");
    let by_old_key = report
        .errors
        .iter()
        .find(|refusal| refusal.message.contains("resources-fit.wasm: refused before it was compiled: its signature is not by any of the keys"));
    assert!(by_old_key.is_some(), "the policies signed by the old key are refused: {report:?}");
    volume.set("resources-fit.wasm.sig", None);
    volume.set("least-allocated.wasm.sig", None);
    let report = registry.reload();
    assert!(report.errors.is_empty() && report.config_swapped, "{report:?}");
    assert_eq!(serving_digest(&registry, "zone-pin"), sha256(&west()));
    assert_eq!(signed_by(&registry, "zone-pin"), None, "served unsigned");
}
