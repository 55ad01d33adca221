//! QuantyKube's admin API, `quantykube.admin.v1` (proto/quantykube/admin/v1): the
//! cluster's members and snapshots as resources, with the standard methods, paging and
//! uid/version guards of shared/seeds/api-style-guide.txt. It is served on the client
//! port beside etcd's services and, when auth is on, to root only.
//!
//! It owns the translation between resources and what the node keeps: member records
//! (`records`, written by the store when a sync applies), member status, paging and
//! validation. It is a client of the same node functions etcd's services use (the
//! membership changes, the read index, the snapshot writer); it must never change the
//! cluster in a way etcd's own API could not, nor change anything etcd's API answers.

pub mod cli;
mod error;
mod member_status;
mod members;
pub mod paging;
mod records;
mod resource;
mod snapshots;
pub mod validate;

use std::sync::Arc;

use tonic::{Request, Response, Status};

pub use error::AdminError;

use crate::api::authorized;
use crate::auth::{Action, Caller};
use crate::membership::MemberChanges;
use crate::node::Node;
use crate::proto::admin_v1::admin_server::Admin;
use crate::proto::admin_v1::{
    CreateMemberRequest, CreateSnapshotRequest, DeleteMemberRequest, DeleteSnapshotRequest,
    DownloadSnapshotRequest, ElectMemberRequest, GetMemberRequest, GetSnapshotRequest,
    ListMembersRequest, ListMembersResponse, ListSnapshotsRequest, ListSnapshotsResponse, Member,
    PromoteMemberRequest, Snapshot, UpdateMemberRequest,
};

pub struct AdminService {
    node: Arc<Node>,
    /// Membership changes, which member writes carry out.
    changes: Arc<MemberChanges>,
}

impl AdminService {
    pub fn new(node: Arc<Node>, changes: Arc<MemberChanges>) -> Self {
        AdminService { node, changes }
    }

    /// Every method is root's when auth is on.
    async fn root<T>(&self, request: &Request<T>) -> Result<(), Status> {
        authorized::check(&self.node, &Caller::of(request), &[Action::Admin]).await?;
        Ok(())
    }
}

fn answer<T>(result: Result<T, AdminError>) -> Result<Response<T>, Status> {
    result.map(Response::new).map_err(Status::from)
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn get_member(
        &self,
        request: Request<GetMemberRequest>,
    ) -> Result<Response<Member>, Status> {
        self.root(&request).await?;
        answer(members::get(&self.node, request).await)
    }

    async fn list_members(
        &self,
        request: Request<ListMembersRequest>,
    ) -> Result<Response<ListMembersResponse>, Status> {
        self.root(&request).await?;
        answer(members::list(&self.node, request).await)
    }

    async fn create_member(
        &self,
        request: Request<CreateMemberRequest>,
    ) -> Result<Response<Member>, Status> {
        self.root(&request).await?;
        answer(members::create(&self.node, &self.changes, request).await)
    }

    async fn update_member(
        &self,
        request: Request<UpdateMemberRequest>,
    ) -> Result<Response<Member>, Status> {
        self.root(&request).await?;
        answer(members::update(&self.node, &self.changes, request).await)
    }

    async fn delete_member(
        &self,
        request: Request<DeleteMemberRequest>,
    ) -> Result<Response<Member>, Status> {
        self.root(&request).await?;
        answer(members::delete(&self.node, &self.changes, request).await)
    }

    async fn promote_member(
        &self,
        request: Request<PromoteMemberRequest>,
    ) -> Result<Response<Member>, Status> {
        self.root(&request).await?;
        answer(members::promote(&self.node, &self.changes, request).await)
    }

    async fn elect_member(
        &self,
        request: Request<ElectMemberRequest>,
    ) -> Result<Response<Member>, Status> {
        self.root(&request).await?;
        answer(members::elect(&self.node, &self.changes, request).await)
    }

    async fn get_snapshot(
        &self,
        request: Request<GetSnapshotRequest>,
    ) -> Result<Response<Snapshot>, Status> {
        self.root(&request).await?;
        answer(snapshots::get(&self.node, request).await)
    }

    async fn list_snapshots(
        &self,
        request: Request<ListSnapshotsRequest>,
    ) -> Result<Response<ListSnapshotsResponse>, Status> {
        self.root(&request).await?;
        answer(snapshots::list(&self.node, request).await)
    }

    async fn create_snapshot(
        &self,
        request: Request<CreateSnapshotRequest>,
    ) -> Result<Response<Snapshot>, Status> {
        self.root(&request).await?;
        answer(snapshots::create(&self.node, request).await)
    }

    async fn delete_snapshot(
        &self,
        request: Request<DeleteSnapshotRequest>,
    ) -> Result<Response<Snapshot>, Status> {
        self.root(&request).await?;
        answer(snapshots::delete(&self.node, request).await)
    }

    async fn download_snapshot(
        &self,
        request: Request<DownloadSnapshotRequest>,
    ) -> Result<Response<snapshots::DownloadStream>, Status> {
        self.root(&request).await?;
        answer(snapshots::download(&self.node, request).await)
    }
}
