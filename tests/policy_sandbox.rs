//! Bad input and misbehaving policies: every case gives a clear error naming the file or policy and the reason,
//! and the host goes on serving.

mod common;

use common::*;
use std::time::{Duration, Instant};
use wasp::policy::{FailureMode, LoadedPolicy, PolicyOptions};
use wasp::runtime::{CallError, Limits};

fn load_error(wasm: &[u8]) -> String {
    let runtime = runtime();
    match LoadedPolicy::load(&runtime, "policies/broken.wasm", wasm, PolicyOptions::default()) {
        Ok(_) => panic!("loading should fail"),
        Err(error) => {
            assert_eq!(error.origin, "policies/broken.wasm");
            error.to_string()
        }
    }
}

#[test]
fn garbage_empty_and_core_modules_are_refused_by_name() {
    assert_eq!(load_error(b""), "policy policies/broken.wasm: the file is empty");
    assert!(load_error(b"#!/bin/sh\necho hi\n").contains("not a WebAssembly binary"));
    let core_module = wat::parse_str("(module (func (export \"filter\")))").unwrap();
    assert!(load_error(&core_module).contains("core WebAssembly module, not a component"));
    let truncated = &policy_wasm("resources-fit").1[..1000];
    assert!(load_error(truncated).contains("does not compile"), "{}", load_error(truncated));
}

#[test]
fn components_that_are_not_policies_are_refused() {
    let empty = wat::parse_str("(component)").unwrap();
    let error = load_error(&empty);
    assert!(error.contains("not a wasp policy: it exports none of the wasp:policy interfaces"), "{error}");

    let partial = wat::parse_str(r#"(component (instance $i) (export "wasp:policy/policy@0.10.0" (instance $i)))"#).unwrap();
    let error = load_error(&partial);
    assert!(error.contains("missing exports: wasp:policy/filter@0.10.0, wasp:policy/score@0.10.0"), "{error}");
}

#[test]
fn wrong_contract_version_names_both_versions() {
    let older = wat::parse_str(r#"(component (instance $i) (export "wasp:policy/policy@0.1.0" (instance $i)))"#).unwrap();
    let error = load_error(&older);
    assert!(error.contains("built against contract wasp:policy@0.1.0, this host implements wasp:policy@0.10.0"), "{error}");
}

#[test]
fn settings_that_fail_validation_are_refused_with_the_reason() {
    let runtime = runtime();
    let (source, wasm) = policy_wasm("resources-fit");
    let options = PolicyOptions { settings: r#"{"ignoredResourceGroups": ["a/b"]}"#.into(), ..Default::default() };
    let error = LoadedPolicy::load(&runtime, &source, &wasm, options).err().unwrap().to_string();
    assert!(error.contains("resources-fit.wasm: settings rejected: invalid settings for resources-fit: ignoredResourceGroups"), "{error}");
    let options = PolicyOptions { settings: "{not json".into(), ..Default::default() };
    let error = LoadedPolicy::load(&runtime, &source, &wasm, options).err().unwrap().to_string();
    assert!(error.contains("settings rejected: invalid settings for resources-fit: key must be a string"), "{error}");
    // Another policy's file under this name: said as such before its settings are tried.
    let options = PolicyOptions { settings: r#"{"preferredZone": "a"}"#.into(), ..Default::default() };
    let error = LoadedPolicy::load_as(&runtime, "prefer-zone.wasm", &wasm, options, Some("prefer-zone")).err().unwrap();
    assert!(error.name_mismatch);
    assert_eq!(error.to_string(), r#"policy prefer-zone.wasm: the component calls itself "resources-fit", but the file name loads it as "prefer-zone""#);
    // A value of the wrong type names its field, not only a column.
    let options = PolicyOptions { settings: r#"{"ignoredResources": 3}"#.into(), ..Default::default() };
    let error = LoadedPolicy::load(&runtime, &source, &wasm, options).err().unwrap().to_string();
    assert!(error.contains("invalid settings for resources-fit: ignoredResources: invalid type: integer `3`, expected a sequence"), "{error}");
}

fn misbehaving(settings: &str, failure_mode: FailureMode) -> LoadedPolicy {
    misbehaving_within(settings, failure_mode, Limits::uniform(Duration::from_millis(50), 32 << 20))
}

fn misbehaving_within(settings: &str, failure_mode: FailureMode, limits: Limits) -> LoadedPolicy {
    let runtime = runtime();
    let (source, wasm) = fixture_wasm("misbehaving");
    LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions { settings: settings.into(), limits, failure_mode }).unwrap_or_else(|error| panic!("{error}"))
}

fn two_node_cluster() -> (wasp::cluster::ClusterState, Vec<u32>) {
    let cluster = cluster_of(vec![simple_node("n1", "4", "8Gi", ""), simple_node("n2", "4", "8Gi", "")]);
    let ids = cluster.node_ids();
    (cluster, ids)
}

#[test]
fn an_endless_loop_is_interrupted_at_the_deadline_and_the_instance_replaced() {
    let policy = misbehaving(r#"{"filter": "loop"}"#, FailureMode::FailClosed);
    let (cluster, ids) = two_node_cluster();
    let pod = simple_pod("p", "100m", "");
    let started = Instant::now();
    let error = policy.filter(&cluster, &pod, &ids).unwrap_err();
    assert_eq!(error, CallError::Timeout { operation: "filter", deadline_ms: 50 });
    assert!(started.elapsed() < Duration::from_secs(5), "the host must not stall: {:?}", started.elapsed());
    assert_eq!(policy.idle_instances(), 0, "the interrupted instance is thrown away");
    // The next call gets a fresh instance and fails the same bounded way: the host keeps serving.
    assert!(matches!(policy.filter(&cluster, &pod, &ids), Err(CallError::Timeout { .. })));
    let verdicts = policy.filter_or_failure_mode(&cluster, &pod, &ids);
    assert_eq!(reasons(&verdicts), vec!["policy misbehaving failed"; 2], "fail-closed rejects every node");
}

#[test]
fn unbounded_allocation_hits_the_memory_cap() {
    // A deadline far beyond the time filling 32 MiB takes, even on a busy machine: the cap must be what stops it.
    let policy = misbehaving_within(r#"{"filter": "alloc"}"#, FailureMode::FailOpen, Limits::uniform(Duration::from_secs(10), 32 << 20));
    let (cluster, ids) = two_node_cluster();
    let pod = simple_pod("p", "100m", "");
    let error = policy.filter(&cluster, &pod, &ids).unwrap_err();
    assert_eq!(error, CallError::OutOfMemory { operation: "filter", limit_mib: 32 });
    let verdicts = policy.filter_or_failure_mode(&cluster, &pod, &ids);
    assert_eq!(verdicts.verdicts, vec![0, 0], "fail-open skips the policy");
}

#[test]
fn an_instance_that_cannot_follow_the_changes_is_replaced_by_a_fresh_sync_and_the_call_goes_on() {
    let policy = misbehaving(r#"{"trap-in-apply": true}"#, FailureMode::FailClosed);
    let (mut cluster, ids) = two_node_cluster();
    let pod = simple_pod("p", "100m", "");
    assert_eq!(policy.filter(&cluster, &pod, &ids).unwrap().verdicts, [0, 0]);
    assert_eq!(policy.idle_instances(), 1);
    for round in 0..3 {
        // The pooled instance traps on this pod's arrival; a fresh one gets it in a snapshot and answers.
        cluster.upsert_pod(simple_pod(&format!("m{round}"), "100m", "misbehave=yes"), "n1");
        let answer = policy.filter(&cluster, &pod, &ids);
        assert_eq!(answer.map(|result| result.verdicts), Ok(vec![0, 0]), "round {round}");
        assert_eq!(policy.idle_instances(), 1, "the instance that failed is gone, its place taken by the fresh one");
    }
}

#[test]
fn a_trap_is_reported_and_the_next_instance_is_fresh() {
    let policy = misbehaving(r#"{"filter": "trap"}"#, FailureMode::FailClosed);
    let (cluster, ids) = two_node_cluster();
    let error = policy.filter(&cluster, &simple_pod("p", "100m", ""), &ids).unwrap_err();
    match &error {
        CallError::Trap { operation: "filter", message } => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    assert!(error.poisons_instance());
    assert_eq!(policy.idle_instances(), 0, "the trapped instance was discarded, not pooled");
    // The next call runs on a fresh instance, which traps the same way instead of reporting a poisoned one.
    let again = policy.filter(&cluster, &simple_pod("p", "100m", ""), &ids).unwrap_err();
    assert!(matches!(&again, CallError::Trap { message, .. } if message.contains("unreachable")), "{again:?}");
}

#[test]
fn a_policy_that_sleeps_is_refused_at_once_not_waited_for() {
    let policy = misbehaving(r#"{"filter": "sleep"}"#, FailureMode::FailClosed);
    let (cluster, ids) = two_node_cluster();
    let started = Instant::now();
    let error = policy.filter(&cluster, &simple_pod("p", "100m", ""), &ids).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "the 60 s sleep was not waited for: {:?}", started.elapsed());
    match &error {
        CallError::Trap { operation: "filter", message } => assert!(message.contains("policies may not wait"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Sleeping before answering `configure` fails the load, naming the file, instead of hanging it.
    let (source, wasm) = fixture_wasm("misbehaving");
    let started = Instant::now();
    let options = PolicyOptions { settings: r#"{"sleep-in-configure": true}"#.into(), ..Default::default() };
    let error = LoadedPolicy::load(&runtime(), &source, &wasm, options).err().unwrap().to_string();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.contains("misbehaving.wasm") && error.contains("policies may not wait"), "{error}");
}

#[test]
fn malformed_answers_are_rejected_without_poisoning() {
    let (cluster, ids) = two_node_cluster();
    let pod = simple_pod("p", "100m", "");
    let short = misbehaving(r#"{"filter": "short"}"#, FailureMode::FailClosed);
    assert_eq!(short.filter(&cluster, &pod, &ids).unwrap_err().to_string(), "malformed answer from filter: 1 verdicts for 2 candidate nodes");
    assert_eq!(short.idle_instances(), 1, "a malformed answer does not make the instance suspect");
    let bad_code = misbehaving(r#"{"filter": "bad-code"}"#, FailureMode::FailClosed);
    assert!(bad_code.filter(&cluster, &pod, &ids).unwrap_err().to_string().contains("names a rejection that does not exist"));
    let empty = misbehaving(r#"{"filter": "empty-reason"}"#, FailureMode::FailClosed);
    assert_eq!(empty.filter(&cluster, &pod, &ids).unwrap_err().to_string(), "malformed answer from filter: an empty rejection reason");
    let scores = misbehaving(r#"{"score": "short"}"#, FailureMode::FailClosed);
    assert_eq!(scores.score(&cluster, &pod, &ids).unwrap_err().to_string(), "malformed answer from score: 3 scores for 2 candidate nodes");
    let range = misbehaving(r#"{"score": "out-of-range"}"#, FailureMode::FailClosed);
    assert_eq!(range.score(&cluster, &pod, &ids).unwrap_err().to_string(), "malformed answer from score: score 101 is outside 0..=100");
    assert_eq!(range.score_or_failure_mode(&cluster, &pod, &ids), vec![0, 0], "a failed score contributes nothing");
}

#[test]
fn each_call_decides_for_the_pod_as_it_is_now_though_an_unchanged_pod_is_not_sent_again() {
    // Misbehaves (an answer the host refuses, which keeps the instance) only for pods labelled `canary`: one
    // instance answers every call below, and the host sends it the subject only when the record changed.
    let policy = misbehaving(r#"{"filter": "bad-code", "only-with-label": "canary"}"#, FailureMode::FailClosed);
    let (cluster, ids) = two_node_cluster();
    let plain = simple_pod("p", "100m", "");
    let canary = simple_pod("p", "100m", "canary=yes");
    assert_eq!(policy.filter(&cluster, &plain, &ids).unwrap().verdicts, [0, 0]);
    assert_eq!(policy.score(&cluster, &plain, &ids).unwrap(), [50, 50]);
    assert_eq!(policy.filter(&cluster, &plain, &ids).unwrap().verdicts, [0, 0], "the same pod's next chunk");
    // The same pod (name, uid) with one label more is a new record: the guest must see it.
    assert!(policy.filter(&cluster, &canary, &ids).unwrap_err().to_string().contains("names a rejection that does not exist"));
    assert_eq!(policy.filter(&cluster, &plain, &ids).unwrap().verdicts, [0, 0], "and the earlier record again");
    assert_eq!(policy.idle_instances(), 1, "one instance answered every call");
}

#[test]
fn a_well_behaved_call_after_many_failures_still_works() {
    let runtime = runtime();
    let (source, wasm) = fixture_wasm("misbehaving");
    let limits = Limits::uniform(Duration::from_millis(20), 16 << 20);
    let bad = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions { settings: r#"{"filter": "trap"}"#.into(), limits, ..Default::default() }).unwrap();
    let good = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions { settings: r#"{"print": 3}"#.into(), limits, ..Default::default() }).unwrap();
    let (cluster, ids) = two_node_cluster();
    let pod = simple_pod("p", "100m", "");
    for _ in 0..20 {
        assert!(bad.filter(&cluster, &pod, &ids).is_err());
    }
    assert_eq!(good.filter(&cluster, &pod, &ids).unwrap().verdicts, vec![0, 0]);
}

#[test]
fn settings_rejected_by_the_guest_name_the_policy() {
    let runtime = runtime();
    let (source, wasm) = fixture_wasm("misbehaving");
    let options = PolicyOptions { settings: r#"{"reject-settings": true}"#.into(), ..Default::default() };
    let error = LoadedPolicy::load(&runtime, &source, &wasm, options).err().unwrap().to_string();
    assert!(error.ends_with("misbehaving.wasm: settings rejected: invalid settings for misbehaving: reject-settings: asked to reject"), "{error}");
}

#[test]
fn the_guest_has_no_environment_filesystem_network_clock_or_randomness() {
    let policy = misbehaving(r#"{"filter": "probe-sandbox"}"#, FailureMode::FailClosed);
    let (cluster, ids) = two_node_cluster();
    let result = policy.filter(&cluster, &simple_pod("p", "100m", ""), &ids).unwrap();
    let report = reasons(&result)[0].clone();
    assert!(report.starts_with("env=0 fs=denied net=denied clock=0 waited=0 hash="), "{report}");
    // A fresh instance of another load sees the same: nothing but its input varies.
    let again = misbehaving(r#"{"filter": "probe-sandbox"}"#, FailureMode::FailOpen);
    assert_eq!(reasons(&again.filter(&cluster, &simple_pod("p", "100m", ""), &ids).unwrap())[0], report);
}

#[test]
fn compiled_artifacts_are_reused_from_disk_and_rebuilt_when_corrupt() {
    use wasp::runtime::{CacheOutcome, Runtime};
    let directory = tempfile::tempdir().unwrap();
    let (source, wasm) = policy_wasm("node-unschedulable");
    let load_with_fresh_runtime = || {
        let runtime = Runtime::new(Some(directory.path().to_path_buf())).unwrap();
        let policy = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions::default()).unwrap();
        let (cluster, ids) = two_node_cluster();
        assert_eq!(policy.filter(&cluster, &simple_pod("p", "1", ""), &ids).unwrap().verdicts, vec![0, 0]);
        policy.cache
    };
    assert_eq!(load_with_fresh_runtime(), CacheOutcome::Compiled);
    assert_eq!(load_with_fresh_runtime(), CacheOutcome::Disk, "a restart skips compilation");
    let artifacts: Vec<_> = std::fs::read_dir(directory.path()).unwrap().map(|entry| entry.unwrap().path()).collect();
    assert_eq!(artifacts.len(), 1);
    let name = artifacts[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&policy_digest(&wasm)), "keyed by content digest: {name}");
    std::fs::write(&artifacts[0], b"garbage").unwrap();
    assert_eq!(load_with_fresh_runtime(), CacheOutcome::Compiled, "a corrupt artifact is rebuilt, not trusted");
    assert_eq!(load_with_fresh_runtime(), CacheOutcome::Disk);

    let runtime = Runtime::new(Some(directory.path().to_path_buf())).unwrap();
    let first = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions::default()).unwrap();
    let second = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions::default()).unwrap();
    assert_eq!((first.cache, second.cache), (CacheOutcome::Disk, CacheOutcome::Memory));
    // Two versions that differ only in settings share the component: dropping one keeps it for the other.
    drop(first);
    let third = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions::default()).unwrap();
    assert_eq!(third.cache, CacheOutcome::Memory, "still in memory while `second` serves");
    drop((second, third));
    let fourth = LoadedPolicy::load(&runtime, &source, &wasm, PolicyOptions::default()).unwrap();
    assert_eq!(fourth.cache, CacheOutcome::Disk, "the last user gone, memory let it go");
}

#[test]
fn one_pool_answers_on_the_live_state_and_a_what_if_fork_alternately() {
    let policy = load(&runtime(), "resources-fit", "");
    let mut live = cluster_of(vec![simple_node("n", "4", "8Gi", "")]);
    live.upsert_pod(simple_pod("busy", "3", ""), "n");
    let mut without_busy = live.fork();
    without_busy.remove_pod("uid-busy");
    let pod = simple_pod("p", "2", "");
    let ids = live.node_ids();
    for round in 0..3 {
        let on_live = policy.filter(&live, &pod, &ids).unwrap();
        assert_eq!(reasons(&on_live), ["Insufficient cpu"], "round {round}: 3 of 4 CPU are taken on the live state");
        let on_fork = policy.filter(&without_busy, &pod, &ids).unwrap();
        assert_eq!(reasons(&on_fork), [""], "round {round}: the fork has room");
        // The live state moves on between questions.
        live.upsert_pod(simple_pod(&format!("tiny-{round}"), "10m", ""), "n");
    }
    assert_eq!(policy.idle_instances(), 1, "one instance answered every call, resynced when the state changed");
}

fn policy_digest(wasm: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(wasm))
}

/// A component made to keep the compiler busy: `size` values live across `size` blocks, quadratic work and
/// memory in register allocation (3000: ~1.5 s and ~360 MB; 6000: ~6 s and ~1.4 GB), in under 200 KB.
fn compile_bomb(size: usize) -> Vec<u8> {
    let mut body: Vec<String> = (1..=size).map(|local| format!("local.get 0 i32.const {local} i32.add local.set {local}")).collect();
    body.extend((0..size).map(|block| format!("block local.get 0 br_if 0 local.get 0 i32.const {block} i32.xor local.set 0 end")));
    body.push("local.get 1".into());
    body.extend((2..=size).map(|local| format!("local.get {local} i32.add")));
    let locals = vec!["i32"; size].join(" ");
    wat::parse_str(format!("(component (core module (func (export \"f\") (param i32) (result i32) (local {locals}) {})))", body.join(" "))).unwrap()
}

#[test]
fn a_compile_bomb_costs_the_compiling_child_not_the_host_and_its_digest_is_refused_from_then_on() {
    use wasp::runtime::{CompileLimits, Compiler, Runtime};
    let cache = tempfile::tempdir().unwrap();
    let isolated = |limits: CompileLimits| {
        Runtime::with_compiler(Some(cache.path().to_path_buf()), Compiler::Isolated { program: env!("CARGO_BIN_EXE_wasp").into(), limits }).unwrap()
    };
    let load = |runtime: &std::sync::Arc<Runtime>, source: &str, wasm: &[u8]| {
        LoadedPolicy::load(runtime, source, wasm, PolicyOptions::default()).map(|_| ()).map_err(|error| error.to_string())
    };
    let limits = CompileLimits { memory_bytes: 256 << 20, cpu_time: Duration::from_secs(60) };
    let runtime = isolated(limits);
    // An ordinary policy compiles in the child and loads in the serving engine.
    let (source, wasm) = policy_wasm("inter-pod-affinity");
    load(&runtime, &source, &wasm).unwrap();
    // Past the memory limit: the child dies, the host says why.
    let bomb = compile_bomb(3000);
    let error = load(&runtime, "policies/bomb.wasm", &bomb).unwrap_err();
    assert!(error.contains("policies/bomb.wasm") && error.contains("compiling needed more than 256 MiB: refused"), "{error}");
    // A restart (a new runtime on the same cache directory, the same limits) refuses it without compiling.
    let error = load(&isolated(limits), "policies/bomb.wasm", &bomb).unwrap_err();
    assert!(error.contains("compiling needed more than 256 MiB: refused (remembered from an earlier compile of this file)"), "{error}");
    // Past the CPU limit: killed at it.
    let slow = compile_bomb(6000);
    let started = Instant::now();
    let error = load(&isolated(CompileLimits { memory_bytes: 8 << 30, cpu_time: Duration::from_secs(1) }), "policies/slow.wasm", &slow).unwrap_err();
    assert!(error.contains("compiling used more than 1s of CPU: refused"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5), "refused after {:?}", started.elapsed());
}
