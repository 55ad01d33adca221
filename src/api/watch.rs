//! etcdserverpb.Watch: one task per stream, which the watch module runs.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::node::Node;
use crate::proto::etcdserverpb::watch_server::Watch;
use crate::proto::etcdserverpb::{WatchRequest, WatchResponse};
use crate::watch;

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
        let stream = watch::WatchStream::new(self.node.clone(), out, self.fragment_bytes, caller)?;
        tokio::spawn(stream.run(request.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(responses))))
    }
}
