//! An in-memory [`Host`] for native tests: headers, shared data (one map, as
//! Envoy shares it between all VMs of one vm_id), gauges (shared the same
//! way: Envoy's stats are process-wide), a call response, counters.

#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::host::{Counter, Gauge, Host, HostError, LogLevel};

#[derive(Default)]
pub struct FakeHost {
    pub headers: RefCell<Vec<(String, String)>>,
    pub subject: Option<Vec<u8>>,
    /// Shared with every FakeHost cloned from this one via [`FakeHost::sibling`].
    pub shared: Rc<RefCell<HashMap<String, Vec<u8>>>>,
    /// Makes the next shared-data writes fail with this status.
    pub fail_shared_writes: Option<u32>,
    pub call_headers: Vec<(String, Vec<u8>)>,
    pub call_trailers: Vec<(String, Vec<u8>)>,
    pub call_body: Vec<u8>,
    pub counters: RefCell<HashMap<&'static str, i64>>,
    /// Process-wide in Envoy, so shared with siblings too.
    pub gauges: Rc<RefCell<HashMap<&'static str, u64>>>,
    /// Makes gauge reads fail (a host that cannot read them).
    pub fail_gauge_reads: bool,
    /// Gauges ignore writes and read 0, like the null gauge Envoy hands out
    /// for a stat its stats configuration rejects.
    pub null_gauges: bool,
    pub logs: RefCell<Vec<(LogLevel, String)>>,
    pub properties: RefCell<HashMap<String, Vec<u8>>>,
    /// Calls made: cluster, body, timeout.
    pub calls: RefCell<Vec<(String, Vec<u8>, std::time::Duration)>>,
    /// Makes calls fail with this status.
    pub fail_calls: Option<u32>,
    /// Other requests by context (a held request's, resumed from the
    /// root): header calls act on the effective one's once one is set.
    pub requests: RefCell<HashMap<u32, Vec<(String, String)>>>,
    pub effective: std::cell::Cell<u32>,
    /// Contexts let go on, in order.
    pub continued: RefCell<Vec<u32>>,
    pub now: std::cell::Cell<u64>,
    /// A table decoded once for the process (the native build's host).
    pub decoded: Option<std::sync::Arc<crate::table::RouteTable>>,
    /// Keeps every pin back (`Ok(false)`), as the native host does for a
    /// request it is about to hold.
    pub keep_back_pins: std::cell::Cell<bool>,
    /// How many 503 answers were written as no hold can help them.
    pub unavailable_written: std::cell::Cell<u32>,
    /// Local replies sent: (status, details).
    pub replies: RefCell<Vec<(u32, String)>>,
    /// The downstream address (`IP:port`).
    pub client: Option<Vec<u8>>,
}

impl FakeHost {
    /// Another VM of the same vm_id: its own request, the same shared data.
    pub fn sibling(&self) -> FakeHost {
        FakeHost { shared: self.shared.clone(), gauges: self.gauges.clone(), ..FakeHost::default() }
    }

    pub fn with_path(self, path: &str) -> FakeHost {
        self.headers.borrow_mut().push((":path".into(), path.into()));
        self
    }

    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers.borrow().iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect()
    }

    /// A request of another context, `path` its only header.
    pub fn add_request(&self, context: u32, path: &str) {
        self.requests.borrow_mut().insert(context, vec![(":path".into(), path.into())]);
    }

    /// That request's values of header `name`.
    pub fn request_values(&self, context: u32, name: &str) -> Vec<String> {
        self.requests.borrow().get(&context).map(|h| h.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect()).unwrap_or_default()
    }

    /// The effective context's headers: its own, or this host's request's.
    fn with_headers<R>(&self, f: impl FnOnce(&mut Vec<(String, String)>) -> R) -> R {
        let effective = self.effective.get();
        let mut requests = self.requests.borrow_mut();
        match requests.get_mut(&effective) {
            Some(h) if effective != 0 => f(h),
            _ => f(&mut self.headers.borrow_mut()),
        }
    }

    pub fn counter(&self, c: Counter) -> i64 {
        self.counters.borrow().get(c.name()).copied().unwrap_or(0)
    }

    pub fn gauge_value(&self, g: Gauge) -> u64 {
        self.gauges.borrow().get(g.name()).copied().unwrap_or(0)
    }
}

impl Host for FakeHost {
    fn pin(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        if self.keep_back_pins.get() {
            return Ok(false);
        }
        self.set_request_header(header, hosts).map(|()| true)
    }

    /// Written whatever `keep_back_pins` says, as the native host does.
    fn pin_unavailable(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        self.unavailable_written.set(self.unavailable_written.get() + 1);
        self.set_request_header(header, hosts).map(|()| true)
    }

    fn request_header(&self, name: &str) -> Result<Option<Vec<u8>>, HostError> {
        Ok(self.with_headers(|h| h.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone().into_bytes())))
    }

    fn set_request_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        self.with_headers(|h| {
            h.retain(|(k, _)| k != name);
            h.push((name.into(), value.into()));
        });
        Ok(())
    }

    fn add_request_header(&self, name: &str, value: &str) -> Result<(), HostError> {
        self.with_headers(|h| h.push((name.into(), value.into())));
        Ok(())
    }

    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), HostError> {
        self.properties.borrow_mut().insert(name.into(), value.to_vec());
        Ok(())
    }

    fn send_local_reply(&self, status: u32, details: &str) -> Result<(), HostError> {
        self.replies.borrow_mut().push((status, details.into()));
        Ok(())
    }

    fn client_address(&self) -> Result<Option<Vec<u8>>, HostError> {
        Ok(self.client.clone())
    }

    fn peer_certificate_subject(&self) -> Result<Option<Vec<u8>>, HostError> {
        Ok(self.subject.clone())
    }

    fn shared_data(&self, key: &str) -> Result<Option<Vec<u8>>, HostError> {
        Ok(self.shared.borrow().get(key).cloned())
    }

    fn decoded_table(&self) -> Option<std::sync::Arc<crate::table::RouteTable>> {
        self.decoded.clone()
    }

    fn set_shared_data(&self, key: &str, value: &[u8]) -> Result<(), HostError> {
        if let Some(s) = self.fail_shared_writes {
            return Err(HostError(s));
        }
        self.shared.borrow_mut().insert(key.into(), value.to_vec());
        Ok(())
    }

    fn http_call(&self, cluster: &str, _headers: &[(&str, &str)], body: &[u8], timeout: std::time::Duration) -> Result<u32, HostError> {
        if let Some(s) = self.fail_calls {
            return Err(HostError(s));
        }
        let mut calls = self.calls.borrow_mut();
        calls.push((cluster.into(), body.to_vec(), timeout));
        Ok(calls.len() as u32)
    }

    fn set_effective_context(&self, context: u32) -> Result<(), HostError> {
        if !self.requests.borrow().contains_key(&context) {
            return Err(HostError(2));
        }
        self.effective.set(context);
        Ok(())
    }

    fn continue_request(&self) -> Result<(), HostError> {
        self.continued.borrow_mut().push(self.effective.get());
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        self.now.get()
    }

    fn call_response_header(&self, name: &str) -> Option<Vec<u8>> {
        self.call_headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn call_response_trailer(&self, name: &str) -> Option<Vec<u8>> {
        self.call_trailers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn call_response_body(&self, max: usize) -> Vec<u8> {
        self.call_body.iter().take(max).copied().collect()
    }

    fn count(&self, counter: Counter, n: i64) {
        *self.counters.borrow_mut().entry(counter.name()).or_default() += n;
    }

    fn set_gauge(&self, gauge: Gauge, value: u64) -> Result<(), HostError> {
        if !self.null_gauges {
            self.gauges.borrow_mut().insert(gauge.name(), value);
        }
        Ok(())
    }

    fn gauge(&self, gauge: Gauge) -> Result<u64, HostError> {
        if self.fail_gauge_reads {
            return Err(HostError(1));
        }
        Ok(self.gauge_value(gauge))
    }

    fn log(&self, level: LogLevel, msg: &str) {
        self.logs.borrow_mut().push((level, msg.into()));
    }

    fn vm_memory_bytes(&self) -> u64 {
        0
    }
}
