//! etcdserverpb.Watch: etcd's Watch streams, one task per stream, served from this
//! node's applied state.
//!
//! A [`WatchStream`] serves one gRPC Watch stream and every watcher on it. It follows
//! the store's change feed for watchers that are *synced* and reads `history` for
//! watchers that are *behind* (started in the past, or left behind when the stream's
//! client read too slowly for the feed to keep its batches). One rule moves events for
//! both: a run of events from `since` to `through` goes to each watcher that has
//! everything through `since`, and a watcher without that waits for history to bring
//! it there. This module owns watch semantics (ids, filters, `prev_kv`, fragments,
//! progress, compaction); it must never write to the store, and never let one stream
//! hold up the feed or another stream.

mod stream;
mod watcher;

pub use stream::WatchStream;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::node::Node;
use crate::proto::etcdserverpb::watch_server::Watch;
use crate::proto::etcdserverpb::{WatchRequest, WatchResponse};

/// Responses a stream queues for its client. A client that reads slower leaves its
/// stream waiting, never the node buffering (see the watch module).
const QUEUED_RESPONSES: usize = 16;

type ResponseStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<WatchResponse, Status>> + Send>>;

pub struct WatchService {
    node: Arc<Node>,
    /// etcd's limit on a fragment: the request size limit with gRPC's overhead.
    fragment_bytes: usize,
}

impl WatchService {
    pub fn new(node: Arc<Node>, fragment_bytes: usize) -> Self {
        WatchService {
            node,
            fragment_bytes,
        }
    }
}

#[tonic::async_trait]
impl Watch for WatchService {
    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let (out, responses) = mpsc::channel(QUEUED_RESPONSES);
        let caller = crate::auth::Caller::of(&request);
        let stream = WatchStream::new(self.node.clone(), out, self.fragment_bytes, caller)?;
        tokio::spawn(stream.run(request.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(responses))))
    }
}
