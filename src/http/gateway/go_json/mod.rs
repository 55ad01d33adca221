//! JSON as Go's `encoding/json` reads it, for the gateway: etcd's gateway decodes
//! request bodies with Go's decoder (through golang/protobuf 1.3's `jsonpb`), and its
//! clients see Go's texts whenever a body is malformed or a value has the wrong type.
//!
//! - `scanner`: validity and Go's syntax errors;
//! - `stream`: `json.Decoder`, values one after another from a body that arrives in
//!   pieces (Watch and LeaseKeepAlive bodies carry many requests);
//! - `literal`: a JSON value into one of Go's scalar types, with Go's type errors;
//! - here: the pieces those share (string unquoting, base64, quoting for errors).
//!
//! This module knows JSON only, never protobuf (`jsonpb` does).

pub mod literal;
pub mod scanner;
pub mod stream;

/// Whether Go's `unicode.IsPrint` holds for a character that `strconv.Quote` may meet.
/// Exact for Latin-1, which is all that byte-wise quoting meets; beyond it, control,
/// format and separator characters are the ones escaped.
fn is_print(c: char) -> bool {
    match c {
        ' ' => true,
        '\u{a0}' | '\u{ad}' | '\u{2028}' | '\u{2029}' | '\u{feff}' => false,
        _ => !c.is_control() && !c.is_whitespace(),
    }
}

/// One character as Go's `strconv.Quote` writes it between its quotes.
fn quote_into(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        c if is_print(c) => out.push(c),
        c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
        c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push_str(&format!("\\U{:08x}", c as u32)),
    }
}

/// A byte read as the rune of the same value (Go's `string(rune(c))`), quoted as
/// `strconv.Quote` quotes it, without the surrounding quotes.
pub fn quote_rune(c: char) -> String {
    let mut out = String::new();
    quote_into(&mut out, c);
    out
}

/// Go's `%q` of a byte string (`strconv.Quote(string(b))`): invalid UTF-8 bytes as `\xNN`.
pub fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            quote_into(&mut out, c);
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    out
}

/// Four hex digits after `\u`, as Go's `getu4` reads them.
fn hex4(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits.get(..4)?).ok()?;
    u32::from_str_radix(text, 16).ok()
}

/// Go's `unquoteBytes`: the text of a JSON string literal (quotes included, already
/// valid), with invalid UTF-8 and unpaired surrogates turned into U+FFFD.
pub fn unquote(literal: &[u8]) -> String {
    let inner = literal
        .strip_prefix(b"\"")
        .and_then(|s| s.strip_suffix(b"\""))
        .unwrap_or(literal);
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let b = inner[i];
        if b == b'\\' && i + 1 < inner.len() {
            i += 2;
            match inner[i - 1] {
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let first = hex4(&inner[i..]).unwrap_or(0xfffd);
                    i += 4;
                    let c = if (0xd800..0xe000).contains(&first) {
                        // A valid pair is consumed whole; anything else is U+FFFD and
                        // the next escape is read on its own.
                        let second = inner
                            .get(i..i + 2)
                            .filter(|s| *s == b"\\u")
                            .and_then(|_| hex4(&inner[i + 2..]));
                        match second {
                            Some(low)
                                if (0xd800..0xdc00).contains(&first)
                                    && (0xdc00..0xe000).contains(&low) =>
                            {
                                i += 6;
                                char::from_u32(0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00))
                            }
                            _ => None,
                        }
                    } else {
                        char::from_u32(first)
                    };
                    out.push(c.unwrap_or('\u{fffd}'));
                }
                // `"`, `\` and `/` stand for themselves.
                other => out.push(char::from(other)),
            }
            continue;
        }
        // The longest valid UTF-8 run from here, or one invalid byte as U+FFFD.
        let rest = &inner[i..];
        let end = rest.iter().position(|&c| c == b'\\').unwrap_or(rest.len());
        let run = &rest[..end.max(1)];
        match run.utf8_chunks().next() {
            Some(chunk) if !chunk.valid().is_empty() => {
                out.push_str(chunk.valid());
                i += chunk.valid().len();
            }
            _ => {
                out.push('\u{fffd}');
                i += 1;
            }
        }
    }
    out
}

/// Go's `base64.StdEncoding.Decode`, with its error text ("illegal base64 data at
/// input byte N") and its tolerance of `\r` and `\n` anywhere.
pub fn decode_base64(src: &[u8]) -> Result<Vec<u8>, String> {
    let corrupt = |at: usize| Err(format!("illegal base64 data at input byte {at}"));
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        // One quantum: up to four symbols, newlines skipped, padding ends the input.
        let mut symbols = [0u8; 4];
        let mut len = 4;
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                // StdEncoding pads: a short last quantum is corrupt where it began.
                return corrupt(si - j);
            }
            let c = src[si];
            si += 1;
            if let Some(value) = base64_value(c) {
                symbols[j] = value;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' || j < 2 {
                return corrupt(si - 1);
            }
            if j == 2 {
                // "==" is expected; the first '=' is consumed.
                while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                    si += 1;
                }
                if si == src.len() {
                    return corrupt(src.len());
                }
                if src[si] != b'=' {
                    return corrupt(si - 1);
                }
                si += 1;
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                // Data after the padding.
                return corrupt(si);
            }
            len = j;
            break;
        }
        let value = (u32::from(symbols[0]) << 18)
            | (u32::from(symbols[1]) << 12)
            | (u32::from(symbols[2]) << 6)
            | u32::from(symbols[3]);
        let bytes = [(value >> 16) as u8, (value >> 8) as u8, value as u8];
        out.extend_from_slice(&bytes[..len - 1]);
    }
    Ok(out)
}

fn base64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_and_fails_as_go_does() {
        assert_eq!(decode_base64(b"Zm9v").unwrap(), b"foo");
        assert_eq!(decode_base64(b"Zm9vYg==").unwrap(), b"foob");
        assert_eq!(decode_base64(b"Zm9vYmE=").unwrap(), b"fooba");
        assert_eq!(decode_base64(b"Zm9v\nYmFy\r\n").unwrap(), b"foobar");
        assert_eq!(decode_base64(b"").unwrap(), b"");
        let error = |s: &[u8]| decode_base64(s).unwrap_err();
        assert_eq!(error(b"Zm9"), "illegal base64 data at input byte 0");
        assert_eq!(error(b"Zm9v!"), "illegal base64 data at input byte 4");
        assert_eq!(error(b"Zm9vY"), "illegal base64 data at input byte 4");
        assert_eq!(error(b"Zg="), "illegal base64 data at input byte 3");
        assert_eq!(error(b"Zg==x"), "illegal base64 data at input byte 4");
        assert_eq!(error(b"Z==="), "illegal base64 data at input byte 1");
        assert_eq!(error(b"Zm9v-_"), "illegal base64 data at input byte 4");
    }

    #[test]
    fn strings_unquote_as_go_unquotes_them() {
        assert_eq!(unquote(br#""a\"b\\c\/d\n""#), "a\"b\\c/d\n");
        assert_eq!(unquote(br#""\u00e9\ud83d\ude00""#), "é😀");
        assert_eq!(unquote(br#""\ud83dx""#), "\u{fffd}x");
        assert_eq!(unquote(br#""\ude00\u0041""#), "\u{fffd}A");
        assert_eq!(unquote(b"\"a\xffb\""), "a\u{fffd}b");
    }

    #[test]
    fn quoting_follows_strconv() {
        assert_eq!(quote_bytes(b"FOO"), "\"FOO\"");
        assert_eq!(
            quote_bytes(b"a\"\\\n\x01\xff"),
            "\"a\\\"\\\\\\n\\x01\\xff\""
        );
        assert_eq!(quote_rune('\u{80}'), "\\u0080");
        assert_eq!(quote_rune('é'), "é");
    }
}
