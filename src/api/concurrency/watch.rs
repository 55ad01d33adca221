//! A watch opened for the caller inside the server: one Watch stream of the watch module
//! (`watch::WatchStream`), fed one create request and read here, as etcd's concurrency
//! package watches through its in-process client. The stream authorises the watch as
//! the caller, replays history from the start revision and follows the change feed, so
//! waiting costs nothing until the watched key changes. Dropping a [`Watch`] ends its
//! stream.

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Status;

use super::ConcurrencyError;
use crate::api::status;
use crate::api::watch::WatchStream;
use crate::auth::Caller;
use crate::node::Node;
use crate::proto::etcdserverpb::watch_request::RequestUnion;
use crate::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};

/// Responses the stream queues before it waits for this reader (then it falls behind
/// the feed and catches up from history, as for any slow client).
const QUEUED_RESPONSES: usize = 16;

pub struct Watch {
    responses: mpsc::Receiver<Result<WatchResponse, Status>>,
}

impl Watch {
    pub(super) fn open(
        node: Arc<Node>,
        caller: Caller,
        create: WatchCreateRequest,
    ) -> Result<Self, ConcurrencyError> {
        let (out, responses) = mpsc::channel(QUEUED_RESPONSES);
        // Fragments are only for watchers that ask for them; this one does not.
        let stream = WatchStream::new(node, out, usize::MAX, caller)?;
        let request = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        };
        // The one request, then the request side closes; the stream serves on.
        let requests = futures::stream::iter([Ok::<_, Status>(request)]);
        tokio::spawn(stream.run(requests));
        Ok(Watch { responses })
    }

    /// The next response that carries events. A watch the server ended is an error as
    /// etcd's client reports it: `ErrCompacted` for a compacted start revision, the
    /// refusal's text for a watch refused at creation.
    pub async fn next(&mut self) -> Result<WatchResponse, ConcurrencyError> {
        loop {
            let response = match self.responses.recv().await {
                Some(Ok(response)) => response,
                Some(Err(status)) => return Err(ConcurrencyError::Call(status)),
                None => return Err(ConcurrencyError::LostWatcher),
            };
            if response.compact_revision != 0 {
                return Err(ConcurrencyError::Call(status::compacted()));
            }
            if response.canceled && response.cancel_reason.is_empty() {
                return Err(ConcurrencyError::Call(status::future_revision()));
            }
            if response.canceled {
                // etcd's client makes a FailedPrecondition status of the cancel reason.
                let reason = response.cancel_reason;
                return Err(ConcurrencyError::Call(Status::failed_precondition(reason)));
            }
            if !response.events.is_empty() {
                return Ok(response);
            }
        }
    }
}
