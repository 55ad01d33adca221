//! etcd's TLS flags: what each side (the client port, the peer port) presents, whom it
//! trusts and which client certificates it admits, and the TLS versions and cipher
//! suites both sides allow. etcd's `transport.TLSInfo` and its checks in
//! `embed.Config.Validate`, with etcd's messages.
//!
//! This module owns reading those flags into [`TlsInfo`] and [`TlsPolicy`] and the
//! checks etcd makes before it opens a file. It never reads a certificate, knows
//! nothing of rustls (`transport` turns these into rustls configurations) and must
//! never touch the disk.

use std::collections::BTreeMap;
use std::path::PathBuf;

use url::Url;

use super::error::ConfigError;
use super::setting::Setting;
use super::values::{parse_go_bool, uint_setting, SYNTAX_ERROR};

/// One side's TLS, as etcd's `transport.TLSInfo`: the client port's (`--cert-file`...)
/// or the peer port's (`--peer-cert-file`...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// The certificate this side's https listeners present.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The certificate this member presents when it connects to this side of another
    /// member (`--client-cert-file`, `--peer-client-cert-file`); `cert_file` when unset.
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    /// Verifies connecting clients' certificates and, when this member connects out,
    /// the server's.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--client-cert-auth` / `--peer-client-cert-auth`. As in etcd, a trusted CA file
    /// alone also makes the listener require a client certificate.
    pub client_cert_auth: bool,
    /// Certificates whose serial this revocation list names are refused.
    pub crl_file: Option<PathBuf>,
    /// A client certificate must have one of these common names (peers only).
    pub allowed_cns: Vec<String>,
    /// A client certificate must be valid for one of these host names.
    pub allowed_hostnames: Vec<String>,
    /// `--auto-tls` / `--peer-auto-tls`: generate a self-signed certificate under
    /// `<data-dir>/fixtures/{client,peer}` when no certificate is given.
    pub auto_tls: bool,
    /// `--peer-skip-client-san-verification`: do not check that a client certificate's
    /// addresses include the address it connects from.
    pub skip_client_san_verification: bool,
}

impl TlsInfo {
    /// etcd's `TLSInfo.Empty()`: no certificate is configured (auto-TLS may add one).
    pub fn is_empty(&self) -> bool {
        self.cert_file.is_none() && self.key_file.is_none()
    }

    /// Whether https listeners of this side ask for and verify client certificates.
    pub fn requires_client_certs(&self) -> bool {
        !self.is_empty() && (self.client_cert_auth || self.trusted_ca_file.is_some())
    }
}

/// A TLS protocol version, as etcd's `--tls-min-version` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLS1.2",
            TlsVersion::Tls13 => "TLS1.3",
        }
    }
}

/// A TLS 1.2 cipher suite QuantyKube can offer (rustls implements only ECDHE key
/// exchange with AEAD ciphers). TLS 1.3's suites are always all enabled, as in Go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CipherSuite {
    EcdheEcdsaAes128GcmSha256,
    EcdheEcdsaAes256GcmSha384,
    EcdheEcdsaChacha20Poly1305,
    EcdheRsaAes128GcmSha256,
    EcdheRsaAes256GcmSha384,
    EcdheRsaChacha20Poly1305,
}

/// Go's names (`tls.CipherSuiteName`) for the suites QuantyKube can offer. `None`: a
/// TLS 1.3 suite, which Go accepts in the list and ignores.
const SUPPORTED_SUITES: &[(&str, Option<CipherSuite>)] = &[
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        Some(CipherSuite::EcdheEcdsaAes128GcmSha256),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        Some(CipherSuite::EcdheEcdsaAes256GcmSha384),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        Some(CipherSuite::EcdheEcdsaChacha20Poly1305),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::EcdheEcdsaChacha20Poly1305),
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        Some(CipherSuite::EcdheRsaAes128GcmSha256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        Some(CipherSuite::EcdheRsaAes256GcmSha384),
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        Some(CipherSuite::EcdheRsaChacha20Poly1305),
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::EcdheRsaChacha20Poly1305),
    ),
    ("TLS_AES_128_GCM_SHA256", None),
    ("TLS_AES_256_GCM_SHA384", None),
    ("TLS_CHACHA20_POLY1305_SHA256", None),
];

/// Suites Go (and so etcd) knows but rustls does not implement: static RSA key
/// exchange, CBC, RC4 and 3DES.
const UNSUPPORTED_GO_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// What both sides allow: `--tls-min-version`, `--tls-max-version`, `--cipher-suites`
/// and `--self-signed-cert-validity`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPolicy {
    pub min_version: TlsVersion,
    /// `None`: the highest version rustls implements (etcd's empty default).
    pub max_version: Option<TlsVersion>,
    /// TLS 1.2 suites in the order given; empty means rustls' defaults.
    pub cipher_suites: Vec<CipherSuite>,
    /// Years an auto-TLS certificate is valid for.
    pub self_signed_cert_validity_years: u64,
}

impl Default for TlsPolicy {
    fn default() -> Self {
        TlsPolicy {
            min_version: TlsVersion::Tls12,
            max_version: None,
            cipher_suites: Vec::new(),
            self_signed_cert_validity_years: 1,
        }
    }
}

/// The client side's, the peer side's and the shared TLS settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub client: TlsInfo,
    pub peer: TlsInfo,
    pub policy: TlsPolicy,
}

/// The TLS flags and their help, declared on the clap command beside the other
/// implemented flags (etcd's help texts).
pub(super) const TLS_FLAGS: &[(&str, &str)] = &[
    ("cert-file", "Path to the client server TLS cert file"),
    ("key-file", "Path to the client server TLS key file"),
    ("client-cert-file", "Path to the certificate this member presents to other members' client URLs; --cert-file when unset"),
    ("client-key-file", "Path to the key of --client-cert-file"),
    ("client-cert-auth", "Enable client cert authentication [default: false]"),
    ("client-crl-file", "Path to the client certificate revocation list file"),
    ("client-cert-allowed-hostname", "Comma-separated list of SAN hostnames allowed for client cert authentication"),
    ("trusted-ca-file", "Path to the client server TLS trusted CA cert file"),
    ("auto-tls", "Client TLS using generated certificates [default: false]"),
    ("peer-cert-file", "Path to the peer server TLS cert file"),
    ("peer-key-file", "Path to the peer server TLS key file"),
    ("peer-client-cert-file", "Path to the certificate this member presents to peers; --peer-cert-file when unset"),
    ("peer-client-key-file", "Path to the key of --peer-client-cert-file"),
    ("peer-client-cert-auth", "Enable peer client cert authentication [default: false]"),
    ("peer-trusted-ca-file", "Path to the peer server TLS trusted CA file"),
    ("peer-auto-tls", "Peer TLS using generated certificates [default: false]"),
    ("peer-crl-file", "Path to the peer certificate revocation list file"),
    ("peer-cert-allowed-cn", "Comma-separated list of allowed CNs for inter-peer TLS authentication"),
    ("peer-cert-allowed-hostname", "Comma-separated list of allowed SAN hostnames for inter-peer TLS authentication"),
    ("peer-skip-client-san-verification", "Skip verification of SAN field in client certificate for peer connections [default: false]"),
    ("experimental-peer-skip-client-san-verification", "Deprecated (etcd 3.6) name of --peer-skip-client-san-verification"),
    ("cipher-suites", "Comma-separated list of supported TLS 1.2 cipher suites between client/server and peers (empty: rustls' defaults)"),
    ("tls-min-version", "Minimum TLS version supported: TLS1.2 or TLS1.3 [default: TLS1.2]"),
    ("tls-max-version", "Maximum TLS version supported: TLS1.2 or TLS1.3 (empty: the highest)"),
    ("self-signed-cert-validity", "The validity period of the auto-TLS client and peer certificates, in years [default: 1]"),
];

type Settings = BTreeMap<&'static str, Setting>;

fn path(settings: &Settings, flag: &str) -> Option<PathBuf> {
    settings
        .get(flag)
        .map(|s| s.value.trim())
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn boolean(settings: &Settings, flag: &str) -> Result<bool, ConfigError> {
    match settings.get(flag) {
        None => Ok(false),
        Some(s) => parse_go_bool(&s.value).ok_or_else(|| s.invalid(SYNTAX_ERROR)),
    }
}

/// etcd's `flags.StringsValue`: comma-separated, empty items dropped.
fn list(settings: &Settings, flag: &str) -> Vec<String> {
    settings.get(flag).map_or_else(Vec::new, |s| {
        s.value
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// Reads one side's flags; `prefix` is `""` for the client side and `"peer-"` for peers.
fn side(settings: &Settings, peer: bool) -> Result<TlsInfo, ConfigError> {
    let name = |flag: &str| {
        if peer {
            format!("peer-{flag}")
        } else {
            flag.to_string()
        }
    };
    let info = TlsInfo {
        cert_file: path(settings, &name("cert-file")),
        key_file: path(settings, &name("key-file")),
        client_cert_file: path(settings, &name("client-cert-file")),
        client_key_file: path(settings, &name("client-key-file")),
        trusted_ca_file: path(settings, &name("trusted-ca-file")),
        client_cert_auth: boolean(settings, &name("client-cert-auth"))?,
        crl_file: path(
            settings,
            if peer {
                "peer-crl-file"
            } else {
                "client-crl-file"
            },
        ),
        allowed_cns: if peer {
            list(settings, "peer-cert-allowed-cn")
        } else {
            Vec::new()
        },
        allowed_hostnames: list(
            settings,
            if peer {
                "peer-cert-allowed-hostname"
            } else {
                "client-cert-allowed-hostname"
            },
        ),
        auto_tls: boolean(settings, &name("auto-tls"))?,
        skip_client_san_verification: peer
            && (boolean(settings, "peer-skip-client-san-verification")?
                || boolean(settings, "experimental-peer-skip-client-san-verification")?),
    };
    let shown = |p: &Option<PathBuf>| {
        p.as_ref()
            .map_or(String::new(), |p| p.display().to_string())
    };
    if info.cert_file.is_some() != info.key_file.is_some() {
        return Err(ConfigError::Invalid(format!(
            "KeyFile and CertFile must both be present[key: {}, cert: {}] (--{} and --{})",
            shown(&info.key_file),
            shown(&info.cert_file),
            name("key-file"),
            name("cert-file"),
        )));
    }
    if info.client_cert_file.is_some() != info.client_key_file.is_some() {
        return Err(ConfigError::Invalid(format!(
            "ClientKeyFile and ClientCertFile must both be present or both absent: key: {}, \
             cert: {}] (--{} and --{})",
            shown(&info.client_key_file),
            shown(&info.client_cert_file),
            name("client-key-file"),
            name("client-cert-file"),
        )));
    }
    if !info.allowed_cns.is_empty() && !info.allowed_hostnames.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "AllowedCNs and AllowedHostnames are mutually exclusive (cns={:?}, hostnames={:?})",
            info.allowed_cns, info.allowed_hostnames
        )));
    }
    if info.client_cert_auth && !info.is_empty() && info.trusted_ca_file.is_none() {
        // Go would verify against the system's roots; a control plane never wants that.
        return Err(ConfigError::Invalid(format!(
            "--{} needs --{}: QuantyKube verifies client certificates only against it",
            name("client-cert-auth"),
            name("trusted-ca-file"),
        )));
    }
    Ok(info)
}

fn version(setting: Option<&Setting>) -> Result<Option<TlsVersion>, ConfigError> {
    let Some(setting) = setting else {
        return Ok(None);
    };
    match setting.value.as_str() {
        "" => Ok(None),
        "TLS1.2" => Ok(Some(TlsVersion::Tls12)),
        "TLS1.3" => Ok(Some(TlsVersion::Tls13)),
        other => Err(ConfigError::Invalid(format!(
            "unexpected TLS version {other:?} (must be one of: TLS1.2, TLS1.3)"
        ))),
    }
}

fn cipher_suites(settings: &Settings) -> Result<Vec<CipherSuite>, ConfigError> {
    let mut suites = Vec::new();
    for name in list(settings, "cipher-suites") {
        match SUPPORTED_SUITES.iter().find(|(n, _)| *n == name) {
            Some((_, Some(suite))) if !suites.contains(suite) => suites.push(*suite),
            Some(_) => {}
            None if UNSUPPORTED_GO_SUITES.contains(&name.as_str()) => {
                return Err(ConfigError::Invalid(format!(
                    "TLS cipher suite {name:?} is not supported by QuantyKube (rustls offers \
                     only ECDHE key exchange with AEAD ciphers)"
                )))
            }
            None => {
                return Err(ConfigError::Invalid(format!(
                    "unexpected TLS cipher suite {name:?}"
                )))
            }
        }
    }
    Ok(suites)
}

/// Reads every TLS flag, with etcd's checks and messages.
pub(super) fn resolve(settings: &Settings) -> Result<TlsSettings, ConfigError> {
    let min = version(settings.get("tls-min-version"))?.unwrap_or(TlsVersion::Tls12);
    let max = version(settings.get("tls-max-version"))?;
    if max.is_some_and(|max| min > max) {
        return Err(ConfigError::Invalid(format!(
            "min version ({}) is greater than max version ({})",
            min.as_str(),
            max.map_or("", TlsVersion::as_str)
        )));
    }
    let given_suites = !list(settings, "cipher-suites").is_empty();
    let cipher_suites = cipher_suites(settings)?;
    if min == TlsVersion::Tls13 && given_suites {
        return Err(ConfigError::Invalid(
            "cipher suites cannot be configured when only TLS1.3 is enabled".into(),
        ));
    }
    let validity = uint_setting(settings.get("self-signed-cert-validity"), 1)?;
    let client = side(settings, false)?;
    let peer = side(settings, true)?;
    if validity == 0
        && ((client.auto_tls && client.is_empty()) || (peer.auto_tls && peer.is_empty()))
    {
        return Err(ConfigError::Invalid(
            "selfSignedCertValidity is invalid,it should be greater than 0".into(),
        ));
    }
    Ok(TlsSettings {
        client,
        peer,
        policy: TlsPolicy {
            min_version: min,
            max_version: max,
            cipher_suites,
            self_signed_cert_validity_years: validity,
        },
    })
}

/// etcd's refusals of an https URL whose side has no certificate (auto-TLS counts).
pub(super) fn check_secure_urls(
    tls: &TlsSettings,
    listen_client_urls: &[Url],
    listen_client_http_urls: &[Url],
    listen_metrics_urls: &[Url],
    listen_peer_urls: &[Url],
) -> Result<(), ConfigError> {
    let has_client = !tls.client.is_empty() || tls.client.auto_tls;
    let has_peer = !tls.peer.is_empty() || tls.peer.auto_tls;
    let secure = |u: &&Url| matches!(u.scheme(), "https" | "unixs");
    if !has_client {
        if let Some(u) = listen_client_urls
            .iter()
            .chain(listen_client_http_urls)
            .find(secure)
        {
            return Err(ConfigError::Invalid(format!(
                "TLS key/cert (--cert-file, --key-file) must be provided for client url {} \
                 with HTTPS scheme",
                display_url(u)
            )));
        }
        if listen_metrics_urls.iter().any(|u| secure(&u)) {
            return Err(ConfigError::Invalid(
                "client TLS key/cert (--cert-file, --key-file) must be provided for metrics \
                 secure url"
                    .into(),
            ));
        }
    }
    if !has_peer {
        if let Some(u) = listen_peer_urls.iter().find(secure) {
            return Err(ConfigError::Invalid(format!(
                "cannot listen on TLS for {}: KeyFile and CertFile are not presented \
                 (--peer-cert-file, --peer-key-file)",
                u.host_str().map_or_else(String::new, |h| match u.port() {
                    Some(p) => format!("{h}:{p}"),
                    None => h.to_string(),
                })
            )));
        }
    }
    Ok(())
}

/// A URL as etcd prints it (no trailing slash).
fn display_url(u: &Url) -> String {
    u.as_str().trim_end_matches('/').to_string()
}
