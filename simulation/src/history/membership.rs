//! What the membership client did: every membership change it asked for (MemberAdd,
//! MemberPromote, MemberRemove, MemberUpdate, MoveLeader), which member it asked, its
//! invocation and completion times and its outcome, and every change to the hosts it
//! had the harness make (a member started, a removed member's data wiped).
//!
//! This module owns [`MembershipLog`] (shared by the membership client and whoever
//! checks it afterwards), [`MembershipEntry`] and its parts. It records; it never
//! judges (the membership checker does) and never talks to the cluster.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::fnv::Fnv;

/// A member as a MemberList (or a change's answer) lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListedMember {
    pub id: u64,
    /// Empty until the member has started and published its name.
    pub name: String,
    /// Sorted.
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

impl ListedMember {
    /// Member `id` named `n{id}` at `http://n{id}:2380`, for the checkers' unit tests.
    #[cfg(test)]
    pub fn fixture(id: u64, learner: bool) -> Self {
        ListedMember {
            id,
            name: format!("n{id}"),
            peer_urls: vec![format!("http://n{id}:2380")],
            is_learner: learner,
        }
    }

    /// From the client library's member.
    pub fn from_member(member: &etcd_client::Member) -> Self {
        let mut peer_urls: Vec<String> = member.peer_urls().to_vec();
        peer_urls.sort();
        ListedMember {
            id: member.id(),
            name: member.name().to_owned(),
            peer_urls,
            is_learner: member.is_learner(),
        }
    }
}

impl fmt::Display for ListedMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() {
            "(unstarted)"
        } else {
            &self.name
        };
        write!(f, "{:x} {name} {}", self.id, self.peer_urls.join(","))?;
        if self.is_learner {
            write!(f, " learner")?;
        }
        Ok(())
    }
}

/// One membership change a client asked for; `name` is the host it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    Add {
        name: String,
        peer_url: String,
        learner: bool,
    },
    Promote {
        name: String,
        id: u64,
    },
    Remove {
        name: String,
        id: u64,
    },
    Update {
        name: String,
        id: u64,
        peer_url: String,
    },
    MoveLeader {
        name: String,
        id: u64,
    },
}

impl MemberChange {
    /// The host the change is about.
    pub fn name(&self) -> &str {
        match self {
            MemberChange::Add { name, .. }
            | MemberChange::Promote { name, .. }
            | MemberChange::Remove { name, .. }
            | MemberChange::Update { name, .. }
            | MemberChange::MoveLeader { name, .. } => name,
        }
    }
}

impl fmt::Display for MemberChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberChange::Add {
                name,
                peer_url,
                learner,
            } => write!(
                f,
                "member add {name} {peer_url}{}",
                if *learner { " as learner" } else { "" }
            ),
            MemberChange::Promote { name, id } => write!(f, "member promote {name} ({id:x})"),
            MemberChange::Remove { name, id } => write!(f, "member remove {name} ({id:x})"),
            MemberChange::Update { name, id, peer_url } => {
                write!(f, "member update {name} ({id:x}) to {peer_url}")
            }
            MemberChange::MoveLeader { name, id } => write!(f, "move leader to {name} ({id:x})"),
        }
    }
}

/// What the client learnt of a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// Answered. `id` is the member the change was about (for an add, the id the
    /// cluster gave it); `members` the member list in the answer (none for
    /// MoveLeader).
    Done { id: u64, members: Vec<ListedMember> },
    /// Refused with this gRPC code and message: the change did not happen.
    Refused { code: String, message: String },
    /// No answer: the change may or may not have happened.
    Unknown(String),
}

impl ChangeOutcome {
    pub fn is_done(&self) -> bool {
        matches!(self, ChangeOutcome::Done { .. })
    }
}

impl fmt::Display for ChangeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeOutcome::Done { id, members } => {
                write!(f, "ok ({id:x}")?;
                if !members.is_empty() {
                    let listed: Vec<String> = members.iter().map(ToString::to_string).collect();
                    write!(f, "; members {}", listed.join("; "))?;
                }
                write!(f, ")")
            }
            ChangeOutcome::Refused { code, message } => write!(f, "refused: {code} {message}"),
            ChangeOutcome::Unknown(reason) => write!(f, "unknown ({reason})"),
        }
    }
}

/// One line of a [`MembershipLog`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipEntry {
    /// A change, sent to the member `asked` (a host name).
    Change {
        change: MemberChange,
        asked: String,
        invoked: Duration,
        completed: Duration,
        outcome: ChangeOutcome,
    },
    /// Something the client did or saw besides a change: a host started or wiped, a
    /// removed member's process seen stopped (or not), a change skipped or replaced
    /// because the cluster's size did not allow it.
    Note { at: Duration, what: String },
}

impl fmt::Display for MembershipEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MembershipEntry::Change {
                change,
                asked,
                invoked,
                completed,
                outcome,
            } => write!(
                f,
                "[{:>9.3}s..{:>9.3}s] {change} (asked {asked}) -> {outcome}",
                invoked.as_secs_f64(),
                completed.as_secs_f64()
            ),
            MembershipEntry::Note { at, what } => write!(f, "[{:>9.3}s] {what}", at.as_secs_f64()),
        }
    }
}

/// Everything one membership client did, in order. Cheap to clone; clones share the
/// record.
#[derive(Clone, Debug)]
pub struct MembershipLog {
    client: String,
    entries: Arc<Mutex<Vec<MembershipEntry>>>,
}

impl MembershipLog {
    pub fn new(client: &str) -> Self {
        MembershipLog {
            client: client.to_owned(),
            entries: Arc::default(),
        }
    }

    pub fn client(&self) -> &str {
        &self.client
    }

    pub fn record(&self, entry: MembershipEntry) {
        tracing::info!(client = %self.client, %entry, "membership");
        self.lock().push(entry);
    }

    /// Records a note at the current simulated time.
    pub fn note(&self, what: impl Into<String>) {
        self.record(MembershipEntry::Note {
            at: super::now(),
            what: what.into(),
        });
    }

    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<MembershipEntry> {
        self.lock().clone()
    }

    /// The changes asked for, with their outcomes, in order.
    pub fn changes(&self) -> Vec<MembershipEntry> {
        self.lock()
            .iter()
            .filter(|e| matches!(e, MembershipEntry::Change { .. }))
            .cloned()
            .collect()
    }

    /// One line per entry, for a seed's trace.
    pub fn trace(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(|entry| format!("{}: {entry}", self.client))
            .collect()
    }

    /// One line: how many changes, how many done, refused and unknown, and a hash of
    /// every entry.
    pub fn digest(&self) -> String {
        let entries = self.lock();
        let mut hash = Fnv::new();
        let (mut done, mut refused, mut unknown) = (0, 0, 0);
        for entry in entries.iter() {
            hash.bytes(entry.to_string().as_bytes());
            if let MembershipEntry::Change { outcome, .. } = entry {
                match outcome {
                    ChangeOutcome::Done { .. } => done += 1,
                    ChangeOutcome::Refused { .. } => refused += 1,
                    ChangeOutcome::Unknown(_) => unknown += 1,
                }
            }
        }
        format!(
            "{}: {} membership changes ({done} done, {refused} refused, {unknown} unknown), \
             hash {:016x}",
            self.client,
            done + refused + unknown,
            hash.finish()
        )
    }

    fn lock(&self) -> MutexGuard<'_, Vec<MembershipEntry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
