//! What watch clients saw: every response of one etcd watch, the member it came from,
//! and where the watch started and resumed.
//!
//! This module owns [`WatchLog`] (shared by one watch client and whoever checks it
//! afterwards), [`WatchEntry`] and its parts. It records; it never judges (the watch
//! checker does) and never talks to the cluster.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::fnv::Fnv;

/// The kind of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventKind {
    Put,
    Delete,
}

/// One event of a watch response, as the client decoded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub key: String,
    /// The value put (empty for a delete).
    pub value: String,
    pub create_revision: i64,
    /// The revision of the event: the write's own revision, for a delete too.
    pub mod_revision: i64,
    pub version: i64,
    /// The key's value and mod_revision before the event (`prev_kv`), if the response
    /// carried one.
    pub prev: Option<(String, i64)>,
}

impl fmt::Display for WatchEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            EventKind::Put => write!(
                f,
                "put {}={} @{} (created {}, version {})",
                self.key, self.value, self.mod_revision, self.create_revision, self.version
            )?,
            EventKind::Delete => write!(f, "delete {} @{}", self.key, self.mod_revision)?,
        }
        match &self.prev {
            Some((value, revision)) => write!(f, " prev {value}@{revision}"),
            None => write!(f, " no prev"),
        }
    }
}

/// One response on a watch stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchResponseRecord {
    /// The member that sent it.
    pub member: String,
    /// When the client got it (simulated time since the simulation started).
    pub at: Duration,
    /// The store revision in the response header (0 if it had none).
    pub header_revision: i64,
    pub watch_id: i64,
    pub created: bool,
    pub canceled: bool,
    /// Set on a cancel: the oldest revision the member still has.
    pub compact_revision: i64,
    pub cancel_reason: String,
    pub events: Vec<WatchEvent>,
}

impl WatchResponseRecord {
    /// A progress notification: no events, not a create or cancel answer, and no
    /// compaction. Its header revision means every event up to it was delivered.
    pub fn is_progress_notification(&self) -> bool {
        self.events.is_empty() && !self.created && !self.canceled && self.compact_revision == 0
    }
}

impl fmt::Display for WatchResponseRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9.3}s] {} rev {}",
            self.at.as_secs_f64(),
            self.member,
            self.header_revision
        )?;
        if self.created {
            write!(f, " created")?;
        }
        if self.canceled {
            write!(
                f,
                " canceled (compact revision {}, {:?})",
                self.compact_revision, self.cancel_reason
            )?;
        }
        if self.is_progress_notification() {
            write!(f, " progress")?;
        }
        for event in &self.events {
            write!(f, "; {event}")?;
        }
        Ok(())
    }
}

/// One thing a watch client did or saw, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEntry {
    /// The client opened a watch on `member` from `start_revision` (0: from now): its
    /// first one, or a resume after the previous one ended.
    Started {
        member: String,
        start_revision: i64,
        at: Duration,
    },
    /// A response on the open watch.
    Response(WatchResponseRecord),
    /// The open watch ended (an error, the stream's end, a cancel, a stall) and the
    /// client gives it up.
    Ended {
        member: String,
        reason: String,
        at: Duration,
    },
    /// The client stopped watching: the highest revision it knew delivered (every
    /// event up to it seen, or 0 if none is known) and the revision it was asked to
    /// reach before stopping, if any.
    Finished {
        delivered: i64,
        target: Option<i64>,
        at: Duration,
    },
}

impl fmt::Display for WatchEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchEntry::Started {
                member,
                start_revision,
                at,
            } => write!(
                f,
                "[{:>9.3}s] {member} watch from {}",
                at.as_secs_f64(),
                if *start_revision == 0 {
                    "now".to_owned()
                } else {
                    format!("rev {start_revision}")
                }
            ),
            WatchEntry::Response(response) => write!(f, "{response}"),
            WatchEntry::Ended { member, reason, at } => {
                write!(f, "[{:>9.3}s] {member} ended: {reason}", at.as_secs_f64())
            }
            WatchEntry::Finished {
                delivered,
                target,
                at,
            } => {
                write!(
                    f,
                    "[{:>9.3}s] finished, delivered up to rev {delivered}",
                    at.as_secs_f64()
                )?;
                match target {
                    Some(target) => write!(f, " (target rev {target})"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Everything one watch client did and saw, in order. Cheap to clone; clones share
/// the record.
#[derive(Clone, Debug)]
pub struct WatchLog {
    watcher: String,
    prefix: String,
    entries: Arc<Mutex<Vec<WatchEntry>>>,
}

impl WatchLog {
    /// An empty log of the watcher `watcher` (its turmoil host name, by convention),
    /// which watches every key starting with `prefix`.
    pub fn new(watcher: impl Into<String>, prefix: impl Into<String>) -> Self {
        WatchLog {
            watcher: watcher.into(),
            prefix: prefix.into(),
            entries: Arc::default(),
        }
    }

    pub fn watcher(&self) -> &str {
        &self.watcher
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn record(&self, entry: WatchEntry) {
        tracing::debug!(watcher = %self.watcher, %entry, "watch");
        self.lock().push(entry);
    }

    /// A copy of every entry recorded so far.
    pub fn entries(&self) -> Vec<WatchEntry> {
        self.lock().clone()
    }

    /// One line: the watcher's counts and a hash of every entry, for a seed's trace
    /// (equal lines mean the watcher saw the same run).
    pub fn digest(&self) -> String {
        let entries = self.lock();
        let mut hash = Fnv::new();
        let (mut starts, mut responses, mut events) = (0, 0, 0);
        for entry in entries.iter() {
            hash.bytes(entry.to_string().as_bytes());
            match entry {
                WatchEntry::Started { .. } => starts += 1,
                WatchEntry::Response(response) => {
                    responses += 1;
                    events += response.events.len();
                }
                WatchEntry::Ended { .. } | WatchEntry::Finished { .. } => {}
            }
        }
        format!(
            "{}: {starts} watches, {responses} responses, {events} events, hash {:016x}",
            self.watcher,
            hash.finish()
        )
    }

    /// How many events the watcher got.
    pub fn events(&self) -> usize {
        self.lock()
            .iter()
            .map(|entry| match entry {
                WatchEntry::Response(response) => response.events.len(),
                _ => 0,
            })
            .sum()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<WatchEntry>> {
        // A panicking recorder cannot leave the vector half-pushed.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
