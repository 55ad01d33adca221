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
//! simulator, so the file is written on the calling task into a list of the same blobs,
//! sent once done.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::status;
use crate::backup::{export, BackupError};
use crate::node::Node;
use crate::offload::Offload;
use crate::proto::etcdserverpb::{ResponseHeader, SnapshotResponse};
use crate::store::Export;

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

/// Where the blobs go: a queue the client drains while the export runs on a blocking
/// thread, or (the simulation, `Offload::Inline`) a list sent once the export is done.
trait Outbox {
    fn deliver(&mut self, message: Result<SnapshotResponse, Status>) -> io::Result<()>;
}

impl Outbox for mpsc::Sender<Result<SnapshotResponse, Status>> {
    fn deliver(&mut self, message: Result<SnapshotResponse, Status>) -> io::Result<()> {
        self.blocking_send(message)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Outbox for Vec<Result<SnapshotResponse, Status>> {
    fn deliver(&mut self, message: Result<SnapshotResponse, Status>) -> io::Result<()> {
        self.push(message);
        Ok(())
    }
}

/// Cuts what the export writes into blobs for an [`Outbox`].
struct BlobSender<O> {
    outbox: O,
    blob: Vec<u8>,
    /// The first message carries the header and the storage version.
    first: Option<(ResponseHeader, String)>,
    remaining: u64,
}

impl<O: Outbox> BlobSender<O> {
    fn new(outbox: O, header: ResponseHeader, version: String) -> Self {
        BlobSender {
            outbox,
            blob: Vec::with_capacity(BLOB_BYTES),
            first: Some((header, version)),
            remaining: 0,
        }
    }

    fn send(&mut self, blob: Vec<u8>) -> io::Result<()> {
        self.remaining = self.remaining.saturating_sub(blob.len() as u64);
        let (header, version) = self
            .first
            .take()
            .map_or((None, String::new()), |(h, v)| (Some(h), v));
        self.outbox.deliver(Ok(SnapshotResponse {
            header,
            remaining_bytes: self.remaining,
            blob: blob.into(),
            version,
        }))
    }

    /// Sends the whole file: the database as the export writes it, its last partial
    /// blob, then the SHA-256 in a blob of its own; a failure goes to the client as
    /// its status.
    fn send_file(&mut self, export: &Export<'_>, alarms: Vec<(Vec<u8>, Vec<u8>)>) {
        let write_error = |e: io::Error| BackupError::Write(e.to_string());
        let result = export::write_database(export, alarms, self).and_then(|(written, digest)| {
            let last = std::mem::take(&mut self.blob);
            if !last.is_empty() {
                self.send(last).map_err(write_error)?;
            }
            self.send(digest.to_vec()).map_err(write_error)?;
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
                let _ = self.outbox.deliver(Err(status::from_backup(error)));
            }
        }
    }
}

impl<O: Outbox> export::SnapshotSink for BlobSender<O> {
    fn announce(&mut self, db_bytes: u64) {
        // etcd counts the database only; the hash follows with 0 remaining.
        self.remaining = db_bytes;
    }
}

impl<O: Outbox> Write for BlobSender<O> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(BLOB_BYTES - self.blob.len());
        self.blob.extend_from_slice(&buf[..n]);
        if self.blob.len() == BLOB_BYTES {
            let blob = std::mem::replace(&mut self.blob, Vec::with_capacity(BLOB_BYTES));
            self.send(blob)?;
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
    let alarms = store.alarm_bucket();
    // No snapshot install may run while the export's RocksDB snapshot is taken.
    let no_install = store.readable().await;
    if node.offload() == Offload::Inline {
        let mut sender = BlobSender::new(Vec::new(), header, version);
        let started = std::time::Instant::now();
        match store.export(&no_install) {
            Ok(export) => {
                sender.send_file(&export, alarms);
                crate::store::metrics::snapshot_sent(started.elapsed());
            }
            Err(error) => sender.outbox.push(Err(status::from_store(error))),
        }
        return Box::pin(futures::stream::iter(sender.outbox));
    }
    let (queue, received) = mpsc::channel(BLOBS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let mut sender = BlobSender::new(queue, header, version);
        let started = std::time::Instant::now();
        let export = store.export(&no_install);
        // The export reads its own RocksDB snapshot: installs may go on from here.
        drop(no_install);
        match export {
            Ok(export) => {
                sender.send_file(&export, alarms);
                // etcd's backend snapshot: until the last byte went to the client.
                crate::store::metrics::snapshot_sent(started.elapsed());
            }
            Err(error) => {
                let _ = sender.outbox.deliver(Err(status::from_store(error)));
            }
        }
    });
    Box::pin(ReceiverStream::new(received))
}
