//! What clients did and saw: the record the checkers judge and the trace that shows
//! whether two runs of a seed were the same run.
//!
//! This module owns [`History`] (shared by every client host of one simulation),
//! [`Operation`] and its parts. It records; it never judges (the checker does) and
//! never talks to the cluster.

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
    /// No answer (an error or a timeout). A Put may or may not have taken effect.
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
    /// The revision an acknowledged Put took effect at.
    pub fn written_revision(&self) -> Option<i64> {
        match (&self.op, &self.outcome) {
            (Op::Put { .. }, Outcome::Written { revision }) => Some(*revision),
            _ => None,
        }
    }

    /// True for a Put whose outcome is unknown.
    pub fn is_indefinite_write(&self) -> bool {
        matches!(
            (&self.op, &self.outcome),
            (Op::Put { .. }, Outcome::Unknown(_))
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
