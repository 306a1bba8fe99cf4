//! The merged `/openapi/v3` index (kube-openapi `handler3`, Kubernetes
//! 1.27+): `{"paths":{"apis/apps/v1":{"serverRelativeURL":
//! "/openapi/v3/apis/apps/v1?hash=…"}, …}}`, one entry per document the
//! apiserver serves under `/openapi/v3/`.
//!
//! The merged index lists every key any server lists. The front door routes
//! `/openapi/v3/{key}` to the servers whose index lists that key, so every
//! URL in it routes. A hash is an apiserver's ETag of that document, and an
//! apiserver answers another hash with a 301 to its own; so a key whose
//! servers disagree gets its URL without `hash` (no immutable caching, no
//! redirect between servers), and one they agree on keeps it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::apidiscovery::go_json;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    pub paths: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "serverRelativeURL")]
    pub server_relative_url: String,
}

impl Index {
    pub fn parse(body: &[u8]) -> Result<Index, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// kube's bytes for this index (`json.Marshal`: sorted keys, no newline).
    pub fn encode(&self) -> Vec<u8> {
        go_json(self)
    }
}

/// The union of the servers' indexes.
pub fn merge<'a>(indexes: impl IntoIterator<Item = &'a Index>) -> Index {
    let mut merged: BTreeMap<String, Entry> = BTreeMap::new();
    for index in indexes {
        for (key, entry) in &index.paths {
            match merged.get_mut(key) {
                None => {
                    merged.insert(key.clone(), entry.clone());
                }
                Some(m) if m.server_relative_url != entry.server_relative_url => {
                    m.server_relative_url = without_query(&entry.server_relative_url).to_string();
                }
                Some(_) => {}
            }
        }
    }
    Index { paths: merged }
}

fn without_query(url: &str) -> &str {
    url.split_once('?').map_or(url, |(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(entries: &[(&str, &str)]) -> Index {
        let paths = entries
            .iter()
            .map(|(k, hash)| (k.to_string(), Entry { server_relative_url: format!("/openapi/v3/{k}?hash={hash}") }))
            .collect();
        Index { paths }
    }

    #[test]
    fn union_keeps_agreed_hashes_and_drops_disputed_ones() {
        let a = index(&[("api/v1", "A1"), ("apis/apps/v1", "SAME"), ("version", "V")]);
        let b = index(&[("api/v1", "B1"), ("apis/apps/v1", "SAME"), ("apis/batch/v2alpha1", "B2")]);
        let m = merge([&a, &b]);
        let urls: Vec<(&str, &str)> = m.paths.iter().map(|(k, e)| (k.as_str(), e.server_relative_url.as_str())).collect();
        assert_eq!(
            urls,
            [
                ("api/v1", "/openapi/v3/api/v1"),
                ("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash=SAME"),
                ("apis/batch/v2alpha1", "/openapi/v3/apis/batch/v2alpha1?hash=B2"),
                ("version", "/openapi/v3/version?hash=V"),
            ]
        );
    }

    #[test]
    fn encodes_like_kube() {
        let body = br#"{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=AB"},"apis":{"serverRelativeURL":"/openapi/v3/apis?hash=CD"}}}"#;
        let index = Index::parse(body).unwrap();
        assert_eq!(index.encode(), body, "one server's index re-encodes to its own bytes (same ETag)");
        assert_eq!(merge([&index]).encode(), body);
        assert!(Index::parse(b"{\"paths\":[]}").is_err());
    }
}
