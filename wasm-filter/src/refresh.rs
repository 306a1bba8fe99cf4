//! The refresher's side of `mvp.routing.v1.RoutingTableService/GetTable`.
//!
//! The call is real gRPC (HTTP/2, `application/grpc`, length-prefixed
//! messages, `grpc-status`), sent with proxy-wasm's `dispatch_http_call`:
//! unlike `dispatch_grpc_call`, that host call reports a missing cluster as an
//! error instead of panicking inside the SDK, so a misconfigured bootstrap
//! cannot kill the refresher VM.

use mvp_protos::routing::v1 as pb;
use prost::Message;

use crate::table::{RouteTable, TableError};

pub const PATH: &str = "/mvp.routing.v1.RoutingTableService/GetTable";

/// Upper bound on a table we accept (a 5,000-resource table is ~200 KiB).
pub const MAX_TABLE_BYTES: usize = 16 << 20;

pub fn request_headers(authority: &str) -> [(&str, &str); 5] {
    [
        (":method", "POST"),
        (":path", PATH),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
}

/// One uncompressed gRPC message frame holding the request.
pub fn request_body(known_version: u64) -> Vec<u8> {
    let msg = pb::GetTableRequest { known_version }.encode_to_vec();
    let mut out = Vec::with_capacity(5 + msg.len());
    out.push(0);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

#[derive(Debug)]
pub enum RefreshError {
    HttpStatus(String),
    GrpcStatus(String, String),
    Frame(&'static str),
    Decode(prost::DecodeError),
    Table(TableError),
}

impl std::fmt::Display for RefreshError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefreshError::HttpStatus(s) => write!(f, "GetTable answered HTTP status {s}"),
            RefreshError::GrpcStatus(s, m) => write!(f, "GetTable failed: grpc-status {s}: {m}"),
            RefreshError::Frame(m) => write!(f, "GetTable response is not a gRPC message: {m}"),
            RefreshError::Decode(e) => write!(f, "GetTable response does not decode: {e}"),
            RefreshError::Table(e) => write!(f, "GetTable returned an unusable table: {e}"),
        }
    }
}

/// A validated table ready to publish: its version and its encoding.
#[derive(Debug)]
pub struct NewTable {
    pub version: u64,
    pub encoded: Vec<u8>,
}

/// Interprets a GetTable response. `Ok(None)` means the caller's table is
/// current. A table is only returned after it indexed cleanly, so workers
/// never see one they would reject.
pub fn parse_response(
    http_status: Option<&[u8]>,
    grpc_status: Option<&[u8]>,
    grpc_message: Option<&[u8]>,
    body: &[u8],
) -> Result<Option<NewTable>, RefreshError> {
    let lossy = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or(b"")).into_owned();
    if http_status != Some(b"200") {
        return Err(RefreshError::HttpStatus(lossy(http_status)));
    }
    match grpc_status {
        Some(b"0") => {}
        other => return Err(RefreshError::GrpcStatus(lossy(other), lossy(grpc_message))),
    }
    let (flag, rest) = body.split_first().ok_or(RefreshError::Frame("empty body"))?;
    if *flag != 0 {
        return Err(RefreshError::Frame("compressed messages are not negotiated"));
    }
    let (len, msg) = rest.split_at_checked(4).ok_or(RefreshError::Frame("short header"))?;
    let len = u32::from_be_bytes(len.try_into().map_err(|_| RefreshError::Frame("short header"))?)
        as usize;
    if len > MAX_TABLE_BYTES {
        return Err(RefreshError::Frame("message larger than MAX_TABLE_BYTES"));
    }
    if msg.len() != len {
        return Err(RefreshError::Frame("length prefix does not match body"));
    }
    let resp = pb::GetTableResponse::decode(msg).map_err(RefreshError::Decode)?;
    let Some(table) = resp.table else {
        return Ok(None);
    };
    RouteTable::from_proto(&table).map_err(RefreshError::Table)?;
    Ok(Some(NewTable {
        version: table.version,
        encoded: table.encode_to_vec(),
    }))
}

pub fn encode_version(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

pub fn decode_version(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

#[cfg(test)]
#[path = "refresh_tests.rs"]
mod tests;
