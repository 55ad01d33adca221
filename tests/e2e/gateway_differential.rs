//! The JSON gateway differentially: the same HTTP requests against a fresh one-member
//! etcd 3.4 and a fresh one-member QuantyKube, every answer compared status by status
//! and field by field (cluster and member ids and terms aside; where a value differs by
//! nature, such as a lease id or a version string, the case says what it compares
//! instead). Malformed bodies included: the error texts are Go's, byte for byte, as
//! the etcd 3.4.23 at hand words them (Debian's build: grpc-gateway 1.6.4 and
//! golang/protobuf 1.3.5's jsonpb). Sort options etcd 3.4 does not check are left out:
//! QuantyKube refuses them as 3.5+ does (see kv_range). Set `QK_E2E_SHOW` to print each
//! request with etcd's answer.

use serde_json::{json, Value};

use crate::gateway_support::*;
use crate::harness::*;

/// One request of the sequence.
struct Case {
    path: &'static str,
    body: Vec<u8>,
    /// Applied to both answers before they are compared.
    normalize: fn(&mut Value),
}

fn case(path: &'static str, body: Value) -> Case {
    raw_case(path, body.to_string().as_bytes())
}

fn raw_case(path: &'static str, body: &[u8]) -> Case {
    Case {
        path,
        body: body.to_vec(),
        normalize: |_| {},
    }
}

fn with(mut case: Case, normalize: fn(&mut Value)) -> Case {
    case.normalize = normalize;
    case
}

/// Replaces the value at `pointer` with its kind, where present.
fn blank(value: &mut Value, pointer: &str) {
    if let Some(v) = value.pointer_mut(pointer) {
        *v = json!(format!(
            "<{}>",
            if v.is_string() { "string" } else { "value" }
        ));
    }
}

async fn clusters() -> Option<(Cluster, Cluster)> {
    if Target::Etcd.binary().is_none() || Target::Quantykube.binary().is_none() {
        eprintln!("SKIPPED: the gateway differential test needs both etcd and quantykube");
        return None;
    }
    let etcd = ClusterOptions::new(1).target(Target::Etcd).start().await;
    let ours = ClusterOptions::new(1)
        .target(Target::Quantykube)
        .start()
        .await;
    Some((etcd, ours))
}

async fn compare(cases: Vec<Case>) {
    let Some((etcd, ours)) = clusters().await else {
        return;
    };
    let (etcd_gw, our_gw) = (Gateway::of(&etcd, 0), Gateway::of(&ours, 0));
    let show = std::env::var_os("QK_E2E_SHOW").is_some();
    for (i, case) in cases.into_iter().enumerate() {
        let mut theirs = etcd_gw.post_raw(case.path, &case.body).await;
        let mut mine = our_gw.post_raw(case.path, &case.body).await;
        let request = String::from_utf8_lossy(&case.body).into_owned();
        if show {
            eprintln!(
                "#{i} {} {request}\n  -> {} {}",
                case.path, theirs.status, theirs.http.body
            );
        }
        // Debian's etcd 3.4.23 is built with grpc-gateway 1.6.4, which answers
        // FailedPrecondition with 412; upstream etcd 3.4.23 (grpc-gateway 1.9.5), 3.5
        // and 3.6 answer 400, as QuantyKube does.
        if theirs.status == 412 && theirs.json["code"] == json!(9) {
            theirs.status = 400;
        }
        for answer in [&mut theirs, &mut mine] {
            scrub(&mut answer.json);
            (case.normalize)(&mut answer.json);
        }
        assert_eq!(
            (mine.status, &mine.json),
            (theirs.status, &theirs.json),
            "#{i} {} {request}: QuantyKube (left) answered {}, etcd (right) {}",
            case.path,
            mine.http.body,
            theirs.http.body
        );
        if theirs.json.is_null() {
            // Not JSON (Go's text errors): the texts themselves must agree.
            assert_eq!(mine.http.body, theirs.http.body, "#{i} {}", case.path);
        }
        assert_eq!(
            mine.http.header("content-type"),
            theirs.http.header("content-type"),
            "#{i} {}",
            case.path
        );
    }
}

fn foo() -> String {
    b64("foo")
}

#[tokio::test(flavor = "multi_thread")]
async fn kv_requests_answer_as_etcd_3_4_answers_them() {
    let k = |s: &str| b64(s);
    let mut cases = vec![
        case("/v3/kv/put", json!({"key": k("a"), "value": k("1")})),
        case(
            "/v3/kv/put",
            json!({"key": k("a"), "value": k("2"), "prev_kv": true}),
        ),
        case("/v3/kv/put", json!({"key": k("b"), "value": k("<&>")})),
        case("/v3/kv/put", json!({"key": k("c"), "value": ""})),
        case(
            "/v3/kv/put",
            json!({"key": k("a"), "ignore_value": true, "prevKv": true}),
        ),
        case(
            "/v3/kv/put",
            json!({"key": k("a"), "value": k("x"), "ignore_value": true}),
        ),
        case("/v3/kv/put", json!({"key": k("a"), "lease": "5"})),
        case("/v3/kv/put", json!({"value": k("x")})),
        case("/v3/kv/range", json!({"key": k("a")})),
        case("/v3/kv/range", json!({"key": k("a"), "range_end": k("z")})),
        case(
            "/v3/kv/range",
            json!({"key": k("a"), "rangeEnd": k("z"), "limit": 1}),
        ),
        case(
            "/v3/kv/range",
            json!({"key": k("\0"), "range_end": k("\0"), "count_only": true}),
        ),
        case(
            "/v3/kv/range",
            json!({"key": k("a"), "range_end": k("z"), "keys_only": true}),
        ),
        case(
            "/v3/kv/range",
            json!({"key": k("a"), "range_end": k("z"), "sort_order": "DESCEND", "sort_target": "VALUE"}),
        ),
        case(
            "/v3/kv/range",
            json!({"key": k("a"), "range_end": k("z"), "sort_order": 2, "sort_target": "MOD"}),
        ),
        case("/v3/kv/range", json!({"key": k("a"), "revision": "2"})),
        case("/v3/kv/range", json!({"key": k("a"), "revision": 1000})),
        case(
            "/v3/kv/range",
            json!({"key": k("a"), "range_end": k("z"), "min_mod_revision": "3", "max_create_revision": 3}),
        ),
        case("/v3/kv/range", json!({"key": k("a"), "serializable": true})),
        case("/v3/kv/range", json!({"key": k("nothing")})),
        case(
            "/v3/kv/deleterange",
            json!({"key": k("c"), "prev_kv": true}),
        ),
        case("/v3/kv/deleterange", json!({"key": k("nothing")})),
        case("/v3/kv/deleterange", json!({})),
        case(
            "/v3/kv/txn",
            json!({
                "compare": [{"result": "EQUAL", "target": "VALUE", "key": k("a"), "value": k("2")}],
                "success": [
                    {"request_put": {"key": k("t"), "value": k("1")}},
                    {"request_range": {"key": k("a")}},
                    {"request_txn": {"success": [{"request_delete_range": {"key": k("b"), "prev_kv": true}}]}}
                ],
                "failure": [{"request_range": {"key": k("t")}}]
            }),
        ),
        case(
            "/v3/kv/txn",
            json!({
                "compare": [
                    {"target": "VERSION", "key": k("a"), "version": "0"},
                    {"result": "GREATER", "target": "CREATE", "key": k("a"), "create_revision": 1},
                    {"result": "LESS", "target": "MOD", "key": k("a"), "range_end": k("z"), "mod_revision": "100"},
                    {"result": "NOT_EQUAL", "target": "LEASE", "key": k("a"), "lease": "0"}
                ],
                "failure": [{"request_range": {"key": k("a"), "range_end": k("z")}}]
            }),
        ),
        case(
            "/v3/kv/txn",
            json!({"success": [
                {"request_put": {"key": k("d"), "value": k("1")}},
                {"request_put": {"key": k("d"), "value": k("2")}}
            ]}),
        ),
        case("/v3/kv/txn", json!({})),
    ];
    let many: Vec<Value> = (0..129)
        .map(|i| json!({"request_range": {"key": k(&format!("k{i}"))}}))
        .collect();
    cases.push(case("/v3/kv/txn", json!({ "success": many })));
    cases.extend([
        case("/v3/kv/compaction", json!({"revision": "3"})),
        case(
            "/v3/kv/compaction",
            json!({"revision": "3", "physical": true}),
        ),
        case("/v3/kv/compaction", json!({"revision": 1000})),
        case("/v3/kv/range", json!({"key": k("a"), "revision": 2})),
        case("/v3beta/kv/range", json!({"key": k("a")})),
    ]);
    compare(cases).await;
}

/// Every malformed body and mistyped field of the probes we made against etcd 3.4.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_bodies_get_go_s_errors() {
    let range = "/v3/kv/range";
    let key = foo();
    let typed = |field: &str, value: &str| -> Vec<u8> {
        format!(r#"{{"key":"{key}","{field}":{value}}}"#).into_bytes()
    };
    let mut cases = vec![raw_case(
        "/v3/kv/put",
        format!(r#"{{"key":"{key}","value":"YmFy"}}"#).as_bytes(),
    )];
    for body in [
        "",
        " ",
        "x",
        "[]",
        "\"a\"",
        "5",
        "null",
        "true",
        "{",
        "{\"key\"",
        "{\"key\":",
        "{\"key\" \"a\"}",
        "{\"key\":\"Zm9v\" \"a\"}",
        "{key:1}",
        "{\"key\":\"Zm9v\"} trailing",
        "{\"key\":\"Zm9v\"}{\"key\":1}",
        "{\"key\":\"Zm9\"}",
        "{\"key\":\"Zm9v!\"}",
        "{\"key\":\"Zm9vYg\"}",
        "{\"key\":\"Zm9v\\nYmFy\"}",
        "{\"key\":\"Zm\\u0039v\"}",
        "{\"key\":null}",
        "{\"key\":[\"a\"]}",
        "{\"key\":[102,111,111]}",
        "{\"key\":[300]}",
        "{\"key\":{}}",
        "{\"key\":5}",
        "{\"key\":true}",
        "\u{1}",
        "{\"key\":\"\u{1}\"}",
        "{\"key\":\"Zm9v\",}",
        "{\"key\":\"Zm9v\"]",
        "[1,]",
        "{\"key\":tru}",
        "{\"key\":-}",
        "{\"key\":1.}",
        "{\"key\":\"\\x\"}",
        "{\"key\":\"\\u12\"}",
    ] {
        cases.push(raw_case(range, body.as_bytes()));
    }
    for (field, value) in [
        ("limit", "\"abc\""),
        ("limit", "1.5"),
        ("limit", "true"),
        ("limit", "\"1e2\""),
        ("limit", "1e2"),
        ("limit", "99999999999999999999"),
        ("limit", "\"\""),
        ("limit", "\"1 2\""),
        ("limit", "[1]"),
        ("limit", "{}"),
        ("limit", "null"),
        ("limit", "\"-1\""),
        ("revision", "-5"),
        ("serializable", "\"true\""),
        ("serializable", "1"),
        ("sort_order", "\"FOO\""),
        ("sort_order", "\"descend\""),
        ("sort_order", "true"),
        ("sort_order", "3000000000"),
        ("sortOrder", "\"DESCEND\""),
        ("bogus", "[1,{\"x\":2}]"),
        ("range_end", "\"\""),
    ] {
        cases.push(raw_case(range, &typed(field, value)));
    }
    for body in [
        r#"{"compare":5}"#,
        r#"{"compare":[5]}"#,
        r#"{"success":[{"request_put":5}]}"#,
        r#"{"success":[{"request_put":null}]}"#,
        r#"{"compare":[{"target":"BAD"}]}"#,
        r#"{"compare":[{"result":"EQUAL","target":"VALUE","key":"Zm9v","value":"YmFy"}]}"#,
        r#"{"compare":[{"result":"EQUAL","target":"VERSION","key":"Zm9v","version":"x"}]}"#,
    ] {
        cases.push(raw_case("/v3/kv/txn", body.as_bytes()));
    }
    cases.extend([
        raw_case(
            "/v3/kv/put",
            br#"{"key":"Zm9v","value":"YmFy","lease":"x"}"#,
        ),
        raw_case("/v3/lease/grant", br#"{"TTL":"sixty"}"#),
        raw_case("/v3/lease/grant", br#"{"TTL":60.5}"#),
        raw_case("/v3/maintenance/alarm", br#"{"action":"NOPE"}"#),
        with(
            raw_case(
                "/v3/maintenance/alarm",
                br#"{"alarm":"NOSPACE","member_id":"-1"}"#,
            ),
            |v| {
                if let Some(map) = v.as_object_mut() {
                    map.remove("header");
                }
            },
        ),
        raw_case("/v3/maintenance/snapshot", b"x"),
    ]);
    compare(cases).await;
}

/// The paths beyond KV: answers whose values differ by nature (lease and member ids,
/// versions, sizes, hashes, raft indexes) are compared by shape.
#[tokio::test(flavor = "multi_thread")]
async fn lease_cluster_maintenance_and_auth_answer_as_etcd_3_4() {
    fn lease_id(v: &mut Value) {
        blank(v, "/ID");
    }
    fn members(v: &mut Value) {
        if let Some(list) = v.get_mut("members").and_then(Value::as_array_mut) {
            for m in list {
                for field in ["/ID", "/name", "/peerURLs/0", "/clientURLs/0"] {
                    blank(m, field);
                }
            }
        }
    }
    fn status(v: &mut Value) {
        for field in [
            "/version",
            "/dbSize",
            "/leader",
            "/raftIndex",
            "/raftTerm",
            "/raftAppliedIndex",
            "/dbSizeInUse",
        ] {
            blank(v, field);
        }
        // etcd 3.4 lacks the 3.5+ fields QuantyKube (3.6 and 3.7's API) sends.
        if let Some(map) = v.as_object_mut() {
            for field in ["storageVersion", "dbSizeQuota", "downgradeInfo"] {
                map.remove(field);
            }
        }
    }
    fn hash(v: &mut Value) {
        blank(v, "/hash");
    }
    // etcd 3.4 answers Alarm without a header; 3.5+ (and QuantyKube) with a full one.
    fn alarm(v: &mut Value) {
        if let Some(map) = v.as_object_mut() {
            map.remove("header");
        }
    }
    let user = json!({"name": "alice", "password": "s3cret"});
    let cases = vec![
        with(
            case("/v3/lease/grant", json!({"TTL": 60, "ID": 1000})),
            lease_id,
        ),
        case("/v3/lease/grant", json!({"TTL": 60, "ID": 1000})),
        with(case("/v3/lease/timetolive", json!({"ID": 1000})), |v| {
            blank(v, "/TTL")
        }),
        with(
            case(
                "/v3/kv/lease/timetolive",
                json!({"ID": "1000", "keys": true}),
            ),
            |v| blank(v, "/TTL"),
        ),
        case("/v3/lease/timetolive", json!({"ID": 999})),
        case(
            "/v3/kv/put",
            json!({"key": b64("l"), "value": b64("v"), "lease": 1000}),
        ),
        with(
            case("/v3/lease/timetolive", json!({"ID": 1000, "keys": true})),
            |v| blank(v, "/TTL"),
        ),
        case("/v3/lease/leases", json!({})),
        case("/v3/kv/lease/leases", json!({})),
        case("/v3/lease/revoke", json!({"ID": 1000})),
        case("/v3/kv/lease/revoke", json!({"ID": 1000})),
        case("/v3/kv/range", json!({"key": b64("l")})),
        with(case("/v3/cluster/member/list", json!({})), members),
        case("/v3/cluster/member/remove", json!({"ID": "1"})),
        case(
            "/v3/cluster/member/update",
            json!({"ID": 1, "peerURLs": ["http://127.0.0.1:1"]}),
        ),
        case("/v3/cluster/member/promote", json!({"ID": 1})),
        case("/v3/cluster/member/add", json!({"peerURLs": ["not a url"]})),
        with(case("/v3/maintenance/status", json!({})), status),
        with(raw_case("/v3/maintenance/status", b""), status),
        with(case("/v3/maintenance/alarm", json!({})), alarm),
        with(
            case("/v3/maintenance/alarm", json!({"action": "GET"})),
            alarm,
        ),
        case("/v3/maintenance/defragment", json!({})),
        case(
            "/v3/maintenance/transfer-leadership",
            json!({"targetID": "12345"}),
        ),
        with(case("/v3/maintenance/hash", json!({})), hash),
        case("/v3/auth/user/add", user.clone()),
        case("/v3/auth/user/add", user.clone()),
        case("/v3/auth/user/get", json!({"name": "alice"})),
        case("/v3/auth/user/get", json!({"name": "bob"})),
        case("/v3/auth/role/add", json!({"name": "readers"})),
        case(
            "/v3/auth/role/grant",
            json!({"name": "readers", "perm": {"permType": "READ", "key": b64("a"), "range_end": b64("b")}}),
        ),
        case("/v3/auth/role/get", json!({"role": "readers"})),
        case(
            "/v3/auth/user/grant",
            json!({"user": "alice", "role": "readers"}),
        ),
        case("/v3/auth/user/list", json!({})),
        case("/v3/auth/role/list", json!({})),
        case("/v3/auth/enable", json!({})),
        case(
            "/v3/auth/authenticate",
            json!({"name": "alice", "password": "wrong"}),
        ),
        case(
            "/v3/auth/user/revoke",
            json!({"name": "alice", "role": "readers"}),
        ),
        case(
            "/v3/auth/role/revoke",
            json!({"role": "readers", "key": b64("a"), "range_end": b64("b")}),
        ),
        case("/v3/auth/role/delete", json!({"role": "readers"})),
        case(
            "/v3/auth/user/changepw",
            json!({"name": "alice", "password": "other"}),
        ),
        case("/v3/auth/user/delete", json!({"name": "alice"})),
    ];
    compare(cases).await;
}
