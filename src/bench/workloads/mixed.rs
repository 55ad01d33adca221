//! `mixed`: each operation is a read (a single-key Range, `--consistency`) with
//! probability `--read-ratio`, otherwise a write (a Put of the shared value), of a key
//! of the key space. Reads and writes are also reported apart.

use bytes::Bytes;

use super::WorkloadRun;
use crate::bench::cli::MixedArgs;
use crate::bench::context::Context;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::Tag;
use crate::bench::report::{latency_json, latency_text};
use crate::client::AuthChannel;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::{PutRequest, RangeRequest};

const READ: &str = "read";
const WRITE: &str = "write";

struct Mixer {
    kv: KvClient<AuthChannel>,
    keys: KeyPicker,
    value: Bytes,
    read_ratio: f64,
    serializable: bool,
}

impl Op for Mixer {
    async fn run(&mut self, seq: u64) -> Result<Tag, OpError> {
        let read = self.keys.unit() < self.read_ratio;
        let key = self.keys.next(seq);
        if read {
            let request = RangeRequest {
                key,
                serializable: self.serializable,
                ..Default::default()
            };
            self.kv.range(request).await?;
            Ok(Some(READ))
        } else {
            let request = PutRequest {
                key,
                value: self.value.clone(),
                ..Default::default()
            };
            self.kv.put(request).await?;
            Ok(Some(WRITE))
        }
    }
}

pub async fn run(ctx: &Context, args: &MixedArgs) -> Result<WorkloadRun, BenchError> {
    let ops = (0..ctx.clients())
        .map(|i| Mixer {
            kv: ctx.conns.kv(i),
            keys: ctx.keys.picker(i),
            value: ctx.value.clone(),
            read_ratio: args.read_ratio,
            serializable: args.consistency.serializable(),
        })
        .collect();
    let driven = drive(ctx.plan, ops, "mixed", &ctx.interrupt).await?;
    let (mut run, _) = WorkloadRun::from_driven(driven);
    for (tag, label) in [(READ, "Reads"), (WRITE, "Writes")] {
        let count = run.recorder.tagged_count(tag);
        let latency = run.recorder.tagged_latency(tag);
        run.extra(&format!("{tag}s"), count);
        run.extra(&format!("{tag}_latency_ms"), latency_json(&latency));
        run.note(label, format!("{count}: {}", latency_text(&latency)));
    }
    Ok(run)
}
