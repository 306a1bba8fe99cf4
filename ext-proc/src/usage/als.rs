//! Envoy's gRPC access log service (`envoy.service.accesslog.v3`), for the
//! skew log `envoy-config` renders (`envoy_config::skew_log`): each entry a
//! request the filter marked, turned into a [`Use`] and counted. Envoy
//! streams entries and expects no answer; a stream that sends nonsense is
//! counted as what it is — entries without the record are skipped.

use std::sync::Arc;
use std::time::SystemTime;

use envoy_types::pb::envoy::config::core::v3::{Address, address, socket_address};
use envoy_types::pb::envoy::data::accesslog::v3::HttpAccessLogEntry;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server::{AccessLogService, AccessLogServiceServer};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::LogEntries;
use envoy_types::pb::envoy::service::accesslog::v3::{StreamAccessLogsMessage, StreamAccessLogsResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use mvp_contract::envoy::{SKEW_FILTER_STATE, SKEW_METADATA_KEY, SKEW_METADATA_NAMESPACE};
use prost::Message;

use super::verify::{Bearer, Verifier};
use crate::stopping::Stopping;
use super::{Use, Who};

pub struct SkewLog {
    verifier: Arc<Verifier>,
    username_header: String,
    group_header: String,
    stopping: Stopping,
}

impl SkewLog {
    /// `username_header`, `group_header`: the requestheader names the
    /// front door forwards identity under (the log's request headers).
    pub fn server(verifier: Arc<Verifier>, username_header: &str, group_header: &str, stopping: Stopping) -> AccessLogServiceServer<SkewLog> {
        AccessLogServiceServer::new(SkewLog { verifier, username_header: username_header.to_ascii_lowercase(), group_header: group_header.to_ascii_lowercase(), stopping })
    }
}

#[tonic::async_trait]
impl AccessLogService for SkewLog {
    async fn stream_access_logs(&self, request: tonic::Request<tonic::Streaming<StreamAccessLogsMessage>>) -> Result<tonic::Response<StreamAccessLogsResponse>, tonic::Status> {
        let mut stream = request.into_inner();
        // Envoy's log stream never ends on its own: at the stop it ends
        // here, as the ADS streams do (`crate::stopping`) — Envoy opens a
        // new one, to another replica or the restarted process, for its
        // next entries — instead of holding the drain to its limit.
        let stopped = self.stopping.clone().stopped();
        tokio::pin!(stopped);
        loop {
            let message = tokio::select! {
                m = stream.message() => m?,
                () = &mut stopped => return Err(tonic::Status::unavailable("mvp-ext-proc is stopping")),
            };
            let Some(message) = message else { break };
            let Some(LogEntries::HttpLogs(entries)) = message.log_entries else { continue };
            for entry in &entries.log_entry {
                if let Some(u) = use_of(entry, &self.username_header, &self.group_header) {
                    self.verifier.count(u);
                }
            }
        }
        Ok(tonic::Response::new(StreamAccessLogsResponse {}))
    }
}

/// The record the filter set (`label \t subject`): dynamic metadata from
/// the native build, filter state from the wasm build.
fn record(entry: &HttpAccessLogEntry) -> Option<String> {
    let common = entry.common_properties.as_ref()?;
    let from_metadata = common
        .metadata
        .as_ref()
        .and_then(|m| m.filter_metadata.get(SKEW_METADATA_NAMESPACE))
        .and_then(|s| s.fields.get(SKEW_METADATA_KEY))
        .and_then(|v| match &v.kind {
            Some(Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        });
    // A filter-state object logs as an `Any` of a StringValue or
    // BytesValue: both a length-delimited field 1.
    from_metadata.or_else(|| {
        let any = common.filter_state_objects.get(SKEW_FILTER_STATE)?;
        let bytes = Vec::<u8>::decode(any.value.as_slice()).ok()?;
        String::from_utf8(bytes).ok()
    })
}

/// The request header the skew log carries the client's token in (for its
/// review: `super::verify`).
pub const AUTHORIZATION: &str = "authorization";

fn ip(a: &Option<Address>) -> Option<String> {
    match a.as_ref()?.address.as_ref()? {
        address::Address::SocketAddress(s) => Some(s.address.clone()),
        _ => None,
    }
}

fn ip_port(a: &Option<Address>) -> Option<String> {
    match a.as_ref()?.address.as_ref()? {
        address::Address::SocketAddress(s) => match s.port_specifier {
            Some(socket_address::PortSpecifier::PortValue(p)) if s.address.contains(':') => Some(format!("[{}]:{p}", s.address)),
            Some(socket_address::PortSpecifier::PortValue(p)) => Some(format!("{}:{p}", s.address)),
            _ => Some(s.address.clone()),
        },
        _ => None,
    }
}

/// The answer of a request whose credentials the cluster refused: 401 (no
/// identity it accepts). Not a use of the API — that client loses nothing
/// when the API goes — and anyone can send such requests, with any token
/// and any subject in it: counted, they would fill the counts' bounds and
/// name whom they like. (A 403 is counted: an identity the cluster
/// accepted, whose RBAC the API's going would not fix.)
const REFUSED: u32 = 401;

/// One entry as a [`Use`]; `None` for an entry without the record (the
/// wasm build's log also takes requests pinned only because a member is
/// closed) and for a request whose credentials were refused ([`REFUSED`]).
pub fn use_of(entry: &HttpAccessLogEntry, username_header: &str, group_header: &str) -> Option<Use> {
    if entry.response.as_ref().and_then(|r| r.response_code).is_some_and(|c| c.value == REFUSED) {
        return None;
    }
    let record = record(entry)?;
    let (api, subject) = record.split_once('\t').unwrap_or((record.as_str(), ""));
    if api.is_empty() {
        return None;
    }
    let common = entry.common_properties.as_ref()?;
    let request = entry.request.as_ref();
    let header = |name: &str| request.and_then(|r| r.request_headers.get(name)).filter(|v| !v.is_empty());
    let who = match (header(username_header), subject) {
        (Some(user), _) => Who::Certificate { user: user.clone(), groups: header(group_header).map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default() },
        (None, "") => Who::Unidentified,
        (None, subject) => Who::TokenClaim { subject: subject.to_string() },
    };
    let at = common
        .start_time
        .as_ref()
        .and_then(|t| SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::new(u64::try_from(t.seconds).ok()?, u32::try_from(t.nanos).ok()?)))
        .unwrap_or_else(SystemTime::now);
    Some(Use {
        api: api.to_string(),
        who,
        user_agent: request.map(|r| r.user_agent.clone()).unwrap_or_default(),
        source: ip(&common.downstream_remote_address).unwrap_or_default(),
        answered_by: ip_port(&common.upstream_remote_address),
        at,
        token: header(AUTHORIZATION).and_then(|v| Bearer::from_header(v)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::{Metadata, SocketAddress};
    use envoy_types::pb::envoy::data::accesslog::v3::{AccessLogCommon, HttpRequestProperties, HttpResponseProperties};
    use envoy_types::pb::google::protobuf::{Any, Struct, UInt32Value, Value};

    fn addr(ip: &str, port: u32) -> Option<Address> {
        Some(Address { address: Some(address::Address::SocketAddress(SocketAddress { address: ip.into(), port_specifier: Some(socket_address::PortSpecifier::PortValue(port)), ..Default::default() })) })
    }

    fn entry(metadata: Option<&str>, state: Option<&str>, headers: &[(&str, &str)]) -> HttpAccessLogEntry {
        let mut common = AccessLogCommon { downstream_remote_address: addr("10.1.2.3", 50000), upstream_remote_address: addr("10.0.0.2", 6443), ..Default::default() };
        if let Some(m) = metadata {
            let fields = [(SKEW_METADATA_KEY.to_string(), Value { kind: Some(Kind::StringValue(m.into())) })].into_iter().collect();
            common.metadata = Some(Metadata { filter_metadata: [(SKEW_METADATA_NAMESPACE.to_string(), Struct { fields })].into_iter().collect(), ..Default::default() });
        }
        if let Some(s) = state {
            common.filter_state_objects.insert(SKEW_FILTER_STATE.into(), Any { type_url: "type.googleapis.com/google.protobuf.StringValue".into(), value: s.to_string().encode_to_vec() });
        }
        HttpAccessLogEntry {
            common_properties: Some(common),
            request: Some(HttpRequestProperties { user_agent: "kubectl/v1.37.2".into(), request_headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn reads_either_builds_record_and_who_sent_it() {
        let native = use_of(&entry(Some("apps/v1/deployments\tsystem:serviceaccount:a:b"), None, &[]), "x-remote-user", "x-remote-group").unwrap();
        assert_eq!(native.api, "apps/v1/deployments");
        assert_eq!(native.who, Who::TokenClaim { subject: "system:serviceaccount:a:b".into() });
        assert_eq!((native.source.as_str(), native.answered_by.as_deref(), native.user_agent.as_str()), ("10.1.2.3", Some("10.0.0.2:6443"), "kubectl/v1.37.2"));
        // The certificate's user wins over a token claim (the door forwards
        // only the verified identity).
        let wasm = use_of(&entry(None, Some("v1/pods/log\tsomeone"), &[("x-remote-user", "alice"), ("x-remote-group", "dev,ops")]), "x-remote-user", "x-remote-group").unwrap();
        assert_eq!((wasm.api.as_str(), wasm.who), ("v1/pods/log", Who::Certificate { user: "alice".into(), groups: vec!["dev".into(), "ops".into()] }));
        let nobody = use_of(&entry(Some("batch/v1/jobs\t"), None, &[]), "x-remote-user", "x-remote-group").unwrap();
        assert_eq!((nobody.who, nobody.token), (Who::Unidentified, None));
        // The token, for its review.
        let token = use_of(&entry(Some("batch/v1/jobs\t"), None, &[("authorization", "Bearer abc")]), "x-remote-user", "x-remote-group").unwrap();
        assert_eq!(token.token, Bearer::from_header("Bearer abc"));
        // Credentials refused: not a use (anyone can send those).
        let mut refused = entry(Some("batch/v1/jobs\tsystem:serviceaccount:kube-system:x"), None, &[]);
        refused.response = Some(HttpResponseProperties { response_code: Some(UInt32Value { value: 401 }), ..Default::default() });
        assert_eq!(use_of(&refused, "x-remote-user", "x-remote-group"), None);
        let mut served = entry(Some("batch/v1/jobs\t"), None, &[]);
        for code in [200, 403, 404, 503] {
            served.response = Some(HttpResponseProperties { response_code: Some(UInt32Value { value: code }), ..Default::default() });
            assert!(use_of(&served, "x-remote-user", "x-remote-group").is_some(), "{code}");
        }
        // No record (the wasm log's pinned-but-not-skewed request): skipped.
        assert_eq!(use_of(&entry(None, None, &[]), "x-remote-user", "x-remote-group"), None);
        assert_eq!(use_of(&entry(Some("\tx"), None, &[]), "x-remote-user", "x-remote-group"), None);
    }
}
