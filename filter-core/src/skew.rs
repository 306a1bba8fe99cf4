//! The record of a request for a skewed API (`mvp_contract::envoy::SKEW_PROPERTY`):
//! which resource, and for a bearer token the subject it claims — what
//! mvp-ext-proc counts per API and per client to say, before members leave,
//! who would lose an API (`readiness`). Only such requests pay for it: a
//! resource every apiserver serves is never marked.

use base64::Engine;
use mvp_routing::requestinfo::RouteKey;
use mvp_routing::route::Decision;
use mvp_routing::table::ServerSet;

/// The longest `sub` claim copied (a ServiceAccount's is
/// `system:serviceaccount:` + namespace and name, at most ~530 bytes).
pub const MAX_SUBJECT: usize = 600;
/// The longest bearer token looked into (kube's bound tokens are ~1 KiB).
const MAX_TOKEN: usize = 16 << 10;

/// A request for a resource that some apiservers, not all, serve — pinned
/// to them, their last resort, or the 503 while all of them are closed.
pub fn is_skewed(key: &RouteKey<'_>, decision: &Decision<'_>, all: ServerSet) -> bool {
    matches!(key, RouteKey::Resource { .. }) && decision.served_by().is_some_and(|set| set != 0 && set != all)
}

/// Writes the record: the key's label, a tab, the bearer token's claimed
/// subject (nothing if there is none).
pub fn write_record(key: &RouteKey<'_>, authorization: Option<&[u8]>, out: &mut Vec<u8>) {
    out.clear();
    key.write_label(out);
    out.push(b'\t');
    if let Some(sub) = authorization.and_then(bearer_subject) {
        out.extend_from_slice(&sub);
    }
}

/// The `sub` claim of a JWT bearer token, unverified (the apiserver
/// verifies the token; this only names who it says it is).
pub fn bearer_subject(authorization: &[u8]) -> Option<Vec<u8>> {
    let token = authorization.strip_prefix(b"Bearer ").or_else(|| authorization.strip_prefix(b"bearer "))?;
    if token.len() > MAX_TOKEN {
        return None;
    }
    let mut parts = token.split(|b| *b == b'.');
    let (_header, payload) = (parts.next()?, parts.next()?);
    parts.next()?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.strip_suffix(b"=").unwrap_or(payload)).ok()?;
    json_string_field(&json, b"sub")
}

/// The value of a top-level string field, as its bytes between the quotes
/// (escapes kept as written; a kube subject has none). `None` if absent,
/// not a string, or longer than [`MAX_SUBJECT`].
fn json_string_field(json: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let mut pattern = Vec::with_capacity(name.len() + 2);
    pattern.push(b'"');
    pattern.extend_from_slice(name);
    pattern.push(b'"');
    let at = json.windows(pattern.len()).position(|w| w == pattern.as_slice())?;
    let rest = json.get(at + pattern.len()..)?;
    let rest = rest.get(rest.iter().position(|b| !b.is_ascii_whitespace())?..)?;
    let rest = rest.strip_prefix(b":")?;
    let rest = rest.get(rest.iter().position(|b| !b.is_ascii_whitespace())?..)?;
    let rest = rest.strip_prefix(b"\"")?;
    let mut end = 0;
    let mut escaped = false;
    for (i, b) in rest.iter().enumerate() {
        match (*b, escaped) {
            (b'\\', false) => escaped = true,
            (b'"', false) => {
                end = i;
                break;
            }
            _ => escaped = false,
        }
        end = i + 1;
    }
    let value = rest.get(..end)?;
    // Control characters (a tab would split the record) or bytes that are
    // not UTF-8 (the record becomes a protobuf string): no claim.
    let clean = !value.iter().any(|b| b.is_ascii_control()) && std::str::from_utf8(value).is_ok();
    (value.len() <= MAX_SUBJECT && rest.get(end) == Some(&b'"') && clean).then(|| value.to_vec())
}

/// The `Warning` header's value for a resource only apiservers older than
/// `newest` serve, in kube's format (`299 - "…"`).
pub fn write_warning(key: &RouteKey<'_>, newest: &str, out: &mut Vec<u8>) {
    out.clear();
    let RouteKey::Resource { group, version, resource, subresource } = *key else { return };
    out.extend_from_slice(b"299 - \"");
    if !group.is_empty() {
        out.extend_from_slice(group);
        out.push(b'/');
    }
    out.extend_from_slice(version);
    out.push(b' ');
    out.extend_from_slice(resource);
    if !subresource.is_empty() {
        out.push(b'/');
        out.extend_from_slice(subresource);
    }
    out.extend_from_slice(b" is served only by kube-apiservers older than ");
    out.extend_from_slice(newest.as_bytes());
    out.extend_from_slice(b": unavailable once the upgrade to ");
    out.extend_from_slice(newest.as_bytes());
    out.extend_from_slice(b" finishes\"");
}

#[cfg(test)]
#[path = "skew_tests.rs"]
mod tests;
