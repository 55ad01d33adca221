//! Helpers of the membership tests (`membership.rs`, `membership_learners.rs`,
//! `membership_errors.rs`): etcd's answers, [`settled!`], member lists, and learners
//! added without being started.
//!
//! Written against etcd 3.4 (`QK_TEST_TARGET=etcd`) first: every answer asserted for
//! both targets is what etcd 3.4 gives. Where QuantyKube deliberately differs the test
//! says so and checks each target for its own behaviour:
//! - learners refuse RPCs with FailedPrecondition (etcd 3.6) rather than Unavailable
//!   (etcd 3.4), and serve Snapshot (etcd 3.6);
//! - MoveLeader sent to a follower is relayed to the leader (etcd: "not leader");
//! - MemberUpdate keeps a learner a learner (etcd 3.4 forgets, etcd-io/etcd#21694) and
//!   refuses invalid URLs (etcd 3.4 commits them and every member panics);
//! - `--max-learners` is an etcd 3.5 flag.
//!
//! etcd 3.4 facts these tests lean on (`--strict-reconfig-check` is on by default):
//! - A member ID is derived from the peer URLs and the wall clock in whole seconds, so
//!   the same MemberAdd repeated within one second collides on the ID ("member ID
//!   already exist") rather than on the peer URL.
//! - MemberAdd of a voter needs a quorum of the voters, new one included, to have
//!   started (published their name); 1 → 2 is the exception. A member that was killed
//!   still counts as started. The refusal's code is Unknown (etcd maps it to a
//!   client-side error type, which grpc-go sends as Unknown).
//! - MemberAdd (voter or learner) and MemberRemove of a running voter are refused as
//!   `Unavailable etcdserver: unhealthy cluster` until the member handling them has
//!   been connected to the voters for 5 s, before any other check; the harness's
//!   `member_add_retrying` / `member_remove_retrying` and [`settled!`] wait that out.
//! - A joining member's `--initial-cluster` must list every current member ("member
//!   count is unequal" otherwise).

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{Client, GetOptions, Member, MemberAddOptions};
use tonic::Code;

use crate::harness::*;

/// How long a joining member may take to start and catch up.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(40);
/// How long a removed member may take to notice and exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a learner may take to be in sync enough to be promoted.
pub const PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);

pub const PEER_URLS_EXIST: &str = "etcdserver: Peer URLs already exists";
pub const MEMBER_ID_EXISTS: &str = "etcdserver: member ID already exist";
pub const BAD_URLS: &str = "etcdserver: given member URLs are invalid";
pub const MEMBER_NOT_FOUND: &str = "etcdserver: member not found";
pub const NOT_A_LEARNER: &str = "etcdserver: can only promote a learner member";
pub const LEARNER_NOT_READY: &str =
    "etcdserver: can only promote a learner member which is in sync with leader";
pub const TOO_MANY_LEARNERS: &str = "etcdserver: too many learner members in cluster";
pub const NOT_ENOUGH_STARTED: &str =
    "etcdserver: re-configuration failed due to not enough started members";
pub const LEARNER_REFUSES: &str = "etcdserver: rpc not supported for learner";
pub const BAD_TRANSFEREE: &str = "etcdserver: bad leader transferee";
pub const NOT_LEADER: &str = "etcdserver: not leader";
/// What a removed member logs before it exits (etcd 3.4's wording; QuantyKube logs the
/// same line so that operators' log searches keep working).
pub const REMOVED_LOG_LINE: &str = "the member has been permanently removed from the cluster";

/// Evaluates `$call` (an etcd-client Cluster call) again while the answer is
/// [`UNHEALTHY_CLUSTER`], for up to [`RECONFIG_RETRY`]. etcd 3.4 gives that answer to
/// every MemberAdd, and to MemberRemove of a running voter, until the member handling
/// it has been connected to the voters for 5 s, and checks it *before* it validates the
/// request, so even a MemberAdd that must fail for another reason first waits it out.
macro_rules! settled {
    ($call:expr) => {{
        let deadline =
            $crate::harness::Deadline::after($crate::harness::RECONFIG_RETRY, stringify!($call));
        loop {
            let result = $call;
            if !$crate::membership_support::is_unhealthy(&result) {
                break result;
            }
            deadline.tick().await;
        }
    }};
}
pub(crate) use settled;

pub fn is_unhealthy<T>(result: &Result<T, etcd_client::Error>) -> bool {
    matches!(
        result,
        Err(etcd_client::Error::GRpcStatus(s))
            if s.code() == Code::Unavailable && s.message() == UNHEALTHY_CLUSTER
    )
}

/// The member list member `via` serves.
pub async fn members_of(cluster: &Cluster, via: usize) -> Vec<Member> {
    cluster
        .client(via)
        .await
        .member_list()
        .await
        .unwrap_or_else(|e| panic!("MemberList on member {via}: {e}"))
        .members()
        .to_vec()
}

pub fn ids_of(members: &[Member]) -> BTreeSet<u64> {
    members.iter().map(Member::id).collect()
}

/// Waits until every running member lists exactly the running members' IDs, all
/// started (named) voters.
pub async fn wait_members_agree(cluster: &Cluster, timeout: Duration) {
    let running = cluster.running();
    let expected: BTreeSet<u64> = running.iter().map(|&i| cluster.member_id(i)).collect();
    let deadline = Deadline::after(timeout, format!("members {running:?} agree on the list"));
    'poll: loop {
        for &via in &running {
            let Ok(list) = cluster.client(via).await.member_list().await else {
                deadline.tick().await;
                continue 'poll;
            };
            let agreed = ids_of(list.members()) == expected
                && list
                    .members()
                    .iter()
                    .all(|m| !m.name().is_empty() && !m.is_learner());
            if !agreed {
                deadline.tick().await;
                continue 'poll;
            }
        }
        return;
    }
}

/// Waits until member `i` (not necessarily serving linearizable reads) has applied
/// at least `revision`, by serializable reads.
pub async fn wait_applied(cluster: &Cluster, i: usize, revision: i64, timeout: Duration) {
    let mut client = cluster.client(i).await;
    let deadline = Deadline::after(timeout, format!("member {i} applies revision {revision}"));
    loop {
        let resp = client
            .get(
                "qk-e2e-applied-probe",
                Some(GetOptions::new().with_serializable()),
            )
            .await;
        if resp.is_ok_and(|r| header_rev(r.header()) >= revision) {
            return;
        }
        deadline.tick().await;
    }
}

/// The gRPC status of a call that may fail when sent or on its stream's first message.
pub fn refused<T: std::fmt::Debug>(result: Result<T, etcd_client::Error>) -> (Code, String) {
    let status = grpc_status(result);
    (status.code(), status.message().to_owned())
}

pub fn learner() -> Option<MemberAddOptions> {
    Some(MemberAddOptions::new().with_is_learner())
}

/// Adds a learner at a fresh slot's peer URL through `client` without starting it;
/// returns its slot and ID.
pub async fn add_unstarted_learner(cluster: &mut Cluster, client: &mut Client) -> (usize, u64) {
    let i = cluster.reserve_member();
    let resp = member_add_retrying(client, &cluster.peer_url(i), true).await;
    let id = resp.member().expect("the new member").id();
    cluster.set_member_id(i, id);
    (i, id)
}
