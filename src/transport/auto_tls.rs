//! `--auto-tls` and `--peer-auto-tls`: a self-signed certificate for one side, made
//! once under `<data-dir>/fixtures/{client,peer}` (`cert.pem`, `key.pem`) and reused
//! on restart, as etcd's `transport.SelfCert` makes it: organisation "etcd", valid for
//! `--self-signed-cert-validity` years, for the hosts of the side's listen URLs.
//!
//! This module owns making those files. It never decides whether auto-TLS applies
//! (`transport::SideTls` does) and never logs key material.

use std::io::Write;
use std::path::{Path, PathBuf};

use quantykube_raft::durable;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};

use super::TransportError;

/// The certificate and key files of a self-signed certificate in `dir`, made now if
/// either is missing. `hosts` are host names or IP addresses.
pub fn self_cert(
    dir: &Path,
    hosts: &[String],
    validity_years: u64,
) -> Result<(PathBuf, PathBuf), TransportError> {
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    if cert_path.exists() && key_path.exists() {
        return Ok((cert_path, key_path));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TransportError::Write { path, source }
    };
    durable::create_dir_all(dir).map_err(io(dir))?;
    let generation = |reason: rcgen::Error| TransportError::Generate(reason.to_string());
    // ring signs with P-256 and P-384 only; etcd's P-521 is not on offer.
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).map_err(generation)?;
    let mut params = CertificateParams::new(hosts.to_vec()).map_err(generation)?;
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "etcd");
    params.distinguished_name = name;
    let now = time::OffsetDateTime::now_utc();
    let days = i64::try_from(validity_years.saturating_mul(365)).unwrap_or(i64::MAX / 2);
    params.not_before = now;
    params.not_after = now.saturating_add(time::Duration::days(days));
    let mut serial: [u8; 16] = rand::random();
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    // The client usage too: a member presents this certificate when it connects to
    // another member, as etcd's peer fixtures do.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.self_signed(&key).map_err(generation)?;
    tracing::warn!(
        dir = %dir.display(),
        valid_years = validity_years,
        "automatically generated a self-signed certificate"
    );
    // Each file is whole or absent after a power cut, the key (only its owner may
    // read it, as etcd writes it) before the certificate: a key without its
    // certificate is made again at the next start.
    let key_pem = key.serialize_pem();
    durable::write_file_with(&key_path, 0o600, |file| file.write_all(key_pem.as_bytes()))
        .map_err(io(&key_path))?;
    durable::write_file(&cert_path, cert.pem().as_bytes()).map_err(io(&cert_path))?;
    Ok((cert_path, key_path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn makes_a_certificate_once_and_reuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = dir.path().join("fixtures").join("client");
        let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let (cert, key) = self_cert(&fixtures, &hosts, 2).unwrap();
        let first = fs::read(&cert).unwrap();
        let (again, _) = self_cert(&fixtures, &hosts, 2).unwrap();
        assert_eq!(fs::read(again).unwrap(), first, "the files are reused");
        let provider = rustls::crypto::ring::default_provider();
        let loaded = super::super::certs::load_certified_key(&cert, &key, &provider).unwrap();
        let facts = super::super::certs::CertificateFacts::parse(&loaded.cert[0]).unwrap();
        assert!(facts.valid_for("127.0.0.1") && facts.valid_for("localhost"));
        let years = (facts.not_after - facts.not_before) / (365 * 86_400);
        assert_eq!(years, 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "the key is private to its owner");
        }
    }
}
