//! The raft state machine: applies committed entries to the revision store, and builds
//! and installs snapshots of it.
//!
//! openraft hands entries here in log order; each is applied as one atomic RocksDB
//! batch that also records its log id, and its outcome goes back to the proposer. This
//! module owns that translation only: command semantics live in `store`, command
//! encoding in `command`. It must never apply an entry twice or out of order.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use prost::Message;
use quantykube_raft::{
    ClusterGuard, CommandOutcome, LogId, NodeId, Snapshot, SnapshotFile, SnapshotMeta,
    StoredMembership, TypeConfig,
};

use crate::auth::SimpleTokens;
use crate::offload::Offload;
use crate::proto::command::Command;
use crate::store::{ApplyBatch, RevisionStore, StoreError};

/// Applies the log to one node's revision store.
#[derive(Clone)]
pub struct StateMachine {
    member: NodeId,
    store: Arc<RevisionStore>,
    snapshot_dir: PathBuf,
    /// Held while the snapshot directory changes or is read: a snapshot is built on a
    /// task of its own while raft may ask for the current snapshot or install one, and
    /// none may remove what another is opening.
    snapshot_dir_lock: Arc<Mutex<()>>,
    /// Set once raft runs (see [`StateMachine::snapshot_exports`]).
    snapshot_exports: Arc<AtomicBool>,
    offload: Offload,
    /// Told of every member an applied membership change removes.
    guard: Arc<ClusterGuard>,
    /// Told of every applied authentication, and of the changes that void tokens.
    tokens: Arc<SimpleTokens>,
}

impl StateMachine {
    pub fn new(
        member: NodeId,
        store: Arc<RevisionStore>,
        snapshot_dir: PathBuf,
        offload: Offload,
        guard: Arc<ClusterGuard>,
        tokens: Arc<SimpleTokens>,
    ) -> Self {
        StateMachine {
            member,
            store,
            snapshot_dir,
            snapshot_dir_lock: Arc::default(),
            snapshot_exports: Arc::default(),
            offload,
            guard,
            tokens,
        }
    }

    /// The switch to set once `Raft::new` returned. openraft asks for the current
    /// snapshot while it starts, for its meta only; from then on, an ask means a send to
    /// a follower. The store is exported to a transfer file only then, so a restart
    /// never copies it.
    pub fn snapshot_exports(&self) -> Arc<AtomicBool> {
        self.snapshot_exports.clone()
    }

    /// Runs blocking work on the snapshot directory, alone.
    async fn in_snapshot_dir<T: Send + 'static>(
        &self,
        work: impl FnOnce(&std::path::Path) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, io::Error> {
        let lock = self.snapshot_dir_lock.clone();
        let dir = self.snapshot_dir.clone();
        self.blocking(move || {
            let _alone = lock
                .lock()
                .map_err(|_| StoreError::corrupt("a snapshot task panicked"))?;
            work(&dir)
        })
        .await
    }

    /// The install as `PausedSnapshotInstall` plants it: the store emptied, a pause in
    /// which readers may come (the gate decides), then the file loaded.
    #[cfg(feature = "planted-bugs")]
    async fn install_with_pause(
        &mut self,
        snapshot: SnapshotFile,
        expected: SnapshotMeta,
    ) -> Result<(), io::Error> {
        let store = self.store.clone();
        let emptying = store.clone();
        let under_way = self
            .in_snapshot_dir(move |dir| {
                let current = crate::store::keep_received_snapshot(dir, &snapshot.path)?;
                emptying.begin_install(&current)
            })
            .await?;
        tokio::time::sleep(crate::planted::INSTALL_PAUSE).await;
        self.in_snapshot_dir(move |_| finish_install_as_expected(&store, under_way, &expected))
            .await
            .map(|removed| self.guard.add_removed(removed))
    }

    /// Runs blocking store work where this member runs it.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, io::Error> {
        self.offload
            .run(work)
            .await
            .map_err(io::Error::other)?
            .map_err(io::Error::from)
    }

    fn apply_normal(
        &self,
        batch: &mut ApplyBatch<'_>,
        log_id: &LogId,
        payload: &Bytes,
        wants_reply: bool,
    ) -> Result<CommandOutcome, StoreError> {
        // Decoding from `Bytes` makes keys and values slices of the entry, not copies.
        match Command::decode(payload.clone()) {
            Ok(command) => {
                #[cfg(feature = "planted-bugs")]
                if crate::planted::is_planted(crate::planted::PlantedBug::DoubleApply {
                    member: self.member,
                }) {
                    batch.command(log_id, &command)?;
                }
                #[cfg(feature = "planted-bugs")]
                let command =
                    crate::planted::misplaced_put(self.member, &command).unwrap_or(command);
                let result = batch.command(log_id, &command)?;
                crate::auth::follow_applied(&self.tokens, &command, &result);
                // Only the member that proposed the entry has a client waiting for its
                // result; the others would encode it for nobody.
                Ok(match wants_reply {
                    true => CommandOutcome(result.encode_to_vec().into()),
                    false => CommandOutcome::default(),
                })
            }
            // Only our own encoder writes commands: one this build cannot decode came
            // from a newer build. Applying nothing in its place would leave this member
            // behind every member that applied it; raft stops instead, and so does the
            // member, saying why.
            Err(error) => {
                let refused = StoreError::UnknownCommand {
                    index: log_id.index,
                    detail: format!("undecodable: {error}"),
                };
                tracing::error!(member = self.member, %log_id, error = %refused, "cannot apply a committed command");
                Err(refused)
            }
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let store = self.store.clone();
        let applied = self
            .blocking(move || crate::store::read_applied(&store))
            .await?;
        Ok((applied.last_applied, applied.membership))
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), io::Error>
    where
        S: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        // One RocksDB write for every entry openraft hands over at once (the store
        // writes early only past its size bound or where a command needs it).
        let store = self.store.clone();
        let mut batch = store.begin_apply()?;
        let mut replies = Vec::new();
        let mut removed = Vec::new();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let log_id = entry.log_id;
            let outcome = match &entry.payload {
                EntryPayload::Blank => {
                    batch.blank(&log_id);
                    CommandOutcome::default()
                }
                EntryPayload::Normal(command) => {
                    self.apply_normal(&mut batch, &log_id, &command.0, responder.is_some())?
                }
                EntryPayload::Membership(membership) => {
                    let stored = StoredMembership::new(Some(log_id), membership.clone());
                    removed.extend(batch.membership(&log_id, &stored)?);
                    CommandOutcome::default()
                }
            };
            if let Some(responder) = responder {
                replies.push((responder, outcome));
            }
        }
        batch.flush()?;
        if !removed.is_empty() {
            tracing::info!(removed = ?removed, "applied the removal of members");
            self.guard.add_removed(removed);
        }
        // Only now, so that no client hears of a write a read on this node cannot see.
        for (responder, outcome) in replies {
            responder.send(outcome);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotFile,
    ) -> Result<(), io::Error> {
        let store = self.store.clone();
        let expected = meta.clone();
        let _applying = crate::store::metrics::SnapshotApplying::start();
        // Readers wait for the whole install: none sees the store half rewritten.
        let _alone = match crate::planted_bug!(InstallWithoutGate) {
            true => None,
            false => Some(self.store.exclusive().await),
        };
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::PlantedBug::PausedSnapshotInstall) {
            return self.install_with_pause(snapshot, expected).await;
        }
        self.in_snapshot_dir(move |dir| {
            let current = crate::store::keep_received_snapshot(dir, &snapshot.path)?;
            let under_way = store.begin_install(&current)?;
            finish_install_as_expected(&store, under_way, &expected)
        })
        .await
        .map(|removed| self.guard.add_removed(removed))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let export = self.snapshot_exports.load(Ordering::Acquire);
        let store = self.store.clone();
        let latest = self
            .in_snapshot_dir(move |dir| store.current_snapshot(dir, export))
            .await?;
        Ok(latest.map(|info| Snapshot {
            meta: info.meta,
            snapshot: SnapshotFile { path: info.path },
        }))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let store = self.store.clone();
        let started = std::time::Instant::now();
        let info = self
            .in_snapshot_dir(move |dir| store.build_snapshot(dir))
            .await?;
        crate::store::metrics::snapshot_saved(started.elapsed());
        Ok(Snapshot {
            meta: info.meta,
            snapshot: SnapshotFile { path: info.path },
        })
    }
}

/// Loads the rest of a snapshot install and checks that the file was the one raft
/// meant; the removed members the installed store records.
fn finish_install_as_expected(
    store: &RevisionStore,
    under_way: crate::store::InstallUnderWay,
    expected: &SnapshotMeta,
) -> Result<Vec<u64>, StoreError> {
    let installed = store.finish_install(under_way)?;
    if installed.last_log_id != expected.last_log_id {
        return Err(StoreError::corrupt("snapshot file does not match its meta"));
    }
    crate::store::read_removed_members(store)
}
