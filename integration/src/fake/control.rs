//! The fake's test-control endpoints (`/__fake/*`): switch release or
//! documents at runtime, read the request counters.


use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::fixtures::Documents;
use super::responses::json_response;
use super::state::FakeState;

#[derive(serde::Deserialize)]
pub(super) struct ReleaseQuery {
    name: String,
}

/// Test control: serve another release's documents from now on.
pub(super) async fn set_release(State(s): State<FakeState>, Query(q): Query<ReleaseQuery>) -> Response {
    match Documents::load(&s.fixtures, &q.name) {
        Ok(d) => {
            *s.docs.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
            (StatusCode::OK, format!("now serving {}\n", q.name)).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
    }
}

/// Test control: serve arbitrary aggregated documents
/// `{"api": …, "apis": …, "apiV1": …}` from now on.
pub(super) async fn set_documents(State(s): State<FakeState>, body: Bytes) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let result = parsed.map_err(anyhow::Error::from).and_then(|v| {
        let release = s.docs().release.clone();
        Documents::from_values(&release, v["api"].clone(), v["apis"].clone(), v["apiV1"].clone())
    });
    match result {
        Ok(d) => {
            *s.docs.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
            (StatusCode::OK, "documents replaced\n").into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
    }
}

pub(super) async fn stats(State(s): State<FakeState>) -> Response {
    let st = &s.stats;
    json_response(
        StatusCode::OK,
        &json!({
            "aggregatedOk": st.aggregated_ok.load(Ordering::Relaxed),
            "notModified": st.not_modified.load(Ordering::Relaxed),
            "resourceRequests": st.resource_requests.load(Ordering::Relaxed),
            "listRequests": st.list_requests.load(Ordering::Relaxed),
            "groupVersionRequests": st.group_version_requests.load(Ordering::Relaxed),
            "hung": st.hung.load(Ordering::Relaxed),
            "connectionsAccepted": st.connections_accepted.load(Ordering::Relaxed),
            "connectionsOpen": st.connections_open.load(Ordering::Relaxed),
            "watchEvents": st.watch_events.load(Ordering::Relaxed),
            "profileRequests": st.profile_requests.load(Ordering::Relaxed),
        }),
    )
}

#[derive(serde::Deserialize)]
pub(super) struct OverrideQuery {
    status: Option<u16>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    #[serde(default)]
    flapping_etag: bool,
}

/// Test control: `/apis` answers `body` (with `?status=`, `?content_type=`,
/// default 200 and the aggregated v2 type, `?content_encoding=`,
/// `?flapping_etag=true`) until DELETE.
pub(super) async fn set_apis_body(State(s): State<FakeState>, Query(q): Query<OverrideQuery>, body: Bytes) -> Response {
    let o = super::state::ApisOverride {
        body,
        status: q.status.unwrap_or(200),
        content_type: q.content_type.unwrap_or_else(|| super::state::AGGREGATED_V2.to_string()),
        content_encoding: q.content_encoding,
        flapping_etag: q.flapping_etag,
    };
    *s.apis_override.write().unwrap_or_else(|p| p.into_inner()) = Some(o);
    "apis body overridden\n".into_response()
}

pub(super) async fn clear_apis_body(State(s): State<FakeState>) -> Response {
    *s.apis_override.write().unwrap_or_else(|p| p.into_inner()) = None;
    "apis body restored\n".into_response()
}

/// Test control: discovery hangs (POST) or answers again (DELETE).
pub(super) async fn hang_discovery(State(s): State<FakeState>) -> Response {
    s.hang_discovery.store(true, Ordering::Relaxed);
    "discovery hangs\n".into_response()
}

pub(super) async fn answer_discovery(State(s): State<FakeState>) -> Response {
    s.hang_discovery.store(false, Ordering::Relaxed);
    "discovery answers\n".into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct GroupVersionQuery {
    #[serde(rename = "groupVersion")]
    group_version: String,
}

/// Test control: a group-version's backend goes down (POST) or comes back
/// (DELETE), as an aggregated APIService's does.
pub(super) async fn make_unavailable(State(s): State<FakeState>, Query(q): Query<GroupVersionQuery>) -> Response {
    let mut down = s.unavailable.write().unwrap_or_else(|p| p.into_inner());
    if !down.contains(&q.group_version) {
        down.push(q.group_version.clone());
    }
    format!("{} unavailable\n", q.group_version).into_response()
}

pub(super) async fn make_available(State(s): State<FakeState>, Query(q): Query<GroupVersionQuery>) -> Response {
    s.unavailable.write().unwrap_or_else(|p| p.into_inner()).retain(|gv| *gv != q.group_version);
    format!("{} available\n", q.group_version).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct FailQuery {
    count: u64,
    #[serde(default)]
    how: super::state::FailHow,
}

/// Test control: it has finished starting (`--starting-for`): `/readyz`
/// answers 200 from now on.
pub(super) async fn started(State(s): State<FakeState>) -> Response {
    *s.starting_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    "started\n".into_response()
}

/// Test control: the next `count` resource requests fail `how`.
pub(super) async fn fail_next(State(s): State<FakeState>, Query(q): Query<FailQuery>) -> Response {
    *s.fail_next.lock().unwrap_or_else(|p| p.into_inner()) = (q.count, q.how);
    format!("the next {} resource requests fail: {:?}\n", q.count, q.how).into_response()
}
