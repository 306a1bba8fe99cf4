//! table → publish: serves `mvp.routing.v1.RoutingTableService` to the wasm
//! refresher in Envoy.

use std::sync::Arc;

use mvp_protos::routing::v1 as pb;
use pb::routing_table_service_server::{RoutingTableService, RoutingTableServiceServer};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::metrics::Metrics;

pub struct TableService {
    table: watch::Receiver<Arc<pb::RoutingTable>>,
    metrics: Arc<Metrics>,
}

impl TableService {
    pub fn server(table: watch::Receiver<Arc<pb::RoutingTable>>, metrics: Arc<Metrics>) -> RoutingTableServiceServer<TableService> {
        // The refresher accepts tables up to this size.
        RoutingTableServiceServer::new(TableService { table, metrics })
            .max_encoding_message_size(mvp_contract::limits::MAX_TABLE_BYTES)
    }
}

#[tonic::async_trait]
impl RoutingTableService for TableService {
    async fn get_table(&self, request: Request<pb::GetTableRequest>) -> Result<Response<pb::GetTableResponse>, Status> {
        let current = self.table.borrow().clone();
        if current.version == 0 {
            self.metrics.table_request("unavailable");
            return Err(Status::unavailable("no routing table yet: the first discovery round is still running"));
        }
        let table = if request.get_ref().known_version == current.version {
            self.metrics.table_request("current");
            None
        } else {
            self.metrics.table_request("sent");
            Some((*current).clone())
        };
        Ok(Response::new(pb::GetTableResponse { table }))
    }
}
