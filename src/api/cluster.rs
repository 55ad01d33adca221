//! etcdserverpb.Cluster: MemberList from raft's applied membership; MemberAdd,
//! MemberRemove, MemberUpdate and MemberPromote carried out by the leader
//! (`membership::change`), relayed there by any other member, as etcd forwards them.
//!
//! A relayed request is marked, and a member that receives a marked request without
//! leading answers `leader changed` instead of relaying again: no request loops. That
//! answer means the change was not carried out, so the member that relayed it asks the
//! leader it finds next, a bounded number of times, before passing it to the client.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use sha1::{Digest, Sha1};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::{authorized, status};
use crate::auth::{Action, Caller};
use crate::membership::{Change, MemberChanges, MembershipError, Outcome};
use crate::node::{Node, NodeError};
use crate::proto::etcdserverpb::cluster_client::ClusterClient;
use crate::proto::etcdserverpb::cluster_server::Cluster;
use crate::proto::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, ResponseHeader,
};
use crate::relay;
use crate::store;

/// How many times a change moves on after the leader changed under it.
const ATTEMPTS: usize = 3;

pub struct ClusterService {
    node: Arc<Node>,
    changes: Arc<MemberChanges>,
}

/// Where a change is carried out.
enum Done {
    /// On this member, the leader: done, with the membership it committed if known.
    Here(Option<openraft::Membership<u64, quantykube_raft::Member>>),
    /// On the leader: the request goes there.
    Relay(ClusterClient<Channel>),
}

/// A change carried out: here, or by the leader, whose answer is `R`.
enum Carried<R> {
    Here(Option<openraft::Membership<u64, quantykube_raft::Member>>),
    Relayed(R),
}

impl ClusterService {
    pub fn new(node: Arc<Node>, changes: Arc<MemberChanges>) -> Self {
        ClusterService { node, changes }
    }

    /// Every member of the applied membership, with what it published about itself.
    pub fn members(node: &Node) -> Result<Vec<Member>, Status> {
        let metrics = node.raft_metrics().borrow_watched().clone();
        Self::members_in(node, metrics.membership_config.membership())
    }

    /// Every member of `membership`, with what it published about itself.
    fn members_in(
        node: &Node,
        membership: &openraft::Membership<u64, quantykube_raft::Member>,
    ) -> Result<Vec<Member>, Status> {
        let learners: Vec<u64> = membership.learner_ids().collect();
        let mut members = Vec::new();
        for (id, member) in membership.nodes() {
            let published = store::read_member_attributes(node.store(), *id)
                .map_err(super::status::from_store)?;
            let (name, client_urls) = match published {
                Some(a) => (a.name, a.client_urls),
                // etcd lists a member that has not started yet with no name.
                None => (String::new(), member.client_urls.clone()),
            };
            members.push(Member {
                id: *id,
                name,
                peer_ur_ls: member.peer_urls.clone(),
                client_ur_ls: client_urls,
                is_learner: learners.contains(id),
            });
        }
        Ok(members)
    }

    /// The member list after a change carried out here.
    fn members_after(
        &self,
        committed: Option<openraft::Membership<u64, quantykube_raft::Member>>,
    ) -> Result<Vec<Member>, Status> {
        match committed {
            Some(membership) => Self::members_in(&self.node, &membership),
            None => Self::members(&self.node),
        }
    }

    /// Carries out `change` here if this member leads, or has `send` relay it to the
    /// leader. A leader answers `leader changed` only for a change it did not carry out
    /// (`on_leader`), so such an answer to a relay (leadership moved on while the request
    /// was on its way, as under an election) is asked again of the leader found then.
    async fn carry_out<R, F, Fut>(
        &self,
        relayed: bool,
        change: Change,
        send: F,
    ) -> Result<Carried<R>, Status>
    where
        F: Fn(ClusterClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<R, Status>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let done = self
                .on_leader(relayed, change.clone())
                .await
                .map_err(|refused| refused.into_status(relayed))?;
            match done {
                Done::Here(committed) => return Ok(Carried::Here(committed)),
                Done::Relay(leader) => match send(leader).await {
                    Err(answer)
                        if attempt < ATTEMPTS && relay::answered_leader_changed(&answer) =>
                    {
                        tokio::time::sleep(self.node.election_timeout()).await;
                    }
                    answer => return answer.map(Carried::Relayed),
                },
            }
        }
    }

    /// etcd's Cluster service answers with no revision: its header names the cluster,
    /// the member and the term only.
    fn header(&self) -> Result<ResponseHeader, Status> {
        Ok(self.node.header_from(None))
    }

    /// Carries out `change` here if this member leads; otherwise (or once this member
    /// handed leadership over) returns the leader to relay the request to.
    async fn on_leader(&self, relayed: bool, change: Change) -> Result<Done, Refused> {
        let changes = &self.changes;
        // A follower's members may lag the leader's: a learner whose addition a client
        // was just told of, or a removal that freed a peer URL, may not be applied here
        // yet. So a member that does not lead checks only what etcd checks on the
        // member asked (the quorum protections; nothing for a promotion, which etcd
        // judges where raft's progress is known) and relays the rest to its leader.
        changes
            .precheck(&self.node, &change)
            .map_err(Refused::Membership)?;
        // A member that handed leadership over relays once more, even a relayed request:
        // the new leader never hands it back, so this cannot loop.
        let mut handed_over = false;
        for _ in 0..ATTEMPTS {
            if self.node.is_leader() {
                match changes.apply(&self.node, change.clone()).await {
                    Ok(Outcome::Done(committed)) => return Ok(Done::Here(committed)),
                    Ok(Outcome::HandedOver) => {
                        handed_over = true;
                        continue;
                    }
                    // Not committed (never proposed, or discarded with the term that
                    // proposed it): asking again is safe, relayed or not; a member that
                    // no longer leads then answers below.
                    Err(MembershipError::LeaderChanged) => continue,
                    Err(error) => return Err(Refused::Membership(error)),
                }
            }
            if relayed && !handed_over {
                return Err(Refused::Membership(MembershipError::LeaderChanged));
            }
            return match relay::to_leader(&self.node).await {
                Ok(leader) => Ok(Done::Relay(ClusterClient::new(leader))),
                // As etcd's member that is not connected to its peers: a change the
                // quorum protections guard is refused as unhealthy.
                Err(_) if changes.guards_quorum(&self.node, &change) => {
                    Err(Refused::Membership(MembershipError::Unhealthy))
                }
                Err(no_leader) => Err(Refused::Node(no_leader)),
            };
        }
        Err(Refused::Membership(MembershipError::LeaderChanged))
    }
}

/// Why a change was not carried out nor relayed.
enum Refused {
    Membership(MembershipError),
    Node(NodeError),
}

impl Refused {
    /// etcd's status; `leader changed` marked for a member that relayed the request, so
    /// that it asks the new leader.
    fn into_status(self, relayed: bool) -> Status {
        match self {
            Refused::Membership(MembershipError::LeaderChanged)
            | Refused::Node(NodeError::LeaderChanged)
                if relayed =>
            {
                relay::mark_leader_changed(status::leader_changed())
            }
            Refused::Membership(error) => status::from_membership(error),
            Refused::Node(error) => error.into(),
        }
    }
}

/// etcd's `types.NewURLs`: each URL is `scheme://host:port` with a scheme etcd knows
/// and no path. Returned sorted, as etcd keeps them.
pub fn peer_urls(given: &[String]) -> Result<Vec<String>, Status> {
    let bad = || status::from_membership(MembershipError::BadUrls);
    if given.is_empty() {
        return Err(bad());
    }
    let mut urls = Vec::with_capacity(given.len());
    for raw in given {
        let url = url::Url::parse(raw).map_err(|_| bad())?;
        let scheme_ok = matches!(url.scheme(), "http" | "https" | "unix" | "unixs");
        let host_port = url.host_str().is_some() && url.port().is_some();
        let no_path = url.path().is_empty() || url.path() == "/";
        if !scheme_ok || !host_port || !no_path {
            return Err(bad());
        }
        urls.push(raw.trim_end_matches('/').to_string());
    }
    urls.sort();
    Ok(urls)
}

/// etcd's id for a member MemberAdd creates: SHA-1 over its sorted peer URLs, the
/// (empty) cluster name and the time in seconds, first 8 bytes big-endian.
pub fn added_member_id(sorted_peer_urls: &[String], unix_seconds: u64) -> u64 {
    let mut hasher = Sha1::new();
    hasher.update(sorted_peer_urls.concat().as_bytes());
    hasher.update(unix_seconds.to_string().as_bytes());
    let digest = hasher.finalize();
    let mut be = [0u8; 8];
    be.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(be)
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        request: Request<MemberAddRequest>,
    ) -> Result<Response<MemberAddResponse>, Status> {
        let relayed = relay::is_relayed(&request);
        let caller = Caller::of(&request);
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        let req = request.into_inner();
        let urls = peer_urls(&req.peer_ur_ls)?;
        let is_learner = req.is_learner;
        // Computed where the change is carried out: a relayed request gets the
        // leader's id (and the leader's answer).
        let id = added_member_id(&urls, self.node.unix_seconds());
        let change = Change::Add {
            id,
            peer_urls: urls.clone(),
            is_learner: req.is_learner,
            name: String::new(),
        };
        let send = |mut leader: ClusterClient<Channel>| {
            let request = relay::request(req.clone(), &caller);
            async move { Ok(leader.member_add(request).await?.into_inner()) }
        };
        let response = match self.carry_out(relayed, change, send).await? {
            Carried::Relayed(mut response) => {
                response.header = Some(self.header()?);
                response
            }
            Carried::Here(committed) => MemberAddResponse {
                header: Some(self.header()?),
                member: Some(Member {
                    id,
                    name: String::new(),
                    peer_ur_ls: urls,
                    client_ur_ls: Vec::new(),
                    is_learner,
                }),
                members: self.members_after(committed)?,
            },
        };
        Ok(Response::new(response))
    }

    async fn member_remove(
        &self,
        request: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        let relayed = relay::is_relayed(&request);
        let caller = Caller::of(&request);
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        let req = request.into_inner();
        let change = Change::Remove { id: req.id };
        let send = |mut leader: ClusterClient<Channel>| {
            let request = relay::request(req, &caller);
            async move { Ok(leader.member_remove(request).await?.into_inner().members) }
        };
        let members = match self.carry_out(relayed, change, send).await? {
            Carried::Relayed(members) => members,
            Carried::Here(committed) => self.members_after(committed)?,
        };
        Ok(Response::new(MemberRemoveResponse {
            header: Some(self.header()?),
            members,
        }))
    }

    async fn member_update(
        &self,
        request: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        let relayed = relay::is_relayed(&request);
        let caller = Caller::of(&request);
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        let req = request.into_inner();
        let urls = peer_urls(&req.peer_ur_ls)?;
        let change = Change::Update {
            id: req.id,
            peer_urls: urls,
        };
        let send = |mut leader: ClusterClient<Channel>| {
            let request = relay::request(req.clone(), &caller);
            async move { Ok(leader.member_update(request).await?.into_inner().members) }
        };
        let members = match self.carry_out(relayed, change, send).await? {
            Carried::Relayed(members) => members,
            Carried::Here(committed) => self.members_after(committed)?,
        };
        Ok(Response::new(MemberUpdateResponse {
            header: Some(self.header()?),
            members,
        }))
    }

    async fn member_list(
        &self,
        request: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        if request.get_ref().linearizable {
            self.node.read_barrier().await?;
        }
        // etcd 3.7: any user, but with auth on a user.
        authorized::check(&self.node, &Caller::of(&request), &[Action::LoggedIn]).await?;
        Ok(Response::new(MemberListResponse {
            header: Some(self.header()?),
            members: Self::members(&self.node)?,
        }))
    }

    async fn member_promote(
        &self,
        request: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        let relayed = relay::is_relayed(&request);
        let caller = Caller::of(&request);
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        let req = request.into_inner();
        let change = Change::Promote { id: req.id };
        let send = |mut leader: ClusterClient<Channel>| {
            let request = relay::request(req, &caller);
            async move { Ok(leader.member_promote(request).await?.into_inner().members) }
        };
        let members = match self.carry_out(relayed, change, send).await? {
            Carried::Relayed(members) => members,
            Carried::Here(committed) => self.members_after(committed)?,
        };
        Ok(Response::new(MemberPromoteResponse {
            header: Some(self.header()?),
            members,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls_are_checked_and_sorted_as_etcd_does() {
        assert_eq!(
            peer_urls(&["http://b:2380".into(), "http://a:2380".into()]).unwrap(),
            vec!["http://a:2380".to_string(), "http://b:2380".to_string()]
        );
        for bad in [
            "a:2380",
            "http://a",
            "ftp://a:2380",
            "http://a:2380/path",
            "",
        ] {
            let status = peer_urls(&[bad.into()]).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad}");
            assert_eq!(
                status.message(),
                "etcdserver: given member URLs are invalid"
            );
        }
    }

    #[test]
    fn added_ids_depend_on_urls_and_time() {
        let urls = vec!["http://a:2380".to_string()];
        assert_ne!(added_member_id(&urls, 1), added_member_id(&urls, 2));
        assert_eq!(added_member_id(&urls, 7), added_member_id(&urls, 7));
    }
}
