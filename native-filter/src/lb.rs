//! The apiserver clusters' load balancer in the native build (Envoy's
//! dynamic-module load-balancing policy, served over CDS to an Envoy whose
//! node metadata names this module: `mvp_contract::envoy::NODE_NATIVE_MODULE`).
//!
//! The filter pins a request by handing its list to this balancer on the
//! same worker (`handover.rs`: the first attempt goes to the first listed
//! healthy member), or — while some member is unhealthy to Envoy, or for
//! the table's last resort — by making the first listed apiserver its
//! upstream override host ([`crate::host`]'s `pin`); Envoy's router sends
//! the first attempt there, whatever the health checks say (the clusters
//! accept every health status for an override host, as the wasm build's
//! override-host policy takes the route header's). A retry comes here
//! without it (Envoy gives the override host to the first attempt only), so
//! the list is routed again from the path by the process's table — the
//! same list, in the table's order, that the wasm build's route header
//! carries — and the first listed healthy apiserver not tried yet is
//! picked (Envoy's ABI answers with an index into the healthy hosts, so an
//! unhealthy one is reached only as the override host). None left ends the
//! retries: Envoy answers its 503, which the local reply mapper makes the
//! retryable Status, where the wasm build's pinned routes stop at
//! (listed − 1) retries. A request the filter did not pin (served by all,
//! or not an API path) is balanced round robin over healthy members, its
//! retries over members not tried yet.
//!
//! A first attempt reads nothing but the hand-over or the override host: the router counts
//! host selection tries as 1 on a first attempt and as the route's
//! `host_selection_retry_max_attempts` (more than 1:
//! `ext-proc/src/envoy_config/routes.rs`) on a retry, so only a retry pays
//! for the path.

use std::sync::atomic::{AtomicUsize, Ordering};

use mvp_filter_core::route;
use mvp_filter_core::urlpath::DecodedPath;

use crate::abi::{self, EnvoyBuffer, EnvoyPtr, ModuleBuffer};
use crate::{handover, process};

/// One worker's balancer for one cluster.
pub struct Lb {
    next: AtomicUsize,
}

/// What a choice sees of the cluster (priority 0; the clusters have no
/// other) in Envoy's two index spaces, which differ whenever a member is
/// unhealthy — a rolling upgrade: the answer, and the healthy hosts'
/// addresses, index the *healthy* hosts (`healthyHosts()`), while Envoy's
/// `previous_hosts` predicate indexes *all* hosts (`hosts()`:
/// `source/extensions/load_balancing_policies/dynamic_modules/abi_impl.cc`,
/// `load_balancer.cc`). A host is carried from one to the other by its
/// address ([`Candidates::tried`]).
trait Candidates {
    fn healthy_count(&self) -> usize;
    fn healthy_address(&self, i: usize) -> Option<&[u8]>;
    fn host_count(&self) -> usize;
    fn host_address(&self, j: usize) -> Option<&[u8]>;
    /// Envoy's `previous_hosts` predicate for the host at `j` in *all* hosts.
    fn host_tried(&self, j: usize) -> bool;

    fn healthy_index_of(&self, address: &[u8]) -> Option<usize> {
        (0..self.healthy_count()).find(|i| self.healthy_address(*i).is_some_and(|a| a == address))
    }

    /// Whether this request tried the healthy host at `i` already: asked
    /// of the predicate at that host's index in all hosts.
    fn tried(&self, i: usize) -> bool {
        let Some(address) = self.healthy_address(i) else { return false };
        (0..self.host_count()).find(|j| self.host_address(*j) == Some(address)).is_some_and(|j| self.host_tried(j))
    }
}

/// One request's attempt.
struct Attempt {
    lb: EnvoyPtr,
    context: EnvoyPtr,
    healthy: usize,
}

impl Candidates for Attempt {
    fn healthy_count(&self) -> usize {
        self.healthy
    }

    fn healthy_address(&self, i: usize) -> Option<&[u8]> {
        let mut out = EnvoyBuffer::EMPTY;
        let ok = unsafe { abi::envoy_dynamic_module_callback_lb_get_healthy_host_address(self.lb, 0, i, &mut out) };
        if ok { unsafe { out.bytes() } } else { None }
    }

    fn host_count(&self) -> usize {
        unsafe { abi::envoy_dynamic_module_callback_lb_get_hosts_count(self.lb, 0) }
    }

    fn host_address(&self, j: usize) -> Option<&[u8]> {
        let mut out = EnvoyBuffer::EMPTY;
        let ok = unsafe { abi::envoy_dynamic_module_callback_lb_get_host_address(self.lb, 0, j, &mut out) };
        if ok { unsafe { out.bytes() } } else { None }
    }

    fn host_tried(&self, j: usize) -> bool {
        unsafe { abi::envoy_dynamic_module_callback_lb_context_should_select_another_host(self.lb, self.context, 0, j) }
    }
}

impl Lb {
    pub fn new() -> Lb {
        Lb { next: AtomicUsize::new(0) }
    }

    /// The index of the healthy host a request goes to, or `None`: no
    /// healthy member, or none left for a retry.
    pub fn choose(&self, lb: EnvoyPtr, context: EnvoyPtr) -> Option<usize> {
        let attempt = Attempt { lb, context, healthy: unsafe { abi::envoy_dynamic_module_callback_lb_get_healthy_hosts_count(lb, 0) } };
        if attempt.healthy == 0 {
            return None;
        }
        let next = self.next.fetch_add(1, Ordering::Relaxed);
        if context.is_null() {
            return Some(next % attempt.healthy);
        }
        let first_attempt = unsafe { abi::envoy_dynamic_module_callback_lb_context_get_host_selection_retry_count(context) } <= 1;
        // The list the filter handed over for this request (`handover.rs`).
        if first_attempt && let Some(choice) = handover::take(|hosts| first_listed(&attempt, hosts)) {
            return choice;
        }
        let overridden = override_host(context);
        let retry = overridden.is_none() && !first_attempt;
        pick(&attempt, overridden, retry, || listed(context), next)
    }
}

/// A first attempt's host from the list the filter handed over: the first
/// listed that is a healthy member (the filter hands a list over only while
/// all are; `None` if that changed meanwhile and none listed is).
fn first_listed(hosts: &impl Candidates, listed: &str) -> Option<usize> {
    listed.split(',').find_map(|a| hosts.healthy_index_of(a.as_bytes()))
}

/// The choice ([`Lb::choose`]): the override host if it is a healthy
/// member; down the list for a retry, or for an override host that is not
/// (`None` when none is left); else round robin from `next` — on a retry
/// skipping hosts tried (all tried: `next`'s anyway). A first attempt has
/// tried nothing: it asks Envoy nothing but its override host.
fn pick(hosts: &impl Candidates, overridden: Option<&[u8]>, retry: bool, listed: impl FnOnce() -> Option<String>, next: usize) -> Option<usize> {
    let count = hosts.healthy_count();
    if count == 0 {
        return None;
    }
    if let Some(i) = overridden.and_then(|a| hosts.healthy_index_of(a)) {
        return Some(i);
    }
    if (retry || overridden.is_some())
        && let Some(l) = listed()
    {
        return l.split(',').filter_map(|a| hosts.healthy_index_of(a.as_bytes())).find(|i| !hosts.tried(*i));
    }
    let start = next % count;
    if !retry {
        return Some(start);
    }
    (0..count).map(|k| (start + k) % count).find(|i| !hosts.tried(*i)).or(Some(start))
}

fn override_host<'a>(context: EnvoyPtr) -> Option<&'a [u8]> {
    let mut out = EnvoyBuffer::EMPTY;
    let mut strict = false;
    let found = unsafe { abi::envoy_dynamic_module_callback_lb_context_get_override_host(context, &mut out, &mut strict) };
    if found { unsafe { out.bytes() } } else { None }
}

/// The apiservers the filter lists for this request, in the table's order:
/// its path routed again by the process's table. `None` when it is not
/// pinned. An unavailable answer never gets here (the filter answers it),
/// and its marker matches no address.
fn listed(context: EnvoyPtr) -> Option<String> {
    let mut path = EnvoyBuffer::EMPTY;
    let found = unsafe { abi::envoy_dynamic_module_callback_lb_context_get_downstream_header(context, ModuleBuffer::of(b":path"), &mut path, 0, std::ptr::null_mut()) };
    let path = if found { unsafe { path.bytes() } } else { None }?;
    let table = process::decoded()?;
    let hosts = route::route(&table, &DecodedPath::parse(path)).1.hosts(0)?;
    Some(hosts.to_string())
}

#[cfg(test)]
#[path = "lb_tests.rs"]
mod tests;
