//! The filter's routing table decode: any bytes in the shared-data slot.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mvp_fuzz::table_decode(data));
