//! Applying one committed command: the only way the key space changes.
//!
//! A [`WriteTxn`] stages every change of one command (a Put, a DeleteRange, a whole
//! Txn, a Compact) into one RocksDB `WriteBatch` together with the new counters and
//! the applied log id, so a command is applied entirely or not at all, and applying
//! it again after a crash is impossible (the log id says it is done). Reads inside the
//! command see its earlier changes through an overlay. It must never apply a command
//! out of log order; the state machine guarantees that.

use bytes::Bytes;
use quantykube_raft::{LogId, StoredMembership};
use rocksdb::WriteBatch;

use super::encoding::{escape_key, history_key, version_key, HistoryEntry, StoredVersion};
use super::meta::{self, Revisions};
use super::range::{self, Overlay, Reader};
use super::txn::{self, Path};
use super::{compaction, RevisionStore, StoreError, CF_HISTORY, CF_KV};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_error::Kind;
use crate::proto::command::command_result::Result as CommandResultKind;
use crate::proto::command::{Command, CommandError, CommandResult, PublishMemberResult};
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::response_op::Response;
use crate::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use crate::proto::mvccpb::KeyValue;

/// The result of applying a command, as returned to the node that proposed it.
pub type WriteOutcome = CommandResult;

/// The changes of one command, staged and not yet visible to readers.
pub struct WriteTxn<'a> {
    store: &'a RevisionStore,
    reader: Reader<'a>,
    revisions: Revisions,
    overlay: Overlay,
    changes: u32,
    batch: WriteBatch,
}

impl<'a> WriteTxn<'a> {
    pub fn new(store: &'a RevisionStore, reader: Reader<'a>) -> Result<Self, StoreError> {
        Ok(WriteTxn {
            revisions: reader.revisions()?,
            store,
            reader,
            overlay: Overlay::new(),
            changes: 0,
            batch: WriteBatch::default(),
        })
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

    fn latest(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.overlay.get(key) {
            Some(state) => Ok(state.clone()),
            None => self.reader.get(key, self.revisions.current),
        }
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let revisions = Revisions {
            current: self.visible_revision(),
            compacted: self.revisions.compacted,
        };
        // A read at an explicit (older) revision cannot see this command's changes.
        let overlay = (req.revision <= 0).then_some(&self.overlay);
        range::range(&self.reader, revisions, req, overlay)
    }

    fn stage(&mut self, key: Bytes, state: Option<KeyValue>) -> Result<(), StoreError> {
        let revision = self.pending_revision();
        let escaped = escape_key(&key);
        let record = match &state {
            Some(kv) => StoredVersion::Live {
                create_revision: kv.create_revision,
                version: kv.version,
                lease: kv.lease,
                value: kv.value.clone(),
            },
            None => StoredVersion::Tombstone,
        };
        self.batch.put_cf(
            self.store.cf(CF_KV)?,
            version_key(&escaped, revision),
            record.encode(),
        );
        let event = HistoryEntry {
            deleted: state.is_none(),
            key: key.to_vec(),
        };
        self.batch.put_cf(
            self.store.cf(CF_HISTORY)?,
            history_key(revision, self.changes),
            event.encode(),
        );
        self.changes += 1;
        self.overlay.insert(key, state);
        Ok(())
    }

    fn put(&mut self, req: &PutRequest) -> Result<PutResponse, StoreError> {
        let prev = self.latest(&req.key)?;
        let (value, lease) = match (&prev, req.ignore_value || req.ignore_lease) {
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
            create_revision: prev.as_ref().map_or(revision, |p| p.create_revision),
            mod_revision: revision,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        self.stage(req.key.clone(), Some(kv))?;
        Ok(PutResponse {
            header: Some(header(self.visible_revision())),
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    fn delete_range(
        &mut self,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StoreError> {
        let doomed = self.range(&RangeRequest {
            key: req.key.clone(),
            range_end: req.range_end.clone(),
            ..Default::default()
        })?;
        for kv in &doomed.kvs {
            self.stage(kv.key.clone(), None)?;
        }
        Ok(DeleteRangeResponse {
            header: Some(header(self.visible_revision())),
            deleted: i64::try_from(doomed.kvs.len()).unwrap_or(i64::MAX),
            prev_kvs: if req.prev_kv { doomed.kvs } else { Vec::new() },
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
                Some(Request::RequestRange(r)) => Response::ResponseRange(self.range(r)?),
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
        meta::stage_compacted_revision(self.store, &mut self.batch, req.revision)?;
        Ok(CompactionResponse {
            header: Some(header(self.revisions.current)),
        })
    }

    /// Commits the staged changes with `log_id` as the last applied entry.
    fn commit(mut self, log_id: &LogId) -> Result<(), StoreError> {
        if self.changes > 0 {
            let revision = self.pending_revision();
            meta::stage_current_revision(self.store, &mut self.batch, revision)?;
        }
        meta::stage_applied_log_id(self.store, &mut self.batch, log_id)?;
        self.store.db.write(self.batch)?;
        Ok(())
    }
}

fn header(revision: i64) -> ResponseHeader {
    ResponseHeader {
        revision,
        ..Default::default()
    }
}

fn error_result(error: StoreError) -> Result<CommandResult, StoreError> {
    let kind = match error {
        StoreError::Compacted => Kind::Compacted,
        StoreError::FutureRevision => Kind::FutureRevision,
        StoreError::KeyNotFound => Kind::KeyNotFound,
        StoreError::LeaseNotFound => Kind::LeaseNotFound,
        fatal => return Err(fatal),
    };
    Ok(CommandResult {
        result: Some(CommandResultKind::Error(CommandError { kind: kind.into() })),
    })
}

impl RevisionStore {
    /// Applies one committed command. A request that fails identically on every node
    /// (a compacted revision, a missing key...) is its result; any other error means
    /// this node cannot apply the log and must stop.
    pub fn apply_command(
        &self,
        log_id: &LogId,
        command: &Command,
    ) -> Result<WriteOutcome, StoreError> {
        let mut txn = WriteTxn::new(self, Reader::live(self))?;
        let applied = match &command.request {
            Some(CommandRequest::Put(p)) => {
                if p.lease != 0 && !self.lease_exists(p.lease) {
                    Err(StoreError::LeaseNotFound)
                } else {
                    txn.put(p).map(CommandResultKind::Put)
                }
            }
            Some(CommandRequest::DeleteRange(d)) => {
                txn.delete_range(d).map(CommandResultKind::DeleteRange)
            }
            Some(CommandRequest::Txn(t)) => txn.txn(t).map(CommandResultKind::Txn),
            Some(CommandRequest::Compaction(c)) => {
                txn.compact(c).map(CommandResultKind::Compaction)
            }
            Some(CommandRequest::PublishMember(attributes)) => {
                meta::stage_member_attributes(self, &mut txn.batch, attributes)
                    .map(|()| CommandResultKind::PublishMember(PublishMemberResult {}))
            }
            None => Err(StoreError::corrupt("empty command")),
        };
        let compact_to = match &command.request {
            Some(CommandRequest::Compaction(c)) if applied.is_ok() => Some(c.revision),
            _ => None,
        };
        let outcome = match applied {
            Ok(result) => {
                txn.commit(log_id)?;
                CommandResult {
                    result: Some(result),
                }
            }
            Err(error) => {
                let outcome = error_result(error)?;
                // The command failed as a whole: only its log id is recorded.
                WriteTxn::new(self, Reader::live(self))?.commit(log_id)?;
                outcome
            }
        };
        if let Some(revision) = compact_to {
            compaction::compact_physically(self, revision)?;
        }
        Ok(outcome)
    }

    /// Records an entry that changes no key (a leader's blank entry).
    pub fn apply_blank(&self, log_id: &LogId) -> Result<(), StoreError> {
        WriteTxn::new(self, Reader::live(self))?.commit(log_id)
    }

    /// Records a membership change entry.
    pub fn apply_membership(
        &self,
        log_id: &LogId,
        membership: &StoredMembership,
    ) -> Result<(), StoreError> {
        let mut txn = WriteTxn::new(self, Reader::live(self))?;
        meta::stage_membership(self, &mut txn.batch, membership)?;
        txn.commit(log_id)
    }

    /// A read-only transaction, answered from one snapshot without the log.
    pub fn read_only_txn(&self, req: &TxnRequest) -> Result<TxnResponse, StoreError> {
        let snapshot = self.db.snapshot();
        let mut txn = WriteTxn::new(self, Reader::new(self, &snapshot))?;
        txn.txn(req)
    }

    /// No lease exists until the lessor grants leases; every non-zero lease is unknown.
    pub fn lease_exists(&self, _lease: i64) -> bool {
        false
    }
}
