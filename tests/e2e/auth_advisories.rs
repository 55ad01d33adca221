//! Auth against etcd's 2026 security advisories and fixes (issue 52, part 3): one test
//! per advisory (here those of KV requests; `auth_advisories_calls` has the Lease,
//! MemberList, Alarm, Watch and NOSPACE ones, with the helpers of this module), each
//! asserting the refused caller (a non-root user, and a caller with
//! no token at all) and the allowed one (root, or the user holding the grant), with
//! etcd's exact codes and messages. docs/security.md lists them.
//!
//! etcd 3.4.23 (`QK_TEST_TARGET=etcd`) predates every one of these fixes, so each test
//! runs on QuantyKube only and returns early against etcd, naming in a comment the etcd
//! releases (and pull requests) that fixed it, whose code the assertions follow.

use etcd_client::proto::{
    PbDeleteRequest, PbLeaseGrantRequest, PbLeaseGrantResponse, PbPutRequest, PbTargetUnion,
    PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp,
};
use etcd_client::{Client, Permission};
use tonic::Code;

use crate::auth_support::{
    assert_denied, assert_status, enable_auth, msg, ok, root_client, Rpc, ROOT_PW,
};
use crate::harness::{Cluster, Target};
use crate::raw::{self, compare_result};

/// The tenant's name and password.
pub(crate) const TENANT: &str = "tenant";
pub(crate) const TENANT_PW: &str = "tenant-pw";

/// etcd's answer to a write while NOSPACE is raised.
pub(crate) const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";

/// The advisories are fixed in etcd releases after 3.4.23: against etcd the tests stop.
pub(crate) fn quantykube_only() -> bool {
    Target::from_env() == Target::Quantykube
}

/// Turns auth on and creates user `tenant` with role `tenant`:
/// - readwrite prefix `t/`;
/// - read (only) `ro`;
/// - write (only) `wo`;
/// - read (only) the single key `one`.
///
/// Root writes `secret/key`, `t/a`, `ro`, `wo`, `one` and `onex` (the key right after
/// `one`). Returns root's client.
pub(crate) async fn tenant_cluster(cluster: &Cluster) -> Client {
    enable_auth(cluster).await;
    let mut root = root_client(cluster, 0).await;
    let mut auth = root.auth_client();
    auth.role_add(TENANT).await.expect("role add");
    for perm in [
        Permission::read_write("t/").with_prefix(),
        Permission::read("ro"),
        Permission::write("wo"),
        Permission::read("one"),
    ] {
        auth.role_grant_permission(TENANT, perm)
            .await
            .expect("grant permission");
    }
    auth.user_add(TENANT, TENANT_PW, None)
        .await
        .expect("user add");
    auth.user_grant_role(TENANT, TENANT)
        .await
        .expect("grant role");
    for (key, value) in [
        ("secret/key", "s0"),
        ("t/a", "a0"),
        ("ro", "ro0"),
        ("wo", "wo0"),
        ("one", "one0"),
        ("onex", "onex0"),
    ] {
        root.put(key, value, None).await.expect("root puts");
    }
    root
}

/// A raw client of member `i` logged in as `name`.
pub(crate) async fn rpc_as(cluster: &Cluster, i: usize, name: &str, password: &str) -> Rpc {
    let rpc = Rpc::connect(&cluster.endpoint(i)).await;
    let token = rpc
        .clone()
        .authenticate(name, password)
        .await
        .unwrap_or_else(|s| panic!("{name} logs in: {s:?}"));
    rpc.with_token(Some(&token))
}

pub(crate) async fn tenant_rpc(cluster: &Cluster, i: usize) -> Rpc {
    rpc_as(cluster, i, TENANT, TENANT_PW).await
}

pub(crate) async fn root_rpc(cluster: &Cluster, i: usize) -> Rpc {
    rpc_as(cluster, i, "root", ROOT_PW).await
}

/// Asserts a raw call was refused for want of a user (etcd's `requireAuthInfo`).
#[track_caller]
pub(crate) fn assert_user_empty<T: std::fmt::Debug>(result: Result<T, tonic::Status>, what: &str) {
    assert_status(result, Code::InvalidArgument, msg::USER_EMPTY, what);
}

/// The value of `key` as root reads it (linearizable).
pub(crate) async fn value(root: &mut Client, key: &str) -> Option<String> {
    root.get(key, None)
        .await
        .expect("root reads")
        .kvs()
        .first()
        .map(|kv| kv.value_str().expect("utf-8").to_owned())
}

fn op_put(put: PbPutRequest) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(PbTxnOpRequest::RequestPut(put)),
    }
}

fn put_with_prev_kv(key: &str, value: &str) -> PbPutRequest {
    PbPutRequest {
        prev_kv: true,
        ..raw::put(key, value)
    }
}

fn put_with_lease(key: &str, value: &str, lease: i64) -> PbPutRequest {
    PbPutRequest {
        lease,
        ..raw::put(key, value)
    }
}

/// A transaction with no compare whose success branch is `ops`.
pub(crate) fn txn_of(ops: Vec<PbTxnRequestOp>) -> PbTxnRequest {
    raw::txn(vec![], ops, vec![])
}

/// A transaction whose compare (`t/a` exists) holds, so that `failure` never runs.
fn txn_never_failing(success: Vec<PbTxnRequestOp>, failure: Vec<PbTxnRequestOp>) -> PbTxnRequest {
    let exists = raw::compare(
        "t/a",
        compare_result::GREATER,
        PbTargetUnion::CreateRevision(0),
    );
    raw::txn(vec![exists], success, failure)
}

/// GHSA-rfx7-8w68-q57q (CVE-2026-33343), "Nested etcd transactions bypass RBAC
/// authorization checks": fixed in etcd 3.6.9, 3.5.28 and 3.4.42 (2026-03-20), whose
/// `checkTxnReqsPermission` (server/etcdserver/apply/auth.go) checks a nested Txn as
/// its parent: every compare and every operation of both branches, at any depth, the
/// branch that will not run included. etcd 3.4.23 has no case for a nested Txn.
#[tokio::test]
async fn advisory_nested_txn_checked_in_both_branches_at_every_depth() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start(3).await;
    let mut root = tenant_cluster(&cluster).await;
    let mut tenant = tenant_rpc(&cluster, 1).await;
    let mut anon = Rpc::connect(&cluster.endpoint(2)).await;

    let nested = |ops: Vec<PbTxnRequestOp>| raw::op_txn(txn_of(ops));
    let refused = [
        (
            "a nested read of secret/key (a read-only txn)",
            txn_of(vec![nested(vec![raw::op_range(raw::range("secret/key"))])]),
        ),
        (
            "a nested put to secret/key in the success branch",
            txn_never_failing(
                vec![nested(vec![raw::op_put("secret/key", "stolen")])],
                vec![],
            ),
        ),
        (
            "a nested put to secret/key in the failure branch, which never runs",
            txn_never_failing(
                vec![raw::op_put("t/b", "b")],
                vec![nested(vec![raw::op_put("secret/key", "stolen")])],
            ),
        ),
        (
            "a delete of secret/key two transactions deep",
            txn_never_failing(
                vec![raw::op_txn(raw::txn(
                    vec![],
                    vec![],
                    vec![nested(vec![raw::op_delete(raw::delete("secret/key"))])],
                ))],
                vec![],
            ),
        ),
        (
            "a nested compare on secret/key",
            txn_of(vec![raw::op_txn(raw::txn(
                vec![raw::compare(
                    "secret/key",
                    compare_result::EQUAL,
                    PbTargetUnion::Value(b"s0".to_vec()),
                )],
                vec![raw::op_put("t/b", "b")],
                vec![],
            ))]),
        ),
        (
            "a nested put to ro (read only)",
            txn_of(vec![nested(vec![raw::op_put("ro", "stolen")])]),
        ),
        (
            "a nested read of wo (write only)",
            txn_of(vec![nested(vec![raw::op_range(raw::range("wo"))])]),
        ),
    ];
    for (what, txn) in refused {
        assert_denied(tenant.txn(txn.clone()).await, what);
        assert_user_empty(anon.txn(txn).await, what);
    }
    assert_eq!(value(&mut root, "secret/key").await.as_deref(), Some("s0"));
    assert_eq!(value(&mut root, "ro").await.as_deref(), Some("ro0"));
    assert_eq!(
        value(&mut root, "t/b").await,
        None,
        "nothing of a refused txn"
    );

    // Nested operations the tenant holds, in both branches and two deep: allowed.
    let allowed = txn_never_failing(
        vec![nested(vec![
            raw::op_put("t/b", "b1"),
            raw::op_txn(raw::txn(
                vec![],
                vec![raw::op_range(raw::range("ro")), raw::op_put("wo", "wo1")],
                vec![],
            )),
        ])],
        vec![nested(vec![raw::op_delete(raw::delete("t/a"))])],
    );
    let resp = ok(tenant.txn(allowed.clone()).await, "tenant's own nested txn");
    assert!(resp.succeeded);
    assert_eq!(value(&mut root, "t/b").await.as_deref(), Some("b1"));
    assert_eq!(value(&mut root, "wo").await.as_deref(), Some("wo1"));
    assert_eq!(value(&mut root, "t/a").await.as_deref(), Some("a0"));
    assert_user_empty(anon.txn(allowed).await, "anonymous nested txn");

    // Root may do what the tenant may not.
    let mut root_raw = root_rpc(&cluster, 2).await;
    let resp = ok(
        root_raw
            .txn(txn_never_failing(
                vec![nested(vec![raw::op_put("secret/key", "s1")])],
                vec![nested(vec![raw::op_delete(raw::delete("secret/key"))])],
            ))
            .await,
        "root's nested txn",
    );
    assert!(resp.succeeded);
    assert_eq!(value(&mut root, "secret/key").await.as_deref(), Some("s1"));
}

/// GHSA-x35m-3gp4-4fh5 (CVE-2026-44283), "RBAC authorization bypass allowing read
/// access via PrevKv ... in Put requests nested in etcd transactions": fixed in etcd
/// 3.6.11, 3.5.30 and 3.4.44 (2026-05-01; pull requests 21681/21682/21683), whose
/// `checkPutAuth` needs read permission over the key for `prev_kv`, in a plain Put and
/// in a transaction's (nested) puts alike; a DeleteRange with `prev_kv` needs it too.
#[tokio::test]
async fn advisory_prev_kv_needs_read_in_plain_and_transaction_puts() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start(1).await;
    let mut root = tenant_cluster(&cluster).await;
    let mut tenant = tenant_rpc(&cluster, 0).await;
    let mut anon = Rpc::connect(&cluster.endpoint(0)).await;

    // `wo` is write only: writing it is allowed, but not being shown what it held.
    let delete_with_prev = PbDeleteRequest {
        prev_kv: true,
        ..raw::delete("wo")
    };
    assert_denied(
        tenant.put(put_with_prev_kv("wo", "leak")).await,
        "put wo with prev_kv",
    );
    assert_denied(
        tenant.delete(delete_with_prev.clone()).await,
        "delete wo with prev_kv",
    );
    let refused = [
        (
            "txn put wo with prev_kv",
            txn_of(vec![op_put(put_with_prev_kv("wo", "leak"))]),
        ),
        (
            "nested txn put wo with prev_kv",
            txn_of(vec![raw::op_txn(txn_of(vec![op_put(put_with_prev_kv(
                "wo", "leak",
            ))]))]),
        ),
        (
            "txn put wo with prev_kv in the branch that never runs",
            txn_never_failing(vec![], vec![op_put(put_with_prev_kv("wo", "leak"))]),
        ),
        (
            "txn delete wo with prev_kv",
            txn_of(vec![raw::op_delete(delete_with_prev.clone())]),
        ),
    ];
    for (what, txn) in refused {
        assert_denied(tenant.txn(txn.clone()).await, what);
        assert_user_empty(anon.txn(txn).await, what);
    }
    assert_user_empty(
        anon.put(put_with_prev_kv("t/a", "x")).await,
        "anonymous put with prev_kv",
    );
    assert_eq!(value(&mut root, "wo").await.as_deref(), Some("wo0"));

    // Without prev_kv the tenant may write wo; with it, a key it may read too.
    ok(tenant.put(raw::put("wo", "wo1")).await, "put wo");
    let put = ok(
        tenant.put(put_with_prev_kv("t/a", "a1")).await,
        "put t/a with prev_kv",
    );
    assert_eq!(put.prev_kv.expect("prev kv").value, b"a0".to_vec());
    let resp = ok(
        tenant
            .txn(txn_of(vec![raw::op_txn(txn_of(vec![op_put(
                put_with_prev_kv("t/a", "a2"),
            )]))]))
            .await,
        "nested put t/a with prev_kv",
    );
    assert!(resp.succeeded);

    // Root may be shown anything.
    let mut root_raw = root_rpc(&cluster, 0).await;
    let put = ok(
        root_raw.put(put_with_prev_kv("wo", "wo2")).await,
        "root puts wo with prev_kv",
    );
    assert_eq!(put.prev_kv.expect("prev kv").value, b"wo1".to_vec());
    ok(
        root_raw
            .txn(txn_of(vec![op_put(put_with_prev_kv("secret/key", "s1"))]))
            .await,
        "root's txn put with prev_kv",
    );
}

/// GHSA-x35m-3gp4-4fh5 (CVE-2026-44283), "... or lease attachment in Put requests
/// nested in etcd transactions": fixed in etcd 3.6.11, 3.5.30 and 3.4.44 (pull requests
/// 21685/21687/21688), whose `checkPutAuth` runs `checkLeasePuts` for a transaction's
/// puts as for a plain Put: attaching a lease needs write permission over every key
/// already on it (else the attacher could revoke them), root excepted.
#[tokio::test]
async fn advisory_attaching_a_lease_needs_write_over_its_keys_in_plain_and_txn_puts() {
    if !quantykube_only() {
        return;
    }
    let cluster = Cluster::start(3).await;
    let mut root = tenant_cluster(&cluster).await;
    let mut tenant = tenant_rpc(&cluster, 1).await;
    let mut anon = Rpc::connect(&cluster.endpoint(2)).await;

    // Root's lease on secret/key, which the tenant may not write.
    let roots = root.lease_grant(600, None).await.expect("grant").id();
    root.put(
        "secret/key",
        "leased",
        Some(etcd_client::PutOptions::new().with_lease(roots)),
    )
    .await
    .expect("put with lease");
    assert_denied(
        tenant.put(put_with_lease("t/x", "x", roots)).await,
        "plain put attaching root's lease",
    );
    let refused = [
        (
            "txn put attaching root's lease",
            txn_of(vec![op_put(put_with_lease("t/x", "x", roots))]),
        ),
        (
            "nested txn put attaching root's lease",
            txn_of(vec![raw::op_txn(txn_of(vec![op_put(put_with_lease(
                "t/x", "x", roots,
            ))]))]),
        ),
        (
            "txn put attaching root's lease in the branch that never runs",
            txn_never_failing(
                vec![raw::op_put("t/y", "y")],
                vec![op_put(put_with_lease("t/x", "x", roots))],
            ),
        ),
    ];
    for (what, txn) in refused {
        assert_denied(tenant.txn(txn.clone()).await, what);
        assert_user_empty(anon.txn(txn).await, what);
    }
    assert_user_empty(
        anon.put(put_with_lease("t/x", "x", roots)).await,
        "anonymous put with a lease",
    );
    assert_eq!(value(&mut root, "t/x").await, None);
    assert_eq!(value(&mut root, "t/y").await, None);
    let ttl = root
        .lease_time_to_live(
            roots,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .expect("time to live");
    assert_eq!(
        ttl.keys(),
        [b"secret/key".to_vec()],
        "root's lease untouched"
    );

    // A lease whose keys the tenant may write (its own; root's on t/z): allowed.
    let mine: PbLeaseGrantResponse = ok(
        tenant
            .call(
                "/etcdserverpb.Lease/LeaseGrant",
                PbLeaseGrantRequest { ttl: 600, id: 0 },
            )
            .await,
        "tenant grants",
    );
    ok(
        tenant.put(put_with_lease("t/m", "m", mine.id)).await,
        "put with own lease",
    );
    let writable = root.lease_grant(600, None).await.expect("grant").id();
    root.put(
        "t/z",
        "z",
        Some(etcd_client::PutOptions::new().with_lease(writable)),
    )
    .await
    .expect("put t/z with lease");
    let resp = ok(
        tenant
            .txn(txn_of(vec![
                op_put(put_with_lease("t/n", "n", mine.id)),
                raw::op_txn(txn_of(vec![op_put(put_with_lease("t/w", "w", writable))])),
            ]))
            .await,
        "txn puts attaching leases over writable keys",
    );
    assert!(resp.succeeded);
    assert_eq!(value(&mut root, "t/w").await.as_deref(), Some("w"));

    // Root attaches any lease, in a transaction too.
    let mut root_raw = root_rpc(&cluster, 1).await;
    ok(
        root_raw
            .txn(txn_of(vec![op_put(put_with_lease("t/r", "r", roots))]))
            .await,
        "root's txn put attaching its lease",
    );
    assert_eq!(value(&mut root, "t/r").await.as_deref(), Some("r"));
}
