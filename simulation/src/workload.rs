//! Client programs that put load on a simulated cluster and record what they saw.
//!
//! This module owns [`Writer`] (one sequential client that puts unique values on a
//! small key set, reads each key back, and fails over to the next member on any
//! error) and [`Mixed`] (a seeded mix of Put, linearizable and serializable Range, Txn
//! compare-and-swap, DeleteRange and Compact sent to seed-chosen members, as a
//! Kubernetes API server would), [`WatchClient`] (one etcd watch over the others'
//! keys for the whole run, resumed on another member whenever it fails, as an informer
//! holds one), [`LeaseClient`] (leases with keys attached, some kept alive for a
//! while, some revoked, their keys polled until they go), [`MembershipClient`] (an
//! operator adding, promoting, removing and replacing members, moving the leadership
//! and updating peer URLs), [`SnapshotClient`] (backups with Maintenance.Snapshot on
//! seed-chosen members meanwhile), [`AuthClient`] (an administrator taking permissions,
//! roles and users away and giving them back while its users read and write),
//! [`Pileup`] (writes that change nothing piled on a leader a fault cut off), and how
//! each request is sent
//! (`execute`). Every request goes into a
//! [`History`], every watch response into a [`crate::history::WatchLog`]. It must never
//! judge the results (the checkers do) and never inject faults.

mod auth;
mod lease;
mod membership;
mod mixed;
mod pileup;
mod snapshot;
mod watch;

pub use auth::{AuthClient, AuthPhase};
pub use lease::{Lapse, LeaseClient, Renewals};
pub use membership::{MembershipClient, MembershipOp, MembershipStep};
pub use mixed::{Mix, Mixed, WritesInFlight};
pub use pileup::Pileup;
pub use snapshot::SnapshotClient;
pub use watch::{WatchClient, WatchTarget};

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use crate::client::{self, ClientOptions};
use crate::error::SimError;
use crate::history::{self, History, Op, Operation, Outcome};

/// A sequential client that writes `writes` unique values, round robin over `keys`,
/// and reads each key back after writing it.
#[derive(Clone, Debug)]
pub struct Writer {
    /// The client's name in the history (its turmoil host name, by convention).
    pub name: String,
    /// Members to talk to, preferred first; the next one is tried after an error.
    pub endpoints: Vec<String>,
    pub keys: Vec<String>,
    pub writes: usize,
    /// Pause between two writes.
    pub pause: Duration,
    /// Read back with serializable instead of linearizable reads.
    pub serializable_reads: bool,
    pub options: ClientOptions,
}

impl Writer {
    /// A writer named `name` over `endpoints` with keys `k0..k4`, 50 writes 10 ms apart.
    pub fn new(name: impl Into<String>, endpoints: Vec<String>) -> Self {
        Writer {
            name: name.into(),
            endpoints,
            keys: (0..5).map(|i| format!("k{i}")).collect(),
            writes: 50,
            pause: Duration::from_millis(10),
            serializable_reads: false,
            options: ClientOptions::default(),
        }
    }

    /// Runs the workload, recording into `history`. Must run inside a turmoil host.
    /// Errors of the cluster are recorded, not returned; only a workload that cannot
    /// run at all (no endpoints, no keys) fails.
    pub async fn run(self, history: History) -> Result<(), SimError> {
        if self.endpoints.is_empty() || self.keys.is_empty() {
            return Err(SimError::Invalid(
                "a writer needs endpoints and keys".into(),
            ));
        }
        let mut session = Session {
            writer: &self,
            next_endpoint: 0,
            client: None,
        };
        for i in 0..self.writes {
            let key = self.keys[i % self.keys.len()].clone();
            let value = format!("{}-{i}", self.name);
            let put = session
                .perform(
                    &history,
                    Op::Put {
                        key: key.clone(),
                        value,
                    },
                )
                .await;
            if matches!(put, Outcome::Written { .. }) {
                session
                    .perform(
                        &history,
                        Op::Get {
                            key,
                            serializable: self.serializable_reads,
                        },
                    )
                    .await;
            }
            tokio::time::sleep(self.pause).await;
        }
        Ok(())
    }
}

/// A writer's connection, re-dialled to the next endpoint after each failure.
struct Session<'a> {
    writer: &'a Writer,
    next_endpoint: usize,
    client: Option<Client>,
}

impl Session<'_> {
    async fn perform(&mut self, history: &History, op: Op) -> Outcome {
        let invoked = history::now();
        // The channel's own deadline should fire first; this one bounds the dial too.
        let deadline =
            self.writer.options.request_timeout + self.writer.options.connect_timeout * 3;
        let (outcome, member) = match tokio::time::timeout(deadline, self.attempt(&op)).await {
            Ok(Ok((outcome, member))) => (outcome, Some(member)),
            Ok(Err(error)) => (Outcome::Unknown(error.to_string()), None),
            Err(_) => (Outcome::Unknown("client deadline".to_owned()), None),
        };
        if matches!(outcome, Outcome::Unknown(_)) {
            // Fail over, as etcd clients do: drop the connection, try the next member.
            self.client = None;
        }
        history.record(Operation {
            client: self.writer.name.clone(),
            op,
            invoked,
            completed: history::now(),
            outcome: outcome.clone(),
            member,
        });
        outcome
    }

    async fn attempt(&mut self, op: &Op) -> Result<(Outcome, u64), SimError> {
        let client = match &mut self.client {
            Some(client) => client,
            None => {
                let endpoints = &self.writer.endpoints;
                let url = &endpoints[self.next_endpoint % endpoints.len()];
                self.next_endpoint += 1;
                self.client
                    .insert(client::connect_with(url, &self.writer.options).await?)
            }
        };
        execute(client, op).await
    }
}

/// Sends `op` on `client` and turns the answer into an [`Outcome`] and the id of the
/// member that answered (from the response header); an error is the caller's to
/// record (as an unknown outcome) or retry.
pub(crate) async fn execute(client: &mut Client, op: &Op) -> Result<(Outcome, u64), SimError> {
    match op {
        Op::Put { key, value } => {
            let response = client.put(key.as_str(), value.as_str(), None).await?;
            Ok((
                Outcome::Written {
                    revision: response.header().map_or(0, |h| h.revision()),
                },
                member(response.header()),
            ))
        }
        Op::Get { key, serializable } => {
            let options = serializable.then(|| GetOptions::new().with_serializable());
            let response = client.get(key.as_str(), options).await?;
            let value = response.kvs().first().map(|kv| {
                (
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    kv.mod_revision(),
                )
            });
            Ok((
                Outcome::Read {
                    revision: response.header().map_or(0, |h| h.revision()),
                    value,
                },
                member(response.header()),
            ))
        }
        Op::Delete { key } => {
            let response = client.delete(key.as_str(), None).await?;
            Ok((
                Outcome::Deleted {
                    revision: response.header().map_or(0, |h| h.revision()),
                    deleted: response.deleted(),
                },
                member(response.header()),
            ))
        }
        Op::Cas {
            key,
            expected,
            value,
        } => {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    *expected,
                )])
                .and_then([TxnOp::put(key.as_str(), value.as_str(), None)]);
            let response = client.txn(txn).await?;
            Ok((
                Outcome::Swapped {
                    revision: response.header().map_or(0, |h| h.revision()),
                    succeeded: response.succeeded(),
                },
                member(response.header()),
            ))
        }
        Op::Compact { revision } => {
            let response = client.compact(*revision, None).await?;
            Ok((
                Outcome::Compacted {
                    revision: response.header().map_or(0, |h| h.revision()),
                },
                member(response.header()),
            ))
        }
        Op::PutWithLease { key, value, lease } => {
            let options = PutOptions::new().with_lease(*lease);
            let response = client
                .put(key.as_str(), value.as_str(), Some(options))
                .await?;
            Ok((
                Outcome::Written {
                    revision: response.header().map_or(0, |h| h.revision()),
                },
                member(response.header()),
            ))
        }
        Op::LeaseGrant { ttl } => {
            let response = client.lease_grant(*ttl, None).await?;
            Ok((
                Outcome::Granted {
                    id: response.id(),
                    ttl: response.ttl(),
                    revision: response.header().map_or(0, |h| h.revision()),
                },
                member(response.header()),
            ))
        }
        Op::LeaseRevoke { id } => {
            let response = client.lease_revoke(*id).await?;
            Ok((
                Outcome::Revoked {
                    revision: response.header().map_or(0, |h| h.revision()),
                },
                member(response.header()),
            ))
        }
        // A keepalive is one message on a stream the caller holds (see `lease`).
        Op::LeaseKeepAlive { .. } => Err(SimError::Invalid(
            "keepalives go on a keepalive stream, not one request".into(),
        )),
    }
}

/// True for an error that says the member refused the request before doing anything
/// with it (a learner refuses every request but Status and serializable Range): safe
/// to send elsewhere, write or not.
pub(crate) fn never_executed(error: &SimError) -> bool {
    matches!(error, SimError::Client(etcd_client::Error::GRpcStatus(status))
        if status.code() == tonic::Code::FailedPrecondition
            && status.message() == "etcdserver: rpc not supported for learner")
}

/// The member id in a response header (0 if there is none).
fn member(header: Option<&etcd_client::ResponseHeader>) -> u64 {
    header.map_or(0, |h| h.member_id())
}
