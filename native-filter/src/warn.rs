//! The `Warning` for a response whose request named a resource only
//! apiservers older than the newest release serve (`RouterConfig::warn_on_skew`):
//! kept on the worker, by stream, from the request's routing to its
//! response headers — the filter has no per-request state (`filter.rs`),
//! and only warned requests are kept, so every other response costs one
//! thread-local emptiness check.

use std::cell::RefCell;

use crate::abi::{self, EnvoyPtr, ModuleBuffer};

/// `envoy_dynamic_module_type_http_header_type_ResponseHeader`.
const RESPONSE_HEADER: u32 = 2;
/// Streams warned at once on one worker, at most (each a few hundred
/// bytes; a stream ends, and is forgotten, within its request's life).
const MAX_PENDING: usize = 4096;

thread_local! {
    static PENDING: RefCell<Vec<(usize, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `warning` for `filter`'s response.
pub fn keep(filter: EnvoyPtr, warning: &[u8]) -> bool {
    PENDING.with(|p| {
        let Ok(mut p) = p.try_borrow_mut() else { return false };
        if let Some(slot) = p.iter_mut().find(|(f, _)| *f == filter as usize) {
            slot.1 = warning.to_vec();
            return true;
        }
        if p.len() >= MAX_PENDING {
            return false;
        }
        p.push((filter as usize, warning.to_vec()));
        true
    })
}

/// The stream's warning, forgotten.
fn take(filter: EnvoyPtr) -> Option<Vec<u8>> {
    PENDING.with(|p| {
        let mut p = p.try_borrow_mut().ok()?;
        if p.is_empty() {
            return None;
        }
        let i = p.iter().position(|(f, _)| *f == filter as usize)?;
        Some(p.swap_remove(i).1)
    })
}

/// The response headers: adds the stream's warning, if any (after the
/// apiserver's own, e.g. kube's deprecation warnings).
pub fn on_response_headers(filter: EnvoyPtr) {
    if let Some(w) = take(filter) {
        // SAFETY: Envoy reads the buffers during the call only.
        unsafe {
            abi::envoy_dynamic_module_callback_http_add_header(filter, RESPONSE_HEADER, ModuleBuffer::of(b"warning"), ModuleBuffer::of(&w));
        }
    }
}

/// The stream ended (a reset before any response): forgets it.
pub fn forget(filter: EnvoyPtr) {
    let _ = take(filter);
}
