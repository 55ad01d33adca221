//! Counting what a scan of this thread stepped over without returning it (RocksDB's
//! per-thread perf counters): the measure by which `latest`'s upkeep decides to clear
//! out overwritten entries. It only counts; it never decides.

use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};

/// Counts the entries RocksDB's iterators on this thread step over without returning
/// them: versions hidden by a newer one, and deletions.
///
/// Every put of a key adds an entry to `latest`'s memtable, which keeps the overwritten
/// ones until it flushes (up to 8 MiB of them). A scan of keys written often (Kubernetes'
/// leases and endpoints, compare.sh's txn-cas keys) steps over all of them: after
/// txn-cas ×100, a range of its 1 000 keys spent most of its 3 ms of CPU in the
/// memtable's iterator (docs/benchmarks.md, issue 20's eleventh step).
pub(super) struct HiddenEntries {
    context: PerfContext,
    before: u64,
}

impl HiddenEntries {
    /// Starts counting on this thread (RocksDB's per-thread perf counters).
    pub(super) fn start() -> Self {
        set_perf_stats(PerfStatsLevel::EnableCount);
        let context = PerfContext::default();
        let before = skipped(&context);
        HiddenEntries { context, before }
    }

    /// The entries stepped over since `start` by an iterator moved `steps` times with
    /// `next`. RocksDB counts each step as one skipped entry (the key it leaves, in
    /// `DBIter::Next`), hidden or not; those are not hidden entries.
    pub(super) fn count(&self, steps: u64) -> u64 {
        skipped(&self.context)
            .saturating_sub(self.before)
            .saturating_sub(steps)
    }
}

impl Drop for HiddenEntries {
    /// Counting stops however the scan ends, so no other work on this thread pays for it.
    fn drop(&mut self) {
        set_perf_stats(PerfStatsLevel::Disable);
    }
}

fn skipped(context: &PerfContext) -> u64 {
    context.metric(PerfMetric::InternalKeySkippedCount)
        + context.metric(PerfMetric::InternalDeleteSkippedCount)
}
