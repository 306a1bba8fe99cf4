//! Go `encoding/json`'s bytes for a serde value.

use serde::Serialize;

/// Go `encoding/json` output: serde_json's, plus the HTML-safe escapes Go
/// applies inside strings (`<`, `>`, `&`, U+2028, U+2029). Those characters
/// can only occur inside strings in JSON, so a byte-level rewrite is exact.
pub fn go_json<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    go_json_into(&mut out, v);
    out
}

/// [`go_json`] appended to `out` (nothing on a serialization error, which
/// the discovery types cannot have).
pub fn go_json_into<T: Serialize>(out: &mut Vec<u8>, v: &T) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, v).is_err() {
        out.truncate(start);
        return;
    }
    let escape = out.get(start..).is_some_and(|raw| raw.iter().any(|b| matches!(b, b'<' | b'>' | b'&' | 0xE2)));
    if !escape {
        return;
    }
    let raw = out.split_off(start);
    out.reserve(raw.len() + 16);
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'<' => out.extend_from_slice(b"\\u003c"),
            b'>' => out.extend_from_slice(b"\\u003e"),
            b'&' => out.extend_from_slice(b"\\u0026"),
            0xE2 if raw.get(i + 1) == Some(&0x80) && matches!(raw.get(i + 2), Some(0xA8 | 0xA9)) => {
                out.extend_from_slice(if raw.get(i + 2) == Some(&0xA8) { b"\\u2028" } else { b"\\u2029" });
                i += 3;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apidiscovery::*;

    #[test]
    fn serialises_like_go() {
        let g = APIGroupDiscovery {
            metadata: ObjectMeta { name: "apps".into() },
            versions: vec![APIVersionDiscovery {
                version: "v1".into(),
                resources: vec![APIResourceDiscovery {
                    resource: "deployments".into(),
                    response_kind: Some(GroupVersionKind { group: "".into(), version: "".into(), kind: "Deployment".into() }),
                    scope: "Namespaced".into(),
                    singular_resource: "deployment".into(),
                    verbs: None,
                    short_names: vec![],
                    categories: vec!["a<b>&c".into()],
                    subresources: vec![],
                }],
                freshness: "Current".into(),
            }],
        };
        let list = APIGroupDiscoveryList { items: vec![g, APIGroupDiscovery::default()], ..Default::default() };
        assert_eq!(
            String::from_utf8(go_json(&list)).unwrap(),
            r#"{"metadata":{},"items":[{"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[{"resource":"deployments","responseKind":{"group":"","version":"","kind":"Deployment"},"scope":"Namespaced","singularResource":"deployment","verbs":null,"categories":["a\u003cb\u003e\u0026c"]}],"freshness":"Current"}]},{"metadata":{}}]}"#
        );
    }
}
