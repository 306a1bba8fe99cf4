//! A pinned request's retry count through the routes' cluster specifier
//! (`envoy.router.cluster_specifier_plugin.dynamic_modules`, Envoy 1.40):
//! the routes name this module as their cluster specifier, with one route
//! action override per count (`retries-0` … `retries-7`, each its own
//! retry policy); the filter leaves the count it chose on its worker and
//! asks Envoy to select the route's cluster again, and the selection — on
//! the same worker, within that call — picks the override. Instead of the
//! `x-envoy-max-retries` header (an ABI call, and the router's parsing).

use std::cell::Cell;

use crate::abi::{self, EnvoyPtr, ModuleBuffer};

/// The overrides' names, by retry count.
pub const OVERRIDES: [&str; mvp_contract::limits::MAX_LISTED_APISERVERS] = ["retries-0", "retries-1", "retries-2", "retries-3", "retries-4", "retries-5", "retries-6", "retries-7"];

thread_local! {
    /// The count the current request's filter chose, for the selection it
    /// asks for next on this worker.
    static CHOSEN: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The filter's side: `retries` for the current request, and a new
/// selection of its route's cluster.
pub fn choose(filter: EnvoyPtr, retries: usize) {
    CHOSEN.with(|c| c.set(Some(retries)));
    unsafe { abi::envoy_dynamic_module_callback_http_clear_route_cluster_cache(filter) };
    CHOSEN.with(|c| c.set(None));
}

/// One route's cluster specifier: the cluster it names.
pub struct Specifier {
    cluster: Vec<u8>,
}

impl Specifier {
    pub fn new(config: &[u8]) -> Result<Specifier, String> {
        if config.is_empty() {
            return Err("the cluster specifier needs its cluster's name as its configuration".into());
        }
        Ok(Specifier { cluster: config.to_vec() })
    }

    /// A selection: the route's cluster, and the chosen override if the
    /// filter chose one.
    pub fn select(&self, context: EnvoyPtr) -> bool {
        unsafe { abi::envoy_dynamic_module_callback_cluster_specifier_set_cluster_name(context, ModuleBuffer::of(&self.cluster)) };
        if let Some(name) = CHOSEN.with(Cell::get).and_then(|n| OVERRIDES.get(n)) {
            let _ = unsafe { abi::envoy_dynamic_module_callback_cluster_specifier_set_route_action_override(context, ModuleBuffer::of(name.as_bytes())) };
        }
        true
    }
}
