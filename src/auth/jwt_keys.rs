//! The key files of `--auth-token jwt,...`, read as golang-jwt reads them (first PEM
//! block; PKCS#1, PKCS#8, SEC1, PKIX, certificates), into the forms the signers and
//! verifiers of `auth::jwt` take. A child of `auth::jwt`, private to it.
//! The PEM block is found as Go's `pem.Decode` finds it; the DER inside is read only by
//! RustCrypto's decoders (`pkcs8`, `sec1`, `spki`, `pkcs1`), never by hand.
//!
//! Errors say which form was wrong and why, never any of the key's bytes.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use jsonwebtoken::{DecodingKey, EncodingKey};
use ring::signature::KeyPair as _;

use crate::config::token_options::SignMethod;

/// The first PEM block's label and DER, whatever the label (Go's `pem.Decode`).
pub(super) fn pem_block(text: &[u8]) -> Result<(String, Vec<u8>), String> {
    const NO_PEM: &str = "no PEM block";
    let text = std::str::from_utf8(text).map_err(|_| NO_PEM.to_string())?;
    let start = text.find("-----BEGIN ").ok_or(NO_PEM)? + "-----BEGIN ".len();
    let label_len = text[start..].find("-----").ok_or(NO_PEM)?;
    let label = &text[start..start + label_len];
    let body_start = start + label_len + "-----".len();
    let end_marker = format!("-----END {label}-----");
    let body_len = text[body_start..].find(&end_marker).ok_or(NO_PEM)?;
    let body: String = text[body_start..body_start + body_len]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    // Encrypted PEM (Proc-Type headers) fails here, as it does in golang-jwt.
    let der = STANDARD.decode(body).map_err(|_| {
        format!("{label} PEM block is not base64 (encrypted keys are not supported)")
    })?;
    Ok((label.to_string(), der))
}

/// What a key is, from its OIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    P521,
    Ed25519,
}

impl KeyKind {
    fn for_method(method: SignMethod) -> KeyKind {
        match method {
            SignMethod::ES256 => KeyKind::P256,
            SignMethod::ES384 => KeyKind::P384,
            SignMethod::ES512 => KeyKind::P521,
            SignMethod::EdDSA => KeyKind::Ed25519,
            _ => KeyKind::Rsa,
        }
    }

    fn from_oids(
        algorithm: der::ObjectIdentifier,
        parameter: Option<der::ObjectIdentifier>,
    ) -> Option<KeyKind> {
        match (algorithm, parameter) {
            (der::RSA, _) => Some(KeyKind::Rsa),
            (der::ED25519, _) => Some(KeyKind::Ed25519),
            (der::EC, Some(der::P256)) => Some(KeyKind::P256),
            (der::EC, Some(der::P384)) => Some(KeyKind::P384),
            (der::EC, Some(der::P521)) => Some(KeyKind::P521),
            _ => None,
        }
    }

    fn curve_oid(self) -> der::ObjectIdentifier {
        match self {
            KeyKind::P256 => der::P256,
            KeyKind::P384 => der::P384,
            _ => der::P521,
        }
    }

    /// The uncompressed point's length (0x04 || x || y) of an EC kind.
    fn point_len(self) -> Option<usize> {
        match self {
            KeyKind::P256 => Some(65),
            KeyKind::P384 => Some(97),
            KeyKind::P521 => Some(133),
            _ => None,
        }
    }
}

fn check_kind(found: KeyKind, method: SignMethod) -> Result<(), String> {
    let wanted = KeyKind::for_method(method);
    if found == wanted {
        Ok(())
    } else {
        Err(format!(
            "holds a {found:?} key, {method} needs a {wanted:?} key"
        ))
    }
}

/// A private key in the form its signer takes: PKCS#1 for RSA, PKCS#8 for P-256,
/// P-384 and Ed25519, the bare scalar for P-521 (p521's `SigningKey::from_slice`).
pub(super) struct PrivateKey {
    kind: KeyKind,
    pub(super) der: Vec<u8>,
}

/// A public key in the form its verifier takes: PKCS#1 for RSA, the uncompressed
/// point for EC, the 32 bytes for Ed25519. Equal bytes, equal keys: each form is
/// canonical, which is what the key-mismatch check compares.
pub(super) struct PublicKey(pub(super) Vec<u8>);

impl PrivateKey {
    /// golang-jwt's `ParseRSAPrivateKeyFromPEM` (PKCS#1, PKCS#8),
    /// `ParseECPrivateKeyFromPEM` (SEC1, PKCS#8) and `ParseEdPrivateKeyFromPEM`.
    pub(super) fn from_pem(text: &[u8], method: SignMethod) -> Result<PrivateKey, String> {
        let (label, der) = pem_block(text)?;
        let bad = || format!("{label} PEM block is not a key this sign method can use");
        let (kind, der) = match label.as_str() {
            "RSA PRIVATE KEY" => (KeyKind::Rsa, der),
            "EC PRIVATE KEY" => {
                // golang's ParseECPrivateKey needs the named curve here too.
                let (curve, scalar) = der::sec1(&der).ok_or_else(bad)?;
                let kind = KeyKind::from_oids(der::EC, curve).ok_or_else(bad)?;
                if kind == KeyKind::P521 {
                    (kind, scalar.to_vec())
                } else {
                    let wrapped = der::wrap_sec1_in_pkcs8(kind.curve_oid(), &der);
                    (kind, wrapped.ok_or_else(bad)?)
                }
            }
            "PRIVATE KEY" => {
                let (algorithm, parameter, inner) = der::pkcs8(&der).ok_or_else(bad)?;
                let kind = KeyKind::from_oids(algorithm, parameter).ok_or_else(bad)?;
                match kind {
                    KeyKind::Rsa => (kind, inner.to_vec()),
                    KeyKind::P521 => (kind, der::sec1(inner).ok_or_else(bad)?.1.to_vec()),
                    _ => (kind, der),
                }
            }
            _ => return Err(bad()),
        };
        check_kind(kind, method)?;
        Ok(PrivateKey { kind, der })
    }

    /// The public half, computed (ring, p521), which also proves the key sound:
    /// ring refuses RSA moduli outside 2048..=4096 bits and inconsistent keys.
    pub(super) fn public_half(&self) -> Result<PublicKey, String> {
        let rejected = |e: ring::error::KeyRejected| format!("key rejected: {e}");
        let bytes = match self.kind {
            KeyKind::Rsa => ring::rsa::KeyPair::from_der(&self.der)
                .map_err(rejected)?
                .public()
                .as_ref()
                .to_vec(),
            KeyKind::P256 | KeyKind::P384 => {
                let alg = if self.kind == KeyKind::P256 {
                    &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING
                } else {
                    &ring::signature::ECDSA_P384_SHA384_FIXED_SIGNING
                };
                let rng = ring::rand::SystemRandom::new();
                ring::signature::EcdsaKeyPair::from_pkcs8(alg, &self.der, &rng)
                    .map_err(rejected)?
                    .public_key()
                    .as_ref()
                    .to_vec()
            }
            KeyKind::Ed25519 => {
                ring::signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&self.der)
                    .map_err(rejected)?
                    .public_key()
                    .as_ref()
                    .to_vec()
            }
            KeyKind::P521 => p521::ecdsa::VerifyingKey::from(
                &p521::ecdsa::SigningKey::from_slice(&self.der)
                    .map_err(|_| "not a P-521 private key".to_string())?,
            )
            .to_encoded_point(false)
            .as_bytes()
            .to_vec(),
        };
        Ok(PublicKey(bytes))
    }

    pub(super) fn encoding_key(&self) -> EncodingKey {
        match self.kind {
            KeyKind::Rsa => EncodingKey::from_rsa_der(&self.der),
            KeyKind::Ed25519 => EncodingKey::from_ed_der(&self.der),
            _ => EncodingKey::from_ec_der(&self.der),
        }
    }
}

impl PublicKey {
    /// golang-jwt's `ParseRSAPublicKeyFromPEM` (PKIX, PKCS#1, certificate),
    /// `ParseECPublicKeyFromPEM` (PKIX, certificate), `ParseEdPublicKeyFromPEM`.
    pub(super) fn from_pem(text: &[u8], method: SignMethod) -> Result<PublicKey, String> {
        let (label, der) = pem_block(text)?;
        let bad = || format!("{label} PEM block is not a public key this sign method can use");
        let (kind, key) = match label.as_str() {
            "RSA PUBLIC KEY" => (KeyKind::Rsa, der),
            "PUBLIC KEY" => {
                let (algorithm, parameter, key) = der::spki(&der).ok_or_else(bad)?;
                let kind = KeyKind::from_oids(algorithm, parameter).ok_or_else(bad)?;
                (kind, key.to_vec())
            }
            "CERTIFICATE" => {
                let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|_| bad())?;
                let (algorithm, parameter, key) =
                    der::spki(cert.public_key().raw).ok_or_else(bad)?;
                let kind = KeyKind::from_oids(algorithm, parameter).ok_or_else(bad)?;
                (kind, key.to_vec())
            }
            _ => return Err(bad()),
        };
        check_kind(kind, method)?;
        // ring parses a public key only when it verifies: shapes are checked now so
        // a wrong file fails the start, not every token.
        let sound = match kind {
            KeyKind::Rsa => der::rsa_modulus_bits(&key).is_some_and(|b| (2048..=8192).contains(&b)),
            KeyKind::Ed25519 => key.len() == 32,
            _ => Some(key.len()) == kind.point_len() && key.first() == Some(&4),
        };
        if !sound {
            return Err(match kind {
                KeyKind::Rsa => "not an RSA public key of 2048 to 8192 bits".to_string(),
                _ => bad(),
            });
        }
        Ok(PublicKey(key))
    }

    pub(super) fn decoding_key(&self, method: SignMethod) -> DecodingKey {
        match KeyKind::for_method(method) {
            KeyKind::Rsa => DecodingKey::from_rsa_der(&self.0),
            KeyKind::Ed25519 => DecodingKey::from_ed_der(&self.0),
            _ => DecodingKey::from_ec_der(&self.0),
        }
    }
}

/// The DER of key files, read by RustCrypto's decoders (`pkcs8`, `sec1`, `spki`,
/// `pkcs1`): each function answers `None` for anything that is not its structure.
mod der {
    pub use ::der::asn1::ObjectIdentifier;
    use ::der::{Decode as _, Encode as _};
    use pkcs8::PrivateKeyInfo;
    use spki::{AlgorithmIdentifierRef, SubjectPublicKeyInfoRef};

    pub const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
    pub const EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
    pub const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
    pub const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
    pub const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
    pub const P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");

    /// (algorithm OID, parameter OID if the parameter is one, the key's bytes).
    pub type Keyed<'a> = (ObjectIdentifier, Option<ObjectIdentifier>, &'a [u8]);

    fn algorithm(alg: &AlgorithmIdentifierRef<'_>) -> (ObjectIdentifier, Option<ObjectIdentifier>) {
        (alg.oid, alg.parameters_oid().ok())
    }

    /// PKCS#8 PrivateKeyInfo: (algorithm, parameter, privateKey's contents).
    pub fn pkcs8(input: &[u8]) -> Option<Keyed<'_>> {
        let info = PrivateKeyInfo::from_der(input).ok()?;
        let (oid, parameter) = algorithm(&info.algorithm);
        Some((oid, parameter, info.private_key))
    }

    /// SEC1 ECPrivateKey: (named curve OID when present, private scalar). Inside
    /// PKCS#8 the curve is usually left to the AlgorithmIdentifier.
    pub fn sec1(input: &[u8]) -> Option<(Option<ObjectIdentifier>, &[u8])> {
        let key = sec1::EcPrivateKey::from_der(input).ok()?;
        let curve = key.parameters.and_then(|p| p.named_curve());
        Some((curve, key.private_key))
    }

    /// SubjectPublicKeyInfo: (algorithm, parameter, key bits); a key whose bit string
    /// has unused bits is none.
    pub fn spki(input: &[u8]) -> Option<Keyed<'_>> {
        let info = SubjectPublicKeyInfoRef::from_der(input).ok()?;
        let (oid, parameter) = algorithm(&info.algorithm);
        Some((oid, parameter, info.subject_public_key.as_bytes()?))
    }

    /// The modulus size of a PKCS#1 RSAPublicKey { modulus, publicExponent }.
    pub fn rsa_modulus_bits(input: &[u8]) -> Option<usize> {
        let key = pkcs1::RsaPublicKey::from_der(input).ok()?;
        let digits = key.modulus.as_bytes();
        let first = digits.first().filter(|b| **b != 0)?;
        Some(digits.len() * 8 - first.leading_zeros() as usize)
    }

    /// PKCS#8 around a SEC1 key, as `openssl pkcs8 -topk8` writes it: ring (and so
    /// jsonwebtoken) reads EC private keys only as PKCS#8, golang-jwt both. `None` only
    /// if the key is too large for DER's lengths.
    pub fn wrap_sec1_in_pkcs8(curve: ObjectIdentifier, sec1: &[u8]) -> Option<Vec<u8>> {
        let algorithm = AlgorithmIdentifierRef {
            oid: EC,
            parameters: Some((&curve).into()),
        };
        PrivateKeyInfo::new(algorithm, sec1).to_der().ok()
    }
}
