//! etcdserverpb.Cluster: MemberList from raft's applied membership. Adding, removing,
//! updating and promoting members are not built yet and answer Unimplemented.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use tonic::{Request, Response, Status};

use crate::node::Node;
use crate::proto::etcdserverpb::cluster_server::Cluster;
use crate::proto::etcdserverpb::{Member, MemberListRequest, MemberListResponse};
use crate::store;

pub struct ClusterService {
    node: Arc<Node>,
}

impl ClusterService {
    pub fn new(node: Arc<Node>) -> Self {
        ClusterService { node }
    }

    /// Every member of the applied membership, with what it published about itself.
    pub fn members(node: &Node) -> Result<Vec<Member>, Status> {
        let metrics = node.raft().metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
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
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_list(
        &self,
        request: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        if request.get_ref().linearizable {
            self.node.read_barrier().await?;
        }
        let members = Self::members(&self.node)?;
        let revision = self
            .node
            .store()
            .current_revision()
            .map_err(super::status::from_store)?;
        Ok(Response::new(MemberListResponse {
            header: Some(
                self.node
                    .header_from(Some(crate::proto::etcdserverpb::ResponseHeader {
                        revision,
                        ..Default::default()
                    })),
            ),
            members,
        }))
    }
}
