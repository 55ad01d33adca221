//! Certificates for the TLS tests, made with rcgen into a temporary directory laid out
//! as kubeadm lays out a control plane's: `<tmp>/etc/kubernetes/pki/etcd/{ca.crt,
//! ca.key,server.crt,server.key,peer.crt,peer.key,healthcheck-client.crt,...}` and
//! `<tmp>/etc/kubernetes/pki/apiserver-etcd-client.{crt,key}`.
//!
//! Besides kubeadm's files, the negative cases: an expired client certificate, a client
//! certificate of a second, unrelated CA, a revoked client certificate and a CRL signed
//! by the CA that lists it, a peer certificate with another CN, a client certificate
//! with a hostname SAN, a key that does not belong to its certificate.
//!
//! All keys are ECDSA P-256 in PKCS#8 PEM (`PRIVATE KEY`), as Go's `tls.X509KeyPair`
//! and rustls both read. Serial numbers are chosen here (`0x01` followed by a counter
//! and the process id) so a test can tell a re-issued certificate from the old one.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertificateRevocationListParams,
    CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyIdMethod,
    KeyPair, KeyUsagePurpose, RevocationReason, RevokedCertParams, SanType, SerialNumber,
};
use tempfile::TempDir;

/// CN of kubeadm's API-server-to-etcd client certificate.
pub const APISERVER_CLIENT_CN: &str = "kube-apiserver-etcd-client";
/// CN of kubeadm's health-check client certificate.
pub const HEALTHCHECK_CLIENT_CN: &str = "kube-etcd-healthcheck-client";
/// CN of the peer certificates the members share (kubeadm uses the node name; the tests
/// that check `--peer-cert-allowed-cn` need one CN for every good peer).
pub const PEER_CN: &str = "etcd-peer";
/// CN of the peer certificate that `--peer-cert-allowed-cn=etcd-peer` refuses.
pub const WRONG_PEER_CN: &str = "intruder-peer";
/// The DNS SAN of `hostname-client.crt`, for `--client-cert-allowed-hostname`.
pub const CLIENT_HOSTNAME: &str = "allowed-client.example";

/// What a leaf certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// serverAuth + clientAuth, as kubeadm's etcd server and peer certificates.
    ServerAndClient,
    /// clientAuth only.
    Client,
}

/// One issued certificate: its files and serial.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The serial number's big-endian bytes, as openssl prints them in hex.
    pub serial: Vec<u8>,
}

impl Issued {
    /// The serial as upper-case hex without leading zeros (openssl `x509 -serial`).
    pub fn serial_hex(&self) -> String {
        serial_hex(&self.serial)
    }
}

/// Upper-case hex of `bytes` without leading zeros.
pub fn serial_hex(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    let trimmed = hex.trim_start_matches('0');
    if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// A CA and every certificate the TLS tests use, as files under a temporary directory.
pub struct Pki {
    root: TempDir,
    /// `<root>/etc/kubernetes/pki`.
    pki: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    other_ca: CertifiedIssuer<'static, KeyPair>,
    /// SANs of server and peer certificates.
    sans: Vec<SanType>,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

fn next_serial() -> SerialNumber {
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut bytes = vec![0x01];
    bytes.extend_from_slice(&(std::process::id() as u64).to_be_bytes()[4..]);
    bytes.extend_from_slice(&n.to_be_bytes());
    SerialNumber::from_slice(&bytes)
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.key_identifier_method = KeyIdMethod::Sha256;
    params.serial_number = Some(next_serial());
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2099, 1, 1);
    params
}

fn dn(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

impl Pki {
    /// Generates the CA, the second CA and every certificate, with server and peer SANs
    /// `localhost`, `127.0.0.1`, `::1` and `ip` (the harness's loopback address).
    pub fn new(ip: Ipv4Addr) -> Pki {
        let root = tempfile::Builder::new()
            .prefix("qk-e2e-pki-")
            .tempdir()
            .expect("create pki tempdir");
        let pki = root.path().join("etc/kubernetes/pki");
        std::fs::create_dir_all(pki.join("etcd")).expect("create pki/etcd");
        let ca = CertifiedIssuer::self_signed(ca_params("etcd-ca"), KeyPair::generate().unwrap())
            .expect("self-sign CA");
        let other_ca =
            CertifiedIssuer::self_signed(ca_params("unrelated-ca"), KeyPair::generate().unwrap())
                .expect("self-sign second CA");
        let sans = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress("::1".parse().unwrap()),
            SanType::IpAddress(IpAddr::V4(ip)),
        ];
        let pki = Pki {
            root,
            pki,
            ca,
            other_ca,
            sans,
        };
        write(&pki.etcd("ca.crt"), &pki.ca.pem());
        write(&pki.etcd("ca.key"), &pki.ca.key().serialize_pem());
        write(&pki.etcd("other-ca.crt"), &pki.other_ca.pem());

        pki.issue_server("server", "etcd-server");
        pki.issue_server("peer", PEER_CN);
        pki.issue_server("wrong-cn-peer", WRONG_PEER_CN);
        pki.issue_client("healthcheck-client", HEALTHCHECK_CLIENT_CN);
        let apiserver = pki.leaf(
            APISERVER_CLIENT_CN,
            Usage::Client,
            Vec::new(),
            Validity::Current,
            false,
        );
        pki.write_leaf(&pki.pki.join("apiserver-etcd-client"), &apiserver);

        // Expired a year ago; otherwise as good as healthcheck-client.
        let expired = pki.leaf(
            "expired-client",
            Usage::Client,
            Vec::new(),
            Validity::Expired,
            false,
        );
        pki.write_leaf(&pki.etcd_stem("expired-client"), &expired);
        // Issued by the unrelated CA.
        let foreign = pki.leaf(
            "foreign-client",
            Usage::Client,
            Vec::new(),
            Validity::Current,
            true,
        );
        pki.write_leaf(&pki.etcd_stem("foreign-client"), &foreign);
        // Revoked, and listed in crl.pem (signed by the CA).
        let revoked = pki.leaf(
            "revoked-client",
            Usage::Client,
            Vec::new(),
            Validity::Current,
            false,
        );
        pki.write_leaf(&pki.etcd_stem("revoked-client"), &revoked);
        pki.write_crl(std::slice::from_ref(&revoked.serial));
        // A client certificate with a DNS SAN, for --client-cert-allowed-hostname.
        let hostname = pki.leaf(
            "hostname-client",
            Usage::Client,
            vec![SanType::DnsName(CLIENT_HOSTNAME.try_into().unwrap())],
            Validity::Current,
            false,
        );
        pki.write_leaf(&pki.etcd_stem("hostname-client"), &hostname);
        // A certificate and a key that do not belong together.
        let a = pki.leaf(
            "mismatch",
            Usage::ServerAndClient,
            pki.sans.clone(),
            Validity::Current,
            false,
        );
        let other_key = KeyPair::generate().unwrap();
        write(&pki.etcd("mismatch.crt"), &a.cert_pem);
        write(&pki.etcd("mismatch.key"), &other_key.serialize_pem());
        pki
    }

    /// `<tmp>`: the directory that holds `etc/kubernetes/pki`.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// `<tmp>/etc/kubernetes/pki/etcd/<name>`.
    pub fn etcd(&self, name: &str) -> PathBuf {
        self.pki.join("etcd").join(name)
    }

    /// `<tmp>/etc/kubernetes/pki/<name>`.
    pub fn pki(&self, name: &str) -> PathBuf {
        self.pki.join(name)
    }

    fn etcd_stem(&self, stem: &str) -> PathBuf {
        self.pki.join("etcd").join(stem)
    }

    /// `pki/etcd/<stem>.crt` and `.key`.
    pub fn pair(&self, stem: &str) -> (PathBuf, PathBuf) {
        (
            self.etcd(&format!("{stem}.crt")),
            self.etcd(&format!("{stem}.key")),
        )
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.etcd("ca.crt")
    }

    pub fn crl(&self) -> PathBuf {
        self.etcd("crl.pem")
    }

    /// Issues (or re-issues, overwriting) `pki/etcd/<stem>.{crt,key}`: a fresh key and a
    /// new serial, serverAuth + clientAuth, the server SANs, CN `cn`.
    pub fn issue_server(&self, stem: &str, cn: &str) -> Issued {
        let leaf = self.leaf(
            cn,
            Usage::ServerAndClient,
            self.sans.clone(),
            Validity::Current,
            false,
        );
        self.write_leaf(&self.etcd_stem(stem), &leaf)
    }

    /// Issues `pki/etcd/<stem>.{crt,key}`: clientAuth only, no SANs, CN `cn`.
    pub fn issue_client(&self, stem: &str, cn: &str) -> Issued {
        let leaf = self.leaf(cn, Usage::Client, Vec::new(), Validity::Current, false);
        self.write_leaf(&self.etcd_stem(stem), &leaf)
    }

    /// Re-issues `server.crt`/`server.key` in place (as cert-manager or `kubeadm certs
    /// renew` do), each file replaced by a rename so no reader sees half a file.
    pub fn rotate_server(&self) -> Issued {
        self.issue_server("server", "etcd-server")
    }

    fn leaf(
        &self,
        cn: &str,
        usage: Usage,
        sans: Vec<SanType>,
        validity: Validity,
        foreign: bool,
    ) -> Leaf {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(cn);
        params.subject_alt_names = sans;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match usage {
            Usage::ServerAndClient => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        let serial = next_serial();
        params.serial_number = Some(serial.clone());
        match validity {
            Validity::Current => {
                params.not_before = date_time_ymd(2020, 1, 1);
                params.not_after = date_time_ymd(2099, 1, 1);
            }
            Validity::Expired => {
                params.not_before = date_time_ymd(2020, 1, 1);
                params.not_after = date_time_ymd(2021, 1, 1);
            }
        }
        let key = KeyPair::generate().expect("generate key");
        let issuer = if foreign { &self.other_ca } else { &self.ca };
        let cert = params.signed_by(&key, issuer).expect("sign leaf");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial: serial.to_bytes(),
        }
    }

    fn write_leaf(&self, stem: &Path, leaf: &Leaf) -> Issued {
        let cert = stem.with_extension("crt");
        let key = stem.with_extension("key");
        // The key first: a handshake between the two renames pairs the new key with
        // the old certificate and fails; the reverse order fails the same way, so the
        // window is only kept short.
        write(&key, &leaf.key_pem);
        write(&cert, &leaf.cert_pem);
        Issued {
            cert,
            key,
            serial: leaf.serial.clone(),
        }
    }

    /// Writes `crl.pem`, signed by the CA, revoking `serials`.
    pub fn write_crl(&self, serials: &[Vec<u8>]) {
        let params = CertificateRevocationListParams {
            this_update: date_time_ymd(2024, 1, 1),
            next_update: date_time_ymd(2099, 1, 1),
            crl_number: next_serial(),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from_slice(s),
                    revocation_time: date_time_ymd(2024, 1, 1),
                    reason_code: Some(RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.ca).expect("sign CRL");
        write(&self.crl(), &crl.pem().expect("CRL as PEM"));
    }
}

#[derive(Clone, Copy)]
enum Validity {
    Current,
    Expired,
}

struct Leaf {
    cert_pem: String,
    key_pem: String,
    serial: Vec<u8>,
}

/// Writes `text` to `path` through a temporary file and a rename.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename to {}: {e}", path.display()));
}
