//! What each fuzz target does with its bytes: every parser of QuantyKube that the
//! network or the disk feeds, called as the server calls it.
//!
//! `fuzz/` (a cargo-fuzz crate, outside the workspace) runs each function under
//! libFuzzer; `tests/replay.rs` runs each over its corpus (`fuzz/corpus/<target>/`) and
//! its regressions (`fuzz/regressions/<target>/`) in `make test`, so a fixed finding
//! stays fixed. A target must never panic, hang or allocate without bound on any
//! input: each of those is a finding. The targets never reach a network and never
//! write outside a temporary directory.
//!
//! The first byte of an input often chooses what the rest is (a route, a message
//! type): libFuzzer learns such selectors quickly, and one target then covers a whole
//! family of parsers.

use std::io::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use prost::Message as _;
use prost_reflect::DynamicMessage;
use quantykube::http::gateway::go_json::stream::{Next, ValueStream};
use quantykube::http::gateway::{jsonpb, routes};
use quantykube::proto::etcdserverpb as pb;

/// What a target does with one input.
pub type Target = fn(&[u8]);

/// Every target, by the name its corpus directory and its `fuzz/fuzz_targets/` file
/// have.
pub const TARGETS: &[(&str, Target)] = &[
    ("gateway_body", gateway_body),
    ("grpc_request", grpc_request),
    ("config", config),
    ("bbolt_file", bbolt_file),
    ("snapshot_import", snapshot_import),
    ("etcd_wal", etcd_wal),
    ("transfer_file", transfer_file),
    ("raft_message", raft_message),
    ("jwt_token", jwt_token),
    ("jwt_keys", jwt_keys),
    ("admin_request", admin_request),
];

/// The first byte, and the rest.
fn split(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (*first, rest),
        None => (0, data),
    }
}

/// The JSON gateway's request body for the route the first byte picks, read as the
/// gateway reads it: Go's `json.Decoder` over the body in pieces (the second byte sets
/// the piece size), each value decoded as the route's request message, and a decoded
/// message encoded back. For the etcd KV routes the message then passes the same
/// validation a gRPC request does.
pub fn gateway_body(data: &[u8]) {
    let (route, rest) = split(data);
    let (piece, body) = split(rest);
    let route = routes::ROUTES[usize::from(route) % routes::ROUTES.len()];
    let Some(input) = gateway_input(route.method) else {
        return;
    };
    let mut values = ValueStream::default();
    let mut decoded = Vec::new();
    for chunk in body.chunks(usize::from(piece).max(1)) {
        values.push(chunk);
        loop {
            match values.next(false) {
                Next::Value(value) => decoded.push(value),
                Next::NeedMore | Next::End => break,
                Next::Error(_) => return finish(decoded, &input, route.method),
            }
        }
    }
    while let Next::Value(value) = values.next(true) {
        decoded.push(value);
    }
    finish(decoded, &input, route.method)
}

fn finish(values: Vec<Vec<u8>>, input: &prost_reflect::MessageDescriptor, method: &str) {
    for value in values {
        if let Ok(message) = jsonpb::decode(&value, input) {
            let _ = jsonpb::encode(&message);
            validate_dynamic(&message, method);
        }
    }
}

/// The request message of a gateway route's gRPC method.
fn gateway_input(method: &str) -> Option<prost_reflect::MessageDescriptor> {
    let (service, method) = method.trim_start_matches('/').split_once('/')?;
    let pool = quantykube::proto::descriptors();
    let found = pool
        .get_service_by_name(service)?
        .methods()
        .find(|m| m.name() == method)?;
    Some(found.input())
}

/// A gateway message as the gRPC service receives it: encoded, then decoded by prost.
fn validate_dynamic(message: &DynamicMessage, method: &str) {
    let bytes = message.encode_to_vec();
    let selector = match method {
        "/etcdserverpb.KV/Range" => 0,
        "/etcdserverpb.KV/Put" => 1,
        "/etcdserverpb.KV/DeleteRange" => 2,
        "/etcdserverpb.KV/Txn" => 3,
        _ => return,
    };
    grpc_decoded(selector, &bytes);
}

/// The Txn operation limit etcd applies by default (`--max-txn-ops`).
const MAX_TXN_OPS: usize = 128;

/// An etcd request as prost decodes it from a gRPC message (the first byte picks the
/// type), then the checks the service makes before anything is proposed.
pub fn grpc_request(data: &[u8]) {
    let (selector, bytes) = split(data);
    grpc_decoded(selector, bytes);
}

fn grpc_decoded(selector: u8, bytes: &[u8]) {
    use quantykube::api::validate;
    match selector % 12 {
        0 => {
            if let Ok(r) = pb::RangeRequest::decode(bytes) {
                let _ = validate::range(&r);
                let _ = validate::range_stream(&r);
            }
        }
        1 => {
            if let Ok(r) = pb::PutRequest::decode(bytes) {
                let _ = validate::put(&r);
            }
        }
        2 => {
            if let Ok(r) = pb::DeleteRangeRequest::decode(bytes) {
                let _ = validate::delete_range(&r);
            }
        }
        3 => {
            if let Ok(r) = pb::TxnRequest::decode(bytes) {
                let _ = validate::txn(&r, MAX_TXN_OPS);
                let _ = validate::txn(&r, usize::MAX);
            }
        }
        4 => drop(pb::CompactionRequest::decode(bytes)),
        5 => drop(pb::WatchRequest::decode(bytes)),
        6 => drop(pb::LeaseGrantRequest::decode(bytes)),
        7 => drop(pb::LeaseKeepAliveRequest::decode(bytes)),
        8 => drop(pb::MemberAddRequest::decode(bytes).map(|r| {
            let _ = quantykube::api::cluster::peer_urls(&r.peer_ur_ls);
        })),
        9 => drop(pb::AuthUserAddRequest::decode(bytes)),
        10 => drop(pb::AuthRoleGrantPermissionRequest::decode(bytes)),
        _ => {
            // What the log carries: the command envelope every member decodes.
            drop(quantykube::proto::command::Command::decode(bytes));
        }
    }
}

/// The configuration a member starts from: a YAML config file (up to the first NUL)
/// and command-line flags (the NUL-separated parts after it), parsed as `quantykube`
/// parses them, the file read through the parser's own reader hook.
pub fn config(data: &[u8]) {
    let mut parts = data.split(|b| *b == 0);
    let yaml = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let mut args = vec![
        "quantykube".to_string(),
        "--config-file=/fuzz/config.yaml".to_string(),
    ];
    args.extend(parts.map(|p| String::from_utf8_lossy(p).into_owned()));
    let read = move |_: &std::path::Path| Ok(yaml.clone());
    let _ = quantykube::config::parse_with_files(args, &|_| None, &read);
}

/// A file on disk of `data`, unnamed (gone when closed).
fn file_of(data: &[u8]) -> Option<std::fs::File> {
    let mut file = tempfile::tempfile().ok()?;
    file.write_all(data).ok()?;
    Some(file)
}

/// etcd's snapshot file (a bbolt database): every bucket, entry and depth read, then
/// `snapshot status`, and each record of etcd's schema decoded as the import does.
pub fn bbolt_file(data: &[u8]) {
    read_bbolt(data);
    // Again with the meta pages' checksums made right after the mutation: the reader
    // refuses a meta whose checksum is wrong, which almost every mutation of a meta
    // makes it, so without this the pages behind the metas would be reached rarely.
    read_bbolt(&with_meta_checksums(data));
}

/// `data` with the checksum of each meta page set to what its bytes give (bbolt's
/// layout, which the bbolt crate owns).
pub fn with_meta_checksums(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    quantykube_bbolt::reseal_meta_checksums(&mut out);
    out
}

fn read_bbolt(data: &[u8]) {
    use quantykube::backup::schema;
    let Some(file) = file_of(data) else {
        return;
    };
    let Ok(db) = quantykube_bbolt::Database::open(file, data.len() as u64) else {
        return;
    };
    let _ = quantykube::backup::file::status(&db);
    let Ok(buckets) = db.buckets() else {
        return;
    };
    for name in buckets {
        let Ok(Some(bucket)) = db.bucket(&name) else {
            continue;
        };
        let _ = bucket.depth();
        for entry in bucket.entries() {
            let Ok((key, value)) = entry else {
                break;
            };
            let _ = schema::parse_revision_key(&key);
            let _ = schema::parse_revision_key(&value);
            let _ = schema::parse_key_value(&value);
            let _ = schema::parse_lease(&value);
            let _ = schema::parse_alarm(&key);
        }
    }
}

/// `snapshot restore`'s import of an etcd snapshot file into a new, empty store.
pub fn snapshot_import(data: &[u8]) {
    // The meta checksums made right, as in `bbolt_file`: a file the reader refuses
    // would never reach the import.
    let data = &with_meta_checksums(data);
    let Some(file) = file_of(data) else {
        return;
    };
    let Ok(db) = quantykube_bbolt::Database::open(file, data.len() as u64) else {
        return;
    };
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let Ok(rocks) = quantykube::store::open_database(dir.path(), &[]) else {
        return;
    };
    let Ok(store) = quantykube::store::RevisionStore::new(rocks) else {
        return;
    };
    let _ = quantykube::backup::import::import(&db, &store);
}

/// An etcd member's WAL, as a member started on etcd's data dir reads it, and every
/// entry it holds translated as the conversion would replay it.
pub fn etcd_wal(data: &[u8]) {
    use quantykube::backup::etcd_entries::{translate, Replay};
    let Ok(wal) = quantykube::backup::etcd_wal::parse(data) else {
        return;
    };
    let replay = Replay {
        min_lease_ttl: 2,
        // bcrypt's cheapest: the cost is not what is fuzzed.
        bcrypt_cost: 4,
    };
    for entry in wal.entries.values() {
        let _ = translate(&entry.data, &replay);
    }
}

/// A snapshot file as a follower receives it from the leader (the chunk stream, once
/// written): its trailer checked, then its header read.
pub fn transfer_file(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("received.snap");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let _ = quantykube::store::verify_transfer_file(&path);
    let _ = quantykube::store::read_snapshot_meta(&path);
}

/// A raft peer's message, as the peer server decodes it (the first byte picks which),
/// and every log entry's command as the state machine decodes it.
pub fn raft_message(data: &[u8]) {
    use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
    use quantykube_raft::codec::decode;
    use quantykube_raft::types::{SnapshotMeta, TypeConfig, Vote};
    let (selector, bytes) = split(data);
    match selector % 5 {
        0 => {
            if let Ok(rpc) = decode::<AppendEntriesRequest<TypeConfig>>("append", bytes) {
                for entry in rpc.entries {
                    if let openraft::EntryPayload::Normal(command) = entry.payload {
                        drop(quantykube::proto::command::Command::decode(command.0));
                    }
                }
            }
        }
        1 => drop(decode::<VoteRequest<TypeConfig>>("vote", bytes)),
        2 => drop(decode::<TransferLeaderRequest<TypeConfig>>(
            "transfer", bytes,
        )),
        3 => drop(decode::<Vote>("vote", bytes)),
        _ => drop(decode::<SnapshotMeta>("meta", bytes)),
    }
}

/// What `jwt_token` verifies with: one provider per sign method, from the keys in
/// `fuzz/keys/` (test keys made for the fuzzer, never used anywhere else).
fn jwt_providers() -> &'static [quantykube::auth::jwt::JwtTokens] {
    use quantykube::config::token_options::SignMethod;
    static PROVIDERS: OnceLock<Vec<quantykube::auth::jwt::JwtTokens>> = OnceLock::new();
    PROVIDERS.get_or_init(|| {
        let key = |name: &str| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/keys");
            std::fs::read(dir.join(name)).ok()
        };
        let ttl = Duration::from_secs(300);
        [
            (SignMethod::HS256, "hmac.key"),
            (SignMethod::RS256, "rsa.pem"),
            (SignMethod::PS256, "rsa.pem"),
            (SignMethod::ES256, "p256.pem"),
            (SignMethod::ES512, "p521.pem"),
            (SignMethod::EdDSA, "ed25519.pem"),
        ]
        .into_iter()
        .filter_map(|(method, name)| {
            quantykube::auth::jwt::JwtTokens::from_key_bytes(method, ttl, key(name), None).ok()
        })
        .collect()
    })
}

/// A token as the server verifies it (the first byte picks the provider); a token
/// that verifies is then checked to be one a provider signed.
pub fn jwt_token(data: &[u8]) {
    let providers = jwt_providers();
    if providers.is_empty() {
        return;
    }
    let (which, token) = split(data);
    let provider = &providers[usize::from(which) % providers.len()];
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    if let Ok(token) = std::str::from_utf8(token) {
        let _ = provider.verify(token, now);
    }
    // A signed token always verifies: the round trip must hold for any user name.
    let name = String::from_utf8_lossy(token);
    if let Ok(signed) = provider.sign(&name, 7, now) {
        assert!(
            provider.verify(&signed, now).is_some(),
            "a signed token must verify"
        );
    }
}

/// PEM labels of the key files golang-jwt reads, for `jwt_keys`' DER inputs.
const KEY_LABELS: [&str; 6] = [
    "PRIVATE KEY",
    "EC PRIVATE KEY",
    "RSA PRIVATE KEY",
    "PUBLIC KEY",
    "RSA PUBLIC KEY",
    "CERTIFICATE",
];

/// A key file of `--auth-token jwt,priv-key=...,pub-key=...`. The first byte picks
/// whether it is the public key (bit 0), the sign method (bits 1-3) and the file: the
/// rest as it is (bits 4-6 zero), or the rest as DER inside a PEM block of the label
/// they pick, so that mutations reach the DER decoders without breaking the base64.
pub fn jwt_keys(data: &[u8]) {
    let (selector, rest) = split(data);
    let wrap = usize::from(selector >> 4 & 7);
    let file = match wrap.checked_sub(1).and_then(|i| KEY_LABELS.get(i)) {
        Some(label) => pem(label, rest),
        None => rest.to_vec(),
    };
    key_file(selector & 0x0f, file);
}

/// `der` in a PEM block labelled `label`.
pub fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    format!("-----BEGIN {label}-----\n{body}\n-----END {label}-----\n").into_bytes()
}

fn key_file(selector: u8, file: Vec<u8>) {
    use quantykube::config::token_options::SignMethod;
    const METHODS: [SignMethod; 6] = [
        SignMethod::RS256,
        SignMethod::PS384,
        SignMethod::ES256,
        SignMethod::ES384,
        SignMethod::ES512,
        SignMethod::EdDSA,
    ];
    let method = METHODS[usize::from(selector >> 1) % METHODS.len()];
    let file = Some(file);
    let ttl = Duration::from_secs(300);
    let _ = if selector & 1 == 0 {
        quantykube::auth::jwt::JwtTokens::from_key_bytes(method, ttl, file, None)
    } else {
        quantykube::auth::jwt::JwtTokens::from_key_bytes(method, ttl, None, file)
    };
}

/// The admin API's requests (the first byte picks the message), each field through
/// the validation its handlers use: names, object references, metadata, guards, peer
/// URLs, page sizes and page tokens.
pub fn admin_request(data: &[u8]) {
    use quantykube::admin::{paging, validate};
    use quantykube::proto::admin_v1 as admin;
    let (selector, bytes) = split(data);
    match selector % 5 {
        0 => {
            if let Ok(r) = admin::CreateMemberRequest::decode(bytes) {
                if let Some(member) = r.member {
                    let _ = validate::identity("member.metadata", member.metadata.as_ref());
                    let _ = validate::member_urls("member.peer_urls", &member.peer_urls, true);
                    if let Some(metadata) = member.metadata {
                        let _ =
                            validate::guards("member.metadata", &metadata.uid, metadata.version);
                    }
                }
            }
        }
        1 => {
            if let Ok(r) = admin::DeleteMemberRequest::decode(bytes) {
                let _ = validate::object_ref("member", r.member.as_ref());
                if let Some(options) = r.options {
                    let _ = validate::guards("options", &options.uid, options.version);
                }
            }
        }
        2 => {
            if let Ok(r) = admin::ListMembersRequest::decode(bytes) {
                let _ = paging::page_size(r.page_size);
                let _ = paging::start_after(&r.page_token);
            }
        }
        3 => {
            if let Ok(r) = admin::CreateSnapshotRequest::decode(bytes) {
                if let Some(snapshot) = r.snapshot {
                    let _ = validate::identity("snapshot.metadata", snapshot.metadata.as_ref());
                }
            }
        }
        _ => {
            // A page token as a client may send it, and the round trip of a name.
            let token = String::from_utf8_lossy(bytes);
            let _ = paging::start_after(&token);
            if validate::resource_name("name", &token).is_ok() {
                let again = paging::start_after(&paging::token_after(&token));
                assert_eq!(again.ok().flatten().as_deref(), Some(token.as_ref()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fuzz_file(path: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz")
            .join(path);
        std::fs::read(path).expect("fuzz file")
    }

    /// The checksum fix-up knows bbolt's layout: a file etcd wrote is left as it was,
    /// and a file whose metas were changed is refused until it is applied.
    #[test]
    fn meta_checksums_are_bbolts() {
        let file = fuzz_file("corpus/bbolt_file/etcd-3.4.snap");
        assert_eq!(with_meta_checksums(&file), file);
        let mut changed = file.clone();
        // Each meta's txid (after the 16-byte page header and 48 bytes of meta).
        changed[16 + 48] ^= 1;
        changed[4096 + 16 + 48] ^= 1;
        let opens = |bytes: &[u8]| {
            let file = file_of(bytes).expect("temp file");
            quantykube_bbolt::Database::open(file, bytes.len() as u64).is_ok()
        };
        assert!(!opens(&changed));
        assert!(opens(&with_meta_checksums(&changed)));
    }

    /// A key's DER inside `pem` reads as the key file itself does.
    #[test]
    fn pem_wraps_der_as_key_files_have_it() {
        use quantykube::auth::jwt::JwtTokens;
        use quantykube::config::token_options::SignMethod;
        let text = String::from_utf8(fuzz_file("keys/p256.pem")).expect("PEM text");
        let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
        use base64::Engine as _;
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("base64");
        let ttl = Duration::from_secs(60);
        let wrapped = pem("PRIVATE KEY", &der);
        assert!(JwtTokens::from_key_bytes(SignMethod::ES256, ttl, Some(wrapped), None).is_ok());
    }
}
