//! `grpc.health.v1.Health` on the gRPC listeners: how Envoy, given several
//! mvp-ext-proc replicas (`envoy-config --ext-proc` repeated), tells which
//! one can answer. The server as a whole (service `""`) is NOT_SERVING until
//! the first routing table *and* the first merged `/apis` are published, and
//! again from the graceful stop, so Envoy moves its ADS stream, ext_proc
//! streams and `GetTable` calls to another replica before this one's streams
//! end. The merged document is built off the sync loop, after the table: a
//! replica that served before it existed answered `/apis` exchanges with the
//! apiserver's own document (2 of ~800 in one restart on a loaded machine),
//! and the fallback filter does not ask again an answered exchange.

use std::future::Future;
use std::sync::Arc;

use mvp_protos::routing::v1 as pb;
use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::merge::MergedDocument;
use crate::stopping::Stopping;

/// The service to mount, NOT_SERVING already (tonic-health starts every
/// server SERVING: a check answered before the task ran would pass a
/// replica with no table), and the task that keeps its status.
pub async fn service(
    mut table: watch::Receiver<Arc<pb::RoutingTable>>,
    mut merged: watch::Receiver<Option<Arc<MergedDocument>>>,
    stopping: Stopping,
) -> (HealthServer<impl Health>, impl Future<Output = ()> + Send) {
    let (reporter, server) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ServingStatus::NotServing).await;
    let task = async move {
        let published = async {
            table.wait_for(|t| t.version != 0).await.is_ok() && merged.wait_for(Option::is_some).await.is_ok()
        };
        let published = tokio::select! {
            p = published => p,
            () = stopping.clone().stopped() => false,
        };
        if published {
            reporter.set_service_status("", ServingStatus::Serving).await;
        }
        stopping.stopped().await;
        reporter.set_service_status("", ServingStatus::NotServing).await;
    };
    (server, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    #[tokio::test]
    async fn not_serving_until_the_first_table_and_merged_apis_and_again_from_the_stop() {
        let (tx, rx) = watch::channel(Arc::new(pb::RoutingTable::default()));
        let (merged_tx, merged_rx) = watch::channel(None);
        let (stop, stopping) = crate::stopping::Stop::new();
        let (server, task) = service(rx, merged_rx, stopping).await;
        tokio::spawn(task);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serve = tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(serve);
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let client = HealthClient::new(channel);
        let status = |want: ServingStatus| {
            let mut client = client.clone();
            async move {
                for _ in 0..200 {
                    let got = client
                        .check(HealthCheckRequest {
                            service: String::new(),
                        })
                        .await
                        .unwrap()
                        .into_inner()
                        .status;
                    if got == want as i32 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("never {want:?}");
            }
        };
        status(ServingStatus::NotServing).await;
        tx.send_replace(Arc::new(pb::RoutingTable {
            version: 3,
            ..Default::default()
        }));
        // A table, no merged `/apis` yet: still not serving (given the
        // time to turn, were it wrong).
        tokio::time::sleep(Duration::from_millis(50)).await;
        status(ServingStatus::NotServing).await;
        merged_tx.send_replace(Some(Arc::new(MergedDocument::build(&Default::default(), &Default::default(), None))));
        status(ServingStatus::Serving).await;
        stop.stop();
        status(ServingStatus::NotServing).await;
    }
}
