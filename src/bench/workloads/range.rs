//! `range`: one operation is one Range: of one key of the key space (random, or in order
//! with `--sequential-keys`), or of the fixed `KEY [RANGE_END]` given on the command
//! line, with `--limit` and `--consistency`. Reports how many keys came back.
//!
//! With `--stream`, one operation is one etcd 3.7 RangeStream of `KEY [RANGE_END]`,
//! read to its end: its latency is the whole stream, and the time to its first chunk
//! and the number of chunks are reported too.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::WorkloadRun;
use crate::bench::cli::RangeArgs;
use crate::bench::context::Context;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::Tag;
use crate::client::AuthChannel;
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
    stream: bool,
    keys_returned: u64,
    /// `--stream`: each operation's time to its first chunk, and the chunks in all.
    first_chunks: Vec<Duration>,
    chunks: u64,
}

impl Reader {
    async fn stream(&mut self, request: RangeRequest) -> Result<(), OpError> {
        let started = Instant::now();
        let mut stream = self.kv.range_stream(request).await?.into_inner();
        let mut first = true;
        while let Some(message) = stream.message().await? {
            if first {
                self.first_chunks.push(started.elapsed());
                first = false;
            }
            self.chunks += 1;
            let kvs = message.range_response.map_or(0, |r| r.kvs.len());
            self.keys_returned += kvs as u64;
        }
        if first {
            return Err(OpError::Protocol("RangeStream ended without a chunk"));
        }
        Ok(())
    }
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
        if self.stream {
            self.stream(request).await?;
            return Ok(None);
        }
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
            stream: args.stream,
            keys_returned: 0,
            first_chunks: Vec::new(),
            chunks: 0,
        })
        .collect();
    let name = if args.stream { "range-stream" } else { "range" };
    let driven = drive(ctx.plan, ops, name, &ctx.interrupt).await?;
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
    if args.stream {
        let chunks: u64 = ops.iter().map(|op| op.chunks).sum();
        let mut firsts: Vec<Duration> = ops.iter().flat_map(|op| op.first_chunks.clone()).collect();
        firsts.sort();
        run.extra("chunks", chunks);
        if let (Some(min), Some(max)) = (firsts.first(), firsts.last()) {
            let median = firsts[firsts.len() / 2];
            let ms = |d: &Duration| d.as_secs_f64() * 1e3;
            run.extra("first_chunk_ms_min", ms(min));
            run.extra("first_chunk_ms_median", ms(&median));
            run.extra("first_chunk_ms_max", ms(max));
            run.note(
                "First chunk",
                format!(
                    "after {:.2} ms (median; min {:.2}, max {:.2}), {chunks} chunks in all",
                    ms(&median),
                    ms(min),
                    ms(max)
                ),
            );
        }
    }
    Ok(run)
}
