//! JWT tokens (`--auth-token jwt,...`), signed and verified exactly as etcd's
//! `tokenJWT` does, so a token from an etcd member verifies here and the reverse.
//!
//! A token is `base64url(header).base64url(claims).base64url(signature)` with the
//! header `{"alg":"<method>","typ":"JWT"}` and the claims `{"exp":<unix seconds>,
//! "revision":<auth revision>,"username":"<name>"}` (Go's `jwt.MapClaims`, whose JSON
//! has its keys sorted and Go's string escapes).
//!
//! This module owns reading the key files and the token bytes. It never logs,
//! displays or returns key material (errors name the option and path, and why the
//! key was refused), never accepts a token whose `alg` is not the configured method
//! (`none` included), and never panics on a token, whatever its bytes.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use p521::ecdsa::signature::{Signer as _, Verifier as _};
use serde_json::{Map, Value};

use crate::config::token_options::{JwtOptions, SignMethod};
use keys::{PrivateKey, PublicKey};

#[path = "jwt_keys.rs"]
mod keys;

/// Longer tokens are refused before any decoding: etcd's are under 1 KiB (an RSA
/// 4096 signature is 683 characters), and a verifier should not decode megabytes.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Why a JWT provider could not be built, or a token not signed.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    /// etcd folds this into `ErrInvalidAuthOpts`; the path is said here.
    #[error("auth: invalid auth options: cannot read {option} file {path}: {source}")]
    ReadKey {
        option: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// The file holds no key usable with the method. `reason` never quotes the key.
    #[error("auth: invalid {option} for sign-method {method}: {reason}")]
    InvalidKey {
        option: &'static str,
        method: SignMethod,
        reason: String,
    },
    #[error("auth: missing key data")]
    MissingKey,
    #[error("auth: public and private keys don't match")]
    KeyMismatch,
    #[error("auth: token signing attempted with verify-only key")]
    VerifyOnly,
    #[error("auth: failed to sign a JWT token: {0}")]
    Sign(String),
    #[error("auth: the clock reads before 1970, no token expiry can be set")]
    Clock,
}

/// The key that signs: jsonwebtoken's for every method it has, p521's for ES512.
enum SignKey {
    Jwt(EncodingKey, Algorithm),
    P521(p521::ecdsa::SigningKey),
}

/// The key that verifies: the public half (the secret itself for HS*).
enum VerifyKey {
    Jwt(DecodingKey, Algorithm),
    P521(p521::ecdsa::VerifyingKey),
}

/// A member's JWT provider: signs tokens (unless built from a public key alone) and
/// verifies any token signed with the same method and key pair.
pub struct JwtTokens {
    method: SignMethod,
    ttl: Duration,
    signer: Option<SignKey>,
    verifier: VerifyKey,
}

impl std::fmt::Debug for JwtTokens {
    // By hand: the keys must never reach a log, even through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtTokens")
            .field("method", &self.method)
            .field("ttl", &self.ttl)
            .field("verify_only", &self.signer.is_none())
            .finish_non_exhaustive()
    }
}

impl JwtTokens {
    /// Reads and checks the key files, as etcd's `newTokenProviderJWT`: a key that
    /// does not fit the method, or a public key that is not the private key's half,
    /// is refused here rather than at the first token.
    pub fn new(options: &JwtOptions) -> Result<JwtTokens, JwtError> {
        let public = read_key("pub-key", options.public_key.as_deref())?;
        let private = read_key("priv-key", options.private_key.as_deref())?;
        JwtTokens::from_key_bytes(options.sign_method, options.ttl, private, public)
    }

    /// [`JwtTokens::new`] once the key files are read: `private` and `public` are
    /// their bytes, whatever they hold (the fuzz target `jwt_keys` calls this).
    pub fn from_key_bytes(
        method: SignMethod,
        ttl: Duration,
        private: Option<Vec<u8>>,
        public: Option<Vec<u8>>,
    ) -> Result<JwtTokens, JwtError> {
        let bad = |option: &'static str| {
            move |reason: String| JwtError::InvalidKey {
                option,
                method,
                reason,
            }
        };
        if method.is_hmac() {
            // etcd's hmacKey: the file's bytes as they are are the shared secret.
            let secret = private.ok_or(JwtError::MissingKey)?;
            let alg = jwt_algorithm(method).ok_or(JwtError::MissingKey)?;
            return Ok(JwtTokens {
                method,
                ttl,
                signer: Some(SignKey::Jwt(EncodingKey::from_secret(&secret), alg)),
                verifier: VerifyKey::Jwt(DecodingKey::from_secret(&secret), alg),
            });
        }
        let private = match private {
            Some(bytes) => Some(PrivateKey::from_pem(&bytes, method).map_err(bad("priv-key"))?),
            None => None,
        };
        let public = match public {
            Some(bytes) => Some(PublicKey::from_pem(&bytes, method).map_err(bad("pub-key"))?),
            None => None,
        };
        let derived = match &private {
            Some(key) => Some(key.public_half().map_err(bad("priv-key"))?),
            None => None,
        };
        let public = match (public, derived) {
            (None, None) => return Err(JwtError::MissingKey),
            (Some(given), Some(derived)) if given.0 != derived.0 => {
                return Err(JwtError::KeyMismatch)
            }
            (Some(given), _) => given,
            (None, Some(derived)) => derived,
        };
        let (signer, verifier) = match jwt_algorithm(method) {
            Some(alg) => (
                private.map(|k| SignKey::Jwt(k.encoding_key(), alg)),
                VerifyKey::Jwt(public.decoding_key(method), alg),
            ),
            None => {
                let verifier = p521::ecdsa::VerifyingKey::from_sec1_bytes(&public.0)
                    .map_err(|_| bad("pub-key")("not a P-521 point".into()))?;
                let signer = match private {
                    Some(k) => Some(SignKey::P521(
                        p521::ecdsa::SigningKey::from_slice(&k.der)
                            .map_err(|_| bad("priv-key")("not a P-521 scalar".into()))?,
                    )),
                    None => None,
                };
                (signer, VerifyKey::P521(verifier))
            }
        };
        Ok(JwtTokens {
            method,
            ttl,
            signer,
            verifier,
        })
    }

    pub fn sign_method(&self) -> SignMethod {
        self.method
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Built from a public key alone: verifies, never signs (etcd's `verifyOnly`).
    pub fn is_verify_only(&self) -> bool {
        self.signer.is_none()
    }

    /// etcd's `assign`: a token for `username` at auth `revision`, expiring `ttl`
    /// after `now` (whole Unix seconds, rounded down as Go's `Time.Unix`).
    pub fn sign(&self, username: &str, revision: u64, now: SystemTime) -> Result<String, JwtError> {
        let signer = self.signer.as_ref().ok_or(JwtError::VerifyOnly)?;
        let exp = now
            .duration_since(UNIX_EPOCH)
            .map_err(|_| JwtError::Clock)?
            .saturating_add(self.ttl)
            .as_secs();
        // Byte for byte what golang-jwt writes: its header struct's field order,
        // and MapClaims marshalled by encoding/json (keys sorted).
        let header = format!(r#"{{"alg":"{}","typ":"JWT"}}"#, self.method.name());
        let claims = format!(
            r#"{{"exp":{exp},"revision":{revision},"username":{}}}"#,
            go_json_string(username)
        );
        let message = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let signature = match signer {
            SignKey::Jwt(key, alg) => jsonwebtoken::crypto::sign(message.as_bytes(), key, *alg)
                .map_err(|e| JwtError::Sign(e.to_string()))?,
            SignKey::P521(key) => {
                let signature: p521::ecdsa::Signature = key.sign(message.as_bytes());
                URL_SAFE_NO_PAD.encode(signature.to_bytes())
            }
        };
        let token = format!("{message}.{signature}");
        // A token `verify` would refuse for its length is no token to hand out (a user
        // name of thousands of characters Go escapes, such as `<`, makes one).
        if token.len() > MAX_TOKEN_LEN {
            return Err(JwtError::Sign(format!(
                "the token would be {} bytes, over the {MAX_TOKEN_LEN} a member verifies",
                token.len()
            )));
        }
        Ok(token)
    }

    /// etcd's `info`: the username and auth revision a valid token carries. None for
    /// any token that is not three base64url parts, whose header's `alg` is not this
    /// provider's method, whose signature does not verify, that has expired (`exp`
    /// must be a number after `now`) or is not yet valid (`nbf`), or whose
    /// `username` is not a string or `revision` not a non-negative number.
    pub fn verify(&self, token: &str, now: SystemTime) -> Option<(String, u64)> {
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let mut parts = token.split('.');
        let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        // The alg is checked before the signature, as etcd's key function does: a
        // token naming another method (or `none`) never reaches a verifier.
        let header = decode_json_object(header)?;
        if header.get("alg")?.as_str()? != self.method.name() {
            return None;
        }
        let message = &token[..header_and_claims_len(token)?];
        let valid = match &self.verifier {
            VerifyKey::Jwt(key, alg) => {
                jsonwebtoken::crypto::verify(signature, message.as_bytes(), key, *alg).ok()?
            }
            VerifyKey::P521(key) => {
                let bytes = URL_SAFE_NO_PAD.decode(signature).ok()?;
                let signature = p521::ecdsa::Signature::from_slice(&bytes).ok()?;
                key.verify(message.as_bytes(), &signature).is_ok()
            }
        };
        if !valid {
            return None;
        }
        let claims = decode_json_object(claims)?;
        let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
        // golang-jwt: valid while now < exp; a token without exp is refused here
        // (etcd never signs one).
        if now >= claims.get("exp")?.as_f64()? {
            return None;
        }
        if let Some(nbf) = claims.get("nbf") {
            if now < nbf.as_f64()? {
                return None;
            }
        }
        let username = claims.get("username")?.as_str()?.to_string();
        let revision = claims_revision(claims.get("revision")?)?;
        Some((username, revision))
    }
}

/// `header.claims`: the signed part of a token, up to its second '.'.
fn header_and_claims_len(token: &str) -> Option<usize> {
    let first = token.find('.')?;
    let second = token[first + 1..].find('.')?;
    Some(first + 1 + second)
}

/// etcd reads the revision as a float64 and converts it to uint64; an integer is
/// taken exactly here, a non-negative fraction truncated as Go's conversion does.
fn claims_revision(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let f = value.as_f64()?;
    // 2^64 as f64; Go's conversion of anything beyond it is undefined.
    (0.0..18_446_744_073_709_551_616.0)
        .contains(&f)
        .then_some(f as u64)
}

fn decode_json_object(segment: &str) -> Option<Map<String, Value>> {
    let bytes = URL_SAFE_NO_PAD.decode(segment).ok()?;
    match serde_json::from_slice::<Value>(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// A string as Go's encoding/json writes it (Go 1.22 and later): `<`, `>`, `&`,
/// U+2028 and U+2029 as \u escapes, and control characters as short escapes where
/// Go has them, else \u00xx.
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\u{0}'..='\u{1f}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn jwt_algorithm(method: SignMethod) -> Option<Algorithm> {
    Some(match method {
        SignMethod::RS256 => Algorithm::RS256,
        SignMethod::RS384 => Algorithm::RS384,
        SignMethod::RS512 => Algorithm::RS512,
        SignMethod::PS256 => Algorithm::PS256,
        SignMethod::PS384 => Algorithm::PS384,
        SignMethod::PS512 => Algorithm::PS512,
        SignMethod::ES256 => Algorithm::ES256,
        SignMethod::ES384 => Algorithm::ES384,
        SignMethod::EdDSA => Algorithm::EdDSA,
        SignMethod::HS256 => Algorithm::HS256,
        SignMethod::HS384 => Algorithm::HS384,
        SignMethod::HS512 => Algorithm::HS512,
        // jsonwebtoken (ring) has no P-521: p521 signs and verifies ES512.
        SignMethod::ES512 => return None,
    })
}

/// A file's bytes, or None when the option is absent or the file empty (etcd tests
/// `len(key) > 0`, so an empty file counts as no key).
fn read_key(option: &'static str, path: Option<&Path>) -> Result<Option<Vec<u8>>, JwtError> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path).map_err(|source| JwtError::ReadKey {
        option,
        path: path.display().to_string(),
        source,
    })?;
    Ok((!bytes.is_empty()).then_some(bytes))
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
