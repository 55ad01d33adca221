//! `--auth-token`: the token provider etcd's `NewTokenProvider` would build from the
//! same string, parsed as etcd's `decomposeOpts` and `jwtOptions` parse it.
//!
//! This module owns the syntax only: the provider type, the JWT options, the sign
//! method's name and the ttl (a Go duration). It never opens the key files (that is
//! `auth::jwt`, when the provider is built) and so never holds, logs or displays key
//! material; an error names an option or a path, never a key's content.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// A JWT's lifetime when `ttl` is not given (etcd's `DefaultTTL`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(5 * 60);

/// The token provider `--auth-token` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenOptions {
    /// `simple`: random tokens kept in memory by the member that issued them.
    Simple,
    /// `jwt,...`: signed tokens any member holding the key can verify.
    Jwt(JwtOptions),
}

/// The options of a `jwt` provider. Only paths: the files are read by `auth::jwt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtOptions {
    /// `pub-key`: PEM public key (or certificate); alone, the provider only verifies.
    pub public_key: Option<PathBuf>,
    /// `priv-key`: PEM private key, or for the HS methods the shared secret's file.
    pub private_key: Option<PathBuf>,
    pub sign_method: SignMethod,
    /// `ttl`: how long a token lives after it is signed.
    pub ttl: Duration,
}

/// The signature methods etcd's `jwt.GetSigningMethod` knows and its `Key()` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignMethod {
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    ES512,
    EdDSA,
    HS256,
    HS384,
    HS512,
}

impl SignMethod {
    pub const ALL: [SignMethod; 13] = [
        SignMethod::RS256,
        SignMethod::RS384,
        SignMethod::RS512,
        SignMethod::PS256,
        SignMethod::PS384,
        SignMethod::PS512,
        SignMethod::ES256,
        SignMethod::ES384,
        SignMethod::ES512,
        SignMethod::EdDSA,
        SignMethod::HS256,
        SignMethod::HS384,
        SignMethod::HS512,
    ];

    /// The name used in `sign-method=` and in a token header's `alg`.
    pub fn name(self) -> &'static str {
        match self {
            SignMethod::RS256 => "RS256",
            SignMethod::RS384 => "RS384",
            SignMethod::RS512 => "RS512",
            SignMethod::PS256 => "PS256",
            SignMethod::PS384 => "PS384",
            SignMethod::PS512 => "PS512",
            SignMethod::ES256 => "ES256",
            SignMethod::ES384 => "ES384",
            SignMethod::ES512 => "ES512",
            SignMethod::EdDSA => "EdDSA",
            SignMethod::HS256 => "HS256",
            SignMethod::HS384 => "HS384",
            SignMethod::HS512 => "HS512",
        }
    }

    /// HMAC methods sign and verify with one shared secret (`priv-key`'s bytes).
    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            SignMethod::HS256 | SignMethod::HS384 | SignMethod::HS512
        )
    }
}

impl std::fmt::Display for SignMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SignMethod {
    type Err = TokenOptionsError;

    /// Case-sensitive, as Go's `jwt.GetSigningMethod`; `none` is never a method here.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SignMethod::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or(TokenOptionsError::InvalidSignMethod)
    }
}

/// Why `--auth-token` was refused. Display is etcd's error text; `reason` says more
/// for the log (an option's name or the ttl's text, never key material).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenOptionsError {
    /// etcd's `ErrInvalidAuthOpts`: a pair without exactly one '=', a duplicate
    /// option, an unknown provider type or a ttl that is not a positive Go duration.
    #[error("auth: invalid auth options")]
    InvalidOptions { reason: String },
    /// etcd's `ErrInvalidAuthMethod`: `sign-method` missing or not one of [`SignMethod`].
    #[error("auth: invalid auth signature method")]
    InvalidSignMethod,
    /// etcd's `ErrMissingKey`: neither `pub-key` nor `priv-key` (HS*: no `priv-key`).
    #[error("auth: missing key data")]
    MissingKey,
}

fn invalid(reason: impl Into<String>) -> TokenOptionsError {
    TokenOptionsError::InvalidOptions {
        reason: reason.into(),
    }
}

/// Parses `--auth-token` as etcd does: `TYPE[,KEY=VALUE]...`.
///
/// Options of a `simple` provider are checked for syntax and then ignored, and
/// unknown `jwt` options are ignored, both as in etcd. An empty value (etcd's
/// provider that issues no token) is refused: nothing here could authenticate.
pub fn parse(value: &str) -> Result<TokenOptions, TokenOptionsError> {
    let mut parts = value.split(',');
    let kind = parts.next().unwrap_or_default();
    // etcd's decomposeOpts: every later part is exactly `key=value`, each key once.
    let mut opts: Vec<(&str, &str)> = Vec::new();
    for part in parts {
        let mut pair = part.split('=');
        let (Some(key), Some(val), None) = (pair.next(), pair.next(), pair.next()) else {
            return Err(invalid(format!(
                "option {:?} is not exactly one key=value",
                option_name(part)
            )));
        };
        if opts.iter().any(|(k, _)| *k == key) {
            return Err(invalid(format!("option {key:?} is given twice")));
        }
        opts.push((key, val));
    }
    match kind {
        "simple" => Ok(TokenOptions::Simple),
        "jwt" => parse_jwt(&opts).map(TokenOptions::Jwt),
        "" => Err(invalid("no token provider type (simple or jwt)")),
        other => Err(invalid(format!(
            "unknown token provider type {other:?} (simple or jwt)"
        ))),
    }
}

/// The part before '=' only: a malformed pair may hold a path, never print more.
fn option_name(part: &str) -> &str {
    part.split('=').next().unwrap_or_default()
}

fn parse_jwt(opts: &[(&str, &str)]) -> Result<JwtOptions, TokenOptionsError> {
    // An option given empty counts as not given, as etcd's `optMap[k] != ""` tests.
    let get = |name: &str| {
        opts.iter()
            .find(|(k, v)| *k == name && !v.is_empty())
            .map(|(_, v)| *v)
    };
    // etcd's order: ttl, then the key files, then the method, then Key().
    let ttl = match get("ttl") {
        None => DEFAULT_TTL,
        Some(text) => match parse_go_duration(text) {
            Some(ttl) if !ttl.is_zero() => ttl,
            // etcd would accept 0 or a negative ttl and then refuse every token it
            // signs (exp already past): refused here where the mistake is visible.
            Some(_) => return Err(invalid(format!("ttl {text:?} must be positive"))),
            None => return Err(invalid(format!("ttl {text:?} is not a Go duration"))),
        },
    };
    let public_key = get("pub-key").map(PathBuf::from);
    let private_key = get("priv-key").map(PathBuf::from);
    let sign_method: SignMethod = get("sign-method")
        .ok_or(TokenOptionsError::InvalidSignMethod)?
        .parse()?;
    let has_key = if sign_method.is_hmac() {
        private_key.is_some()
    } else {
        public_key.is_some() || private_key.is_some()
    };
    if !has_key {
        return Err(TokenOptionsError::MissingKey);
    }
    Ok(JwtOptions {
        public_key,
        private_key,
        sign_method,
        ttl,
    })
}

/// Go's `time.ParseDuration`: an optional sign, then one or more decimal numbers
/// (with an optional fraction) each followed by a unit: ns, us, µs, μs, ms, s, m, h;
/// or a bare "0". None when the text is not one, or exceeds Go's ~292 years.
/// Negative durations come back as `Some(ZERO)` so the caller refuses them.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let scale = UNITS.iter().find(|(u, _)| *u == unit)?.1;
        // Integer part exactly; the fraction to the nanosecond, truncated as Go does.
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<u128>().ok()?
        };
        let mut frac_ns: u128 = 0;
        let mut denom: u128 = 1;
        for d in frac_part.bytes().take(18) {
            frac_ns = frac_ns * 10 + u128::from(d - b'0');
            denom *= 10;
        }
        total = total
            .checked_add(whole.checked_mul(scale)?)?
            .checked_add(frac_ns * scale / denom)?;
        // Go's durations are int64 nanoseconds.
        if total > i64::MAX as u128 {
            return None;
        }
        rest = after;
    }
    if negative {
        return Some(Duration::ZERO);
    }
    let nanos = u64::try_from(total).ok()?;
    Some(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(value: &str) -> JwtOptions {
        match parse(value) {
            Ok(TokenOptions::Jwt(j)) => j,
            other => panic!("{value}: {other:?}"),
        }
    }

    #[test]
    fn simple_and_its_ignored_options() {
        assert_eq!(parse("simple"), Ok(TokenOptions::Simple));
        assert_eq!(parse("simple,foo=bar"), Ok(TokenOptions::Simple));
    }

    #[test]
    fn full_jwt_options() {
        let j = jwt("jwt,pub-key=/a/pub.pem,priv-key=/a/priv.pem,sign-method=RS512,ttl=1h30m");
        assert_eq!(j.public_key, Some(PathBuf::from("/a/pub.pem")));
        assert_eq!(j.private_key, Some(PathBuf::from("/a/priv.pem")));
        assert_eq!(j.sign_method, SignMethod::RS512);
        assert_eq!(j.ttl, Duration::from_secs(5400));
    }

    #[test]
    fn defaults_and_unknown_options() {
        let j = jwt("jwt,sign-method=ES256,pub-key=/p,colour=blue,ttl=");
        assert_eq!(j.ttl, DEFAULT_TTL);
        assert_eq!(j.private_key, None);
        let j = jwt("jwt,sign-method=EdDSA,priv-key=/k,pub-key=");
        assert_eq!(j.public_key, None);
    }

    #[test]
    fn every_method_name() {
        for m in SignMethod::ALL {
            let j = jwt(&format!("jwt,sign-method={m},priv-key=/k"));
            assert_eq!(j.sign_method, m);
        }
    }

    fn is_invalid_opts(r: Result<TokenOptions, TokenOptionsError>) -> bool {
        matches!(r, Err(TokenOptionsError::InvalidOptions { .. }))
    }

    #[test]
    fn malformed_pairs_duplicates_and_types() {
        assert!(is_invalid_opts(parse("jwt,sign-method=RS256,broken")));
        assert!(is_invalid_opts(parse("jwt,sign-method=RS256,pub-key=/a=b")));
        assert!(is_invalid_opts(parse("jwt,sign-method=RS256,")));
        assert!(is_invalid_opts(parse("simple,x")));
        assert!(is_invalid_opts(parse(
            "jwt,sign-method=RS256,sign-method=PS256,pub-key=/p"
        )));
        assert!(is_invalid_opts(parse("bearer")));
        assert!(is_invalid_opts(parse("")));
        assert!(is_invalid_opts(parse("Simple")));
        assert_eq!(
            parse("jwt,x").unwrap_err().to_string(),
            "auth: invalid auth options"
        );
    }

    #[test]
    fn a_malformed_pair_names_only_the_option() {
        let Err(TokenOptionsError::InvalidOptions { reason }) =
            parse("jwt,priv-key=/secret=dir/k.pem")
        else {
            panic!("expected invalid options")
        };
        assert!(
            reason.contains("priv-key") && !reason.contains("secret"),
            "{reason}"
        );
    }

    #[test]
    fn bad_ttls() {
        for ttl in [
            "5",
            "5 m",
            "m",
            "1d",
            "-5m",
            "0",
            "0s",
            "1.",
            ".",
            "9999999999h",
            "5mm",
        ] {
            let r = parse(&format!("jwt,sign-method=RS256,pub-key=/p,ttl={ttl}"));
            assert!(is_invalid_opts(r), "ttl={ttl}");
        }
    }

    #[test]
    fn sign_method_errors() {
        let m = |v: &str| parse(v) == Err(TokenOptionsError::InvalidSignMethod);
        assert!(m("jwt,pub-key=/p"));
        assert!(m("jwt,sign-method=,pub-key=/p"));
        assert!(m("jwt,sign-method=none,pub-key=/p"));
        assert!(m("jwt,sign-method=rs256,pub-key=/p"));
        assert!(m("jwt,sign-method=ES256K,pub-key=/p"));
        assert_eq!(
            TokenOptionsError::InvalidSignMethod.to_string(),
            "auth: invalid auth signature method"
        );
    }

    #[test]
    fn missing_keys() {
        let m = |v: &str| parse(v) == Err(TokenOptionsError::MissingKey);
        assert!(m("jwt,sign-method=RS256"));
        assert!(m("jwt,sign-method=ES384,pub-key=,priv-key="));
        // HMAC's only key is the secret: a public key cannot stand for it.
        assert!(m("jwt,sign-method=HS256,pub-key=/p"));
        assert_eq!(
            TokenOptionsError::MissingKey.to_string(),
            "auth: missing key data"
        );
    }

    #[test]
    fn go_durations() {
        let d = |s: &str| parse_go_duration(s);
        assert_eq!(d("5m"), Some(Duration::from_secs(300)));
        assert_eq!(d("30s"), Some(Duration::from_secs(30)));
        assert_eq!(d("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(d("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(d(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(d("+2m3s"), Some(Duration::from_secs(123)));
        assert_eq!(d("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(d("10us"), Some(Duration::from_micros(10)));
        assert_eq!(d("10µs"), Some(Duration::from_micros(10)));
        assert_eq!(d("10μs"), Some(Duration::from_micros(10)));
        assert_eq!(d("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(d("2562047h"), Some(Duration::from_secs(2_562_047 * 3600)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("-1s"), Some(Duration::ZERO));
        for bad in [
            "", "0x", "s", "1", "1.", "1..5s", "2562048h", "1 s", "1S", "-",
        ] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }
}
