//! Waiting for the keys ahead of one's own to go (etcd's `waitDeletes` and `waitDelete`
//! in client/v3/concurrency/key.go).
//!
//! Each round reads the newest key created at or before the given revision and
//! watches it from the revision of that read until it is deleted (by Unlock or Resign,
//! a DeleteRange, or its lease's revoke or expiry); then reads again. Nothing is polled:
//! a round costs one read and one watch, and there are at most as many rounds as keys
//! ahead, since every round ends with one of them deleted.

use bytes::Bytes;

use super::cancel::Cancellation;
use super::{keys, Client, ConcurrencyError};
use crate::proto::etcdserverpb::WatchCreateRequest;
use crate::proto::mvccpb::event::EventType;

/// Waits until no key under `prefix` created at or before `max_create_revision` is
/// left, or the request is cancelled.
pub async fn for_deletes(
    client: &Client,
    prefix: &[u8],
    max_create_revision: i64,
    cancel: &mut Cancellation,
) -> Result<(), ConcurrencyError> {
    loop {
        let ahead = keys::last_created_by(prefix, max_create_revision);
        let newest = cancel.unless_cancelled(client.range(ahead)).await?;
        let revision = newest.header.as_ref().map_or(0, |h| h.revision);
        let Some(kv) = newest.kvs.into_iter().next() else {
            return Ok(());
        };
        cancel
            .unless_cancelled(for_delete(client, kv.key, revision))
            .await?;
    }
}

/// Waits for a deletion of `key` at `revision` or later.
async fn for_delete(client: &Client, key: Bytes, revision: i64) -> Result<(), ConcurrencyError> {
    let mut watch = client.watch(WatchCreateRequest {
        key,
        start_revision: revision,
        ..Default::default()
    })?;
    loop {
        let response = watch.next().await?;
        if response
            .events
            .iter()
            .any(|event| event.r#type == EventType::Delete as i32)
        {
            return Ok(());
        }
    }
}
