//! The apiserver clusters' load balancer in the native build (Envoy's
//! dynamic-module load-balancing policy, served over CDS to an Envoy whose
//! node metadata names this module: `mvp_contract::envoy::NODE_NATIVE_MODULE`).
//!
//! The filter pins a request by making the first listed apiserver its
//! upstream override host ([`crate::host`]'s `pin`); the router's first
//! attempt goes there. A retry comes here without it (Envoy gives the
//! override host to the first attempt only), so the list is routed again
//! from the path by the process's table, the one the filter read — the
//! same list in the same order the wasm build's route header carries — and
//! the first listed healthy apiserver not tried yet is picked. None left
//! ends the retries: Envoy answers its 503, which the local reply mapper
//! makes the retryable Status, where the wasm build's pinned routes stop at
//! (listed − 1) retries. A request the filter did not pin (served by all,
//! or not an API path) is load balanced round robin over healthy members,
//! its retries over members not tried yet.
//!
//! A first attempt reads nothing but the override host: the router counts
//! host selection tries as 1 on a first attempt and as the route's
//! `host_selection_retry_max_attempts` (more than 1:
//! `ext-proc/src/envoy_config/routes.rs`) on a retry, so only a retry pays
//! for the path.

use std::sync::atomic::{AtomicUsize, Ordering};

use mvp_wasm_filter::route;
use mvp_wasm_filter::urlpath::DecodedPath;

use crate::abi::{self, EnvoyBuffer, EnvoyPtr, ModuleBuffer};
use crate::process;

/// One worker's balancer for one cluster.
pub struct Lb {
    next: AtomicUsize,
}

/// The healthy hosts of priority 0 (the clusters have no other), which
/// Envoy's answer indexes.
struct Healthy {
    lb: EnvoyPtr,
    count: usize,
}

impl Healthy {
    fn address(&self, i: usize) -> Option<&[u8]> {
        let mut out = EnvoyBuffer::EMPTY;
        let ok = unsafe { abi::envoy_dynamic_module_callback_lb_get_healthy_host_address(self.lb, 0, i, &mut out) };
        if ok { unsafe { out.bytes() } } else { None }
    }

    fn index_of(&self, address: &[u8]) -> Option<usize> {
        (0..self.count).find(|i| self.address(*i) == Some(address))
    }
}

impl Lb {
    pub fn new() -> Lb {
        Lb { next: AtomicUsize::new(0) }
    }

    /// The index of the healthy host a request goes to, or `None`: no
    /// healthy member, or none left for a retry.
    pub fn choose(&self, lb: EnvoyPtr, context: EnvoyPtr) -> Option<usize> {
        let healthy = Healthy { lb, count: unsafe { abi::envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb, 0) } };
        if healthy.count == 0 {
            return None;
        }
        if context.is_null() {
            return Some(self.round_robin(healthy.count));
        }
        let tried = |i: usize| unsafe { abi::envoy_dynamic_module_callback_lb_context_should_select_another_host(lb, context, 0, i) };
        if let Some(host) = override_host(context) {
            if let Some(i) = healthy.index_of(host) {
                return Some(i);
            }
            // Not a healthy member now: as a retry would, down the list.
            return listed(context).and_then(|l| first_untried(&l, &healthy, tried));
        }
        let retry = unsafe { abi::envoy_dynamic_module_callback_lb_context_get_host_selection_retry_count(context) } > 1;
        if retry && let Some(l) = listed(context) {
            return first_untried(&l, &healthy, tried);
        }
        let start = self.round_robin(healthy.count);
        (0..healthy.count).map(|k| (start + k) % healthy.count).find(|i| !tried(*i)).or(Some(start))
    }

    fn round_robin(&self, count: usize) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % count.max(1)
    }
}

fn override_host<'a>(context: EnvoyPtr) -> Option<&'a [u8]> {
    let mut out = EnvoyBuffer::EMPTY;
    let mut strict = false;
    let found = unsafe { abi::envoy_dynamic_module_callback_lb_context_get_override_host(context, &mut out, &mut strict) };
    if found { unsafe { out.bytes() } } else { None }
}

/// The apiservers the filter listed for this request, in its order: its
/// path routed again by the process's table. `None` when it was not pinned.
fn listed(context: EnvoyPtr) -> Option<String> {
    let mut path = EnvoyBuffer::EMPTY;
    let found = unsafe { abi::envoy_dynamic_module_callback_lb_context_get_downstream_header(context, ModuleBuffer::of(b":path"), &mut path, 0, std::ptr::null_mut()) };
    let path = if found { unsafe { path.bytes() } } else { None }?;
    let table = process::decoded()?;
    let hosts = route::route(&table, &DecodedPath::parse(path)).1.hosts(0)?;
    Some(hosts.to_string())
}

/// The first listed address that is a healthy member not tried yet. An
/// unavailable answer never gets here (the filter answers it), and its
/// marker matches no address.
fn first_untried(listed: &str, healthy: &Healthy, tried: impl Fn(usize) -> bool) -> Option<usize> {
    listed.split(',').filter_map(|a| healthy.index_of(a.as_bytes())).find(|i| !tried(*i))
}
