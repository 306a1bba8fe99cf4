//! The real discovery documents the tests read (`integration/fixtures/discovery/`).

pub fn fixture(release: &str, file: &str) -> Vec<u8> {
    let p = format!("{}/../integration/fixtures/discovery/{release}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}
