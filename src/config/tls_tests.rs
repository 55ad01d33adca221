//! The TLS flags against etcd's: what each means, and etcd's checks and messages.
//! A child of `config::tests`, whose helpers it uses.

use super::*;

#[test]
fn tls_flags_are_read_with_etcds_meaning() {
    let config = run(&[
        "--cert-file=/pki/server.crt",
        "--key-file=/pki/server.key",
        "--trusted-ca-file=/pki/ca.crt",
        "--client-cert-auth",
        "--client-crl-file=/pki/client.crl",
        "--client-cert-allowed-hostname=a.example,b.example",
        "--peer-cert-file=/pki/peer.crt",
        "--peer-key-file=/pki/peer.key",
        "--peer-trusted-ca-file=/pki/ca.crt",
        "--peer-client-cert-auth=true",
        "--peer-cert-allowed-cn=etcd-peer",
        "--listen-client-urls=https://127.0.0.1:2379,http://127.0.0.1:12379",
        "--advertise-client-urls=https://127.0.0.1:2379",
        "--listen-peer-urls=https://127.0.0.1:2380",
        "--initial-advertise-peer-urls=https://127.0.0.1:2380",
        "--initial-cluster=default=https://127.0.0.1:2380",
        "--listen-metrics-urls=http://127.0.0.1:2381",
        "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
        "--tls-max-version=TLS1.3",
    ]);
    let client = &config.tls.client;
    assert_eq!(client.cert_file, Some(PathBuf::from("/pki/server.crt")));
    assert!(client.client_cert_auth && client.requires_client_certs());
    assert_eq!(client.crl_file, Some(PathBuf::from("/pki/client.crl")));
    assert_eq!(client.allowed_hostnames, ["a.example", "b.example"]);
    assert_eq!(config.tls.peer.allowed_cns, ["etcd-peer"]);
    assert!(config.tls.peer.requires_client_certs());
    assert_eq!(
        config.listen_client_urls,
        vec![
            Url::parse("http://127.0.0.1:12379").unwrap(),
            Url::parse("https://127.0.0.1:2379").unwrap()
        ]
    );
    assert_eq!(
        config.advertise_client_urls,
        urls(&["https://127.0.0.1:2379"])
    );
    assert_eq!(
        config.listen_metrics_urls,
        vec![Url::parse("http://127.0.0.1:2381").unwrap()]
    );
    // TLS 1.3 suites are accepted and ignored, as Go does.
    assert_eq!(
        config.tls.policy.cipher_suites,
        [CipherSuite::EcdheRsaAes128GcmSha256]
    );
    assert_eq!(config.tls.policy.max_version, Some(TlsVersion::Tls13));
    // etcd: a trusted CA alone makes the listener ask for client certificates.
    let config = run(&[
        "--cert-file=/s.crt",
        "--key-file=/s.key",
        "--trusted-ca-file=/ca.crt",
    ]);
    assert!(config.tls.client.requires_client_certs());
    // The same flags through ETCD_* variables.
    let env = env_of(&[
        ("ETCD_CERT_FILE", "/s.crt"),
        ("ETCD_KEY_FILE", "/s.key"),
        ("ETCD_CLIENT_CERT_AUTH", "true"),
        ("ETCD_TRUSTED_CA_FILE", "/ca.crt"),
    ]);
    let (config, _) = run_with(&[], &env);
    assert!(config.tls.client.client_cert_auth);
    assert_eq!(config.tls.client.key_file, Some(PathBuf::from("/s.key")));
}

#[test]
fn tls_flags_are_checked_with_etcds_messages() {
    assert_eq!(
        error(&["--tls-min-version=TLS1.1"]),
        r#"unexpected TLS version "TLS1.1" (must be one of: TLS1.2, TLS1.3)"#
    );
    assert_eq!(
        error(&["--tls-min-version=TLS1.3", "--tls-max-version=TLS1.2"]),
        "min version (TLS1.3) is greater than max version (TLS1.2)"
    );
    assert_eq!(
        error(&[
            "--tls-min-version=TLS1.3",
            "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        ]),
        "cipher suites cannot be configured when only TLS1.3 is enabled"
    );
    assert_eq!(
        error(&["--cipher-suites=TLS_FAKE"]),
        r#"unexpected TLS cipher suite "TLS_FAKE""#
    );
    assert!(error(&["--cipher-suites=TLS_RSA_WITH_AES_128_CBC_SHA"])
        .contains("is not supported by QuantyKube"));
    assert!(error(&["--cert-file=/s.crt"])
        .starts_with("KeyFile and CertFile must both be present[key: , cert: /s.crt]"));
    assert!(
        error(&["--peer-cert-allowed-cn=a", "--peer-cert-allowed-hostname=b"])
            .starts_with("AllowedCNs and AllowedHostnames are mutually exclusive")
    );
    assert_eq!(
        error(&[
            "--listen-client-urls=https://127.0.0.1:2379",
            "--advertise-client-urls=https://127.0.0.1:2379"
        ]),
        "TLS key/cert (--cert-file, --key-file) must be provided for client url \
         https://127.0.0.1:2379 with HTTPS scheme"
    );
    assert!(
        error(&["--listen-peer-urls=https://127.0.0.1:2380"]).starts_with(
            "cannot listen on TLS for 127.0.0.1:2380: KeyFile and CertFile are not presented"
        )
    );
    assert_eq!(
        error(&["--listen-metrics-urls=https://127.0.0.1:2381"]),
        "client TLS key/cert (--cert-file, --key-file) must be provided for metrics secure url"
    );
    assert_eq!(
        error(&["--auto-tls", "--self-signed-cert-validity=0"]),
        "selfSignedCertValidity is invalid,it should be greater than 0"
    );
    // Auto-TLS stands in for the certificate files.
    let config = run(&[
        "--auto-tls",
        "--listen-client-urls=https://127.0.0.1:2379",
        "--advertise-client-urls=https://127.0.0.1:2379",
    ]);
    assert!(config.tls.client.auto_tls && config.tls.client.is_empty());
}
