//! apiservers → discover, for `/openapi/*`: each apiserver's `/openapi/v2`
//! (JSON and protobuf) and `/openapi/v3` index, read when its API set
//! changed, after a health transition, and otherwise every
//! [`OPENAPI_REFRESH`] (a CRD's schema can change without its API set);
//! every re-read is conditional (`If-None-Match`), so an unchanged
//! document costs a 304. A document that does not parse is an error for
//! that server and keeps its last good one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Discoverer, DiscoveryError, FetchError, Fetched, ServerView};
use crate::openapi::{Document, ServerOpenApi, V2_PROTOBUF, v2, v3_index};

/// How often documents are re-read while the API set stays the same.
pub const OPENAPI_REFRESH: Duration = Duration::from_secs(30);

/// The last read: for which view, when, and what it found.
pub(super) struct OpenApiRead {
    view: Arc<ServerView>,
    at: Instant,
    docs: Arc<ServerOpenApi>,
}

impl Discoverer {
    /// Documents this server had (a member back after it departed): the
    /// next read asks whether they changed (their ETags) and keeps them —
    /// the same `Arc`s — if not.
    pub fn seed_openapi(&mut self, docs: Arc<ServerOpenApi>) {
        self.openapi = Some(OpenApiRead { view: Arc::new(ServerView::default()), at: Instant::now(), docs });
        self.force_openapi = true;
    }

    /// The apiserver's OpenAPI documents for its current `view`: the last
    /// read's (same `Arc`) while nothing is due, else re-read.
    pub async fn read_openapi(&mut self, address: Option<std::net::SocketAddr>, view: &Arc<ServerView>) -> Result<Arc<ServerOpenApi>, DiscoveryError> {
        if let Some(last) = &self.openapi
            && Arc::ptr_eq(&last.view, view)
            && last.at.elapsed() < OPENAPI_REFRESH
            && !self.force_openapi
        {
            return Ok(last.docs.clone());
        }
        let prev = self.openapi.as_ref().map(|o| o.docs.clone()).unwrap_or_default();
        let result = self.read_openapi_now(address, prev.clone()).await;
        // A failed read keeps the last good documents and is retried after
        // the refresh interval (or a health transition), not every round.
        let docs = result.as_ref().map_or(prev, Arc::clone);
        self.openapi = Some(OpenApiRead { view: view.clone(), at: Instant::now(), docs });
        self.force_openapi = false;
        result
    }

    async fn read_openapi_now(&mut self, address: Option<std::net::SocketAddr>, prev: Arc<ServerOpenApi>) -> Result<Arc<ServerOpenApi>, DiscoveryError> {
        let client = self.client(address)?;
        let check_json = |b: &[u8]| v2::merge_json(&[b]).map(drop).map_err(|e| e.to_string());
        let check_protobuf = |b: &[u8]| v2::merge_protobuf(&[b]).map(drop).map_err(|e| e.to_string());
        let v2_json = self.document(&client, "/openapi/v2", "application/json", prev.v2_json.as_ref(), check_json).await?;
        let v2_protobuf = self.document(&client, "/openapi/v2", V2_PROTOBUF, prev.v2_protobuf.as_ref(), check_protobuf).await?;
        let check_index = |b: &[u8]| v3_index::Index::parse(b).map(drop).map_err(|e| e.to_string());
        let v3_doc = self.document(&client, "/openapi/v3", "application/json", prev.v3_index.as_ref().map(|i| &i.0), check_index).await?;
        let v3_index = match (v3_doc, &prev.v3_index) {
            (None, _) => None,
            (Some(d), Some(p)) if Arc::ptr_eq(&d, &p.0) => Some(p.clone()),
            // Checked by `document`.
            (Some(d), _) => v3_index::Index::parse(&d.body).ok().map(|i| (d, Arc::new(i))),
        };
        let docs = ServerOpenApi { v2_json, v2_protobuf, v3_index };
        Ok(if docs.same(&prev) { prev } else { Arc::new(docs) })
    }

    /// One document: the previous one on a 304, `None` on a 404.
    async fn document(
        &self,
        client: &reqwest::Client,
        path: &str,
        accept: &str,
        prev: Option<&Arc<Document>>,
        check: impl Fn(&[u8]) -> Result<(), String>,
    ) -> Result<Option<Arc<Document>>, DiscoveryError> {
        let etag = prev.and_then(|p| p.etag.as_deref());
        match self.get(client, path, accept, etag).await? {
            Fetched::NotModified => Ok(prev.cloned()),
            Fetched::NotFound => Ok(None),
            // A document without an ETag (kube's `/openapi/v3` index) comes
            // whole every time: the same bytes are the same document, or
            // every read would make a new one and the merge run again.
            Fetched::Ok { body, .. } if prev.is_some_and(|p| p.body.as_ref() == body.as_slice()) => Ok(prev.cloned()),
            Fetched::Ok { body, etag, .. } => {
                check(&body).map_err(|e| DiscoveryError::Fetch { path: format!("{path} ({accept})"), source: FetchError::Invalid(e) })?;
                Ok(Some(Arc::new(Document { etag, body: Bytes::from(body) })))
            }
        }
    }
}
