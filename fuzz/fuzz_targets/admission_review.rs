//! A webhook request body as any client of the webhook Service sends it: an AdmissionReview of a pod, or a 400
//! saying why not, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wasp::admission::webhook::parse_review(data);
});
