//! `put`: one operation is one Put of a key of the key space (random, or in order with
//! `--sequential-keys`) with the shared value.

use bytes::Bytes;

use super::WorkloadRun;
use crate::bench::auth::AuthChannel;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::Tag;
use crate::bench::Context;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::PutRequest;

struct Putter {
    kv: KvClient<AuthChannel>,
    keys: KeyPicker,
    value: Bytes,
}

impl Op for Putter {
    async fn run(&mut self, seq: u64) -> Result<Tag, OpError> {
        let request = PutRequest {
            key: self.keys.next(seq),
            value: self.value.clone(),
            ..Default::default()
        };
        self.kv.put(request).await?;
        Ok(None)
    }
}

pub async fn run(ctx: &Context) -> Result<WorkloadRun, BenchError> {
    let ops = (0..ctx.clients())
        .map(|i| Putter {
            kv: ctx.conns.kv(i),
            keys: ctx.keys.picker(i),
            value: ctx.value.clone(),
        })
        .collect();
    let driven = drive(ctx.plan, ops, "put", &ctx.interrupt).await?;
    Ok(WorkloadRun::from_driven(driven).0)
}
