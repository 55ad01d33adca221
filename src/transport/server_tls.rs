//! The rustls server configuration of one side (the client port or the peer port),
//! built once from etcd's flags: the versions and cipher suites allowed, the
//! certificate presented (re-read when its files change), and etcd's checks of a
//! client certificate: signed by the trusted CA (or one of its certificates itself, see
//! `anchors`), not revoked by the CRL file, and of an
//! allowed common name or host name.
//!
//! This module owns the handshake-time checks. The check that a client certificate
//! names the address it connects from needs that address, so it runs after the
//! handshake, in `listen`.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName};

use super::anchors::{Purpose, TrustAnchors};
use super::certs::{revoked_serials, CertificateFacts, ReloadingCert};
use super::{SideTls, TransportError};
use crate::config::{CipherSuite, TlsPolicy, TlsVersion};

/// The crypto provider both sides use: ring, with `--cipher-suites` (TLS 1.2 only, in
/// the given order; TLS 1.3's suites always stay enabled, as in Go).
pub fn provider(policy: &TlsPolicy) -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite as suite;
    let mut provider = rustls::crypto::ring::default_provider();
    if !policy.cipher_suites.is_empty() {
        let mut suites: Vec<_> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .copied()
            .collect();
        suites.extend(policy.cipher_suites.iter().map(|chosen| match chosen {
            CipherSuite::EcdheEcdsaAes128GcmSha256 => {
                suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            }
            CipherSuite::EcdheEcdsaAes256GcmSha384 => {
                suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            }
            CipherSuite::EcdheEcdsaChacha20Poly1305 => {
                suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            }
            CipherSuite::EcdheRsaAes128GcmSha256 => suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::EcdheRsaAes256GcmSha384 => suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::EcdheRsaChacha20Poly1305 => {
                suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            }
        }));
        provider.cipher_suites = suites;
    }
    Arc::new(provider)
}

/// The protocol versions `--tls-min-version` and `--tls-max-version` allow.
pub fn versions(policy: &TlsPolicy) -> Vec<&'static rustls::SupportedProtocolVersion> {
    let mut versions = Vec::new();
    let max = policy.max_version.unwrap_or(TlsVersion::Tls13);
    if policy.min_version <= TlsVersion::Tls12 && max >= TlsVersion::Tls12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= TlsVersion::Tls13 {
        versions.push(&rustls::version::TLS13);
    }
    versions
}

/// The server configuration of one side. `alpn`: the protocols offered, preferred
/// first (`h2` and `http/1.1` on the client port, which serves HTTP too).
pub fn server_config(
    side: &SideTls,
    policy: &TlsPolicy,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, TransportError> {
    let provider = provider(policy);
    let (cert, key) = side.cert_and_key()?;
    let resolver = Arc::new(ReloadingCert::open(cert, key, provider.clone())?);
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(policy))
        .map_err(TransportError::Rustls)?;
    let builder = match (&side.info.trusted_ca_file, side.requires_client_certs()) {
        (Some(ca), true) => {
            let anchors = TrustAnchors::read(ca)?;
            let inner = WebPkiClientVerifier::builder_with_provider(anchors.roots(), provider)
                .build()
                .map_err(|e| TransportError::Invalid {
                    path: ca.clone(),
                    reason: format!("cannot verify client certificates with it ({e})"),
                })?;
            builder.with_client_cert_verifier(Arc::new(EtcdClientVerifier {
                inner,
                anchors,
                crl_file: side.info.crl_file.clone(),
                allowed_cns: side.info.allowed_cns.clone(),
                allowed_hostnames: side.info.allowed_hostnames.clone(),
            }))
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The CA's verdict (a chain to an anchor, or an anchor itself, as Go accepts), then
/// etcd's own checks of a client certificate.
#[derive(Debug)]
struct EtcdClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    anchors: TrustAnchors,
    /// Re-read on every handshake, as etcd does, so that a revocation takes effect at
    /// once.
    crl_file: Option<PathBuf>,
    allowed_cns: Vec<String>,
    allowed_hostnames: Vec<String>,
}

impl EtcdClientVerifier {
    fn check_revocation(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<(), rustls::Error> {
        let Some(crl) = &self.crl_file else {
            return Ok(());
        };
        let revoked = revoked_serials(crl).map_err(|e| rustls::Error::General(e.to_string()))?;
        // etcd checks every certificate the client presented, not only the leaf.
        for der in std::iter::once(end_entity).chain(intermediates) {
            let facts = CertificateFacts::parse(der).ok_or(rustls::Error::InvalidCertificate(
                CertificateError::BadEncoding,
            ))?;
            if revoked.contains(&facts.serial) {
                return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
            }
        }
        Ok(())
    }

    fn check_identity(&self, facts: &CertificateFacts) -> Result<(), rustls::Error> {
        let cn_ok = self.allowed_cns.is_empty()
            || facts
                .common_name
                .as_ref()
                .is_some_and(|cn| self.allowed_cns.contains(cn));
        let host_ok = self.allowed_hostnames.is_empty()
            || self.allowed_hostnames.iter().any(|h| facts.valid_for(h));
        if cn_ok && host_ok {
            Ok(())
        } else {
            // etcd's "client certificate authentication failed".
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }
}

impl ClientCertVerifier for EtcdClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match self
            .anchors
            .verify_as_own(end_entity, Purpose::ClientAuth, None, now)
        {
            Some(verdict) => verdict?,
            None => {
                self.inner
                    .verify_client_cert(end_entity, intermediates, now)
                    .map_err(|e| self.anchors.explain(e, end_entity))?;
            }
        }
        self.check_revocation(end_entity, intermediates)?;
        let facts = CertificateFacts::parse(end_entity).ok_or(
            rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
        )?;
        self.check_identity(&facts)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
