//! Known bugs that the simulation plants on purpose, to prove that its checkers catch
//! them.
//!
//! Compiled only with the `planted-bugs` feature, which only the simulation crate
//! enables. Every switch is off until a test turns it on; the server consults this
//! module at exactly ten places (read index, write acknowledgement, apply twice, a
//! Put misplaced at apply, a watch's catch-up, the lessor's timers, a member's removal,
//! the snapshot export's `key` bucket, the apply-time auth revision check, the physical
//! compaction's end), each behind
//! the same feature. It must never be enabled in a build that serves users.

use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Linearizable reads skip the read index and read local, possibly stale, state.
    LocalLinearizableReads,
    /// A Put is acknowledged at once with a guessed revision, before raft commits it.
    AckBeforeCommit,
    /// The member with this id applies every normal entry twice.
    DoubleApply { member: u64 },
    /// A watcher that catches up on history and rejoins the live feed loses the last
    /// event of the page that brings it back.
    WatchDropsEventOnRejoin,
    /// The leader times every lease for half its TTL.
    LeaseExpiresEarly,
    /// A removed member ignores its removal and goes on serving, answering
    /// linearizable reads from its own (no longer updated) state.
    RemovedMemberServes,
    /// The snapshot export leaves out one version: the one at the revision just
    /// before the store's current one (the file still ends with a valid SHA-256).
    SnapshotSkipsVersion,
    /// The member with this id applies every Put of a key ending in `0` to that key
    /// with `~` appended: it makes the same revision as the others, but the key
    /// silently keeps its old state (and a key nobody wrote appears).
    MemberMisplacesPuts { member: u64 },
    /// Members authorise requests against the auth store as it was before its last
    /// change, and applying a command skips the auth revision check: a write
    /// authorised before a revocation (a permission revoked, a user deleted) is applied
    /// anyway instead of being authorised again. (Skipping the check alone is real but
    /// needs a member that lags the revocation by the moment a request arrives, which
    /// the simulation's seeds rarely give.)
    StaleAuthRevision,
    /// The background physical compaction deletes up to the store's current revision
    /// instead of the compacted one: versions that reads above the compacted revision
    /// still reach go (as when a worker that runs behind the apply path mistakes how far
    /// the compaction asked it to go).
    CompactionOvershoots,
}

static PLANTED: Mutex<Vec<PlantedBug>> = Mutex::new(Vec::new());

/// Turns `bug` on for every member in this process.
pub fn plant(bug: PlantedBug) {
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

pub fn is_planted(bug: PlantedBug) -> bool {
    PLANTED.lock().is_ok_and(|planted| planted.contains(&bug))
}

/// The `MemberMisplacesPuts` rewrite of `command` for `member`, if planted and it
/// applies (a Put of a key ending in `0`).
pub fn misplaced_put(
    member: u64,
    command: &crate::proto::command::Command,
) -> Option<crate::proto::command::Command> {
    use crate::proto::command::command::Request;
    if !is_planted(PlantedBug::MemberMisplacesPuts { member }) {
        return None;
    }
    let Some(Request::Put(put)) = &command.request else {
        return None;
    };
    if !put.key.ends_with(b"0") {
        return None;
    }
    let mut put = put.clone();
    put.key = [&put.key[..], b"~"].concat().into();
    Some(crate::proto::command::Command {
        auth_revision: 0,
        auth_checked: false,
        request: Some(Request::Put(put)),
    })
}
