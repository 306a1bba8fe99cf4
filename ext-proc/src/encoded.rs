//! A body as the front door serves it: encoded once, with the gzip form
//! kube-apiserver would send for it — the merged `/apis` and the merged
//! OpenAPI documents alike.

use std::io::Write;

use bytes::Bytes;

/// kube-apiserver gzips a response only above this size
/// (`responsewriters.defaultGzipThresholdBytes`).
pub const GZIP_THRESHOLD: usize = 128 * 1024;

/// One encoding of the document, with its gzip form when kube would gzip it.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub identity: Bytes,
    pub gzip: Option<Bytes>,
}

impl Encoded {
    pub fn new(body: Vec<u8>) -> Encoded {
        Encoded::from_tail(body, 0)
    }

    /// `body` from `start` on (what precedes it is unused room).
    pub fn from_tail(body: Vec<u8>, start: usize) -> Encoded {
        let identity = tight(body);
        let identity = identity.slice(start.min(identity.len())..);
        let gzip = (identity.len() > GZIP_THRESHOLD).then(|| {
            // Level 1, as kube-apiserver gzips responses
            // (`defaultGzipContentEncodingLevel`): a fraction of level 6's CPU
            // for a similar ratio (5.5 MB CRD-heavy /apis: see docs/discovery.md).
            let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(identity.len() / 4), flate2::Compression::fast());
            // Writing into a Vec cannot fail.
            let _ = enc.write_all(&identity);
            tight(enc.finish().unwrap_or_default())
        });
        Encoded { identity, gzip }
    }
}

/// Kept for as long as the document is served: no unused capacity.
fn tight(mut v: Vec<u8>) -> Bytes {
    v.shrink_to_fit();
    Bytes::from(v)
}

