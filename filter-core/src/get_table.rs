//! The refresher's `mvp.routing.v1.RoutingTableService/GetTable` call:
//! request framing and response validation.
//!
//! The call is real gRPC (HTTP/2, `application/grpc`, length-prefixed
//! messages, `grpc-status`), framed here and sent with proxy-wasm's
//! `proxy_http_call`, which reports a missing cluster as a status: a
//! misconfigured bootstrap gets a logged error, not a dead refresher VM.

use mvp_protos::routing::v1 as pb;
use prost::Message;

use mvp_contract::envoy::GET_TABLE_PATH;
pub use mvp_contract::limits::MAX_TABLE_BYTES;

use crate::host::Host;
use crate::table::{RouteTable, TableError};

pub fn request_headers(authority: &str) -> [(&str, &str); 5] {
    [
        (":method", "POST"),
        (":path", GET_TABLE_PATH),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
}

/// One uncompressed gRPC message frame holding the request: the version
/// held and how long the server may hold the call for a newer one.
pub fn request_body(known_version: u64, wait_ms: u32) -> Vec<u8> {
    let msg = pb::GetTableRequest { known_version, wait_ms }.encode_to_vec();
    let mut out = Vec::with_capacity(5 + msg.len());
    out.push(0);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

#[derive(Debug)]
pub enum GetTableError {
    HttpStatus(String),
    GrpcStatus(String, String),
    Frame(&'static str),
    Decode(prost::DecodeError),
    Table(TableError),
}

impl std::fmt::Display for GetTableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetTableError::HttpStatus(s) => write!(f, "GetTable answered HTTP status {s}"),
            GetTableError::GrpcStatus(s, m) => write!(f, "GetTable failed: grpc-status {s}: {m}"),
            GetTableError::Frame(m) => write!(f, "GetTable response is not a gRPC message: {m}"),
            GetTableError::Decode(e) => write!(f, "GetTable response does not decode: {e}"),
            GetTableError::Table(e) => write!(f, "GetTable returned an unusable table: {e}"),
        }
    }
}

/// A validated table ready to publish: its version and its encoding.
#[derive(Debug)]
pub struct NewTable {
    pub version: u64,
    pub encoded: Vec<u8>,
}

/// What a successful GetTable call answered.
#[derive(Debug)]
pub enum Answer {
    New(NewTable),
    /// The caller's table is current. `waited`: the server held the call
    /// for the whole wait (it long-polls), so asking again at once is not a
    /// busy loop.
    Current { waited: bool },
}

/// Reads and interprets the answer to the current context's GetTable call
/// (a failed call has no status and no body: an `HttpStatus` error).
pub fn read_answer<H: Host>(host: &H) -> Result<Answer, GetTableError> {
    // A trailers-only gRPC reply carries grpc-status in the headers.
    let header_or_trailer = |name| host.call_response_trailer(name).or_else(|| host.call_response_header(name));
    let status = host.call_response_header(":status");
    let grpc_status = header_or_trailer("grpc-status");
    let grpc_message = header_or_trailer("grpc-message");
    let body = host.call_response_body(MAX_TABLE_BYTES + 5);
    parse_response(status.as_deref(), grpc_status.as_deref(), grpc_message.as_deref(), &body)
}

/// Interprets a GetTable response. A table is only returned after it
/// indexed cleanly, so workers never see one they would reject.
pub fn parse_response(
    http_status: Option<&[u8]>,
    grpc_status: Option<&[u8]>,
    grpc_message: Option<&[u8]>,
    body: &[u8],
) -> Result<Answer, GetTableError> {
    let lossy = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or(b"")).into_owned();
    if http_status != Some(b"200") {
        return Err(GetTableError::HttpStatus(lossy(http_status)));
    }
    match grpc_status {
        Some(b"0") => {}
        other => return Err(GetTableError::GrpcStatus(lossy(other), lossy(grpc_message))),
    }
    let (flag, rest) = body.split_first().ok_or(GetTableError::Frame("empty body"))?;
    if *flag != 0 {
        return Err(GetTableError::Frame("compressed messages are not negotiated"));
    }
    let (len, msg) = rest.split_at_checked(4).ok_or(GetTableError::Frame("short header"))?;
    let len = u32::from_be_bytes(len.try_into().map_err(|_| GetTableError::Frame("short header"))?)
        as usize;
    if len > MAX_TABLE_BYTES {
        return Err(GetTableError::Frame("message larger than MAX_TABLE_BYTES"));
    }
    if msg.len() != len {
        return Err(GetTableError::Frame("length prefix does not match body"));
    }
    let resp = pb::GetTableResponse::decode(msg).map_err(GetTableError::Decode)?;
    let Some(table) = resp.table else {
        return Ok(Answer::Current { waited: resp.waited });
    };
    RouteTable::from_proto(&table).map_err(GetTableError::Table)?;
    Ok(Answer::New(NewTable {
        version: table.version,
        encoded: table.encode_to_vec(),
    }))
}

#[cfg(test)]
#[path = "get_table_tests.rs"]
mod tests;
