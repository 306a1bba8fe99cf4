//! How the native build pins a request to the apiservers that serve it
//! ([`Host::pin`](mvp_filter_core::host::Host::pin) over the ABI): the list
//! handed to the clusters' balancer on the same worker while every member
//! is healthy to Envoy (`handover.rs`), else the first listed apiserver as
//! the upstream override host; the retry count the list needs; the
//! unavailable answers.

use mvp_contract::envoy::LISTED_PROPERTY;
use mvp_contract::headers::{MAX_RETRIES, UNAVAILABLE, UNAVAILABLE_DOCUMENT};
use mvp_contract::limits::{MAX_LISTED_APISERVERS, UNPINNED_RETRIES};
use mvp_filter_core::host::{Host, HostError};

use crate::abi::{self, ModuleBuffer};
use crate::handover;
use crate::host::{NOT_HERE, NativeHost, OVERRIDE_HOST, Target};

impl NativeHost<'_> {
    /// Pins without a route header and without matching the route again —
    /// the route header, its parsing by the override-host policy and the
    /// route match are most of what routing by a header costs Envoy. While
    /// every member of the route's cluster is healthy to Envoy, the list is
    /// handed to the clusters' balancer on this worker (`handover.rs`,
    /// `lb.rs`): the router's first attempt goes to the first listed
    /// apiserver; otherwise the first listed becomes the request's upstream
    /// override host, which Envoy follows whatever its health. A retry asks
    /// the balancer, which walks the same list, routed again from the path
    /// by the process's table, skipping the apiservers already tried. The
    /// retries are (listed − 1), as the wasm build's pinned routes count
    /// them: the route's count ([`UNPINNED_RETRIES`]) unless the list is
    /// another length, then [`MAX_RETRIES`] — so a read whose last server
    /// answered kube's 429 gets that 429, not a retry that finds no host
    /// left. The unavailable answers are the route table's direct
    /// responses: matched again (rare, and the price of one answer, not of
    /// routing) — or kept back while the request may be held (`Ok(false)`).
    pub(crate) fn pin_request(&self, header: &str, hosts: &str) -> Result<bool, HostError> {
        if hosts == UNAVAILABLE || hosts == UNAVAILABLE_DOCUMENT {
            let answer = if hosts == UNAVAILABLE { UNAVAILABLE } else { UNAVAILABLE_DOCUMENT };
            self.unavailable.set(Some(answer));
            if self.holding.get() {
                return Ok(false);
            }
            if let Target::Request { log_listed: true, .. } = self.target {
                self.set_property(LISTED_PROPERTY, answer.as_bytes())?;
            }
            return self.set_request_header(header, answer).map(|()| true);
        }
        let handed_over = self.cluster_all_healthy()? && handover::arm(hosts);
        self.pin_to(hosts, !handed_over)
    }

    /// Whether every member of the route's cluster passes Envoy's health
    /// checks (priority 0; the clusters have no other), so the balancer can
    /// take any listed apiserver. The route's cluster is the one the request
    /// will take: a request whose identity headers were just written goes
    /// to the cluster that presents the front proxy's certificate, which
    /// health-checks on its own — so the route is matched again first
    /// (it would be anyway, once, before the router; asking the route
    /// matched before them checked the other cluster: `503 UH` for a member
    /// healthy there only).
    fn cluster_all_healthy(&self) -> Result<bool, HostError> {
        self.rematch_now()?;
        let filter = self.request()?;
        let (mut total, mut healthy, mut degraded) = (0usize, 0usize, 0usize);
        let found = unsafe { abi::envoy_dynamic_module_callback_http_get_cluster_host_count(filter, 0, &mut total, &mut healthy, &mut degraded) };
        Ok(found && total > 0 && healthy == total)
    }

    /// The rest of a pin: the override host unless the list was handed
    /// over, the listed apiservers for the access log, the retry count.
    pub(crate) fn pin_to(&self, hosts: &str, override_host: bool) -> Result<bool, HostError> {
        let Target::Request { filter, log_listed, .. } = self.target else { return Err(HostError(NOT_HERE)) };
        if override_host {
            let first = hosts.split_once(',').map_or(hosts, |(first, _)| first);
            let ok = unsafe { abi::envoy_dynamic_module_callback_http_set_upstream_override_host(filter, ModuleBuffer::of(first.as_bytes()), false) };
            if !ok {
                return Err(HostError(OVERRIDE_HOST));
            }
        }
        if log_listed {
            self.set_property(LISTED_PROPERTY, hosts.as_bytes())?;
        }
        if let Some(retries) = retries_header(hosts) {
            self.append_header(MAX_RETRIES, retries)?;
        }
        Ok(true)
    }
}

/// The retry count a pinned request of `hosts` must carry: `None` when the
/// route's own ([`UNPINNED_RETRIES`]) is (listed − 1) already.
fn retries_header(hosts: &str) -> Option<&'static str> {
    const COUNTS: [&str; MAX_LISTED_APISERVERS] = ["0", "1", "2", "3", "4", "5", "6", "7"];
    // Listed − 1 is the number of commas.
    let retries = hosts.bytes().filter(|b| *b == b',').count().min(MAX_LISTED_APISERVERS - 1);
    (retries != UNPINNED_RETRIES).then(|| COUNTS.get(retries).copied()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (listed − 1) retries, the header only where the route's count is not that.
    #[test]
    fn a_pinned_request_retries_along_its_list_and_no_further() {
        let list = |n: usize| (1..=n).map(|i| format!("10.0.0.{i}:6443")).collect::<Vec<_>>().join(",");
        let got: Vec<Option<&str>> = (1..=MAX_LISTED_APISERVERS).map(|n| retries_header(&list(n))).collect();
        assert_eq!(got, [Some("0"), Some("1"), Some("2"), None, Some("4"), Some("5"), Some("6"), Some("7")]);
        assert_eq!(UNPINNED_RETRIES, 3, "the table above assumes the routes retry 3 times");
    }
}
