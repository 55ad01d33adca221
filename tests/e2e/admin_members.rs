//! The admin API's Member resource (`quantykube.admin.v1`), against real three-member
//! clusters. Each test is named after the style guide section it shows; etcd has no
//! such API, so against etcd (`QK_TEST_TARGET=etcd`) these tests say so and pass.

use std::time::Duration;

use quantykube::proto::admin_v1::admin_client::AdminClient;
use quantykube::proto::admin_v1::{
    CreateMemberRequest, DeleteMemberRequest, DeleteOptions, ElectMemberRequest, GetMemberRequest,
    ListMembersRequest, Member, MemberState, ObjectRef, PromoteMemberRequest, ResourceMetadata,
    UpdateMemberRequest,
};
use tonic::transport::Channel;
use tonic::Code;

use crate::admin_support::{admin, assert_code, etcd_has_none, named};
use crate::harness::{Cluster, Deadline};

const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

async fn get(client: &mut AdminClient<Channel>, name: &str) -> Result<Member, tonic::Status> {
    client
        .get_member(GetMemberRequest {
            member: named(name),
        })
        .await
        .map(|r| r.into_inner())
}

async fn list_all(client: &mut AdminClient<Channel>, page_size: i32) -> (Vec<Member>, usize) {
    let (mut members, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let page = client
            .list_members(ListMembersRequest {
                page_size,
                page_token: token,
            })
            .await
            .expect("ListMembers")
            .into_inner();
        pages += 1;
        members.extend(page.members);
        if page.next_page_token.is_empty() {
            return (members, pages);
        }
        token = page.next_page_token;
    }
}

/// A string field `tag` that this schema does not have, encoded.
fn newer_field(tag: u32, value: &str) -> Vec<u8> {
    let mut encoded = Vec::new();
    prost::encoding::string::encode(tag, &value.to_string(), &mut encoded);
    encoded
}

fn metadata(member: &Member) -> &ResourceMetadata {
    member.metadata.as_ref().expect("metadata")
}

/// Sections 2, 3.1, 3.2, 6 and 8: names, metadata, status, Get and List with paging.
#[tokio::test]
async fn section_3_1_get_and_3_2_list_members() {
    if etcd_has_none("the Member resource") {
        return;
    }
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let mut client = admin(&cluster, 0).await;
    let (members, pages) = list_all(&mut client, 0).await;
    assert_eq!(pages, 1, "the default page holds three members");
    let names: Vec<&str> = members.iter().map(|m| metadata(m).name.as_str()).collect();
    assert_eq!(names, ["m0", "m1", "m2"], "listed in order of name");
    for (i, member) in members.iter().enumerate() {
        let meta = metadata(member);
        assert!(meta.atespace.is_empty(), "section 2.1: global-scoped");
        let uid = uuid::Uuid::parse_str(&meta.uid).expect("section 6.3: a UUID");
        assert_eq!(uid.get_version_num(), 4, "section 6.3: UUID4");
        assert!(meta.version > 0, "section 6.4: a version");
        assert!(meta.create_time.is_some() && meta.update_time.is_some());
        let status = member.status.as_ref().expect("section 8: status");
        assert_eq!(status.id, cluster.member_id(i));
        assert_eq!(status.state(), MemberState::Voter);
        assert_eq!(status.leader, i == leader);
        assert!(status.started && status.reachable, "{status:?}");
        assert_eq!(status.client_urls, [cluster.endpoint(i)]);
        assert_eq!(member.peer_urls, [cluster.peer_url(i)]);
        assert!(
            status.applied_index > 0 && status.raft_term > 0,
            "{status:?}"
        );
        assert!(status.db_size > 0);
        assert_eq!(status.version, "3.7.1");
    }
    // The same resource from every member: uid and version are the cluster's.
    for i in 1..3 {
        let mut other = admin(&cluster, i).await;
        for member in &members {
            let seen = get(&mut other, &metadata(member).name)
                .await
                .expect("GetMember");
            assert_eq!(metadata(&seen).uid, metadata(member).uid);
            assert_eq!(metadata(&seen).version, metadata(member).version);
        }
    }

    // 3.2: pages of one until the empty token; coercion; refusals.
    let (paged, pages) = list_all(&mut client, 1).await;
    assert_eq!(pages, 3);
    assert_eq!(paged.len(), 3);
    let (coerced, pages) = list_all(&mut client, 5000).await;
    assert_eq!((coerced.len(), pages), (3, 1));
    assert_code(
        client
            .list_members(ListMembersRequest {
                page_size: -1,
                page_token: String::new(),
            })
            .await,
        Code::InvalidArgument,
        "page_size",
    );
    for forged in ["nope", "cWsxAAAAAG0w", "%%%"] {
        assert_code(
            client
                .list_members(ListMembersRequest {
                    page_size: 1,
                    page_token: forged.into(),
                })
                .await,
            Code::InvalidArgument,
            "page_token",
        );
    }

    // 3.1: NOT_FOUND, and every field of the ObjectRef checked.
    assert_code(get(&mut client, "m9").await, Code::NotFound, "m9");
    assert_code(
        get(&mut client, "M0").await,
        Code::InvalidArgument,
        "member.name",
    );
    assert_code(
        get(&mut client, "").await,
        Code::InvalidArgument,
        "member.name",
    );
    assert_code(
        get(&mut client, &"a".repeat(64)).await,
        Code::InvalidArgument,
        "member.name",
    );
    let namespaced = client
        .get_member(GetMemberRequest {
            member: Some(ObjectRef {
                atespace: "default".into(),
                name: "m0".into(),
            }),
        })
        .await;
    assert_code(namespaced, Code::InvalidArgument, "member.atespace");
    let missing = client.get_member(GetMemberRequest { member: None }).await;
    assert_code(missing, Code::InvalidArgument, "member");
}

/// Sections 3.4 and 7: required guards, ABORTED on a stale version or uid, and the
/// read-modify-write race between two clients, from two members.
#[tokio::test]
async fn section_3_4_update_member_and_7_its_guards() {
    if etcd_has_none("UpdateMember") {
        return;
    }
    let cluster = Cluster::start(3).await;
    let mut first = admin(&cluster, 0).await;
    let mut second = admin(&cluster, 1).await;
    let read = get(&mut first, "m2").await.expect("GetMember");
    let update = |member: Member| UpdateMemberRequest {
        member: Some(member),
    };

    let mut blind = read.clone();
    blind.metadata.as_mut().unwrap().uid.clear();
    assert_code(
        first.update_member(update(blind)).await,
        Code::InvalidArgument,
        "member.metadata.uid",
    );
    let mut blind = read.clone();
    blind.metadata.as_mut().unwrap().version = 0;
    assert_code(
        first.update_member(update(blind)).await,
        Code::InvalidArgument,
        "member.metadata.version",
    );
    let mut no_urls = read.clone();
    no_urls.peer_urls.clear();
    assert_code(
        first.update_member(update(no_urls)).await,
        Code::InvalidArgument,
        "member.peer_urls",
    );
    let mut bad_url = read.clone();
    bad_url.peer_urls = vec!["ftp://x:1".into()];
    assert_code(
        first.update_member(update(bad_url)).await,
        Code::InvalidArgument,
        "member.peer_urls",
    );
    let mut unknown = read.clone();
    unknown.metadata.as_mut().unwrap().name = "m7".into();
    assert_code(
        first.update_member(update(unknown)).await,
        Code::NotFound,
        "m7",
    );
    // The immutable identity: omitted, or an atespace given, is named.
    let mut nameless = read.clone();
    nameless.metadata.as_mut().unwrap().name.clear();
    assert_code(
        first.update_member(update(nameless)).await,
        Code::InvalidArgument,
        "member.metadata.name: is required",
    );
    let mut scoped = read.clone();
    scoped.metadata.as_mut().unwrap().atespace = "default".into();
    assert_code(
        first.update_member(update(scoped)).await,
        Code::InvalidArgument,
        "member.metadata.atespace",
    );
    let mut metadataless = read.clone();
    metadataless.metadata = None;
    assert_code(
        first.update_member(update(metadataless)).await,
        Code::InvalidArgument,
        "member.metadata: is required",
    );
    let mut malformed = read.clone();
    malformed.metadata.as_mut().unwrap().uid = "not-a-uuid".into();
    assert_code(
        first.update_member(update(malformed)).await,
        Code::InvalidArgument,
        "member.metadata.uid: must be a UUID",
    );
    let mut negative = read.clone();
    negative.metadata.as_mut().unwrap().version = -3;
    assert_code(
        first.update_member(update(negative)).await,
        Code::InvalidArgument,
        "member.metadata.version",
    );
    let mut wrong_uid = read.clone();
    wrong_uid.metadata.as_mut().unwrap().uid = uuid::Uuid::new_v4().to_string();
    assert_code(
        first.update_member(update(wrong_uid)).await,
        Code::Aborted,
        "uid",
    );

    // A whole-resource write back: the version moves on, status and times are the
    // server's whatever the request said of them.
    let mut echoed = read.clone();
    echoed.status = None;
    echoed.metadata.as_mut().unwrap().create_time = None;
    let updated = first
        .update_member(update(echoed))
        .await
        .expect("UpdateMember")
        .into_inner();
    assert!(metadata(&updated).version > metadata(&read).version);
    assert_eq!(metadata(&updated).uid, metadata(&read).uid);
    assert_eq!(metadata(&updated).create_time, metadata(&read).create_time);
    assert!(updated.status.is_some());
    // The version read before is stale now.
    assert_code(
        first.update_member(update(read.clone())).await,
        Code::Aborted,
        "version",
    );

    // Unknown fields: what a newer client sends is kept, shown by every member, and
    // replaced by the next update as the rest of the resource is.
    let mut newer = updated.clone();
    newer.unknown_fields = newer_field(30, "from a newer schema");
    let kept = first
        .update_member(update(newer.clone()))
        .await
        .expect("UpdateMember")
        .into_inner();
    assert_eq!(kept.unknown_fields, newer.unknown_fields);
    let elsewhere = get(&mut second, "m2").await.expect("GetMember");
    assert_eq!(elsewhere.unknown_fields, newer.unknown_fields);
    let mut older = elsewhere.clone();
    older.unknown_fields.clear();
    let cleared = first
        .update_member(update(older))
        .await
        .expect("UpdateMember")
        .into_inner();
    assert!(cleared.unknown_fields.is_empty());

    // Two read-modify-writes of one read, from two members at once: one wins.
    for round in 0..5 {
        let read = get(&mut first, "m2").await.expect("GetMember");
        let (a, b) = tokio::join!(
            first.update_member(update(read.clone())),
            second.update_member(update(read.clone())),
        );
        let codes = [
            a.as_ref().err().map(|s| s.code()),
            b.as_ref().err().map(|s| s.code()),
        ];
        let won = codes.iter().filter(|c| c.is_none()).count();
        let aborted = codes.iter().filter(|c| **c == Some(Code::Aborted)).count();
        assert_eq!((won, aborted), (1, 1), "round {round}: {a:?} {b:?}");
    }
}

/// Sections 3.3, 3.5, 4 and 7: scale 3 → 4 → 3 through the API (create a learner,
/// start it, promote it, hand it the leadership, delete it with guards), and a name
/// deleted and created again refuses the old uid (the ABA case).
#[tokio::test]
async fn section_3_3_create_4_custom_3_5_delete_members_and_the_uid_aba_case() {
    if etcd_has_none("CreateMember") {
        return;
    }
    let mut cluster = Cluster::start(3).await;
    let mut client = admin(&cluster, 1).await;
    let slot = cluster.reserve_member();
    assert_eq!(cluster.name(slot), "m3");
    let create = |name: &str, peer_urls: Vec<String>| CreateMemberRequest {
        member: Some(Member {
            metadata: Some(ResourceMetadata {
                name: name.into(),
                // Server-managed: ignored.
                uid: "not-a-uid".into(),
                version: 99,
                ..Default::default()
            }),
            peer_urls,
            status: None,
            unknown_fields: Vec::new(),
        }),
    };
    let peer = cluster.peer_url(slot);
    assert_code(
        client.create_member(create("M3", vec![peer.clone()])).await,
        Code::InvalidArgument,
        "member.metadata.name",
    );
    assert_code(
        client.create_member(create("m3", vec![])).await,
        Code::InvalidArgument,
        "member.peer_urls",
    );
    assert_code(
        client.create_member(create("m0", vec![peer.clone()])).await,
        Code::AlreadyExists,
        "m0",
    );
    let created = client
        .create_member(create("m3", vec![peer.clone()]))
        .await
        .expect("CreateMember")
        .into_inner();
    let meta = metadata(&created).clone();
    assert_eq!(meta.name, "m3");
    assert_ne!(meta.uid, "not-a-uid");
    assert_ne!(meta.version, 99);
    let status = created.status.clone().expect("status");
    assert_eq!(status.state(), MemberState::Learner);
    assert!(
        !status.started && status.client_urls.is_empty(),
        "{status:?}"
    );
    assert_code(
        client
            .create_member(create("m3", vec!["http://127.0.0.9:1".into()]))
            .await,
        Code::AlreadyExists,
        "m3",
    );
    // Until it runs and catches up, a learner cannot be promoted.
    assert_code(
        client
            .promote_member(PromoteMemberRequest {
                member: named("m3"),
            })
            .await,
        Code::FailedPrecondition,
        "in sync",
    );
    assert_code(
        client
            .elect_member(ElectMemberRequest {
                member: named("m3"),
            })
            .await,
        Code::FailedPrecondition,
        "learner",
    );

    cluster.set_member_id(slot, status.id);
    let initial_cluster = (0..=slot)
        .map(|i| format!("{}={}", cluster.name(i), cluster.peer_url(i)))
        .collect::<Vec<_>>()
        .join(",");
    cluster.start_joining(slot, &initial_cluster);
    let deadline = Deadline::after(JOIN_TIMEOUT, "m3 promoted");
    let promoted = loop {
        match client
            .promote_member(PromoteMemberRequest {
                member: named("m3"),
            })
            .await
        {
            Ok(promoted) => break promoted.into_inner(),
            Err(status) if status.code() == Code::FailedPrecondition => deadline.tick().await,
            Err(status) => panic!("PromoteMember: {status:?}"),
        }
    };
    assert_eq!(
        promoted.status.as_ref().unwrap().state(),
        MemberState::Voter
    );
    assert!(metadata(&promoted).version > meta.version);
    cluster.wait_member_ready(slot, JOIN_TIMEOUT).await;
    let (all, _) = list_all(&mut client, 0).await;
    assert_eq!(all.len(), 4);

    let elected = client
        .elect_member(ElectMemberRequest {
            member: named("m3"),
        })
        .await
        .expect("ElectMember")
        .into_inner();
    assert!(elected.status.as_ref().unwrap().leader, "{elected:?}");
    assert_eq!(cluster.leader_index().await, slot);

    // Delete: each guard refuses alone, then the right ones delete; the new leader
    // (the member deleted) hands over first.
    let current = get(&mut client, "m3").await.expect("GetMember");
    let delete = |uid: &str, version: i64| DeleteMemberRequest {
        member: named("m3"),
        options: Some(DeleteOptions {
            version,
            uid: uid.into(),
        }),
    };
    let version = metadata(&current).version;
    let uid = metadata(&current).uid.clone();
    assert_code(
        client.delete_member(delete("", version - 1)).await,
        Code::Aborted,
        "version",
    );
    assert_code(
        client
            .delete_member(delete(&uuid::Uuid::new_v4().to_string(), 0))
            .await,
        Code::Aborted,
        "uid",
    );
    let current = get(&mut client, "m3").await.expect("GetMember");
    let deleted = client
        .delete_member(delete(&uid, metadata(&current).version))
        .await
        .expect("DeleteMember")
        .into_inner();
    assert_eq!(metadata(&deleted).uid, uid);
    assert!(
        cluster.wait_exit(slot, JOIN_TIMEOUT).await.is_some(),
        "m3 still runs"
    );
    assert_code(get(&mut client, "m3").await, Code::NotFound, "m3");
    let (all, _) = list_all(&mut client, 0).await;
    assert_eq!(all.len(), 3);

    // The name again, for another member: a new uid, and the old one refused.
    let again = cluster.reserve_member();
    let recreated = client
        .create_member(create("m3", vec![cluster.peer_url(again)]))
        .await
        .expect("CreateMember again")
        .into_inner();
    assert_ne!(metadata(&recreated).uid, uid);
    let mut stale = recreated.clone();
    stale.metadata.as_mut().unwrap().uid = uid.clone();
    assert_code(
        client
            .update_member(UpdateMemberRequest {
                member: Some(stale),
            })
            .await,
        Code::Aborted,
        "uid",
    );
    assert_code(
        client.delete_member(delete(&uid, 0)).await,
        Code::Aborted,
        "uid",
    );
    client
        .delete_member(delete("", 0))
        .await
        .expect("unguarded DeleteMember");
}

/// Section 7.1: versions are comparable between members and never go backwards, across
/// a leader change and a restart of every member.
#[tokio::test]
async fn section_7_1_versions_never_go_backwards() {
    if etcd_has_none("member versions") {
        return;
    }
    let mut cluster = Cluster::start(3).await;
    let versions = |members: Vec<Member>| -> Vec<(String, String, i64)> {
        members
            .iter()
            .map(|m| {
                let meta = metadata(m);
                (meta.name.clone(), meta.uid.clone(), meta.version)
            })
            .collect()
    };
    let mut before = versions(list_all(&mut admin(&cluster, 0).await, 0).await.0);
    for round in 0..2 {
        let leader = cluster.leader_index().await;
        let other = (leader + 1) % 3;
        admin(&cluster, leader)
            .await
            .elect_member(ElectMemberRequest {
                member: named(&cluster.name(other)),
            })
            .await
            .expect("ElectMember");
        if round == 1 {
            cluster.restart_all().await;
        }
        let mut seen = Vec::new();
        for i in 0..3 {
            seen.push(versions(list_all(&mut admin(&cluster, i).await, 0).await.0));
        }
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "members disagree: {seen:?}"
        );
        for ((name, uid, version), (name_before, uid_before, version_before)) in
            seen[0].iter().zip(&before)
        {
            assert_eq!((name, uid), (name_before, uid_before));
            assert!(
                version >= version_before,
                "{name}: {version} after {version_before}"
            );
        }
        before = seen.swap_remove(0);
    }
}

/// With auth on, the admin API is root's, on every member and through a relay to the
/// leader: other users are refused as etcd refuses them, and so is no token or a
/// forged one.
#[tokio::test]
async fn with_auth_on_the_admin_api_is_roots() {
    use crate::auth_support::{assert_denied, assert_status, enable_auth, msg, ok, Rpc, ROOT_PW};
    if etcd_has_none("the admin API's auth") {
        return;
    }
    let mut cluster = Cluster::start(3).await;
    let kv = cluster.client(0).await;
    kv.auth_client()
        .user_add("alice", "alice-pw", None)
        .await
        .expect("user add alice");
    enable_auth(&cluster).await;
    const LIST: &str = "/quantykube.admin.v1.Admin/ListMembers";
    // A follower, found through the API itself (3.7's Status wants a login too).
    let mut first = Rpc::connect(&cluster.endpoint(0)).await;
    let token = ok(first.authenticate("root", ROOT_PW).await, "root logs in");
    let members: quantykube::proto::admin_v1::ListMembersResponse = ok(
        first
            .with_token(Some(&token))
            .call(LIST, ListMembersRequest::default())
            .await,
        "root lists",
    );
    let follower = members
        .members
        .iter()
        .find(|m| !m.status.as_ref().is_some_and(|s| s.leader))
        .and_then(|m| cluster.index_of(m.status.as_ref().map_or(0, |s| s.id)))
        .expect("a follower");
    let mut rpc = Rpc::connect(&cluster.endpoint(follower)).await;
    let root_token = ok(rpc.authenticate("root", ROOT_PW).await, "root logs in");
    let alice_token = ok(rpc.authenticate("alice", "alice-pw").await, "alice logs in");
    const CREATE: &str = "/quantykube.admin.v1.Admin/CreateMember";
    let list = ListMembersRequest::default();
    let listed: quantykube::proto::admin_v1::ListMembersResponse = ok(
        rpc.with_token(Some(&root_token))
            .call(LIST, list.clone())
            .await,
        "root lists",
    );
    assert_eq!(listed.members.len(), 3);
    assert_denied(
        rpc.with_token(Some(&alice_token))
            .call::<_, quantykube::proto::admin_v1::ListMembersResponse>(LIST, list.clone())
            .await,
        "alice lists",
    );
    assert_status(
        rpc.with_token(None)
            .call::<_, quantykube::proto::admin_v1::ListMembersResponse>(LIST, list.clone())
            .await,
        Code::InvalidArgument,
        msg::USER_EMPTY,
        "no token",
    );
    assert_status(
        rpc.with_token(Some("forged.1"))
            .call::<_, quantykube::proto::admin_v1::ListMembersResponse>(LIST, list)
            .await,
        Code::Unauthenticated,
        msg::INVALID_AUTH_TOKEN,
        "a forged token",
    );
    // A write through a follower is relayed to the leader with the caller's token,
    // and authorised there too.
    let slot = cluster.reserve_member();
    let create = CreateMemberRequest {
        member: Some(Member {
            metadata: Some(ResourceMetadata {
                name: "m3".into(),
                ..Default::default()
            }),
            peer_urls: vec![cluster.peer_url(slot)],
            status: None,
            unknown_fields: Vec::new(),
        }),
    };
    assert_denied(
        rpc.with_token(Some(&alice_token))
            .call::<_, Member>(CREATE, create.clone())
            .await,
        "alice creates",
    );
    let created: Member = ok(
        rpc.with_token(Some(&root_token)).call(CREATE, create).await,
        "root creates",
    );
    assert_eq!(metadata(&created).name, "m3");
}
