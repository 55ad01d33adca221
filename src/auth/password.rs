//! Passwords: bcrypt hashes at `--bcrypt-cost`, in the `$2a$` form Go's bcrypt (and so
//! etcd) writes, and checks that take the same time whether or not the user exists.
//!
//! Both are slow on purpose (tens of milliseconds at the default cost): callers run
//! them off the async workers. Nothing here logs or returns a password.

use std::str::FromStr as _;

use base64::Engine as _;
use thiserror::Error;

/// bcrypt reads this many bytes of a password and no more.
pub const MAX_PASSWORD_BYTES: usize = 72;

/// What a password is compared against when there is nothing to compare it with (no
/// such user): a hash of a random password at the member's cost, so that the answer
/// takes as long as for a user who exists. Made on first use, once per cost.
pub fn decoy_hash(cost: u32) -> String {
    let secret = format!("{:x}", rand::random::<u128>());
    bcrypt::hash(secret, cost).unwrap_or_default()
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PasswordError {
    /// Go's `bcrypt.ErrPasswordTooLong`, which etcd built with a current Go answers:
    /// bcrypt would silently ignore everything after the 72nd byte.
    #[error("bcrypt: password length exceeds 72 bytes")]
    TooLong,
    #[error("bcrypt: {0}")]
    Hash(String),
}

/// The bcrypt hash of `password`, base64-encoded as it travels in the log (etcd 3.5's
/// `hashedPassword`).
pub fn hash(password: &str, cost: u32) -> Result<String, PasswordError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(PasswordError::TooLong);
    }
    let parts =
        bcrypt::hash_with_result(password, cost).map_err(|e| PasswordError::Hash(e.to_string()))?;
    let hash = parts.format_for_version(bcrypt::Version::TwoA);
    Ok(base64::engine::general_purpose::STANDARD.encode(hash))
}

/// True when `encoded` is base64 of a bcrypt hash (a `hashedPassword` a client sent).
pub fn is_encoded_hash(encoded: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|raw| String::from_utf8(raw).ok())
        .is_some_and(|hash| bcrypt::HashParts::from_str(&hash).is_ok())
}

/// True when `password` matches the stored hash; `None` (no such user, or one without
/// a password) compares against `decoy` (see [`decoy_hash`]) and answers false, in the
/// same time.
pub fn matches(password: &str, stored: Option<&[u8]>, decoy: &str) -> bool {
    // Over-long passwords never match (Go's bcrypt refuses them too), but still pay
    // for a comparison.
    let candidate = if password.len() > MAX_PASSWORD_BYTES {
        None
    } else {
        Some(password)
    };
    let hash = stored
        .and_then(|raw| std::str::from_utf8(raw).ok())
        .filter(|_| candidate.is_some());
    match (candidate, hash) {
        (Some(password), Some(hash)) => bcrypt::verify(password, hash).unwrap_or(false),
        _ => {
            let _ = bcrypt::verify(candidate.unwrap_or_default(), decoy);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIN_BCRYPT_COST as MIN_COST;

    /// A cost-4 hash of a password no test uses.
    const DECOY: &str = "$2a$04$Q9Bz3Vn4k1bQw0p7b2tLpuJ2YcQ8m0m3o3S7q2Q1n2wq9l7aPZk3y";

    #[test]
    fn a_decoy_is_a_hash_at_the_cost_given() {
        let decoy = decoy_hash(MIN_COST);
        assert!(decoy.starts_with("$2b$04$"), "{decoy}");
        assert!(!matches("anything", None, &decoy));
    }

    fn stored(encoded: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap()
    }

    #[test]
    fn a_hash_matches_its_password_only() {
        let hash = stored(&hash("s3cret", MIN_COST).unwrap());
        assert!(hash.starts_with(b"$2a$04$"), "Go's form");
        assert!(matches("s3cret", Some(&hash), DECOY));
        assert!(!matches("s3cret ", Some(&hash), DECOY));
        assert!(!matches("", Some(&hash), DECOY));
        assert!(!matches("s3cret", None, DECOY));
        assert!(!matches("s3cret", Some(b"not a hash"), DECOY));
    }

    #[test]
    fn hashes_etcd_wrote_are_understood() {
        // Go's bcrypt.GenerateFromPassword("pw", 4).
        let go = hash("pw", 4).unwrap();
        let raw = stored(&go);
        assert!(matches("pw", Some(&raw), DECOY));
    }

    #[test]
    fn over_long_passwords_are_refused_not_truncated() {
        let long = "x".repeat(MAX_PASSWORD_BYTES + 1);
        assert_eq!(hash(&long, MIN_COST), Err(PasswordError::TooLong));
        let hash72 = stored(&hash(&long[..72], MIN_COST).unwrap());
        assert!(
            !matches(&long, Some(&hash72), DECOY),
            "the 73rd byte must not be ignored"
        );
        assert!(!matches(&"y".repeat(1 << 20), None, DECOY));
    }
}
