//! kube's response shapes, as the fakes answer them: a JSON body, and the
//! `Status` object of an error.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(super) fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": {}, "code": code,
    })
}

pub(super) fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &status_json(404, "NotFound", "the server could not find the requested resource"))
}

pub(super) fn unauthorized() -> Response {
    json_response(StatusCode::UNAUTHORIZED, &status_json(401, "Unauthorized", "Unauthorized"))
}
