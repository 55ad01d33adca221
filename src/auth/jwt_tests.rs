//! auth::jwt against keys made by the `openssl` CLI, and tokens built by hand (and
//! signed by openssl) exactly as etcd's golang-jwt builds them.

use super::*;
use std::path::PathBuf;
use std::process::Command;

use crate::config::token_options::{parse, TokenOptions};

const NOW: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn openssl(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A temp dir of keys: `priv`, `pub` and other forms, per kind.
struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, args: &[&str]) -> Vec<u8> {
        openssl(self.dir.path(), args)
    }

    /// rsa.pem (PKCS#8), rsa1.pem (PKCS#1), rsa_pub.pem (PKIX), rsa_pub1.pem (PKCS#1).
    fn rsa(self, bits: &str) -> Keys {
        let bits = format!("rsa_keygen_bits:{bits}");
        self.run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            &bits,
            "-out",
            "rsa.pem",
        ]);
        self.run(&["rsa", "-in", "rsa.pem", "-traditional", "-out", "rsa1.pem"]);
        self.run(&["rsa", "-in", "rsa.pem", "-pubout", "-out", "rsa_pub.pem"]);
        self.run(&[
            "rsa",
            "-in",
            "rsa.pem",
            "-RSAPublicKey_out",
            "-out",
            "rsa_pub1.pem",
        ]);
        self
    }

    /// NAME.pem (SEC1), NAME_p8.pem (PKCS#8), NAME_pub.pem (PKIX).
    fn ec(self, curve: &str) -> Keys {
        let key = format!("{curve}.pem");
        self.run(&["ecparam", "-name", curve, "-genkey", "-noout", "-out", &key]);
        self.run(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            &key,
            "-out",
            &format!("{curve}_p8.pem"),
        ]);
        self.run(&[
            "ec",
            "-in",
            &key,
            "-pubout",
            "-out",
            &format!("{curve}_pub.pem"),
        ]);
        self
    }

    /// ed.pem (PKCS#8), ed_pub.pem (PKIX).
    fn ed(self) -> Keys {
        self.run(&["genpkey", "-algorithm", "ed25519", "-out", "ed.pem"]);
        self.run(&["pkey", "-in", "ed.pem", "-pubout", "-out", "ed_pub.pem"]);
        self
    }

    fn options(&self, method: &str, private: Option<&str>, public: Option<&str>) -> JwtOptions {
        let mut value = format!("jwt,sign-method={method},ttl=5m");
        if let Some(p) = private {
            value += &format!(",priv-key={}", self.path(p).display());
        }
        if let Some(p) = public {
            value += &format!(",pub-key={}", self.path(p).display());
        }
        match parse(&value) {
            Ok(TokenOptions::Jwt(options)) => options,
            other => panic!("{value}: {other:?}"),
        }
    }

    fn tokens(&self, method: &str, private: Option<&str>, public: Option<&str>) -> JwtTokens {
        JwtTokens::new(&self.options(method, private, public)).expect("provider")
    }

    fn error(&self, method: &str, private: Option<&str>, public: Option<&str>) -> JwtError {
        match JwtTokens::new(&self.options(method, private, public)) {
            Ok(t) => panic!("{method} {private:?} {public:?} built {t:?}"),
            Err(e) => e,
        }
    }
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A token with any header and claims, signed with the provider's own key.
fn sign_raw(tokens: &JwtTokens, header: &str, claims: &str) -> String {
    let message = format!("{}.{}", b64(header), b64(claims));
    let signature = match tokens.signer.as_ref().expect("signer") {
        SignKey::Jwt(key, alg) => {
            jsonwebtoken::crypto::sign(message.as_bytes(), key, *alg).expect("sign")
        }
        SignKey::P521(key) => {
            let s: p521::ecdsa::Signature = key.sign(message.as_bytes());
            b64(s.to_bytes())
        }
    };
    format!("{message}.{signature}")
}

/// etcd's header and claims for (root, 7) expiring 300 s after NOW.
fn etcd_message(alg: &str) -> String {
    let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
    let claims = format!(r#"{{"exp":{},"revision":7,"username":"root"}}"#, NOW + 300);
    format!("{}.{}", b64(header), b64(claims))
}

/// openssl's signature of `message`, with `args` choosing digest and padding.
fn openssl_sign(keys: &Keys, key: &str, args: &[&str], message: &str) -> Vec<u8> {
    std::fs::write(keys.path("msg"), message).expect("write message");
    let mut all = vec!["dgst"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-sign", key, "msg"]);
    keys.run(&all)
}

/// An ECDSA DER signature (SEQUENCE of r, s) as JWS's fixed-width r || s.
fn der_to_raw(der: &[u8], width: usize) -> Vec<u8> {
    let int = |b: &[u8]| -> (Vec<u8>, usize) {
        assert_eq!(b[0], 0x02);
        let len = usize::from(b[1]);
        let mut v: Vec<u8> = b[2..2 + len]
            .iter()
            .copied()
            .skip_while(|x| *x == 0)
            .collect();
        while v.len() < width {
            v.insert(0, 0);
        }
        (v, 2 + len)
    };
    let body = if der[1] == 0x81 { &der[3..] } else { &der[2..] };
    let (mut r, used) = int(body);
    let (s, _) = int(&body[used..]);
    r.extend(s);
    r
}

#[test]
fn round_trip_every_method() {
    let keys = Keys::new()
        .rsa("2048")
        .ec("prime256v1")
        .ec("secp384r1")
        .ec("secp521r1")
        .ed();
    std::fs::write(keys.path("secret"), "shared-secret\n").expect("secret");
    let cases = [
        ("RS256", "rsa.pem", Some("rsa_pub.pem")),
        ("RS384", "rsa1.pem", Some("rsa_pub1.pem")),
        ("RS512", "rsa.pem", None),
        ("PS256", "rsa.pem", Some("rsa_pub.pem")),
        ("PS384", "rsa1.pem", None),
        ("PS512", "rsa.pem", Some("rsa_pub1.pem")),
        ("ES256", "prime256v1.pem", Some("prime256v1_pub.pem")),
        ("ES256", "prime256v1_p8.pem", None),
        ("ES384", "secp384r1.pem", Some("secp384r1_pub.pem")),
        ("ES384", "secp384r1_p8.pem", None),
        ("ES512", "secp521r1.pem", Some("secp521r1_pub.pem")),
        ("ES512", "secp521r1_p8.pem", None),
        ("EdDSA", "ed.pem", Some("ed_pub.pem")),
        ("HS256", "secret", None),
        ("HS384", "secret", None),
        ("HS512", "secret", None),
    ];
    for (method, private, public) in cases {
        let tokens = keys.tokens(method, Some(private), public);
        assert!(!tokens.is_verify_only());
        let token = tokens.sign("alice", 42, at(NOW)).expect("sign");
        let header = token.split('.').next().expect("header");
        let expected = format!(r#"{{"alg":"{method}","typ":"JWT"}}"#);
        assert_eq!(
            URL_SAFE_NO_PAD.decode(header).expect("b64"),
            expected.as_bytes()
        );
        assert_eq!(
            tokens.verify(&token, at(NOW + 299)),
            Some(("alice".to_string(), 42)),
            "{method} {private}"
        );
        // A provider built from the public key alone verifies the same token.
        if let Some(public) = public {
            let verifier = keys.tokens(method, None, Some(public));
            assert!(verifier.is_verify_only());
            assert_eq!(verifier.verify(&token, at(NOW)), Some(("alice".into(), 42)));
            assert!(matches!(
                verifier.sign("alice", 42, at(NOW)),
                Err(JwtError::VerifyOnly)
            ));
            assert_eq!(
                JwtError::VerifyOnly.to_string(),
                "auth: token signing attempted with verify-only key"
            );
        }
    }
}

#[test]
fn tokens_are_etcds_byte_for_byte() {
    let keys = Keys::new().rsa("2048").ed();
    // RS256 and EdDSA signatures are deterministic: ours must equal openssl's
    // signature over the message etcd would build.
    let message = etcd_message("RS256");
    let sig = openssl_sign(&keys, "rsa.pem", &["-sha256"], &message);
    let etcd = format!("{message}.{}", b64(sig));
    let tokens = keys.tokens("RS256", Some("rsa.pem"), None);
    assert_eq!(tokens.sign("root", 7, at(NOW)).expect("sign"), etcd);
    assert_eq!(tokens.verify(&etcd, at(NOW)), Some(("root".into(), 7)));

    let message = etcd_message("EdDSA");
    std::fs::write(keys.path("msg"), &message).expect("write");
    let sig = keys.run(&[
        "pkeyutl", "-sign", "-inkey", "ed.pem", "-rawin", "-in", "msg",
    ]);
    let etcd = format!("{message}.{}", b64(sig));
    let tokens = keys.tokens("EdDSA", Some("ed.pem"), None);
    assert_eq!(tokens.sign("root", 7, at(NOW)).expect("sign"), etcd);
}

#[test]
fn openssl_signed_etcd_tokens_verify() {
    let keys = Keys::new().rsa("2048").ec("prime256v1").ec("secp521r1");
    // golang-jwt signs PS* with the salt as long as the hash.
    let message = etcd_message("PS256");
    let pss = [
        "-sha256",
        "-sigopt",
        "rsa_padding_mode:pss",
        "-sigopt",
        "rsa_pss_saltlen:32",
    ];
    let sig = openssl_sign(&keys, "rsa.pem", &pss, &message);
    let tokens = keys.tokens("PS256", None, Some("rsa_pub.pem"));
    let token = format!("{message}.{}", b64(sig));
    assert_eq!(tokens.verify(&token, at(NOW)), Some(("root".into(), 7)));

    for (method, key, digest, width) in [
        ("ES256", "prime256v1.pem", "-sha256", 32),
        ("ES512", "secp521r1.pem", "-sha512", 66),
    ] {
        let message = etcd_message(method);
        let der = openssl_sign(&keys, key, &[digest], &message);
        let token = format!("{message}.{}", b64(der_to_raw(&der, width)));
        let tokens = keys.tokens(method, Some(key), None);
        assert_eq!(
            tokens.verify(&token, at(NOW)),
            Some(("root".into(), 7)),
            "{method}"
        );
        // A DER signature is not a JWS one.
        let bad = format!("{message}.{}", b64(&der));
        assert_eq!(tokens.verify(&bad, at(NOW)), None, "{method}");
    }
}

#[test]
fn usernames_are_escaped_as_go_does() {
    assert_eq!(
        go_json_string("a<b>&\"\\\n\u{1}\u{8}\u{2028}é"),
        r#""a\u003cb\u003e\u0026\"\\\n\u0001\b\u2028é""#
    );
    let keys = Keys::new().ec("prime256v1");
    let tokens = keys.tokens("ES256", Some("prime256v1.pem"), None);
    let name = "<ünïcode & \"quotes\">\t";
    let token = tokens.sign(name, u64::MAX, at(NOW)).expect("sign");
    assert_eq!(
        tokens.verify(&token, at(NOW)),
        Some((name.to_string(), u64::MAX))
    );
}

#[test]
fn expiry_and_not_before() {
    let keys = Keys::new().ec("prime256v1");
    let tokens = keys.tokens("ES256", Some("prime256v1.pem"), None);
    let token = tokens.sign("root", 1, at(NOW)).expect("sign");
    assert!(tokens.verify(&token, at(NOW + 299)).is_some());
    assert!(tokens
        .verify(&token, at(NOW + 299) + Duration::from_millis(999))
        .is_some());
    assert_eq!(tokens.verify(&token, at(NOW + 300)), None);
    assert_eq!(tokens.verify(&token, at(NOW + 10_000)), None);
    let header = r#"{"alg":"ES256","typ":"JWT"}"#;
    let nbf = format!(
        r#"{{"exp":{},"nbf":{},"revision":1,"username":"u"}}"#,
        NOW + 60,
        NOW + 30
    );
    let token = sign_raw(&tokens, header, &nbf);
    assert_eq!(tokens.verify(&token, at(NOW)), None);
    assert!(tokens.verify(&token, at(NOW + 30)).is_some());
}

#[test]
fn claims_must_be_etcds() {
    let keys = Keys::new().ec("secp384r1");
    let tokens = keys.tokens("ES384", Some("secp384r1.pem"), None);
    let header = r#"{"alg":"ES384","typ":"JWT"}"#;
    let exp = NOW + 60;
    let check = |claims: &str| tokens.verify(&sign_raw(&tokens, header, claims), at(NOW));
    assert_eq!(
        check(&format!(r#"{{"exp":{exp},"revision":3,"username":"u"}}"#)),
        Some(("u".into(), 3))
    );
    // Go reads numbers as float64: a fraction is truncated, an exponent accepted.
    assert_eq!(
        check(&format!(
            r#"{{"exp":{exp}.5,"revision":3.9,"username":"u"}}"#
        )),
        Some(("u".into(), 3))
    );
    assert_eq!(
        check(&format!(r#"{{"exp":{exp},"revision":3e2,"username":"u"}}"#)),
        Some(("u".into(), 300))
    );
    for bad in [
        r#"{"revision":3,"username":"u"}"#.to_string(),
        format!(r#"{{"exp":"{exp}","revision":3,"username":"u"}}"#),
        format!(r#"{{"exp":{exp},"username":"u"}}"#),
        format!(r#"{{"exp":{exp},"revision":"3","username":"u"}}"#),
        format!(r#"{{"exp":{exp},"revision":-1,"username":"u"}}"#),
        format!(r#"{{"exp":{exp},"revision":1e30,"username":"u"}}"#),
        format!(r#"{{"exp":{exp},"revision":3}}"#),
        format!(r#"{{"exp":{exp},"revision":3,"username":7}}"#),
        format!(r#"{{"exp":{exp},"revision":3,"username":null}}"#),
        format!(r#"[{exp},3,"u"]"#),
        "null".to_string(),
        "not json".to_string(),
    ] {
        assert_eq!(check(&bad), None, "{bad}");
    }
}

#[test]
fn another_alg_or_none_is_refused() {
    let keys = Keys::new().rsa("2048");
    let rs256 = keys.tokens("RS256", Some("rsa.pem"), None);
    let rs384 = keys.tokens("RS384", Some("rsa.pem"), None);
    let token = rs256.sign("root", 1, at(NOW)).expect("sign");
    // Same key, other method: refused both ways.
    assert_eq!(rs384.verify(&token, at(NOW)), None);
    assert_eq!(
        rs256.verify(&rs384.sign("root", 1, at(NOW)).expect("sign"), at(NOW)),
        None
    );
    // A header naming another alg over a valid RS256 signature.
    let parts: Vec<&str> = token.split('.').collect();
    for header in [
        r#"{"alg":"RS384","typ":"JWT"}"#,
        r#"{"alg":"HS256","typ":"JWT"}"#,
        r#"{"alg":"none","typ":"JWT"}"#,
        r#"{"alg":"rs256","typ":"JWT"}"#,
        r#"{"typ":"JWT"}"#,
        r#"{"alg":null}"#,
        r#"["RS256"]"#,
    ] {
        let forged = format!("{}.{}.{}", b64(header), parts[1], parts[2]);
        assert_eq!(rs256.verify(&forged, at(NOW)), None, "{header}");
    }
    // Unsigned `none` tokens, with and without the trailing dot.
    let none = format!("{}.{}", b64(r#"{"alg":"none","typ":"JWT"}"#), parts[1]);
    assert_eq!(rs256.verify(&format!("{none}."), at(NOW)), None);
    assert_eq!(rs256.verify(&none, at(NOW)), None);
    // HS256 keyed with the public key's PEM: the classic confusion attack.
    let public = std::fs::read(keys.path("rsa_pub.pem")).expect("pub");
    let message = format!("{}.{}", b64(r#"{"alg":"HS256","typ":"JWT"}"#), parts[1]);
    let mac = jsonwebtoken::crypto::sign(
        message.as_bytes(),
        &EncodingKey::from_secret(&public),
        Algorithm::HS256,
    )
    .expect("hmac");
    assert_eq!(rs256.verify(&format!("{message}.{mac}"), at(NOW)), None);
}

#[test]
fn tampered_truncated_and_garbage_tokens_are_refused() {
    let keys = Keys::new().ec("secp521r1").ed();
    for tokens in [
        keys.tokens("ES512", Some("secp521r1.pem"), None),
        keys.tokens("EdDSA", Some("ed.pem"), None),
    ] {
        let token = tokens.sign("root", 5, at(NOW)).expect("sign");
        assert!(tokens.verify(&token, at(NOW)).is_some());
        let sig_start = token.rfind('.').expect("dot") + 1;
        // Every byte of the signature flipped, one at a time (a low bit, so the
        // character stays base64url where it can).
        for i in sig_start..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] ^= 0x01;
            let flipped = String::from_utf8(bytes).expect("ascii");
            assert_eq!(tokens.verify(&flipped, at(NOW)), None, "byte {i}");
        }
        // Another payload under the same signature.
        let parts: Vec<&str> = token.split('.').collect();
        let claims = format!(r#"{{"exp":{},"revision":5,"username":"admin"}}"#, NOW + 300);
        let altered = format!("{}.{}.{}", parts[0], b64(claims), parts[2]);
        assert_eq!(tokens.verify(&altered, at(NOW)), None);
        // Every prefix.
        for end in 0..token.len() {
            assert_eq!(tokens.verify(&token[..end], at(NOW)), None, "prefix {end}");
        }
        // Extra parts, padding, whitespace.
        for bad in [
            format!("{token}."),
            format!("{token}.x"),
            format!(".{token}"),
            format!("{token}="),
            format!(" {token}"),
            format!("{}.{}=.{}", parts[0], parts[1], parts[2]),
        ] {
            assert_eq!(tokens.verify(&bad, at(NOW)), None, "{bad}");
        }
        for garbage in [
            "",
            ".",
            "..",
            "...",
            "a.b.c",
            "!!!.@@@.###",
            "eyJ.eyJ.eyJ",
            "\u{0}\u{0}.\u{ffff}.é",
        ] {
            assert_eq!(tokens.verify(garbage, at(NOW)), None, "{garbage:?}");
        }
        let huge = format!("{}.{}.{}", "A".repeat(1 << 20), parts[1], parts[2]);
        assert_eq!(tokens.verify(&huge, at(NOW)), None);
        let dots = ".".repeat(1 << 20);
        assert_eq!(tokens.verify(&dots, at(NOW)), None);
    }
}

#[test]
fn key_errors() {
    let keys = Keys::new()
        .rsa("2048")
        .ec("prime256v1")
        .ec("secp384r1")
        .ed();
    let other = Keys::new()
        .rsa("2048")
        .ec("prime256v1")
        .ec("secp521r1")
        .ed();
    // A public key that is not the private key's half.
    for (method, private, public) in [
        ("RS256", "rsa.pem", "rsa_pub.pem"),
        ("ES256", "prime256v1.pem", "prime256v1_pub.pem"),
        ("EdDSA", "ed.pem", "ed_pub.pem"),
    ] {
        std::fs::copy(other.path(public), keys.path("other.pem")).expect("copy");
        let err = keys.error(method, Some(private), Some("other.pem"));
        assert!(matches!(err, JwtError::KeyMismatch), "{method}: {err}");
        assert_eq!(err.to_string(), "auth: public and private keys don't match");
    }
    std::fs::copy(other.path("secp521r1.pem"), keys.path("p521.pem")).expect("copy");
    std::fs::copy(other.path("secp521r1_pub.pem"), keys.path("p521_pub.pem")).expect("copy");
    // Keys that do not fit the method.
    for (method, private, public) in [
        ("RS256", Some("prime256v1.pem"), None),
        ("RS256", None, Some("ed_pub.pem")),
        ("ES256", Some("secp384r1.pem"), None),
        ("ES256", None, Some("secp384r1_pub.pem")),
        ("ES384", Some("prime256v1_p8.pem"), None),
        ("ES512", None, Some("prime256v1_pub.pem")),
        ("ES512", Some("rsa.pem"), None),
        ("ES256", Some("p521.pem"), None),
        ("EdDSA", Some("rsa.pem"), None),
        ("EdDSA", Some("prime256v1_pub.pem"), None),
        ("PS256", Some("rsa_pub.pem"), None),
        ("PS256", None, Some("rsa.pem")),
    ] {
        let err = keys.error(method, private, public);
        assert!(
            matches!(err, JwtError::InvalidKey { .. }),
            "{method}: {err}"
        );
    }
    // Not PEM, empty, unreadable.
    std::fs::write(
        keys.path("junk.pem"),
        "-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n",
    )
    .expect("junk");
    std::fs::write(keys.path("text.pem"), "hello").expect("text");
    std::fs::write(keys.path("empty.pem"), "").expect("empty");
    for file in ["junk.pem", "text.pem"] {
        let err = keys.error("RS256", Some(file), None);
        assert!(matches!(err, JwtError::InvalidKey { .. }), "{file}: {err}");
    }
    let err = keys.error("RS256", Some("empty.pem"), None);
    assert!(matches!(err, JwtError::MissingKey), "{err}");
    let err = keys.error("HS256", Some("empty.pem"), None);
    assert!(matches!(err, JwtError::MissingKey), "{err}");
    let err = keys.error("RS256", Some("absent.pem"), None);
    assert!(
        matches!(
            err,
            JwtError::ReadKey {
                option: "priv-key",
                ..
            }
        ),
        "{err}"
    );
    // ring signs with RSA moduli of 2048 to 4096 bits only; verifies 2048 to 8192.
    let small = Keys::new().rsa("1024");
    let err = small.error("RS256", Some("rsa.pem"), None);
    assert!(matches!(err, JwtError::InvalidKey { .. }), "{err}");
    let err = small.error("RS256", None, Some("rsa_pub.pem"));
    assert!(matches!(err, JwtError::InvalidKey { .. }), "{err}");
}

#[test]
fn certificates_serve_as_public_keys() {
    let keys = Keys::new().ec("prime256v1");
    keys.run(&[
        "req",
        "-new",
        "-x509",
        "-key",
        "prime256v1.pem",
        "-subj",
        "/CN=etcd",
        "-days",
        "1",
        "-out",
        "cert.pem",
    ]);
    let signer = keys.tokens("ES256", Some("prime256v1.pem"), Some("cert.pem"));
    let verifier = keys.tokens("ES256", None, Some("cert.pem"));
    let token = signer.sign("root", 2, at(NOW)).expect("sign");
    assert_eq!(verifier.verify(&token, at(NOW)), Some(("root".into(), 2)));
}

#[test]
fn no_key_material_in_errors_or_debug() {
    let keys = Keys::new().ec("prime256v1");
    let pem = std::fs::read_to_string(keys.path("prime256v1.pem")).expect("pem");
    let secret_line = pem.lines().nth(1).expect("body line").to_string();
    let tokens = keys.tokens("ES256", Some("prime256v1.pem"), None);
    let debug = format!("{tokens:?}");
    assert!(!debug.contains(&secret_line[..16]), "{debug}");
    assert!(debug.contains("ES256"));
    // A private key given as the public one: the error says what, not the key.
    let err = keys.error("ES256", None, Some("prime256v1.pem"));
    let text = err.to_string();
    assert!(
        text.contains("pub-key") && !text.contains(&secret_line[..16]),
        "{text}"
    );
    // The same PEM body as a broken RSA key.
    std::fs::write(
        keys.path("broken.pem"),
        pem.replace("EC PRIVATE", "RSA PRIVATE"),
    )
    .expect("w");
    let text = keys.error("RS256", Some("broken.pem"), None).to_string();
    assert!(!text.contains(&secret_line[..16]), "{text}");
}

#[test]
fn signing_needs_a_clock_after_1970() {
    let keys = Keys::new().ed();
    let tokens = keys.tokens("EdDSA", Some("ed.pem"), None);
    let before = UNIX_EPOCH - Duration::from_secs(1);
    assert!(matches!(
        tokens.sign("root", 1, before),
        Err(JwtError::Clock)
    ));
    let token = tokens.sign("root", 1, at(NOW)).expect("sign");
    assert_eq!(tokens.verify(&token, before), None);
}

/// Key files that are PEM around broken or foreign DER: every prefix of real keys of
/// each form, an encrypted PKCS#8 key, and a key under another form's label. Each is
/// refused as an invalid key (the RustCrypto decoders' `None`), never a panic.
#[test]
fn broken_der_in_key_files_is_refused() {
    use base64::engine::general_purpose::STANDARD;
    let keys = Keys::new()
        .rsa("2048")
        .ec("prime256v1")
        .ec("secp521r1")
        .ed();
    let der_of = |name: &str| -> (String, Vec<u8>) {
        let text = std::fs::read(keys.path(name)).expect("key");
        keys::pem_block(&text).expect("PEM")
    };
    let pem = |label: &str, der: &[u8]| {
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            STANDARD.encode(der)
        )
        .into_bytes()
    };
    let ttl = Duration::from_secs(300);
    let refused = |method: SignMethod, private: Option<Vec<u8>>, public: Option<Vec<u8>>| {
        match JwtTokens::from_key_bytes(method, ttl, private, public) {
            Err(JwtError::InvalidKey { .. }) => {}
            other => panic!("{method}: {other:?}"),
        }
    };
    for (method, private, public) in [
        (SignMethod::RS256, "rsa.pem", "rsa_pub.pem"),
        (SignMethod::RS256, "rsa1.pem", "rsa_pub1.pem"),
        (SignMethod::ES256, "prime256v1.pem", "prime256v1_pub.pem"),
        (SignMethod::ES256, "prime256v1_p8.pem", "prime256v1_pub.pem"),
        (SignMethod::ES512, "secp521r1.pem", "secp521r1_pub.pem"),
        (SignMethod::ES512, "secp521r1_p8.pem", "secp521r1_pub.pem"),
        (SignMethod::EdDSA, "ed.pem", "ed_pub.pem"),
    ] {
        for (name, is_private) in [(private, true), (public, false)] {
            let (label, der) = der_of(name);
            for len in 0..der.len() {
                let file = Some(pem(&label, &der[..len]));
                if is_private {
                    refused(method, file, None);
                } else {
                    refused(method, None, file);
                }
            }
        }
    }
    // Another form's label over a valid key.
    let (_, rsa_pkcs8) = der_of("rsa.pem");
    refused(
        SignMethod::RS256,
        Some(pem("EC PRIVATE KEY", &rsa_pkcs8)),
        None,
    );
    let (_, ec_pkix) = der_of("prime256v1_pub.pem");
    refused(
        SignMethod::ES256,
        None,
        Some(pem("RSA PUBLIC KEY", &ec_pkix)),
    );
    // An encrypted PKCS#8 key, as golang-jwt refuses it.
    keys.run(&[
        "pkcs8",
        "-topk8",
        "-in",
        "prime256v1.pem",
        "-passout",
        "pass:secret",
        "-out",
        "encrypted.pem",
    ]);
    let encrypted = std::fs::read(keys.path("encrypted.pem")).expect("key");
    refused(SignMethod::ES256, Some(encrypted), None);
}

/// Found by the `jwt_token` fuzz target: a user name of 1 989 `<` (each escaped by Go
/// as `\u003c`) signed into a token over `MAX_TOKEN_LEN`, which `verify` then refused,
/// so the user authenticated and every request failed. Signing refuses it instead, and
/// whatever signs verifies.
#[test]
fn a_token_too_long_to_verify_is_never_signed() {
    let keys = Keys::new();
    std::fs::write(keys.path("hmac.key"), "a shared secret of some length").expect("key");
    let tokens = keys.tokens("HS256", Some("hmac.key"), None);
    let now = at(NOW);
    for count in [1, 100, 1_000, 1_989, 3_000] {
        let name = "<".repeat(count);
        match tokens.sign(&name, 1, now) {
            Ok(token) => assert_eq!(
                tokens.verify(&token, now),
                Some((name.clone(), 1)),
                "{count}"
            ),
            Err(error) => {
                assert!(count >= 1_989, "{count}: {error}");
                assert!(matches!(error, JwtError::Sign(_)), "{error}");
            }
        }
    }
}
