//! Helpers of the Auth tests (issue 17): turning auth on the way `etcdctl auth enable`
//! does, clients that log in as a user, and a raw gRPC client that sends exactly the
//! `token` metadata a test chooses (forged, expired, empty, from another member).
//!
//! Everything here was checked against etcd 3.4.23 (`QK_TEST_TARGET=etcd`).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use etcd_client::proto::{PbAuthenticateRequest, PbAuthenticateResponse};
use etcd_client::Client;
use tonic::transport::Channel;

use crate::harness::{ClientTls, Cluster, START_TIMEOUT};
use crate::support::connect::Connect;
pub use crate::support::status::assert_status;

/// The root user's password in every Auth test.
pub const ROOT_PW: &str = "root-secret";

/// etcd's messages (rpctypes), for the assertions.
pub mod msg {
    pub const ROOT_USER_NOT_EXIST: &str = "etcdserver: root user does not exist";
    pub const ROOT_ROLE_NOT_EXIST: &str = "etcdserver: root user does not have root role";
    pub const USER_ALREADY_EXIST: &str = "etcdserver: user name already exists";
    pub const USER_EMPTY: &str = "etcdserver: user name is empty";
    pub const USER_NOT_FOUND: &str = "etcdserver: user name not found";
    pub const ROLE_ALREADY_EXIST: &str = "etcdserver: role name already exists";
    pub const ROLE_NOT_FOUND: &str = "etcdserver: role name not found";
    pub const ROLE_EMPTY: &str = "etcdserver: role name is empty";
    pub const AUTH_FAILED: &str = "etcdserver: authentication failed, invalid user ID or password";
    pub const PERMISSION_DENIED: &str = "etcdserver: permission denied";
    pub const ROLE_NOT_GRANTED: &str = "etcdserver: role is not granted to the user";
    pub const PERMISSION_NOT_GRANTED: &str = "etcdserver: permission is not granted to the role";
    pub const AUTH_NOT_ENABLED: &str = "etcdserver: authentication is not enabled";
    pub const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";
    pub const INVALID_AUTH_MGMT: &str = "etcdserver: invalid auth management";
    pub const AUTH_OLD_REVISION: &str = "etcdserver: revision of auth store is old";
}

/// Creates role `root`, user `root` (password [`ROOT_PW`]) with role `root`, and turns
/// auth on, by etcd-client on member 0 (the three steps `etcdctl auth enable` takes
/// when the root role is missing).
pub async fn enable_auth(cluster: &Cluster) {
    let client = cluster.client(0).await;
    let mut auth = client.auth_client();
    auth.role_add("root").await.expect("role add root");
    auth.user_add("root", ROOT_PW, None)
        .await
        .expect("user add root");
    auth.user_grant_role("root", "root")
        .await
        .expect("grant root to root");
    auth.auth_enable().await.expect("auth enable");
}

/// An etcd-client on `endpoints` logged in as `name` (the login is an Authenticate).
pub async fn try_connect_as(
    endpoints: &[String],
    name: &str,
    password: &str,
    tls: Option<&ClientTls>,
) -> Result<Client, etcd_client::Error> {
    Connect::new()
        .user(name, password)
        .tls(tls)
        .try_to(endpoints)
        .await
}

/// As [`try_connect_as`], panicking on failure.
pub async fn connect_as(cluster: &Cluster, i: usize, name: &str, password: &str) -> Client {
    try_connect_as(&[cluster.endpoint(i)], name, password, cluster.client_tls())
        .await
        .unwrap_or_else(|e| panic!("log in as {name} on member {i}: {e}"))
}

/// An etcd-client on member `i` logged in as root.
pub async fn root_client(cluster: &Cluster, i: usize) -> Client {
    connect_as(cluster, i, "root", ROOT_PW).await
}

/// `--user root:<pw>` for etcdctl.
pub fn root_flag() -> String {
    format!("--user=root:{ROOT_PW}")
}

/// Waits until member `i` serves a linearizable read to root (the harness's own probe
/// is anonymous, which an auth-enabled member refuses), failing fast if it exits.
pub async fn wait_ready_as_root(cluster: &mut Cluster, i: usize) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if cluster.poll_exit(i).is_some() {
            panic!("member {i} exited while starting:{}", cluster.log_tails());
        }
        let endpoint = cluster.endpoint(i);
        let connect = Connect::new().quick().user("root", ROOT_PW);
        let last = match connect.try_to([endpoint]).await {
            Ok(mut c) => match c.get("auth-readiness-probe", None).await {
                Ok(_) => return,
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            panic!(
                "member {i} not ready for root: {last}{}",
                cluster.log_tails()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A raw gRPC client of one plain-http member that sends the `token` metadata it is
/// given (or none), for tokens etcd-client would not send as they are.
#[derive(Clone)]
pub struct Rpc {
    grpc: tonic::client::Grpc<Channel>,
    pub token: Option<String>,
}

impl Rpc {
    pub async fn connect(endpoint: &str) -> Rpc {
        Rpc {
            grpc: tonic::client::Grpc::new(crate::raw::channel(endpoint).await),
            token: None,
        }
    }

    /// The same connection, sending `token` from now on.
    pub fn with_token(&self, token: Option<&str>) -> Rpc {
        Rpc {
            grpc: self.grpc.clone(),
            token: token.map(str::to_owned),
        }
    }

    /// One unary call of `path` (e.g. `/etcdserverpb.KV/Range`).
    pub async fn call<Req, Resp>(
        &mut self,
        path: &'static str,
        req: Req,
    ) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        crate::support::grpc::unary(&mut self.grpc, path, req, self.token.as_deref()).await
    }

    /// Authenticate (no token sent), answering the token.
    pub async fn authenticate(
        &mut self,
        name: &str,
        password: &str,
    ) -> Result<String, tonic::Status> {
        let mut bare = self.with_token(None);
        let resp: PbAuthenticateResponse = bare
            .call(
                "/etcdserverpb.Auth/Authenticate",
                PbAuthenticateRequest {
                    name: name.to_owned(),
                    password: password.to_owned(),
                },
            )
            .await?;
        Ok(resp.token)
    }

    pub async fn range(
        &mut self,
        req: etcd_client::proto::PbRangeRequest,
    ) -> Result<etcd_client::proto::PbRangeResponse, tonic::Status> {
        self.call("/etcdserverpb.KV/Range", req).await
    }

    pub async fn put(
        &mut self,
        req: etcd_client::proto::PbPutRequest,
    ) -> Result<etcd_client::proto::PbPutResponse, tonic::Status> {
        self.call("/etcdserverpb.KV/Put", req).await
    }

    pub async fn delete(
        &mut self,
        req: etcd_client::proto::PbDeleteRequest,
    ) -> Result<etcd_client::proto::PbDeleteResponse, tonic::Status> {
        self.call("/etcdserverpb.KV/DeleteRange", req).await
    }

    pub async fn txn(
        &mut self,
        req: etcd_client::proto::PbTxnRequest,
    ) -> Result<etcd_client::proto::PbTxnResponse, tonic::Status> {
        self.call("/etcdserverpb.KV/Txn", req).await
    }
}

/// Asserts a raw call was refused as `etcdserver: permission denied`.
#[track_caller]
pub fn assert_denied<T: std::fmt::Debug>(result: Result<T, tonic::Status>, what: &str) {
    assert_status(
        result,
        tonic::Code::PermissionDenied,
        msg::PERMISSION_DENIED,
        what,
    );
}

/// Unwraps a raw call's answer, naming the call on failure.
#[track_caller]
pub fn ok<T>(result: Result<T, tonic::Status>, what: &str) -> T {
    result.unwrap_or_else(|s| panic!("{what}: {:?} {:?}", s.code(), s.message()))
}

/// base64url without padding (JWT's encoding).
pub fn b64url_encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url without padding (a JWT's part).
pub fn b64url_decode(text: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD
        .decode(text)
        .unwrap_or_else(|e| panic!("not base64url: {text:?}: {e}"))
}

/// A JWT's header and claims, as JSON.
pub fn jwt_parts(token: &str) -> (serde_json::Value, serde_json::Value) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a JWT has three parts");
    let decode = |p: &str| -> serde_json::Value {
        serde_json::from_slice(&b64url_decode(p)).expect("JWT part is JSON")
    };
    (decode(parts[0]), decode(parts[1]))
}

/// Runs `openssl` with `args`, panicking with its output on failure.
pub fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl (install the openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An RSA 2048 key pair in `dir` (PKCS#8 private key, SubjectPublicKeyInfo public key):
/// (private, public) paths.
pub fn rsa_keys(dir: &Path) -> (String, String) {
    let private = dir.join("jwt-rsa.key").display().to_string();
    let public = dir.join("jwt-rsa.pub").display().to_string();
    openssl(&["genrsa", "-out", &private, "2048"]);
    openssl(&["rsa", "-in", &private, "-pubout", "-out", &public]);
    (private, public)
}

/// A P-256 (prime256v1) key pair in `dir` (SEC1 private key): (private, public).
pub fn ec_keys(dir: &Path) -> (String, String) {
    let private = dir.join("jwt-ec.key").display().to_string();
    let public = dir.join("jwt-ec.pub").display().to_string();
    openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        &private,
    ]);
    openssl(&["ec", "-in", &private, "-pubout", "-out", &public]);
    (private, public)
}

/// A small deterministic generator for junk tokens.
pub struct Junk(u64);

impl Junk {
    pub fn new(seed: u64) -> Junk {
        Junk(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `len` printable ASCII characters (what gRPC metadata can carry) without `.`, so
    /// it never looks like a simple token (`<prefix>.<index>`).
    pub fn printable(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| {
                let c = (0x21 + self.next() % 94) as u8;
                if c == b'.' {
                    'x'
                } else {
                    c as char
                }
            })
            .collect()
    }
}
