//! Known bugs in the raft layer that the simulation plants on purpose, to prove that its
//! checkers catch them (the server's `planted` module turns these on with its own).
//!
//! Compiled only with the `planted-bugs` feature, which only the simulation's test
//! builds enable (through the server crate's feature of the same name). Every switch is
//! off until a test turns it on; this crate consults it only behind the same feature,
//! once for each bug, at the check the bug removes. It must never be enabled in a build
//! that serves users.

use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaftBug {
    /// A linearizable read gets its read index and reads at once, without waiting for
    /// this member's apply to reach it.
    ReadSkipsApplyWait,
    /// A read waiting for a read-index round takes the last round's answer instead,
    /// once there was one: an index confirmed before the read arrived (the mistake of
    /// letting a read join a round already in flight, made every time).
    ReadTakesEarlierRound,
    /// A forwarded write whose stream broke after it was sent (its fate unknown) is
    /// sent again, as if it had never been sent.
    ForwarderRetriesLostWrites,
    /// The leader serves read indexes and forwarded writes to a member the cluster
    /// removed (which may not know it yet), instead of refusing them.
    LeaderServesRemovedSenders,
    /// `durable::sync_dir` does nothing: creates, renames and removals of our own
    /// files (member.json, snapshot files, new directories) are not made durable.
    SkipDirectorySync,
    /// The log store reports appended entries flushed at once and never syncs them:
    /// a leader counts its own unsynced entries toward the quorum, and a follower
    /// answers AppendEntries before its entries are on disk.
    LogAcksBeforeSync,
    /// A vote is written without a sync before it is answered.
    VoteWithoutSync,
    /// An append waits on raft's core until its entries are written to RocksDB (the
    /// log store before issue 50): the write waits behind a stalled fsync of the same
    /// file, and with it the core and the leader's heartbeats.
    AppendWaitsForDisk,
}

impl RaftBug {
    /// The bugs a real process can be started with (`QK_PLANTED_BUGS`), by name.
    pub const BY_NAME: &'static [(&'static str, RaftBug)] = &[
        ("SkipDirectorySync", RaftBug::SkipDirectorySync),
        ("LogAcksBeforeSync", RaftBug::LogAcksBeforeSync),
        ("VoteWithoutSync", RaftBug::VoteWithoutSync),
        ("AppendWaitsForDisk", RaftBug::AppendWaitsForDisk),
    ];
}

static PLANTED: Mutex<Vec<RaftBug>> = Mutex::new(Vec::new());

/// Turns `bug` on for every member in this process.
pub fn plant(bug: RaftBug) {
    if let Ok(mut planted) = PLANTED.lock() {
        planted.push(bug);
    }
}

/// Turns every planted bug off.
pub fn clear() {
    if let Ok(mut planted) = PLANTED.lock() {
        planted.clear();
    }
}

pub fn is_planted(bug: RaftBug) -> bool {
    PLANTED.lock().is_ok_and(|planted| planted.contains(&bug))
}
