//! TLS of a client connection: etcdctl's flags `--cacert`, `--cert`, `--key` and
//! `--insecure-skip-tls-verify`, read once into the client configuration every
//! `https://` connection uses (`quantykube bench`, `snapshot save`, `admin`).
//!
//! This module owns reading and checking the PEM files (so that a missing or bad file
//! is named before any connection is tried, not found as a handshake failure on every
//! request) and choosing the server verifier: the transport's (a chain to `--cacert`,
//! or one of its certificates itself, as Go accepts) or `--insecure-skip-tls-verify`'s. It must never decide
//! which endpoints use TLS: `endpoints` does, from the endpoint's scheme.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{ClientTlsConfig, Endpoint, Identity};

use super::error::ClientError;
use crate::transport::{error_chain, TrustAnchors};

/// etcdctl's TLS flags: `--cacert`, `--cert`, `--key`, `--insecure-skip-tls-verify`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TlsFiles<'a> {
    pub cacert: Option<&'a Path>,
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
    pub insecure_skip_tls_verify: bool,
}

impl TlsFiles<'_> {
    /// Any TLS flag makes a `host:port` endpoint a TLS one, as in etcd's client.
    pub fn requested(&self) -> bool {
        self.cacert.is_some()
            || self.cert.is_some()
            || self.key.is_some()
            || self.insecure_skip_tls_verify
    }
}

/// The client side of TLS, as the flags ask for it.
#[derive(Clone)]
pub struct ClientTls {
    config: ClientTlsConfig,
    /// With `--insecure-skip-tls-verify`: replaces the CA check.
    verifier: Option<Arc<dyn ServerCertVerifier>>,
}

impl ClientTls {
    /// The TLS configuration the flags describe, or `None` if no TLS flag is given.
    /// Reads and checks every file named: the CA bundle must hold at least one usable
    /// CA certificate, the key must be the private key of `--cert`.
    pub fn from_files(args: &TlsFiles<'_>) -> Result<Option<ClientTls>, ClientError> {
        if !args.requested() {
            return Ok(None);
        }
        // tonic builds its rustls configs with the process's default provider; ring is
        // the only one compiled in, and installing it twice (or after another part of
        // the process did) is harmless, so the error is ignored.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let provider = rustls::crypto::ring::default_provider();

        let provider = Arc::new(provider);
        let mut config = ClientTlsConfig::new();
        let mut verifier = None;
        if let Some(path) = args.cacert {
            let pem = read("--cacert", path)?;
            let anchors = ca_bundle(path, &pem)?;
            // With --insecure-skip-tls-verify the verifier below replaces the CA check (as
            // Go's InsecureSkipVerify ignores RootCAs); the bundle is still read above so
            // that a wrong path is not silently accepted. Without it, the transport's
            // verifier: a chain to the bundle, or a certificate of the bundle itself, as
            // Go's client accepts a self-signed CA certificate its --cacert names.
            if !args.insecure_skip_tls_verify {
                let chosen = crate::transport::server_verifier(&anchors, provider.clone())
                    .map_err(|e| ClientError::Tls(format!("--cacert {}: {e}", path.display())))?;
                verifier = Some(chosen);
            }
        }
        match (args.cert, args.key) {
            (Some(cert_path), Some(key_path)) => {
                let cert_pem = read("--cert", cert_path)?;
                let key_pem = read("--key", key_path)?;
                check_key_pair(cert_path, &cert_pem, key_path, &key_pem, &provider)?;
                config = config.identity(Identity::from_pem(cert_pem, key_pem));
            }
            (None, None) => {}
            // `quantykube bench` refuses this in validate(); the other commands here.
            _ => return Err(ClientError::Usage("--cert and --key go together".into())),
        }
        // Any server certificate, its handshake signatures still checked (the
        // transport's auto-TLS verifier: Go's InsecureSkipVerify).
        if args.insecure_skip_tls_verify {
            verifier = Some(crate::transport::accept_any_server(provider));
        }
        Ok(Some(ClientTls { config, verifier }))
    }

    /// `endpoint` (an `https://` one) with this configuration.
    pub fn apply(&self, endpoint: Endpoint, url: &str) -> Result<Endpoint, ClientError> {
        let config = self.config.clone();
        match &self.verifier {
            Some(verifier) => endpoint.tls_config_with_verifier(config, verifier.clone()),
            None => endpoint.tls_config(config),
        }
        .map_err(|e| ClientError::Tls(format!("endpoint {url}: {}", error_chain(&e))))
    }
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path)
        .map_err(|e| ClientError::Tls(format!("{flag} {}: cannot read: {e}", path.display())))
}

/// The bundle's certificates as trust anchors: at least one, each usable as one.
fn ca_bundle(path: &Path, pem: &[u8]) -> Result<TrustAnchors, ClientError> {
    let bad = |what: String| ClientError::Tls(format!("--cacert {}: {what}", path.display()));
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM certificate bundle: {e}")))?;
    let anchors = TrustAnchors::from_certificates(certificates)
        .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    if anchors.is_empty() {
        return Err(bad(
            "no PEM certificate (BEGIN CERTIFICATE) in the file".into()
        ));
    }
    Ok(anchors)
}

/// `--cert` holds a certificate chain, `--key` a private key, and the key is the
/// certificate's: a mismatch would otherwise show only as the server refusing every
/// handshake.
fn check_key_pair(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    provider: &rustls::crypto::CryptoProvider,
) -> Result<(), ClientError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            ClientError::Tls(format!(
                "--cert {}: not a PEM certificate: {e}",
                cert_path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(ClientError::Tls(format!(
            "--cert {}: no PEM certificate (BEGIN CERTIFICATE) in the file",
            cert_path.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
        ClientError::Tls(format!(
            "--key {}: no usable PEM private key: {e}",
            key_path.display()
        ))
    })?;
    rustls::sign::CertifiedKey::from_der(certs, key, provider).map_err(|e| {
        ClientError::Tls(format!(
            "--key {} does not go with --cert {}: {e}",
            key_path.display(),
            cert_path.display()
        ))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The TLS configuration of etcdctl's TLS flags, as a command gives them.
    fn from_flags(flags: &[&str]) -> Result<Option<ClientTls>, ClientError> {
        let value = |flag: &str| {
            flags
                .iter()
                .position(|f| *f == flag)
                .map(|i| Path::new(flags[i + 1]))
        };
        ClientTls::from_files(&TlsFiles {
            cacert: value("--cacert"),
            cert: value("--cert"),
            key: value("--key"),
            insecure_skip_tls_verify: flags.contains(&"--insecure-skip-tls-verify"),
        })
    }

    // A throwaway self-signed P-256 CA certificate (valid until 2126), its key, and an
    // unrelated key; made with openssl for these tests only.
    const CERT: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBiDCCAS2gAwIBAgIUX0WlPPiF11Mg3Jp8Wn+FpDPRHfYwCgYIKoZIzj0EAwIw\n\
GDEWMBQGA1UEAwwNYmVuY2gtdGVzdC1jYTAgFw0yNjEyMDExMjQ2MDJaGA8yMTI2\n\
MTEwNzEyNDYwMlowGDEWMBQGA1UEAwwNYmVuY2gtdGVzdC1jYTBZMBMGByqGSM49\n\
AgEGCCqGSM49AwEHA0IABNODOVLqPN8iJbBDg6u2uZJW9mwhXowqf4QSqJ4//xWQ\n\
oZyi1ZmZ+/AOr3fe+hoq412aaImDHBLVkScLzMS2KWSjUzBRMB0GA1UdDgQWBBRg\n\
euDfj/1VV7mDFLmcidV2pFmIjDAfBgNVHSMEGDAWgBRgeuDfj/1VV7mDFLmcidV2\n\
pFmIjDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQCQNEJLnSt/\n\
dNJyY/rnVZMG1NgSsq87WsM+ctZSHm/RAwIhAOt5KDcJn7eoH6P3rQuXr/aoebXK\n\
/qfS1jZsLH40HG1b\n\
-----END CERTIFICATE-----";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgf0D/NuoYtc3QSYBN\n\
dQy9jx/UZ8f8+w/VIgt9FK4DUwShRANCAATTgzlS6jzfIiWwQ4OrtrmSVvZsIV6M\n\
Kn+EEqieP/8VkKGcotWZmfvwDq933voaKuNdmmiJgxwS1ZEnC8zEtilk\n\
-----END PRIVATE KEY-----";
    const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgj9wKZFHrAMbxsruJ\n\
Qk2i7OeDC3F88CJaB0PaynyVUAahRANCAASsjjdhcg4xQEyXFMbE3P1ZqrBddFia\n\
weJASO1dC7IBnxrvECFxHomrlWMaRySHoZoG4y3K+CSXmppAz8rHrqr4\n\
-----END PRIVATE KEY-----";

    fn write(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path.to_str().expect("utf-8 temp dir").to_owned()
    }

    fn missing() -> PathBuf {
        std::env::temp_dir().join("quantykube-client-tls-test-no-such-file.pem")
    }

    #[test]
    fn no_flags_no_tls() {
        assert!(from_flags(&[]).expect("no files").is_none());
    }

    #[test]
    fn errors_name_the_missing_file() {
        let path = missing();
        let path = path.to_str().expect("utf-8 temp dir");
        let error = from_flags(&["--cacert", path])
            .err()
            .expect("missing CA")
            .to_string();
        assert!(
            error.contains("--cacert") && error.contains(path),
            "{error}"
        );
        let error = from_flags(&["--cert", path, "--key", path])
            .err()
            .expect("missing cert")
            .to_string();
        assert!(error.contains("--cert") && error.contains(path), "{error}");
    }

    #[test]
    fn a_file_without_pem_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let path = path.to_str().expect("utf-8 temp dir");
        let error = from_flags(&["--cacert", path])
            .err()
            .expect("bad CA")
            .to_string();
        assert!(
            error.contains(path) && error.contains("no PEM certificate"),
            "{error}"
        );
    }

    #[test]
    fn good_files_load_and_a_foreign_key_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = write(dir.path(), "cert.pem", CERT);
        let key = write(dir.path(), "key.pem", KEY);
        let other = write(dir.path(), "other-key.pem", OTHER_KEY);
        let tls = from_flags(&["--cacert", &cert, "--cert", &cert, "--key", &key])
            .expect("good files")
            .expect("TLS");
        // The anchors' verifier: a chain to --cacert, or --cacert's certificate itself.
        assert!(tls.verifier.is_some());
        let endpoint = Endpoint::from_static("https://127.0.0.1:2379");
        assert!(tls.apply(endpoint, "https://127.0.0.1:2379").is_ok());

        let error = from_flags(&["--cacert", &cert, "--cert", &cert, "--key", &other])
            .err()
            .expect("foreign key")
            .to_string();
        assert!(
            error.contains(&other) && error.contains(&cert) && error.contains("does not go with"),
            "{error}"
        );
        // A certificate where the key should be.
        let error = from_flags(&["--cacert", &cert, "--cert", &cert, "--key", &cert])
            .err()
            .expect("no key")
            .to_string();
        assert!(error.contains("--key") && error.contains(&cert), "{error}");
    }

    #[test]
    fn insecure_skip_verify_alone_is_tls() {
        let tls = from_flags(&["--insecure-skip-tls-verify"])
            .expect("no files")
            .expect("TLS");
        assert!(tls.verifier.is_some());
        let endpoint = Endpoint::from_static("https://127.0.0.1:2379");
        assert!(tls.apply(endpoint, "https://127.0.0.1:2379").is_ok());
    }
}
