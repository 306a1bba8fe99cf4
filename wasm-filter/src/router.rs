//! The `router` role: the HTTP filter on every Envoy worker. Per request it
//! forwards a verified client certificate's identity, makes sure the
//! worker's table is the published one, and pins the request to the
//! apiservers that serve it by writing one header.
//!
//! Host-independent: the adapter hands it a [`Host`].

use std::cell::{Cell, RefCell};

use mvp_contract::envoy::ROUTE_KEY_PROPERTY;
use mvp_contract::plugin::{IdentityConfig, RouterConfig};

use crate::host::{Counter, Gauge, Host, LogLevel};
use crate::identity;
use crate::route;
use crate::requestinfo::RouteKey;
use crate::urlpath::DecodedPath;
use crate::shared_table::{Load, WorkerTable};

/// How often a worker flushes its rerouted-request count.
pub const FLUSH_MS: u32 = 1000;

/// State a worker's HTTP contexts share with its root context.
pub struct Router {
    config: RouterConfig,
    table: WorkerTable,
    /// Spreads pinned requests over the capable apiservers.
    counter: Cell<u32>,
    /// Rerouted requests not yet added to the metric: flushed every
    /// [`FLUSH_MS`] instead of a host call per request.
    unflushed: Cell<i64>,
    /// The route-key property's bytes, reused across requests.
    key_buf: RefCell<Vec<u8>>,
}

impl Router {
    pub fn new<H: Host>(config: RouterConfig, host: &H) -> Router {
        let router = Router { config, table: WorkerTable::default(), counter: Cell::new(0), unflushed: Cell::new(0), key_buf: RefCell::new(Vec::new()) };
        router.load_table(host);
        router
    }

    pub fn on_request_headers<H: Host>(&self, host: &H) {
        if let Some(names) = &self.config.identity {
            forward_identity(host, names);
        }
        self.load_table(host);
        let path = match host.request_header(":path") {
            Ok(Some(p)) => p,
            Ok(None) => return,
            Err(e) => {
                host.log(LogLevel::Warn, &format!("mvp router: reading :path: {e}"));
                return;
            }
        };
        let table = self.table.current();
        let n = self.counter.get();
        let decoded = DecodedPath::parse(&path);
        let (key, decision) = route::route(&table, &decoded);
        // What it is routed by, for the access log (when it is on).
        if self.config.export_route_key
            && key != RouteKey::None
            && let Ok(mut buf) = self.key_buf.try_borrow_mut()
        {
            buf.clear();
            key.write_label(&mut buf);
            if let Err(e) = host.set_property(ROUTE_KEY_PROPERTY, &buf) {
                host.log(LogLevel::Warn, &format!("mvp router: setting {ROUTE_KEY_PROPERTY}: {e}"));
            }
        }
        let Some(hosts) = decision.hosts(n) else {
            return;
        };
        self.counter.set(n.wrapping_add(1));
        // One header: Envoy's route table adds x-kubernetes-peer-proxied and
        // caps retries by the number of hosts listed (ABI 0.2.1 clears the
        // route cache on this write, so the router matches again).
        match host.set_request_header(&self.config.route_header, hosts) {
            Ok(()) => self.unflushed.set(self.unflushed.get() + 1),
            Err(e) => host.log(LogLevel::Warn, &format!("mvp router: setting the route header: {e}")),
        }

    }

    /// Adds the requests rerouted since the last flush to the metric.
    pub fn flush<H: Host>(&self, host: &H) {
        let n = self.unflushed.replace(0);
        if n > 0 {
            host.count(Counter::Rerouted, n);
        }
    }

    fn load_table<H: Host>(&self, host: &H) {
        match self.table.load_published(host) {
            Load::Unchanged => {}
            Load::Loaded => {
                host.count(Counter::TableLoads, 1);
                // The old table is dropped: this is the VM's high-water mark
                // (linear memory never shrinks). A failed write only leaves
                // the gauge stale.
                let _ = host.set_gauge(Gauge::VmMemoryBytes, host.vm_memory_bytes());
            }
            Load::Rejected(e) => {
                host.count(Counter::TableErrors, 1);
                host.log(LogLevel::Warn, &format!("mvp router: keeping the previous table: {e}"));
            }
            Load::Unreadable(key, e) => host.log(LogLevel::Warn, &format!("mvp router: reading {key}: {e}")),
        }
    }
}

/// Forwards a verified client certificate's identity. Envoy's early header
/// mutation already removed any client-sent identity headers, so these are
/// the only ones the apiserver sees; without a certificate the client's own
/// credentials (e.g. a bearer token) speak for it.
fn forward_identity<H: Host>(host: &H, names: &IdentityConfig) {
    let subject = match host.peer_certificate_subject() {
        Ok(Some(s)) if !s.is_empty() => s,
        Ok(_) => return,
        Err(e) => {
            host.log(LogLevel::Warn, &format!("mvp router: reading the client certificate subject: {e}"));
            return;
        }
    };
    let Some(id) = identity::from_rfc2253(&subject) else { return };
    let mut result = host.set_request_header(&names.username_header, &id.user);
    for g in &id.groups {
        result = result.and_then(|_| host.add_request_header(&names.group_header, g));
    }
    if let Err(e) = result {
        host.log(LogLevel::Warn, &format!("mvp router: setting identity headers: {e}"));
    }
}

#[cfg(test)]
#[path = "router_tests.rs"]
mod tests;
