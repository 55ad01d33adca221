//! KV.RangeStream's delivery: the store's chunks (`store::RangeStream`), read off the
//! async workers one at a time and handed to the gRPC stream as the client takes them.
//!
//! The first chunk is read before the call is answered, so that a refused revision
//! (compacted, future) is the call's status, as etcd's handler returns it before
//! sending anything. The rest are read by a task that waits for room in a queue of
//! [`CHUNKS_IN_FLIGHT`] before it reads the next: with tonic and h2 polling the queue
//! only as the client's flow-control window opens, a slow client holds the member to a
//! few chunks of memory, never the range. A client that goes away ends the task.
//!
//! Snapshot installs wait only while the stream's RocksDB snapshot is taken: the
//! snapshot goes on seeing the store as it was whatever an install writes, so a stream
//! that a slow client keeps open never holds an install (and, behind it, every other
//! reader) back. What such a stream does keep is the snapshot itself.
//!
//! As etcd's `doSerialize`, the auth store is checked again once the last chunk went
//! out: if it changed meanwhile, the stream ends with `AUTH_OLD_REVISION` after it.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::{authorized, status};
use crate::auth::Grant;
use crate::node::Node;
use crate::proto::etcdserverpb::{RangeRequest, RangeResponse, RangeStreamResponse};
use crate::store::{chunk_budget, RangeStream};

/// Chunks read ahead of the client. One keeps the next chunk ready while the last is
/// on the wire, at the cost of one chunk of memory.
const CHUNKS_IN_FLIGHT: usize = 1;

pub type ChunkStream =
    Pin<Box<dyn Stream<Item = Result<RangeStreamResponse, Status>> + Send + 'static>>;

/// Opens the stream and reads its first chunk; the rest follow as the client reads.
pub async fn start(
    node: Arc<Node>,
    req: RangeRequest,
    grant: Grant,
) -> Result<ChunkStream, Status> {
    let store = node.store().clone();
    let budget = chunk_budget(node.limits().max_request_bytes);
    let no_install = store.readable().await;
    let (cursor, first) = node
        .offload()
        .run(move || {
            let mut cursor = RangeStream::open(store, &no_install, &req, budget)?;
            drop(no_install);
            let first = cursor.next_chunk()?;
            Ok((cursor, first))
        })
        .await
        .map_err(|e| status::internal("range stream", &e))?
        .map_err(status::from_store)?;
    let Some(first) = first else {
        return Err(status::internal("range stream", &"no first chunk"));
    };
    if cursor.finished() {
        // One chunk (a small range, count only): no task, no queue.
        let mut messages = vec![Ok(message(&node, first))];
        if let Err(stale) = authorized::confirm(&node, grant) {
            messages.push(Err(stale));
        }
        return Ok(Box::pin(futures::stream::iter(messages)));
    }
    let (queue, received) = mpsc::channel(CHUNKS_IN_FLIGHT);
    // Room for the first chunk: the queue is new.
    let _ = queue.try_send(Ok(message(&node, first)));
    tokio::spawn(pump(node, cursor, grant, queue));
    Ok(Box::pin(ReceiverStream::new(received)))
}

/// Reads the chunks after the first while the client takes them.
async fn pump(
    node: Arc<Node>,
    mut cursor: RangeStream,
    grant: Grant,
    queue: mpsc::Sender<Result<RangeStreamResponse, Status>>,
) {
    let mut chunks: u64 = 1;
    loop {
        // Room first, then read: nothing is read that could not be queued.
        let Ok(room) = queue.reserve().await else {
            tracing::debug!(chunks, "range stream: the client went away");
            return;
        };
        let read = node
            .offload()
            .run(move || {
                let chunk = cursor.next_chunk();
                (cursor, chunk)
            })
            .await;
        let chunk = match read {
            Ok((back, Ok(chunk))) => {
                cursor = back;
                chunk
            }
            Ok((_, Err(error))) => {
                room.send(Err(status::from_store(error)));
                return;
            }
            Err(error) => {
                room.send(Err(status::internal("range stream", &error)));
                return;
            }
        };
        let Some(chunk) = chunk else {
            drop(room);
            return finish(&node, grant, queue, chunks).await;
        };
        chunks += 1;
        let last = chunk.header.is_some();
        room.send(Ok(message(&node, chunk)));
        if last {
            return finish(&node, grant, queue, chunks).await;
        }
    }
}

/// After the last chunk: etcd's check that the auth store did not change during the
/// read.
async fn finish(
    node: &Node,
    grant: Grant,
    queue: mpsc::Sender<Result<RangeStreamResponse, Status>>,
    chunks: u64,
) {
    tracing::debug!(chunks, "range stream sent");
    if let Err(stale) = authorized::confirm(node, grant) {
        let _ = queue.send(Err(stale)).await;
    }
}

/// A chunk as the client gets it: the last one's header completed with this member's
/// identity and term, its revision left as the stream pinned it.
fn message(node: &Node, mut chunk: RangeResponse) -> RangeStreamResponse {
    if let Some(partial) = chunk.header.take() {
        chunk.header = Some(node.header_from(Some(partial)));
    }
    RangeStreamResponse {
        range_response: Some(chunk),
    }
}
