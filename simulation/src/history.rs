//! What clients did and saw: the record the checkers judge and the trace that shows
//! whether two runs of a seed were the same run.
//!
//! This module owns [`History`] (shared by every client host of one simulation),
//! [`Operation`] and its parts (key-value requests and lease requests alike, each with
//! the member that answered it), (in `watch`) [`WatchLog`], what one watch client saw,
//! (in `membership`) [`MembershipLog`], the membership changes a client asked for, and
//! (in `snapshot`) [`SnapshotLog`], the snapshot files clients fetched, and (in `auth`)
//! [`AuthLog`], the auth changes an administrator made and what its users were let do.
//! It records; it never judges (the checkers do) and never talks to the cluster.

mod auth;
mod membership;
mod snapshot;
mod watch;

pub use auth::{
    Access, AdminEntry, AuthChange, AuthLog, ChangeOutcome as AuthChangeOutcome, Fact, UserEntry,
    UserOutcome,
};
pub use membership::{ChangeOutcome, ListedMember, MemberChange, MembershipEntry, MembershipLog};
pub use snapshot::{SnapshotLog, SnapshotRecord};
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
    /// LeaseGrant of a lease with `ttl` seconds (the server may raise it), id chosen
    /// by the server.
    LeaseGrant { ttl: i64 },
    /// One LeaseKeepAlive request of lease `id` on a keepalive stream.
    LeaseKeepAlive { id: i64 },
    /// LeaseRevoke of lease `id`: deletes every key attached to it in one revision.
    LeaseRevoke { id: i64 },
    /// Put `value` at `key`, attached to lease `lease`.
    PutWithLease {
        key: String,
        value: String,
        lease: i64,
    },
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
    /// A LeaseGrant was answered: lease `id` with `ttl` seconds (the TTL the server
    /// granted), at store revision `revision` (a grant makes no revision).
    Granted { id: i64, ttl: i64, revision: i64 },
    /// A keepalive was answered with `ttl`: the lease's whole TTL, its timer restarted
    /// on the leader; 0 if the lease is unknown or expired.
    KeptAlive { ttl: i64 },
    /// A LeaseRevoke was answered at store revision `revision`: the revision that
    /// deleted the lease's keys, or the unchanged one if none was attached.
    Revoked { revision: i64 },
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
    /// The member that answered (the member id in the response header), if one did:
    /// which member served a read, or acknowledged a write.
    pub member: Option<u64>,
}

impl Operation {
    /// The revision an acknowledged write made: a Put (with a lease or not), a Cas
    /// that succeeded or a Delete that deleted its key. `None` for everything else,
    /// a LeaseRevoke too: its answer does not say whether it deleted anything.
    pub fn written_revision(&self) -> Option<i64> {
        match (&self.op, &self.outcome) {
            (Op::Put { .. } | Op::PutWithLease { .. }, Outcome::Written { revision })
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

    /// True for a Put (with a lease or not), Delete or Cas whose outcome is unknown:
    /// it may or may not have made a revision. (A LeaseRevoke's revision is accounted
    /// per lease, see the checker's `check_accounting`.)
    pub fn is_indefinite_write(&self) -> bool {
        matches!(
            (&self.op, &self.outcome),
            (
                Op::Put { .. } | Op::PutWithLease { .. } | Op::Delete { .. } | Op::Cas { .. },
                Outcome::Unknown(_)
            )
        )
    }

    /// The key a write sends (Put, with a lease or not, Cas, Delete); `None` for
    /// reads, compactions and lease requests.
    pub fn written_key(&self) -> Option<&str> {
        match &self.op {
            Op::Put { key, .. }
            | Op::PutWithLease { key, .. }
            | Op::Cas { key, .. }
            | Op::Delete { key } => Some(key),
            Op::Get { .. }
            | Op::Compact { .. }
            | Op::LeaseGrant { .. }
            | Op::LeaseKeepAlive { .. }
            | Op::LeaseRevoke { .. } => None,
        }
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
            Op::LeaseGrant { ttl } => write!(f, "lease grant ttl {ttl}")?,
            Op::LeaseKeepAlive { id } => write!(f, "lease keepalive {id:x}")?,
            Op::LeaseRevoke { id } => write!(f, "lease revoke {id:x}")?,
            Op::PutWithLease { key, value, lease } => {
                write!(f, "put {key}={value} lease {lease:x}")?;
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
            Outcome::Granted { id, ttl, revision } => {
                write!(f, " -> lease {id:x} ttl {ttl} at rev {revision}")
            }
            Outcome::KeptAlive { ttl } => write!(f, " -> ttl {ttl}"),
            Outcome::Revoked { revision } => write!(f, " -> revoked at rev {revision}"),
            Outcome::Unknown(reason) => write!(f, " -> unknown ({reason})"),
        }?;
        match self.member {
            Some(member) => write!(f, " by {member:x}"),
            None => Ok(()),
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
