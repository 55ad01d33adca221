//! The log store on a crash filesystem, and the properties the power-loss tests
//! (`power_loss.rs`, and `power_loss_planted.rs` with each guard's planted bug) judge.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use openraft::RaftLogReader;
pub use quantykube_crashfs::{CrashFs, FileMatch, Stall, Torn};
use quantykube_raft::{open_log_database, Command, Entry, LogStore, TypeConfig, Vote};

struct Disk {
    fs: CrashFs,
    _dir: tempfile::TempDir,
}

impl Disk {
    fn mount() -> Option<Disk> {
        if CrashFs::skip_reason().is_some() {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = CrashFs::mount(dir.path().join("work"), dir.path().join("mnt")).expect("mount");
        Some(Disk { fs, _dir: dir })
    }

    fn log_dir(&self) -> PathBuf {
        self.fs.mountpoint().join("wal")
    }

    fn open(&self) -> LogStore {
        LogStore::new(open_log_database(&self.log_dir()).expect("open the log")).expect("store")
    }

    /// Cuts the power with `store` open, closes it (whatever it writes now fails), and
    /// brings the disk back as the cut left it.
    fn power_loss(&mut self, store: LogStore, torn: Torn) {
        self.fs.power_cut();
        drop(store);
        self.fs.restart(torn).expect("restart the disk");
    }
}

fn entry(index: u64) -> Entry {
    Entry::new_normal(
        log_id::<TypeConfig>(2, 1, index),
        Command(Bytes::from(format!("cmd-{index}"))),
    )
}

/// Appends `entries` and waits until the store reports them flushed.
async fn append(store: &mut LogStore, entries: Vec<Entry>) {
    let (tx, rx) = TypeConfig::oneshot();
    store
        .append(entries, IOFlushed::signal(tx))
        .await
        .expect("append");
    rx.await.expect("flushed").expect("flush succeeded");
}

/// Whether entries reported flushed before a power cut (`torn` as it says) are all
/// there after it; `None` where crash filesystems cannot mount.
pub async fn flushed_entries_survive(torn: Torn) -> Option<bool> {
    let mut disk = Disk::mount()?;
    let mut store = disk.open();
    for first in (1..=200).step_by(20) {
        append(&mut store, (first..first + 20).map(entry).collect()).await;
    }
    disk.power_loss(store, torn);
    let mut store = disk.open();
    let state = store.get_log_state().await.expect("log state");
    let entries = store
        .try_get_log_entries(1..201)
        .await
        .expect("read entries");
    Some(state.last_log_id.map(|l| l.index()) == Some(200) && entries.len() == 200)
}

/// Whether a vote saved before a power cut (`torn` as it says) is the vote after it;
/// `None` where crash filesystems cannot mount.
pub async fn saved_vote_survives(torn: Torn) -> Option<bool> {
    let mut disk = Disk::mount()?;
    let mut store = disk.open();
    // A first vote, synced by an append, then the one that must not be forgotten.
    store.save_vote(&Vote::new(1, 1)).await.expect("vote");
    append(&mut store, vec![entry(1)]).await;
    let vote = Vote::new(5, 3);
    store.save_vote(&vote).await.expect("vote");
    disk.power_loss(store, torn);
    let mut store = disk.open();
    Some(store.read_vote().await.expect("read the vote") == Some(vote))
}

/// How long the stalled sync holds: long enough that nothing the test does meanwhile
/// (a few in-memory steps) could outlast it even on a loaded machine, so that "it
/// returned while the sync stalled" is decided by the mechanism, not by speed.
const STALL: Duration = Duration::from_secs(10);

/// Whether the store's raft-core calls (appending, saving the committed log id,
/// purging, reading back) all return while an earlier append's fsync is stalled, and
/// everything is reported flushed once the stall ends; `None` where crash filesystems
/// cannot mount. A leader whose core waited here would stop sending heartbeats.
pub async fn appends_go_on_while_a_sync_stalls() -> Option<bool> {
    let disk = Disk::mount()?;
    let mut store = disk.open();
    append(&mut store, (1..=10).map(entry).collect()).await;
    disk.fs.set_faults(|f| {
        f.stalls.push(Stall {
            files: FileMatch::any(),
            delay: STALL,
        })
    });
    let (stalled_tx, mut stalled) = TypeConfig::oneshot();
    store
        .append(vec![entry(11)], IOFlushed::signal(stalled_tx))
        .await
        .expect("append");
    // Bound by the mechanism: wait (at most the stall's length) until crashfs holds
    // that append's sync.
    let held_since = std::time::Instant::now();
    while disk.fs.stats().syncs_stalled == 0 {
        assert!(held_since.elapsed() < STALL, "no sync reached the disk");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (next_tx, next) = TypeConfig::oneshot();
    store
        .append(vec![entry(12), entry(13)], IOFlushed::signal(next_tx))
        .await
        .expect("append");
    store
        .save_committed(Some(entry(11).log_id()))
        .await
        .expect("save committed");
    store.purge(entry(2).log_id()).await.expect("purge");
    let readable = store
        .try_get_log_entries(3..14)
        .await
        .expect("read entries")
        .iter()
        .map(|e| e.index())
        .eq(3..14);
    let reported_meanwhile = stalled.try_recv().ok();
    let went_on = reported_meanwhile.is_none() && readable;
    disk.fs.clear_faults();
    let stalled = match reported_meanwhile {
        Some(reported) => reported,
        None => stalled
            .await
            .expect("the stalled append was never reported"),
    };
    let flushed = stalled.is_ok() && matches!(next.await, Ok(Ok(())));
    Some(went_on && flushed)
}
