//! The revision store: etcd's MVCC key space on RocksDB.
//!
//! It owns the `kv`, `history`, `latest`, `meta` and `lease` column families of a
//! node's database: every version of every key, the revision-ordered change log, the
//! newest version of every live key, live leases and their keys, the store's counters (current and compacted revision,
//! applied raft log id, membership), the cluster's alarms, and the feed of changes that watches follow.
//! Reads are served
//! from a RocksDB snapshot so that a response sees one revision; writes arrive only
//! through [`apply`](RevisionStore::apply), one raft log entry at a time, in log order.
//! It must never decide what is committed (raft does) nor validate request shapes (the
//! API layer does); it enforces only what depends on the data.

mod alarm;
pub mod auth;
mod compaction;
mod defrag;
mod encoding;
mod error;
mod events;
mod export;
mod feed;
mod hash;
mod hidden_entries;
mod import;
mod latest;
mod lease;
pub mod member_records;
mod meta;
pub mod metrics;
mod packed;
mod range;
mod range_stream;
mod request_type;
mod size;
mod snapshot;
pub mod snapshot_records;
pub mod txn;
mod write;

pub use alarm::{alarm_name, alarm_text, quota_cost};
pub use auth::AuthRecords;
pub use compaction::{run as run_physical_compaction, CompactionPass};
pub use hash::{KvHash, CASTAGNOLI};
pub use latest::run as run_latest_upkeep;

use std::sync::Arc;

use rocksdb::{BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, Options, DB};

pub use error::StoreError;
pub use events::{EventPage, Interest};
pub use export::{Export, StoredChange};
pub use feed::Changes;
pub use import::{Import, ImportSummary};
pub use lease::LeaseRecord;
pub use meta::{read_applied, read_member_attributes, read_removed_members, AppliedState};
pub use range::in_range;
pub use range_stream::{chunk_budget, RangeStream};
pub use request_type::{PerRequestType, RequestType};
pub use snapshot::{
    keep_received_snapshot, read_snapshot_meta, verify_transfer_file, InstallUnderWay, SnapshotInfo,
};
pub use write::{ApplyBatch, WriteOutcome};

use crate::proto::etcdserverpb::{RangeRequest, RangeResponse};

pub(crate) const CF_KV: &str = "kv";
pub(crate) const CF_HISTORY: &str = "history";
pub(crate) const CF_LATEST: &str = "latest";
pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_LEASE: &str = "lease";

/// Column families the revision store owns in the node's database.
pub const STORE_COLUMN_FAMILIES: &[&str] = &[CF_KV, CF_HISTORY, CF_LATEST, CF_META, CF_LEASE];

/// L0 files `kv` and `history` gather before RocksDB compacts them (its default is 4).
const L0_FILES_BEFORE_COMPACTION: i32 = 16;
/// L0 files `latest` gathers before RocksDB compacts it: RocksDB's default, kept because
/// every current read scans it. A crowded scan asks for neither a flush nor a
/// compaction at this count (`latest.rs`).
pub(super) const LATEST_L0_FILES_BEFORE_COMPACTION: i32 = 4;

/// The revision store's RocksDB (the raft log has one of its own: src/disk.rs).
/// `extra_cfs` names other column families the database holds and must be opened with:
/// those of a raft log kept here by a build before the split, about to be moved out.
pub fn open_database(path: &std::path::Path, extra_cfs: &[&str]) -> Result<Arc<DB>, StoreError> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // LZ4 at every level. zstd at the bottom level saved disk (which is already a tenth
    // of etcd's) but cost 6% of the CPU per put once compactions reach that level
    // (`PREWRITE=40s deploy/bench/one-run.sh`: 217-231 against 204-215 us per put).
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // Memory: every column family's memtables together stay under 32 MiB (RocksDB
    // flushes the largest when they reach it), instead of up to 64 MiB per memtable per
    // family. Smaller memtables also keep the apply path's seeks short; at 1 000 000
    // keys this took a member's peak RSS from 290 to 251 MiB with no loss of put
    // throughput (docs/benchmarks.md).
    opts.set_db_write_buffer_size(32 << 20);
    opts.set_write_buffer_size(8 << 20);
    // A WAL file stays until every family with writes in it has flushed, and `meta`
    // (the applied log id of every batch) rarely fills a memtable: without a bound the
    // WAL would grow to RocksDB's default of four times every memtable together, all of
    // it replayed at each start. Past twice the memtable budget RocksDB flushes the
    // families that hold the oldest file.
    opts.set_max_total_wal_size(64 << 20);
    let cfs = STORE_COLUMN_FAMILIES
        .iter()
        .chain(extra_cfs)
        .map(|name| match *name {
            // Point lookups of keys that may not exist (every put of a new key): a bloom
            // filter answers most of them without reading a block.
            CF_LATEST => {
                let mut table = BlockBasedOptions::default();
                table.set_bloom_filter(10.0, false);
                let mut latest = opts.clone();
                latest.set_block_based_table_factory(&table);
                latest
                    .set_level_zero_file_num_compaction_trigger(LATEST_L0_FILES_BEFORE_COMPACTION);
                ColumnFamilyDescriptor::new(*name, latest)
            }
            // Every version and the change log: written on every put, deleted by
            // compaction, read only by history reads, watches catching up and compaction.
            // Each memtable flush makes an L0 file, and with RocksDB's trigger of 4 every
            // fourth one rewrote the whole family into its one bottom level (random keys
            // touch all of it): a cost per put that grew with the store, half of a
            // member's CPU after 1 000 000 keys when every raft snapshot still forced a
            // flush (docs/benchmarks.md, issue 20's sixth step). Waiting for 16 files
            // rewrites it a quarter as often; these families' few reads merge the extra
            // files.
            CF_KV | CF_HISTORY => {
                let mut versions = opts.clone();
                versions.set_level_zero_file_num_compaction_trigger(L0_FILES_BEFORE_COMPACTION);
                versions.set_level_zero_slowdown_writes_trigger(L0_FILES_BEFORE_COMPACTION * 3);
                versions.set_level_zero_stop_writes_trigger(L0_FILES_BEFORE_COMPACTION * 4);
                if *name == CF_KV {
                    with_owner_filter(&mut versions);
                }
                ColumnFamilyDescriptor::new(*name, versions)
            }
            _ => ColumnFamilyDescriptor::new(*name, opts.clone()),
        });
    Ok(Arc::new(DB::open_cf_descriptors(&opts, path, cfs)?))
}

/// Gives `kv` a bloom filter of each file's user keys (the escaped key before the
/// revision), so that a seek to one key's versions skips the files that hold none.
/// Physical compaction makes such a seek for about every put, and with random keys every
/// L0 file covers the whole key space: without the filter each seek read and
/// decompressed a block from each of up to 16 L0 files, most of a member's CPU under
/// sustained puts (docs/benchmarks.md, issue 20's eighth step).
///
/// RocksDB applies such a filter to any iterator that does not ask for total order, and
/// a scan across keys that seeks to a version key would then miss the files lacking that
/// key: every `kv` iterator other than compaction's sets `total_order_seek`
/// ([`total_order`]). Files written before the filter existed are read without it.
fn with_owner_filter(kv: &mut Options) {
    kv.set_prefix_extractor(rocksdb::SliceTransform::create(
        "quantykube.kv.owner",
        encoding::version_key_owner,
        Some(encoding::is_version_key),
    ));
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    // Only the prefixes: `kv`'s one point lookup (a version written at a known
    // revision) finds its key's prefix in the filter as well.
    table.set_whole_key_filtering(false);
    kv.set_block_based_table_factory(&table);
}

/// Read options for an iterator that may cross user keys in `kv`: total order, so that
/// `kv`'s prefix filter never hides a file ([`with_owner_filter`]).
pub(crate) fn total_order() -> rocksdb::ReadOptions {
    let mut opts = rocksdb::ReadOptions::default();
    opts.set_total_order_seek(true);
    opts
}

/// etcd's MVCC store over one node's RocksDB.
pub struct RevisionStore {
    db: Arc<DB>,
    feed: feed::ChangeFeed,
    /// Readers hold it shared while they read; a snapshot install holds it alone, so
    /// that no reader sees the store half rewritten (the state before the install, or
    /// after it, never a mix). Apply never takes it: installs and applies are already
    /// ordered by raft.
    install_gate: Arc<tokio::sync::RwLock<()>>,
    /// The active alarms, as `meta` holds them (`alarm`).
    alarms: alarm::AlarmCache,
    /// The applied auth store (`auth`).
    auth: auth::AuthCache,
    /// Stops two defragmentations from running at once (`defrag`).
    defrag_lock: std::sync::Mutex<()>,
    /// Crowded scans' asks for a flush or a compaction of `latest` (`latest`).
    latest_upkeep: latest::LatestUpkeep,
    /// Bytes compaction deleted since the last defragmentation (`defrag`).
    reclaimable_bytes: std::sync::atomic::AtomicU64,
    /// The size the quota checks last read (`size`).
    size_sample: size::SizeSample,
    /// Wakes the physical compaction worker (`compaction`).
    compaction_wake: tokio::sync::Notify,
    /// How far physical compaction has gone, for those who wait on it (`compaction`).
    physically_compacted: tokio::sync::watch::Sender<i64>,
    /// Snapshot installs so far: a compaction pass that started before one gives up.
    installs: std::sync::atomic::AtomicU64,
}

/// Held by a reader of the store: no snapshot install runs meanwhile.
pub type ReadGate = tokio::sync::OwnedRwLockReadGuard<()>;
/// Held by a snapshot install: no reader reads meanwhile.
pub type InstallGate = tokio::sync::OwnedRwLockWriteGuard<()>;

impl RevisionStore {
    pub fn new(db: Arc<DB>) -> Result<Self, StoreError> {
        for name in STORE_COLUMN_FAMILIES {
            if db.cf_handle(name).is_none() {
                return Err(StoreError::corrupt(format!("missing column family {name}")));
            }
        }
        let store = RevisionStore {
            db,
            feed: feed::ChangeFeed::new(),
            install_gate: Arc::default(),
            alarms: alarm::AlarmCache::default(),
            auth: auth::AuthCache::default(),
            defrag_lock: std::sync::Mutex::default(),
            latest_upkeep: latest::LatestUpkeep::default(),
            reclaimable_bytes: std::sync::atomic::AtomicU64::default(),
            size_sample: size::SizeSample::default(),
            compaction_wake: tokio::sync::Notify::new(),
            physically_compacted: tokio::sync::watch::Sender::new(0),
            installs: std::sync::atomic::AtomicU64::default(),
        };
        store
            .physically_compacted
            .send_replace(meta::read_physically_compacted(&store)?);
        store.reload_alarms()?;
        store.reload_auth()?;
        Ok(store)
    }

    /// Waits until no snapshot install runs, and keeps the next one waiting until the
    /// returned guard is dropped. Every client-facing read (Range, watch history, lease
    /// keys) holds one.
    pub async fn readable(&self) -> ReadGate {
        self.install_gate.clone().read_owned().await
    }

    /// Waits until no reader reads, and keeps new readers waiting until the returned
    /// guard is dropped. Held across a snapshot install.
    pub async fn exclusive(&self) -> InstallGate {
        self.install_gate.clone().write_owned().await
    }

    pub(crate) fn cf(&self, name: &str) -> Result<&ColumnFamily, StoreError> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| StoreError::corrupt(format!("missing column family {name}")))
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    /// The revision of the last change: 1 in a new store, as etcd.
    pub fn current_revision(&self) -> Result<i64, StoreError> {
        meta::read_revisions(self, None).map(|r| r.current)
    }

    /// The revision of the last compaction, or -1 if none happened yet.
    pub fn compacted_revision(&self) -> Result<i64, StoreError> {
        meta::read_revisions(self, None).map(|r| r.compacted)
    }

    /// A Range as etcd answers it, against one consistent snapshot of the store. The
    /// header carries only the revision; the caller fills in the rest.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let started = std::time::Instant::now();
        let snapshot = self.db.snapshot();
        let response = range::Reader::new(self, &snapshot)
            .and_then(|reader| range::range(&reader, reader.revisions(), req, None));
        metrics::ranged(response.is_ok(), started.elapsed());
        let response = response?;
        metrics::OperationCounts {
            ranges: 1,
            ..Default::default()
        }
        .record();
        Ok(response)
    }

    /// RocksDB's estimate of the number of live keys (the `latest` column family holds
    /// one entry per live key): no scan, so a scrape costs the same at any size.
    pub fn estimated_key_count(&self) -> u64 {
        self.db
            .cf_handle(CF_LATEST)
            .and_then(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod alarm_tests;
#[cfg(test)]
mod apply_tests;
#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod export_tests;
#[cfg(test)]
mod latest_tests;
#[cfg(test)]
mod member_tests;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;
