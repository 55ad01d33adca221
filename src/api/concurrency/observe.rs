//! Observe: every leader's proclamations, in order (etcd's `Election.Observe`).
//!
//! A round reads the leader; if there is none, it watches the election's prefix from
//! that read for the first put. It sends the leader's key and value, then watches that
//! key from the next revision and sends each put (each Proclaim) until the key is
//! deleted, and starts the next round. It ends, as etcd's does, when a read or a watch
//! fails (the stream then ends with no error, as etcd's server ends it) or when the
//! client goes away. Between rounds only the current value is sent: a leader that
//! came and went while no round watched is not reported, as in etcd.

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{keys, Client, ConcurrencyError};
use crate::proto::etcdserverpb::{ResponseHeader, WatchCreateRequest};
use crate::proto::mvccpb::event::EventType;
use crate::proto::mvccpb::KeyValue;

/// What Observe sends: a header and the leader's key and value.
pub type Proclamation = (ResponseHeader, KeyValue);

/// Follows election `name` for the caller, sending on `out` until the client is gone
/// or a read or watch fails.
pub async fn observe(client: Client, name: Bytes, out: mpsc::Sender<Proclamation>) {
    let prefix = keys::prefix(&name);
    tokio::select! {
        () = out.closed() => {}
        ended = follow(&client, &prefix, &out) => {
            if let Err(error) = ended {
                tracing::debug!(%error, "election observer ended");
            }
        }
    }
}

async fn follow(
    client: &Client,
    prefix: &[u8],
    out: &mpsc::Sender<Proclamation>,
) -> Result<(), ConcurrencyError> {
    loop {
        let current = client.range(keys::first_created(prefix)).await?;
        let header = current.header.unwrap_or_default();
        let (header, leader) = match current.kvs.into_iter().next() {
            Some(leader) => (header, leader),
            None => first_put(client, prefix, header.revision).await?,
        };
        let from = header.revision + 1;
        let key = leader.key.clone();
        send(out, header, leader).await?;
        let mut watch = client.watch(WatchCreateRequest {
            key,
            start_revision: from,
            ..Default::default()
        })?;
        'leader: loop {
            let response = watch.next().await?;
            let header = response.header.unwrap_or_default();
            for event in response.events {
                if event.r#type == EventType::Delete as i32 {
                    break 'leader;
                }
                if let Some(kv) = event.kv {
                    send(out, header, kv).await?;
                }
            }
        }
    }
}

/// Waits for the first put under `prefix` from `revision` on (a delete there would
/// only be a key coming and going); its header is at that put's revision.
async fn first_put(
    client: &Client,
    prefix: &[u8],
    revision: i64,
) -> Result<Proclamation, ConcurrencyError> {
    let mut watch = client.watch(WatchCreateRequest {
        key: Bytes::copy_from_slice(prefix),
        range_end: keys::prefix_end(prefix),
        start_revision: revision,
        ..Default::default()
    })?;
    loop {
        let response = watch.next().await?;
        let put = response
            .events
            .into_iter()
            .find(|event| event.r#type == EventType::Put as i32)
            .and_then(|event| event.kv);
        if let Some(kv) = put {
            let mut header = response.header.unwrap_or_default();
            header.revision = kv.mod_revision;
            return Ok((header, kv));
        }
    }
}

async fn send(
    out: &mpsc::Sender<Proclamation>,
    header: ResponseHeader,
    kv: KeyValue,
) -> Result<(), ConcurrencyError> {
    out.send((header, kv))
        .await
        .map_err(|_| ConcurrencyError::Cancelled)
}
