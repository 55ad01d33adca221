//! Every write to the raft log's database, in order, off openraft's core task.
//!
//! openraft awaits the log store's `append`, `save_committed` and `purge` on its core
//! task, the one that also sends heartbeats and counts election timeouts. A write to a
//! file that is being fsynced waits for that fsync (the kernel holds the file), so a
//! disk that stalls its syncs for seconds would stall the core with it: the leader
//! stops sending heartbeats and is replaced. This module owns the one thread that
//! writes the log's database: the core queues each write and goes on (appended entries
//! stay readable from the in-memory tail, pinned there until written); the thread
//! writes every write that queued up while it was busy, in order, fsyncs the WAL once
//! for all of them that must be durable (group commit), and only then completes their
//! callbacks. Votes and truncations wait for their own write, as raft requires.
//!
//! It must never reorder writes, never complete a callback before its sync succeeded,
//! and never write again after a write or a sync failed (a later append must not land
//! after a hole, and an fsync that failed once proves nothing about the pages it
//! covered: the node stops on the error, as etcd does on a failed WAL write).

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use openraft::storage::IOFlushed;
use rocksdb::{WriteBatch, WriteOptions, DB};
use tokio::sync::oneshot;

use crate::log_tail::LogTail;
use crate::types::TypeConfig;

/// One write to the log's database.
pub(crate) struct LogWrite {
    pub batch: WriteBatch,
    /// Whether the write must be on disk (WAL fsynced) before it is reported done.
    pub sync: bool,
    /// The tail's sequence number of the entries this write appends, if it appends:
    /// once written they may leave the tail.
    pub appended: Option<u64>,
    pub done: Done,
}

/// Who hears that a [`LogWrite`] is done.
pub(crate) enum Done {
    Nobody,
    /// openraft's callback for appended entries.
    Flushed(IOFlushed<TypeConfig>),
    /// A caller awaiting the write (a vote, a truncation, a drain).
    Waiter(oneshot::Sender<io::Result<()>>),
}

/// Queues writes to the log's database; cheap to clone.
#[derive(Clone)]
pub(crate) struct LogWriter {
    /// Not owned: the store owns the database. Each queued write holds it open until
    /// it is written, so that a store dropped (a node stopping) still writes what it
    /// queued; dropping the last writer waits for that, so the database is closed
    /// when the store's last clone is gone (a restarted node reopens it in the same
    /// process).
    db: Weak<DB>,
    mode: Mode,
}

#[derive(Clone)]
enum Mode {
    Thread(Arc<WriterThread>),
    /// Writes on the calling task. For deterministic simulation, where a thread would
    /// escape the simulator's control of time and order.
    Inline(Arc<Writing>),
}

/// How long dropping the last writer waits for the thread to write what was queued:
/// a disk stalled for seconds finishes within it; one that hangs is left behind (its
/// writes fail or never end; the node is stopping anyway) rather than hang the stop.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// The writing thread's queue; dropping it ends the queue and waits (at most
/// [`STOP_WAIT`]) for the thread to write what was queued and let go of the database.
struct WriterThread {
    queue: Option<mpsc::Sender<(Arc<DB>, LogWrite)>>,
    /// Disconnected when the thread ends (in a mutex only to be shared between
    /// threads; only `drop`, which owns it, reads it).
    ended: Mutex<mpsc::Receiver<()>>,
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        drop(self.queue.take());
        let ended = self
            .ended
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(STOP_WAIT) {
            tracing::warn!(
                waited = ?STOP_WAIT,
                "the raft log writer is still writing; leaving it behind"
            );
        }
    }
}

/// What writing needs besides the database: the tail to unpin written entries from,
/// and whether a write already failed.
struct Writing {
    tail: Arc<Mutex<LogTail>>,
    failed: Mutex<Option<String>>,
}

impl LogWriter {
    /// A writer that writes (and syncs) on the caller's task.
    pub fn inline(db: &Arc<DB>, tail: &Arc<Mutex<LogTail>>) -> Self {
        LogWriter {
            db: Arc::downgrade(db),
            mode: Mode::Inline(Arc::new(Writing::new(tail))),
        }
    }

    /// Starts the writing thread for `db`; it ends when the last `LogWriter` is dropped,
    /// after writing what was queued.
    pub fn spawn(db: &Arc<DB>, tail: &Arc<Mutex<LogTail>>) -> io::Result<Self> {
        let writing = Writing::new(tail);
        let (queue, waiting) = mpsc::channel::<(Arc<DB>, LogWrite)>();
        let (ending, ended) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("raft-log-writer".to_owned())
            .spawn(move || {
                let _ending = ending;
                while let Ok((db, first)) = waiting.recv() {
                    let mut group = vec![first];
                    // Every write holds the same database: one store, one writer.
                    group.extend(waiting.try_iter().map(|(_, write)| write));
                    writing.write(Some(db), group);
                }
            })?;
        Ok(LogWriter {
            db: Arc::downgrade(db),
            mode: Mode::Thread(Arc::new(WriterThread {
                queue: Some(queue),
                ended: Mutex::new(ended),
            })),
        })
    }

    /// Queues `write`; its `done` hears the outcome.
    pub fn submit(&self, write: LogWrite) {
        let db = self.db.upgrade();
        match (&self.mode, db) {
            (Mode::Thread(thread), Some(db)) => {
                let sent = match &thread.queue {
                    Some(queue) => queue.send((db, write)).map_err(|e| e.0 .1),
                    None => Err(write),
                };
                if let Err(write) = sent {
                    write
                        .done
                        .complete(Err(io::Error::other("the raft log writer stopped")));
                }
            }
            (Mode::Thread(_), None) => write
                .done
                .complete(Err(io::Error::other("the raft log's database is closed"))),
            (Mode::Inline(writing), db) => writing.write(db, vec![write]),
        }
    }

    /// Writes `batch` (synced if `sync`) after everything queued before it, and returns
    /// once it is done.
    pub async fn write_and_wait(&self, batch: WriteBatch, sync: bool) -> io::Result<()> {
        let (done, outcome) = oneshot::channel();
        self.submit(LogWrite {
            batch,
            sync,
            appended: None,
            done: Done::Waiter(done),
        });
        outcome
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the raft log writer stopped")))
    }
}

impl Writing {
    fn new(tail: &Arc<Mutex<LogTail>>) -> Self {
        Writing {
            tail: Arc::clone(tail),
            failed: Mutex::new(None),
        }
    }

    fn failed(&self) -> MutexGuard<'_, Option<String>> {
        // Only ever set, never half-changed.
        self.failed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes `group` in order, then syncs once if any of it must be durable, then
    /// reports each write's outcome.
    fn write(&self, db: Option<Arc<DB>>, mut group: Vec<LogWrite>) {
        let outcome = match db {
            Some(db) => self.write_all(&db, &mut group),
            None => Err("the database is closed".to_owned()),
        };
        tracing::trace!(
            writes = group.len(),
            ok = outcome.is_ok(),
            "raft log written"
        );
        if let Err(e) = &outcome {
            let mut failed = self.failed();
            if failed.is_none() {
                tracing::error!(error = %e, "raft log write failed; refusing every later one");
                *failed = Some(e.clone());
            }
        }
        for write in group {
            let result = match &outcome {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::other(format!("writing the raft log: {e}"))),
            };
            write.done.complete(result);
        }
    }

    fn write_all(&self, db: &DB, group: &mut [LogWrite]) -> Result<(), String> {
        if let Some(e) = self.failed().as_ref() {
            return Err(format!("an earlier write failed: {e}"));
        }
        let mut unsynced = WriteOptions::default();
        unsynced.set_sync(false);
        let started = tokio::time::Instant::now();
        let mut bytes = 0;
        for write in group.iter_mut() {
            let batch = std::mem::take(&mut write.batch);
            bytes += batch.size_in_bytes();
            db.write_opt(batch, &unsynced).map_err(|e| e.to_string())?;
        }
        crate::metrics::wal_written(bytes, started.elapsed());
        if let Some(seq) = group.iter().filter_map(|w| w.appended).max() {
            lock(&self.tail).written_through(seq);
        }
        if group.iter().any(|w| w.sync) {
            // tokio's clock: the simulation's own time there, the monotonic clock here.
            let started = tokio::time::Instant::now();
            db.flush_wal(true).map_err(|e| e.to_string())?;
            crate::metrics::wal_fsynced(started.elapsed());
        }
        Ok(())
    }
}

impl Done {
    fn complete(self, result: io::Result<()>) {
        match self {
            Done::Nobody => {}
            Done::Flushed(callback) => callback.io_completed(result),
            Done::Waiter(waiter) => {
                // A waiter that went away (its node stopped) needs no answer.
                let _ = waiter.send(result);
            }
        }
    }
}

/// Locks the tail; it is only changed in whole calls, so a panic elsewhere left it
/// consistent.
pub(crate) fn lock(tail: &Mutex<LogTail>) -> MutexGuard<'_, LogTail> {
    tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
