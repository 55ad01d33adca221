//! Maintenance.Snapshot: the member's store streamed as etcd's snapshot file, as etcd
//! streams its backend: 32 KiB blobs of the database with the bytes still to come,
//! then one blob holding the SHA-256 of everything before it.
//!
//! First the member waits, up to [`READ_INDEX_WAIT`], for a read index from the leader,
//! so that a member in touch with one sends every write acknowledged before the call,
//! as a linearizable read would. A member without a leader then sends what it has, as
//! etcd always does: after a lost quorum, a survivor's snapshot is how an operator
//! rescues the data (docs/operations.md).
//!
//! The file is produced on a blocking thread while it is sent (`backup::export`), with
//! a few blobs in flight at most: a slow client slows the export, never the member's
//! memory, and writes go on meanwhile. A client that goes away stops the export.
//! Under deterministic simulation (`Offload::Inline`) no thread may escape the
//! simulator, so the file is written inline into memory first, then sent the same way.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::status;
use crate::backup::export;
use crate::node::Node;
use crate::offload::Offload;
use crate::proto::etcdserverpb::{ResponseHeader, SnapshotResponse};

/// How long Snapshot waits for the leader's read index before it sends the member's own
/// state. A call that ends sooner passed the read index (the simulation's checker
/// relies on it).
pub const READ_INDEX_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Between two tries for a read index while no leader answers.
const READ_INDEX_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Waits for the leader's read index, up to [`READ_INDEX_WAIT`], retrying while there
/// is none (an election may end meanwhile).
pub async fn await_read_index(node: &Node) {
    let deadline = tokio::time::Instant::now() + READ_INDEX_WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, node.read_barrier()).await {
            Ok(Ok(())) => return,
            Ok(Err(_)) if tokio::time::Instant::now() + READ_INDEX_RETRY < deadline => {
                tokio::time::sleep(READ_INDEX_RETRY).await;
            }
            _ => {
                // Wait the window out, so that a call shorter than it always had the
                // read index.
                tokio::time::sleep_until(deadline).await;
                tracing::warn!(
                    "sending a database snapshot without the leader's read index: it may miss the latest writes"
                );
                return;
            }
        }
    }
}

/// etcd's `snapshotSendBufferSize`.
const BLOB_BYTES: usize = 32 * 1024;
/// Blobs queued for a client before the export waits for it.
const BLOBS_IN_FLIGHT: usize = 8;

pub type SnapshotStream =
    Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send + 'static>>;

/// Cuts what the export writes into blobs and queues them for the client.
struct BlobSender {
    queue: mpsc::Sender<Result<SnapshotResponse, Status>>,
    blob: Vec<u8>,
    /// The first message carries the header and the storage version.
    first: Option<(ResponseHeader, String)>,
    remaining: u64,
}

impl BlobSender {
    fn send(&mut self, blob: Vec<u8>, remaining: u64) -> io::Result<()> {
        let (header, version) = self
            .first
            .take()
            .map_or((None, String::new()), |(h, v)| (Some(h), v));
        self.queue
            .blocking_send(Ok(SnapshotResponse {
                header,
                remaining_bytes: remaining,
                blob: blob.into(),
                version,
            }))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl export::SnapshotSink for BlobSender {
    fn expect(&mut self, db_bytes: u64) {
        // etcd counts the database only; the hash follows with 0 remaining.
        self.remaining = db_bytes;
    }
}

impl Write for BlobSender {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(BLOB_BYTES - self.blob.len());
        self.blob.extend_from_slice(&buf[..n]);
        if self.blob.len() == BLOB_BYTES {
            let blob = std::mem::replace(&mut self.blob, Vec::with_capacity(BLOB_BYTES));
            self.remaining = self.remaining.saturating_sub(blob.len() as u64);
            let remaining = self.remaining;
            self.send(blob, remaining)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Starts streaming `node`'s store to a client.
pub async fn stream(node: &Arc<Node>, header: ResponseHeader) -> SnapshotStream {
    let store = node.store().clone();
    let version = node.storage_version();
    // etcd's `alarm` bucket: each active alarm's `AlarmMember`, an empty value.
    let alarms = store
        .alarms()
        .iter()
        .map(|alarm| (prost::Message::encode_to_vec(alarm), Vec::new()))
        .collect();
    if node.offload() == Offload::Inline {
        let readable = store.readable().await;
        return inline(&store, &readable, header, version, alarms);
    }
    let (queue, received) = mpsc::channel(BLOBS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let mut sender = BlobSender {
            queue,
            blob: Vec::with_capacity(BLOB_BYTES),
            first: Some((header, version)),
            remaining: 0,
        };
        let result =
            export::write_database(&store, alarms, &mut sender).and_then(|(written, digest)| {
                let last = std::mem::take(&mut sender.blob);
                if !last.is_empty() {
                    sender
                        .send(last, 0)
                        .map_err(|e| crate::backup::BackupError::Write(e.to_string()))?;
                }
                sender
                    .send(digest.to_vec(), 0)
                    .map_err(|e| crate::backup::BackupError::Write(e.to_string()))?;
                Ok(written)
            });
        match result {
            Ok(written) => tracing::info!(
                bytes = written.db_bytes,
                revision = written.revision,
                "sent database snapshot to client"
            ),
            Err(error) => {
                tracing::warn!(%error, "database snapshot not sent");
                let _ = sender.queue.blocking_send(Err(status::from_backup(error)));
            }
        }
    });
    Box::pin(ReceiverStream::new(received))
}

/// The simulation's snapshot: the whole file written on the calling task (a simulated
/// store is small), then cut into the blobs a streamed export sends, with the same
/// `remaining_bytes` and the hash in a blob of its own.
fn inline(
    store: &crate::store::RevisionStore,
    readable: &crate::store::ReadGate,
    header: ResponseHeader,
    version: String,
    alarms: Vec<(Vec<u8>, Vec<u8>)>,
) -> SnapshotStream {
    let mut db = Vec::new();
    let written = store
        .export_while(readable)
        .map_err(crate::backup::BackupError::from)
        .and_then(|view| export::write_database_of(&view, alarms, &mut db));
    let messages = match written {
        Ok((written, digest)) => {
            let mut remaining = written.db_bytes;
            let mut first = Some((header, version));
            let mut messages = Vec::new();
            for blob in db.chunks(BLOB_BYTES).chain(std::iter::once(&digest[..])) {
                remaining = remaining.saturating_sub(blob.len() as u64);
                let (header, version) = first
                    .take()
                    .map_or((None, String::new()), |(h, v)| (Some(h), v));
                messages.push(Ok(SnapshotResponse {
                    header,
                    remaining_bytes: remaining,
                    blob: blob.to_vec().into(),
                    version,
                }));
            }
            messages
        }
        Err(error) => vec![Err(status::from_backup(error))],
    };
    Box::pin(futures::stream::iter(messages))
}
