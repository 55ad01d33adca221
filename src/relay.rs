//! The ways a client's request is relayed to another member (the leader, or the member
//! holding a file):
//! - over that member's client URL: wait for a leader to be known, dial, and send the
//!   request marked as relayed, with the caller's token and a timeout. The member that
//!   receives it decides for the same caller (the token) and never relays it again (the
//!   mark);
//! - over the leader's peer URL ([`to_leader_peer`]), for the lease calls this member
//!   authorizes itself before relaying (as etcd's peer `/leases`): a caller known only by
//!   its certificate has no token to pass on, and the peer port is trusted as raft's
//!   messages are.
//!
//! This module owns the mark; it never decides whether a request should be relayed
//! (each service does) nor interprets the answer.

use std::time::Duration;

use tonic::transport::Channel;
use tonic::Request;

use crate::auth::Caller;
use crate::node::{Node, NodeError};
use quantykube_raft::NodeId;

/// Metadata on a request another member relayed here.
pub const RELAYED: &str = "x-quantykube-relayed";

/// How long a relayed request may take on the member it was relayed to.
const RELAYED_TIMEOUT: Duration = Duration::from_secs(30);

/// How many election timeouts a relay waits for a leader to be known.
const LEADER_WAIT_ELECTIONS: u32 = 3;

/// True for a request another member relayed here.
pub fn is_relayed<T>(request: &Request<T>) -> bool {
    request.metadata().contains_key(RELAYED)
}

/// `message` as a request relayed on `caller`'s behalf: marked, so that it is never
/// relayed again, carrying the caller's token, so that the other member authorises the
/// same caller, and bounded in time.
pub fn request<T>(message: T, caller: &Caller) -> Request<T> {
    let mut request = caller.relayed(message);
    request
        .metadata_mut()
        .insert(RELAYED, tonic::metadata::MetadataValue::from_static("1"));
    request.set_timeout(RELAYED_TIMEOUT);
    request
}

/// A channel to the leader, once one is known (within a few election timeouts).
pub async fn to_leader(node: &Node) -> Result<Channel, NodeError> {
    node.wait_for_leader(node.election_timeout() * LEADER_WAIT_ELECTIONS)
        .await;
    node.leader_channel().await
}

/// A connection to the leader's peer URL, once a leader is known (within a few election
/// timeouts), for a call this member has authorized for its caller: the leader does not
/// decide again.
pub async fn to_leader_peer(node: &Node) -> Result<quantykube_raft::StampedChannel, NodeError> {
    node.leader_peer_channel(node.election_timeout() * LEADER_WAIT_ELECTIONS)
        .await
}

/// A channel to `member`'s client URL.
pub async fn to_member(node: &Node, member: NodeId) -> Result<Channel, NodeError> {
    node.member_channel(member).await
}

/// Metadata on a `leader changed` answer to a relayed request: leadership moved on while
/// the request was on its way, so the relaying member may ask the new leader.
const LEADER_CHANGED: &str = "x-quantykube-leader-changed";

/// `answer` (etcd's `leader changed`), marked for the member that relayed the request.
pub fn mark_leader_changed(mut answer: tonic::Status) -> tonic::Status {
    answer.metadata_mut().insert(
        LEADER_CHANGED,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    answer
}

/// True when the member a request was relayed to answered that leadership moved on.
pub fn answered_leader_changed(answer: &tonic::Status) -> bool {
    answer.metadata().contains_key(LEADER_CHANGED)
}
