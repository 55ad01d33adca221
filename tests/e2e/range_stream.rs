//! KV.RangeStream (etcd 3.7): a range as a stream of chunks with disjoint `kvs` in key
//! order and `header`, `more` and `count` on the last one only; Range's options but
//! sort orders and revision filters (Unimplemented); read index, auth and learners as
//! etcd 3.7 has them; one snapshot for the whole stream; memory bounded by the chunk
//! size while a client reads slowly.
//!
//! etcd 3.4 has no RangeStream: against it (`QK_TEST_TARGET=etcd`) every test checks
//! that etcd 3.4 answers `Unimplemented` and stops there. The etcd 3.7 semantics
//! (etcd's `server/etcdserver/v3_server.go` rangeStream and `api/v3rpc/key.go`
//! checkRangeStreamRequest, read at v3.7.1) are checked on QuantyKube only, mostly by
//! comparing the merged chunks with a plain Range of the same store.

use std::time::{Duration, Instant};

use etcd_client::proto::{
    PbCompactionRequest, PbPutRequest, PbRangeRequest, PbRangeResponse, PbRangeStreamResponse,
    PbTxnRequest,
};
use etcd_client::{GetOptions, Permission};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::Code;

use crate::auth_support::{connect_as, enable_auth, msg, ROOT_PW};
use crate::harness::*;
use crate::prometheus_text::parse;
use crate::raw::{self, op_put, sort_order, sort_target, RawKv};
use crate::support::status::{assert_code_message, assert_status};

const RANGE_STREAM: &str = "/etcdserverpb.KV/RangeStream";
/// A chunk budget small enough that a few megabytes make hundreds of chunks.
const SMALL_BUDGET: &str = "16384";

/// A raw RangeStream client: every field of the request, every chunk as sent.
struct RawStream {
    grpc: tonic::client::Grpc<Channel>,
}

impl RawStream {
    async fn connect(endpoint: &str) -> RawStream {
        RawStream {
            grpc: tonic::client::Grpc::new(raw::channel(endpoint).await),
        }
    }

    /// Opens a stream; the call's own status (a refusal) comes back as the error.
    async fn open(
        &mut self,
        req: PbRangeRequest,
    ) -> Result<tonic::Streaming<PbRangeStreamResponse>, tonic::Status> {
        self.grpc
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<PbRangeRequest, PbRangeStreamResponse>::default();
        let streaming = self
            .grpc
            .server_streaming(
                tonic::Request::new(req),
                PathAndQuery::from_static(RANGE_STREAM),
                codec,
            )
            .await?;
        Ok(streaming.into_inner())
    }

    /// Every chunk of one stream.
    async fn chunks(&mut self, req: PbRangeRequest) -> Result<Vec<PbRangeResponse>, tonic::Status> {
        let mut stream = self.open(req).await?;
        let mut chunks = Vec::new();
        while let Some(message) = stream.message().await? {
            chunks.push(
                message
                    .range_response
                    .expect("range_response in every message"),
            );
        }
        Ok(chunks)
    }
}

/// The chunks merged as etcd's proto.Merge merges them: kvs in order, the rest from
/// the last chunk.
fn merged(chunks: &[PbRangeResponse]) -> PbRangeResponse {
    let last = chunks.last().expect("at least one chunk");
    PbRangeResponse {
        header: last.header,
        kvs: chunks.iter().flat_map(|c| c.kvs.clone()).collect(),
        more: last.more,
        count: last.count,
    }
}

/// etcd 3.7's shape: earlier chunks carry kvs only, and keys ascend across chunks.
fn assert_well_formed(chunks: &[PbRangeResponse], what: &str) {
    let (last, rest) = chunks.split_last().expect("at least one chunk");
    for chunk in rest {
        assert!(
            chunk.header.is_none() && !chunk.more && chunk.count == 0,
            "{what}: header, more and count only on the last chunk"
        );
        assert!(
            !chunk.kvs.is_empty(),
            "{what}: an empty chunk before the last"
        );
    }
    assert!(last.header.is_some(), "{what}: the last chunk's header");
    let keys: Vec<&[u8]> = chunks
        .iter()
        .flat_map(|c| &c.kvs)
        .map(|kv| kv.key.as_slice())
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "{what}: chunks disjoint and in key order"
    );
}

fn key(i: usize) -> String {
    format!("rs/{i:05}")
}

fn bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// `n` keys under `rs/` with values of 1 to 300 bytes, 40 per transaction (under the
/// small `--max-request-bytes`), and a few later changes, so that past revisions
/// differ from the current one.
async fn load(kv: &mut RawKv, n: usize) {
    for batch in (0..n).collect::<Vec<_>>().chunks(40) {
        let ops = batch
            .iter()
            .map(|i| op_put(&key(*i), &"v".repeat(i * 37 % 300 + 1)))
            .collect();
        kv.txn(PbTxnRequest {
            compare: vec![],
            success: ops,
            failure: vec![],
        })
        .await
        .expect("load txn");
    }
    for i in (0..n).step_by(97) {
        kv.put(raw::put(&key(i), "changed")).await.expect("put");
    }
    kv.delete_range(raw::delete(&key(5))).await.expect("delete");
}

/// etcd 3.4 has no RangeStream: the method is unknown to its gRPC server.
async fn assert_etcd_34_lacks_range_stream(cluster: &Cluster) {
    let mut stream = RawStream::connect(&cluster.endpoint(0)).await;
    let answer = stream.chunks(raw::range("k")).await;
    let status = answer.expect_err("etcd 3.4 serves no RangeStream");
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
}

fn is_etcd(cluster: &Cluster) -> bool {
    cluster.target() == Target::Etcd
}

#[tokio::test]
async fn chunks_merge_into_the_plain_range_for_every_allowed_option() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-request-bytes", SMALL_BUDGET])
        .start()
        .await;
    if is_etcd(&cluster) {
        return assert_etcd_34_lacks_range_stream(&cluster).await;
    }
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    load(&mut kv, 3000).await;
    let now = kv.range(raw::range("rs/00000")).await.unwrap();
    let current = now.header.as_ref().unwrap().revision;
    let past = current - 20;
    let mut stream = RawStream::connect(&cluster.endpoint(0)).await;

    let bases = [
        ("prefix", raw::range_between("rs/", "rs0")),
        ("from key", raw::range_between("rs/02500", "\0")),
        ("everything", raw::range_between("\0", "\0")),
        ("interval", raw::range_between("rs/00100", "rs/01234")),
        ("one key", raw::range("rs/00042")),
        ("a deleted key", raw::range("rs/00005")),
        ("nothing", raw::range_between("zz", "zz0")),
    ];
    let mut multi_chunk = 0;
    for (what, base) in bases {
        for limit in [0, -3, 1, 11, 700, 5000] {
            for (keys_only, count_only, serializable) in [
                (false, false, false),
                (true, false, true),
                (false, true, false),
            ] {
                for revision in [0, past] {
                    let req = PbRangeRequest {
                        limit,
                        keys_only,
                        count_only,
                        serializable,
                        revision,
                        ..base.clone()
                    };
                    let label = format!("{what}: {req:?}");
                    let chunks = stream.chunks(req.clone()).await.expect(&label);
                    assert_well_formed(&chunks, &label);
                    if count_only {
                        assert_eq!(chunks.len(), 1, "{label}: count only is one message");
                    }
                    multi_chunk += usize::from(chunks.len() > 1);
                    let plain = kv.range(req).await.expect(&label);
                    assert_eq!(merged(&chunks), plain, "{label}");
                }
            }
        }
    }
    assert!(multi_chunk > 40, "{multi_chunk} streams of several chunks");

    // Sorting by key ascending is the natural order, so it is allowed; a target
    // without an order is too (etcd 3.7 then sorts each chunk on its own).
    let ascending = PbRangeRequest {
        sort_order: sort_order::ASCEND,
        sort_target: sort_target::KEY,
        ..raw::range_between("rs/", "rs0")
    };
    let chunks = stream.chunks(ascending.clone()).await.unwrap();
    assert_eq!(merged(&chunks), kv.range(ascending).await.unwrap());
    let by_value = PbRangeRequest {
        sort_target: sort_target::VALUE,
        ..raw::range_between("rs/", "rs0")
    };
    let chunks = stream.chunks(by_value).await.unwrap();
    let mut got: Vec<Vec<u8>> = merged(&chunks).kvs.into_iter().map(|kv| kv.key).collect();
    got.sort();
    let all = kv.range(raw::range_between("rs/", "rs0")).await.unwrap();
    assert_eq!(
        got,
        all.kvs.into_iter().map(|kv| kv.key).collect::<Vec<_>>()
    );
    for chunk in &chunks {
        assert!(
            chunk.kvs.windows(2).all(|w| w[0].value <= w[1].value),
            "each chunk ascends by value"
        );
    }
}

#[tokio::test]
async fn get_stream_of_etcd_client_sees_growing_chunks_and_the_last_ones_fields() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    if is_etcd(&cluster) {
        // etcd-client's own call, against a server that lacks the method.
        let refused = client.kv_client().get_stream("k", None).await;
        match refused {
            Err(etcd_client::Error::GRpcStatus(status)) => {
                assert_eq!(status.code(), Code::Unimplemented)
            }
            Ok(mut stream) => match stream.message().await {
                Err(etcd_client::Error::GRpcStatus(status)) => {
                    assert_eq!(status.code(), Code::Unimplemented)
                }
                other => panic!("etcd 3.4 answered RangeStream with {other:?}"),
            },
            Err(other) => panic!("{other:?}"),
        }
        return;
    }
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    load(&mut kv, 3000).await;
    let options = || GetOptions::new().with_prefix().with_limit(2500);
    let plain = client.get("rs/", Some(options())).await.unwrap();
    let mut stream = client
        .kv_client()
        .get_stream("rs/", Some(options()))
        .await
        .unwrap();
    let mut sizes = Vec::new();
    let mut kvs = Vec::new();
    let mut last = None;
    while let Some(chunk) = stream.message().await.unwrap() {
        sizes.push(chunk.kvs().len());
        kvs.extend(
            chunk
                .kvs()
                .iter()
                .map(|kv| (kv.key().to_vec(), kv.value().to_vec())),
        );
        last = Some(chunk);
    }
    let last = last.expect("a chunk");
    // etcd 3.7 starts with 10 keys and doubles while chunks stay small.
    assert_eq!(sizes[..4], [10, 20, 40, 80], "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 2500);
    assert!(last.more(), "the limit left keys out");
    assert_eq!(last.count(), plain.count());
    assert_eq!(
        last.count(),
        2999,
        "every key in the range, past the limit too"
    );
    assert_eq!(header_rev(last.header()), header_rev(plain.header()));
    let header = last.header().unwrap();
    assert_eq!(header.member_id(), cluster.member_id(0));
    assert!(header.cluster_id() != 0 && header.raft_term() >= 1);
    let expected: Vec<_> = plain
        .kvs()
        .iter()
        .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
        .collect();
    assert_eq!(kvs, expected);
}

#[tokio::test]
async fn refusals_carry_etcd_3_7_codes_and_messages() {
    let cluster = Cluster::start(1).await;
    if is_etcd(&cluster) {
        return assert_etcd_34_lacks_range_stream(&cluster).await;
    }
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    for i in 0..5 {
        kv.put(raw::put(&key(i), "v")).await.unwrap();
    }
    kv.compact(PbCompactionRequest {
        revision: 4,
        physical: true,
    })
    .await
    .unwrap();
    let mut stream = RawStream::connect(&cluster.endpoint(0)).await;
    let prefix = raw::range_between("rs/", "rs0");
    let sorts = "RangeStream does not support custom sort orders";
    let filters = "RangeStream does not support revision filters";
    let cases: Vec<(&str, PbRangeRequest, Code, &str)> = vec![
        (
            "empty key",
            PbRangeRequest {
                min_mod_revision: 1,
                ..Default::default()
            },
            Code::InvalidArgument,
            "etcdserver: key is not provided",
        ),
        (
            "unknown sort order",
            PbRangeRequest {
                sort_order: 7,
                ..prefix.clone()
            },
            Code::InvalidArgument,
            "etcdserver: invalid sort option",
        ),
        (
            "unknown sort target",
            PbRangeRequest {
                sort_target: 9,
                ..prefix.clone()
            },
            Code::InvalidArgument,
            "etcdserver: invalid sort option",
        ),
        (
            "descending keys",
            PbRangeRequest {
                sort_order: sort_order::DESCEND,
                ..prefix.clone()
            },
            Code::Unimplemented,
            sorts,
        ),
        (
            "ascending mod revisions",
            PbRangeRequest {
                sort_order: sort_order::ASCEND,
                sort_target: sort_target::MOD,
                ..prefix.clone()
            },
            Code::Unimplemented,
            sorts,
        ),
        (
            "descending values, also filtered",
            PbRangeRequest {
                sort_order: sort_order::DESCEND,
                sort_target: sort_target::VALUE,
                max_create_revision: 3,
                ..prefix.clone()
            },
            Code::Unimplemented,
            sorts,
        ),
        (
            "min mod revision",
            PbRangeRequest {
                min_mod_revision: 2,
                ..prefix.clone()
            },
            Code::Unimplemented,
            filters,
        ),
        (
            "max mod revision",
            PbRangeRequest {
                max_mod_revision: 2,
                ..prefix.clone()
            },
            Code::Unimplemented,
            filters,
        ),
        (
            "min create revision",
            PbRangeRequest {
                min_create_revision: 2,
                ..prefix.clone()
            },
            Code::Unimplemented,
            filters,
        ),
        (
            "max create revision",
            PbRangeRequest {
                max_create_revision: 2,
                ..prefix.clone()
            },
            Code::Unimplemented,
            filters,
        ),
        (
            "a compacted revision",
            PbRangeRequest {
                revision: 3,
                ..prefix.clone()
            },
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
        ),
        (
            "a future revision",
            PbRangeRequest {
                revision: 7,
                ..prefix.clone()
            },
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision",
        ),
    ];
    for (what, req, code, message) in cases {
        // The call itself is refused, before any chunk, as etcd's handler refuses.
        let status = match stream.open(req).await {
            Err(status) => status,
            Ok(_) => panic!("{what}: the call was accepted"),
        };
        assert_code_message(&status, code, message, what);
    }
    // At the compacted revision itself: served, with the current header.
    let chunks = stream
        .chunks(PbRangeRequest {
            revision: 4,
            ..prefix.clone()
        })
        .await
        .unwrap();
    assert_eq!(merged(&chunks).kvs.len(), 3);
    assert_eq!(chunks.last().unwrap().header.as_ref().unwrap().revision, 6);
}

#[tokio::test]
async fn writes_and_compactions_during_a_stream_are_not_visible() {
    let cluster = ClusterOptions::new(1)
        .args(["--max-request-bytes", SMALL_BUDGET])
        .start()
        .await;
    if is_etcd(&cluster) {
        return assert_etcd_34_lacks_range_stream(&cluster).await;
    }
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    load(&mut kv, 2000).await;
    let prefix = raw::range_between("rs/", "rs0");
    let before = kv.range(prefix.clone()).await.unwrap();
    let revision = before.header.as_ref().unwrap().revision;
    let mut stream = RawStream::connect(&cluster.endpoint(0)).await;
    let mut chunks = stream.open(prefix.clone()).await.unwrap();
    let first = chunks.message().await.unwrap().unwrap();
    let mut got = vec![first.range_response.unwrap()];
    // Overwrite every key, add and delete some, then compact everything away.
    for batch in (0..2000).collect::<Vec<usize>>().chunks(100) {
        let ops = batch.iter().map(|i| op_put(&key(*i), "new")).collect();
        kv.txn(PbTxnRequest {
            compare: vec![],
            success: ops,
            failure: vec![],
        })
        .await
        .unwrap();
    }
    kv.put(raw::put("rs/00000a", "inserted")).await.unwrap();
    kv.delete_range(raw::delete_between("rs/01000", "rs/01500"))
        .await
        .unwrap();
    let latest = kv.put(raw::put("rs/zzz", "last")).await.unwrap();
    kv.compact(PbCompactionRequest {
        revision: latest.header.unwrap().revision,
        physical: true,
    })
    .await
    .unwrap();
    while let Some(message) = chunks.message().await.unwrap() {
        got.push(message.range_response.unwrap());
    }
    assert!(got.len() > 10, "{} chunks", got.len());
    assert_well_formed(&got, "stream across writes");
    let merged = merged(&got);
    assert_eq!(merged.header.as_ref().unwrap().revision, revision);
    assert_eq!(
        merged.kvs, before.kvs,
        "the store as it was when the stream began"
    );
    assert_eq!(merged.count, before.count);
}

/// How many RangeStream messages the member has produced, from its `/metrics`.
async fn messages_sent(cluster: &Cluster) -> f64 {
    let answer = http_get(&format!("{}/metrics", cluster.endpoint(0)), None).await;
    assert_eq!(answer.status, 200);
    let metrics = parse(&answer.body).expect("metrics parse");
    metrics.sum(
        "grpc_server_msg_sent_total",
        &[("grpc_method", "RangeStream")],
    )
}

#[tokio::test]
async fn a_client_that_stops_reading_holds_the_member_to_a_few_chunks() {
    let cluster = Cluster::start(1).await;
    if is_etcd(&cluster) {
        return assert_etcd_34_lacks_range_stream(&cluster).await;
    }
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    // 800 values of 100 KiB: 80 MB, about 55 chunks of the default 1.5 MiB budget.
    let value = vec![b'x'; 100 * 1024];
    for i in 0..800 {
        kv.put(PbPutRequest {
            key: bytes(&key(i)),
            value: value.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let rss_before = cluster.rss_bytes(0).unwrap_or(0);
    let mut stream = RawStream::connect(&cluster.endpoint(0)).await;
    let mut chunks = stream.open(raw::range_between("rs/", "rs0")).await.unwrap();
    let first = chunks.message().await.unwrap().unwrap();
    assert_eq!(first.range_response.unwrap().kvs.len(), 10);
    // Nothing to wait for: the claim is that the member stops. Watch it for two seconds
    // while this client reads nothing: the messages it hands to gRPC (its
    // `grpc_server_msg_sent_total`) stay a few, and its memory does not take the range
    // in (a queue without bound before gRPC took it from 105 to 220 MB here).
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut produced = 0.0;
    while Instant::now() < deadline {
        produced = messages_sent(&cluster).await;
        assert!(
            produced <= 10.0,
            "{produced} chunks produced for a client that read one"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rss_stalled = cluster.rss_bytes(0).unwrap_or(0);
    assert!(
        rss_stalled < rss_before + 40 * 1024 * 1024,
        "RSS grew from {rss_before} to {rss_stalled} while the client read nothing"
    );
    // The client reads on: everything arrives, in order.
    let mut received = 10;
    let mut total_chunks = 1;
    while let Some(message) = chunks.message().await.unwrap() {
        received += message.range_response.unwrap().kvs.len();
        total_chunks += 1;
    }
    assert_eq!(received, 800);
    assert!(
        f64::from(total_chunks) > 3.0 * produced.max(1.0),
        "{total_chunks} chunks in all, {produced} produced while stalled"
    );
    // A client that goes away ends the stream on the member: the next one is served.
    let mut gone = stream.open(raw::range_between("rs/", "rs0")).await.unwrap();
    gone.message().await.unwrap().unwrap();
    drop(gone);
    let again = stream.chunks(raw::range("rs/00001")).await.unwrap();
    assert_eq!(merged(&again).kvs.len(), 1);
}

#[tokio::test]
async fn read_permission_on_the_range_is_needed_and_an_auth_change_ends_the_stream() {
    let cluster = Cluster::start(1).await;
    if is_etcd(&cluster) {
        return assert_etcd_34_lacks_range_stream(&cluster).await;
    }
    let mut root = cluster.client(0).await;
    // 30 MB: more than gRPC's windows and queues hold, so that the member is still
    // reading when the auth store changes below.
    let value = vec![b'v'; 100 * 1024];
    for i in 0..300 {
        root.put(key(i), value.clone(), None).await.unwrap();
    }
    root.put("secret/x", "s", None).await.unwrap();
    let mut auth = root.auth_client();
    auth.role_add("reader").await.unwrap();
    auth.role_grant_permission("reader", Permission::read("rs/").with_prefix())
        .await
        .unwrap();
    auth.user_add("alice", "pw", None).await.unwrap();
    auth.user_grant_role("alice", "reader").await.unwrap();
    enable_auth(&cluster).await;

    let alice = connect_as(&cluster, 0, "alice", "pw").await;
    let mut stream = alice
        .kv_client()
        .get_stream("rs/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("read permission on the prefix");
    let mut n = 0;
    while let Some(chunk) = stream.message().await.unwrap() {
        n += chunk.kvs().len();
    }
    assert_eq!(n, 300);
    for (from, options) in [
        ("secret/", GetOptions::new().with_prefix()),
        ("rs/", GetOptions::new().with_from_key()),
        ("\0", GetOptions::new().with_all_keys()),
    ] {
        let denied = match alice.kv_client().get_stream(from, Some(options)).await {
            Err(e) => e,
            Ok(mut stream) => stream.message().await.expect_err("denied"),
        };
        match denied {
            etcd_client::Error::GRpcStatus(status) => assert_code_message(
                &status,
                Code::PermissionDenied,
                msg::PERMISSION_DENIED,
                from,
            ),
            other => panic!("{from}: {other:?}"),
        }
    }
    // Without a token at all: denied the same way as Range.
    let mut anonymous = RawStream::connect(&cluster.endpoint(0)).await;
    let status = anonymous
        .open(raw::range_between("rs/", "rs0"))
        .await
        .expect_err("anonymous RangeStream refused");
    let plain = RawKv::connect(&cluster.endpoint(0))
        .await
        .range(raw::range_between("rs/", "rs0"))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (plain.code(), plain.message())
    );

    // The auth store changes while a stream runs: as etcd's doSerialize, every chunk
    // is sent, then the stream ends with "revision of auth store is old".
    let mut stream = alice
        .kv_client()
        .get_stream("rs/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let first = stream.message().await.unwrap().expect("a first chunk");
    assert_eq!(first.kvs().len(), 10);
    let root = connect_as(&cluster, 0, "root", ROOT_PW).await;
    root.auth_client()
        .role_grant_permission("reader", Permission::read("other/").with_prefix())
        .await
        .unwrap();
    let mut n = first.kvs().len();
    let ended = loop {
        match stream.message().await {
            Ok(Some(chunk)) => n += chunk.kvs().len(),
            Ok(None) => panic!("the stream ended cleanly across an auth change"),
            Err(e) => break e,
        }
    };
    assert_eq!(n, 300, "every chunk before the status");
    match ended {
        etcd_client::Error::GRpcStatus(status) => assert_code_message(
            &status,
            Code::InvalidArgument,
            msg::AUTH_OLD_REVISION,
            "the stream's end",
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn followers_serve_linearizable_and_serializable_streams_and_learners_refuse() {
    let mut cluster = Cluster::start(1).await;
    if is_etcd(&cluster) {
        return assert_etcd_34_lacks_range_stream(&cluster).await;
    }
    let mut kv = RawKv::connect(&cluster.endpoint(0)).await;
    load(&mut kv, 300).await;
    // A learner refuses every stream but Snapshot in etcd 3.7, RangeStream included,
    // serializable or not.
    let learner = cluster.add_member(0, true).await;
    cluster.wait_status(learner, Duration::from_secs(30)).await;
    let mut on_learner = RawStream::connect(&cluster.endpoint(learner)).await;
    for serializable in [false, true] {
        let opened = on_learner
            .open(PbRangeRequest {
                serializable,
                ..raw::range_between("rs/", "rs0")
            })
            .await;
        assert_status(
            opened,
            Code::FailedPrecondition,
            "etcdserver: rpc not supported for learner",
            "a learner refuses RangeStream",
        );
    }
    // Promoted, it serves them: a linearizable stream sees a write just made through
    // the leader.
    let mut client = cluster.client(0).await;
    let id = cluster.member_id(learner);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = client.member_promote(id).await {
        assert!(Instant::now() < deadline, "promote: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut follower = RawStream::connect(&cluster.endpoint(learner)).await;
    let written = kv.put(raw::put("rs/99999", "fresh")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Until the promotion is applied there, the member still refuses as a learner.
    let chunks = loop {
        match follower.chunks(raw::range_between("rs/", "rs0")).await {
            Ok(chunks) => break chunks,
            Err(e) => assert!(Instant::now() < deadline, "stream on the follower: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let merged_linear = merged(&chunks);
    assert_eq!(
        merged_linear.header.as_ref().unwrap().revision,
        written.header.as_ref().unwrap().revision
    );
    assert_eq!(
        merged_linear.kvs.last().map(|kv| kv.value.clone()),
        Some(bytes("fresh"))
    );
    assert_eq!(
        merged_linear.header.as_ref().unwrap().member_id,
        cluster.member_id(learner)
    );
    let serial = follower
        .chunks(PbRangeRequest {
            serializable: true,
            ..raw::range_between("rs/", "rs0")
        })
        .await
        .unwrap();
    assert_eq!(merged(&serial).count, merged_linear.count);
}
