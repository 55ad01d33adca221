//! A side's trusted CA file as trust anchors, and the one case Go's `x509` accepts that
//! webpki does not: a peer certificate that is itself one of the anchors (a self-signed
//! `CA:TRUE` certificate used as server, client and CA certificate at once, as etcd's
//! test fixtures, many tutorials and dev clusters do).
//!
//! Go's `Certificate.Verify` starts from the leaf: if the pool holds a certificate of
//! the very same bytes (`CertPool.contains`, by a hash of the DER), the chain is that
//! certificate alone, and what is still checked is its validity period, its host name
//! (a server's) and its extended key usage. webpki refuses any `CA:TRUE` leaf
//! (`CaUsedAsEndEntity`), so a QuantyKube member refused every such handshake.
//!
//! This module owns that rule and the operator's words for why a certificate was
//! refused. It must never loosen anything else: a certificate an anchor signed, or one
//! with an anchor's subject or key but other bytes, goes through webpki's chain
//! verification exactly as before.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore};

use super::certs::{read_certificates, CertificateFacts};
use super::TransportError;

/// The certificates of a trusted CA file, as anchors and as the exact bytes Go compares.
#[derive(Clone, Debug)]
pub struct TrustAnchors {
    certificates: Vec<CertificateDer<'static>>,
    roots: Arc<RootCertStore>,
}

/// What the peer's certificate must be good for (its extended key usage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A client's certificate, checked by a server.
    ClientAuth,
    /// A server's certificate, checked by a client.
    ServerAuth,
}

impl TrustAnchors {
    /// Reads a trusted CA file: every certificate in it must be usable as an anchor.
    pub fn read(path: &Path) -> Result<TrustAnchors, TransportError> {
        let certificates = read_certificates(path)?;
        TrustAnchors::from_certificates(certificates).map_err(|e| TransportError::Invalid {
            path: path.to_path_buf(),
            reason: format!("holds a certificate that cannot be a trust anchor ({e})"),
        })
    }

    /// Anchors from certificates already read (an etcdctl-style `--cacert` bundle).
    pub fn from_certificates(
        certificates: Vec<CertificateDer<'static>>,
    ) -> Result<TrustAnchors, rustls::Error> {
        let mut roots = RootCertStore::empty();
        for cert in &certificates {
            roots.add(cert.clone())?;
        }
        Ok(TrustAnchors {
            certificates,
            roots: Arc::new(roots),
        })
    }

    /// The anchors as webpki's root store.
    pub fn roots(&self) -> Arc<RootCertStore> {
        self.roots.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
    }

    /// `None` if `end_entity` is not byte for byte one of the anchors: verify it as a
    /// chain. Otherwise Go's verdict on an anchor presented as the peer's own
    /// certificate: valid now, allowed `purpose`, and (a server's) valid for
    /// `server_name`.
    pub fn verify_as_own(
        &self,
        end_entity: &CertificateDer<'_>,
        purpose: Purpose,
        server_name: Option<&ServerName<'_>>,
        now: UnixTime,
    ) -> Option<Result<(), rustls::Error>> {
        let is_anchor = self
            .certificates
            .iter()
            .any(|anchor| anchor.as_ref() == end_entity.as_ref());
        is_anchor.then(|| check_anchor_as_own(end_entity, purpose, server_name, now))
    }

    /// `error` (webpki's verdict on `end_entity`) in words an operator can act on,
    /// where webpki's own are only a variant name.
    pub fn explain(&self, error: rustls::Error, end_entity: &CertificateDer<'_>) -> rustls::Error {
        let catch_all = matches!(
            error,
            rustls::Error::InvalidCertificate(CertificateError::Other(_))
        );
        if catch_all && is_ca_certificate(end_entity) {
            return refusal(Refusal::CaNotAnAnchor);
        }
        error
    }
}

fn check_anchor_as_own(
    end_entity: &CertificateDer<'_>,
    purpose: Purpose,
    server_name: Option<&ServerName<'_>>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let bad = rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
    let facts = CertificateFacts::parse(end_entity).ok_or(bad.clone())?;
    let now_seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if now_seconds < facts.not_before {
        return Err(CertificateError::NotValidYet.into());
    }
    if now_seconds > facts.not_after {
        return Err(CertificateError::Expired.into());
    }
    let (_, cert) = x509_parser::parse_x509_certificate(end_entity).map_err(|_| bad.clone())?;
    // Go: a certificate without the extension may be used for anything; with it, the
    // purpose or anyExtendedKeyUsage must be listed.
    if let Some(usage) = cert.extended_key_usage().map_err(|_| bad)? {
        let usage = usage.value;
        let allowed = usage.any
            || match purpose {
                Purpose::ClientAuth => usage.client_auth,
                Purpose::ServerAuth => usage.server_auth,
            };
        if !allowed {
            return Err(CertificateError::InvalidPurpose.into());
        }
    }
    if let Some(name) = server_name {
        let host = match name {
            ServerName::DnsName(dns) => dns.as_ref().to_owned(),
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            _ => return Err(CertificateError::NotValidForName.into()),
        };
        if !facts.valid_for(&host) {
            return Err(CertificateError::NotValidForName.into());
        }
    }
    Ok(())
}

/// Whether the certificate says `CA:TRUE` in its basic constraints.
fn is_ca_certificate(der: &CertificateDer<'_>) -> bool {
    x509_parser::parse_x509_certificate(der)
        .ok()
        .and_then(|(_, cert)| cert.basic_constraints().ok().flatten().map(|b| b.value.ca))
        .unwrap_or(false)
}

/// Refusals whose reason rustls can only carry as `CertificateError::Other`.
#[derive(thiserror::Error)]
pub enum Refusal {
    #[error(
        "it is a CA certificate (CA:TRUE) and not one of the trusted CA file's \
         certificates: present a certificate that CA signed, or exactly a certificate \
         the trusted CA file holds"
    )]
    CaNotAnAnchor,
}

// rustls prints `CertificateError::Other` with `Debug`; the log line must read as words.
impl fmt::Debug for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn refusal(reason: Refusal) -> rustls::Error {
    CertificateError::Other(OtherError(Arc::new(reason))).into()
}

/// A server certificate verifier: webpki's chain verification against the anchors,
/// and an anchor presented as the server's own certificate accepted as Go accepts it.
pub fn server_verifier(
    anchors: &TrustAnchors,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, rustls::client::VerifierBuilderError> {
    let chains = WebPkiServerVerifier::builder_with_provider(anchors.roots(), provider).build()?;
    Ok(Arc::new(AnchorsServerVerifier {
        chains,
        anchors: anchors.clone(),
    }))
}

#[derive(Debug)]
struct AnchorsServerVerifier {
    chains: Arc<WebPkiServerVerifier>,
    anchors: TrustAnchors,
}

impl ServerCertVerifier for AnchorsServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(verdict) =
            self.anchors
                .verify_as_own(end_entity, Purpose::ServerAuth, Some(server_name), now)
        {
            return verdict.map(|()| ServerCertVerified::assertion());
        }
        self.chains
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map_err(|e| self.anchors.explain(e, end_entity))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chains.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chains.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.chains.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType,
        ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
    };

    /// A self-signed `CA:TRUE` certificate, as `openssl req -x509` makes one: CN root,
    /// SANs localhost and 127.0.0.1, valid `from`..`to` (years), with `usages` as its
    /// extended key usage (none: the extension is absent).
    fn self_signed_ca(
        from: i32,
        to: i32,
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "root");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress([127, 0, 0, 1].into()),
        ];
        params.extended_key_usages = usages;
        params.not_before = date_time_ymd(from, 1, 1);
        params.not_after = date_time_ymd(to, 1, 1);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    fn anchors(certs: &[&CertifiedIssuer<'static, KeyPair>]) -> TrustAnchors {
        TrustAnchors::from_certificates(certs.iter().map(|c| c.der().clone()).collect()).unwrap()
    }

    fn now() -> UnixTime {
        UnixTime::now()
    }

    fn name(text: &str) -> ServerName<'static> {
        ServerName::try_from(text.to_owned()).unwrap()
    }

    #[test]
    fn an_anchor_is_accepted_as_client_and_server_certificate() {
        let ca = self_signed_ca(2020, 2099, Vec::new());
        let trusted = anchors(&[&ca]);
        assert!(matches!(
            trusted.verify_as_own(ca.der(), Purpose::ClientAuth, None, now()),
            Some(Ok(()))
        ));
        for host in ["localhost", "127.0.0.1"] {
            assert!(matches!(
                trusted.verify_as_own(ca.der(), Purpose::ServerAuth, Some(&name(host)), now()),
                Some(Ok(()))
            ));
        }
        // Go still checks the host name of a server's certificate.
        assert!(matches!(
            trusted.verify_as_own(
                ca.der(),
                Purpose::ServerAuth,
                Some(&name("etcd.example")),
                now()
            ),
            Some(Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName
            )))
        ));
    }

    #[test]
    fn only_the_very_same_bytes_count_as_an_anchor() {
        let ca = self_signed_ca(2020, 2099, Vec::new());
        let other = self_signed_ca(2020, 2099, Vec::new());
        let trusted = anchors(&[&ca]);
        // Same subject, another certificate: verified as a chain (and refused there).
        assert!(trusted
            .verify_as_own(other.der(), Purpose::ClientAuth, None, now())
            .is_none());
        // A certificate the anchor signed is verified as a chain, as before.
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "alice");
        let leaf = params
            .signed_by(&KeyPair::generate().unwrap(), &ca)
            .unwrap();
        assert!(trusted
            .verify_as_own(leaf.der(), Purpose::ClientAuth, None, now())
            .is_none());
    }

    #[test]
    fn an_anchor_out_of_its_validity_or_purpose_is_refused() {
        let expired = self_signed_ca(2020, 2021, Vec::new());
        let future = self_signed_ca(2090, 2099, Vec::new());
        let server_only = self_signed_ca(2020, 2099, vec![ExtendedKeyUsagePurpose::ServerAuth]);
        let any = self_signed_ca(2020, 2099, vec![ExtendedKeyUsagePurpose::Any]);
        let trusted = anchors(&[&expired, &future, &server_only, &any]);
        let verdict = |c: &CertifiedIssuer<'static, KeyPair>, purpose| {
            trusted
                .verify_as_own(c.der(), purpose, None, now())
                .expect("an anchor")
        };
        assert!(matches!(
            verdict(&expired, Purpose::ClientAuth),
            Err(rustls::Error::InvalidCertificate(CertificateError::Expired))
        ));
        assert!(matches!(
            verdict(&future, Purpose::ClientAuth),
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidYet
            ))
        ));
        assert!(matches!(
            verdict(&server_only, Purpose::ClientAuth),
            Err(rustls::Error::InvalidCertificate(
                CertificateError::InvalidPurpose
            ))
        ));
        assert!(verdict(&server_only, Purpose::ServerAuth).is_ok());
        assert!(verdict(&any, Purpose::ClientAuth).is_ok());
    }

    #[test]
    fn a_ca_certificate_that_is_no_anchor_is_refused_in_words() {
        let ca = self_signed_ca(2020, 2099, Vec::new());
        let stranger = self_signed_ca(2020, 2099, Vec::new());
        let trusted = anchors(&[&ca]);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = server_verifier(&trusted, provider).unwrap();
        let error = verifier
            .verify_server_cert(stranger.der(), &[], &name("localhost"), &[], now())
            .expect_err("a stranger's CA certificate is refused");
        let text = error.to_string();
        assert!(
            text.contains("CA:TRUE") && text.contains("not one of the trusted CA file"),
            "{text}"
        );
        // The anchor itself passes the same verifier.
        assert!(verifier
            .verify_server_cert(ca.der(), &[], &name("localhost"), &[], now())
            .is_ok());
        // Any other refusal keeps webpki's own error.
        let plain = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(matches!(
            trusted.explain(plain, stranger.der()),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        ));
    }
}
