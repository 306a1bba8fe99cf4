//! OpenAPI's formats and their merge, as [`crate::apidiscovery`] holds
//! discovery's: `/openapi/*` across apiservers is read with the rest of a
//! server's discovery (`discover/openapi.rs`), merged by this module's
//! [`MergedOpenApi::build`] once per change off the loop (its plane:
//! `merge/openapi_plane.rs`), and answered by Envoy's ext_proc
//! (`rewrite/openapi.rs`). `/openapi/v3/{key}` documents are not
//! merged: the wasm filter routes each to the servers whose index lists the
//! key (the routing table's `openapi_v3` entries).
//!
//! The same three stages as `/apis`, each where its kind lives: reading
//! with the rest of a server's discovery (the `Discoverer`'s own requests,
//! ETags and deadline), merging in the merged documents' planes, answering
//! with the rest of Envoy's ext_proc exchanges.
//!
//! kube's own Mixed Version Proxy serves `/openapi/*` locally; a client of a
//! mixed control plane then sees one server's schemas (`kubectl explain`
//! fails for a type only another server has). Here every schema is there.

pub mod protowire;
pub mod v2;
pub mod v3_index;

use std::sync::Arc;

use bytes::Bytes;

use crate::apidiscovery::etag::quoted_sha512;
use crate::encoded::Encoded;

/// The protobuf form of `/openapi/v2` (kubectl's `Accept`).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// One document as an apiserver sent it.
#[derive(Debug, PartialEq, Eq)]
pub struct Document {
    /// Its `ETag` header, as sent (quoted).
    pub etag: Option<String>,
    pub body: Bytes,
}

/// What one apiserver serves of OpenAPI; each part is kept while the
/// apiserver answers it unchanged (304), so pointer equality means
/// unchanged.
#[derive(Debug, Default)]
pub struct ServerOpenApi {
    pub v2_json: Option<Arc<Document>>,
    pub v2_protobuf: Option<Arc<Document>>,
    /// Servers before 1.27 (v3 off or absent) have none.
    pub v3_index: Option<(Arc<Document>, Arc<v3_index::Index>)>,
}

impl ServerOpenApi {
    pub fn same(&self, other: &ServerOpenApi) -> bool {
        use crate::building::unchanged::same as eq;
        let v3 = |s: &ServerOpenApi| s.v3_index.as_ref().map(|i| i.0.clone());
        eq(&self.v2_json, &other.v2_json) && eq(&self.v2_protobuf, &other.v2_protobuf) && eq(&v3(self), &v3(other))
    }

    /// The keys of its `/openapi/v3` index (routing).
    pub fn v3_keys(&self) -> impl Iterator<Item = &str> {
        self.v3_index.iter().flat_map(|i| i.1.paths.keys().map(String::as_str))
    }
}

/// One merged document, ready to send.
#[derive(Debug)]
pub struct Merged {
    /// Quoted, kube's formula (uppercase hex SHA-512 of the bytes); equal
    /// to an apiserver's own when the merge is that server's document.
    pub etag: String,
    pub body: Encoded,
}

impl Merged {
    fn new(body: Vec<u8>) -> Merged {
        Merged { etag: quoted_sha512(&body), body: Encoded::new(body) }
    }
}

/// Every merged OpenAPI document; `None` where no apiserver serves it.
#[derive(Debug, Default)]
pub struct MergedOpenApi {
    pub v2_json: Option<Merged>,
    pub v2_protobuf: Option<Merged>,
    pub v3_index: Option<Merged>,
    /// Apiservers merged, newest release first.
    pub sources: Vec<String>,
}

impl MergedOpenApi {
    /// Merges what `servers` serve (in their configured order). CPU-bound
    /// (megabytes per document): call it off the async runtime.
    pub fn build(servers: &[(String, Arc<ServerOpenApi>)]) -> MergedOpenApi {
        let mut ordered: Vec<&(String, Arc<ServerOpenApi>)> = servers.iter().collect();
        // Newest release first; a stable sort keeps the configured order
        // between equal releases.
        ordered.sort_by_cached_key(|(_, s)| std::cmp::Reverse(s.v2_json.as_ref().map(|d| v2::release(&d.body)).unwrap_or_default()));
        let form = |pick: fn(&ServerOpenApi) -> Option<&Arc<Document>>, merge: v2::Merge| {
            let docs: Vec<&[u8]> = ordered.iter().filter_map(|(_, s)| pick(s)).map(|d| &d.body[..]).collect();
            match merge(&docs) {
                Ok(Some(body)) => Some(Merged::new(body)),
                Ok(None) => docs.first().map(|d| Merged::new(d.to_vec())),
                Err(v2::MergeError::Empty) => None,
                Err(e) => {
                    // Each document was checked when it was read.
                    tracing::error!(error = %e, "OpenAPI v2 documents do not merge; serving each apiserver's own");
                    None
                }
            }
        };
        let v3: Vec<&v3_index::Index> = ordered.iter().filter_map(|(_, s)| s.v3_index.as_ref()).map(|i| &*i.1).collect();
        MergedOpenApi {
            v2_json: form(|s| s.v2_json.as_ref(), v2::merge_json),
            v2_protobuf: form(|s| s.v2_protobuf.as_ref(), v2::merge_protobuf),
            v3_index: (!v3.is_empty()).then(|| Merged::new(v3_index::merge(v3).encode())),
            sources: ordered.iter().map(|(n, _)| n.clone()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(json: &str, index: Option<&str>) -> Arc<ServerOpenApi> {
        let doc = |b: &str| Some(Arc::new(Document { etag: None, body: Bytes::from(b.to_string()) }));
        Arc::new(ServerOpenApi {
            v2_json: doc(json),
            v2_protobuf: None,
            v3_index: index.map(|i| (Arc::new(Document { etag: None, body: Bytes::from(i.to_string()) }), Arc::new(v3_index::Index::parse(i.as_bytes()).unwrap()))),
        })
    }

    #[test]
    fn newest_release_is_the_base_and_a_lone_document_keeps_its_etag() {
        let old = r#"{"info":{"version":"v1.20.2"},"definitions":{"P":{"d":"old"},"O":{}}}"#;
        let new = r#"{"info":{"version":"v1.21.0"},"definitions":{"P":{"d":"new"}}}"#;
        let m = MergedOpenApi::build(&[("old".into(), server(old, None)), ("new".into(), server(new, None))]);
        assert_eq!(m.sources, ["new", "old"]);
        let json: serde_json::Value = serde_json::from_slice(&m.v2_json.as_ref().unwrap().body.identity).unwrap();
        assert_eq!(json["definitions"]["P"]["d"], "new");
        assert!(json["definitions"]["O"].is_object());
        assert!(m.v2_protobuf.is_none() && m.v3_index.is_none());

        let alone = MergedOpenApi::build(&[("old".into(), server(old, None))]);
        assert_eq!(alone.v2_json.unwrap().etag, quoted_sha512(old.as_bytes()));
    }

    #[test]
    fn v3_index_only_from_servers_that_have_one() {
        let index = r#"{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=A"}}}"#;
        let m = MergedOpenApi::build(&[("a".into(), server("{}", Some(index))), ("b".into(), server("{}", None))]);
        let merged = m.v3_index.unwrap();
        assert_eq!(&merged.body.identity[..], index.as_bytes());
        assert_eq!(merged.etag, quoted_sha512(index.as_bytes()));
    }
}
