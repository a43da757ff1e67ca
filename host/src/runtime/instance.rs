//! One sandboxed instance of a policy component: its own store, memory cap, deadline and WASI context with no
//! capabilities. A call that traps, runs out of time or out of memory poisons the instance: its state is suspect,
//! so it is thrown away and the caller builds a fresh one.

use super::answers::{
    answer_bytes, check_label_keys, check_texts, guest_error, truncate, validate_filter_result, validate_scale_decision, validate_scores,
    MAX_PROPOSAL_TEXT_BYTES, MAX_REASON_BYTES,
};
use super::guest_memory::GuestMemory;
use super::guest_output::GuestOutput;
use super::{Limits, Runtime};
use crate::contract::types::{self, ClusterDelta, Descriptor, Eviction, FilterResult, Pod, PodPlace, ScaleDecision, ScaleRequest};
use crate::contract::{encode_deltas, EvictContext, PolicyComponent, PolicyComponentPre};
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// What a guest may observe is its input, nothing else: a policy that read the time or real randomness could pass
/// its canary and decide differently afterwards, or differently on every call. Guests see clocks stopped at the
/// Unix epoch (wall) and at zero (monotonic), and random numbers from a fixed seed. The time a decision needs
/// belongs in the call's input.
struct StoppedClock;

/// Pods per `apply` call when a propose call's pending and failed pods are sent.
const PODS_PER_APPLY: usize = 512;

impl wasmtime_wasi::HostWallClock for StoppedClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(1)
    }

    fn now(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        0
    }
}

const RANDOM_SEED: u64 = 0x7761_7370;

pub struct InstanceState {
    wasi: WasiCtx,
    table: ResourceTable,
    budget: MemoryBudget,
}

/// What a table element costs the host (a function reference is a pointer).
const TABLE_ELEMENT_BYTES: usize = 8;

/// One cap over all of an instance's linear memories and tables together: a component may declare several
/// memories and grow tables, and a cap per memory would let it take many times `memoryMib`. What it holds also
/// counts against the host's [`GuestMemory`] budget, shared by every instance.
struct MemoryBudget {
    limit: usize,
    used: usize,
    host: Arc<GuestMemory>,
    /// The policy's bytes over all its instances (`wasp_policy_memory_bytes`); this instance's part leaves it
    /// when the instance is dropped.
    in_use: Gauge,
    /// Set when a growth was refused, so the failure is reported as out of memory whatever the guest does next.
    exhausted: Option<Exhausted>,
}

/// Which bound refused a growth.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Exhausted {
    /// The instance's own cap (`memoryMib`).
    Instance,
    /// The host's budget for all instances together, in bytes.
    Host(usize),
}

impl MemoryBudget {
    fn new(limit: usize, host: Arc<GuestMemory>, in_use: Gauge) -> MemoryBudget {
        MemoryBudget { limit, used: 0, host, in_use, exhausted: None }
    }

    fn grow(&mut self, bytes: usize) -> wasmtime::Result<bool> {
        let Some(total) = self.used.checked_add(bytes).filter(|total| *total <= self.limit) else {
            self.exhausted = Some(Exhausted::Instance);
            return Err(wasmtime::Error::msg(format!("out of memory: growing by {bytes} bytes would pass the instance's cap of {} bytes", self.limit)));
        };
        if !self.host.take(bytes) {
            let budget = self.host.budget().unwrap_or(usize::MAX);
            self.exhausted = Some(Exhausted::Host(budget));
            return Err(wasmtime::Error::msg(format!(
                "out of memory: growing by {bytes} bytes would pass the host's budget of {budget} bytes for all policies"
            )));
        }
        self.used = total;
        self.in_use.inc_by(bytes as i64);
        Ok(true)
    }
}

impl Drop for MemoryBudget {
    fn drop(&mut self) {
        self.in_use.dec_by(self.used as i64);
        self.host.give_back(self.used);
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current))
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current).saturating_mul(TABLE_ELEMENT_BYTES))
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum CallError {
    #[error("{operation} exceeded its deadline of {deadline_ms} ms and was interrupted")]
    Timeout { operation: &'static str, deadline_ms: u128 },
    #[error("{operation} ran out of memory (limit {limit_mib} MiB)")]
    OutOfMemory { operation: &'static str, limit_mib: usize },
    /// The instance was within its cap, but all policies' instances together hold the host's budget.
    #[error("{operation} ran out of memory: all policies together hold the host's guest memory budget of {budget_mib} MiB")]
    HostOutOfMemory { operation: &'static str, budget_mib: usize },
    #[error("{operation} trapped: {message}")]
    Trap { operation: &'static str, message: String },
    /// The policy answered with an error of its own.
    #[error("{0}")]
    Guest(String),
    /// The policy answered, but the answer breaks the contract.
    #[error("malformed answer from {operation}: {message}")]
    Malformed { operation: &'static str, message: String },
    /// The policy could not read what the host sent it: its records are another contract's. The instance is
    /// discarded (what it holds may be partly applied).
    #[error("{operation}: the policy could not read what the host sent: {message}")]
    Undecodable { operation: &'static str, message: String },
    #[error("could not instantiate: {0}")]
    Instantiate(String),
    /// Not called: no version of the policy has loaded since the host started.
    #[error("no version of it has loaded since the host started: {0}")]
    NotLoaded(String),
    /// Not called: the policy's circuit breaker is open after failures in a row.
    #[error("{operation} not called: the policy failed {failures} calls in a row and is out of calls for {retry_in_seconds} s more (circuit breaker)")]
    CircuitOpen { operation: &'static str, failures: u32, retry_in_seconds: u64 },
}

impl CallError {
    /// Whether the instance that produced this error must be discarded.
    pub fn poisons_instance(&self) -> bool {
        !matches!(self, CallError::Guest(_) | CallError::Malformed { .. } | CallError::CircuitOpen { .. })
    }
}

pub struct PolicyInstance {
    store: Store<InstanceState>,
    bindings: PolicyComponent,
    limits: Limits,
    poisoned: bool,
    /// The subject pod the guest holds (the last one sent). A pod's calls come in runs (its filter over each chunk
    /// of nodes, then its score), mostly on one instance: an equal record is not lowered into the guest again
    /// (every string and list of it an allocation made by a call into the guest).
    subject: Option<Pod>,
}

impl PolicyInstance {
    pub fn instantiate(
        runtime: &Runtime,
        pre: &PolicyComponentPre<InstanceState>,
        policy: &Arc<str>,
        limits: Limits,
        memory_in_use: &Gauge,
    ) -> Result<Self, CallError> {
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestOutput::new(policy.clone(), "stdout"))
            .stderr(GuestOutput::new(policy.clone(), "stderr"))
            .wall_clock(StoppedClock)
            .monotonic_clock(StoppedClock)
            .secure_random(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(RANDOM_SEED))
            .insecure_random(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(RANDOM_SEED))
            .insecure_random_seed(u128::from(RANDOM_SEED))
            .build();
        let budget = MemoryBudget::new(limits.memory_bytes, runtime.guest_memory().clone(), memory_in_use.clone());
        let mut store = Store::new(runtime.engine(), InstanceState { wasi, table: ResourceTable::new(), budget });
        store.limiter(|state| &mut state.budget);
        store.set_epoch_deadline(Runtime::deadline_ticks(limits.deadline_of("instantiate")));
        let bindings = pre.instantiate(&mut store).map_err(|error| match classify("instantiate", &limits, store.data().budget.exhausted, error) {
            CallError::Trap { message, .. } => CallError::Instantiate(message),
            other => other,
        })?;
        Ok(PolicyInstance { store, bindings, limits, poisoned: false, subject: None })
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Calls into the guest within the operation's deadline, letting wasmtime copy at most `answer_bytes` of the
    /// answer into the host (see [`answer_bytes`]).
    fn call<R>(
        &mut self,
        operation: &'static str,
        answer_bytes: usize,
        body: impl FnOnce(&PolicyComponent, &mut Store<InstanceState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        if self.poisoned {
            return Err(CallError::Trap { operation, message: "instance was poisoned by an earlier failure".into() });
        }
        self.store.set_epoch_deadline(Runtime::deadline_ticks(self.limits.deadline_of(operation)));
        self.store.set_hostcall_fuel(answer_bytes);
        body(&self.bindings, &mut self.store).map_err(|error| {
            // Also when the answer was too large to lift: the guest's post-return (which frees the answer) did
            // not run, so the instance cannot be called again.
            self.poisoned = true;
            if answer_bytes::exhausted(&error) {
                return CallError::Malformed { operation, message: format!("an answer of more than {answer_bytes} bytes, refused before it was copied") };
            }
            classify(operation, &self.limits, self.store.data().budget.exhausted, error)
        })
    }

    pub fn describe(&mut self) -> Result<Descriptor, CallError> {
        self.call("describe", answer_bytes::SMALL, |bindings, store| bindings.wasp_policy_policy().call_describe(store))
    }

    /// Answers the label keys the settings name (kept by views with `selected` labels).
    pub fn configure(&mut self, settings: &str) -> Result<Vec<String>, CallError> {
        let keys = self
            .call("configure", answer_bytes::SMALL, |bindings, store| bindings.wasp_policy_policy().call_configure(store, settings))?
            .map_err(guest_error)?;
        check_label_keys(&keys)?;
        Ok(keys)
    }

    pub fn apply(&mut self, deltas: &[ClusterDelta]) -> Result<(), CallError> {
        // "Forget everything", in the contract's words: the subject too.
        if deltas.iter().any(|delta| matches!(delta, ClusterDelta::Reset)) {
            self.subject = None;
        }
        let encoded = encode_deltas(deltas);
        let applied = self.call("apply", answer_bytes::SMALL, |bindings, store| bindings.wasp_policy_policy().call_apply(store, &encoded))?;
        // The guest could not decode them (another contract's records): what it holds may be partly applied
        // (a chunk of an evict context's pods), so the instance is not used again.
        applied.map_err(|message| {
            self.poisoned = true;
            CallError::Undecodable { operation: "apply", message: truncate(message, MAX_REASON_BYTES) }
        })
    }

    /// Sends the pod the next filter or score call decides for, unless the guest holds an equal record already.
    fn send_subject(&mut self, pod: &Pod) -> Result<(), CallError> {
        if self.subject.as_ref() == Some(pod) {
            return Ok(());
        }
        self.subject = None;
        let sent = [ClusterDelta::PodUpsert((0, PodPlace::Subject, pod.clone()))];
        self.apply(&sent)?;
        let [ClusterDelta::PodUpsert((_, _, kept))] = sent else { unreachable!("one pod upsert was sent") };
        self.subject = Some(kept);
        Ok(())
    }

    pub fn filter(&mut self, pod: &Pod, candidates: &[u32]) -> Result<FilterResult, CallError> {
        self.send_subject(pod)?;
        let result = self
            .call("filter", answer_bytes::filter(candidates.len()), |bindings, store| bindings.wasp_policy_filter().call_filter(store, candidates))?
            .map_err(guest_error)?;
        validate_filter_result(&result, candidates.len())?;
        Ok(result)
    }

    pub fn score(&mut self, pod: &Pod, candidates: &[u32]) -> Result<Vec<u32>, CallError> {
        self.send_subject(pod)?;
        let scores = self
            .call("score", answer_bytes::score(candidates.len()), |bindings, store| bindings.wasp_policy_score().call_score(store, candidates))?
            .map_err(guest_error)?;
        validate_scores(&scores, candidates.len())?;
        Ok(scores)
    }

    /// Evictions proposed among `pods` pods (those the instance follows, and the context's failed ones).
    pub fn propose(&mut self, context: &EvictContext, pods: usize) -> Result<Vec<Eviction>, CallError> {
        // Pending pods may be many: in chunks, each call well inside the deadline.
        for chunk in context.deltas().chunks(PODS_PER_APPLY) {
            self.apply(chunk)?;
        }
        let call = types::EvictContext { now: context.now };
        let evictions = self
            .call("propose", answer_bytes::propose(pods), |bindings, store| bindings.wasp_policy_evict().call_propose(store, call))?
            .map_err(guest_error)?;
        check_texts("propose", MAX_PROPOSAL_TEXT_BYTES, evictions.iter().map(|eviction| eviction.reason.as_str()))?;
        Ok(evictions)
    }

    pub fn recommend(&mut self, request: &ScaleRequest) -> Result<ScaleDecision, CallError> {
        let decision = self
            .call("recommend", answer_bytes::recommend(request.metrics.len(), request.containers.len()), |bindings, store| {
                bindings.wasp_policy_scale().call_recommend(store, request)
            })?
            .map_err(guest_error)?;
        validate_scale_decision(&decision, request)?;
        Ok(decision)
    }
}

fn classify(operation: &'static str, limits: &Limits, exhausted: Option<Exhausted>, error: wasmtime::Error) -> CallError {
    if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return CallError::Timeout { operation, deadline_ms: limits.deadline_of(operation).as_millis() };
    }
    match exhausted {
        Some(Exhausted::Instance) => return CallError::OutOfMemory { operation, limit_mib: limits.memory_bytes >> 20 },
        Some(Exhausted::Host(budget)) => return CallError::HostOutOfMemory { operation, budget_mib: budget >> 20 },
        None => {}
    }
    let message = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    CallError::Trap { operation, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instantiate(wat: &str, limit: usize) -> (wasmtime::Result<()>, bool) {
        let (result, exhausted) = instantiate_within(wat, limit, &Arc::default());
        (result, exhausted == Some(Exhausted::Instance))
    }

    fn instantiate_within(wat: &str, limit: usize, host: &Arc<GuestMemory>) -> (wasmtime::Result<()>, Option<Exhausted>) {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
        let mut store = Store::new(&engine, MemoryBudget::new(limit, host.clone(), Gauge::default()));
        store.limiter(|budget| budget);
        let result = wasmtime::Instance::new(&mut store, &module, &[]).and_then(|instance| match instance.get_func(&mut store, "grow") {
            Some(grow) => grow.call(&mut store, &[], &mut []),
            None => Ok(()),
        });
        (result, store.data().exhausted)
    }

    #[test]
    fn the_cap_covers_every_memory_together() {
        // Two memories of 20 MiB each: either fits a 32 MiB cap alone, both do not.
        let (result, exhausted) = instantiate("(module (memory 320) (memory 320))", 32 << 20);
        assert!(result.is_err() && exhausted);
        let (result, exhausted) = instantiate("(module (memory 320))", 32 << 20);
        assert!(result.is_ok() && !exhausted);
    }

    #[test]
    fn instances_within_their_caps_share_the_hosts_budget() {
        // 20 MiB each, a budget of 50 MiB: two fit, the third is refused by the host's budget, not its own cap.
        let host: Arc<GuestMemory> = Arc::default();
        host.set_budget(Some(50 << 20));
        let wat = r#"(module (memory 1) (func (export "grow") (drop (memory.grow (i32.const 319)))))"#;
        for _ in 0..2 {
            let (result, exhausted) = instantiate_within(wat, 32 << 20, &host);
            assert!(result.is_ok() && exhausted.is_none());
        }
        // Dropped instances gave their memory back.
        assert_eq!(host.used(), 0);
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str("(module (memory 320))").unwrap()).unwrap();
        let live: Vec<Store<MemoryBudget>> = (0..2)
            .map(|_| {
                let mut store = Store::new(&engine, MemoryBudget::new(32 << 20, host.clone(), Gauge::default()));
                store.limiter(|budget| budget);
                wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
                store
            })
            .collect();
        let (result, exhausted) = instantiate_within(wat, 32 << 20, &host);
        assert!(result.is_err());
        assert_eq!(exhausted, Some(Exhausted::Host(50 << 20)));
        let error = classify("filter", &Limits::default(), exhausted, result.unwrap_err());
        assert_eq!(error.to_string(), "filter ran out of memory: all policies together hold the host's guest memory budget of 50 MiB");
        drop(live);
        assert_eq!(host.used(), 0);
    }

    #[test]
    fn a_policys_memory_gauge_counts_its_live_instances() {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str("(module (memory 16))").unwrap()).unwrap();
        let in_use = Gauge::default();
        let instances: Vec<Store<MemoryBudget>> = (0..2)
            .map(|_| {
                let mut store = Store::new(&engine, MemoryBudget::new(32 << 20, Arc::default(), in_use.clone()));
                store.limiter(|budget| budget);
                wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
                store
            })
            .collect();
        assert_eq!(in_use.get(), 2 << 20, "two instances of 16 pages");
        drop(instances);
        assert_eq!(in_use.get(), 0);
    }

    #[test]
    fn table_growth_counts_against_the_cap_and_fails_at_once() {
        let wat = r#"(module (table 1 funcref)
            (func (export "grow") (drop (table.grow 0 (ref.null func) (i32.const 536870912)))))"#;
        let started = std::time::Instant::now();
        let (result, exhausted) = instantiate(wat, 32 << 20);
        assert!(result.is_err() && exhausted, "2^29 elements (4 GiB) are refused");
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "refused before anything is allocated");
    }
}
