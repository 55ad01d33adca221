//! `lease-keepalive`: grant `--leases` leases (default one per client) before the run,
//! then each client keeps its leases alive in turn on its own LeaseKeepAlive stream:
//! one operation is one keepalive request and its response, and its latency runs from
//! the request to that response. Client `i` keeps alive leases `i`, `i + clients`, ...
//! (or lease `i % leases` when there are fewer leases than clients). A stream that
//! breaks is counted as an error and opened again by the next operation. The leases are
//! revoked at the end (best effort).

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::Streaming;

use super::WorkloadRun;
use crate::bench::cli::LeaseKeepaliveArgs;
use crate::bench::context::Context;
use crate::bench::driver::{drive, Op};
use crate::bench::error::{BenchError, OpError};
use crate::bench::recorder::{Recorder, Tag};
use crate::client::AuthChannel;
use crate::proto::etcdserverpb::lease_client::LeaseClient;
use crate::proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseRevokeRequest,
};

/// Grants and revokes in flight at once.
const SETUP_CONCURRENCY: usize = 64;

/// An open keepalive stream.
struct KeepAliveStream {
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    responses: Streaming<LeaseKeepAliveResponse>,
}

struct KeepAliver {
    lease: LeaseClient<AuthChannel>,
    ids: Vec<i64>,
    next: usize,
    stream: Option<KeepAliveStream>,
    timeout: Duration,
}

impl KeepAliver {
    async fn keep_alive(&mut self, id: i64) -> Result<LeaseKeepAliveResponse, OpError> {
        let request = LeaseKeepAliveRequest { id };
        let stream = match &mut self.stream {
            Some(stream) => {
                if stream.requests.send(request).await.is_err() {
                    return Err(OpError::Protocol("keepalive stream closed"));
                }
                stream
            }
            None => {
                // Queue the first request before the call: etcd (grpc-go) sends the
                // response headers only with the first response.
                let (requests, receiver) = mpsc::channel(1);
                let _ = requests.try_send(request);
                let responses = self
                    .lease
                    .lease_keep_alive(ReceiverStream::new(receiver))
                    .await?
                    .into_inner();
                self.stream.insert(KeepAliveStream {
                    requests,
                    responses,
                })
            }
        };
        match tokio::time::timeout(self.timeout, stream.responses.message()).await {
            Err(_) => Err(OpError::Timeout("keepalive response", self.timeout)),
            Ok(Err(status)) => Err(OpError::Rpc(status)),
            Ok(Ok(None)) => Err(OpError::Protocol("keepalive stream ended by the server")),
            Ok(Ok(Some(response))) => Ok(response),
        }
    }
}

impl Op for KeepAliver {
    async fn run(&mut self, _seq: u64) -> Result<Tag, OpError> {
        let id = self.ids[self.next % self.ids.len()];
        self.next = self.next.wrapping_add(1);
        match self.keep_alive(id).await {
            Ok(response) if response.ttl > 0 => Ok(None),
            Ok(_) => Err(OpError::Protocol(
                "keepalive answered TTL 0: lease not found",
            )),
            Err(error) => {
                // Responses on a broken stream cannot be matched to requests any more.
                self.stream = None;
                Err(error)
            }
        }
    }
}

pub async fn run(ctx: &Context, args: &LeaseKeepaliveArgs) -> Result<WorkloadRun, BenchError> {
    let clients = ctx.clients();
    let wanted = args.leases.unwrap_or(clients);
    let mut setup = Recorder::new()?;
    let (ids, fatal) = grant(ctx, wanted, args.lease_ttl, &mut setup).await;
    if fatal.is_some() || ids.len() < wanted {
        revoke(ctx, &ids).await;
        let failure = format!(
            "could not grant {wanted} leases ({} granted); see the errors",
            ids.len()
        );
        return Ok(WorkloadRun::not_run(setup, fatal, Some(failure)));
    }
    let ops = (0..clients)
        .map(|i| KeepAliver {
            lease: ctx.conns.lease(i),
            ids: if wanted >= clients {
                ids.iter().skip(i).step_by(clients).copied().collect()
            } else {
                vec![ids[i % wanted]]
            },
            next: 0,
            stream: None,
            timeout: ctx.args.request_timeout.0,
        })
        .collect();
    let driven = drive(ctx.plan, ops, "lease-keepalive", &ctx.interrupt).await?;
    let (mut run, ops) = WorkloadRun::from_driven(driven);
    // Close the streams before revoking.
    drop(ops);
    revoke(ctx, &ids).await;
    run.recorder.merge_errors(&setup);
    run.extra("leases", ids.len());
    run.extra("lease_ttl", args.lease_ttl);
    run.note(
        "Leases",
        format!(
            "{} granted (TTL {} s), kept alive by {clients} streams",
            ids.len(),
            args.lease_ttl
        ),
    );
    Ok(run)
}

/// Grants `count` leases; returns their IDs and the fatal error that stopped granting.
async fn grant(
    ctx: &Context,
    count: usize,
    ttl: i64,
    setup: &mut Recorder,
) -> (Vec<i64>, Option<String>) {
    let mut ids = Vec::with_capacity(count);
    let mut grants = futures::stream::iter(0..count)
        .map(|i| {
            let mut lease = ctx.conns.lease(i);
            async move { lease.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await }
        })
        .buffer_unordered(SETUP_CONCURRENCY);
    while let Some(result) = grants.next().await {
        match result {
            Ok(response) => {
                let response = response.into_inner();
                if response.error.is_empty() {
                    ids.push(response.id);
                } else {
                    setup.error_kind(format!("LeaseGrant: {}", response.error), 1);
                }
            }
            Err(status) => {
                let error = OpError::Rpc(status);
                setup.error_kind(error.kind(), 1);
                if error.is_fatal() {
                    return (ids, Some(error.kind()));
                }
            }
        }
        if ctx.interrupt.is_triggered() {
            break;
        }
    }
    (ids, None)
}

/// Revokes the leases, best effort and within the request timeout.
async fn revoke(ctx: &Context, ids: &[i64]) {
    let revokes = futures::stream::iter(ids.iter().copied().enumerate())
        .map(|(i, id)| {
            let mut lease = ctx.conns.lease(i);
            async move {
                if let Err(status) = lease.lease_revoke(LeaseRevokeRequest { id }).await {
                    tracing::debug!(id, %status, "lease not revoked");
                }
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect::<Vec<()>>();
    if tokio::time::timeout(ctx.args.request_timeout.0, revokes)
        .await
        .is_err()
    {
        tracing::warn!("not every lease was revoked in time; they expire by their TTL");
    }
}
