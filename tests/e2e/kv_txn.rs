//! KV.Txn: compares on every target with every operator, compares over key ranges,
//! branches, nested txns, `--max-txn-ops` and etcd's duplicate-key rules.

use etcd_client::proto::PbTxnRequest;
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tonic::Code;

use crate::harness::*;
use crate::raw::{self, op_delete, op_put, op_range, op_txn, RawKv};

/// Runs a txn with `compare` and reports whether it succeeded.
async fn holds(client: &mut Client, compare: Compare) -> bool {
    client
        .txn(Txn::new().when([compare]))
        .await
        .expect("txn")
        .succeeded()
}

/// Asserts a table of (compare, expected outcome) rows.
async fn assert_compares(client: &mut Client, rows: Vec<(Compare, bool)>) {
    for (compare, expected) in rows {
        let shown = format!("{compare:?}");
        assert_eq!(holds(client, compare).await, expected, "{shown}");
    }
}

/// Writes `k` twice: create_revision 2, mod_revision 4, version 2, value "m".
/// (`other` is written at revision 3.)
async fn seed_k(client: &mut Client) {
    client.put("k", "a", None).await.unwrap(); // 2
    client.put("other", "x", None).await.unwrap(); // 3
    client.put("k", "m", None).await.unwrap(); // 4
}

#[tokio::test]
async fn txn_compare_on_version_supports_every_operator() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;
    let c = |op, v| Compare::version("k", op, v);
    assert_compares(
        &mut client,
        vec![
            (c(CompareOp::Equal, 2), true),
            (c(CompareOp::Equal, 1), false),
            (c(CompareOp::Greater, 1), true),
            (c(CompareOp::Greater, 2), false),
            (c(CompareOp::Less, 3), true),
            (c(CompareOp::Less, 2), false),
            (c(CompareOp::NotEqual, 1), true),
            (c(CompareOp::NotEqual, 2), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_compare_on_create_revision_supports_every_operator() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;
    let c = |op, v| Compare::create_revision("k", op, v);
    assert_compares(
        &mut client,
        vec![
            (c(CompareOp::Equal, 2), true),
            (c(CompareOp::Equal, 4), false),
            (c(CompareOp::Greater, 1), true),
            (c(CompareOp::Greater, 2), false),
            (c(CompareOp::Less, 3), true),
            (c(CompareOp::Less, 2), false),
            (c(CompareOp::NotEqual, 4), true),
            (c(CompareOp::NotEqual, 2), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_compare_on_mod_revision_supports_every_operator() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;
    let c = |op, v| Compare::mod_revision("k", op, v);
    assert_compares(
        &mut client,
        vec![
            (c(CompareOp::Equal, 4), true),
            (c(CompareOp::Equal, 2), false),
            (c(CompareOp::Greater, 3), true),
            (c(CompareOp::Greater, 4), false),
            (c(CompareOp::Less, 5), true),
            (c(CompareOp::Less, 4), false),
            (c(CompareOp::NotEqual, 2), true),
            (c(CompareOp::NotEqual, 4), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_compare_on_value_compares_bytes_with_every_operator() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;
    let c = |op, v: &str| Compare::value("k", op, v);
    assert_compares(
        &mut client,
        vec![
            (c(CompareOp::Equal, "m"), true),
            (c(CompareOp::Equal, "a"), false),
            (c(CompareOp::Greater, "l"), true),
            (c(CompareOp::Greater, "lzzz"), true),
            (c(CompareOp::Greater, "m"), false),
            (c(CompareOp::Greater, "ma"), false),
            (c(CompareOp::Less, "ma"), true),
            (c(CompareOp::Less, "n"), true),
            (c(CompareOp::Less, "m"), false),
            (c(CompareOp::NotEqual, "a"), true),
            (c(CompareOp::NotEqual, "m"), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_compare_on_lease_supports_every_operator() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;
    // A key written without a lease has lease 0.
    let c = |op, v| Compare::lease("k", op, v);
    assert_compares(
        &mut client,
        vec![
            (c(CompareOp::Equal, 0), true),
            (c(CompareOp::Equal, 7), false),
            (c(CompareOp::Greater, -1), true),
            (c(CompareOp::Greater, 0), false),
            (c(CompareOp::Less, 7), true),
            (c(CompareOp::Less, 0), false),
            (c(CompareOp::NotEqual, 7), true),
            (c(CompareOp::NotEqual, 0), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_compare_on_missing_key_sees_zero_metadata_and_never_matches_a_value() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;
    assert_compares(
        &mut client,
        vec![
            (Compare::version("missing", CompareOp::Equal, 0), true),
            (
                Compare::create_revision("missing", CompareOp::Equal, 0),
                true,
            ),
            (Compare::mod_revision("missing", CompareOp::Equal, 0), true),
            (Compare::lease("missing", CompareOp::Equal, 0), true),
            (Compare::version("missing", CompareOp::Less, 1), true),
            // A value compare against a missing key is false whatever the operator.
            (Compare::value("missing", CompareOp::Equal, ""), false),
            (Compare::value("missing", CompareOp::NotEqual, "x"), false),
            (Compare::value("missing", CompareOp::Less, "zzz"), false),
            (Compare::value("missing", CompareOp::Greater, ""), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_compare_over_a_key_range_requires_every_key_in_it_to_match() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("r/a", "1", None).await.unwrap(); // 2
    client.put("r/b", "1", None).await.unwrap(); // 3
    client.put("r/c", "2", None).await.unwrap(); // 4
    client.put("s", "1", None).await.unwrap(); // 5

    assert_compares(
        &mut client,
        vec![
            (
                Compare::value("r/", CompareOp::Equal, "1").with_prefix(),
                false,
            ),
            (
                Compare::value("r/a", CompareOp::Equal, "1").with_range("r/c"),
                true,
            ),
            (
                Compare::version("r/", CompareOp::Equal, 1).with_prefix(),
                true,
            ),
            (
                Compare::mod_revision("r/", CompareOp::Less, 4).with_prefix(),
                false,
            ),
            (
                Compare::mod_revision("r/", CompareOp::Less, 5).with_prefix(),
                true,
            ),
            (
                Compare::create_revision("r/", CompareOp::Greater, 1).with_prefix(),
                true,
            ),
            // From-key range ("\0" end): every key >= "r/b", including "s".
            (
                Compare::value("r/b", CompareOp::NotEqual, "3").with_range("\0"),
                true,
            ),
            (
                Compare::create_revision("r/b", CompareOp::Less, 5).with_range("\0"),
                false,
            ),
            // An empty range: metadata compares see zero, value compares fail.
            (
                Compare::version("t", CompareOp::Equal, 0).with_prefix(),
                true,
            ),
            (
                Compare::value("t", CompareOp::NotEqual, "x").with_prefix(),
                false,
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn txn_runs_success_ops_when_all_compares_hold_and_failure_ops_otherwise() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;

    let txn = |value: &str| {
        Txn::new()
            .when([
                Compare::version("k", CompareOp::Equal, 2),
                Compare::value("k", CompareOp::Equal, value),
            ])
            .and_then([TxnOp::put("result", "success", None)])
            .or_else([TxnOp::put("result", "failure", None), TxnOp::get("k", None)])
    };

    let resp = client.txn(txn("m")).await.unwrap();
    assert!(resp.succeeded());
    assert_eq!(resp.op_responses().len(), 1);
    assert_eq!(header_rev(resp.header()), 5);
    let got = client.get("result", None).await.unwrap();
    assert_eq!(pairs(&got), vec![("result".into(), "success".into())]);

    let resp = client.txn(txn("not-m")).await.unwrap();
    assert!(!resp.succeeded());
    assert_eq!(header_rev(resp.header()), 6);
    let responses = resp.op_responses();
    assert_eq!(responses.len(), 2);
    match &responses[1] {
        TxnOpResponse::Get(get) => {
            assert_eq!(pairs(get), vec![("k".into(), "m".into())]);
        }
        other => panic!("expected a range response, got {other:?}"),
    }
    let got = client.get("result", None).await.unwrap();
    assert_eq!(pairs(&got), vec![("result".into(), "failure".into())]);
}

#[tokio::test]
async fn txn_with_writes_is_one_revision_and_later_ops_see_earlier_ones() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("d", "old", None).await.unwrap(); // 2

    let resp = client
        .txn(Txn::new().and_then([
            TxnOp::put("a", "1", None),
            TxnOp::put("b", "2", Some(PutOptions::new().with_prev_key())),
            TxnOp::get("a", None),
            TxnOp::delete("d", Some(DeleteOptions::new().with_prev_key())),
            TxnOp::get("", Some(GetOptions::new().with_all_keys())),
        ]))
        .await
        .unwrap();
    assert!(resp.succeeded(), "no compares means success");
    assert_eq!(header_rev(resp.header()), 3);

    let responses = resp.op_responses();
    assert_eq!(responses.len(), 5);
    match &responses[1] {
        TxnOpResponse::Put(put) => assert!(put.prev_key().is_none()),
        other => panic!("expected a put response, got {other:?}"),
    }
    match &responses[2] {
        TxnOpResponse::Get(get) => {
            assert_eq!(pairs(get), vec![("a".into(), "1".into())]);
            assert_eq!(revs(&get.kvs()[0]), (3, 3, 1));
        }
        other => panic!("expected a range response, got {other:?}"),
    }
    match &responses[3] {
        TxnOpResponse::Delete(del) => {
            assert_eq!(del.deleted(), 1);
            assert_eq!(lossy(del.prev_kvs()[0].value()), "old");
        }
        other => panic!("expected a delete response, got {other:?}"),
    }
    match &responses[4] {
        TxnOpResponse::Get(get) => assert_eq!(keys(get), ["a", "b"]),
        other => panic!("expected a range response, got {other:?}"),
    }

    let all = client
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .unwrap();
    assert!(all.kvs().iter().all(|kv| kv.mod_revision() == 3));
    assert_eq!(header_rev(all.header()), 3);
}

#[tokio::test]
async fn read_only_and_empty_txns_do_not_create_a_revision() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    client.put("k", "v", None).await.unwrap(); // 2

    let resp = client
        .txn(Txn::new().and_then([TxnOp::get("k", None)]))
        .await
        .unwrap();
    assert_eq!(header_rev(resp.header()), 2);
    let resp = client.txn(Txn::new()).await.unwrap();
    assert!(resp.succeeded());
    assert_eq!(header_rev(resp.header()), 2);
    // A failed compare with no failure ops writes nothing.
    let resp = client
        .txn(
            Txn::new()
                .when([Compare::version("k", CompareOp::Equal, 9)])
                .and_then([TxnOp::put("k", "w", None)]),
        )
        .await
        .unwrap();
    assert!(!resp.succeeded());
    assert_eq!(header_rev(resp.header()), 2);
    // A delete of a missing key inside a txn writes nothing either.
    let resp = client
        .txn(Txn::new().and_then([TxnOp::delete("missing", None)]))
        .await
        .unwrap();
    assert_eq!(header_rev(resp.header()), 2);
    assert_eq!(current_revision(&mut client).await, 2);
}

#[tokio::test]
async fn nested_txn_evaluates_its_own_compares_and_returns_its_responses() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    seed_k(&mut client).await;

    let inner = Txn::new()
        .when([Compare::value("k", CompareOp::Equal, "not-m")])
        .and_then([TxnOp::put("inner", "success", None)])
        .or_else([TxnOp::put("inner", "failure", None), TxnOp::get("k", None)]);
    let resp = client
        .txn(
            Txn::new()
                .when([Compare::value("k", CompareOp::Equal, "m")])
                .and_then([TxnOp::put("outer", "success", None), TxnOp::txn(inner)]),
        )
        .await
        .unwrap();
    assert!(resp.succeeded());
    assert_eq!(header_rev(resp.header()), 5);
    let responses = resp.op_responses();
    assert_eq!(responses.len(), 2);
    match &responses[1] {
        TxnOpResponse::Txn(nested) => {
            assert!(!nested.succeeded());
            let nested_responses = nested.op_responses();
            assert_eq!(nested_responses.len(), 2);
            match &nested_responses[1] {
                TxnOpResponse::Get(get) => {
                    assert_eq!(pairs(get), vec![("k".into(), "m".into())])
                }
                other => panic!("expected a range response, got {other:?}"),
            }
        }
        other => panic!("expected a txn response, got {other:?}"),
    }
    let got = client
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .unwrap();
    assert_eq!(
        pairs(&got),
        vec![
            ("inner".into(), "failure".into()),
            ("k".into(), "m".into()),
            ("other".into(), "x".into()),
            ("outer".into(), "success".into()),
        ]
    );
    assert!(got
        .kvs()
        .iter()
        .filter(|kv| kv.key() == b"inner" || kv.key() == b"outer")
        .all(|kv| kv.mod_revision() == 5));
}

/// Sends `req` raw and returns `None` on success or the error's (code, message).
async fn txn_error(kv: &mut RawKv, req: PbTxnRequest) -> Option<(Code, String)> {
    match kv.txn(req).await {
        Ok(_) => None,
        Err(status) => Some((status.code(), status.message().to_owned())),
    }
}

fn too_many_ops() -> Option<(Code, String)> {
    Some((
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request".to_owned(),
    ))
}

fn duplicate_key() -> Option<(Code, String)> {
    Some((
        Code::InvalidArgument,
        "etcdserver: duplicate key given in txn request".to_owned(),
    ))
}

fn puts(prefix: &str, n: usize) -> Vec<etcd_client::proto::PbTxnRequestOp> {
    (0..n)
        .map(|i| op_put(&format!("{prefix}{i}"), "v"))
        .collect()
}

#[tokio::test]
async fn txn_over_max_txn_ops_fails_too_many_operations() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-txn-ops", "4"])
        .start()
        .await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    let compares = |n: usize| -> Vec<_> {
        (0..n)
            .map(|i| {
                raw::compare(
                    &format!("c{i}"),
                    raw::compare_result::EQUAL,
                    etcd_client::proto::PbTargetUnion::Version(0),
                )
            })
            .collect()
    };

    // The limit applies to compares, success ops and failure ops, each on its own.
    assert_eq!(
        txn_error(&mut kv, raw::txn(vec![], puts("s", 4), vec![])).await,
        None
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(compares(4), puts("s", 4), puts("f", 4))).await,
        None
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(vec![], puts("s", 5), vec![])).await,
        too_many_ops()
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(vec![], vec![], puts("f", 5))).await,
        too_many_ops()
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(compares(5), vec![], vec![])).await,
        too_many_ops()
    );

    // A nested txn may use only what the outer txn leaves: max - max(outer lengths).
    let nested = |n| op_txn(raw::txn(vec![], puts("n", n), vec![]));
    assert_eq!(
        txn_error(
            &mut kv,
            raw::txn(vec![], vec![op_put("o", "v"), nested(2)], vec![])
        )
        .await,
        None
    );
    assert_eq!(
        txn_error(
            &mut kv,
            raw::txn(vec![], vec![op_put("o", "v"), nested(3)], vec![])
        )
        .await,
        too_many_ops()
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(compares(3), vec![nested(2)], vec![])).await,
        too_many_ops()
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(compares(3), vec![nested(1)], vec![])).await,
        None
    );
}

#[tokio::test]
async fn txn_default_max_txn_ops_is_128() {
    let cluster = Cluster::start(1).await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;

    assert_eq!(
        txn_error(&mut kv, raw::txn(vec![], puts("s", 128), vec![])).await,
        None
    );
    assert_eq!(
        txn_error(&mut kv, raw::txn(vec![], puts("s", 129), vec![])).await,
        too_many_ops()
    );
}

#[tokio::test]
async fn txn_rejects_a_key_written_twice_in_one_branch() {
    let cluster = Cluster::start(1).await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    let del = |k: &str| op_delete(raw::delete(k));
    let del_range = |k: &str, end: &str| op_delete(raw::delete_between(k, end));

    let cases = vec![
        (
            "put, put",
            vec![op_put("k", "1"), op_put("k", "2")],
            duplicate_key(),
        ),
        (
            "put, delete",
            vec![op_put("k", "1"), del("k")],
            duplicate_key(),
        ),
        (
            "delete, put",
            vec![del("k"), op_put("k", "1")],
            duplicate_key(),
        ),
        (
            "delete range covering a put",
            vec![del_range("j", "l"), op_put("k", "1")],
            duplicate_key(),
        ),
        ("delete, delete", vec![del("k"), del("k")], None),
        (
            "overlapping delete ranges",
            vec![del_range("a", "m"), del_range("k", "z")],
            None,
        ),
        (
            "put next to a delete range that ends before it",
            vec![del_range("a", "k"), op_put("k", "1")],
            None,
        ),
        (
            "put, range of the same key",
            vec![op_put("k", "1"), op_range(raw::range("k"))],
            None,
        ),
        // etcd checks delete ranges as [key, range_end) literally, so a from-key delete
        // (range_end "\0") overlaps no put.
        (
            "from-key delete and a put after it",
            vec![del_range("j", "\0"), op_put("k", "1")],
            None,
        ),
    ];
    for (name, ops, expected) in cases {
        let before = kv
            .range(raw::range("x"))
            .await
            .unwrap()
            .header
            .unwrap()
            .revision;
        let error = txn_error(&mut kv, raw::txn(vec![], ops.clone(), vec![])).await;
        assert_eq!(error, expected, "success branch: {name}");
        let error = txn_error(&mut kv, raw::txn(vec![], vec![], ops)).await;
        assert_eq!(error, expected, "failure branch: {name}");
        if expected.is_some() {
            let after = kv
                .range(raw::range("x"))
                .await
                .unwrap()
                .header
                .unwrap()
                .revision;
            assert_eq!(after, before, "a rejected txn writes nothing: {name}");
        }
    }
}

#[tokio::test]
async fn txn_allows_the_same_key_in_the_success_and_failure_branches() {
    let cluster = Cluster::start(1).await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;

    let resp = kv
        .txn(raw::txn(
            vec![],
            vec![op_put("k", "success")],
            vec![op_put("k", "failure"), op_delete(raw::delete("k"))],
        ))
        .await;
    // The failure branch alone (put + delete of k) is a duplicate.
    let status = resp.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    let resp = kv
        .txn(raw::txn(
            vec![],
            vec![op_put("k", "success")],
            vec![op_put("k", "failure")],
        ))
        .await
        .unwrap();
    assert!(resp.succeeded);
    let got = kv.range(raw::range("k")).await.unwrap();
    assert_eq!(got.kvs[0].value, b"success");

    let resp = kv
        .txn(raw::txn(
            vec![],
            vec![op_delete(raw::delete("k"))],
            vec![op_put("k", "failure")],
        ))
        .await
        .unwrap();
    assert!(resp.succeeded);
    assert!(kv.range(raw::range("k")).await.unwrap().kvs.is_empty());
}

#[tokio::test]
async fn txn_duplicate_check_spans_nested_txns_as_etcd_does() {
    let cluster = Cluster::start(1).await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    let del = |k: &str| op_delete(raw::delete(k));
    let nested = |success, failure| op_txn(raw::txn(vec![], success, failure));

    let cases = vec![
        (
            "outer put and nested put",
            vec![op_put("k", "1"), nested(vec![op_put("k", "2")], vec![])],
            duplicate_key(),
        ),
        (
            "nested put then outer put",
            vec![nested(vec![op_put("k", "2")], vec![]), op_put("k", "1")],
            duplicate_key(),
        ),
        (
            "outer delete and nested put",
            vec![del("k"), nested(vec![op_put("k", "2")], vec![])],
            duplicate_key(),
        ),
        (
            "nested delete and outer put",
            vec![nested(vec![del("k")], vec![]), op_put("k", "2")],
            duplicate_key(),
        ),
        (
            "two nested txns putting the same key",
            vec![
                nested(vec![op_put("k", "1")], vec![]),
                nested(vec![op_put("k", "2")], vec![]),
            ],
            duplicate_key(),
        ),
        (
            "nested success put and another nested failure put",
            vec![
                nested(vec![op_put("k", "1")], vec![]),
                nested(vec![], vec![op_put("k", "2")]),
            ],
            duplicate_key(),
        ),
        (
            "nested delete, then a later nested put",
            vec![
                nested(vec![del("k")], vec![]),
                nested(vec![op_put("k", "2")], vec![]),
            ],
            duplicate_key(),
        ),
        // etcd checks a nested txn's puts only against deletes seen before it, so a
        // put in an earlier nested txn and a delete in a later one pass.
        (
            "nested put, then a later nested delete",
            vec![
                nested(vec![op_put("k", "2")], vec![]),
                nested(vec![del("k")], vec![]),
            ],
            None,
        ),
        (
            "one nested txn putting the key in both branches",
            vec![nested(vec![op_put("k", "1")], vec![op_put("k", "2")])],
            None,
        ),
        (
            "one nested txn deleting in success and putting in failure",
            vec![nested(vec![del("k")], vec![op_put("k", "2")])],
            None,
        ),
        (
            "nested txn with both branches putting, then another nested put",
            vec![
                nested(vec![op_put("k", "1")], vec![op_put("k", "1")]),
                nested(vec![], vec![op_put("k", "2")]),
            ],
            duplicate_key(),
        ),
        (
            "deeper nesting",
            vec![
                op_put("k", "1"),
                nested(vec![nested(vec![op_put("k", "2")], vec![])], vec![]),
            ],
            duplicate_key(),
        ),
        (
            "nested txns putting different keys",
            vec![
                nested(vec![op_put("k1", "1")], vec![]),
                nested(vec![op_put("k2", "2")], vec![]),
                op_put("k3", "3"),
            ],
            None,
        ),
    ];
    for (name, ops, expected) in cases {
        let error = txn_error(&mut kv, raw::txn(vec![], ops, vec![])).await;
        assert_eq!(error, expected, "{name}");
    }
}

#[tokio::test]
async fn txn_with_an_empty_request_op_fails_key_not_found() {
    let cluster = Cluster::start(1).await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;

    let error = txn_error(&mut kv, raw::txn(vec![], vec![raw::op_empty()], vec![])).await;
    assert_eq!(
        error,
        Some((
            Code::InvalidArgument,
            "etcdserver: key not found".to_owned()
        ))
    );
}

#[tokio::test]
async fn txn_with_an_empty_key_anywhere_fails_key_is_not_provided() {
    let cluster = Cluster::start(1).await;
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    let expected = Some((
        Code::InvalidArgument,
        "etcdserver: key is not provided".to_owned(),
    ));
    let empty_compare = raw::compare(
        "",
        raw::compare_result::EQUAL,
        etcd_client::proto::PbTargetUnion::Version(0),
    );

    for (name, req) in [
        ("compare", raw::txn(vec![empty_compare], vec![], vec![])),
        ("put", raw::txn(vec![], vec![op_put("", "v")], vec![])),
        (
            "range in failure",
            raw::txn(vec![], vec![], vec![op_range(raw::range(""))]),
        ),
        (
            "delete in nested txn",
            raw::txn(
                vec![],
                vec![op_txn(raw::txn(
                    vec![],
                    vec![op_delete(raw::delete(""))],
                    vec![],
                ))],
                vec![],
            ),
        ),
    ] {
        assert_eq!(txn_error(&mut kv, req).await, expected, "{name}");
    }
}
