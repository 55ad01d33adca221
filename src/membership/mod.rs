//! Membership: who is in the cluster, and how that changes while it serves.
//!
//! openraft's applied membership is the one source of truth for who the voters and
//! learners are and where their peers listen; the store keeps what each member
//! published about itself (name, client URLs) and which ids were removed for good.
//! This module owns etcd's rules for changes ([`rules`]), the leader's way of carrying
//! them out ([`change`]), a member's identity at start ([`join`]), and the forced restart
//! as a one-member cluster after a lost quorum ([`recovery`]). It never serves
//! requests (`api::cluster` does) and never writes the store outside the raft log.

pub mod change;
pub mod discovery;
mod error;
pub mod join;
pub mod recovery;
pub mod rules;

pub use change::{MemberChanges, Outcome};
pub use error::MembershipError;
pub use rules::{Change, Policy};
