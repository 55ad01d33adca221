//! Outgoing TLS: how this member reaches another member's `https://` URL, presenting
//! its side's client certificate and verifying the server's against the side's
//! trusted CA (or, with auto-TLS, accepting any, as etcd's self-signed setups do).
//!
//! This module owns outgoing TLS only; connections still go through the raft crate's
//! [`Dialer`] seam. The files are read at each dial, which is rare (channels are pooled),
//! so that a rotated certificate is used from the next connection on.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use quantykube_raft::{DialFuture, Dialer, DialerError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tonic::transport::{ClientTlsConfig, Endpoint, Identity};

use super::anchors::{server_verifier, TrustAnchors};
use super::certs::load_certified_key;
use super::{SideTls, TransportError};

/// What this member presents and trusts when it connects to one side of other members.
#[derive(Clone, Debug)]
pub struct OutgoingTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    trusted_ca_file: Option<PathBuf>,
    /// Auto-TLS: the other members' certificates are self-signed; accept any.
    skip_verify: bool,
    provider: Arc<CryptoProvider>,
}

impl OutgoingTls {
    /// `None` when the side has no certificate (only `http://` URLs can be reached).
    pub fn new(side: &SideTls, provider: Arc<CryptoProvider>) -> Option<OutgoingTls> {
        let (cert, key) = side.client_cert_and_key()?;
        Some(OutgoingTls {
            cert_file: cert.to_path_buf(),
            key_file: key.to_path_buf(),
            trusted_ca_file: side.info.trusted_ca_file.clone(),
            skip_verify: side.self_signed,
            provider,
        })
    }

    /// Checks the files now, so that a bad client certificate stops startup.
    pub fn check(&self) -> Result<(), TransportError> {
        load_certified_key(&self.cert_file, &self.key_file, &self.provider)?;
        Ok(())
    }

    fn configure(&self, endpoint: Endpoint) -> Result<Endpoint, TransportError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| TransportError::Read {
                path: path.clone(),
                source,
            })
        };
        // Checked as at startup: a half-rotated pair fails this dial, not silently later.
        load_certified_key(&self.cert_file, &self.key_file, &self.provider)?;
        let identity = Identity::from_pem(read(&self.cert_file)?, read(&self.key_file)?);
        let verifier: Arc<dyn ServerCertVerifier> = if self.skip_verify {
            accept_any_server(self.provider.clone())
        } else {
            let ca = self
                .trusted_ca_file
                .as_ref()
                .ok_or_else(|| TransportError::NoTrustedCa(endpoint.uri().to_string()))?;
            server_verifier(&TrustAnchors::read(ca)?, self.provider.clone()).map_err(|e| {
                TransportError::Invalid {
                    path: ca.clone(),
                    reason: format!("cannot verify server certificates with it ({e})"),
                }
            })?
        };
        endpoint
            .tls_config_with_verifier(
                ClientTlsConfig::new().identity(identity).assume_http2(true),
                verifier,
            )
            .map_err(|e| TransportError::Dial(e.to_string()))
    }
}

/// A dialer that adds TLS to `https://` endpoints and passes `http://` ones through.
pub struct TlsDialer {
    inner: Arc<dyn Dialer>,
    tls: Option<OutgoingTls>,
    /// The address connections leave from (the `SetMemberLocalAddr` gate).
    local_address: Option<IpAddr>,
}

impl TlsDialer {
    pub fn new(inner: Arc<dyn Dialer>, tls: Option<OutgoingTls>) -> Self {
        TlsDialer {
            inner,
            tls,
            local_address: None,
        }
    }

    /// Connections leave from `address` instead of the one the system picks.
    pub fn with_local_address(mut self, address: Option<IpAddr>) -> Self {
        self.local_address = address;
        self
    }
}

impl Dialer for TlsDialer {
    fn dial(&self, endpoint: Endpoint) -> DialFuture {
        let endpoint = match self.local_address {
            Some(address) => endpoint.local_address(Some(address)),
            None => endpoint,
        };
        if endpoint.uri().scheme_str() != Some("https") {
            return self.inner.dial(endpoint);
        }
        let configured = match &self.tls {
            Some(tls) => tls.configure(endpoint),
            None => Err(TransportError::NoCertificate(endpoint.uri().to_string())),
        };
        match configured {
            Ok(endpoint) => {
                // The raft network logs a failed dial with its error's text: carry the
                // TLS reason (say, a server certificate the CA does not verify) up to it.
                let dial = self.inner.dial(endpoint);
                Box::pin(async move {
                    dial.await
                        .map_err(|e| DialerError::from(super::error_chain(e.as_ref())))
                })
            }
            Err(error) => {
                tracing::warn!(%error, "cannot dial over TLS");
                Box::pin(async move { Err(DialerError::from(error)) })
            }
        }
    }
}

/// Accepts any server certificate but still checks its handshake signatures (the
/// connection is encrypted, not authenticated), as Go's `InsecureSkipVerify`: for
/// auto-TLS members and `quantykube bench --insecure-skip-tls-verify`.
pub fn accept_any_server(provider: Arc<CryptoProvider>) -> Arc<dyn ServerCertVerifier> {
    Arc::new(AcceptAnyServer(provider))
}

#[derive(Debug)]
struct AcceptAnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
