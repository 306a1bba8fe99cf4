//! kube-apiserver's discovery ETag (`aggregated/etag.go`): `"` + uppercase
//! hex SHA-512 of Go's JSON of the `APIGroupDiscoveryList` without TypeMeta
//! (`{"metadata":{},"items":[…]}`) + `"`. Identical for every encoding of the
//! document, hence `Vary: Accept`.

use sha2::{Digest, Sha512};

use super::{API_VERSION, APIGroupDiscovery, APIGroupDiscoveryList, KIND, go_json};

/// The ETag of a list of groups.
pub fn etag(items: &[APIGroupDiscovery]) -> String {
    let list = APIGroupDiscoveryList { items: items.to_vec(), ..Default::default() };
    quoted_sha512(&go_json(&list))
}

/// The same ETag from the list's Go JSON *with* TypeMeta — the document as
/// served — without cloning the groups or encoding them a second time
/// (for a CRD-heavy cluster both cost tens of milliseconds): Go writes
/// TypeMeta's fields first, so the hashed form is `{` followed by what comes
/// after them (without the newline Go's encoder ends a body with). `None` if
/// `json` does not start that way.
pub fn of_served_json(json: &[u8]) -> Option<String> {
    let type_meta = format!(r#"{{"kind":"{KIND}","apiVersion":"{API_VERSION}","#);
    let rest = json.strip_prefix(type_meta.as_bytes())?;
    let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
    let mut h = Sha512::new();
    h.update(b"{");
    h.update(rest);
    Some(format!("\"{}\"", hex::encode_upper(h.finalize())))
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

    #[test]
    fn from_the_served_json_it_is_the_same_etag() {
        let apis = crate::testdata::fixture("v1.37", "apis.json");
        let doc: APIGroupDiscoveryList = serde_json::from_slice(&apis).unwrap();
        let served = APIGroupDiscoveryList { kind: KIND.into(), api_version: API_VERSION.into(), ..doc.clone() };
        assert_eq!(of_served_json(&go_json(&served)), Some(etag(&doc.items)));
        let mut body = go_json(&served);
        body.push(b'\n');
        assert_eq!(of_served_json(&body), Some(etag(&doc.items)), "as sent, newline included");
        let bare = APIGroupDiscoveryList { kind: String::new(), api_version: String::new(), ..doc };
        assert_eq!(of_served_json(&go_json(&bare)), None, "no TypeMeta: not the served form");
    }
}
