//! The log store on a crash filesystem, and the two properties the power-loss tests
//! (`power_loss.rs`, and `power_loss_planted.rs` with the syncs removed) judge.

use std::path::PathBuf;

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use openraft::RaftLogReader;
pub use quantykube_crashfs::{CrashFs, Torn};
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
