//! The apiservers the HTTP filter pinned a request to, handed to the
//! clusters' balancer (`lb.rs`) on the same worker without an Envoy call.
//!
//! Why: the upstream override host costs Envoy about 1,700 instructions per
//! request (it parses the address as an IP and copies it twice) — more than
//! routing the request does (BENCHMARKS.md). Handing the list over costs a
//! copy of a few dozen bytes.
//!
//! Why it is safe: Envoy's router asks its cluster's balancer for a
//! request's first host in the same call the filter's request-headers hook
//! returns into (or that its `continue_decoding` makes, for a held request),
//! and the worker does nothing else in between: no filter after this one
//! pauses a request to the apiserver clusters (the ext_proc filter runs only
//! on the merged documents' routes, and skips their request headers:
//! `ext-proc/src/envoy_config/render_tests.rs` holds the rendered chain to
//! that). So the filter arms the hand-over just before it lets a request go
//! on, and the balancer's next first-attempt choice on this worker takes it.
//! Every pass of the filter disarms it first, so a request whose router
//! never asks (a direct response) leaves nothing behind that another
//! request could take: the next first attempt on this worker comes after
//! its own request's pass. A retry never takes it (it walks the list again
//! from the path: `lb.rs`).
//!
//! The balancer picks only among hosts Envoy's health checks pass, so the
//! filter hands a list over only while every member of the cluster is
//! healthy to Envoy; otherwise it pins by the override host, which Envoy
//! follows whatever the host's health (a server the table already opened
//! but Envoy's checks have not, during a restart).

use std::cell::RefCell;

thread_local! {
    /// This worker's armed list (`None`: disarmed); the string keeps its
    /// capacity from request to request.
    static ARMED: RefCell<(bool, String)> = const { RefCell::new((false, String::new())) };
}

/// No list is handed over (every pass of the filter starts so).
pub fn disarm() {
    ARMED.with(|a| {
        if let Ok(mut a) = a.try_borrow_mut() {
            a.0 = false;
        }
    });
}

/// Hands `hosts` (the pinned list, comma-separated, in the order to try)
/// to the next first-attempt choice on this worker.
pub fn arm(hosts: &str) -> bool {
    ARMED.with(|a| match a.try_borrow_mut() {
        Ok(mut a) => {
            a.1.clear();
            a.1.push_str(hosts);
            a.0 = true;
            true
        }
        Err(_) => false,
    })
}

/// Takes the armed list, if any, and answers `f` of it; disarmed after.
pub fn take<R>(f: impl FnOnce(&str) -> R) -> Option<R> {
    ARMED.with(|a| {
        let mut a = a.try_borrow_mut().ok()?;
        if !a.0 {
            return None;
        }
        a.0 = false;
        Some(f(&a.1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taken once; a pass of the filter leaves nothing armed; a new list
    /// replaces the old one whole.
    #[test]
    fn taken_once_and_never_left_behind() {
        disarm();
        assert_eq!(take(str::to_string), None);
        assert!(arm("10.0.0.1:6443,10.0.0.2:6443"));
        assert_eq!(take(str::to_string).as_deref(), Some("10.0.0.1:6443,10.0.0.2:6443"));
        assert_eq!(take(str::to_string), None, "taken once");
        assert!(arm("10.0.0.1:6443,10.0.0.2:6443"));
        disarm();
        assert_eq!(take(str::to_string), None, "the next pass disarms");
        assert!(arm("10.0.0.1:6443,10.0.0.2:6443"));
        assert!(arm("10.0.0.3:6443"));
        assert_eq!(take(str::to_string).as_deref(), Some("10.0.0.3:6443"));
    }
}
