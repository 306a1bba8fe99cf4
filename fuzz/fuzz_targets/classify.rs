//! Request classification: any path bytes through Go-like decoding,
//! RequestInfo and the routing decision on a sample table.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mvp_fuzz::classify(data));
