//! Auth against etcd's 2026 security advisories (issue 52, part 3), continued from
//! `auth_advisories` (whose module doc and helpers these share): Lease calls over the
//! lease's keys, the calls that need a user (`requireAuthInfo`), MemberList and Alarm
//! GET for any user, Watch ranges, and authorization while NOSPACE is raised.
//!
//! etcd 3.4.23 (`QK_TEST_TARGET=etcd`) predates every one of these fixes: each test runs
//! on QuantyKube only, naming the etcd releases that fixed it.

use etcd_client::proto::{
    PbAlarmRequest, PbAlarmResponse, PbAuthDisableRequest, PbAuthDisableResponse,
    PbAuthRoleGrantPermissionRequest, PbAuthRoleGrantPermissionResponse, PbAuthUserAddRequest,
    PbAuthUserAddResponse, PbAuthUserGrantRoleRequest, PbAuthUserGrantRoleResponse,
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseLeasesRequest, PbLeaseLeasesResponse,
    PbLeaseRevokeRequest, PbLeaseRevokeResponse, PbLeaseTimeToLiveRequest,
    PbLeaseTimeToLiveResponse, PbMemberListRequest, PbMemberListResponse,
};
use etcd_client::{Client, Permission, WatchOptions};
use tonic::Code;

use crate::auth_advisories::{
    assert_user_empty, quantykube_only, root_rpc, tenant_cluster, tenant_rpc, txn_of, value,
    NO_SPACE, TENANT, TENANT_PW,
};
use crate::auth_support::{assert_denied, assert_status, connect_as, msg, ok, Rpc};
use crate::harness::{Cluster, ClusterOptions, RPC_TIMEOUT};
use crate::raw;
use crate::support::status::assert_code_message;

/// Keepalives of `id` on a new stream: the TTL the second one answers, or the stream's
/// refusal. (etcd-client sends the first and takes its answer itself, refusing a TTL of
/// 0: every lease kept alive here exists.)
pub(crate) async fn keep_alive_once(client: &mut Client, id: i64) -> Result<i64, tonic::Status> {
    let status = |e: etcd_client::Error| match e {
        etcd_client::Error::GRpcStatus(status) => status,
        other => panic!("keepalive of {id:x}: not a gRPC status: {other:?}"),
    };
    let (mut keeper, mut answers) = client.lease_keep_alive(id).await.map_err(status)?;
    keeper.keep_alive().await.map_err(status)?;
    let answer = tokio::time::timeout(RPC_TIMEOUT, answers.message())
        .await
        .unwrap_or_else(|_| panic!("keepalive of {id:x}: no answer"))
        .map_err(status)?;
    Ok(answer.expect("an answer, not the end").ttl())
}

/// GHSA-q8m4-xhhv-38mg (CVE-2026-33413), "Authorization bypasses in multiple APIs":
/// fixed in etcd 3.6.9, 3.5.28 and 3.4.42 (2026-03-20), whose server/etcdserver/
/// v3_server.go checks, unless the caller is root: LeaseRevoke (at apply,
/// `checkLeasePuts`) and LeaseKeepAlive (`checkLeaseRenew`) write permission over every
/// key on the lease; LeaseTimeToLive with keys (`checkLeaseTimeToLive`) and LeaseLeases
/// (`checkLeaseLeases`, every key of every lease) read permission. Checked on the
/// leader and on followers, which relay keepalives and TimeToLive to the leader.
#[tokio::test]
async fn advisory_lease_calls_need_permission_over_the_lease_keys() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start(3).await;
    let mut root = tenant_cluster(&cluster).await;
    let leased = |lease: i64| Some(etcd_client::PutOptions::new().with_lease(lease));
    // Root's leases: on secret/key (neither readable nor writable by the tenant), on
    // ro (readable only), on wo (writable only), on nothing.
    let secret = root.lease_grant(600, None).await.expect("grant").id();
    let readable = root.lease_grant(600, None).await.expect("grant").id();
    let writable = root.lease_grant(600, None).await.expect("grant").id();
    let empty = root.lease_grant(600, None).await.expect("grant").id();
    root.put("secret/key", "s", leased(secret))
        .await
        .expect("put");
    root.put("ro", "r", leased(readable)).await.expect("put");
    root.put("wo", "w", leased(writable)).await.expect("put");

    for member in 0..3 {
        let mut tenant = tenant_rpc(&cluster, member).await;
        let mut tenant_client = connect_as(&cluster, member, TENANT, TENANT_PW).await;
        let what = |call: &str| format!("tenant's {call} on member {member}");

        // Keepalive: write permission over the lease's keys.
        for lease in [secret, readable] {
            let refused = keep_alive_once(&mut tenant_client, lease).await;
            match refused {
                Err(status) => assert_code_message(
                    &status,
                    Code::PermissionDenied,
                    msg::PERMISSION_DENIED,
                    &what("keepalive"),
                ),
                Ok(ttl) => panic!("{}: kept alive ({ttl})", what("keepalive")),
            }
        }
        for lease in [writable, empty] {
            let ttl = keep_alive_once(&mut tenant_client, lease)
                .await
                .unwrap_or_else(|s| panic!("{}: {s:?}", what("keepalive")));
            assert_eq!(ttl, 600, "{}", what("keepalive"));
        }

        // TimeToLive with keys: read permission over them; without keys: any user.
        let ttl = |id: i64, keys: bool| PbLeaseTimeToLiveRequest { id, keys };
        for lease in [secret, writable] {
            assert_denied(
                tenant
                    .call::<_, PbLeaseTimeToLiveResponse>(
                        "/etcdserverpb.Lease/LeaseTimeToLive",
                        ttl(lease, true),
                    )
                    .await,
                &what("time to live with keys"),
            );
            let shown: PbLeaseTimeToLiveResponse = ok(
                tenant
                    .call("/etcdserverpb.Lease/LeaseTimeToLive", ttl(lease, false))
                    .await,
                &what("time to live without keys"),
            );
            assert_eq!(shown.granted_ttl, 600);
        }
        let shown: PbLeaseTimeToLiveResponse = ok(
            tenant
                .call("/etcdserverpb.Lease/LeaseTimeToLive", ttl(readable, true))
                .await,
            &what("time to live with readable keys"),
        );
        assert_eq!(shown.keys, vec![b"ro".to_vec()]);

        // LeaseLeases: read permission over every key of every lease.
        assert_denied(
            tenant
                .call::<_, PbLeaseLeasesResponse>(
                    "/etcdserverpb.Lease/LeaseLeases",
                    PbLeaseLeasesRequest {},
                )
                .await,
            &what("lease list"),
        );

        // Revoke: write permission over the lease's keys.
        for lease in [secret, readable] {
            assert_denied(
                tenant
                    .call::<_, PbLeaseRevokeResponse>(
                        "/etcdserverpb.Lease/LeaseRevoke",
                        PbLeaseRevokeRequest { id: lease },
                    )
                    .await,
                &what("revoke"),
            );
        }
    }
    assert_eq!(value(&mut root, "secret/key").await.as_deref(), Some("s"));
    assert_eq!(value(&mut root, "ro").await.as_deref(), Some("r"));

    // Root may do all of it.
    let mut root_raw = root_rpc(&cluster, 2).await;
    for lease in [secret, readable] {
        let ttl = keep_alive_once(&mut root, lease)
            .await
            .expect("root keeps alive");
        assert_eq!(ttl, 600);
    }
    let listed: PbLeaseLeasesResponse = ok(
        root_raw
            .call("/etcdserverpb.Lease/LeaseLeases", PbLeaseLeasesRequest {})
            .await,
        "root lists leases",
    );
    assert_eq!(listed.leases.len(), 4);

    // With the lease on secret/key gone (and wo's, which the tenant may not read), the
    // tenant may list the rest; it revokes a lease over keys it may write.
    let mut tenant = tenant_rpc(&cluster, 1).await;
    let _: PbLeaseRevokeResponse = ok(
        tenant
            .call(
                "/etcdserverpb.Lease/LeaseRevoke",
                PbLeaseRevokeRequest { id: writable },
            )
            .await,
        "tenant revokes the lease on wo",
    );
    assert_eq!(value(&mut root, "wo").await, None);
    let _: PbLeaseRevokeResponse = ok(
        root_raw
            .call(
                "/etcdserverpb.Lease/LeaseRevoke",
                PbLeaseRevokeRequest { id: secret },
            )
            .await,
        "root revokes the lease on secret/key",
    );
    let listed: PbLeaseLeasesResponse = ok(
        tenant
            .call("/etcdserverpb.Lease/LeaseLeases", PbLeaseLeasesRequest {})
            .await,
        "tenant lists leases over readable keys",
    );
    let mut ids: Vec<i64> = listed.leases.iter().map(|l| l.id).collect();
    ids.sort_unstable();
    let mut expected = vec![readable, empty];
    expected.sort_unstable();
    assert_eq!(ids, expected);
}

/// GHSA-q8m4-xhhv-38mg (CVE-2026-33413), fixed in etcd 3.6.9, 3.5.28 and 3.4.42:
/// without a valid token, MemberList, Alarm and every Lease call (keepalives and
/// LeaseLeases included) are refused (`requireAuthInfo`: `etcdserver: user name is
/// empty`; a token that is not valid: `etcdserver: invalid auth token`). etcd pull
/// request 21538 (backported as 21549 and 21550: etcd 3.6.10 and 3.5.29, 2026-04-01)
/// then let any logged-in user list members and alarms (`AuthAdmin.requireAuthInfo`
/// for MemberList and Alarm GET); raising or clearing an alarm stays root's.
#[tokio::test]
async fn advisory_member_list_alarm_and_lease_calls_need_a_user() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start(3).await;
    let mut root = tenant_cluster(&cluster).await;
    let lease = root.lease_grant(600, None).await.expect("grant").id();
    root.put(
        "t/a",
        "leased",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put with lease");
    let me = cluster.member_id(0);
    let alarm = |action: i32| PbAlarmRequest {
        action,
        member_id: me,
        alarm: 1, // NOSPACE
    };

    for member in 0..3 {
        let anon = Rpc::connect(&cluster.endpoint(member)).await;
        let forged = anon.with_token(Some("forged.1"));
        for (mut rpc, code, message) in [
            (anon, Code::InvalidArgument, msg::USER_EMPTY),
            (forged, Code::Unauthenticated, msg::INVALID_AUTH_TOKEN),
        ] {
            let what = |call: &str| format!("{call} with {message:?} on member {member}");
            let refused = |result: Result<(), tonic::Status>, call: &str| {
                assert_status(result, code, message, &what(call))
            };
            refused(
                rpc.call::<_, PbMemberListResponse>(
                    "/etcdserverpb.Cluster/MemberList",
                    PbMemberListRequest::default(),
                )
                .await
                .map(drop),
                "member list",
            );
            for action in [0, 1, 2] {
                refused(
                    rpc.call::<_, PbAlarmResponse>(
                        "/etcdserverpb.Maintenance/Alarm",
                        alarm(action),
                    )
                    .await
                    .map(drop),
                    &format!("alarm action {action}"),
                );
            }
            refused(
                rpc.call::<_, PbLeaseGrantResponse>(
                    "/etcdserverpb.Lease/LeaseGrant",
                    PbLeaseGrantRequest { ttl: 60, id: 0 },
                )
                .await
                .map(drop),
                "lease grant",
            );
            refused(
                rpc.call::<_, PbLeaseRevokeResponse>(
                    "/etcdserverpb.Lease/LeaseRevoke",
                    PbLeaseRevokeRequest { id: lease },
                )
                .await
                .map(drop),
                "lease revoke",
            );
            for keys in [false, true] {
                refused(
                    rpc.call::<_, PbLeaseTimeToLiveResponse>(
                        "/etcdserverpb.Lease/LeaseTimeToLive",
                        PbLeaseTimeToLiveRequest { id: lease, keys },
                    )
                    .await
                    .map(drop),
                    "lease time to live",
                );
            }
            refused(
                rpc.call::<_, PbLeaseLeasesResponse>(
                    "/etcdserverpb.Lease/LeaseLeases",
                    PbLeaseLeasesRequest {},
                )
                .await
                .map(drop),
                "lease list",
            );
        }
        // A keepalive without a token: the stream ends with the refusal.
        let mut anonymous = cluster.client(member).await;
        match keep_alive_once(&mut anonymous, lease).await {
            Err(status) => assert_code_message(
                &status,
                Code::InvalidArgument,
                msg::USER_EMPTY,
                &format!("anonymous keepalive on member {member}"),
            ),
            Ok(ttl) => panic!("anonymous keepalive on member {member}: kept alive ({ttl})"),
        }

        // Logged in, not root: members and alarms listed, alarms not changed.
        let mut tenant = tenant_rpc(&cluster, member).await;
        let list: PbMemberListResponse = ok(
            tenant
                .call(
                    "/etcdserverpb.Cluster/MemberList",
                    PbMemberListRequest::default(),
                )
                .await,
            "tenant lists members",
        );
        assert_eq!(list.members.len(), 3);
        let alarms: PbAlarmResponse = ok(
            tenant
                .call("/etcdserverpb.Maintenance/Alarm", alarm(0))
                .await,
            "tenant lists alarms",
        );
        assert!(alarms.alarms.is_empty());
        for action in [1, 2] {
            assert_denied(
                tenant
                    .call::<_, PbAlarmResponse>("/etcdserverpb.Maintenance/Alarm", alarm(action))
                    .await,
                &format!("tenant's alarm action {action} on member {member}"),
            );
        }
        // The tenant may keep alive and list the lease on t/a, which it may write.
        let mut tenant_client = connect_as(&cluster, member, TENANT, TENANT_PW).await;
        assert_eq!(
            keep_alive_once(&mut tenant_client, lease)
                .await
                .expect("tenant keeps alive"),
            600
        );
        let listed: PbLeaseLeasesResponse = ok(
            tenant
                .call("/etcdserverpb.Lease/LeaseLeases", PbLeaseLeasesRequest {})
                .await,
            "tenant lists leases",
        );
        assert_eq!(listed.leases.len(), 1);
    }
    assert_eq!(value(&mut root, "t/a").await.as_deref(), Some("leased"));

    // Root raises and clears an alarm.
    let mut root_raw = root_rpc(&cluster, 1).await;
    let raised: PbAlarmResponse = ok(
        root_raw
            .call("/etcdserverpb.Maintenance/Alarm", alarm(1))
            .await,
        "root raises",
    );
    assert_eq!(raised.alarms.len(), 1);
    let _: PbAlarmResponse = ok(
        root_raw
            .call("/etcdserverpb.Maintenance/Alarm", alarm(2))
            .await,
        "root clears",
    );
}

/// The first answer on a new watch of `key` with `options`.
async fn first_watch_answer(
    client: &mut Client,
    key: &str,
    options: Option<WatchOptions>,
) -> (etcd_client::WatchStream, etcd_client::WatchResponse) {
    let mut stream = client.watch(key, options).await.expect("watch stream");
    let first = tokio::time::timeout(RPC_TIMEOUT, stream.message())
        .await
        .expect("an answer to the create")
        .expect("watch message")
        .expect("a response");
    (stream, first)
}

/// GHSA-xg4h-6gfc-h4m8, "a user granted read permission on one key could receive watch
/// responses for every key starting from that key": fixed in etcd 3.7.1, 3.6.14 and
/// 3.5.33 (2026-07-23), whose watch.go checks read permission over the range as the
/// client sent it (a range end of `\0` meaning every key from the key on) before
/// turning `\0` into the watch store's "from key". A watch is refused unless the whole
/// watched range is readable.
#[tokio::test]
async fn advisory_watch_needs_read_over_the_whole_range() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start(1).await;
    let mut root = tenant_cluster(&cluster).await;
    let mut tenant = connect_as(&cluster, 0, TENANT, TENANT_PW).await;
    let mut anon = cluster.client(0).await;

    let denied = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";
    let empty = "rpc error: code = InvalidArgument desc = etcdserver: user name is empty";
    let outside = [
        ("one", Some(WatchOptions::new().with_from_key())),
        ("one", Some(WatchOptions::new().with_prefix())),
        ("t/", Some(WatchOptions::new().with_from_key())),
        ("t/", Some(WatchOptions::new().with_range("u"))),
        ("", Some(WatchOptions::new().with_all_keys())),
        ("secret/key", None),
    ];
    for (key, options) in outside {
        for (client, reason) in [(&mut tenant, denied), (&mut anon, empty)] {
            let (_stream, first) = first_watch_answer(client, key, options.clone()).await;
            assert_eq!(
                (first.created(), first.canceled(), first.cancel_reason()),
                (true, true, reason),
                "watch of {key:?} {options:?}"
            );
        }
    }

    // Inside: the single key, the prefix, a range within it.
    for (key, options) in [
        ("one", None),
        ("t/", Some(WatchOptions::new().with_prefix())),
        ("t/", Some(WatchOptions::new().with_range("t0"))),
    ] {
        let (_stream, first) = first_watch_answer(&mut tenant, key, options).await;
        assert!(first.created() && !first.canceled(), "{key:?}: {first:?}");
    }

    // Root's from-key watch sees the keys after `one`; the tenant's single key only its own.
    let (mut root_stream, first) =
        first_watch_answer(&mut root, "one", Some(WatchOptions::new().with_from_key())).await;
    assert!(first.created() && !first.canceled());
    let (mut tenant_stream, first) = first_watch_answer(&mut tenant, "one", None).await;
    assert!(first.created() && !first.canceled());
    root.put("onex", "onex1", None).await.expect("put onex");
    root.put("one", "one1", None).await.expect("put one");
    let mut seen_by_root = Vec::new();
    while seen_by_root.len() < 2 {
        let resp = tokio::time::timeout(RPC_TIMEOUT, root_stream.message())
            .await
            .expect("root's events")
            .expect("message")
            .expect("response");
        for event in resp.events() {
            seen_by_root.push(event.kv().expect("kv").key_str().expect("utf-8").to_owned());
        }
    }
    assert_eq!(seen_by_root, ["onex", "one"]);
    let resp = tokio::time::timeout(RPC_TIMEOUT, tenant_stream.message())
        .await
        .expect("tenant's event")
        .expect("message")
        .expect("response");
    let keys: Vec<&[u8]> = resp
        .events()
        .iter()
        .map(|e| e.kv().expect("kv").key())
        .collect();
    assert_eq!(keys, [b"one".as_slice()], "the tenant sees its key only");
}

/// etcd#22386 ("keep auth applier when an alarm is raised", for release-3.5; etcd 3.6
/// and later never had the bug): etcd 3.5's NOSPACE alarm replaced the applier chain by
/// one without the auth applier, so that while NOSPACE was raised AuthEnable,
/// AuthDisable, every user and role change, DeleteRange and LeaseRevoke went
/// unchecked. Here every request is authorised before it is proposed, whatever alarm
/// is raised: the tenant's changes are refused as without the alarm, and root's pass.
#[tokio::test]
async fn advisory_nospace_alarm_keeps_every_write_authorized() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start_with(ClusterOptions::new(1)).await;
    let mut root = tenant_cluster(&cluster).await;
    let lease = root.lease_grant(600, None).await.expect("grant").id();
    root.put(
        "secret/leased",
        "l",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put with lease");
    let mut root_raw = root_rpc(&cluster, 0).await;
    let nospace = |action: i32| PbAlarmRequest {
        action,
        member_id: cluster.member_id(0),
        alarm: 1, // NOSPACE
    };
    let _: PbAlarmResponse = ok(
        root_raw
            .call("/etcdserverpb.Maintenance/Alarm", nospace(1))
            .await,
        "root raises NOSPACE",
    );
    let mut tenant = tenant_rpc(&cluster, 0).await;
    let mut anon = Rpc::connect(&cluster.endpoint(0)).await;
    let listed: PbAlarmResponse = ok(
        tenant
            .call("/etcdserverpb.Maintenance/Alarm", nospace(0))
            .await,
        "tenant lists alarms",
    );
    assert_eq!(listed.alarms.len(), 1, "NOSPACE is raised");

    // What the tenant may not do, it still may not.
    for mut rpc in [tenant.clone(), anon.clone()] {
        let logged_in = rpc.token.is_some();
        let refused = move |result: Result<(), tonic::Status>, what: &str| {
            if logged_in {
                assert_denied(result, what)
            } else {
                assert_user_empty(result, what)
            }
        };
        refused(
            rpc.delete(raw::delete("secret/key")).await.map(drop),
            "delete secret/key",
        );
        refused(
            rpc.txn(txn_of(vec![raw::op_delete(raw::delete("secret/key"))]))
                .await
                .map(drop),
            "txn delete secret/key",
        );
        refused(
            rpc.call::<_, PbLeaseRevokeResponse>(
                "/etcdserverpb.Lease/LeaseRevoke",
                PbLeaseRevokeRequest { id: lease },
            )
            .await
            .map(drop),
            "revoke root's lease",
        );
        refused(
            rpc.call::<_, PbAuthDisableResponse>(
                "/etcdserverpb.Auth/AuthDisable",
                PbAuthDisableRequest {},
            )
            .await
            .map(drop),
            "auth disable",
        );
        refused(
            rpc.call::<_, PbAuthUserAddResponse>(
                "/etcdserverpb.Auth/UserAdd",
                PbAuthUserAddRequest {
                    name: "intruder".into(),
                    password: "pw".into(),
                    ..Default::default()
                },
            )
            .await
            .map(drop),
            "user add",
        );
        refused(
            rpc.call::<_, PbAuthUserGrantRoleResponse>(
                "/etcdserverpb.Auth/UserGrantRole",
                PbAuthUserGrantRoleRequest {
                    user: TENANT.into(),
                    role: "root".into(),
                },
            )
            .await
            .map(drop),
            "grant itself root",
        );
        refused(
            rpc.call::<_, PbAuthRoleGrantPermissionResponse>(
                "/etcdserverpb.Auth/RoleGrantPermission",
                PbAuthRoleGrantPermissionRequest {
                    name: TENANT.into(),
                    perm: Some(Permission::read_write(vec![0]).with_from_key().into()),
                },
            )
            .await
            .map(drop),
            "grant itself every key",
        );
        // A put is refused twice over; authorisation decides first here (etcd's
        // capped applier answers NOSPACE before its auth applier looks).
        refused(
            rpc.put(raw::put("secret/key", "x")).await.map(drop),
            "put secret/key",
        );
    }
    assert_eq!(value(&mut root, "secret/key").await.as_deref(), Some("s0"));
    assert_eq!(
        value(&mut root, "secret/leased").await.as_deref(),
        Some("l")
    );
    assert_user_empty(
        anon.range(raw::range("t/a")).await,
        "auth is still on: anonymous range",
    );
    let user: etcd_client::proto::PbAuthUserGetResponse = ok(
        root_raw
            .call(
                "/etcdserverpb.Auth/UserGet",
                etcd_client::proto::PbAuthUserGetRequest {
                    name: TENANT.into(),
                },
            )
            .await,
        "tenant's roles",
    );
    assert_eq!(user.roles, vec![TENANT.to_owned()]);

    // What the tenant may do: a delete of its own key passes, a put meets NOSPACE.
    ok(
        tenant.delete(raw::delete("t/a")).await,
        "tenant deletes t/a",
    );
    assert_status(
        tenant.put(raw::put("t/a", "a1")).await,
        Code::ResourceExhausted,
        NO_SPACE,
        "tenant puts t/a under NOSPACE",
    );

    // Root's changes pass.
    ok(
        root_raw.delete(raw::delete("secret/key")).await,
        "root deletes secret/key",
    );
    let _: PbLeaseRevokeResponse = ok(
        root_raw
            .call(
                "/etcdserverpb.Lease/LeaseRevoke",
                PbLeaseRevokeRequest { id: lease },
            )
            .await,
        "root revokes",
    );
    assert_eq!(value(&mut root, "secret/leased").await, None);
    let _: PbAlarmResponse = ok(
        root_raw
            .call("/etcdserverpb.Maintenance/Alarm", nospace(2))
            .await,
        "root disarms",
    );
    ok(tenant.put(raw::put("t/a", "a2")).await, "tenant puts t/a");
}
