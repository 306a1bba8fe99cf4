//! Certificate subjects (RFC 2253, as Envoy gives them) → kube's identity.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mvp_fuzz::subject(data));
