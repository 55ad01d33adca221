//! Certificate and key files: reading them, checking that they belong together and are
//! in date, and re-reading them when they change on disk (cert-manager and kubeadm
//! rotate certificates in place), so that new connections use the new certificate
//! with no restart.
//!
//! This module owns every read of a certificate, key, CA or CRL file. It must never log
//! a key's bytes or put them in an error: errors name the file and what is wrong.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};

use super::TransportError;

fn read(path: &Path) -> Result<Vec<u8>, TransportError> {
    fs::read(path).map_err(|source| TransportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn bad(path: &Path, reason: impl Into<String>) -> TransportError {
    TransportError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Every certificate of a PEM file, in order.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, format!("not a PEM certificate file ({e})")))?;
    if certs.is_empty() {
        return Err(bad(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// A PEM or DER certificate revocation list (etcd reads DER; PEM is accepted too).
pub fn read_crl(path: &Path) -> Result<CertificateRevocationListDer<'static>, TransportError> {
    let bytes = read(path)?;
    if bytes.starts_with(b"-----BEGIN") {
        CertificateRevocationListDer::from_pem_slice(&bytes)
            .map_err(|e| bad(path, format!("not a PEM revocation list ({e})")))
    } else {
        Ok(CertificateRevocationListDer::from(bytes))
    }
}

/// The serial numbers a revocation list names, without leading zero bytes.
pub fn revoked_serials(path: &Path) -> Result<Vec<Vec<u8>>, TransportError> {
    let crl = read_crl(path)?;
    let (_, parsed) = x509_parser::parse_x509_crl(&crl)
        .map_err(|e| bad(path, format!("not a certificate revocation list ({e})")))?;
    Ok(parsed
        .iter_revoked_certificates()
        .map(|revoked| trim_serial(revoked.raw_serial()))
        .collect())
}

/// A serial as etcd compares them (`big.Int.Bytes()`): no leading zero bytes.
pub fn trim_serial(raw: &[u8]) -> Vec<u8> {
    let start = raw.iter().position(|b| *b != 0).unwrap_or(raw.len());
    raw[start..].to_vec()
}

/// What one end-entity certificate says about itself, for etcd's checks.
#[derive(Debug, Default)]
pub struct CertificateFacts {
    pub common_name: Option<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<std::net::IpAddr>,
    pub serial: Vec<u8>,
    /// Seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
}

impl CertificateFacts {
    pub fn parse(der: &[u8]) -> Option<CertificateFacts> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let mut facts = CertificateFacts {
            common_name: cert
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .map(str::to_string),
            serial: trim_serial(cert.raw_serial()),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            ..Default::default()
        };
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => facts.dns_names.push(dns.to_string()),
                    GeneralName::IPAddress(bytes) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                            facts.ip_addresses.push(v4.into());
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                            facts.ip_addresses.push(v6.into());
                        }
                    }
                    _ => {}
                }
            }
        }
        Some(facts)
    }

    /// Go's `x509.Certificate.VerifyHostname`: an IP must be among the IP addresses; a
    /// name must match a DNS name, `*.` matching one leftmost label.
    pub fn valid_for(&self, host: &str) -> bool {
        let host = host.trim_matches(['[', ']']);
        if let Ok(ip) = host.parse::<std::net::IpAddr>() {
            return self.ip_addresses.contains(&ip);
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.dns_names.iter().any(|pattern| {
            let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
            match pattern.strip_prefix("*.") {
                Some(suffix) => host
                    .split_once('.')
                    .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
                None => pattern == host,
            }
        })
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A UTC time as `YYYY-MM-DDTHH:MM:SSZ`, for messages.
fn time_text(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Reads a certificate and its key, and checks that the key is the certificate's and
/// that the certificate is in date now.
pub fn load_certified_key(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TransportError> {
    let chain = read_certificates(cert_path)?;
    let key_pem = read(key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| bad(key_path, "holds no PEM private key"))?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| bad(key_path, format!("not a usable private key ({e})")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    if let Err(error) = certified.keys_match() {
        if !matches!(
            error,
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)
        ) {
            return Err(TransportError::KeyMismatch {
                cert: cert_path.to_path_buf(),
                key: key_path.to_path_buf(),
            });
        }
    }
    let leaf = certified
        .cert
        .first()
        .and_then(|der| CertificateFacts::parse(der))
        .ok_or_else(|| bad(cert_path, "its first certificate does not parse as X.509"))?;
    let now = unix_now();
    if leaf.not_after < now {
        return Err(bad(
            cert_path,
            format!("certificate expired at {}", time_text(leaf.not_after)),
        ));
    }
    if leaf.not_before > now {
        return Err(bad(
            cert_path,
            format!(
                "certificate is not valid before {}",
                time_text(leaf.not_before)
            ),
        ));
    }
    Ok(certified)
}

/// What a pair of files looked like when last read: a change of either re-reads both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    cert: (Option<SystemTime>, u64),
    key: (Option<SystemTime>, u64),
}

fn stamp_of(path: &Path) -> (Option<SystemTime>, u64) {
    fs::metadata(path).map_or((None, 0), |m| (m.modified().ok(), m.len()))
}

/// A certificate and key read from files, re-read on the next use after either file
/// changes. A rotation that leaves the files unusable (half written, mismatched,
/// expired) keeps the previous certificate in use and logs why.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    /// Reads the files now: an error here stops startup, naming the file.
    pub fn open(
        cert_path: &Path,
        key_path: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TransportError> {
        let stamp = Stamp {
            cert: stamp_of(cert_path),
            key: stamp_of(key_path),
        };
        let key = Arc::new(load_certified_key(cert_path, key_path, &provider)?);
        Ok(ReloadingCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            provider,
            current: Mutex::new((stamp, key)),
        })
    }

    /// The certificate to present now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let stamp = Stamp {
            cert: stamp_of(&self.cert_path),
            key: stamp_of(&self.key_path),
        };
        let mut current = match self.current.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if current.0 != stamp {
            match load_certified_key(&self.cert_path, &self.key_path, &self.provider) {
                Ok(key) => {
                    tracing::info!(cert_file = %self.cert_path.display(), "certificate reloaded");
                    *current = (stamp, Arc::new(key));
                }
                Err(error) => {
                    // Remember the stamp: retrying the same broken files on every
                    // handshake would only repeat the warning.
                    tracing::warn!(%error, "certificate files changed but cannot be used; \
                        keeping the previous certificate");
                    current.0 = stamp;
                }
            }
        }
        current.1.clone()
    }
}

impl rustls::server::ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_compare_without_leading_zeros() {
        assert_eq!(trim_serial(&[0, 0, 0x81, 2]), vec![0x81, 2]);
        assert_eq!(trim_serial(&[0]), Vec::<u8>::new());
    }

    #[test]
    fn host_names_match_as_go_verify_hostname() {
        let facts = CertificateFacts {
            dns_names: vec!["*.example.com".into(), "etcd.local".into()],
            ip_addresses: vec!["127.0.0.1".parse().unwrap()],
            ..Default::default()
        };
        assert!(facts.valid_for("a.example.com"));
        assert!(!facts.valid_for("a.b.example.com"));
        assert!(!facts.valid_for("example.com"));
        assert!(facts.valid_for("ETCD.local."));
        assert!(facts.valid_for("127.0.0.1"));
        assert!(!facts.valid_for("127.0.0.2"));
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn malformed_and_mismatched_files_are_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let provider = rustls::crypto::ring::default_provider();
        let (cert_a, key_a) = self_signed("a.example");
        let (_, key_b) = self_signed("b.example");
        let cert = write(dir.path(), "a.crt", cert_a.as_bytes());
        let key = write(dir.path(), "a.key", key_a.as_bytes());
        let other_key = write(dir.path(), "b.key", key_b.as_bytes());
        let garbage = write(
            dir.path(),
            "garbage.pem",
            b"-----BEGIN CERTIFICATE-----\n!!!\n",
        );
        let empty = write(dir.path(), "empty.pem", b"");
        assert!(load_certified_key(&cert, &key, &provider).is_ok());
        let mismatch = load_certified_key(&cert, &other_key, &provider).unwrap_err();
        assert!(
            matches!(mismatch, TransportError::KeyMismatch { .. }),
            "{mismatch}"
        );
        assert!(mismatch.to_string().contains("b.key"), "{mismatch}");
        for bad in [&garbage, &empty] {
            let error = load_certified_key(bad, &key, &provider).unwrap_err();
            assert!(
                error.to_string().contains(&*bad.to_string_lossy()),
                "{error}"
            );
        }
        // A certificate is not a key, and a key's text never reaches the message.
        let error = load_certified_key(&cert, &cert, &provider).unwrap_err();
        assert!(
            error.to_string().contains("holds no PEM private key"),
            "{error}"
        );
        let error = load_certified_key(&key, &key, &provider).unwrap_err();
        assert!(!error.to_string().contains("PRIVATE KEY-----"), "{error}");
        let missing = dir.path().join("missing.crt");
        let error = load_certified_key(&missing, &key, &provider).unwrap_err();
        assert!(matches!(error, TransportError::Read { .. }), "{error}");
        // Revocation lists: garbage in either encoding is an error naming the file.
        for bad in [&garbage, &cert] {
            let error = revoked_serials(bad).unwrap_err();
            assert!(
                error.to_string().contains(&*bad.to_string_lossy()),
                "{error}"
            );
        }
        let der = write(dir.path(), "garbage.crl", &[0x30, 0x03, 0x02, 0x01]);
        assert!(revoked_serials(&der).is_err());
    }

    #[test]
    fn a_rotation_to_unusable_files_keeps_the_previous_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert_a, key_a) = self_signed("a.example");
        let cert = write(dir.path(), "tls.crt", cert_a.as_bytes());
        let key = write(dir.path(), "tls.key", key_a.as_bytes());
        let reloading = ReloadingCert::open(&cert, &key, provider).unwrap();
        let first = reloading.current();
        // Half a rotation: a new certificate, the old key.
        let (cert_b, key_b) = self_signed("b.example");
        fs::write(&cert, cert_b.as_bytes()).unwrap();
        assert_eq!(
            reloading.current().cert,
            first.cert,
            "kept while mismatched"
        );
        // The rotation completes: the new pair is served.
        fs::write(&key, key_b.as_bytes()).unwrap();
        let rotated = reloading.current();
        assert_ne!(rotated.cert, first.cert);
        let facts = CertificateFacts::parse(&rotated.cert[0]).unwrap();
        assert!(facts.valid_for("b.example"));
    }

    #[test]
    fn times_print_as_utc() {
        assert_eq!(time_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(time_text(1_798_761_600), "2027-01-01T00:00:00Z");
    }
}
