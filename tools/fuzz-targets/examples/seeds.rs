//! Writes the seed corpus of every fuzz target into `fuzz/corpus/<target>/`: well-formed
//! inputs of each kind the target parses, so that libFuzzer starts from deep inside
//! each parser. Run `cargo run -p quantykube-fuzz-targets --example seeds`; the etcd
//! snapshot files of `bbolt_file` and `snapshot_import` come from etcd 3.4 itself, by
//! `fuzz/seed-etcd-snapshot.sh`. Seeds are made, never edited by hand.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use quantykube::proto::admin_v1 as admin;
use quantykube::proto::etcdserverpb as pb;

fn corpus(target: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    dir
}

fn write(target: &str, name: &str, data: &[u8]) {
    std::fs::write(corpus(target).join(name), data).expect("seed written");
}

fn with_selector(selector: u8, rest: &[u8]) -> Vec<u8> {
    let mut out = vec![selector];
    out.extend_from_slice(rest);
    out
}

fn gateway() {
    let bodies: &[(&str, &str)] = &[
        (
            "kv/range",
            r#"{"key":"Zm9v","range_end":"Zm9w","limit":"10","revision":3,"sort_order":"ASCEND","keys_only":true}"#,
        ),
        (
            "kv/put",
            r#"{"key":"Zm9v","value":"YmFy","lease":"7587862311034553601","prev_kv":true}"#,
        ),
        (
            "kv/deleterange",
            r#"{"key":"Zm9v","range_end":"AA==","prev_kv":true}"#,
        ),
        (
            "kv/txn",
            r#"{"compare":[{"key":"Zm9v","result":"EQUAL","target":"MOD","mod_revision":"5"}],"success":[{"request_put":{"key":"Zm9v","value":"YmFy"}},{"request_txn":{"success":[{"request_range":{"key":"Zm9v"}}]}}],"failure":[{"request_delete_range":{"key":"Zm9v"}}]}"#,
        ),
        ("kv/compaction", r#"{"revision":"12","physical":true}"#),
        (
            "watch",
            r#"{"create_request":{"key":"Zm9v","range_end":"Zm9w","progress_notify":true,"filters":["NOPUT"]}} {"progress_request":{}} {"cancel_request":{"watch_id":"0"}}"#,
        ),
        ("lease/grant", r#"{"TTL":"10","ID":"0"}"#),
        (
            "lease/keepalive",
            r#"{"ID":"7587862311034553601"}{"ID":"1"}"#,
        ),
        (
            "lease/timetolive",
            r#"{"ID":"7587862311034553601","keys":true}"#,
        ),
        (
            "cluster/member/add",
            r#"{"peerURLs":["http://127.0.0.1:2380"],"isLearner":true}"#,
        ),
        (
            "auth/authenticate",
            r#"{"name":"root","password":"secret"}"#,
        ),
        (
            "auth/role/grant",
            r#"{"name":"r","perm":{"permType":"READWRITE","key":"YQ==","range_end":"Yg=="}}"#,
        ),
        (
            "maintenance/alarm",
            r#"{"action":"GET","memberID":"0","alarm":"NOSPACE"}"#,
        ),
    ];
    let routes = quantykube::http::gateway::routes::ROUTES;
    for (index, route) in routes.iter().enumerate() {
        let index = u8::try_from(index).expect("fewer than 256 routes");
        let name = route.path.replace('/', "_");
        write(
            "gateway_body",
            &format!("{name}-empty"),
            &[index, 64, b'{', b'}'],
        );
        for (path, body) in bodies {
            if *path == route.path {
                let mut data = vec![index, 5];
                data.extend_from_slice(body.as_bytes());
                write("gateway_body", &name, &data);
            }
        }
    }
}

fn range() -> pb::RangeRequest {
    pb::RangeRequest {
        key: b"foo".to_vec().into(),
        range_end: b"fop".to_vec().into(),
        limit: 10,
        revision: 3,
        ..Default::default()
    }
}

fn put() -> pb::PutRequest {
    pb::PutRequest {
        key: b"foo".to_vec().into(),
        value: b"bar".to_vec().into(),
        lease: 7,
        prev_kv: true,
        ..Default::default()
    }
}

fn grpc() {
    use pb::request_op::Request as Op;
    let inner = pb::TxnRequest {
        success: vec![pb::RequestOp {
            request: Some(Op::RequestPut(put())),
        }],
        ..Default::default()
    };
    let txn = pb::TxnRequest {
        compare: vec![pb::Compare {
            key: b"foo".to_vec().into(),
            result: pb::compare::CompareResult::Equal as i32,
            target: pb::compare::CompareTarget::Mod as i32,
            target_union: Some(pb::compare::TargetUnion::ModRevision(5)),
            ..Default::default()
        }],
        success: vec![
            pb::RequestOp {
                request: Some(Op::RequestRange(range())),
            },
            pb::RequestOp {
                request: Some(Op::RequestTxn(inner)),
            },
        ],
        failure: vec![pb::RequestOp {
            request: Some(Op::RequestDeleteRange(pb::DeleteRangeRequest {
                key: b"foo".to_vec().into(),
                ..Default::default()
            })),
        }],
    };
    let seeds: Vec<(u8, &str, Vec<u8>)> = vec![
        (0, "range", range().encode_to_vec()),
        (1, "put", put().encode_to_vec()),
        (
            2,
            "delete",
            pb::DeleteRangeRequest {
                key: b"a".to_vec().into(),
                range_end: vec![0].into(),
                prev_kv: true,
            }
            .encode_to_vec(),
        ),
        (3, "txn", txn.encode_to_vec()),
        (
            4,
            "compact",
            pb::CompactionRequest {
                revision: 9,
                physical: true,
            }
            .encode_to_vec(),
        ),
        (
            5,
            "watch",
            pb::WatchRequest {
                request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                    pb::WatchCreateRequest {
                        key: b"foo".to_vec().into(),
                        start_revision: 2,
                        prev_kv: true,
                        ..Default::default()
                    },
                )),
            }
            .encode_to_vec(),
        ),
        (
            6,
            "lease_grant",
            pb::LeaseGrantRequest { ttl: 10, id: 0 }.encode_to_vec(),
        ),
        (
            7,
            "keepalive",
            pb::LeaseKeepAliveRequest { id: 7 }.encode_to_vec(),
        ),
        (
            8,
            "member_add",
            pb::MemberAddRequest {
                peer_ur_ls: vec!["http://127.0.0.1:2380".into(), "unix://x:1".into()],
                is_learner: true,
            }
            .encode_to_vec(),
        ),
        (
            9,
            "user_add",
            pb::AuthUserAddRequest {
                name: "u".into(),
                password: "p".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
    ];
    for (selector, name, bytes) in seeds {
        write("grpc_request", name, &with_selector(selector, &bytes));
    }
}

fn config() {
    let yaml = "name: m1\ndata-dir: /tmp/m1\nheartbeat-interval: 100\nelection-timeout: 1000\n\
                listen-client-urls: http://127.0.0.1:2379\nadvertise-client-urls: http://127.0.0.1:2379\n\
                initial-cluster: m1=http://127.0.0.1:2380\nauto-compaction-mode: periodic\n\
                auto-compaction-retention: 1h\nquota-backend-bytes: 8589934592\n\
                client-transport-security:\n  cert-file: /c.pem\n  key-file: /k.pem\n  client-cert-auth: true\n\
                log-outputs: [stderr]\n";
    write("config", "file", yaml.as_bytes());
    let mut with_flags = yaml.as_bytes().to_vec();
    for flag in [
        "--max-txn-ops=64",
        "--auth-token=jwt,sign-method=RS256,ttl=5m",
        "--experimental-initial-corrupt-check",
    ] {
        with_flags.push(0);
        with_flags.extend_from_slice(flag.as_bytes());
    }
    write("config", "file-and-flags", &with_flags);
}

fn admin() {
    let metadata = admin::ResourceMetadata {
        name: "etcd-0".into(),
        uid: "u1".into(),
        version: 3,
        ..Default::default()
    };
    let member = admin::Member {
        metadata: Some(metadata.clone()),
        peer_urls: vec!["https://10.0.0.1:2380".into()],
        ..Default::default()
    };
    let seeds: Vec<(u8, &str, Vec<u8>)> = vec![
        (
            0,
            "create_member",
            admin::CreateMemberRequest {
                member: Some(member),
            }
            .encode_to_vec(),
        ),
        (
            1,
            "delete_member",
            admin::DeleteMemberRequest {
                member: Some(admin::ObjectRef {
                    name: "etcd-1".into(),
                    ..Default::default()
                }),
                options: Some(admin::DeleteOptions {
                    version: 2,
                    uid: "u".into(),
                }),
            }
            .encode_to_vec(),
        ),
        (
            2,
            "list_members",
            admin::ListMembersRequest {
                page_size: 2,
                page_token: quantykube::admin::paging::token_after("etcd-0"),
            }
            .encode_to_vec(),
        ),
        (
            3,
            "create_snapshot",
            admin::CreateSnapshotRequest {
                snapshot: Some(admin::Snapshot {
                    metadata: Some(metadata),
                    ..Default::default()
                }),
            }
            .encode_to_vec(),
        ),
        (
            4,
            "page_token",
            quantykube::admin::paging::token_after("etcd-2").into_bytes(),
        ),
    ];
    for (selector, name, bytes) in seeds {
        write("admin_request", name, &with_selector(selector, &bytes));
    }
}

fn raft() {
    use openraft::entry::RaftEntry as _;
    use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
    use openraft::testing::log_id;
    use quantykube_raft::codec::encode;
    use quantykube_raft::types::{Command, Entry, TypeConfig, Vote};
    let vote = Vote::new_committed(3, 1);
    let command = quantykube::proto::command::Command::default().encode_to_vec();
    let append = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: Some(log_id::<TypeConfig>(3, 1, 9)),
        entries: vec![
            Entry::new_normal(
                log_id::<TypeConfig>(3, 1, 10),
                Command(Bytes::from(command)),
            ),
            Entry::new_blank(log_id::<TypeConfig>(3, 1, 11)),
        ],
        leader_commit: Some(log_id::<TypeConfig>(3, 1, 9)),
    };
    let request_vote = VoteRequest::<TypeConfig> {
        vote: Vote::new(4, 2),
        last_log_id: Some(log_id::<TypeConfig>(3, 1, 11)),
        leadership_transfer: false,
    };
    let transfer =
        TransferLeaderRequest::<TypeConfig>::new(vote, 2, Some(log_id::<TypeConfig>(3, 1, 11)));
    let seeds: Vec<(u8, &str, Vec<u8>)> = vec![
        (0, "append", encode("append", &append).expect("encodes")),
        (
            1,
            "vote_request",
            encode("vote", &request_vote).expect("encodes"),
        ),
        (
            2,
            "transfer",
            encode("transfer", &transfer).expect("encodes"),
        ),
        (3, "vote", encode("vote", &vote).expect("encodes")),
    ];
    for (selector, name, bytes) in seeds {
        write("raft_message", name, &with_selector(selector, &bytes));
    }
}

fn transfer_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rocks = quantykube::store::open_database(&dir.path().join("db"), &[]).expect("store");
    let store = quantykube::store::RevisionStore::new(rocks).expect("store");
    // Two applied puts, so that the store has a position to snapshot.
    let mut batch = store.begin_apply().expect("apply");
    for (index, key) in [(1, "a"), (2, "b")] {
        let command = quantykube::proto::command::Command {
            request: Some(quantykube::proto::command::command::Request::Put(
                pb::PutRequest {
                    key: key.as_bytes().to_vec().into(),
                    value: b"v".to_vec().into(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let id = openraft::testing::log_id::<quantykube_raft::types::TypeConfig>(1, 1, index);
        batch.command(&id, &command).expect("applied");
    }
    batch.flush().expect("flushed");
    let snapshots = dir.path().join("snap");
    let info = store
        .current_snapshot(&snapshots, true)
        .expect("snapshot")
        .expect("a snapshot");
    let bytes = std::fs::read(&info.path).expect("transfer file");
    write("transfer_file", "empty-store", &bytes);
}

fn jwt() {
    use quantykube::auth::jwt::JwtTokens;
    use quantykube::config::token_options::SignMethod;
    let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/keys");
    let read = |name: &str| std::fs::read(keys.join(name)).expect("fuzz key");
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let ttl = Duration::from_secs(300);
    // The providers' order is jwt_token's: HS256, RS256, PS256, ES256, ES512, EdDSA.
    for (selector, method, file) in [
        (0u8, SignMethod::HS256, "hmac.key"),
        (1, SignMethod::RS256, "rsa.pem"),
        (3, SignMethod::ES256, "p256.pem"),
        (5, SignMethod::EdDSA, "ed25519.pem"),
    ] {
        let tokens = JwtTokens::from_key_bytes(method, ttl, Some(read(file)), None).expect("keys");
        let token = tokens.sign("root", 3, now).expect("signed");
        write(
            "jwt_token",
            &format!("{method}"),
            &with_selector(selector, token.as_bytes()),
        );
    }
    // jwt_keys: selector = method index * 2 (+1 for a public key).
    for (selector, file) in [
        (0u8, "rsa.pem"),
        (4, "p256.pem"),
        (8, "p521.pem"),
        (10, "ed25519.pem"),
    ] {
        write("jwt_keys", file, &with_selector(selector, &read(file)));
    }
    let rsa_public = std::process::Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(keys.join("rsa.pem"))
        .output()
        .expect("openssl")
        .stdout;
    write("jwt_keys", "rsa_pub.pem", &with_selector(1, &rsa_public));
    // The same keys as bare DER, which the target wraps in a PEM block of the label
    // that bits 4-6 of the selector pick (1 PRIVATE KEY, 2 EC PRIVATE KEY, 4 PUBLIC KEY).
    let der = |pem: &[u8]| {
        use base64::Engine as _;
        let text = String::from_utf8_lossy(pem);
        let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("PEM body")
    };
    for (selector, name, pem) in [
        (0x10u8, "rsa.der", read("rsa.pem")),
        (0x14, "p256.der", read("p256.pem")),
        (0x28, "p521-sec1.der", read("p521.pem")),
        (0x1a, "ed25519.der", read("ed25519.pem")),
        (0x41, "rsa_pub.der", rsa_public.clone()),
    ] {
        write("jwt_keys", name, &with_selector(selector, &der(&pem)));
    }
}

fn main() {
    gateway();
    grpc();
    config();
    admin();
    raft();
    transfer_file();
    jwt();
    println!("seeds written under fuzz/corpus/");
}
