//! What clients did and saw: the record the checkers judge and the trace that shows
//! whether two runs of a seed were the same run.
//!
//! This module owns [`History`] (shared by every client host of one simulation),
//! [`Operation`] and its parts, and (in `watch`) [`WatchLog`], what one watch client
//! saw. It records; it never judges (the checkers do) and never talks to the cluster.

mod watch;

pub use watch::{EventKind, WatchEntry, WatchEvent, WatchLog, WatchResponseRecord};

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A client's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Put `value` at `key`.
    Put { key: String, value: String },
    /// Read `key`, linearizable or serializable.
    Get { key: String, serializable: bool },
    /// DeleteRange of the one key `key`.
    Delete { key: String },
    /// Txn compare-and-swap: if `key`'s mod_revision is `expected` (0: the key does
    /// not exist), put `value` at `key`; otherwise change nothing.
    Cas {
        key: String,
        expected: i64,
        value: String,
    },
    /// Compact the store's history up to `revision`.
    Compact { revision: i64 },
}

/// What a client learnt about its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A Put was acknowledged: it took effect as `revision`.
    Written { revision: i64 },
    /// A Get answered at store revision `revision` with the key's current value and
    /// `mod_revision`, or `None` if the key did not exist.
    Read {
        revision: i64,
        value: Option<(String, i64)>,
    },
    /// A Delete was answered at store revision `revision` (the new revision if it
    /// deleted the key, the current one if there was nothing to delete).
    Deleted { revision: i64, deleted: i64 },
    /// A Cas was answered at store revision `revision` (the new revision if it
    /// succeeded): whether the compare held and the put happened.
    Swapped { revision: i64, succeeded: bool },
    /// A Compact was answered at store revision `revision`.
    Compacted { revision: i64 },
    /// No answer (an error or a timeout). A write may or may not have taken effect.
    Unknown(String),
}

/// One request with its invocation and completion times (simulated time since the
/// simulation started).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub client: String,
    pub op: Op,
    pub invoked: Duration,
    pub completed: Duration,
    pub outcome: Outcome,
}

impl Operation {
    /// The revision an acknowledged write made: a Put, a Cas that succeeded or a
    /// Delete that deleted its key. `None` for everything else.
    pub fn written_revision(&self) -> Option<i64> {
        match (&self.op, &self.outcome) {
            (Op::Put { .. }, Outcome::Written { revision })
            | (
                Op::Cas { .. },
                Outcome::Swapped {
                    revision,
                    succeeded: true,
                },
            ) => Some(*revision),
            (Op::Delete { .. }, Outcome::Deleted { revision, deleted }) if *deleted > 0 => {
                Some(*revision)
            }
            _ => None,
        }
    }

    /// True for a Put, Delete or Cas whose outcome is unknown: it may or may not have
    /// made a revision.
    pub fn is_indefinite_write(&self) -> bool {
        matches!(
            (&self.op, &self.outcome),
            (
                Op::Put { .. } | Op::Delete { .. } | Op::Cas { .. },
                Outcome::Unknown(_)
            )
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9.3}s..{:>9.3}s] {} ",
            self.invoked.as_secs_f64(),
            self.completed.as_secs_f64(),
            self.client
        )?;
        match &self.op {
            Op::Put { key, value } => write!(f, "put {key}={value}")?,
            Op::Get { key, serializable } => {
                write!(f, "get {key}{}", if *serializable { " (s)" } else { "" })?;
            }
            Op::Delete { key } => write!(f, "delete {key}")?,
            Op::Cas {
                key,
                expected,
                value,
            } => write!(f, "cas {key}@{expected}={value}")?,
            Op::Compact { revision } => write!(f, "compact {revision}")?,
        }
        match &self.outcome {
            Outcome::Written { revision } => write!(f, " -> rev {revision}"),
            Outcome::Read {
                revision,
                value: Some((value, mod_revision)),
            } => write!(f, " -> {value}@{mod_revision} at rev {revision}"),
            Outcome::Read {
                revision,
                value: None,
            } => write!(f, " -> absent at rev {revision}"),
            Outcome::Deleted { revision, deleted } => {
                write!(f, " -> deleted {deleted} at rev {revision}")
            }
            Outcome::Swapped {
                revision,
                succeeded,
            } => write!(
                f,
                " -> {} at rev {revision}",
                if *succeeded { "swapped" } else { "failed" }
            ),
            Outcome::Compacted { revision } => write!(f, " -> compacted at rev {revision}"),
            Outcome::Unknown(reason) => write!(f, " -> unknown ({reason})"),
        }
    }
}

/// The operations of every client of one simulation, in completion order. Cheap to
/// clone; clones share the record.
#[derive(Clone, Debug, Default)]
pub struct History {
    operations: Arc<Mutex<Vec<Operation>>>,
}

impl History {
    pub fn new() -> Self {
        History::default()
    }

    pub fn record(&self, operation: Operation) {
        tracing::debug!(%operation, "completed");
        self.lock().push(operation);
    }

    /// A copy of every operation recorded so far.
    pub fn operations(&self) -> Vec<Operation> {
        self.lock().clone()
    }

    /// One line per operation: equal traces mean the clients saw the same run.
    pub fn trace(&self) -> Vec<String> {
        self.lock().iter().map(ToString::to_string).collect()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Operation>> {
        // A panicking recorder cannot leave the vector half-pushed.
        self.operations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The simulated time now, for [`Operation::invoked`] and [`Operation::completed`].
/// Zero outside a simulation.
pub fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}
