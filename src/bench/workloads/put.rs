//! `put`: one operation is one Put of a key of the key space (random, or in order with
//! `--sequential-keys`) with the shared value. With `--compact-every N` the store is
//! compacted as the Kubernetes API server compacts it, keeping the last N revisions:
//! compactions run beside the puts and are not operations of the run.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::WorkloadRun;
use crate::bench::cli::PutArgs;
use crate::bench::context::Context;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::Tag;
use crate::client::AuthChannel;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::{CompactionRequest, PutRequest};

struct Putter {
    kv: KvClient<AuthChannel>,
    keys: KeyPicker,
    value: Bytes,
    compactor: Option<Arc<Compactor>>,
}

impl Op for Putter {
    async fn run(&mut self, seq: u64) -> Result<Tag, OpError> {
        let request = PutRequest {
            key: self.keys.next(seq),
            value: self.value.clone(),
            ..Default::default()
        };
        let response = self.kv.put(request).await?.into_inner();
        if let (Some(compactor), Some(header)) = (&self.compactor, response.header) {
            compactor.saw(header.revision);
        }
        Ok(None)
    }
}

/// Starts a compaction each time the revisions the puts return pass another `every`.
struct Compactor {
    every: i64,
    kv: KvClient<AuthChannel>,
    /// The revision at which the next compaction is due.
    next_due: AtomicI64,
    started: Mutex<Vec<JoinHandle<Result<(), OpError>>>>,
}

impl Compactor {
    fn saw(&self, revision: i64) {
        let due = self.next_due.load(Ordering::Relaxed);
        if revision < due {
            return;
        }
        // One writer wins the compaction of each step; the others see the new due.
        let next = revision.saturating_add(self.every);
        if self
            .next_due
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let keep_from = revision - self.every;
        if keep_from <= 0 {
            return;
        }
        let mut kv = self.kv.clone();
        let task = tokio::spawn(async move {
            let request = CompactionRequest {
                revision: keep_from,
                physical: false,
            };
            kv.compact(request).await?;
            Ok(())
        });
        self.started
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(task);
    }

    /// Waits for every compaction started; returns how many there were, and the
    /// kinds of those that failed.
    async fn finish(&self) -> (u64, Vec<String>) {
        let tasks = std::mem::take(
            &mut *self
                .started
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let count = tasks.len() as u64;
        let mut failures = Vec::new();
        for task in tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => failures.push(format!("compaction: {}", error.kind())),
                Err(error) => failures.push(format!("compaction task failed: {error}")),
            }
        }
        (count, failures)
    }
}

pub async fn run(ctx: &Context, args: &PutArgs) -> Result<WorkloadRun, BenchError> {
    let compactor = args.compact_every.map(|every| {
        Arc::new(Compactor {
            every: i64::try_from(every).unwrap_or(i64::MAX),
            kv: ctx.conns.kv(0),
            next_due: AtomicI64::new(0),
            started: Mutex::default(),
        })
    });
    let ops = (0..ctx.clients())
        .map(|i| Putter {
            kv: ctx.conns.kv(i),
            keys: ctx.keys.picker(i),
            value: ctx.value.clone(),
            compactor: compactor.clone(),
        })
        .collect();
    let driven = drive(ctx.plan, ops, "put", &ctx.interrupt).await?;
    let mut run = WorkloadRun::from_driven(driven).0;
    if let Some(compactor) = compactor {
        let (count, failures) = compactor.finish().await;
        run.extra("compactions", count);
        run.note(
            "Compactions",
            format!("{count} ({} failed)", failures.len()),
        );
        for failure in failures {
            run.recorder.error_kind(failure, 1);
        }
    }
    Ok(run)
}
