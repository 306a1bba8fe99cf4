//! The ext_proc stream loop: each message Envoy sends on a stream is
//! answered by a handler, in order (one or more messages: a timeout
//! extension first, then the answer), until Envoy closes the stream or the
//! handler answers with an error (Envoy then falls back as configured).

use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingRequest;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// The response stream of one `Process` call: `ProcessingResponse`s, or
/// mvp-ext-proc's pre-encoded [`super::service::Outgoing`].
pub type Responses<T> = ReceiverStream<Result<T, Status>>;

pub fn answer_each<T, F>(mut inbound: Streaming<ProcessingRequest>, handle: F) -> Responses<T>
where
    T: Send + 'static,
    F: Fn(ProcessingRequest) -> Result<Vec<T>, Status> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let msg = match inbound.message().await {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "ext_proc stream ended with an error");
                    break;
                }
            };
            match handle(msg) {
                Ok(answers) => {
                    for a in answers {
                        if tx.send(Ok(a)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}
