//! proxy-wasm glue: one root context per plugin, in one of two roles, and an
//! HTTP context per request. Every decision lives in `router` and
//! `refresher`; this only connects them to the SDK's callbacks and to
//! [`abi::AbiHost`].

mod abi;

use std::rc::Rc;

use mvp_contract::plugin::PluginConfig;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::host::{Host, LogLevel as Level};
use crate::refresher::Refresher;
use crate::router::{FLUSH_MS, Router};
use abi::AbiHost;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

/// What a root context was configured as.
#[derive(Default)]
enum Role {
    /// Not configured (or configuration failed).
    #[default]
    Unconfigured,
    /// The HTTP filter on a worker.
    Router(Rc<Router>),
    /// The singleton on the main thread.
    Refresher(Refresher),
}

#[derive(Default)]
struct Root {
    role: Role,
    host: AbiHost,
}

impl Context for Root {
    fn on_http_call_response(&mut self, _token: u32, _headers: usize, _body: usize, _trailers: usize) {
        if let Role::Refresher(r) = &mut self.role {
            r.on_response(&self.host);
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.host = AbiHost::new();
        let raw = match abi::plugin_configuration() {
            Ok(Some(raw)) => raw,
            _ => {
                self.host.log(Level::Warn, "mvp: plugin configuration is missing");
                return false;
            }
        };
        let (role, tick_ms) = match PluginConfig::parse(&raw) {
            Ok(PluginConfig::Router(config)) => (Role::Router(Rc::new(Router::new(config, &self.host))), FLUSH_MS),
            Ok(PluginConfig::Refresher(config)) => {
                let r = Refresher::new(config);
                let ms = r.poll_interval_ms();
                (Role::Refresher(r), ms)
            }
            Err(e) => {
                self.host.log(Level::Warn, &e.to_string());
                return false;
            }
        };
        let is_refresher = matches!(role, Role::Refresher(_));
        self.role = role;
        if let Err(e) = abi::set_tick_period_ms(tick_ms) {
            self.host.log(Level::Warn, &format!("mvp: cannot start the timer: {e}"));
            // Without ticks the refresher never polls; a router only loses
            // its metric flushes.
            if is_refresher {
                return false;
            }
        }
        self.on_tick();
        true
    }

    fn on_tick(&mut self) {
        let call = match &self.role {
            Role::Router(r) => {
                r.flush(&self.host);
                return;
            }
            Role::Refresher(r) => r.next_call(),
            Role::Unconfigured => None,
        };
        let Some(call) = call else { return };
        // Only the SDK's dispatch registers the token its callback dispatcher
        // looks up; it returns errors (no panic) for a missing cluster.
        let sent = self
            .dispatch_http_call(&call.cluster, call.headers().to_vec(), Some(&call.body), vec![], call.timeout)
            .map(|_| ())
            .map_err(|s| format!("{s:?}"));
        if let Role::Refresher(r) = &mut self.role {
            r.dispatched(&self.host, sent);
        }
    }

    /// Never `None`: the SDK panics on it. A root without a router (a
    /// refresher configuration mistakenly used as an HTTP filter, or one
    /// whose configuration failed) lets every request pass untouched: the
    /// fail-safe is plain load balancing, the behaviour without mvp-envoy.
    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        match &self.role {
            Role::Router(router) => Some(Box::new(Request { router: router.clone(), host: self.host })),
            _ => Some(Box::new(PassThrough)),
        }
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Request {
    router: Rc<Router>,
    host: AbiHost,
}

impl Context for Request {}

impl HttpContext for Request {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        self.router.on_request_headers(&self.host);
        Action::Continue
    }
}

/// The fail-safe HTTP context: does nothing.
struct PassThrough;

impl Context for PassThrough {}

impl HttpContext for PassThrough {}
