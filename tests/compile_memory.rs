//! What compiling policies leaves in the host's heap: the compiled components' own metadata, not the compiler's
//! working memory. The whole binary counts live heap bytes, so it holds this one test.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
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
    let runtime = common::runtime();
    let names = ["inter-pod-affinity", "pod-topology-spread", "remove-pods-violating-inter-pod-anti-affinity", "resources-fit", "node-affinity", "make-room-for-pending"];
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
    assert!(
        kept < wasm_mib,
        "compiling {} components ({wasm_mib:.1} MiB of wasm) left {kept:.1} MiB in the heap",
        names.len()
    );
    drop(compiled);
}
