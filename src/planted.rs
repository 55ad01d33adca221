//! Known bugs that the simulation plants on purpose, to prove that its checkers catch
//! them.
//!
//! Compiled only with the `planted-bugs` feature, which only the simulation crate
//! enables. Every switch is off until a test turns it on; the server consults this
//! module at exactly six places (read index, write acknowledgement, apply, a watch's
//! catch-up, the lessor's timers, a member's removal), each behind the same feature. It must never be enabled in a build that
//! serves users.

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
