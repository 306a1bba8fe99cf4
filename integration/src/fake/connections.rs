//! The fake's connections as kube-apiserver serves them: HTTP/1.1 with
//! upgrades (exec, attach, port-forward) and HTTP/2 (ALPN over TLS, prior
//! knowledge in plaintext), at most `--http2-max-streams-per-connection`
//! streams on one HTTP/2 connection (announced in SETTINGS, as kube does),
//! and counted as the apiserver sees them (`/__fake/stats`), so a test can
//! say how many connections a door in front of it costs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Result;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;

use super::state::Stats;
use super::tls::TlsServing;

/// Counts a connection open until dropped.
struct Open(Arc<Stats>);

impl Open {
    fn new(stats: &Arc<Stats>) -> Open {
        stats.connections_accepted.fetch_add(1, Ordering::Relaxed);
        stats.connections_open.fetch_add(1, Ordering::Relaxed);
        Open(stats.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `app` on every connection `listener` accepts, over TLS when
/// given; with TLS each request carries its connection's
/// [`super::auth::ConnInfo`].
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router, tls: Option<Arc<TlsServing>>, max_streams: u32, stats: Arc<Stats>) -> Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(max_streams);
    let builder = Arc::new(builder);
    loop {
        let (tcp, _) = listener.accept().await?;
        // As Go's net package sets it on every connection (kube-apiserver's
        // too): without it, a response bigger than the client's window
        // stalls on Nagle's algorithm against the client's delayed ACK,
        // 40 ms a window (a 1 GiB LIST through the door ran at 1 MiB/s).
        let _ = tcp.set_nodelay(true);
        let (tls, app, builder, stats) = (tls.clone(), app.clone(), builder.clone(), stats.clone());
        tokio::spawn(async move {
            let _open = Open::new(&stats);
            match tls {
                Some(tls) => {
                    let Some((stream, info)) = tls.accept(tcp).await else { return };
                    let svc = hyper_util::service::TowerToHyperService::new(app.layer(axum::Extension(info)));
                    let _ = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).await;
                }
                None => {
                    let svc = hyper_util::service::TowerToHyperService::new(app);
                    let _ = builder.serve_connection_with_upgrades(TokioIo::new(tcp), svc).await;
                }
            }
        });
    }
}
