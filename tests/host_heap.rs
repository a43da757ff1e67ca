//! What policy work costs the host's heap: compiling leaves the compiled components' own metadata, not the
//! compiler's working memory; a policy's answer is refused by its size before it is copied. The whole binary
//! counts heap bytes, so its tests take turns.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most [`LIVE`] reached since [`measure_peak`] last reset it.
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_mib() -> f64 {
    LIVE.load(Ordering::Relaxed) as f64 / (1 << 20) as f64
}

/// cranelift keeps each compiling thread's register allocation and code buffers for the next compile; in the
/// engine that serves, that memory would stay for the life of the process (~90 MB in `wasp run` at 5000 nodes).
#[test]
fn compiled_components_keep_their_metadata_and_not_the_compilers_working_memory() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let runtime = common::runtime();
    let names = [
        "inter-pod-affinity",
        "pod-topology-spread",
        "remove-pods-violating-inter-pod-anti-affinity",
        "resources-fit",
        "node-affinity",
        "make-room-for-pending",
    ];
    let components: Vec<(String, Vec<u8>)> = names.iter().map(|name| common::policy_wasm(name)).collect();
    let wasm_mib = components.iter().map(|(_, wasm)| wasm.len()).sum::<usize>() as f64 / (1 << 20) as f64;
    let before = live_mib();
    let mut compiled = Vec::new();
    for (index, (_, wasm)) in components.iter().enumerate() {
        compiled.push(runtime.compile(&format!("digest-{index}"), wasm).unwrap());
    }
    let kept = live_mib() - before;
    // What the components themselves need (types, function tables, names) is well under their size in bytes
    // (0.6 MiB for these); compiled in the serving engine, they left 90 MiB.
    assert!(kept < wasm_mib, "compiling {} components ({wasm_mib:.1} MiB of wasm) left {kept:.1} MiB in the heap", names.len());
    drop(compiled);
}

/// The heap's growth over `work`, at its highest.
fn measure_peak<R>(work: impl FnOnce() -> R) -> (R, f64) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let result = work();
    (result, PEAK.load(Ordering::Relaxed).saturating_sub(before) as f64 / (1 << 20) as f64)
}

#[test]
fn an_answer_of_aliased_strings_is_refused_by_its_size_before_it_is_copied() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    use wasp::policy::{FailureMode, LoadedPolicy, PolicyOptions};
    let (source, wasm) = common::fixture_wasm("misbehaving");
    let options = PolicyOptions { settings: r#"{"filter": "aliased-reasons"}"#.into(), failure_mode: FailureMode::FailClosed, ..Default::default() };
    let policy = LoadedPolicy::load(&common::runtime(), &source, &wasm, options).unwrap_or_else(|error| panic!("{error}"));
    let cluster = common::cluster_of(vec![common::simple_node("n1", "4", "8Gi", ""), common::simple_node("n2", "4", "8Gi", "")]);
    let pod = common::simple_pod("p", "100m", "");
    let (answer, grown_mib) = measure_peak(|| policy.filter(&cluster, &pod, &cluster.node_ids()));
    let error = answer.unwrap_err().to_string();
    assert!(error.starts_with("malformed answer from filter: an answer of more than ") && error.ends_with("bytes, refused before it was copied"), "{error}");
    // 127 reasons naming one 1 MiB string of the guest's memory: copied one by one, 127 MiB.
    assert!(grown_mib < 8.0, "the refused answer cost the host {grown_mib:.1} MiB");
    assert_eq!(policy.idle_instances(), 0, "the instance whose answer was not lifted is not used again");
    // A fresh instance answers the next call (the same settings: it fails the same way, not as a poisoned one).
    let again = policy.filter(&cluster, &pod, &cluster.node_ids()).unwrap_err().to_string();
    assert!(again.starts_with("malformed answer from filter: an answer of more than "), "{again}");
}
