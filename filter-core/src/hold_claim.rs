//! What one held request claims of its worker's hold, and who it is — the
//! bounds both builds' holds keep (`hold.rs`, `native-filter/src/hold.rs`):
//! at most `max_held` per worker, `max_held_per_client` per client, and
//! `max_held_body_bytes` of bodies in all.
//!
//! Who one client is — the first the door knows of:
//! 1. the user of a verified client certificate (the identity header only
//!    the filter writes: clients' copies are removed before any filter);
//! 2. the request's bearer token (hashed: kept per request only, never
//!    logged);
//! 3. its source: an IPv4 address or an IPv6 /64
//!    ([`mvp_contract::clients`]) — the client's own when the listener
//!    takes the PROXY protocol from a load balancer in front.
//!
//! Behind a load balancer that hides sources (a TCP proxy, a Service's
//! SNAT) the source is every client's: keyed by it, every client was one
//! and eight requests per worker were all that could be held — a storm of
//! kubelets re-watching got the 503. Certificates and tokens tell them
//! apart through any proxy. A token is not verified by the door, so a
//! client could send a new one with every request: requests keyed by
//! anything but a verified certificate hold at most a quarter of the
//! worker's slots per source between them, and every client its own share
//! of those.
//!
//! Only computed when a request is to be held (rare): nothing per request.

use mvp_contract::limits::RETRY_BODY_BUFFER_BYTES;
use mvp_contract::plugin::HoldConfig;

use crate::host::Host;

/// One held request's claim on its worker's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Claim {
    /// Its client, hashed; 0 when the host cannot tell.
    pub client: u64,
    /// Whether `client` is a verified certificate's user.
    pub verified: bool,
    /// Its source (an IPv4 address, an IPv6 /64), hashed; 0 when unknown.
    pub source: u64,
    /// What Envoy buffers of its body while it is held: 0 without a body,
    /// else its `content-length`, else (length unknown) the most a request
    /// buffers ([`RETRY_BODY_BUFFER_BYTES`]).
    pub body_bytes: u64,
}

impl Claim {
    /// The claim of the current request. `identity_header`: where the
    /// filter forwards a verified certificate's user, when it does;
    /// `end_of_stream`: the request ended with its headers (no body).
    pub fn of_request<H: Host>(host: &H, identity_header: Option<&str>, end_of_stream: bool) -> Claim {
        // Envoy's header maps are lowercase.
        let header = |name: &str| host.request_header(&name.to_ascii_lowercase()).ok().flatten().filter(|v| !v.is_empty());
        let address = host.client_address().ok().flatten();
        let source = address.as_deref().map_or(0, source_key);
        let user = identity_header.and_then(header);
        let (client, verified) = match (user, header("authorization")) {
            (Some(user), _) => (hash(b"user\0", &user), true),
            (None, Some(auth)) => (hash(b"auth\0", &auth), false),
            (None, None) => (source, false),
        };
        let body_bytes = if end_of_stream {
            0
        } else {
            let length = header("content-length").and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<u64>().ok());
            length.unwrap_or(RETRY_BODY_BUFFER_BYTES).min(RETRY_BODY_BUFFER_BYTES)
        };
        Claim { client, verified, source, body_bytes }
    }
}

/// The source key of a downstream address (`IP:port`, `[v6]:port`):
/// [`mvp_contract::clients::client_of`], hashed; an address that does not
/// parse is hashed as it is.
pub fn source_key(address: &[u8]) -> u64 {
    let parsed = std::str::from_utf8(address).ok().and_then(|a| a.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()).or_else(|| a.parse::<std::net::IpAddr>().ok()));
    match parsed {
        Some(ip) => hash(b"ip\0", &mvp_contract::clients::client_of(ip).to_be_bytes()),
        None => hash(b"raw\0", address),
    }
}

/// FNV-1a over a domain tag and the bytes: stable, no allocation; never 0.
fn hash(tag: &[u8], bytes: &[u8]) -> u64 {
    tag.iter().chain(bytes).fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)) | 1
}

/// A worker's hold bounds, from its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_held: u32,
    pub per_client: u32,
    /// Requests not keyed by a verified certificate, per source.
    pub per_source_unverified: u32,
    pub max_body_bytes: u64,
}

impl Bounds {
    pub fn of(config: &HoldConfig) -> Bounds {
        Bounds {
            max_held: config.max_held,
            per_client: config.max_held_per_client,
            per_source_unverified: (config.max_held / 4).max(config.max_held_per_client),
            max_body_bytes: config.max_held_body_bytes,
        }
    }
}

/// Whether a worker holding `held` has room for `new`: fewer than
/// `max_held` in all; fewer than `per_client` of its client's (a client
/// the host could not tell, 0, is held up to the other bounds only); not
/// verified, fewer than `per_source_unverified` unverified ones of its
/// source; and its body within what is left of `max_body_bytes` (a request
/// without a body always fits that).
pub fn has_room<'a>(held: impl Iterator<Item = &'a Claim>, new: &Claim, b: &Bounds) -> bool {
    let (mut all, mut its, mut its_source, mut body) = (0u32, 0u32, 0u32, 0u64);
    for c in held {
        all += 1;
        its += u32::from(new.client != 0 && c.client == new.client);
        its_source += u32::from(!new.verified && new.source != 0 && !c.verified && c.source == new.source);
        body = body.saturating_add(c.body_bytes);
    }
    all < b.max_held
        && its < b.per_client
        && its_source < b.per_source_unverified
        && (new.body_bytes == 0 || body.saturating_add(new.body_bytes) <= b.max_body_bytes)
}

#[cfg(test)]
#[path = "hold_claim_tests.rs"]
mod tests;
