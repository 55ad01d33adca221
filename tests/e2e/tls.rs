//! TLS on the client and peer ports, with etcd's flags and meaning: mutual TLS for
//! clients and peers, every way a client or peer certificate is refused, certificates
//! rotated on disk, `--auto-tls`, http and https client URLs at once, and the startup
//! errors of unusable certificate files.
//!
//! Written against etcd 3.4 first (`QK_TEST_TARGET=etcd`). etcd 3.4 has no
//! `--tls-min-version`, `--tls-max-version`, `--client-cert-file`/`--client-key-file` or
//! `--self-signed-cert-validity` (3.5 flags), so nothing here uses them.
//!
//! How a refusal shows: Go's TLS server (and rustls') checks the client certificate
//! after the client considers a TLS 1.3 handshake done, so a client sees the failure on
//! its first read, whichever step that is. The tests therefore assert that no request
//! succeeds (etcd-client and etcdctl), and that the server logged the reason.

use std::time::{Duration, Instant};

use crate::certs::{Pki, CLIENT_HOSTNAME, PEER_CN};
use crate::harness::{
    etcdctl_raw, http_request, http_request_with, log_since, loopback_ip, try_connect_tls,
    ClientTls, Cluster, ClusterOptions, Target,
};

/// The mTLS flags of kubeadm's manifest (client and peer), with `pki`'s files.
fn mtls_args(pki: &Pki) -> Vec<String> {
    let ca = pki.ca_cert();
    vec![
        format!("--cert-file={}", pki.etcd("server.crt").display()),
        format!("--key-file={}", pki.etcd("server.key").display()),
        format!("--trusted-ca-file={}", ca.display()),
        "--client-cert-auth=true".to_owned(),
        format!("--peer-cert-file={}", pki.etcd("peer.crt").display()),
        format!("--peer-key-file={}", pki.etcd("peer.key").display()),
        format!("--peer-trusted-ca-file={}", ca.display()),
        "--peer-client-cert-auth=true".to_owned(),
    ]
}

/// The API server's identity, as the harness's clients use it.
fn apiserver_tls(pki: &Pki) -> ClientTls {
    ClientTls::new(pki.ca_cert()).identity(
        pki.pki("apiserver-etcd-client.crt"),
        pki.pki("apiserver-etcd-client.key"),
    )
}

/// `count` members on https client and peer URLs with mutual TLS on both.
fn mtls_cluster(pki: &Pki, count: usize) -> ClusterOptions {
    ClusterOptions::new(count)
        .https_clients(apiserver_tls(pki))
        .https_peers()
        .args(mtls_args(pki))
}

/// Waits up to 10 s for member `i`'s log, after `offset`, to hold a line that contains
/// every string of `all` (case-insensitively); panics with the new log text otherwise.
/// Waits until member `i` has logged, after `offset`, a line holding every one of `all`
/// (case aside). Bounded generously (20 s): a refused client retries and the member
/// logs each refusal, so the line comes with the first attempt on any machine.
pub(crate) async fn assert_logged(
    cluster: &Cluster,
    i: usize,
    offset: u64,
    all: &[&str],
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = log_since(&cluster.log_path(i), offset);
        let found = text.lines().any(|line| {
            let line = line.to_lowercase();
            all.iter().all(|s| line.contains(&s.to_lowercase()))
        });
        if found {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: member {i} logged no line with all of {all:?} (target {}); new log:\n{text}",
                cluster.target()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The reason words a refusal's log line must hold, per target. For etcd, what etcd
/// 3.4.23 (Go 1.19) logs: `rejected connection from "<addr>" (error "<Go's TLS error>",
/// ServerName "")`. QuantyKube must log a line with `rejected connection` and a reason
/// in the same words; where rustls words its errors differently, the rustls words are
/// the ones asked for (the case of each is in the call).
fn reason(
    target: Target,
    etcd: &'static [&'static str],
    qk: &'static [&'static str],
) -> Vec<&'static str> {
    let mut words = vec!["rejected connection"];
    words.extend_from_slice(match target {
        Target::Etcd => etcd,
        Target::Quantykube => qk,
    });
    words
}

/// A linearizable Get through a fresh etcd-client with `tls` on `endpoint`.
async fn try_get(endpoint: &str, tls: Option<&ClientTls>) -> Result<(), String> {
    let mut client = try_connect_tls(&[endpoint.to_owned()], tls)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let get = tokio::time::timeout(Duration::from_secs(8), client.get("tls-probe", None))
        .await
        .map_err(|_| "get: no answer within 8 s".to_owned())?;
    get.map(|_| ()).map_err(|e| format!("get: {e}"))
}

/// Asserts that a client with `tls` (and etcdctl with `etcdctl_flags`) cannot read from
/// member 0, and that member 0 logged `words`.
async fn assert_refused(
    cluster: &Cluster,
    tls: &ClientTls,
    etcdctl_flags: &[String],
    words: &[&str],
    what: &str,
) {
    let offset = cluster.log_len(0);
    let endpoint = cluster.endpoint(0);
    let result = try_get(&endpoint, Some(tls)).await;
    assert!(result.is_err(), "{what}: etcd-client read succeeded");
    eprintln!("{what}: etcd-client sees: {}", result.unwrap_err());
    let mut args: Vec<&str> = etcdctl_flags.iter().map(String::as_str).collect();
    args.extend([
        "--dial-timeout=3s",
        "--command-timeout=5s",
        "get",
        "tls-probe",
    ]);
    let out = etcdctl_raw(&endpoint, &args).await;
    assert!(
        !out.success(),
        "{what}: etcdctl get succeeded: {}",
        out.stdout
    );
    eprintln!("{what}: etcdctl sees: {}", out.stderr.trim());
    assert_logged(cluster, 0, offset, words, what).await;
}

#[tokio::test]
async fn tls_three_members_mutual_tls_put_get_etcdctl() {
    let pki = Pki::new(loopback_ip());
    let cluster = mtls_cluster(&pki, 3).start().await;
    for i in 0..3 {
        assert!(cluster.endpoint(i).starts_with("https://"));
        assert!(cluster.peer_url(i).starts_with("https://"));
    }
    // etcd-client over TLS: a write on one member is read linearizably on the others.
    let mut c0 = cluster.client(0).await;
    c0.put("tls/a", "1", None).await.expect("put over TLS");
    for i in 1..3 {
        let resp = cluster
            .client(i)
            .await
            .get("tls/a", None)
            .await
            .expect("get");
        assert_eq!(
            crate::harness::pairs(&resp),
            [("tls/a".to_owned(), "1".to_owned())]
        );
    }
    // etcdctl 3.4 with --cacert --cert --key, against every endpoint at once.
    cluster
        .etcdctl(&["put", "tls/b", "2"])
        .await
        .assert_success();
    let out = cluster
        .etcdctl(&["get", "tls/b", "--print-value-only"])
        .await;
    out.assert_success();
    assert_eq!(out.stdout.trim(), "2");
    // The member list carries the https URLs the members advertise.
    let out = cluster.etcdctl(&["member", "list"]).await;
    out.assert_success();
    for i in 0..3 {
        assert!(
            out.stdout.contains(&cluster.peer_url(i)) && out.stdout.contains(&cluster.endpoint(i)),
            "member list lacks member {i}'s https URLs:\n{}",
            out.stdout
        );
    }
    // The healthcheck identity of kubeadm works too (any certificate of the CA does).
    let healthcheck = ClientTls::new(pki.ca_cert()).identity(
        pki.etcd("healthcheck-client.crt"),
        pki.etcd("healthcheck-client.key"),
    );
    try_get(&cluster.endpoint(2), Some(&healthcheck))
        .await
        .expect("healthcheck-client reads");
    // Requests a follower relays to the leader's https client URL (QuantyKube relays
    // LeaseTimeToLive and LeaseKeepAlive; etcd forwards them over its peer URLs).
    let leader = cluster.leader_index().await;
    let follower = (leader + 1) % 3;
    let mut on_follower = cluster.client(follower).await;
    let lease = on_follower
        .lease_grant(60, None)
        .await
        .expect("lease grant on a follower over mTLS");
    let ttl = on_follower
        .lease_time_to_live(lease.id(), None)
        .await
        .expect("lease ttl on a follower (relayed to the leader)");
    assert!(ttl.ttl() > 0, "the granted lease lives: {ttl:?}");
    on_follower
        .lease_keep_alive(lease.id())
        .await
        .expect("keepalive stream on a follower");
    // etcdctl 3.4's per-endpoint commands with https endpoints.
    let out = cluster.etcdctl(&["endpoint", "status", "-w", "json"]).await;
    out.assert_success();
    for i in 0..3 {
        assert!(
            out.stdout.contains(&cluster.endpoint(i)),
            "endpoint status lacks member {i}:\n{}",
            out.stdout
        );
    }
    let target_id = format!("{:x}", cluster.member_id(follower));
    let out = cluster
        .etcdctl_on(leader, &["move-leader", &target_id])
        .await;
    out.assert_success();
    assert_eq!(cluster.wait_leader(Duration::from_secs(20)).await, follower);
}

#[tokio::test]
async fn tls_client_rejections() {
    let pki = Pki::new(loopback_ip());
    let cluster = mtls_cluster(&pki, 1)
        .arg(format!("--client-crl-file={}", pki.crl().display()))
        .start()
        .await;
    let target = cluster.target();
    let ca = pki.ca_cert();
    let flags = |stem: Option<&str>| -> (ClientTls, Vec<String>) {
        let mut tls = ClientTls::new(&ca);
        if let Some(stem) = stem {
            let (cert, key) = pki.pair(stem);
            tls = tls.identity(cert, key);
        }
        let etcdctl = tls.etcdctl_flags();
        (tls, etcdctl)
    };

    // The control: a certificate of the CA, not revoked, is served.
    try_get(&cluster.endpoint(0), cluster.client_tls())
        .await
        .expect("a good client certificate reads");

    // No client certificate while --client-cert-auth is on.
    let (tls, etcdctl) = flags(None);
    let words = reason(
        target,
        &["didn't provide a certificate"],
        &["no certificate"],
    );
    assert_refused(&cluster, &tls, &etcdctl, &words, "no client certificate").await;

    // A client certificate of another CA.
    let (tls, etcdctl) = flags(Some("foreign-client"));
    let words = reason(target, &["unknown authority"], &["unknown issuer"]);
    assert_refused(
        &cluster,
        &tls,
        &etcdctl,
        &words,
        "certificate of another CA",
    )
    .await;

    // An expired client certificate.
    let (tls, etcdctl) = flags(Some("expired-client"));
    let words = reason(target, &["certificate has expired"], &["expired"]);
    assert_refused(
        &cluster,
        &tls,
        &etcdctl,
        &words,
        "expired client certificate",
    )
    .await;

    // A certificate the CRL of --client-crl-file revokes. etcd names the serial in hex.
    let (tls, etcdctl) = flags(Some("revoked-client"));
    let words = reason(target, &["revoked"], &["revoked"]);
    assert_refused(
        &cluster,
        &tls,
        &etcdctl,
        &words,
        "revoked client certificate",
    )
    .await;

    // A plaintext client on the https port.
    let plain = cluster.endpoint(0).replacen("https://", "http://", 1);
    let offset = cluster.log_len(0);
    assert!(
        try_get(&plain, None).await.is_err(),
        "a plaintext gRPC client read from an https port"
    );
    let out = etcdctl_raw(
        &plain,
        &[
            "--dial-timeout=3s",
            "--command-timeout=5s",
            "get",
            "tls-probe",
        ],
    )
    .await;
    assert!(!out.success(), "plaintext etcdctl read from an https port");
    // A plaintext HTTP/1 request gets no useful answer either (Go answers 400 "Client
    // sent an HTTP request to an HTTPS server." when it can; etcd's own TLS listener
    // handshakes first and just closes): whatever comes back is not a 200.
    let answer = http_request(
        "GET",
        &format!("{plain}/health"),
        None,
        Duration::from_secs(5),
    )
    .await;
    eprintln!("plaintext GET /health on the https port: {answer:?}");
    assert!(answer.map(|a| a.status != 200).unwrap_or(true));
    let words = reason(
        target,
        &["does not look like a tls handshake"],
        &["corrupt message"],
    );
    assert_logged(&cluster, 0, offset, &words, "plaintext client").await;

    // The good client still works after all of that.
    try_get(&cluster.endpoint(0), cluster.client_tls())
        .await
        .expect("a good client certificate still reads");
}

#[tokio::test]
async fn tls_client_cert_allowed_hostname() {
    let pki = Pki::new(loopback_ip());
    let (cert, key) = pki.pair("hostname-client");
    let cluster = ClusterOptions::new(1)
        .https_clients(ClientTls::new(pki.ca_cert()).identity(cert, key))
        .https_peers()
        .args(mtls_args(&pki))
        .arg(format!("--client-cert-allowed-hostname={CLIENT_HOSTNAME}"))
        .start()
        .await;
    // The harness itself reads with the certificate that names the hostname.
    try_get(&cluster.endpoint(0), cluster.client_tls())
        .await
        .expect("the certificate with the allowed hostname reads");
    // A certificate of the same CA without that hostname is refused.
    let tls = apiserver_tls(&pki);
    let words = reason(
        cluster.target(),
        &["client certificate authentication failed"],
        &["client certificate authentication failed"],
    );
    assert_refused(
        &cluster,
        &tls,
        &tls.etcdctl_flags(),
        &words,
        "hostname not allowed",
    )
    .await;
}

#[tokio::test]
async fn tls_peer_cert_allowed_cn() {
    let pki = Pki::new(loopback_ip());
    let (bad_cert, bad_key) = pki.pair("wrong-cn-peer");
    // Every member allows only PEER_CN on its peer port; member 2 presents another CN.
    let cluster = mtls_cluster(&pki, 3)
        .arg(format!("--peer-cert-allowed-cn={PEER_CN}"))
        .member_args(move |m| {
            if m.index == 2 {
                vec![
                    format!("--peer-cert-file={}", bad_cert.display()),
                    format!("--peer-key-file={}", bad_key.display()),
                ]
            } else {
                Vec::new()
            }
        })
        .ready(&[0, 1])
        .start()
        .await;
    let target = cluster.target();
    // The two good members are a quorum and serve.
    let mut c0 = cluster.client(0).await;
    c0.put("cn/a", "1", None)
        .await
        .expect("put on the good quorum");
    // The good members refuse member 2's connections to their peer ports, naming why.
    // (Go's flag order puts the member's own flags after the shared ones, and the last
    // `--peer-cert-file` wins in etcd; QuantyKube must take the last as well.)
    let words = reason(
        target,
        &["client certificate authentication failed"],
        &["client certificate authentication failed"],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    'found: loop {
        for i in 0..2 {
            let text = log_since(&cluster.log_path(i), 0).to_lowercase();
            if text
                .lines()
                .any(|l| words.iter().all(|w| l.contains(&w.to_lowercase())))
            {
                break 'found;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no good member logged the refusal of member 2's peer certificate ({words:?})\n{}",
            cluster.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // etcd checks the CN on both ends of a peer connection (its peer client config has
    // the same VerifyPeerCertificate): member 2 is refused when it dials and when it is
    // dialled, so it never publishes itself (no client URLs in the member list) and has no
    // leader to serve a linearizable read with.
    let list = c0.member_list().await.expect("member list");
    let m2 = list
        .members()
        .iter()
        .find(|m| m.peer_urls().contains(&cluster.peer_url(2)))
        .expect("member 2 is in the initial cluster");
    // (Its name comes from --initial-cluster; its client URLs only from publishing.)
    assert!(
        m2.client_urls().is_empty(),
        "member 2 published itself: {m2:?}"
    );
    assert!(
        try_get(&cluster.endpoint(2), cluster.client_tls())
            .await
            .is_err(),
        "member 2 served a linearizable read"
    );
    // The same refusal seen from outside: a TLS client with the wrong CN gets no HTTP
    // answer from a good member's peer port; with the right CN, it gets one (etcd serves
    // HTTP there; whatever status a gRPC peer port answers, it answers).
    let peer = cluster.peer_url(0);
    let good = ClientTls::new(pki.ca_cert()).identity(pki.etcd("peer.crt"), pki.etcd("peer.key"));
    let (bad_cert, bad_key) = pki.pair("wrong-cn-peer");
    let bad = ClientTls::new(pki.ca_cert()).identity(bad_cert, bad_key);
    // HTTP/1.1: a gRPC-only peer port may refuse the request, but it answers it.
    let url = format!("{peer}/version");
    let h1 = ["--http1.1"];
    let with_good = http_request_with("GET", &url, Some(&good), Duration::from_secs(5), &h1).await;
    assert!(
        with_good.is_ok(),
        "the right peer CN got no answer: {with_good:?}"
    );
    let with_bad = http_request_with("GET", &url, Some(&bad), Duration::from_secs(5), &h1).await;
    assert!(
        with_bad.is_err(),
        "the wrong peer CN got an answer: {with_bad:?}"
    );
}

/// The serial of the certificate `addr` presents, by `openssl s_client`.
async fn served_serial(addr: &str, tls: &ClientTls) -> String {
    let (cert, key) = tls.identity.clone().expect("identity");
    let script = format!(
        "openssl s_client -connect {addr} -CAfile {} -cert {} -key {} </dev/null 2>/dev/null \
         | openssl x509 -noout -serial",
        tls.ca.as_ref().expect("ca").display(),
        cert.display(),
        key.display()
    );
    let out = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::process::Command::new("sh")
            .args(["-c", &script])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("openssl s_client finishes")
    .expect("run openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let serial = text
        .trim()
        .strip_prefix("serial=")
        .unwrap_or_else(|| panic!("openssl printed no serial: {text:?}"));
    crate::certs::serial_hex(&hex_bytes(serial))
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    let hex = if hex.len() % 2 == 1 {
        format!("0{hex}")
    } else {
        hex.to_owned()
    };
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

#[tokio::test]
async fn tls_certificate_rotated_on_disk_without_restart() {
    let pki = Pki::new(loopback_ip());
    let first = pki.issue_server("server", "etcd-server");
    let mut cluster = mtls_cluster(&pki, 1).start().await;
    let pid = cluster.pid(0).expect("member runs");
    let addr = cluster
        .endpoint(0)
        .trim_start_matches("https://")
        .to_owned();
    let tls = cluster.client_tls().expect("tls").clone();
    assert_eq!(served_serial(&addr, &tls).await, first.serial_hex());
    let mut client = cluster.client(0).await;
    client
        .put("rot/a", "1", None)
        .await
        .expect("put before rotation");

    // Rotate in place, as `kubeadm certs renew` or cert-manager do.
    let second = pki.rotate_server();
    assert_ne!(first.serial, second.serial);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let serial = served_serial(&addr, &tls).await;
        if serial == second.serial_hex() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new connections still see serial {serial} 15 s after the rotation to {}",
            second.serial_hex()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // No restart: the same process, and a fresh client works against the new certificate.
    assert_eq!(cluster.poll_exit(0), None, "member exited");
    assert_eq!(cluster.pid(0), Some(pid), "member restarted");
    let mut fresh = cluster.client(0).await;
    let resp = fresh.get("rot/a", None).await.expect("get after rotation");
    assert_eq!(
        crate::harness::pairs(&resp),
        [("rot/a".to_owned(), "1".to_owned())]
    );
    // The connection made before the rotation keeps working too.
    client
        .put("rot/b", "2", None)
        .await
        .expect("old connection after rotation");
}

#[tokio::test]
async fn tls_auto_tls_on_client_and_peer_ports() {
    let cluster = ClusterOptions::new(3)
        .https_clients(ClientTls::insecure())
        .https_peers()
        .args(["--auto-tls", "--peer-auto-tls"])
        .start()
        .await;
    // The cluster formed over https peers; etcdctl without verification reads and writes.
    cluster
        .etcdctl(&["put", "auto/a", "1"])
        .await
        .assert_success();
    for i in 0..3 {
        let out = cluster
            .etcdctl_on(i, &["get", "auto/a", "--print-value-only"])
            .await;
        out.assert_success();
        assert_eq!(out.stdout.trim(), "1");
    }
    // etcd's self-signed files: <data-dir>/fixtures/{client,peer}/{cert.pem,key.pem}.
    for i in 0..3 {
        for port in ["client", "peer"] {
            let dir = cluster.data_dir(i).join("fixtures").join(port);
            let cert = std::fs::read_to_string(dir.join("cert.pem"))
                .unwrap_or_else(|e| panic!("member {i}: {}/cert.pem: {e}", dir.display()));
            assert!(cert.contains("-----BEGIN CERTIFICATE-----"), "{cert}");
            let key = std::fs::read_to_string(dir.join("key.pem"))
                .unwrap_or_else(|e| panic!("member {i}: {}/key.pem: {e}", dir.display()));
            assert!(key.contains("PRIVATE KEY-----"), "{key}");
        }
    }
    // The certificate is self-signed: a client that verifies against some CA refuses it.
    let pki = Pki::new(loopback_ip());
    let out = etcdctl_raw(
        &cluster.endpoint(0),
        &[
            &format!("--cacert={}", pki.ca_cert().display()),
            "--dial-timeout=3s",
            "--command-timeout=5s",
            "get",
            "auto/a",
        ],
    )
    .await;
    assert!(
        !out.success(),
        "a verifying client accepted the self-signed certificate"
    );
}

#[tokio::test]
async fn tls_http_and_https_client_urls_at_once() {
    let pki = Pki::new(loopback_ip());
    let cluster = mtls_cluster(&pki, 1)
        .extra_client_urls(|m| vec![format!("http://{}:{}", m.ip, m.spare_ports[0])])
        .start()
        .await;
    let plain = format!(
        "http://{}:{}",
        cluster.ip(),
        cluster.member_spec(0).spare_ports[0]
    );
    // Plain gRPC on the http URL, TLS on the https one: one store behind both.
    let mut tls_client = cluster.client(0).await;
    tls_client
        .put("both/a", "tls", None)
        .await
        .expect("put over https");
    let mut plain_client = crate::harness::connect(std::slice::from_ref(&plain)).await;
    let resp = plain_client
        .get("both/a", None)
        .await
        .expect("get over http");
    assert_eq!(
        crate::harness::pairs(&resp),
        [("both/a".to_owned(), "tls".to_owned())]
    );
    plain_client
        .put("both/b", "plain", None)
        .await
        .expect("put over http");
    let resp = tls_client
        .get("both/b", None)
        .await
        .expect("get over https");
    assert_eq!(
        crate::harness::pairs(&resp),
        [("both/b".to_owned(), "plain".to_owned())]
    );
    let out = etcdctl_raw(&plain, &["get", "both/b", "--print-value-only"]).await;
    out.assert_success();
    assert_eq!(out.stdout.trim(), "plain");
}

/// Starts one member with `args` replacing nothing but adding to the mTLS flags, and
/// returns its exit status (it must exit within 20 s) and its log.
async fn start_expecting_exit(pki: &Pki, args: Vec<String>) -> (std::process::ExitStatus, String) {
    let mut cluster = mtls_cluster(pki, 1).args(args).ready(&[]).start().await;
    let status = cluster
        .wait_exit(0, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("member kept running:\n{}", cluster.log_tails()));
    (status, log_since(&cluster.log_path(0), 0))
}

#[tokio::test]
async fn tls_startup_errors_exit_non_zero_naming_the_file() {
    let pki = Pki::new(loopback_ip());
    let target = Target::from_env();

    // A certificate file that does not exist (the last --cert-file wins).
    let missing = pki.etcd("no-such-server.crt");
    let (status, log) =
        start_expecting_exit(&pki, vec![format!("--cert-file={}", missing.display())]).await;
    assert!(
        !status.success(),
        "exit status {status} for a missing cert file"
    );
    match target {
        // etcd 3.4: `... open <path>: no such file or directory` from the listener setup.
        Target::Etcd => assert!(
            log.contains(&format!(
                "open {}: no such file or directory",
                missing.display()
            )),
            "{log}"
        ),
        Target::Quantykube => assert!(
            log.contains(&missing.display().to_string()),
            "the exit message must name {}:\n{log}",
            missing.display()
        ),
    }

    // A key that does not belong to its certificate.
    let (cert, key) = pki.pair("mismatch");
    let (status, log) = start_expecting_exit(
        &pki,
        vec![
            format!("--cert-file={}", cert.display()),
            format!("--key-file={}", key.display()),
        ],
    )
    .await;
    assert!(
        !status.success(),
        "exit status {status} for a mismatched key"
    );
    match target {
        Target::Etcd => assert!(
            log.contains("tls: private key does not match public key"),
            "{log}"
        ),
        Target::Quantykube => assert!(
            (log.contains(&cert.display().to_string()) || log.contains(&key.display().to_string()))
                && log.to_lowercase().contains("does not match"),
            "the exit message must name {} or {} and say the key does not match:\n{log}",
            cert.display(),
            key.display()
        ),
    }

    // A trusted CA file that does not exist.
    let missing_ca = pki.etcd("no-such-ca.crt");
    let (status, log) = start_expecting_exit(
        &pki,
        vec![format!("--trusted-ca-file={}", missing_ca.display())],
    )
    .await;
    assert!(
        !status.success(),
        "exit status {status} for a missing CA file"
    );
    match target {
        Target::Etcd => assert!(
            log.contains(&format!(
                "open {}: no such file or directory",
                missing_ca.display()
            )),
            "{log}"
        ),
        Target::Quantykube => assert!(
            log.contains(&missing_ca.display().to_string()),
            "the exit message must name {}:\n{log}",
            missing_ca.display()
        ),
    }
}

/// `--client-cert-file`/`--client-key-file` (etcd 3.5+; 3.4 lacks them): the identity a
/// member presents to another member's client URL. With a certificate of a foreign CA
/// there, the leader refuses the requests followers relay to its client URL (MoveLeader
/// here), which shows the flag is what they present; the leader's own requests, and the
/// lease calls followers relay to its peer port (which uses the peer certificate), are
/// unaffected.
#[tokio::test]
async fn tls_client_cert_file_is_what_members_present_to_each_other() {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped for etcd 3.4: it has no --client-cert-file");
        return;
    }
    let pki = Pki::new(loopback_ip());
    let (foreign_cert, foreign_key) = pki.pair("foreign-client");
    let cluster = mtls_cluster(&pki, 3)
        .arg(format!("--client-cert-file={}", foreign_cert.display()))
        .arg(format!("--client-key-file={}", foreign_key.display()))
        .start()
        .await;
    let leader = cluster.leader_index().await;
    let follower = (leader + 1) % 3;
    let offset = cluster.log_len(leader);
    let lease = cluster
        .client(leader)
        .await
        .lease_grant(60, None)
        .await
        .expect("the leader grants a lease itself");
    // A follower relays LeaseTimeToLive to the leader's peer port.
    cluster
        .client(follower)
        .await
        .lease_time_to_live(lease.id(), None)
        .await
        .expect("a follower relays LeaseTimeToLive over the peer port");
    // A follower relays MoveLeader to the leader's client URL.
    let relayed = cluster
        .client(follower)
        .await
        .move_leader(cluster.member_id(follower))
        .await;
    assert!(
        relayed.is_err(),
        "a follower presenting a foreign certificate was served: {relayed:?}"
    );
    assert_logged(
        &cluster,
        leader,
        offset,
        &["rejected connection", "unknown issuer"],
        "the relayed request's certificate",
    )
    .await;
}

/// A member whose peer CA does not verify the others' certificates cannot reach them,
/// and its log says why (the reason, not only "transport error"), while the two
/// members that trust each other serve.
#[tokio::test]
async fn tls_peer_ca_that_does_not_verify_is_named_in_the_log() {
    let pki = Pki::new(loopback_ip());
    let other_ca = pki.etcd("other-ca.crt");
    let cluster = mtls_cluster(&pki, 3)
        .member_args(move |m| {
            if m.index == 2 {
                vec![format!("--peer-trusted-ca-file={}", other_ca.display())]
            } else {
                Vec::new()
            }
        })
        .ready(&[0, 1])
        .start()
        .await;
    cluster
        .client(0)
        .await
        .put("ca/a", "1", None)
        .await
        .expect("put on the two members that trust each other");
    let words: &[&str] = match cluster.target() {
        Target::Etcd => &["certificate signed by unknown authority"],
        Target::Quantykube => &["invalid peer certificate", "unknownissuer"],
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = log_since(&cluster.log_path(2), 0).to_lowercase();
        if text.lines().any(|l| words.iter().all(|w| l.contains(w))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "member 2 never logged {words:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
