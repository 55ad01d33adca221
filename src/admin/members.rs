//! The Member resource's methods: reads from this member's current records, writes
//! carried out on the leader through the same membership changes etcd's Cluster
//! service makes (`membership::change`), guarded through the log by `records::claim`.
//!
//! A write that reaches a follower is relayed whole to the leader, marked so that it
//! is relayed once only; everything a write does (claim, change, sync) happens on one
//! member, so a retry after a leader change meets the claim and is ABORTED rather than
//! applied twice.

use std::time::Duration;

use tonic::transport::Channel;
use tonic::Request;

use crate::api::cluster::added_member_id;
use crate::auth::Caller;
use crate::membership::{Change, MemberChanges, MembershipError, Outcome};
use crate::node::Node;
use crate::node::NodeError;
use crate::proto::admin_v1::admin_client::AdminClient;
use crate::proto::admin_v1::{
    CreateMemberRequest, DeleteMemberRequest, DeleteOptions, ElectMemberRequest, GetMemberRequest,
    ListMembersRequest, ListMembersResponse, Member, PromoteMemberRequest, UpdateMemberRequest,
};
use crate::relay;

use super::member_status::statuses;
use super::records::{self, CurrentMember};
use super::{paging, resource, validate, AdminError};

/// How long ElectMember waits for the new leader.
const ELECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `members` as resources, with their status.
async fn resources(node: &Node, caller: &Caller, members: &[CurrentMember]) -> Vec<Member> {
    let statuses = statuses(node, caller, members).await;
    members
        .iter()
        .zip(statuses)
        .map(|(member, status)| resource::member(member, status))
        .collect()
}

async fn one(node: &Node, caller: &Caller, name: &str) -> Result<Member, AdminError> {
    let member = records::current_member(node, name).await?;
    let mut found = resources(node, caller, std::slice::from_ref(&member)).await;
    found.pop().ok_or_else(|| AdminError::NotFound {
        kind: "member",
        name: name.to_string(),
    })
}

pub async fn get(node: &Node, request: Request<GetMemberRequest>) -> Result<Member, AdminError> {
    let caller = Caller::of(&request);
    let name = validate::object_ref("member", request.get_ref().member.as_ref())?;
    one(node, &caller, &name).await
}

pub async fn list(
    node: &Node,
    request: Request<ListMembersRequest>,
) -> Result<ListMembersResponse, AdminError> {
    let caller = Caller::of(&request);
    let request = request.into_inner();
    let size = paging::page_size(request.page_size)?;
    let after = paging::start_after(&request.page_token)?;
    let all = records::current_members(node).await?;
    let (page, next_page_token) =
        paging::page(all, |m| m.record.name.as_str(), size, after.as_deref());
    Ok(ListMembersResponse {
        members: resources(node, &caller, &page).await,
        next_page_token,
    })
}

/// Where a write is carried out.
enum Leader {
    Here,
    Relay(AdminClient<Channel>),
}

async fn leader(node: &Node, relayed: bool) -> Result<Leader, AdminError> {
    if node.is_leader() {
        return Ok(Leader::Here);
    }
    if relayed {
        return Err(NodeError::LeaderChanged.into());
    }
    Ok(Leader::Relay(AdminClient::new(
        relay::to_leader(node).await?,
    )))
}

/// Carries out `change` on this member, the leader.
async fn change(
    node: &std::sync::Arc<Node>,
    changes: &MemberChanges,
    change: Change,
) -> Result<Outcome, AdminError> {
    changes.precheck(node, &change)?;
    Ok(changes.apply(node, change).await?)
}

pub async fn create(
    node: &std::sync::Arc<Node>,
    changes: &MemberChanges,
    request: Request<CreateMemberRequest>,
) -> Result<Member, AdminError> {
    let caller = Caller::of(&request);
    let member = request.get_ref().member.as_ref();
    let member = member.ok_or_else(|| AdminError::invalid("member", "is required"))?;
    let name = validate::identity("member.metadata", member.metadata.as_ref())?;
    let peer_urls = validate::member_urls("member.peer_urls", &member.peer_urls, true)?;
    if let Leader::Relay(mut leader) = leader(node, relay::is_relayed(&request)).await? {
        let relayed = relay::request(request.into_inner(), &caller);
        return Ok(leader.create_member(relayed).await?.into_inner());
    }
    let taken = records::current_members(node).await?;
    if taken.iter().any(|m| m.record.name == name) {
        return Err(already_exists(name));
    }
    let add = Change::Add {
        id: added_member_id(&peer_urls, node.unix_seconds()),
        peer_urls,
        is_learner: true,
        name: name.clone(),
    };
    match change(node, changes, add).await {
        Err(AdminError::Membership(MembershipError::NameExists)) => {
            return Err(already_exists(name))
        }
        other => other?,
    };
    records::sync_now(node).await?;
    one(node, &caller, &name).await
}

fn already_exists(name: String) -> AdminError {
    AdminError::AlreadyExists {
        kind: "member",
        name,
    }
}

pub async fn update(
    node: &std::sync::Arc<Node>,
    changes: &MemberChanges,
    request: Request<UpdateMemberRequest>,
) -> Result<Member, AdminError> {
    let caller = Caller::of(&request);
    let member = request.get_ref().member.as_ref();
    let member = member.ok_or_else(|| AdminError::invalid("member", "is required"))?;
    let name = validate::identity("member.metadata", member.metadata.as_ref())?;
    let (uid, version) = member
        .metadata
        .as_ref()
        .map(|m| (m.uid.clone(), m.version))
        .unwrap_or_default();
    // The guards are required: there is no blind update (section 7.2).
    if uid.is_empty() {
        return Err(AdminError::invalid("member.metadata.uid", "is required"));
    }
    if version == 0 {
        return Err(AdminError::invalid(
            "member.metadata.version",
            "is required",
        ));
    }
    validate::guards("member.metadata", &uid, version)?;
    let peer_urls = validate::member_urls("member.peer_urls", &member.peer_urls, true)?;
    if let Leader::Relay(mut leader) = leader(node, relay::is_relayed(&request)).await? {
        let relayed = relay::request(request.into_inner(), &caller);
        return Ok(leader.update_member(relayed).await?.into_inner());
    }
    let current = records::current_member(node, &name).await?;
    records::claim(node, &current, &uid, version, Some(&member.unknown_fields)).await?;
    if peer_urls != current.described.peer_urls {
        let update = Change::Update {
            id: current.described.member_id,
            peer_urls,
        };
        change(node, changes, update).await?;
    }
    records::sync_now(node).await?;
    one(node, &caller, &name).await
}

pub async fn delete(
    node: &std::sync::Arc<Node>,
    changes: &MemberChanges,
    request: Request<DeleteMemberRequest>,
) -> Result<Member, AdminError> {
    let caller = Caller::of(&request);
    let name = validate::object_ref("member", request.get_ref().member.as_ref())?;
    let options = request.get_ref().options.clone().unwrap_or_default();
    validate::guards("options", &options.uid, options.version)?;
    if let Leader::Relay(mut leader) = leader(node, relay::is_relayed(&request)).await? {
        let relayed = relay::request(request.into_inner(), &caller);
        return Ok(leader.delete_member(relayed).await?.into_inner());
    }
    let current = records::current_member(node, &name).await?;
    let mut as_it_was = resources(node, &caller, std::slice::from_ref(&current)).await;
    records::claim(node, &current, &options.uid, options.version, None).await?;
    let remove = Change::Remove {
        id: current.described.member_id,
    };
    if let Outcome::HandedOver = change(node, changes, remove).await? {
        // This member led and is the one removed: the new leader removes it. The
        // guards were claimed here already, so the request goes on without them.
        let mut unguarded = request.into_inner();
        unguarded.options = Some(DeleteOptions::default());
        let mut leader = AdminClient::new(relay::to_leader(node).await?);
        leader
            .delete_member(relay::request(unguarded, &caller))
            .await?;
    } else {
        records::sync_now(node).await?;
    }
    as_it_was.pop().ok_or_else(|| AdminError::NotFound {
        kind: "member",
        name,
    })
}

pub async fn promote(
    node: &std::sync::Arc<Node>,
    changes: &MemberChanges,
    request: Request<PromoteMemberRequest>,
) -> Result<Member, AdminError> {
    let caller = Caller::of(&request);
    let name = validate::object_ref("member", request.get_ref().member.as_ref())?;
    if let Leader::Relay(mut leader) = leader(node, relay::is_relayed(&request)).await? {
        let relayed = relay::request(request.into_inner(), &caller);
        return Ok(leader.promote_member(relayed).await?.into_inner());
    }
    let current = records::current_member(node, &name).await?;
    let promote = Change::Promote {
        id: current.described.member_id,
    };
    change(node, changes, promote).await?;
    records::sync_now(node).await?;
    one(node, &caller, &name).await
}

pub async fn elect(
    node: &std::sync::Arc<Node>,
    changes: &MemberChanges,
    request: Request<ElectMemberRequest>,
) -> Result<Member, AdminError> {
    let caller = Caller::of(&request);
    let name = validate::object_ref("member", request.get_ref().member.as_ref())?;
    if let Leader::Relay(mut leader) = leader(node, relay::is_relayed(&request)).await? {
        let relayed = relay::request(request.into_inner(), &caller);
        return Ok(leader.elect_member(relayed).await?.into_inner());
    }
    let current = records::current_member(node, &name).await?;
    if current.described.learner {
        return Err(AdminError::FailedPrecondition(format!(
            "member {name:?} is a learner: only a voter can lead"
        )));
    }
    changes
        .move_leader(node, current.described.member_id, ELECT_TIMEOUT)
        .await?;
    one(node, &caller, &name).await
}
