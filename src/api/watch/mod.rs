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
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::storage as metrics;
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
        Ok(Response::new(Box::pin(PendingEvents(responses))))
    }
}

/// A stream's queue of responses as gRPC takes them: the events of each response
/// taken, and of those left when the client goes, stop counting as pending
/// (`etcd_debugging_mvcc_pending_events_total`; the stream task counts them in).
struct PendingEvents(mpsc::Receiver<Result<WatchResponse, Status>>);

impl futures::Stream for PendingEvents {
    type Item = Result<WatchResponse, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let next = self.0.poll_recv(cx);
        if let std::task::Poll::Ready(Some(Ok(response))) = &next {
            metrics::events_taken(response.events.len());
        }
        next
    }
}

impl Drop for PendingEvents {
    fn drop(&mut self) {
        // Closed first, so that nothing more is queued; then what was queued is dropped.
        self.0.close();
        while let Ok(response) = self.0.try_recv() {
            if let Ok(response) = response {
                metrics::events_taken(response.events.len());
            }
        }
    }
}
