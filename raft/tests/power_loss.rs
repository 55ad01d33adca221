//! The raft log store on a crash filesystem (tools/crashfs): entries it reported
//! flushed and a vote it saved survive a power cut; what it had not synced is all that
//! goes. In a cluster a member's vote matters only in the rare election it races,
//! which random power cuts do not reach; here the store is tested alone, in-process.
//! A stalled fsync holds only the store's writer thread, never the raft core's calls.
//! `power_loss_planted.rs` shows every test bites.
//!
//! Needs root and `/dev/fuse`: SKIPPED elsewhere, except under CI.

#[path = "common/log_on_crashfs.rs"]
mod log_on_crashfs;

use log_on_crashfs::{
    appends_go_on_while_a_sync_stalls, flushed_entries_survive, saved_vote_survives, Torn,
};

/// A clean cut, and torn ones: what was synced stays whatever the unsynced tail does.
const CUTS: [Torn; 3] = [Torn::No, Torn::Prefix { seed: 7 }, Torn::Prefix { seed: 8 }];

#[tokio::test]
async fn entries_reported_flushed_survive_a_power_cut() {
    for torn in CUTS {
        if let Some(survived) = flushed_entries_survive(torn).await {
            assert!(survived, "entries reported flushed were lost ({torn:?})");
        }
    }
}

#[tokio::test]
async fn a_saved_vote_survives_a_power_cut() {
    for torn in CUTS {
        if let Some(survived) = saved_vote_survives(torn).await {
            assert!(
                survived,
                "a vote saved before the power cut was lost ({torn:?})"
            );
        }
    }
}

#[tokio::test]
async fn raft_core_calls_return_while_a_sync_stalls() {
    if let Some(went_on) = appends_go_on_while_a_sync_stalls().await {
        assert!(
            went_on,
            "an append, a committed id, a purge or a read waited behind a stalled fsync, \
             or the stalled appends were never reported flushed"
        );
    }
}
