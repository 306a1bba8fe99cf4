//! Aggregated discovery documents: parse, then merge with a real one.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mvp_fuzz::discovery_merge(data));
