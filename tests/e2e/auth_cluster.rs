//! Auth (issue 17) across members and time, with simple tokens (etcd's default
//! `--auth-token simple`): a token from one member used on the others, permissions
//! revoked while a token is held, `--auth-token-ttl`, malformed tokens, and the auth
//! state kept through a restart of every member and through `etcdctl snapshot save` /
//! `snapshot restore`.
//!
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`).

use std::path::Path;
use std::time::{Duration, Instant};

use tonic::Code;

use etcd_client::Permission;

use crate::auth_support::{
    assert_denied, assert_status, enable_auth, msg, ok, root_client, root_flag, wait_ready_as_root,
    Junk, Rpc,
};
use crate::harness::{Cluster, ClusterOptions, MemberSpec, Target};
use crate::raw;

/// Auth on, and user `alice` (password `alice-pw`) with role `a` (readwrite prefix
/// `a/`, read `shared`).
pub(crate) async fn alice(cluster: &Cluster) {
    enable_auth(cluster).await;
    let root = root_client(cluster, 0).await;
    let mut auth = root.auth_client();
    auth.role_add("a").await.expect("role add");
    auth.role_grant_permission("a", Permission::read_write("a/").with_prefix())
        .await
        .expect("grant");
    auth.role_grant_permission("a", Permission::read("shared"))
        .await
        .expect("grant");
    auth.user_add("alice", "alice-pw", None)
        .await
        .expect("user add");
    auth.user_grant_role("alice", "a")
        .await
        .expect("grant role");
    // A fresh login: with JWTs, a token issued before the auth changes above is stale
    // for KV requests (the Auth RPCs above do not check the token's revision).
    let mut root = root_client(cluster, 0).await;
    root.put("shared", "s", None).await.expect("put");
    root.put("b", "b", None).await.expect("put");
}

/// A simple token: 16 ASCII letters, a dot, the raft index of the Authenticate entry.
fn assert_simple_token(token: &str) {
    let (prefix, index) = token.split_once('.').expect("simple token has a dot");
    assert_eq!(prefix.len(), 16, "simple token prefix length");
    assert!(prefix.bytes().all(|b| b.is_ascii_alphabetic()));
    let index: u64 = index.parse().expect("simple token index is a number");
    assert!(index > 0);
}

#[tokio::test]
async fn auth_simple_token_from_one_member_serves_on_all_and_sees_revocations() {
    let cluster = Cluster::start(3).await;
    alice(&cluster).await;
    let token = Rpc::connect(&cluster.endpoint(0))
        .await
        .authenticate("alice", "alice-pw")
        .await
        .expect("log in on member 0");
    assert_simple_token(&token);
    let mut on: Vec<Rpc> = Vec::new();
    for i in 0..3 {
        on.push(
            Rpc::connect(&cluster.endpoint(i))
                .await
                .with_token(Some(&token)),
        );
    }
    for (i, rpc) in on.iter_mut().enumerate() {
        ok(rpc.put(raw::put(&format!("a/{i}"), "x")).await, "put a/i");
        let got = ok(rpc.range(raw::range_between("a/", "a0")).await, "range a/");
        assert_eq!(got.kvs.len(), i + 1);
        assert_denied(rpc.range(raw::range("b")).await, "range b");
        ok(rpc.range(raw::range("shared")).await, "range shared");
    }

    // Revoked through member 0; the next request on member 2 is denied (no stale
    // permission), and the token itself stays valid for what remains.
    let root = root_client(&cluster, 0).await;
    root.auth_client()
        .role_revoke_permission(
            "a",
            "a/",
            Some(etcd_client::RoleRevokePermissionOptions::new().with_prefix()),
        )
        .await
        .expect("revoke");
    for rpc in on.iter_mut() {
        assert_denied(rpc.put(raw::put("a/late", "x")).await, "put after revoke");
        assert_denied(rpc.range(raw::range("a/0")).await, "range after revoke");
        ok(
            rpc.range(raw::range("shared")).await,
            "range shared after revoke",
        );
    }
    // Granted again: allowed again with the same token.
    root.auth_client()
        .role_grant_permission("a", Permission::read_write("a/").with_prefix())
        .await
        .expect("grant");
    ok(
        on[1].put(raw::put("a/again", "x")).await,
        "put after regrant",
    );
    // The role taken from the user.
    root.auth_client()
        .user_revoke_role("alice", "a")
        .await
        .expect("revoke role");
    assert_denied(
        on[2].range(raw::range("shared")).await,
        "range without role",
    );

    // A password change ends the user's tokens on every member.
    root.auth_client()
        .user_grant_role("alice", "a")
        .await
        .expect("grant role");
    ok(
        on[0].range(raw::range("shared")).await,
        "range with role again",
    );
    root.auth_client()
        .user_change_password("alice", "alice-pw2")
        .await
        .expect("passwd");
    for rpc in on.iter_mut() {
        assert_status(
            rpc.range(raw::range("shared")).await,
            Code::Unauthenticated,
            msg::INVALID_AUTH_TOKEN,
            "token after a password change",
        );
    }
}

#[tokio::test]
async fn auth_simple_token_ttl() {
    let cluster = ClusterOptions::new(3)
        .arg("--auth-token-ttl=2")
        .start()
        .await;
    alice(&cluster).await;
    let mut rpc0 = Rpc::connect(&cluster.endpoint(0)).await;
    let idle = rpc0
        .authenticate("alice", "alice-pw")
        .await
        .expect("log in");
    let busy = rpc0
        .authenticate("alice", "alice-pw")
        .await
        .expect("log in");
    let mut idle0 = rpc0.with_token(Some(&idle));
    let mut busy0 = rpc0.with_token(Some(&busy));
    ok(idle0.range(raw::range("shared")).await, "fresh token");
    // Used every 700 ms on member 0 for 5 s: stays valid there.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        ok(busy0.range(raw::range("shared")).await, "token in use");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    // Idle for 5 s (more than the TTL and the 1 s sweep): gone.
    assert_status(
        idle0.range(raw::range("shared")).await,
        Code::Unauthenticated,
        msg::INVALID_AUTH_TOKEN,
        "idle token",
    );
    ok(
        busy0.put(raw::put("a/busy", "x")).await,
        "busy token still valid",
    );
    if cluster.target() == Target::Etcd {
        // etcd 3.4 keeps each token's TTL on each member: using it on member 0 does not
        // keep it alive on member 1, where it was idle too.
        let mut busy1 = Rpc::connect(&cluster.endpoint(1))
            .await
            .with_token(Some(&busy));
        assert_status(
            busy1.range(raw::range("shared")).await,
            Code::Unauthenticated,
            msg::INVALID_AUTH_TOKEN,
            "token idle on member 1",
        );
    }
    // A new login works.
    let fresh = rpc0
        .authenticate("alice", "alice-pw")
        .await
        .expect("log in");
    ok(
        rpc0.with_token(Some(&fresh))
            .range(raw::range("shared"))
            .await,
        "new token",
    );
}

#[tokio::test]
async fn auth_malformed_tokens() {
    let cluster = Cluster::start(3).await;
    let mut junk = Junk::new(0x5eed);
    let base = Rpc::connect(&cluster.endpoint(0)).await;
    // etcd 3.4 checks a token whenever one is sent, also with auth off.
    assert_status(
        base.with_token(Some("garbage"))
            .range(raw::range("k"))
            .await,
        Code::Unauthenticated,
        msg::INVALID_AUTH_TOKEN,
        "a token while auth is off",
    );
    alice(&cluster).await;
    let tokens = vec![
        junk.printable(32),
        String::new(),
        junk.printable(4096),
        "abc.def".to_owned(),
        "a.b.c".to_owned(),
        "ABCDEFGHIJKLMNOP.1".to_owned(),
        // Not "<prefix>.-1" or "<prefix>.<huge index>": etcd 3.4 waits for that raft
        // index to be applied, so the request hangs until its deadline.
    ];
    for i in 0..3 {
        let base = Rpc::connect(&cluster.endpoint(i)).await;
        for token in &tokens {
            let mut rpc = base.with_token(Some(token));
            let what = format!("token of {} bytes on member {i}", token.len());
            assert_status(
                rpc.range(raw::range("shared")).await,
                Code::Unauthenticated,
                msg::INVALID_AUTH_TOKEN,
                &what,
            );
            assert_status(
                rpc.put(raw::put("a/x", "x")).await,
                Code::Unauthenticated,
                msg::INVALID_AUTH_TOKEN,
                &what,
            );
        }
    }
    // Still healthy: every member serves root and alice.
    for i in 0..3 {
        let mut root = root_client(&cluster, i).await;
        root.put("after", "junk", None).await.expect("root put");
        let token = Rpc::connect(&cluster.endpoint(i))
            .await
            .authenticate("alice", "alice-pw")
            .await
            .expect("alice logs in");
        ok(
            Rpc::connect(&cluster.endpoint(i))
                .await
                .with_token(Some(&token))
                .range(raw::range("shared"))
                .await,
            "alice reads",
        );
    }
}

/// What must hold of `cluster` after a restart or a restore of [`alice`]'s setup.
async fn assert_auth_state(cluster: &Cluster) {
    for i in 0..cluster.size() {
        let mut anon = cluster.client(i).await;
        crate::harness::assert_grpc_error(
            anon.get("shared", None).await,
            Code::InvalidArgument,
            msg::USER_EMPTY,
        );
        let root = root_client(cluster, i).await;
        let mut auth = root.auth_client();
        assert_eq!(
            auth.user_list().await.expect("users").users(),
            ["alice", "root"]
        );
        assert_eq!(
            auth.role_list().await.expect("roles").roles(),
            ["a", "root"]
        );
        assert_eq!(auth.user_get("alice").await.expect("alice").roles(), ["a"]);
        let mut alice = Rpc::connect(&cluster.endpoint(i)).await;
        let token = alice
            .authenticate("alice", "alice-pw")
            .await
            .expect("alice logs in");
        let mut alice = alice.with_token(Some(&token));
        ok(alice.put(raw::put("a/restored", "x")).await, "alice puts");
        assert_denied(alice.range(raw::range("b")).await, "alice reads b");
        assert_denied(
            alice.put(raw::put("shared", "x")).await,
            "alice writes shared",
        );
        let got = ok(
            alice.range(raw::range("shared")).await,
            "alice reads shared",
        );
        assert_eq!(got.kvs[0].value, b"s");
    }
}

#[tokio::test]
async fn auth_state_survives_a_restart_of_every_member() {
    let mut cluster = Cluster::start(3).await;
    alice(&cluster).await;
    let old = Rpc::connect(&cluster.endpoint(0))
        .await
        .authenticate("alice", "alice-pw")
        .await
        .expect("log in");
    for i in 0..3 {
        cluster.kill9(i);
    }
    for i in 0..3 {
        cluster.start_member(i);
    }
    for i in 0..3 {
        wait_ready_as_root(&mut cluster, i).await;
    }
    assert_auth_state(&cluster).await;
    // etcd 3.4 replays the Authenticate entry from its WAL on restart, which gives the
    // simple token back: a token from before the restart still works. (QuantyKube need
    // not: a server that keeps tokens in memory only may drop them on restart.)
    if cluster.target() == Target::Etcd {
        let mut rpc = Rpc::connect(&cluster.endpoint(0))
            .await
            .with_token(Some(&old));
        ok(
            rpc.range(raw::range("shared")).await,
            "old simple token after restart",
        );
    }
}

/// The target's restore of `file` into member `spec`'s data dir: etcdctl's for etcd,
/// `quantykube snapshot restore` (etcdctl's flags) for QuantyKube.
fn restore(target: Target, file: &Path, spec: &MemberSpec) {
    crate::harness::run(crate::harness::restore_command(target, file, spec));
}

#[tokio::test]
async fn auth_state_survives_snapshot_save_and_restore() {
    let cluster = Cluster::start(3).await;
    alice(&cluster).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("auth.db");
    let file_arg = file.to_string_lossy().into_owned();
    // Snapshot is root's.
    let out = cluster
        .etcdctl_on(0, &["--user=alice:alice-pw", "snapshot", "save", &file_arg])
        .await;
    assert!(!out.success(), "alice saved a snapshot");
    assert!(
        out.stderr.contains("auth: permission denied"),
        "{}",
        out.stderr
    );
    cluster
        .etcdctl_on(0, &[&root_flag(), "snapshot", "save", &file_arg])
        .await
        .assert_success();
    let target = cluster.target();
    drop(cluster);

    // The restored members start with auth on, so the harness's anonymous probe cannot
    // tell they are ready; root's can.
    let restored_file = file.clone();
    let mut restored = ClusterOptions::new(3)
        .ready(&[])
        .prepare(move |spec| restore(target, &restored_file, spec))
        .start()
        .await;
    for i in 0..3 {
        wait_ready_as_root(&mut restored, i).await;
    }
    assert_auth_state(&restored).await;
}
