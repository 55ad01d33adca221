//! The peer API's generated messages, client and server (`proto/peer.proto`), and the
//! conversions between its wire types and this crate's types.
//!
//! This module owns nothing but representation: it must never decide what a message
//! means (that is `network`, `peer_server` and `client`).

#![allow(clippy::all, missing_docs, unreachable_pub)]

tonic::include_proto!("quantykube.peer.v1");

use crate::types::{self, NodeId};

impl From<&types::Member> for Member {
    fn from(m: &types::Member) -> Self {
        Self {
            name: m.name.clone(),
            peer_urls: m.peer_urls.clone(),
            client_urls: m.client_urls.clone(),
        }
    }
}

impl From<Member> for types::Member {
    fn from(m: Member) -> Self {
        Self {
            name: m.name,
            peer_urls: m.peer_urls,
            client_urls: m.client_urls,
        }
    }
}

impl LeaderRedirect {
    pub(crate) fn new(leader_id: Option<NodeId>, leader: Option<&types::Member>) -> Self {
        Self {
            leader_id,
            leader: leader.map(Member::from),
        }
    }
}
