//! kube-apiserver's discovery ETag (`aggregated/etag.go`): `"` + uppercase
//! hex SHA-512 of Go's JSON of the `APIGroupDiscoveryList` without TypeMeta
//! (`{"metadata":{},"items":[…]}`) + `"`. Identical for every encoding of the
//! document, hence `Vary: Accept`.

use sha2::{Digest, Sha512};

use super::{APIGroupDiscovery, APIGroupDiscoveryList, go_json};

/// The ETag of a list of groups.
pub fn etag(items: &[APIGroupDiscovery]) -> String {
    let list = APIGroupDiscoveryList { items: items.to_vec(), ..Default::default() };
    quoted_sha512(&go_json(&list))
}

/// The formula itself, over the bytes kube hashes.
pub fn quoted_sha512(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode_upper(Sha512::digest(bytes)))
}

/// kube compares `If-None-Match` with the quoted ETag as one plain string:
/// no list, no weak `W/` form, no `*`.
pub fn matches(if_none_match: Option<&str>, etag: &str) -> bool {
    if_none_match == Some(etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_strict_matching() {
        let e = etag(&[]);
        // SHA-512 of `{"metadata":{},"items":[]}`.
        assert_eq!(e.len(), 130);
        assert_eq!(
            e,
            format!("\"{}\"", hex::encode_upper(Sha512::digest(br#"{"metadata":{},"items":[]}"#)))
        );
        assert!(matches(Some(&e), &e));
        assert!(!matches(Some(&format!("W/{e}")), &e));
        assert!(!matches(Some(&format!("{e}, \"x\"")), &e));
        assert!(!matches(Some("*"), &e));
        assert!(!matches(None, &e));
    }
}
