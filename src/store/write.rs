//! Applying committed commands: the only way the key space changes.
//!
//! An [`ApplyBatch`] stages the changes of a run of committed commands into one RocksDB
//! `WriteBatch`, together with the store's counters (kept in memory meanwhile) and the
//! last applied log id, and writes it in one go when flushed: DESIGN's "one WriteBatch
//! per applied batch". A crash before the flush loses the whole run and the log replays
//! it; after it, the log id says it is done, so nothing is applied twice. Once written,
//! the batch's events (each with the key's previous version) go to the change feed. Each command
//! runs in a [`WriteTxn`]; reads see the changes staged before them through an overlay
//! of the latest state of every changed key. A command the overlay cannot serve (a read
//! at an explicit revision, a compare on a changed key, a put that may fail after
//! staging, a compaction) starts on a flushed batch instead. It must never apply a
//! command out of log order; the state machine guarantees that.

use bytes::Bytes;
use quantykube_raft::{LogId, StoredMembership};
use rocksdb::WriteBatch;

use super::auth::error::AuthError;
use super::encoding::{
    escape_key, history_key, latest_value, replaced_bytes, version_key, ChangeId, HistoryEntry,
    Replaced, StoredVersion,
};
use super::feed::Changes;
use super::lease::LeaseRecord;
use super::meta::{self, Revisions};
use super::metrics::OperationCounts;
use super::range::{self, Overlay, PendingVersion, Reader};
use super::request_type::RequestType;
use super::txn::{self, Path};
use super::{
    alarm, member_records, snapshot_records, RevisionStore, StoreError, CF_HISTORY, CF_KV,
    CF_LATEST,
};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as CommandResultKind;
use crate::proto::command::{Command, CommandError, CommandResult, PublishMemberResult};
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::response_op::Response;
use crate::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse,
    LeaseCheckpointRequest, LeaseCheckpointResponse, LeaseGrantRequest, LeaseGrantResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use crate::proto::mvccpb::event::EventType;
use crate::proto::mvccpb::{Event, KeyValue};

/// The result of applying a command, as returned to the node that proposed it.
pub type WriteOutcome = CommandResult;

/// A key's live version as the apply path reads it, with its sub revision when known:
/// what the next change of the key replaces.
struct Live {
    kv: KeyValue,
    sub: Option<u32>,
}

/// Changes staged and not yet visible to readers, with the counters after them.
struct Staged {
    batch: WriteBatch,
    overlay: Overlay,
    revisions: Revisions,
    /// What the change feed gets once the batch is written.
    events: Vec<Event>,
}

impl Staged {
    fn new(revisions: Revisions) -> Self {
        Staged {
            batch: WriteBatch::default(),
            overlay: Overlay::new(),
            revisions,
            events: Vec::new(),
        }
    }
}

/// The changes of one command, staged into a [`Staged`] shared with the commands before
/// it in the batch.
pub struct WriteTxn<'a> {
    store: &'a RevisionStore,
    reader: Reader<'a>,
    /// The counters when this command started.
    revisions: Revisions,
    staged: &'a mut Staged,
    changes: u32,
    /// etcd's mvcc counters of this command, recorded when it succeeds.
    counts: OperationCounts,
    /// This command revoked a lease (etcd's `etcd_debugging_lease_revoked_total`).
    revoked_lease: bool,
}

impl<'a> WriteTxn<'a> {
    fn new(store: &'a RevisionStore, reader: Reader<'a>, staged: &'a mut Staged) -> Self {
        WriteTxn {
            revisions: staged.revisions,
            store,
            reader,
            staged,
            changes: 0,
            counts: OperationCounts::default(),
            revoked_lease: false,
        }
    }

    /// The revision this command's changes get: one per command, as etcd.
    fn pending_revision(&self) -> i64 {
        self.revisions.current + 1
    }

    /// The revision a read inside the command reports: the pending one once something
    /// changed.
    fn visible_revision(&self) -> i64 {
        if self.changes > 0 {
            self.pending_revision()
        } else {
            self.revisions.current
        }
    }

    /// `key`'s live version, staged or stored, with its sub revision when known.
    fn latest(&self, key: &[u8]) -> Result<Option<Live>, StoreError> {
        Ok(match self.staged.overlay.get(key) {
            Some(state) => state.as_ref().map(|pending| Live {
                kv: pending.kv.clone(),
                sub: Some(pending.sub),
            }),
            None => self
                .reader
                .get_current(key)?
                .map(|(kv, sub)| Live { kv, sub }),
        })
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let revisions = Revisions {
            current: self.visible_revision(),
            compacted: self.revisions.compacted,
        };
        // A read at an explicit (older) revision cannot see this command's changes.
        let overlay = (req.revision <= 0).then_some(&self.staged.overlay);
        range::range(&self.reader, revisions, req, overlay)
    }

    /// Stages `key`'s new state (`None`: deleted), which replaces `prev`.
    fn stage(
        &mut self,
        key: Bytes,
        state: Option<KeyValue>,
        prev: Option<Live>,
    ) -> Result<(), StoreError> {
        let revision = self.pending_revision();
        let sub = self.changes;
        let escaped = escape_key(&key);
        let replaced = match &prev {
            None => Replaced::Nothing,
            Some(Live { kv, sub: Some(sub) }) => Replaced::Version {
                written: ChangeId {
                    main: kv.mod_revision,
                    sub: *sub,
                },
                bytes: replaced_bytes(key.len(), escaped.len(), kv.value.len()),
            },
            Some(Live { sub: None, .. }) => Replaced::Unknown,
        };
        let prev = prev.map(|live| live.kv);
        let record = match &state {
            Some(kv) => StoredVersion::Live {
                create_revision: kv.create_revision,
                version: kv.version,
                lease: kv.lease,
                value: kv.value.clone(),
            },
            None => StoredVersion::Tombstone,
        };
        let record = record.encode();
        self.store.stage_attachment(
            &mut self.staged.batch,
            &key,
            prev.as_ref().map_or(0, |p| p.lease),
            state.as_ref().map_or(0, |s| s.lease),
        )?;
        let latest = self.store.cf(CF_LATEST)?;
        match &state {
            Some(_) => {
                self.staged
                    .batch
                    .put_cf(latest, &key, latest_value(revision, Some(sub), &record))
            }
            None => self.staged.batch.delete_cf(latest, &key),
        }
        self.staged.batch.put_cf(
            self.store.cf(CF_KV)?,
            version_key(&escaped, revision),
            record,
        );
        let event = HistoryEntry {
            deleted: state.is_none(),
            key: key.to_vec(),
            replaced,
        };
        self.staged.batch.put_cf(
            self.store.cf(CF_HISTORY)?,
            history_key(revision, sub),
            event.encode(),
        );
        self.changes += 1;
        self.staged.events.push(match &state {
            Some(kv) => Event {
                r#type: EventType::Put.into(),
                kv: Some(kv.clone()),
                prev_kv: prev,
            },
            // A delete names only its key and revision, as etcd sends it.
            None => Event {
                r#type: EventType::Delete.into(),
                kv: Some(KeyValue {
                    key: key.clone(),
                    mod_revision: revision,
                    ..Default::default()
                }),
                prev_kv: prev,
            },
        });
        self.staged
            .overlay
            .insert(key, state.map(|kv| PendingVersion { kv, sub }));
        Ok(())
    }

    fn put(&mut self, req: &PutRequest) -> Result<PutResponse, StoreError> {
        let live = self.latest(&req.key)?;
        let prev = live.as_ref().map(|live| &live.kv);
        let (value, lease) = match (prev, req.ignore_value || req.ignore_lease) {
            (None, true) => return Err(StoreError::KeyNotFound),
            (prev, _) => (
                match prev {
                    Some(p) if req.ignore_value => p.value.clone(),
                    _ => req.value.clone(),
                },
                match prev {
                    Some(p) if req.ignore_lease => p.lease,
                    _ => req.lease,
                },
            ),
        };
        let revision = self.pending_revision();
        let kv = KeyValue {
            key: req.key.clone(),
            create_revision: prev.map_or(revision, |p| p.create_revision),
            mod_revision: revision,
            version: prev.map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        let prev_kv = if req.prev_kv { prev.cloned() } else { None };
        self.stage(req.key.clone(), Some(kv), live)?;
        self.counts.puts += 1;
        self.counts.put_bytes += (req.key.len() + req.value.len()) as u64;
        Ok(PutResponse {
            header: Some(header(self.visible_revision())),
            prev_kv,
        })
    }

    fn delete_range(
        &mut self,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StoreError> {
        // One key (the Kubernetes API server's deletes) is read as a put reads it, with
        // the sub revision compaction needs to drop the version without looking it up.
        // A range does not read sub revisions: compaction looks those versions up.
        let doomed: Vec<Live> = if req.range_end.is_empty() {
            self.latest(&req.key)?.into_iter().collect()
        } else {
            let found = self.range(&RangeRequest {
                key: req.key.clone(),
                range_end: req.range_end.clone(),
                ..Default::default()
            })?;
            found
                .kvs
                .into_iter()
                .map(|kv| Live { kv, sub: None })
                .collect()
        };
        let deleted = i64::try_from(doomed.len()).unwrap_or(i64::MAX);
        let mut prev_kvs = Vec::new();
        for live in doomed {
            if req.prev_kv {
                prev_kvs.push(live.kv.clone());
            }
            self.stage(live.kv.key.clone(), None, Some(live))?;
        }
        self.counts.deletes += 1;
        Ok(DeleteRangeResponse {
            header: Some(header(self.visible_revision())),
            deleted,
            prev_kvs,
        })
    }

    /// Runs a transaction whose path was decided and checked before any change.
    fn run_txn(
        &mut self,
        req: &TxnRequest,
        path: &mut dyn Iterator<Item = bool>,
    ) -> Result<TxnResponse, StoreError> {
        let succeeded = path.next().unwrap_or(false);
        let mut responses = Vec::new();
        for op in txn::branch(req, succeeded) {
            let response = match &op.request {
                Some(Request::RequestRange(r)) => {
                    self.counts.ranges += 1;
                    Response::ResponseRange(self.range(r)?)
                }
                Some(Request::RequestPut(p)) => Response::ResponsePut(self.put(p)?),
                Some(Request::RequestDeleteRange(d)) => {
                    Response::ResponseDeleteRange(self.delete_range(d)?)
                }
                Some(Request::RequestTxn(nested)) => {
                    let mut nested = self.run_txn(nested, path)?;
                    // etcd leaves nested transactions' headers empty.
                    nested.header = Some(ResponseHeader::default());
                    Response::ResponseTxn(nested)
                }
                None => continue,
            };
            responses.push(ResponseOp {
                response: Some(response),
            });
        }
        Ok(TxnResponse {
            header: Some(header(self.visible_revision())),
            succeeded,
            responses,
        })
    }

    /// Revokes lease `id`: every key attached to it is deleted in this one revision.
    fn revoke(&mut self, req: &LeaseRevokeRequest) -> Result<LeaseRevokeResponse, StoreError> {
        if !self.store.lease_exists(req.id)? {
            return Err(StoreError::LeaseNotFound);
        }
        let attached = self.store.lease_keys(req.id)?;
        for key in &attached {
            match self.latest(key)? {
                Some(live) if live.kv.lease == req.id => {
                    // etcd's lessor deletes each key with a DeleteRange of its own.
                    self.counts.deletes += 1;
                    self.stage(key.clone(), None, Some(live))?
                }
                // Never so while attachments follow their keys; removed below anyway.
                _ => {}
            }
        }
        self.store
            .stage_lease_removal(&mut self.staged.batch, req.id, &attached)?;
        self.revoked_lease = true;
        Ok(LeaseRevokeResponse {
            header: Some(header(self.visible_revision())),
        })
    }

    fn txn(&mut self, req: &TxnRequest) -> Result<TxnResponse, StoreError> {
        let path = Path::decide(&self.reader, self.revisions.current, req)?;
        let lease_exists = |id| self.store.lease_exists(id);
        txn::check_path(
            &self.reader,
            self.revisions,
            req,
            &mut path.cursor(),
            &lease_exists,
        )?;
        let mut decisions = path.cursor();
        self.run_txn(req, &mut decisions)
    }

    fn compact(&mut self, req: &CompactionRequest) -> Result<CompactionResponse, StoreError> {
        if req.revision <= self.revisions.compacted {
            return Err(StoreError::Compacted);
        }
        if req.revision > self.revisions.current {
            return Err(StoreError::FutureRevision);
        }
        meta::stage_compacted_revision(self.store, &mut self.staged.batch, req.revision)?;
        self.staged.revisions.compacted = req.revision;
        Ok(CompactionResponse {
            header: Some(header(self.revisions.current)),
        })
    }

    /// Makes this command's changes part of the batch: later commands see its revision.
    fn finish(self) {
        if self.changes > 0 {
            self.staged.revisions.current = self.pending_revision();
        }
        self.counts.record();
        if self.revoked_lease {
            super::metrics::lease_revoked();
        }
    }
}

fn header(revision: i64) -> ResponseHeader {
    ResponseHeader {
        revision,
        ..Default::default()
    }
}

fn error_result(error: StoreError) -> Result<CommandResult, StoreError> {
    let Some(kind) = error.command_kind() else {
        return Err(error);
    };
    Ok(CommandResult {
        result: Some(CommandResultKind::Error(CommandError { kind: kind.into() })),
    })
}

/// Staged changes beyond this size are written before the next command is applied, so
/// that a long run of large commands never holds unbounded memory.
const FLUSH_BYTES: usize = 4 << 20;

/// A run of committed commands applied as one RocksDB write (see the module docs).
pub struct ApplyBatch<'s> {
    store: &'s RevisionStore,
    staged: Staged,
    /// The counters as written: what a reader of the store (not the batch) sees.
    written: Revisions,
    /// The last log id applied into `staged`, written with it.
    last_log_id: Option<LogId>,
}

impl<'s> ApplyBatch<'s> {
    /// Applies one committed command. A request that fails identically on every node
    /// (a compacted revision, a missing key...) is its result; any other error means
    /// this node cannot apply the log and must stop.
    pub fn command(
        &mut self,
        log_id: &LogId,
        command: &Command,
    ) -> Result<WriteOutcome, StoreError> {
        let started = std::time::Instant::now();
        let (fresh, after) = flush_rules(command, &self.staged.overlay);
        if fresh || self.staged.batch.size_in_bytes() >= FLUSH_BYTES {
            self.flush()?;
        }
        let staged_before = self.staged.batch.len();
        let store = self.store;
        let mut compacted = false;
        let reader = Reader::live(store, self.written);
        let mut txn = WriteTxn::new(store, reader, &mut self.staged);
        // Authorised against an auth store that has changed since: the proposer must
        // authorise it again (etcd's ErrAuthOldRevision), whatever it is.
        let stale = command.auth_revision != 0 && {
            let auth = store.auth();
            command.auth_revision < auth.revision() || (!command.auth_checked && auth.enabled())
        };
        #[cfg(feature = "planted-bugs")]
        let stale =
            stale && !crate::planted::is_planted(crate::planted::PlantedBug::StaleAuthRevision);
        let refused = if stale {
            Some(StoreError::Auth(AuthError::AuthOldRevision))
        } else {
            command
                .request
                .as_ref()
                .and_then(|request| alarm::refusal(store, request))
        };
        let applied = if let Some(refusal) = refused {
            Err(refusal)
        } else {
            match &command.request {
                Some(CommandRequest::Put(p)) => {
                    match p.lease == 0 || store.lease_exists(p.lease)? {
                        true => txn.put(p).map(CommandResultKind::Put),
                        false => Err(StoreError::LeaseNotFound),
                    }
                }
                Some(CommandRequest::DeleteRange(d)) => {
                    txn.delete_range(d).map(CommandResultKind::DeleteRange)
                }
                Some(CommandRequest::Txn(t)) => txn.txn(t).map(CommandResultKind::Txn),
                Some(CommandRequest::Compaction(c)) => txn.compact(c).map(|response| {
                    compacted = true;
                    CommandResultKind::Compaction(response)
                }),
                Some(CommandRequest::LeaseGrant(grant)) => {
                    grant_lease(store, &mut txn.staged.batch, grant, txn.revisions.current).map(
                        |granted| {
                            super::metrics::lease_granted(granted.ttl);
                            CommandResultKind::LeaseGrant(granted)
                        },
                    )
                }
                Some(CommandRequest::LeaseRevoke(revoke)) => {
                    txn.revoke(revoke).map(CommandResultKind::LeaseRevoke)
                }
                Some(CommandRequest::LeaseExpiry(expiry)) => {
                    let revoke = LeaseRevokeRequest { id: expiry.id };
                    if expiry.leader_term != log_id.leader_id.term
                        && !crate::planted_bug!(ExpiryIgnoresTerm)
                    {
                        // Decided by a leader of another term: not this log's decision.
                        Ok(CommandResultKind::LeaseRevoke(
                            LeaseRevokeResponse::default(),
                        ))
                    } else {
                        txn.revoke(&revoke).map(CommandResultKind::LeaseRevoke)
                    }
                }
                Some(CommandRequest::LeaseCheckpoint(checkpoints)) => {
                    checkpoint_leases(store, &mut txn.staged.batch, checkpoints)
                        .map(CommandResultKind::LeaseCheckpoint)
                }
                Some(CommandRequest::PublishMember(attributes)) => {
                    // A removed member's late publish must not bring its record back.
                    let removed = meta::is_removed_member(store, attributes.member_id)?;
                    if removed {
                        Ok(CommandResultKind::PublishMember(PublishMemberResult {}))
                    } else {
                        meta::stage_member_attributes(store, &mut txn.staged.batch, attributes)
                            .map(|()| CommandResultKind::PublishMember(PublishMemberResult {}))
                    }
                }
                Some(CommandRequest::Alarm(request)) => store
                    .stage_alarm(&mut txn.staged.batch, request)
                    .map(CommandResultKind::Alarm),
                Some(CommandRequest::Auth(auth)) => match &auth.request {
                    Some(request) => store
                        .stage_auth(&mut txn.staged.batch, request, log_id.index)
                        .map(CommandResultKind::Auth),
                    None => Err(StoreError::corrupt("empty auth command")),
                },
                Some(CommandRequest::SyncMemberRecords(sync)) => {
                    member_records::stage_sync(store, &mut txn.staged.batch, log_id.index, sync)
                        .map(|()| CommandResultKind::SyncMemberRecords(Default::default()))
                }
                Some(CommandRequest::ChangeSnapshotRecord(change)) => {
                    snapshot_records::stage_change(
                        store,
                        &mut txn.staged.batch,
                        log_id.index,
                        change,
                    )
                    .map(|record| {
                        CommandResultKind::ChangeSnapshotRecord(
                            crate::proto::command::ChangeSnapshotRecordResult { record },
                        )
                    })
                }
                // A request of a kind this build does not know decodes as none.
                None => Err(StoreError::UnknownCommand {
                    index: log_id.index,
                    detail: "a request of a kind this build does not know".into(),
                }),
            }
        };
        let succeeded = matches!(&applied, Ok(_) | Err(StoreError::Compacted));
        super::metrics::applied(RequestType::of(command), succeeded, started.elapsed());
        let outcome = match applied {
            Ok(result) => {
                txn.finish();
                CommandResult {
                    result: Some(result),
                }
            }
            Err(error) => {
                let outcome = error_result(error)?;
                // The command failed as a whole: it changes nothing.
                if self.staged.batch.len() != staged_before {
                    if !fresh {
                        return Err(StoreError::corrupt(
                            "a command that cannot fail after staging did",
                        ));
                    }
                    // It started on an empty batch, so what is staged is its alone.
                    self.staged = Staged::new(self.staged.revisions);
                }
                outcome
            }
        };
        self.last_log_id = Some(*log_id);
        match after {
            After::Nothing => {}
            After::Flush => self.flush()?,
            After::ReloadAlarms => {
                self.flush()?;
                store.reload_alarms()?;
            }
            After::ReloadAuth => {
                self.flush()?;
                store.reload_auth()?;
            }
            After::Compact if compacted => {
                self.flush()?;
                store.schedule_compaction();
            }
            After::Compact => {}
        }
        Ok(outcome)
    }

    /// Records an entry that changes no key (a leader's blank entry).
    pub fn blank(&mut self, log_id: &LogId) {
        self.last_log_id = Some(*log_id);
    }

    /// Records a membership change entry, and returns the ids it removed: members of
    /// the previous membership that this one no longer has. They are recorded as removed
    /// for good, and what they published about themselves is forgotten.
    pub fn membership(
        &mut self,
        log_id: &LogId,
        membership: &StoredMembership,
    ) -> Result<Vec<u64>, StoreError> {
        // Membership entries are rare: start from the written store, so that the
        // previous membership is the one on disk, even if this batch changed it.
        self.flush()?;
        let previous = meta::read_applied(self.store)?.membership;
        let still: std::collections::BTreeSet<u64> =
            membership.membership().nodes().map(|(id, _)| *id).collect();
        let removed: Vec<u64> = previous
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| !still.contains(id))
            .collect();
        for id in &removed {
            meta::stage_removed_member(self.store, &mut self.staged.batch, *id)?;
            meta::stage_forget_member_attributes(self.store, &mut self.staged.batch, *id)?;
        }
        meta::stage_membership(self.store, &mut self.staged.batch, membership)?;
        self.last_log_id = Some(*log_id);
        Ok(removed)
    }

    /// Writes everything staged, with the counters and the last applied log id, in one
    /// RocksDB write. Readers see it from here on, and then the change feed gets it.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        let Some(log_id) = self.last_log_id.take() else {
            return Ok(());
        };
        let revisions = self.staged.revisions;
        let mut staged = std::mem::replace(&mut self.staged, Staged::new(revisions));
        meta::stage_current_revision(self.store, &mut staged.batch, staged.revisions.current)?;
        meta::stage_applied_log_id(self.store, &mut staged.batch, &log_id)?;
        let started = tokio::time::Instant::now();
        self.store.db.write(staged.batch)?;
        super::metrics::backend_committed(started.elapsed());
        if !staged.events.is_empty() {
            self.store.feed.publish(Changes {
                since: self.written.current,
                through: revisions.current,
                events: staged.events,
            });
        }
        self.written = revisions;
        Ok(())
    }
}

/// True for the commands that change lease records, which puts and later lease
/// commands read from the written store.
/// What the commands after one in a batch need of it once it is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Nothing,
    /// Later commands read what it wrote from the store: write it first.
    Flush,
    /// Write it, then reload the alarms that later commands are refused by.
    ReloadAlarms,
    /// Write it, then reload the auth store later commands are checked against.
    ReloadAuth,
    /// Write it (the compaction worker reads the compacted revision from the store),
    /// then wake the worker, if it compacted.
    Compact,
}

/// The apply path's flush rules, one row per kind of command: whether `command` must
/// start on a written store (its reads are ones the overlay cannot serve, or it may
/// fail after staging changes, which must then be dropped alone), and what later
/// commands of the batch need of it (see [`After`]).
fn flush_rules(command: &Command, overlay: &Overlay) -> (bool, After) {
    use CommandRequest as R;
    match &command.request {
        Some(R::Txn(txn)) => (txn_needs_fresh_start(txn, overlay), After::Nothing),
        // Later commands of the batch read lease records from the store.
        Some(R::LeaseGrant(_) | R::LeaseRevoke(_) | R::LeaseExpiry(_) | R::LeaseCheckpoint(_)) => {
            (true, After::Flush)
        }
        // What later commands may do depends on the alarms.
        Some(R::Alarm(_)) => (true, After::ReloadAlarms),
        // Later commands are checked against the auth revision.
        Some(R::Auth(_)) => (true, After::ReloadAuth),
        // A members records sync reads the membership and records as written, and a
        // later record change in the batch reads the records this one wrote.
        Some(R::SyncMemberRecords(_) | R::ChangeSnapshotRecord(_)) => (true, After::Flush),
        Some(R::Compaction(_)) => (true, After::Compact),
        // A publish reads the removed members (a removal staged in this batch included).
        Some(R::PublishMember(_)) => (true, After::Nothing),
        _ => (false, After::Nothing),
    }
}

/// Grants a lease with the id and TTL the leader chose: no revision, as etcd.
fn grant_lease(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    grant: &LeaseGrantRequest,
    current: i64,
) -> Result<LeaseGrantResponse, StoreError> {
    if store.lease_exists(grant.id)? {
        return Err(StoreError::LeaseExists);
    }
    store.stage_lease_record(
        batch,
        LeaseRecord {
            id: grant.id,
            ttl: grant.ttl,
            remaining_ttl: 0,
        },
    )?;
    Ok(LeaseGrantResponse {
        header: Some(header(current)),
        id: grant.id,
        ttl: grant.ttl,
        error: String::new(),
    })
}

/// Records the remaining TTLs the leader checkpointed, for the leases still live.
fn checkpoint_leases(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    checkpoints: &LeaseCheckpointRequest,
) -> Result<LeaseCheckpointResponse, StoreError> {
    for checkpoint in &checkpoints.checkpoints {
        if let Some(record) = store.lease(checkpoint.id)? {
            store.stage_lease_record(
                batch,
                LeaseRecord {
                    remaining_ttl: checkpoint.remaining_ttl,
                    ..record
                },
            )?;
        }
    }
    Ok(LeaseCheckpointResponse::default())
}

/// A transaction needs the store written first when it reads at an explicit revision
/// (the overlay holds only the latest state), compares a key a staged command changed
/// (compares read the store), or puts with `ignore_value`/`ignore_lease` (which can fail
/// after earlier operations of the transaction were staged).
fn txn_needs_fresh_start(txn: &TxnRequest, overlay: &Overlay) -> bool {
    let touches = |key: &[u8], range_end: &[u8]| {
        overlay
            .range::<[u8], _>((std::ops::Bound::Included(key), std::ops::Bound::Unbounded))
            .next()
            .is_some_and(|(k, _)| range::in_range(k, key, range_end))
    };
    txn.compare.iter().any(|c| touches(&c.key, &c.range_end))
        || txn
            .success
            .iter()
            .chain(&txn.failure)
            .any(|op| match &op.request {
                Some(Request::RequestRange(r)) => r.revision != 0,
                Some(Request::RequestPut(p)) => p.ignore_value || p.ignore_lease,
                Some(Request::RequestTxn(nested)) => txn_needs_fresh_start(nested, overlay),
                _ => false,
            })
}

impl RevisionStore {
    /// Starts applying a run of committed commands; nothing is visible until
    /// [`ApplyBatch::flush`].
    pub fn begin_apply(&self) -> Result<ApplyBatch<'_>, StoreError> {
        let written = meta::read_revisions(self, None)?;
        Ok(ApplyBatch {
            store: self,
            staged: Staged::new(written),
            written,
            last_log_id: None,
        })
    }

    /// A read-only transaction, answered from one snapshot without the log.
    pub fn read_only_txn(&self, req: &TxnRequest) -> Result<TxnResponse, StoreError> {
        let snapshot = self.db.snapshot();
        let reader = Reader::new(self, &snapshot)?;
        let mut nothing_staged = Staged::new(reader.revisions());
        let mut txn = WriteTxn::new(self, reader, &mut nothing_staged);
        let response = txn.txn(req)?;
        txn.counts.record();
        Ok(response)
    }
}
