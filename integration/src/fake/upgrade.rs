//! Upgraded connections (exec, attach, port-forward) on a fake apiserver.


use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;


use super::state::FakeState;
use super::resources::{echo_headers, parse_resource_path};

/// exec, attach and port-forward: the first message (WebSocket) or line
/// (any other upgrade, e.g. SPDY/3.1) names the server, the path and the
/// authenticated user; then everything the client sends is echoed back.
pub(super) async fn upgrade(s: &FakeState, user: super::auth::UserInfo, mut req: Request) -> Response {
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let sub = parse_resource_path(&parts).map(|p| p.subresource.to_string()).unwrap_or_default();
    if !matches!(sub.as_str(), "exec" | "attach" | "portforward") {
        return (StatusCode::BAD_REQUEST, "upgrade only on exec, attach, portforward\n").into_response();
    }
    let hello = json!({"server": s.name, "path": path, "user": user, "headers": echo_headers(req.headers())}).to_string();
    let is_websocket = req.headers().get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if is_websocket {
        use axum::extract::FromRequest;
        use axum::extract::ws::{Message, WebSocketUpgrade};
        let Ok(ws) = WebSocketUpgrade::from_request(req, &()).await else {
            return (StatusCode::BAD_REQUEST, "bad websocket request\n").into_response();
        };
        return ws
            .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"])
            .on_upgrade(move |mut socket| async move {
                if socket.send(Message::Text(hello.into())).await.is_err() {
                    return;
                }
                while let Some(Ok(m)) = socket.recv().await {
                    if matches!(m, Message::Close(_)) || socket.send(m).await.is_err() {
                        break;
                    }
                }
            });
    }
    let protocol = req.headers().get(header::UPGRADE).cloned().unwrap_or(HeaderValue::from_static("SPDY/3.1"));
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut io = hyper_util::rt::TokioIo::new(upgraded);
        if io.write_all(format!("{hello}\n").as_bytes()).await.is_err() {
            return;
        }
        let mut buf = [0u8; 4096];
        while let Ok(n) = io.read(&mut buf).await {
            if n == 0 || io.write_all(buf.get(..n).unwrap_or_default()).await.is_err() {
                break;
            }
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, protocol)
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
