//! The openraft type configuration shared by every QuantyKube node.
//!
//! This module owns the vocabulary that crosses the raft boundary: the node id, the
//! member record that membership carries, the opaque command and outcome payloads, and
//! the on-disk snapshot handle. It must never know what a command means: commands are
//! encoded and decoded by the server crate, which owns the revision store.

use std::fmt;
use std::path::PathBuf;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A member's stable 64-bit id, as etcd reports it in `Member.ID` and `member_id`.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// QuantyKube's raft types: opaque commands, member records as nodes, tokio runtime
    /// with seedable randomness.
    pub TypeConfig:
        D = Command,
        R = CommandOutcome,
        NodeId = NodeId,
        Node = Member,
        AsyncRuntime = crate::runtime::RaftRuntime,
);

/// One cluster member as membership stores it and `MemberList` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The member's `--name`.
    pub name: String,
    /// The URLs peers dial (`--initial-advertise-peer-urls`).
    pub peer_urls: Vec<String>,
    /// The URLs clients dial (`--advertise-client-urls`).
    pub client_urls: Vec<String>,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.peer_urls.join(","))
    }
}

/// An application command, already encoded by the server crate. Raft replicates the
/// bytes; only the state machine decodes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command(pub Bytes);

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command({} bytes)", self.0.len())
    }
}

/// The encoded result of applying one [`Command`], returned to the proposer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutcome(pub Bytes);

/// A snapshot lives in one file on disk, written and read by the server crate's state
/// machine; the network streams it in chunks and never holds it whole in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    pub path: PathBuf,
}

pub type Raft<SM> = openraft::Raft<TypeConfig, SM>;
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotFile>;
