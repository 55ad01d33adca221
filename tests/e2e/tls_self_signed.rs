//! One self-signed `CA:TRUE` certificate as the server certificate, the client
//! certificate and the trusted CA at once, on the client and the peer ports: etcd's
//! test fixtures, many tutorials and dev clusters run this way, and Go's TLS accepts a
//! peer certificate that is exactly one of the trusted certificates.
//!
//! Written against etcd 3.4 first (`QK_TEST_TARGET=etcd`). The harness's own clients
//! (etcd-client on rustls) cannot verify such a server certificate, so the harness
//! probes readiness with etcdctl (`ClientTls::insecure()`, still presenting the client
//! certificate); every check below runs etcdctl with `--cacert` naming the certificate
//! itself, as a user does.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
    SanType,
};

use crate::harness::{etcdctl_raw, loopback_ip, ClientTls, ClusterOptions, Target};

/// A certificate file and its key file.
struct Pair {
    cert: PathBuf,
    key: PathBuf,
}

/// A self-signed `CA:TRUE` certificate as `openssl req -x509` makes one (no key usage,
/// no extended key usage), CN `cn`, SANs localhost, 127.0.0.1 and the harness's
/// loopback address; written to `<dir>/<stem>.{crt,key}`.
fn self_signed_ca(dir: &Path, stem: &str, cn: &str) -> (Pair, CertifiedIssuer<'static, KeyPair>) {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.subject_alt_names = vec![
        SanType::DnsName("localhost".try_into().unwrap()),
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        SanType::IpAddress(IpAddr::V4(loopback_ip())),
    ];
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2099, 1, 1);
    let key = KeyPair::generate().expect("generate key");
    let key_pem = key.serialize_pem();
    let issuer = CertifiedIssuer::self_signed(params, key).expect("self-sign");
    let pair = write_pair(dir, stem, &issuer.pem(), &key_pem);
    (pair, issuer)
}

fn write_pair(dir: &Path, stem: &str, cert_pem: &str, key_pem: &str) -> Pair {
    let pair = Pair {
        cert: dir.join(format!("{stem}.crt")),
        key: dir.join(format!("{stem}.key")),
    };
    std::fs::write(&pair.cert, cert_pem).expect("write certificate");
    std::fs::write(&pair.key, key_pem).expect("write key");
    pair
}

/// Both ports with `pair` as certificate and trusted CA, client certificates required.
fn flags(pair: &Pair) -> Vec<String> {
    let (cert, key) = (pair.cert.display(), pair.key.display());
    vec![
        format!("--cert-file={cert}"),
        format!("--key-file={key}"),
        format!("--trusted-ca-file={cert}"),
        "--client-cert-auth=true".to_owned(),
        format!("--peer-cert-file={cert}"),
        format!("--peer-key-file={key}"),
        format!("--peer-trusted-ca-file={cert}"),
        "--peer-client-cert-auth=true".to_owned(),
    ]
}

/// etcdctl's TLS flags: `--cacert` is `ca`, the client certificate `client`.
fn etcdctl_tls(ca: &Path, client: &Pair) -> Vec<String> {
    vec![
        format!("--cacert={}", ca.display()),
        format!("--cert={}", client.cert.display()),
        format!("--key={}", client.key.display()),
    ]
}

async fn etcdctl(endpoint: &str, tls: &[String], args: &[&str]) -> crate::harness::CmdOutput {
    let mut all: Vec<&str> = tls.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    etcdctl_raw(endpoint, &all).await
}

#[tokio::test]
async fn tls_one_self_signed_ca_certificate_serves_clients_and_peers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, _) = self_signed_ca(dir.path(), "root", "root");
    let cluster = ClusterOptions::new(3)
        .https_clients(ClientTls::insecure().identity(&root.cert, &root.key))
        .https_peers()
        .args(flags(&root))
        .start()
        .await;
    // The members reached each other over peer TLS (each verifying the other's
    // certificate both ways), and every member serves etcdctl with --cacert naming the
    // certificate itself.
    let tls = etcdctl_tls(&root.cert, &root);
    etcdctl(&cluster.endpoint(0), &tls, &["put", "self-signed/a", "1"])
        .await
        .assert_success();
    for i in 0..3 {
        let out = etcdctl(
            &cluster.endpoint(i),
            &tls,
            &["get", "self-signed/a", "--print-value-only"],
        )
        .await;
        out.assert_success();
        assert_eq!(out.stdout.trim(), "1", "member {i}");
    }
    // The setup the issue saw hang: the certificate's CN is root, so once auth is on,
    // etcdctl is root by its certificate alone.
    let all = cluster.endpoints().join(",");
    etcdctl(&all, &tls, &["user", "add", "root:root-pw"])
        .await
        .assert_success();
    etcdctl(&all, &tls, &["auth", "enable"])
        .await
        .assert_success();
    etcdctl(&all, &tls, &["put", "self-signed/b", "2"])
        .await
        .assert_success();
    let out = etcdctl(&all, &tls, &["get", "self-signed/b", "--print-value-only"]).await;
    out.assert_success();
    assert_eq!(out.stdout.trim(), "2");
    etcdctl(&all, &tls, &["auth", "disable"])
        .await
        .assert_success();

    // QuantyKube's own client (`quantykube bench`) with the same flags.
    if cluster.target() == Target::Quantykube {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_quantykube"))
            .args(["bench", "put", "--total", "5", "--endpoints", &all])
            .args(&tls)
            .kill_on_drop(true)
            .output()
            .await
            .expect("run quantykube bench");
        assert!(
            out.status.success(),
            "quantykube bench with the self-signed CA: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn tls_a_self_signed_anchor_admits_itself_and_what_it_signed_and_nothing_else() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, root_issuer) = self_signed_ca(dir.path(), "root", "root");
    // Another self-signed CA certificate, with the same CN and SANs: not trusted.
    let (stranger, _) = self_signed_ca(dir.path(), "stranger", "root");
    // A client certificate the self-signed anchor signed: verified as a chain.
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "alice");
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2099, 1, 1);
    let alice_key = KeyPair::generate().expect("generate key");
    let alice_cert = params.signed_by(&alice_key, &root_issuer).expect("sign");
    let alice = write_pair(
        dir.path(),
        "alice",
        &alice_cert.pem(),
        &alice_key.serialize_pem(),
    );

    let cluster = ClusterOptions::new(1)
        .https_clients(ClientTls::insecure().identity(&root.cert, &root.key))
        .args(flags(&root))
        .start()
        .await;
    let endpoint = cluster.endpoint(0);
    let get = ["--dial-timeout=3s", "--command-timeout=5s", "get", "probe"];
    etcdctl(&endpoint, &etcdctl_tls(&root.cert, &alice), &get)
        .await
        .assert_success();

    let offset = cluster.log_len(0);
    let out = etcdctl(&endpoint, &etcdctl_tls(&root.cert, &stranger), &get).await;
    assert!(
        !out.success(),
        "a stranger's self-signed certificate was accepted: {}",
        out.stdout
    );
    let words: &[&str] = match cluster.target() {
        Target::Etcd => &[
            "rejected connection",
            "certificate signed by unknown authority",
        ],
        Target::Quantykube => &[
            "rejected connection",
            "failed to verify client certificate",
            "CA:TRUE",
            "not one of the trusted CA file's certificates",
        ],
    };
    crate::tls::assert_logged(
        &cluster,
        0,
        offset,
        words,
        "a stranger's self-signed certificate",
    )
    .await;
}
