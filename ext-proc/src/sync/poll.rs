//! One apiserver's own discovery loop: each member is read on its own
//! schedule and under its own deadline, so a member that hangs or drips
//! delays nobody else's changes. Reports go to the sync loop, which applies
//! them and publishes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::apiservers::ApiserverSpec;
use crate::discover::{Discoverer, DiscoveryError, ServerView};
use crate::openapi::ServerOpenApi;

/// A member's identity for the sync loop while it is a member.
pub type MemberId = u64;

/// What one member's loop found.
pub enum Report {
    /// A round: its address (resolved this round, or the last one with the
    /// resolution error), whether it is ready, and — when it is — what it
    /// serves, or why that read failed.
    Discovery {
        id: MemberId,
        address: Option<SocketAddr>,
        resolve_error: Option<String>,
        /// `/readyz`: a member that is not ready is sent no new request and
        /// not read (it is draining, or not up yet).
        ready: Result<(), DiscoveryError>,
        /// `None` when it was not ready.
        result: Option<Result<Arc<ServerView>, DiscoveryError>>,
        /// Its release, when read this round (first success, and after
        /// every failure: it may come back as another release).
        version: Option<String>,
    },
    /// Its OpenAPI documents, read after a successful discovery report (the
    /// same `Arc` while nothing was due or changed).
    OpenApi { id: MemberId, result: Result<Arc<ServerOpenApi>, DiscoveryError> },
    /// Its `/readyz` turned 200 and its discovery is being read: coming
    /// back, so requests for what only it serves are held for the read
    /// rather than answered 503 (`ServerState::answered`).
    Ready { id: MemberId },
}

/// How often a member that is not ready is asked `/readyz` again (a
/// refused connection or a 500 costs next to nothing; a hung server is
/// asked once per probe deadline).
pub const NOT_READY_PROBE_EVERY: Duration = Duration::from_millis(100);

/// Reads `spec` every `interval` (a member that is not ready: its `/readyz`
/// every [`NOT_READY_PROBE_EVERY`]), and at once when `wake` is notified
/// (the sync loop learned it restarted), until the sync loop goes away.
pub async fn poll(
    id: MemberId,
    spec: ApiserverSpec,
    mut discoverer: Discoverer,
    interval: Duration,
    reports: mpsc::Sender<Report>,
    wake: Arc<Notify>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut address = spec.ip_address();
    let mut version_due = true;
    let mut was_ready = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = wake.notified() => {
                // Restarted: whatever it serves now is read in full.
                discoverer.force_full_read();
                version_due = true;
            }
        }
        let resolve_error = match resolve(&spec).await {
            Ok(a) => {
                address = Some(a);
                None
            }
            Err(e) => Some(e),
        };
        let ready = discoverer.read_ready(address).await;
        if ready.is_err() {
            was_ready = false;
            if reports.send(Report::Discovery { id, address, resolve_error, ready, result: None, version: None }).await.is_err() {
                return;
            }
            // A server coming up serves the moment its /readyz turns 200:
            // read it then, not a whole interval later (issue 33).
            ticker.reset_after(NOT_READY_PROBE_EVERY.min(interval));
            continue;
        }
        if !was_ready {
            // Ready again (or for the first time): it may be another release.
            discoverer.force_full_read();
            version_due = true;
            was_ready = true;
            if reports.send(Report::Ready { id }).await.is_err() {
                return;
            }
        }
        let probe = discoverer.ready_probe(address).ok();
        let Some(result) = watched(discoverer.discover(address), probe.as_ref(), interval, id, address, &reports).await else {
            // Not ready mid-read (hung, or draining): what the read found
            // must not reopen it. Ready again, it may be another release.
            was_ready = false;
            ticker.reset_after(NOT_READY_PROBE_EVERY.min(interval));
            continue;
        };
        let mut version = None;
        if result.is_err() {
            // When it answers again it may be another release: read
            // everything then.
            discoverer.force_full_read();
            version_due = true;
        } else if version_due {
            version = discoverer.read_version(address).await.ok();
            version_due = version.is_none();
        }
        let view = result.as_ref().ok().cloned();
        if reports.send(Report::Discovery { id, address, resolve_error, ready, result: Some(result), version }).await.is_err() {
            return;
        }
        // OpenAPI after discovery is reported: a new API set routes without
        // waiting for megabytes of schemas.
        if let Some(view) = view {
            let Some(result) = watched(discoverer.read_openapi(address, &view), probe.as_ref(), interval, id, address, &reports).await else {
                was_ready = false;
                continue;
            };
            if reports.send(Report::OpenApi { id, result }).await.is_err() {
                return;
            }
        }
    }
}

/// Runs one read of a member, probing its `/readyz` every `interval`
/// meanwhile: a member that hangs mid-read (SIGSTOP, a frozen machine) is
/// reported not ready — closed, as Envoy's health check stops sending it
/// traffic — within the probe's deadline (2 s), not after the read's (10 s,
/// measured 12 s before). The read itself goes on to its own deadline, and
/// its result is dropped (`None`): a draining member must not be reopened by
/// a read that started before it drained.
async fn watched<T>(
    read: impl std::future::Future<Output = T>,
    probe: Option<&crate::discover::ReadyProbe>,
    interval: Duration,
    id: MemberId,
    address: Option<SocketAddr>,
    reports: &mpsc::Sender<Report>,
) -> Option<T> {
    let Some(probe) = probe else { return Some(read.await) };
    tokio::pin!(read);
    let mut reported = false;
    loop {
        tokio::select! {
            out = &mut read => return (!reported).then_some(out),
            _ = tokio::time::sleep(interval), if !reported => {
                if let Err(e) = probe.check().await {
                    reported = true;
                    let _ = reports.send(Report::Discovery { id, address, resolve_error: None, ready: Err(e), result: None, version: None }).await;
                }
            }
        }
    }
}

/// How long one lookup of an apiserver's host name may take.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Hostnames are re-resolved every round (IPv4 preferred, like the Envoy
/// cluster's V4_PREFERRED lookup) so a moved apiserver is followed.
async fn resolve(spec: &ApiserverSpec) -> Result<SocketAddr, String> {
    if let Some(ip) = spec.ip_address() {
        return Ok(ip);
    }
    // A resolver that does not answer must not stall this member's rounds
    // (its `/readyz` and reads wait behind the lookup).
    let lookup = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((spec.host(), spec.port())))
        .await
        .map_err(|_| format!("no answer from the resolver within {RESOLVE_TIMEOUT:?}"))?;
    let addrs: Vec<SocketAddr> = lookup.map_err(|e| e.to_string())?.collect();
    addrs.iter().find(|a| a.is_ipv4()).or_else(|| addrs.first()).copied().ok_or_else(|| "no addresses".into())
}
