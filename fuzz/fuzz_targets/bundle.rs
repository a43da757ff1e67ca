//! A policy bundle (a zstd-compressed tar of `NAME.wasm` files) as anyone who can write the policy directory
//! makes it: unpacked within its bounds or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wasp::registry::bundle::unpack(data);
});
