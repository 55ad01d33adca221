//! What snapshot clients got: each Maintenance.Snapshot call with the member it went to,
//! its simulated invocation and completion times, and the bytes of a stream that ended
//! cleanly (or why it did not).
//!
//! This module owns [`SnapshotLog`] and [`SnapshotRecord`]. It records; it never judges
//! (the snapshot checker does) and never talks to the cluster.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::fnv::Fnv;

/// One Snapshot call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRecord {
    pub client: String,
    /// The member's name (the host the call was sent to).
    pub member: String,
    pub invoked: Duration,
    pub completed: Duration,
    /// The concatenated blobs of a stream that ended without an error, or the error
    /// (a failed dial, a crashed member, a deadline): a failed call proves nothing.
    pub result: Result<Vec<u8>, String>,
}

impl fmt::Display for SnapshotRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9.3}s..{:>9.3}s] {} snapshot of {} -> ",
            self.invoked.as_secs_f64(),
            self.completed.as_secs_f64(),
            self.client,
            self.member
        )?;
        match &self.result {
            Ok(bytes) => {
                let mut hash = Fnv::new();
                hash.bytes(bytes);
                write!(f, "{} bytes, hash {:016x}", bytes.len(), hash.finish())
            }
            Err(reason) => write!(f, "failed ({reason})"),
        }
    }
}

/// Every Snapshot call of one simulation, in completion order. Cheap to clone; clones
/// share the record.
#[derive(Clone, Debug, Default)]
pub struct SnapshotLog {
    records: Arc<Mutex<Vec<SnapshotRecord>>>,
}

impl SnapshotLog {
    pub fn new() -> Self {
        SnapshotLog::default()
    }

    pub fn record(&self, record: SnapshotRecord) {
        tracing::debug!(%record, "completed");
        self.lock().push(record);
    }

    pub fn records(&self) -> Vec<SnapshotRecord> {
        self.lock().clone()
    }

    /// One line per call: part of a seed's trace.
    pub fn trace(&self) -> Vec<String> {
        self.lock().iter().map(ToString::to_string).collect()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<SnapshotRecord>> {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
