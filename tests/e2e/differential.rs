//! The same request sequence against a fresh one-member etcd and a fresh one-member
//! QuantyKube, compared response by response and field by field (cluster_id,
//! member_id and raft_term aside, which differ by nature). Set `QK_E2E_SHOW` to print
//! every request with etcd's response.

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbPutRequest,
    PbPutResponse, PbRangeRequest, PbRangeResponse, PbResponseHeader, PbTargetUnion,
    PbTxnOpResponse, PbTxnRequest, PbTxnResponse,
};
use tonic::Code;

use crate::harness::*;
use crate::raw::{
    self, compare_result, op_delete, op_put, op_range, op_txn, sort_order, sort_target, RawKv,
};

#[derive(Clone, Debug)]
enum Request {
    Range(PbRangeRequest),
    Put(PbPutRequest),
    Delete(PbDeleteRequest),
    Txn(PbTxnRequest),
    Compact(PbCompactionRequest),
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Range(PbRangeResponse),
    Put(PbPutResponse),
    Delete(PbDeleteResponse),
    Txn(PbTxnResponse),
    Compact(PbCompactionResponse),
    Error(Code, String),
}

fn scrub(header: &mut Option<PbResponseHeader>) {
    if let Some(h) = header {
        h.cluster_id = 0;
        h.member_id = 0;
        h.raft_term = 0;
    }
}

fn scrub_txn(resp: &mut PbTxnResponse) {
    scrub(&mut resp.header);
    for op in &mut resp.responses {
        match &mut op.response {
            Some(PbTxnOpResponse::ResponseRange(r)) => scrub(&mut r.header),
            Some(PbTxnOpResponse::ResponsePut(r)) => scrub(&mut r.header),
            Some(PbTxnOpResponse::ResponseDeleteRange(r)) => scrub(&mut r.header),
            Some(PbTxnOpResponse::ResponseTxn(r)) => scrub_txn(r),
            None => {}
        }
    }
}

async fn run(kv: &mut RawKv, request: Request) -> Outcome {
    fn error(status: tonic::Status) -> Outcome {
        Outcome::Error(status.code(), status.message().to_owned())
    }
    match request {
        Request::Range(r) => kv.range(r).await.map_or_else(error, |mut resp| {
            scrub(&mut resp.header);
            Outcome::Range(resp)
        }),
        Request::Put(r) => kv.put(r).await.map_or_else(error, |mut resp| {
            scrub(&mut resp.header);
            Outcome::Put(resp)
        }),
        Request::Delete(r) => kv.delete_range(r).await.map_or_else(error, |mut resp| {
            scrub(&mut resp.header);
            Outcome::Delete(resp)
        }),
        Request::Txn(r) => kv.txn(r).await.map_or_else(error, |mut resp| {
            scrub_txn(&mut resp);
            Outcome::Txn(resp)
        }),
        Request::Compact(r) => kv.compact(r).await.map_or_else(error, |mut resp| {
            scrub(&mut resp.header);
            Outcome::Compact(resp)
        }),
    }
}

fn range(key: &str) -> PbRangeRequest {
    raw::range(key)
}

fn all_keys() -> PbRangeRequest {
    raw::range_between("\0", "\0")
}

fn put_prev(key: &str, value: &str) -> PbPutRequest {
    let mut p = raw::put(key, value);
    p.prev_kv = true;
    p
}

fn compact(revision: i64, physical: bool) -> Request {
    Request::Compact(PbCompactionRequest { revision, physical })
}

/// ~60 requests: writes, overwrites, deletes, reads with options, txns, compaction,
/// time travel and error cases.
fn sequence() -> Vec<Request> {
    use Request::*;
    let mut s = Vec::new();

    s.push(Range(all_keys())); // empty store at revision 1
    s.push(Put(raw::put("a", "1"))); // 2
    s.push(Put(put_prev("b", "2"))); // 3
    s.push(Put(put_prev("a", "11"))); // 4
    s.push(Put(raw::put("c/1", "x"))); // 5
    s.push(Put(raw::put("c/2", "y"))); // 6
    s.push(Put(raw::put("c/3", "z"))); // 7
    s.push(Range(raw::range_between("c/", "c0")));
    s.push(Range({
        let mut r = all_keys();
        r.limit = 2;
        r
    }));
    s.push(Range({
        let mut r = raw::range_between("b", "\0");
        r.count_only = true;
        r
    }));
    s.push(Range({
        let mut r = raw::range_between("c/", "c0");
        r.keys_only = true;
        r
    }));
    s.push(Range({
        let mut r = all_keys();
        r.sort_target = sort_target::VALUE;
        r.sort_order = sort_order::DESCEND;
        r
    }));
    s.push(Range({
        let mut r = all_keys();
        r.sort_target = sort_target::CREATE;
        r.sort_order = sort_order::NONE;
        r.limit = 2;
        r
    }));
    s.push(Range({
        let mut r = all_keys();
        r.sort_target = sort_target::MOD;
        r.sort_order = sort_order::ASCEND;
        r.limit = 3;
        r
    }));
    s.push(Range({
        let mut r = all_keys();
        r.min_mod_revision = 4;
        r.max_create_revision = 6;
        r
    }));
    s.push(Delete({
        let mut d = raw::delete("c/2");
        d.prev_kv = true;
        d
    })); // 8
    s.push(Delete(raw::delete("missing"))); // no new revision
    s.push(Delete({
        let mut d = raw::delete_between("c/", "c0");
        d.prev_kv = true;
        d
    })); // 9
    s.push(Put(put_prev("c/1", "again"))); // 10
    s.push(Range({
        let mut r = range("c/1");
        r.revision = 5;
        r
    }));
    s.push(Range({
        let mut r = range("c/1");
        r.revision = 9;
        r
    }));
    s.push(Txn(raw::txn(
        vec![raw::compare(
            "a",
            compare_result::EQUAL,
            PbTargetUnion::Version(2),
        )],
        vec![op_put("d", "1"), op_range(range("a"))],
        vec![op_put("d", "0")],
    ))); // 11
    s.push(Txn(raw::txn(
        vec![raw::compare(
            "b",
            compare_result::EQUAL,
            PbTargetUnion::Value(b"nope".to_vec()),
        )],
        vec![op_put("e", "success")],
        vec![
            op_delete({
                let mut d = raw::delete("b");
                d.prev_kv = true;
                d
            }),
            op_put("e", "failure"),
            op_range(all_keys()),
        ],
    ))); // 12
    s.push(Txn(raw::txn(
        vec![raw::compare(
            "d",
            compare_result::GREATER,
            PbTargetUnion::ModRevision(10),
        )],
        vec![
            op_put("f", "outer"),
            op_txn(raw::txn(
                vec![raw::compare(
                    "zzz",
                    compare_result::NOT_EQUAL,
                    PbTargetUnion::Version(0),
                )],
                vec![op_put("g", "inner-success")],
                vec![op_put("g", "inner-failure"), op_range(range("g"))],
            )),
        ],
        vec![],
    ))); // 13
    s.push(Txn(raw::txn(vec![], vec![op_range(range("g"))], vec![]))); // read-only
    s.push(Txn(raw::txn(
        vec![raw::compare(
            "a",
            compare_result::LESS,
            PbTargetUnion::CreateRevision(2),
        )],
        vec![op_put("h", "never")],
        vec![],
    ))); // failed compare, nothing written
    s.push(Put({
        let mut p = put_prev("a", "");
        p.ignore_value = true;
        p
    })); // 14
    s.push(Put({
        let mut p = raw::put("a", "v");
        p.ignore_value = true;
        p
    })); // value is provided
    s.push(Put({
        let mut p = raw::put("nope", "");
        p.ignore_value = true;
        p
    })); // key not found
    s.push(Put({
        let mut p = raw::put("a", "v");
        p.ignore_lease = true;
        p.lease = 1;
        p
    })); // lease is provided
    s.push(Put({
        let mut p = raw::put("a", "v");
        p.lease = 42;
        p
    })); // lease not found
    s.push(Range(range(""))); // key is not provided
    s.push(Delete(raw::delete(""))); // key is not provided
    s.push(Txn(raw::txn(
        vec![],
        vec![op_put("x", "1"), op_put("x", "2")],
        vec![],
    ))); // duplicate key
    s.push(Txn(raw::txn(vec![], vec![raw::op_empty()], vec![]))); // key not found
    s.push(Range({
        let mut r = range("a");
        r.revision = 100;
        r
    })); // future revision
    s.push(Range(all_keys()));
    s.push(compact(5, false));
    s.push(Range({
        let mut r = range("a");
        r.revision = 4;
        r
    })); // compacted
    s.push(Range({
        let mut r = all_keys();
        r.revision = 5;
        r
    }));
    s.push(compact(5, false)); // already compacted
    s.push(compact(1000, false)); // future
    s.push(Put(put_prev("f", "after-compaction"))); // 15
    s.push(Range({
        let mut r = all_keys();
        r.sort_target = sort_target::VERSION;
        r.sort_order = sort_order::NONE;
        r.limit = 1;
        r
    }));
    s.push(Range({
        let mut r = all_keys();
        r.sort_target = sort_target::KEY;
        r.sort_order = sort_order::DESCEND;
        r.limit = 3;
        r
    }));
    s.push(Range({
        let mut r = all_keys();
        r.min_create_revision = 10;
        r.limit = 1;
        r
    }));
    s.push(Txn(raw::txn(
        vec![{
            let mut c = raw::compare("c/", compare_result::GREATER, PbTargetUnion::Version(0));
            c.range_end = b"c0".to_vec();
            c
        }],
        vec![op_delete(raw::delete_between("c/", "c0"))],
        vec![],
    ))); // 16
    s.push(Delete({
        let mut d = raw::delete_between("\0", "\0");
        d.prev_kv = true;
        d
    })); // 17
    s.push(Range(all_keys()));
    s.push(Put(put_prev("a", "final"))); // 18
    s.push(Range(range("a")));
    s.push(Range({
        let mut r = range("a");
        r.revision = 15;
        r
    }));
    s.push(compact(18, true));
    s.push(Range({
        let mut r = all_keys();
        r.serializable = true;
        r
    }));
    s.push(Range({
        let mut r = range("a");
        r.revision = 17;
        r
    })); // compacted
    s
}

#[tokio::test]
async fn same_request_sequence_gives_identical_responses_on_etcd_and_quantykube() {
    if Target::Etcd.binary().is_none() {
        eprintln!("skipped: etcd is not installed (Debian's etcd-server), nothing to compare with");
        return;
    }
    if Target::Quantykube.binary().is_none() {
        eprintln!("skipped: no quantykube binary (set QK_BIN) to compare with etcd");
        return;
    }
    let etcd = ClusterOptions::new(1).target(Target::Etcd).start().await;
    let ours = ClusterOptions::new(1)
        .target(Target::Quantykube)
        .start()
        .await;
    let mut etcd_kv = RawKv::connect(&etcd.endpoint(0)).await;
    let mut our_kv = RawKv::connect(&ours.endpoint(0)).await;

    let requests = sequence();
    assert!(requests.len() >= 50);
    let mut errors = 0;
    for (step, request) in requests.into_iter().enumerate() {
        let expected = run(&mut etcd_kv, request.clone()).await;
        let actual = run(&mut our_kv, request.clone()).await;
        if std::env::var_os("QK_E2E_SHOW").is_some() {
            eprintln!("step {step}: {request:?}\n  => {expected:?}");
        }
        if matches!(expected, Outcome::Error(..)) {
            errors += 1;
        }
        assert_eq!(
            actual, expected,
            "step {step}: responses differ (left: quantykube, right: etcd) for {request:?}"
        );
    }
    assert!(
        errors >= 10,
        "the sequence exercises error cases ({errors})"
    );
}
