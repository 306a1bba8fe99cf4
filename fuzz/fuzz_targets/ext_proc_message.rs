//! ext_proc messages from Envoy: decode, then the `/apis` response phase.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mvp_fuzz::ext_proc_message(data));
