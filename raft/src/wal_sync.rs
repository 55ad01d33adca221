//! Group commit of the raft log: makes appended entries durable off the raft core.
//!
//! `append` writes entries to RocksDB without syncing and hands its flush callback
//! here. One dedicated thread syncs the WAL once for every callback that queued up
//! while the previous sync ran, then completes them in order. The raft core therefore
//! never waits for the disk (heartbeats and elections keep their timing), and under
//! load one fsync covers many appends. This module never writes data itself; it must
//! complete every callback it receives, with an error if the sync failed.

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use openraft::storage::IOFlushed;
use rocksdb::DB;

use crate::types::TypeConfig;

/// Hands flush callbacks to the syncing thread; cheap to clone.
#[derive(Clone)]
pub struct WalSyncer {
    mode: Mode,
}

#[derive(Clone)]
enum Mode {
    Thread(mpsc::Sender<IOFlushed<TypeConfig>>),
    /// Syncs on the calling task. For deterministic simulation, where a thread would
    /// escape the simulator's control of time and order.
    Inline(Weak<DB>),
}

impl WalSyncer {
    /// A syncer that fsyncs on the caller's task before completing each callback.
    pub fn inline(db: &Arc<DB>) -> Self {
        WalSyncer {
            mode: Mode::Inline(Arc::downgrade(db)),
        }
    }

    /// Starts the syncing thread for `db`; it ends when the last `WalSyncer` is dropped.
    /// It holds the database only while syncing, so that dropping the last handle
    /// closes the database at once (a restarted node reopens it in the same process).
    pub fn spawn(db: &Arc<DB>) -> io::Result<Self> {
        let db = Arc::downgrade(db);
        let (queue, waiting) = mpsc::channel();
        std::thread::Builder::new()
            .name("raft-wal-sync".to_owned())
            .spawn(move || sync_loop(&db, &waiting))?;
        Ok(WalSyncer {
            mode: Mode::Thread(queue),
        })
    }

    /// Completes `callback` once everything written to the database so far is durable.
    pub fn sync_then(&self, callback: IOFlushed<TypeConfig>) {
        match &self.mode {
            Mode::Thread(queue) => {
                if let Err(mpsc::SendError(callback)) = queue.send(callback) {
                    callback.io_completed(Err(io::Error::other("raft WAL sync thread stopped")));
                }
            }
            Mode::Inline(db) => callback.io_completed(result_of(&sync(db))),
        }
    }
}

fn sync(db: &Weak<DB>) -> Result<(), String> {
    match db.upgrade() {
        Some(db) => {
            // tokio's clock: the simulation's own time there, the monotonic clock here.
            let started = tokio::time::Instant::now();
            let synced = db.flush_wal(true).map_err(|e| e.to_string());
            crate::metrics::wal_fsynced(started.elapsed());
            synced
        }
        None => Err("the database is closed".to_owned()),
    }
}

fn result_of(synced: &Result<(), String>) -> io::Result<()> {
    match synced {
        Ok(()) => Ok(()),
        Err(e) => Err(io::Error::other(format!("syncing the raft WAL: {e}"))),
    }
}

fn sync_loop(db: &Weak<DB>, waiting: &mpsc::Receiver<IOFlushed<TypeConfig>>) {
    while let Ok(first) = waiting.recv() {
        let mut batch = vec![first];
        batch.extend(waiting.try_iter());
        let synced = sync(db);
        tracing::trace!(
            callbacks = batch.len(),
            ok = synced.is_ok(),
            "raft WAL synced"
        );
        for callback in batch {
            callback.io_completed(result_of(&synced));
        }
    }
}
