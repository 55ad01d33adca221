//! Why a membership change or a member's start was refused. `api::status` maps each
//! variant to etcd's gRPC status; `main` prints the start-up ones and exits.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MembershipError {
    #[error("member ID already exist")]
    IdExists,
    /// The admin API's CreateMember: another member has the name.
    #[error("member name already exists")]
    NameExists,
    #[error("Peer URLs already exists")]
    PeerUrlExists,
    #[error("member not found")]
    NotFound,
    /// etcd answers a removed id as not found too (`membership.ErrIDRemoved`).
    #[error("ID removed")]
    Removed,
    #[error("can only promote a learner member")]
    NotLearner,
    #[error("can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("too many learner members in cluster")]
    TooManyLearners,
    #[error("re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    #[error("unhealthy cluster")]
    Unhealthy,
    #[error("given member URLs are invalid")]
    BadUrls,
    #[error("bad leader transferee")]
    BadLeaderTransferee,
    #[error("request timed out, leader transfer took too long")]
    LeaderTransferTimeout,
    #[error("no leader")]
    NoLeader,
    #[error("leader changed")]
    LeaderChanged,
    #[error("request timed out")]
    Timeout,
    #[error("raft: {0}")]
    Raft(String),
    #[error("store: {0}")]
    Store(String),
    // Start-up refusals, printed by main before it exits.
    #[error("this member ({0}) is not in --initial-cluster")]
    NotInInitialCluster(String),
    #[error("cannot fetch cluster info from peer urls: {0}")]
    CannotFetchCluster(String),
    #[error(
        "error validating peerURLs: PeerURLs: no match found for existing member ({0}); \
         add this member with `etcdctl member add` first"
    )]
    NoMatchingMember(String),
    /// etcd's bootstrap check of the flags, for a member with no data yet.
    #[error("{0}")]
    Bootstrap(String),
    #[error("member identity: {0}")]
    Identity(String),
    #[error("--force-new-cluster: {0}")]
    ForceNewCluster(String),
}
