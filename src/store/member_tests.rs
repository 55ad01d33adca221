//! What the store keeps about members: a removal forgets what the member published,
//! and a publish applied after the removal (one already in the log behind it) writes
//! nothing back.

use std::collections::{BTreeMap, BTreeSet};

use openraft::Membership;
use quantykube_raft::{Member, StoredMembership};

use super::tests::{log_id, Harness};
use super::*;
use crate::proto::command::command::Request as C;
use crate::proto::command::{Command, MemberAttributes};

fn member(name: &str) -> Member {
    Member {
        name: name.into(),
        peer_urls: vec![format!("http://{name}:2380")],
        client_urls: Vec::new(),
    }
}

fn membership(ids: &[u64]) -> Membership<u64, Member> {
    Membership::new(
        vec![ids.iter().copied().collect::<BTreeSet<u64>>()],
        ids.iter()
            .map(|id| (*id, member(&format!("n{id}"))))
            .collect::<BTreeMap<_, _>>(),
    )
    .unwrap()
}

fn publish(id: u64) -> Command {
    Command {
        auth_revision: 0,
        auth_checked: false,
        request: Some(C::PublishMember(MemberAttributes {
            member_id: id,
            name: format!("n{id}"),
            client_urls: vec![format!("http://n{id}:2379")],
            ..Default::default()
        })),
    }
}

#[test]
fn a_publish_applied_after_the_removal_leaves_no_record() {
    let h = Harness::new();
    let mut batch = h.store.begin_apply().unwrap();
    let both = StoredMembership::new(Some(log_id(1)), membership(&[1, 2]));
    batch.membership(&log_id(1), &both).unwrap();
    batch.command(&log_id(2), &publish(2)).unwrap();
    batch.flush().unwrap();
    assert!(read_member_attributes(&h.store, 2).unwrap().is_some());

    // The removal, then a publish of member 2 that was already in the log behind it.
    let mut batch = h.store.begin_apply().unwrap();
    let alone = StoredMembership::new(Some(log_id(3)), membership(&[1]));
    assert_eq!(batch.membership(&log_id(3), &alone).unwrap(), vec![2]);
    batch.command(&log_id(4), &publish(2)).unwrap();
    batch.flush().unwrap();

    assert_eq!(read_member_attributes(&h.store, 2).unwrap(), None);
    assert_eq!(read_removed_members(&h.store).unwrap(), vec![2]);
    let described = member_records::describe_members(&h.store).unwrap();
    let ids: Vec<u64> = described.iter().map(|d| d.member_id).collect();
    assert_eq!(ids, vec![1]);
}
