//! Auth (issue 17), the management side: turning auth on and off, every Auth RPC with
//! its success and its errors (gRPC code and etcd's exact message), through
//! etcd-client and through `etcdctl user|role|auth`, on three members; oversized
//! passwords and a user name that is not UTF-8.
//!
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`). etcd 3.4 has no
//! AuthStatus RPC and no `hashedPassword` field in UserAdd (both 3.5), so nothing here
//! asks for them.

use tonic::Code;

use etcd_client::proto::{
    PbAuthRoleGetRequest, PbAuthRoleGetResponse, PbAuthUserListRequest, PbAuthUserListResponse,
};
use etcd_client::{Permission, RoleRevokePermissionOptions};

use crate::auth_support::{
    connect_as, enable_auth, msg, ok, root_client, root_flag, try_connect_as, Rpc, ROOT_PW,
};
use crate::harness::{assert_grpc_error, grpc_status, Cluster, Target};
use crate::support::status::{assert_code_message, assert_status};

/// A permission of a role as etcd answers it: (type, key, range end); type 0 READ,
/// 1 WRITE, 2 READWRITE.
type Perm = (i32, String, String);

async fn role_perms(rpc: &mut Rpc, role: &str) -> Vec<Perm> {
    let resp: PbAuthRoleGetResponse = ok(
        rpc.call(
            "/etcdserverpb.Auth/RoleGet",
            PbAuthRoleGetRequest {
                role: role.to_owned(),
            },
        )
        .await,
        "role get",
    );
    resp.perm
        .iter()
        .map(|p| {
            (
                p.perm_type,
                String::from_utf8_lossy(&p.key).into_owned(),
                String::from_utf8_lossy(&p.range_end).into_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn auth_enable_needs_root_user_and_root_role_and_disable_cycles() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client(0).await;
    let mut auth = client.auth_client();

    // Authenticate while auth is off.
    assert_grpc_error(
        auth.authenticate("root".into(), ROOT_PW.into()).await,
        Code::FailedPrecondition,
        msg::AUTH_NOT_ENABLED,
    );
    assert_grpc_error(
        auth.auth_enable().await,
        Code::FailedPrecondition,
        msg::ROOT_USER_NOT_EXIST,
    );
    auth.user_add("root", ROOT_PW, None)
        .await
        .expect("user add root");
    // etcd-client's AuthEnable does not add the root role (etcdctl does, below).
    assert_grpc_error(
        auth.auth_enable().await,
        Code::FailedPrecondition,
        msg::ROOT_ROLE_NOT_EXIST,
    );
    // Disabling auth that is off is no error.
    auth.auth_disable().await.expect("disable while disabled");

    // etcdctl's `auth enable` adds role root and grants it to user root on that error.
    let out = cluster.etcdctl(&["auth", "enable"]).await;
    out.assert_success();
    assert_eq!(out.stdout, "Authentication Enabled\n");

    // Anonymous requests to every member are refused.
    for i in 0..3 {
        let mut anon = cluster.client(i).await;
        assert_grpc_error(
            anon.get("k", None).await,
            Code::InvalidArgument,
            msg::USER_EMPTY,
        );
        assert_grpc_error(
            anon.put("k", "v", None).await,
            Code::InvalidArgument,
            msg::USER_EMPTY,
        );
        assert_grpc_error(
            anon.auth_client().auth_disable().await,
            Code::InvalidArgument,
            msg::USER_EMPTY,
        );
        let out = cluster.etcdctl_on(i, &["get", "k"]).await;
        assert!(!out.success());
        assert!(
            out.stderr
                .ends_with("Error: etcdserver: user name is empty\n"),
            "{}",
            out.stderr
        );
    }
    // etcdctl added role root, empty: root's power is the role's name, not permissions.
    let mut root = root_client(&cluster, 1).await;
    let roles = root.auth_client().role_list().await.expect("role list");
    assert_eq!(roles.roles(), ["root"]);
    let user = root.auth_client().user_get("root").await.expect("user get");
    assert_eq!(user.roles(), ["root"]);
    // Enabling again is no error.
    root.auth_client()
        .auth_enable()
        .await
        .expect("enable again");
    root.put("k", "v", None).await.expect("root put");

    let out = cluster.etcdctl(&[&root_flag(), "auth", "disable"]).await;
    out.assert_success();
    assert_eq!(out.stdout, "Authentication Disabled\n");
    for i in 0..3 {
        let mut anon = cluster.client(i).await;
        let got = anon
            .get("k", None)
            .await
            .expect("anonymous get once disabled");
        assert_eq!(got.kvs()[0].value(), b"v");
        // Authenticate is refused again, and the token root held is gone.
        assert_grpc_error(
            anon.auth_client()
                .authenticate("root".into(), ROOT_PW.into())
                .await,
            Code::FailedPrecondition,
            msg::AUTH_NOT_ENABLED,
        );
    }
    // And on again, by etcd-client now that user root has role root.
    let mut anon = cluster.client(2).await;
    anon.auth_client().auth_enable().await.expect("enable");
    assert_grpc_error(
        anon.get("k", None).await,
        Code::InvalidArgument,
        msg::USER_EMPTY,
    );
    let mut root = root_client(&cluster, 0).await;
    assert_eq!(root.get("k", None).await.expect("get").kvs().len(), 1);
}

#[tokio::test]
async fn auth_user_rpcs_and_their_errors() {
    let cluster = Cluster::start(3).await;
    enable_auth(&cluster).await;
    let root = root_client(&cluster, 0).await;
    let mut auth = root.auth_client();

    auth.user_add("alice", "alice-pw", None)
        .await
        .expect("add alice");
    assert_grpc_error(
        auth.user_add("alice", "other", None).await,
        Code::FailedPrecondition,
        msg::USER_ALREADY_EXIST,
    );
    assert_grpc_error(
        auth.user_add("", "pw", None).await,
        Code::InvalidArgument,
        msg::USER_EMPTY,
    );
    let alice = auth.user_get("alice").await.expect("get alice");
    assert!(alice.roles().is_empty());
    assert_grpc_error(
        auth.user_get("nobody").await,
        Code::FailedPrecondition,
        msg::USER_NOT_FOUND,
    );
    let users = auth.user_list().await.expect("user list");
    assert_eq!(users.users(), ["alice", "root"]);

    // Passwords.
    assert_grpc_error(
        auth.user_change_password("nobody", "x").await,
        Code::FailedPrecondition,
        msg::USER_NOT_FOUND,
    );
    auth.user_change_password("alice", "alice-pw2")
        .await
        .expect("passwd");
    let mut rpc = Rpc::connect(&cluster.endpoint(1)).await;
    assert_status(
        rpc.authenticate("alice", "alice-pw").await,
        Code::InvalidArgument,
        msg::AUTH_FAILED,
        "the old password",
    );
    assert_status(
        rpc.authenticate("nobody", "x").await,
        Code::InvalidArgument,
        msg::AUTH_FAILED,
        "no such user",
    );
    rpc.authenticate("alice", "alice-pw2")
        .await
        .expect("new password");

    // Roles of users.
    auth.role_add("reader").await.expect("role add");
    auth.role_add("writer").await.expect("role add");
    assert_grpc_error(
        auth.user_grant_role("alice", "ghost").await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_FOUND,
    );
    assert_grpc_error(
        auth.user_grant_role("nobody", "reader").await,
        Code::FailedPrecondition,
        msg::USER_NOT_FOUND,
    );
    auth.user_grant_role("alice", "writer")
        .await
        .expect("grant");
    auth.user_grant_role("alice", "reader")
        .await
        .expect("grant");
    // Granting a role twice is no error.
    auth.user_grant_role("alice", "reader")
        .await
        .expect("grant again");
    assert_eq!(
        auth.user_get("alice").await.expect("get").roles(),
        ["reader", "writer"]
    );
    assert_grpc_error(
        auth.user_revoke_role("nobody", "reader").await,
        Code::FailedPrecondition,
        msg::USER_NOT_FOUND,
    );
    assert_grpc_error(
        auth.user_revoke_role("alice", "ghost").await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_GRANTED,
    );
    auth.user_revoke_role("alice", "writer")
        .await
        .expect("revoke");
    assert_grpc_error(
        auth.user_revoke_role("alice", "writer").await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_GRANTED,
    );
    assert_eq!(
        auth.user_get("alice").await.expect("get").roles(),
        ["reader"]
    );

    // What root may not do while auth is on.
    assert_grpc_error(
        auth.user_delete("root").await,
        Code::InvalidArgument,
        msg::INVALID_AUTH_MGMT,
    );
    assert_grpc_error(
        auth.user_revoke_role("root", "root").await,
        Code::InvalidArgument,
        msg::INVALID_AUTH_MGMT,
    );
    assert_grpc_error(
        auth.role_delete("root").await,
        Code::InvalidArgument,
        msg::INVALID_AUTH_MGMT,
    );

    // What a user without role root may do: read itself and its own roles, nothing else.
    let mut alice = connect_as(&cluster, 2, "alice", "alice-pw2").await;
    let mut alice_auth = alice.auth_client();
    assert_eq!(
        alice_auth
            .user_get("alice")
            .await
            .expect("own user")
            .roles(),
        ["reader"]
    );
    alice_auth.role_get("reader").await.expect("own role");
    for (what, result) in [
        (
            "user get root",
            alice_auth.user_get("root").await.map(|_| ()),
        ),
        (
            "role get writer",
            alice_auth.role_get("writer").await.map(|_| ()),
        ),
        ("user list", alice_auth.user_list().await.map(|_| ())),
        ("role list", alice_auth.role_list().await.map(|_| ())),
        (
            "user add",
            alice_auth.user_add("eve", "pw", None).await.map(|_| ()),
        ),
        ("role add", alice_auth.role_add("evil").await.map(|_| ())),
        (
            "grant",
            alice_auth
                .user_grant_role("alice", "writer")
                .await
                .map(|_| ()),
        ),
        (
            "passwd self",
            alice_auth
                .user_change_password("alice", "x")
                .await
                .map(|_| ()),
        ),
        ("auth disable", alice_auth.auth_disable().await.map(|_| ())),
        ("auth enable", alice_auth.auth_enable().await.map(|_| ())),
    ] {
        assert_code_message(
            &grpc_status(result),
            Code::PermissionDenied,
            msg::PERMISSION_DENIED,
            &format!("alice: {what}"),
        );
    }

    // Deleting a user ends its logins and its tokens.
    assert_grpc_error(
        auth.user_delete("nobody").await,
        Code::FailedPrecondition,
        msg::USER_NOT_FOUND,
    );
    auth.user_delete("alice").await.expect("delete alice");
    assert_grpc_error(
        alice.get("k", None).await,
        Code::Unauthenticated,
        msg::INVALID_AUTH_TOKEN,
    );
    assert_status(
        rpc.authenticate("alice", "alice-pw2").await,
        Code::InvalidArgument,
        msg::AUTH_FAILED,
        "a deleted user",
    );
    assert_eq!(auth.user_list().await.expect("list").users(), ["root"]);
}

#[tokio::test]
async fn auth_role_rpcs_and_their_errors() {
    let cluster = Cluster::start(3).await;
    enable_auth(&cluster).await;
    let root = root_client(&cluster, 1).await;
    let mut auth = root.auth_client();
    let mut rpc = Rpc::connect(&cluster.endpoint(2)).await;
    let token = rpc.authenticate("root", ROOT_PW).await.expect("root token");
    let mut rpc = rpc.with_token(Some(&token));

    auth.role_add("r").await.expect("role add");
    assert_grpc_error(
        auth.role_add("r").await,
        Code::FailedPrecondition,
        msg::ROLE_ALREADY_EXIST,
    );
    assert_grpc_error(
        auth.role_add("").await,
        Code::InvalidArgument,
        msg::ROLE_EMPTY,
    );
    assert!(role_perms(&mut rpc, "r").await.is_empty());
    assert_grpc_error(
        auth.role_get("ghost").await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_FOUND,
    );
    assert_eq!(auth.role_list().await.expect("list").roles(), ["r", "root"]);

    assert_grpc_error(
        auth.role_grant_permission("ghost", Permission::read("k"))
            .await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_FOUND,
    );
    for perm in [
        Permission::read("k"),
        Permission::read_write("p/").with_prefix(),
        Permission::write("f").with_from_key(),
        Permission::read("a").with_range_end("c"),
    ] {
        auth.role_grant_permission("r", perm).await.expect("grant");
    }
    // Sorted by key; the from-key end is "\0", the prefix end the prefix plus one.
    let expected: Vec<Perm> = vec![
        (0, "a".into(), "c".into()),
        (1, "f".into(), "\0".into()),
        (0, "k".into(), String::new()),
        (2, "p/".into(), "p0".into()),
    ];
    assert_eq!(role_perms(&mut rpc, "r").await, expected);
    // Granting the same key and range again replaces the type.
    auth.role_grant_permission("r", Permission::write("k"))
        .await
        .expect("regrant");
    assert_eq!(
        role_perms(&mut rpc, "r").await[2],
        (1, "k".into(), String::new())
    );

    assert_grpc_error(
        auth.role_revoke_permission("ghost", "k", None).await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_FOUND,
    );
    assert_grpc_error(
        auth.role_revoke_permission("r", "zz", None).await,
        Code::FailedPrecondition,
        msg::PERMISSION_NOT_GRANTED,
    );
    // The range end must match too.
    assert_grpc_error(
        auth.role_revoke_permission("r", "a", None).await,
        Code::FailedPrecondition,
        msg::PERMISSION_NOT_GRANTED,
    );
    auth.role_revoke_permission(
        "r",
        "a",
        Some(RoleRevokePermissionOptions::new().with_range_end("c")),
    )
    .await
    .expect("revoke range");
    auth.role_revoke_permission(
        "r",
        "p/",
        Some(RoleRevokePermissionOptions::new().with_prefix()),
    )
    .await
    .expect("revoke prefix");
    assert_eq!(
        role_perms(&mut rpc, "r").await,
        vec![(1, "f".into(), "\0".into()), (1, "k".into(), String::new())]
    );

    // Deleting a role takes it from its users.
    auth.user_add("u", "u-pw", None).await.expect("user add");
    auth.user_grant_role("u", "r").await.expect("grant");
    assert_grpc_error(
        auth.role_delete("ghost").await,
        Code::FailedPrecondition,
        msg::ROLE_NOT_FOUND,
    );
    auth.role_delete("r").await.expect("role delete");
    assert!(auth.user_get("u").await.expect("get").roles().is_empty());
    assert_eq!(auth.role_list().await.expect("list").roles(), ["root"]);
}

/// etcdctl as root with `args`.
async fn ctl(cluster: &Cluster, args: &[&str]) -> crate::harness::CmdOutput {
    let root = root_flag();
    let mut all = vec![root.as_str()];
    all.extend_from_slice(args);
    cluster.etcdctl(&all).await
}

/// The same through etcdctl, with its exact output.
#[tokio::test]
async fn auth_etcdctl_user_and_role_commands() {
    let cluster = Cluster::start(3).await;
    enable_auth(&cluster).await;
    let root = root_flag();
    let expect_out = |out: crate::harness::CmdOutput, stdout: &str| {
        out.assert_success();
        assert_eq!(out.stdout, stdout);
    };
    expect_out(
        ctl(&cluster, &["user", "add", "bob:bob-pw"]).await,
        "User bob created\n",
    );
    expect_out(
        ctl(&cluster, &["role", "add", "r"]).await,
        "Role r created\n",
    );
    expect_out(
        ctl(
            &cluster,
            &["role", "grant-permission", "r", "readwrite", "k"],
        )
        .await,
        "Role r updated\n",
    );
    expect_out(
        ctl(
            &cluster,
            &["role", "grant-permission", "r", "read", "--prefix", "p/"],
        )
        .await,
        "Role r updated\n",
    );
    expect_out(
        ctl(
            &cluster,
            &["role", "grant-permission", "r", "write", "--from-key", "f"],
        )
        .await,
        "Role r updated\n",
    );
    expect_out(
        ctl(
            &cluster,
            &["role", "grant-permission", "r", "read", "a", "c"],
        )
        .await,
        "Role r updated\n",
    );
    expect_out(
        ctl(&cluster, &["user", "grant-role", "bob", "r"]).await,
        "Role r is granted to user bob\n",
    );
    expect_out(
        ctl(&cluster, &["user", "get", "bob"]).await,
        "User: bob\nRoles: r\n",
    );
    expect_out(
        ctl(&cluster, &["role", "get", "r"]).await,
        "Role r\nKV Read:\n\t[a, c)\n\tk\n\t[p/, p0) (prefix p/)\nKV Write:\n\t[f, <open ended>\n\tk\n",
    );
    expect_out(ctl(&cluster, &["user", "list"]).await, "bob\nroot\n");
    expect_out(ctl(&cluster, &["role", "list"]).await, "r\nroot\n");
    for (args, message) in [
        (
            &["user", "add", "bob:x"][..],
            "Error: etcdserver: user name already exists\n",
        ),
        (
            &["user", "revoke-role", "bob", "nope"][..],
            "Error: etcdserver: role is not granted to the user\n",
        ),
        (
            &["role", "revoke-permission", "r", "zz"][..],
            "Error: etcdserver: permission is not granted to the role\n",
        ),
        (
            &["role", "add", "r"][..],
            "Error: etcdserver: role name already exists\n",
        ),
        (
            &["user", "get", "ghost"][..],
            "Error: etcdserver: user name not found\n",
        ),
        (
            &["role", "get", "ghost"][..],
            "Error: etcdserver: role name not found\n",
        ),
        (
            &["user", "delete", "root"][..],
            "Error: etcdserver: invalid auth management\n",
        ),
    ] {
        let mut all = vec![root.as_str()];
        all.extend_from_slice(args);
        let out = cluster.etcdctl(&all).await;
        assert!(!out.success(), "{args:?} succeeded");
        assert!(out.stderr.ends_with(message), "{args:?}: {}", out.stderr);
    }
    // bob's password works on every member, a wrong one nowhere.
    for i in 0..3 {
        let out = cluster
            .etcdctl_on(i, &["--user=bob:bob-pw", "put", "k", "v"])
            .await;
        out.assert_success();
        assert_eq!(out.stdout, "OK\n");
        let out = cluster
            .etcdctl_on(i, &["--user=bob:wrong", "get", "k"])
            .await;
        assert!(!out.success());
        assert!(
            out.stderr.ends_with(
                "Error: etcdserver: authentication failed, invalid user ID or password\n"
            ),
            "{}",
            out.stderr
        );
    }
    let out = cluster
        .etcdctl_with_stdin(
            &[&root, "user", "passwd", "bob", "--interactive=false"],
            "bob-new\n",
        )
        .await;
    out.assert_success();
    assert_eq!(out.stdout, "Password updated\n");
    cluster
        .etcdctl(&["--user=bob:bob-new", "get", "k"])
        .await
        .assert_success();
    expect_out(
        ctl(
            &cluster,
            &["role", "revoke-permission", "r", "p/", "--prefix"],
        )
        .await,
        "Permission of range [p/, p0) is revoked from role r\n",
    );
    expect_out(
        ctl(&cluster, &["role", "revoke-permission", "r", "k"]).await,
        "Permission of key k is revoked from role r\n",
    );
    expect_out(
        ctl(&cluster, &["user", "revoke-role", "bob", "r"]).await,
        "Role r is revoked from user bob\n",
    );
    expect_out(
        ctl(&cluster, &["role", "delete", "r"]).await,
        "Role r deleted\n",
    );
    expect_out(
        ctl(&cluster, &["user", "delete", "bob"]).await,
        "User bob deleted\n",
    );
}

/// Passwords longer than bcrypt's 72 bytes. etcd 3.4 hashes with Go's bcrypt of its
/// time, which silently uses the first 72 bytes: a 100-byte password is accepted, and
/// any password with the same first 72 bytes logs in. A 1 MiB password is carried
/// through the log (etcd 3.4 hashes at apply) and works the same way.
#[tokio::test]
async fn auth_oversized_passwords() {
    let cluster = Cluster::start(3).await;
    enable_auth(&cluster).await;
    let root = root_client(&cluster, 0).await;
    let mut auth = root.auth_client();
    let long = "a".repeat(100);
    let mut rpc = Rpc::connect(&cluster.endpoint(1)).await;
    let added = auth.user_add("long", long.as_str(), None).await;
    match cluster.target() {
        // etcd 3.4's bcrypt reads the first 72 bytes and ignores the rest: any password
        // with the same first 72 bytes logs in.
        Target::Etcd => {
            added.expect("100-byte password");
            rpc.authenticate("long", &long).await.expect("log in");
            let same_prefix = format!("{}{}", "a".repeat(72), "bbbb");
            rpc.authenticate("long", &same_prefix)
                .await
                .expect("bcrypt reads 72 bytes: the same first 72 bytes log in");
            assert_status(
                rpc.authenticate("long", &"a".repeat(71)).await,
                Code::InvalidArgument,
                msg::AUTH_FAILED,
                "71 of the 72 bytes",
            );
            let huge = "q".repeat(1024 * 1024);
            auth.user_add("huge", huge.as_str(), None)
                .await
                .expect("1 MiB password");
            rpc.authenticate("huge", &huge)
                .await
                .expect("log in with 1 MiB");
        }
        // QuantyKube refuses what bcrypt would cut, with the error of Go's bcrypt since
        // 2024 (what etcd built with it answers), and a long password never logs in.
        Target::Quantykube => {
            assert_code_message(
                &grpc_status(added),
                Code::Unknown,
                "bcrypt: password length exceeds 72 bytes",
                "a 73-byte password",
            );
            let huge = "q".repeat(1024 * 1024);
            let status = grpc_status(auth.user_add("huge", huge.as_str(), None).await);
            assert_eq!(status.code(), Code::Unknown, "{status:?}");
            let exact = "a".repeat(72);
            auth.user_add("long", exact.as_str(), None)
                .await
                .expect("72 bytes are fine");
            rpc.authenticate("long", &exact).await.expect("log in");
            assert_status(
                rpc.authenticate("long", &format!("{exact}b")).await,
                Code::InvalidArgument,
                msg::AUTH_FAILED,
                "the 73rd byte counts",
            );
            assert_status(
                rpc.authenticate("long", &huge).await,
                Code::InvalidArgument,
                msg::AUTH_FAILED,
                "1 MiB",
            );
        }
    }
    // Larger than a request may be: refused before anything else.
    let too_big = "z".repeat(2 * 1024 * 1024);
    let status = grpc_status(auth.user_add("toobig", too_big.as_str(), None).await);
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // The cluster still serves.
    for i in 0..3 {
        let mut c = root_client(&cluster, i).await;
        c.put("after", "ok", None).await.expect("put");
    }
    let password = match cluster.target() {
        Target::Etcd => long,
        Target::Quantykube => "a".repeat(72),
    };
    let _ = try_connect_as(&[cluster.endpoint(0)], "long", &password, None)
        .await
        .expect("etcd-client login");
}

/// A message with the user name's field (tag 1) as raw bytes, for names that are not
/// UTF-8 (the field is a proto3 `string`).
#[derive(Clone, PartialEq, prost::Message)]
struct RawNamePassword {
    #[prost(bytes = "vec", tag = "1")]
    name: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    password: Vec<u8>,
}

/// UserList's answer with the names as bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct RawUserList {
    #[prost(bytes = "vec", repeated, tag = "2")]
    users: Vec<Vec<u8>>,
}

#[tokio::test]
async fn auth_user_name_not_utf8() {
    let cluster = Cluster::start(3).await;
    enable_auth(&cluster).await;
    let mut rpc = Rpc::connect(&cluster.endpoint(0)).await;
    let token = rpc.authenticate("root", ROOT_PW).await.expect("root token");
    let mut rpc = rpc.with_token(Some(&token));
    let name = vec![0xff, 0xfe, b'a'];
    let added: Result<PbAuthUserListResponse, tonic::Status> = rpc
        .call(
            "/etcdserverpb.Auth/UserAdd",
            RawNamePassword {
                name: name.clone(),
                password: b"pw".to_vec(),
            },
        )
        .await;
    let listed: RawUserList = ok(
        rpc.call("/etcdserverpb.Auth/UserList", PbAuthUserListRequest {})
            .await,
        "user list",
    );
    match cluster.target() {
        // Go's gogo-protobuf does not check UTF-8: etcd 3.4 adds the user, and lists
        // its name as the same bytes.
        Target::Etcd => {
            ok(added, "user add with a non-UTF-8 name");
            assert_eq!(listed.users, vec![b"root".to_vec(), name.clone()]);
        }
        // A Rust server's decoder refuses the string: a clean error, nothing added.
        Target::Quantykube => {
            let status = added.expect_err("non-UTF-8 name accepted");
            assert_ne!(status.code(), Code::Ok);
            assert_eq!(listed.users, vec![b"root".to_vec()]);
        }
    }
    // Authenticate with that name: no crash, and a clean answer.
    let mut bare = rpc.with_token(None);
    let login: Result<etcd_client::proto::PbAuthenticateResponse, tonic::Status> = bare
        .call(
            "/etcdserverpb.Auth/Authenticate",
            RawNamePassword {
                name,
                password: b"pw".to_vec(),
            },
        )
        .await;
    if cluster.target() == Target::Quantykube {
        assert!(login.is_err(), "login with a non-UTF-8 name");
    }
    for i in 0..3 {
        let mut c = root_client(&cluster, i).await;
        c.put("still", "serving", None).await.expect("put");
    }
}
