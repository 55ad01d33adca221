//! `range`: one operation is one Range: of one key of the key space (random, or in order
//! with `--sequential-keys`), or of the fixed `KEY [RANGE_END]` given on the command
//! line, with `--limit` and `--consistency`. Reports how many keys came back.

use bytes::Bytes;

use super::WorkloadRun;
use crate::bench::auth::AuthChannel;
use crate::bench::cli::RangeArgs;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::Tag;
use crate::bench::Context;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::RangeRequest;

enum Target {
    /// The same key or range every time.
    Fixed { key: Bytes, range_end: Bytes },
    /// One key of the key space per request.
    KeySpace(KeyPicker),
}

struct Reader {
    kv: KvClient<AuthChannel>,
    target: Target,
    limit: i64,
    serializable: bool,
    keys_returned: u64,
}

impl Op for Reader {
    async fn run(&mut self, seq: u64) -> Result<Tag, OpError> {
        let (key, range_end) = match &mut self.target {
            Target::Fixed { key, range_end } => (key.clone(), range_end.clone()),
            Target::KeySpace(keys) => (keys.next(seq), Bytes::new()),
        };
        let request = RangeRequest {
            key,
            range_end,
            limit: self.limit,
            serializable: self.serializable,
            ..Default::default()
        };
        let response = self.kv.range(request).await?.into_inner();
        self.keys_returned += response.kvs.len() as u64;
        Ok(None)
    }
}

pub async fn run(ctx: &Context, args: &RangeArgs) -> Result<WorkloadRun, BenchError> {
    let fixed = args.key.as_ref().map(|key| {
        (
            Bytes::copy_from_slice(key.as_bytes()),
            args.range_end
                .as_ref()
                .map_or_else(Bytes::new, |end| Bytes::copy_from_slice(end.as_bytes())),
        )
    });
    let ops = (0..ctx.clients())
        .map(|i| Reader {
            kv: ctx.conns.kv(i),
            target: match &fixed {
                Some((key, range_end)) => Target::Fixed {
                    key: key.clone(),
                    range_end: range_end.clone(),
                },
                None => Target::KeySpace(ctx.keys.picker(i)),
            },
            limit: args.limit,
            serializable: args.consistency.serializable(),
            keys_returned: 0,
        })
        .collect();
    let driven = drive(ctx.plan, ops, "range", &ctx.interrupt).await?;
    let (mut run, ops) = WorkloadRun::from_driven(driven);
    let keys: u64 = ops.iter().map(|op| op.keys_returned).sum();
    let succeeded = run.recorder.succeeded();
    let per_op = if succeeded > 0 {
        keys as f64 / succeeded as f64
    } else {
        0.0
    };
    run.extra("keys_returned", keys);
    run.extra("keys_per_operation", per_op);
    run.note(
        "Keys",
        format!("{keys} returned, {per_op:.1} per operation"),
    );
    Ok(run)
}
