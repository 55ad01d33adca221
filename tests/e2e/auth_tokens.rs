//! Auth (issue 17): JWT tokens (`--auth-token jwt,...`, RS256 and ES256 keys made
//! with the `openssl` CLI), forged tokens, certificate common names as identities
//! with `--client-cert-auth`, and JWTs of etcd 3.4 accepted by QuantyKube and back.
//!
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`).
//!
//! What etcd 3.4 puts in a JWT (golang-jwt, `jwt.MapClaims`): header
//! `{"alg":"RS256","typ":"JWT"}`, claims `{"exp":<unix seconds>,"revision":<auth
//! revision>,"username":"<name>"}` (keys sorted, as Go writes a map), base64url
//! without padding. A JWT carries the auth revision it was issued at: after any auth
//! change it is refused as `etcdserver: revision of auth store is old`.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use etcd_client::{LeaseTimeToLiveOptions, Permission, PutOptions};
use sha2::{Digest, Sha256};
use tonic::Code;

use crate::auth_advisories_calls::keep_alive_once;
use crate::auth_cluster::alice;
use crate::auth_support::{
    assert_denied, assert_status, b64url_encode, ec_keys, enable_auth, jwt_parts, msg, ok, openssl,
    root_client, rsa_keys, Rpc, ROOT_PW,
};
use crate::certs::Pki;
use crate::harness::{find_on_path, loopback_ip, ClientTls, Cluster, ClusterOptions, Target};
use crate::raw;
use crate::support::connect::Connect;
use crate::support::status::assert_code_message;

/// `--auth-token` for JWTs signed with `method` by the key pair `(private, public)`.
fn jwt_flag(method: &str, keys: &(String, String)) -> String {
    format!(
        "--auth-token=jwt,pub-key={},priv-key={},sign-method={method},ttl=5m",
        keys.1, keys.0
    )
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// A token's parts with one of them replaced.
fn with_part(token: &str, index: usize, part: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    parts[index] = part.to_owned();
    parts.join(".")
}

/// HMAC-SHA256, for a token signed HS256 with the public key as the secret.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut k = if key.len() > 64 {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    k.resize(64, 0);
    let inner: Vec<u8> = k
        .iter()
        .map(|b| b ^ 0x36)
        .chain(message.iter().copied())
        .collect();
    let inner = Sha256::digest(&inner);
    let outer: Vec<u8> = k
        .iter()
        .map(|b| b ^ 0x5c)
        .chain(inner.iter().copied())
        .collect();
    Sha256::digest(&outer).to_vec()
}

/// A correctly signed RS256 token with `claims`, signed by `openssl dgst`.
fn sign_rs256(dir: &Path, private: &str, claims: &serde_json::Value) -> String {
    let input = format!(
        "{}.{}",
        b64url_encode(br#"{"alg":"RS256","typ":"JWT"}"#),
        b64url_encode(claims.to_string().as_bytes())
    );
    let input_file = dir.join("jwt-input");
    let sig_file = dir.join("jwt-sig");
    std::fs::write(&input_file, &input).expect("write input");
    openssl(&[
        "dgst",
        "-sha256",
        "-sign",
        private,
        "-out",
        &sig_file.display().to_string(),
        &input_file.display().to_string(),
    ]);
    let sig = std::fs::read(&sig_file).expect("read signature");
    format!("{input}.{}", b64url_encode(&sig))
}

/// Logs alice in on member 0, checks the token's header and claims, and that it serves
/// on every member; answers the token and its claims.
async fn jwt_login(cluster: &Cluster, alg: &str) -> (String, serde_json::Value) {
    let before = now();
    let token = Rpc::connect(&cluster.endpoint(0))
        .await
        .authenticate("alice", "alice-pw")
        .await
        .expect("alice logs in");
    let (header, claims) = jwt_parts(&token);
    assert_eq!(header, serde_json::json!({"alg": alg, "typ": "JWT"}));
    let mut names: Vec<&str> = claims
        .as_object()
        .expect("claims object")
        .keys()
        .map(String::as_str)
        .collect();
    names.sort();
    assert_eq!(names, ["exp", "revision", "username"]);
    assert_eq!(claims["username"], "alice");
    assert!(claims["revision"].as_u64().expect("revision number") > 0);
    let exp = claims["exp"].as_i64().expect("exp number");
    // The exact bytes, as Go's encoding/json writes a map: keys sorted, no spaces.
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(
        String::from_utf8(crate::auth_support::b64url_decode(parts[0])).unwrap(),
        format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#)
    );
    assert_eq!(
        String::from_utf8(crate::auth_support::b64url_decode(parts[1])).unwrap(),
        format!(
            r#"{{"exp":{exp},"revision":{},"username":"alice"}}"#,
            claims["revision"]
        )
    );
    assert!(!parts[0].contains('=') && !parts[1].contains('=') && !parts[2].contains('='));
    assert!(
        (before + 300..=now() + 301).contains(&exp),
        "exp {exp} is not 5 minutes from now ({before})"
    );
    for i in 0..3 {
        let mut rpc = Rpc::connect(&cluster.endpoint(i))
            .await
            .with_token(Some(&token));
        ok(
            rpc.put(raw::put(&format!("a/{i}"), "x")).await,
            "put with a JWT",
        );
        ok(rpc.range(raw::range("shared")).await, "read with a JWT");
        assert_denied(rpc.range(raw::range("b")).await, "range b with a JWT");
    }
    (token, claims)
}

/// Asserts `token` is refused as an invalid auth token on every member.
async fn assert_invalid(cluster: &Cluster, token: &str, what: &str) {
    for i in 0..3 {
        let mut rpc = Rpc::connect(&cluster.endpoint(i))
            .await
            .with_token(Some(token));
        assert_status(
            rpc.range(raw::range("shared")).await,
            Code::Unauthenticated,
            msg::INVALID_AUTH_TOKEN,
            &format!("{what} on member {i}"),
        );
    }
}

#[tokio::test]
async fn auth_jwt_rs256() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = rsa_keys(dir.path());
    let cluster = ClusterOptions::new(3)
        .arg(jwt_flag("RS256", &keys))
        .start()
        .await;
    alice(&cluster).await;
    let (token, claims) = jwt_login(&cluster, "RS256").await;
    let revision = claims["revision"].as_u64().unwrap();
    // The auth revision starts at 1 and each change adds one (role add root, user add
    // root, grant root, role add a, two permissions, user add alice, grant a: 8;
    // AuthEnable adds none).
    assert_eq!(revision, 9);

    // Forgeries.
    let parts: Vec<&str> = token.split('.').collect();
    let mut sig = parts[2].as_bytes().to_vec();
    sig[10] = if sig[10] == b'A' { b'B' } else { b'A' };
    assert_invalid(
        &cluster,
        &with_part(&token, 2, std::str::from_utf8(&sig).unwrap()),
        "signature changed",
    )
    .await;
    let mut root_claims = claims.clone();
    root_claims["username"] = "root".into();
    let as_root = with_part(
        &token,
        1,
        &b64url_encode(root_claims.to_string().as_bytes()),
    );
    assert_invalid(&cluster, &as_root, "payload changed").await;
    assert_invalid(
        &cluster,
        &format!("{}.{}", parts[0], parts[1]),
        "no signature",
    )
    .await;
    assert_invalid(&cluster, &token[..token.len() / 2], "truncated").await;
    let none = format!(
        "{}.{}.",
        b64url_encode(br#"{"alg":"none","typ":"JWT"}"#),
        b64url_encode(root_claims.to_string().as_bytes())
    );
    assert_invalid(&cluster, &none, "alg none").await;
    let hs_input = format!(
        "{}.{}",
        b64url_encode(br#"{"alg":"HS256","typ":"JWT"}"#),
        parts[1]
    );
    let public = std::fs::read(&keys.1).expect("public key");
    let hs = format!(
        "{hs_input}.{}",
        b64url_encode(&hmac_sha256(&public, hs_input.as_bytes()))
    );
    assert_invalid(&cluster, &hs, "HS256 with the public key").await;
    // Signed with the right key but expired.
    let expired = sign_rs256(
        dir.path(),
        &keys.0,
        &serde_json::json!({"exp": now() - 10, "revision": revision, "username": "alice"}),
    );
    assert_invalid(&cluster, &expired, "expired").await;
    // Signed with the right key, by someone holding it: a token of our own making works.
    let made = sign_rs256(
        dir.path(),
        &keys.0,
        &serde_json::json!({"exp": now() + 60, "revision": revision, "username": "alice"}),
    );
    let mut rpc = Rpc::connect(&cluster.endpoint(1))
        .await
        .with_token(Some(&made));
    ok(
        rpc.range(raw::range("shared")).await,
        "a correctly signed token",
    );
    // For a user that does not exist: a valid token, and no permission.
    let ghost = sign_rs256(
        dir.path(),
        &keys.0,
        &serde_json::json!({"exp": now() + 60, "revision": revision, "username": "ghost"}),
    );
    let mut rpc = Rpc::connect(&cluster.endpoint(1))
        .await
        .with_token(Some(&ghost));
    assert_denied(rpc.range(raw::range("shared")).await, "a token of no user");

    // Any auth change makes every JWT issued before it stale.
    let root = root_client(&cluster, 2).await;
    root.auth_client()
        .role_add("another")
        .await
        .expect("role add");
    for i in 0..3 {
        let mut rpc = Rpc::connect(&cluster.endpoint(i))
            .await
            .with_token(Some(&token));
        assert_status(
            rpc.range(raw::range("shared")).await,
            Code::InvalidArgument,
            msg::AUTH_OLD_REVISION,
            "a JWT older than the auth store",
        );
        assert_status(
            rpc.put(raw::put("a/stale", "x")).await,
            Code::InvalidArgument,
            msg::AUTH_OLD_REVISION,
            "a JWT older than the auth store",
        );
    }
    let (_, claims) = jwt_login(&cluster, "RS256").await;
    assert_eq!(claims["revision"].as_u64(), Some(revision + 1));
    // Still healthy after all that.
    for i in 0..3 {
        root_client(&cluster, i)
            .await
            .put("after", "forgeries", None)
            .await
            .expect("root put");
    }
}

#[tokio::test]
async fn auth_jwt_es256() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = ec_keys(dir.path());
    let cluster = ClusterOptions::new(3)
        .arg(jwt_flag("ES256", &keys))
        .start()
        .await;
    alice(&cluster).await;
    let (token, _) = jwt_login(&cluster, "ES256").await;
    let sig = crate::auth_support::b64url_decode(token.rsplit('.').next().unwrap());
    // ES256 signatures are r || s, 64 bytes (not DER).
    assert_eq!(sig.len(), 64);
    let mut forged = sig.clone();
    forged[5] ^= 0x01;
    assert_invalid(
        &cluster,
        &with_part(&token, 2, &b64url_encode(&forged)),
        "ES256 signature changed",
    )
    .await;
    // A second login gives another token (ECDSA signatures are randomised).
    let again = Rpc::connect(&cluster.endpoint(1))
        .await
        .authenticate("alice", "alice-pw")
        .await
        .expect("log in");
    assert_ne!(again, token);
}

/// https client URLs with `--client-cert-auth`; the harness's clients use the API
/// server's certificate (a CN that is no user).
fn cert_cluster(pki: &Pki) -> ClusterOptions {
    let ca = pki.ca_cert();
    ClusterOptions::new(3)
        .https_clients(ClientTls::new(&ca).identity(
            pki.pki("apiserver-etcd-client.crt"),
            pki.pki("apiserver-etcd-client.key"),
        ))
        .args([
            format!("--cert-file={}", pki.etcd("server.crt").display()),
            format!("--key-file={}", pki.etcd("server.key").display()),
            format!("--trusted-ca-file={}", ca.display()),
            "--client-cert-auth=true".to_owned(),
        ])
}

#[tokio::test]
async fn auth_certificate_common_name_is_the_user() {
    let pki = Pki::new(loopback_ip());
    let alice_cert = pki.issue_client("alice-client", "alice");
    let root_cert = pki.issue_client("root-client", "root");
    let cluster = cert_cluster(&pki).start().await;
    alice(&cluster).await;
    let tls_of =
        |cert: &crate::certs::Issued| ClientTls::new(pki.ca_cert()).identity(&cert.cert, &cert.key);
    let endpoints = cluster.endpoints();

    // No token: the certificate's CN is the user.
    let alice_tls = tls_of(&alice_cert);
    let mut as_alice = Connect::new()
        .tls(Some(&alice_tls))
        .try_to(&endpoints)
        .await
        .expect("connect with alice's certificate");
    as_alice
        .put("a/by-cert", "x", None)
        .await
        .expect("alice puts a/");
    as_alice
        .get("shared", None)
        .await
        .expect("alice reads shared");
    crate::harness::assert_grpc_error(
        as_alice.get("b", None).await,
        Code::PermissionDenied,
        msg::PERMISSION_DENIED,
    );
    crate::harness::assert_grpc_error(
        as_alice.put("shared", "x", None).await,
        Code::PermissionDenied,
        msg::PERMISSION_DENIED,
    );
    // A CN that is no user: denied (not "user name is empty").
    let mut harness = cluster.client(0).await;
    crate::harness::assert_grpc_error(
        harness.get("shared", None).await,
        Code::PermissionDenied,
        msg::PERMISSION_DENIED,
    );
    // CN root: root, also for the Auth RPCs.
    let root_tls = tls_of(&root_cert);
    let mut as_root = Connect::new()
        .tls(Some(&root_tls))
        .try_to(&endpoints)
        .await
        .expect("connect with root's certificate");
    as_root.get("b", None).await.expect("root reads b");
    as_root
        .auth_client()
        .user_list()
        .await
        .expect("root lists users");

    // A token takes precedence over the CN, both ways.
    let mut root_token_alice_cert = Connect::new()
        .user("root", ROOT_PW)
        .tls(Some(&alice_tls))
        .try_to(&endpoints)
        .await
        .expect("root's login over alice's certificate");
    root_token_alice_cert
        .get("b", None)
        .await
        .expect("root's token reads b");
    let mut alice_token_root_cert = Connect::new()
        .user("alice", "alice-pw")
        .tls(Some(&root_tls))
        .try_to(&endpoints)
        .await
        .expect("alice's login over root's certificate");
    crate::harness::assert_grpc_error(
        alice_token_root_cert.get("b", None).await,
        Code::PermissionDenied,
        msg::PERMISSION_DENIED,
    );
    alice_token_root_cert
        .get("shared", None)
        .await
        .expect("alice's token reads shared");
}

/// A JWT that one server issued is accepted by the other, both ways, given the same
/// key files and the same auth changes (so the same auth revision). Runs only against
/// QuantyKube, with etcd 3.4 on `PATH` as the other server.
#[tokio::test]
async fn auth_jwt_crosses_between_etcd_and_quantykube() {
    if Target::from_env() != Target::Quantykube || find_on_path("etcd").is_none() {
        eprintln!("skipped: needs QK_TEST_TARGET=quantykube and etcd on PATH");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = rsa_keys(dir.path());
    let etcd = ClusterOptions::new(1)
        .target(Target::Etcd)
        .arg(jwt_flag("RS256", &keys))
        .start()
        .await;
    let qk = ClusterOptions::new(1)
        .target(Target::Quantykube)
        .arg(jwt_flag("RS256", &keys))
        .start()
        .await;
    for cluster in [&etcd, &qk] {
        enable_auth(cluster).await;
        let root = root_client(cluster, 0).await;
        let mut auth = root.auth_client();
        auth.role_add("a").await.expect("role add");
        auth.role_grant_permission("a", etcd_client::Permission::read_write("a/").with_prefix())
            .await
            .expect("grant");
        auth.user_add("alice", "alice-pw", None)
            .await
            .expect("user add");
        auth.user_grant_role("alice", "a")
            .await
            .expect("grant role");
    }
    let from_etcd = Rpc::connect(&etcd.endpoint(0))
        .await
        .authenticate("alice", "alice-pw")
        .await
        .expect("etcd login");
    let from_qk = Rpc::connect(&qk.endpoint(0))
        .await
        .authenticate("alice", "alice-pw")
        .await
        .expect("quantykube login");
    assert_eq!(
        jwt_parts(&from_etcd).1["revision"],
        jwt_parts(&from_qk).1["revision"],
        "the same auth changes give the same auth revision"
    );
    assert_eq!(jwt_parts(&from_etcd).0, jwt_parts(&from_qk).0);
    let mut on_qk = Rpc::connect(&qk.endpoint(0))
        .await
        .with_token(Some(&from_etcd));
    ok(
        on_qk.put(raw::put("a/from-etcd", "x")).await,
        "etcd's JWT on quantykube",
    );
    assert_denied(
        on_qk.range(raw::range("b")).await,
        "etcd's JWT on quantykube, b",
    );
    let mut on_etcd = Rpc::connect(&etcd.endpoint(0))
        .await
        .with_token(Some(&from_qk));
    ok(
        on_etcd.put(raw::put("a/from-qk", "x")).await,
        "quantykube's JWT on etcd",
    );
    assert_denied(
        on_etcd.range(raw::range("b")).await,
        "quantykube's JWT on etcd, b",
    );
}

/// A caller known only by its certificate's Common Name keeps its lease alive, and reads
/// the lease's TTL and keys, through every member: a follower authorizes the caller
/// itself, then relays to the leader's peer port (as etcd's follower posts to the
/// leader's peer `/leases`), so the leader never needs the caller's identity.
///
/// The refusals are etcd's `checkLeaseRenew` and `checkLeaseTimeToLive`
/// (GHSA-q8m4-xhhv-38mg, fixed in 3.6.9, 3.5.28 and 3.4.42): etcd 3.4.23 predates them,
/// so against it only the calls that must pass are made.
#[tokio::test]
async fn auth_certificate_user_keeps_leases_alive_through_every_member() {
    let pki = Pki::new(loopback_ip());
    let alice_cert = pki.issue_client("alice-client", "alice");
    let reader_cert = pki.issue_client("reader-client", "reader");
    let cluster = cert_cluster(&pki).start().await;
    alice(&cluster).await;
    // `reader` may read alice's keys, not write them.
    let mut auth = root_client(&cluster, 0).await.auth_client();
    auth.role_add("r").await.expect("role add");
    auth.role_grant_permission("r", Permission::read("a/").with_prefix())
        .await
        .expect("grant");
    auth.user_add("reader", "reader-pw", None)
        .await
        .expect("user add");
    auth.user_grant_role("reader", "r")
        .await
        .expect("grant role");

    let as_cert = |cert: &crate::certs::Issued, endpoint: String| {
        let tls = ClientTls::new(pki.ca_cert()).identity(&cert.cert, &cert.key);
        async move {
            Connect::new()
                .tls(Some(&tls))
                .try_to(&[endpoint])
                .await
                .expect("connect with a client certificate")
        }
    };
    let mut alice_first = as_cert(&alice_cert, cluster.endpoint(0)).await;
    let lease = alice_first
        .lease_grant(600, None)
        .await
        .expect("alice grants a lease")
        .id();
    alice_first
        .put("a/held", "x", Some(PutOptions::new().with_lease(lease)))
        .await
        .expect("alice attaches it to a/held");

    for member in 0..3 {
        let mut as_alice = as_cert(&alice_cert, cluster.endpoint(member)).await;
        let ttl = keep_alive_once(&mut as_alice, lease)
            .await
            .unwrap_or_else(|s| panic!("alice's keepalive through member {member}: {s:?}"));
        assert_eq!(ttl, 600, "alice's keepalive through member {member}");
        let asked = as_alice
            .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
            .await
            .unwrap_or_else(|e| panic!("alice's TimeToLive through member {member}: {e}"));
        assert_eq!(
            asked.keys(),
            [b"a/held".to_vec()],
            "through member {member}"
        );
        assert!(asked.ttl() > 0, "through member {member}: {}", asked.ttl());

        if cluster.target() != Target::Quantykube {
            continue;
        }
        // Reading the keys is not writing them: no keepalive (the stream ends with the
        // refusal); the TTL with keys is allowed.
        let mut as_reader = as_cert(&reader_cert, cluster.endpoint(member)).await;
        match keep_alive_once(&mut as_reader, lease).await {
            Err(refusal) => assert_code_message(
                &refusal,
                Code::PermissionDenied,
                msg::PERMISSION_DENIED,
                &format!("reader's keepalive through member {member}"),
            ),
            Ok(ttl) => panic!("reader's keepalive through member {member}: kept alive ({ttl})"),
        }
        as_reader
            .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
            .await
            .unwrap_or_else(|e| panic!("reader's TimeToLive through member {member}: {e}"));
        // The harness's certificate names no user: neither call.
        let mut nobody = cluster.client(member).await;
        match keep_alive_once(&mut nobody, lease).await {
            Err(refusal) => assert_code_message(
                &refusal,
                Code::PermissionDenied,
                msg::PERMISSION_DENIED,
                &format!("a certificate of no user, keepalive through member {member}"),
            ),
            Ok(ttl) => panic!("no user's keepalive through member {member}: kept alive ({ttl})"),
        }
        crate::harness::assert_grpc_error(
            nobody
                .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
                .await,
            Code::PermissionDenied,
            msg::PERMISSION_DENIED,
        );
    }
}
