//! `txn-cas`: the Kubernetes API server's update, as one operation: a Range of a key of
//! the key space, then a Txn `if mod_revision(key) == seen then put(key, value) else
//! range(key)` (a missing key has mod_revision 0, so the first write is a create). A
//! Txn whose compare fails is a conflict: counted (and timed) apart, not an error, and
//! not retried.

use bytes::Bytes;

use super::WorkloadRun;
use crate::bench::cli::TxnCasArgs;
use crate::bench::context::Context;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::Tag;
use crate::bench::report::{latency_json, latency_text};
use crate::client::AuthChannel;
use crate::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};

/// The tag of an operation whose compare failed.
const CONFLICT: &str = "conflict";

struct Updater {
    kv: KvClient<AuthChannel>,
    keys: KeyPicker,
    value: Bytes,
    serializable: bool,
}

impl Op for Updater {
    async fn run(&mut self, seq: u64) -> Result<Tag, OpError> {
        let key = self.keys.next(seq);
        let read = RangeRequest {
            key: key.clone(),
            serializable: self.serializable,
            ..Default::default()
        };
        let seen = self
            .kv
            .range(read)
            .await?
            .into_inner()
            .kvs
            .first()
            .map_or(0, |kv| kv.mod_revision);
        let txn = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.clone(),
                target_union: Some(TargetUnion::ModRevision(seen)),
                ..Default::default()
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone(),
                    value: self.value.clone(),
                    ..Default::default()
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(RangeRequest {
                    key,
                    ..Default::default()
                })),
            }],
        };
        let response = self.kv.txn(txn).await?.into_inner();
        Ok((!response.succeeded).then_some(CONFLICT))
    }
}

pub async fn run(ctx: &Context, args: &TxnCasArgs) -> Result<WorkloadRun, BenchError> {
    let ops = (0..ctx.clients())
        .map(|i| Updater {
            kv: ctx.conns.kv(i),
            keys: ctx.keys.picker(i),
            value: ctx.value.clone(),
            serializable: args.consistency.serializable(),
        })
        .collect();
    let driven = drive(ctx.plan, ops, "txn-cas", &ctx.interrupt).await?;
    let (mut run, _) = WorkloadRun::from_driven(driven);
    let conflicts = run.recorder.tagged_count(CONFLICT);
    let succeeded = run.recorder.succeeded();
    let ratio = if succeeded > 0 {
        conflicts as f64 / succeeded as f64
    } else {
        0.0
    };
    let conflict_latency = run.recorder.tagged_latency(CONFLICT);
    run.extra("conflicts", conflicts);
    run.extra("conflict_ratio", ratio);
    run.extra("conflict_latency_ms", latency_json(&conflict_latency));
    run.note(
        "Conflicts",
        format!(
            "{conflicts} ({:.1}% of successful operations: compare failed, nothing written)",
            ratio * 100.0
        ),
    );
    if conflicts > 0 {
        run.note("  latency", latency_text(&conflict_latency));
    }
    Ok(run)
}
