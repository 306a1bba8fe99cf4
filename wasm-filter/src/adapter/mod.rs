//! The proxy-wasm glue, without an SDK: this VM's root contexts (one per
//! plugin, in one of two roles) and the router every HTTP context uses.
//! Every decision lives in `router` and `refresher`; this only connects them
//! to the host's callbacks (`exports.rs`) and host calls (`abi.rs`).
//!
//! Why no SDK: every crossing between Envoy and the VM (a callback into it, a
//! host call out of it, the allocation the host makes for a value it
//! returns) costs on the order of a microsecond in Envoy 1.40's V8, and
//! Envoy only makes the callbacks a module exports. The SDK exports all of
//! them and keeps per-context state, so a request cost 7 callbacks; here it
//! costs one (`proxy_on_request_headers`), because an HTTP context needs no
//! state of its own: every HTTP context of this VM is served by its one
//! router root. Measured in BENCHMARKS.md.

mod abi;
mod exports;

use std::cell::RefCell;

use mvp_contract::plugin::PluginConfig;

use mvp_filter_core::host::{Host, LogLevel as Level};
use mvp_filter_core::refresher::{Next, Refresher};
use mvp_filter_core::router::{Action, FLUSH_MS, Router};
use abi::AbiHost;

/// What a root context was configured as. Without a router, requests pass
/// through untouched — plain load balancing, the behaviour without mvp-envoy.
enum Role {
    /// The HTTP filter on a worker.
    Router(Router),
    /// The singleton on the main thread.
    Refresher(Refresher),
}

struct Root {
    role: Role,
    host: AbiHost,
}

/// Everything this VM holds. Envoy runs one VM per worker thread and calls
/// it from that thread only.
///
/// One router per VM: `proxy_on_context_create` is not exported (it would
/// cost a callback per request), so an HTTP context does not say which root
/// it belongs to. The rendered bootstrap has one router plugin per `vm_id`;
/// a router configured later (Envoy reconfiguring the plugin) replaces the
/// earlier one, which also frees its table — without `proxy_on_delete`
/// nothing else would.
#[derive(Default)]
struct Vm {
    /// By root context id: the router and, in the main thread's VM, the
    /// refresher.
    roots: Vec<(u32, Root)>,
}

thread_local! {
    static VM: RefCell<Vm> = RefCell::new(Vm::default());
}

/// Runs `f` on the VM state. The host never re-enters a callback during a
/// host call, so the borrow cannot fail; if it ever did, the callback is
/// skipped (a request passes through) rather than panicking the VM.
fn with_vm<R>(fallback: R, f: impl FnOnce(&mut Vm) -> R) -> R {
    VM.with(|vm| match vm.try_borrow_mut() {
        Ok(mut vm) => f(&mut vm),
        Err(_) => fallback,
    })
}

/// The role this root's plugin configuration asks for, and its tick period.
fn configured_role(host: &AbiHost) -> Option<(Role, u32)> {
    let raw = match abi::plugin_configuration() {
        Ok(Some(raw)) => raw,
        _ => {
            host.log(Level::Warn, "mvp: plugin configuration is missing");
            return None;
        }
    };
    match PluginConfig::parse(&raw) {
        Ok(PluginConfig::Router(config)) => Some((Role::Router(Router::new(config, host)), FLUSH_MS)),
        Ok(PluginConfig::Refresher(config)) => {
            let r = Refresher::new(config);
            let ms = r.poll_interval_ms();
            Some((Role::Refresher(r), ms))
        }
        Err(e) => {
            host.log(Level::Warn, &e.to_string());
            None
        }
    }
}

impl Vm {
    fn root(&mut self, id: u32) -> Option<&mut Root> {
        self.roots.iter_mut().find(|(i, _)| *i == id).map(|(_, r)| r)
    }

    fn router(&self) -> Option<(&Router, &AbiHost)> {
        self.roots.iter().find_map(|(_, Root { role, host })| match role {
            Role::Router(r) => Some((r, host)),
            Role::Refresher(_) => None,
        })
    }

    /// Every HTTP context is the router's (see [`Vm`]); without one it
    /// passes through.
    fn request_headers(&self, context: u32, end_of_stream: bool) -> Action {
        self.router().map_or(Action::Continue, |(r, host)| r.on_request_headers(host, context, end_of_stream))
    }
    /// Configures root `id` from its plugin configuration. A root that
    /// fails is forgotten (Envoy rejects the plugin); one that succeeds
    /// replaces any other root in the same role.
    fn configure(&mut self, id: u32) -> bool {
        let host = AbiHost::new();
        let Some((role, tick_ms)) = configured_role(&host) else {
            self.roots.retain(|(i, _)| *i != id);
            return false;
        };
        let is_router = matches!(role, Role::Router(_));
        let before = self.roots.len();
        self.roots.retain(|(i, r)| *i != id && matches!(r.role, Role::Router(_)) != is_router);
        if self.roots.len() < before {
            host.log(Level::Info, &format!("mvp: root context {id} replaces the earlier one in its role"));
        }
        self.roots.push((id, Root { role, host }));
        if let Err(e) = abi::set_tick_period_ms(tick_ms) {
            host.log(Level::Warn, &format!("mvp: cannot start the timer: {e}"));
            // Without ticks the refresher never polls; a router only loses
            // its metric flushes.
            if !is_router {
                self.roots.retain(|(i, _)| *i != id);
                return false;
            }
        }
        self.tick(id);
        true
    }

    fn tick(&mut self, id: u32) {
        let Some(Root { role, host }) = self.root(id) else { return };
        match role {
            Role::Router(r) => r.flush(host),
            Role::Refresher(r) => call_for_table(r, host),
        }
    }

    /// A root's call answered: the refresher's, or the router's hold call.
    fn http_call_response(&mut self, id: u32, token: u32) {
        match self.root(id) {
            Some(Root { role: Role::Refresher(r), host }) => {
                let next = r.on_response(host);
                if next == Next::Now {
                    call_for_table(r, host);
                }
            }
            Some(Root { role: Role::Router(r), host }) => r.on_hold_answer(host, token),
            None => {}
        }
    }
}

/// Makes the refresher's next `GetTable` call, unless one is in flight.
fn call_for_table(r: &mut Refresher, host: &AbiHost) {
    if let Some(call) = r.next_call() {
        let sent = abi::http_call(&call.cluster, &call.headers(), &call.body, call.timeout).map(|_| ()).map_err(|e| e.to_string());
        r.dispatched(host, sent);
    }
}
