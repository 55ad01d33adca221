//! The log store's planted bugs (raft/src/planted.rs) that remove its two syncs or put
//! its writes back on raft's core, each caught by the property it breaks
//! (`common/log_on_crashfs.rs`). A test
//! binary of its own: a planted bug is on for the whole process.
//!
//! Needs root and `/dev/fuse`: SKIPPED elsewhere, except under CI.

#[path = "common/log_on_crashfs.rs"]
mod log_on_crashfs;

use log_on_crashfs::{
    appends_go_on_while_a_sync_stalls, flushed_entries_survive, saved_vote_survives, Torn,
};

/// With each sync removed, its property fails. One test, so that no other test of this
/// binary runs while a bug is planted.
#[tokio::test]
async fn the_planted_bugs_that_skip_the_syncs_are_caught() {
    use quantykube_raft::planted::{self, RaftBug};
    planted::plant(RaftBug::LogAcksBeforeSync);
    let entries = flushed_entries_survive(Torn::No).await;
    planted::clear();
    planted::plant(RaftBug::VoteWithoutSync);
    let vote = saved_vote_survives(Torn::No).await;
    planted::clear();
    planted::plant(RaftBug::AppendWaitsForDisk);
    let went_on = appends_go_on_while_a_sync_stalls().await;
    planted::clear();
    if let (Some(entries), Some(vote), Some(went_on)) = (entries, vote, went_on) {
        assert!(
            !went_on,
            "AppendWaitsForDisk was not caught: appends went on during the stall"
        );
        assert!(
            !entries,
            "LogAcksBeforeSync was not caught: the entries survived"
        );
        assert!(!vote, "VoteWithoutSync was not caught: the vote survived");
    }
}
