//! Go's `encoding/json` scanner: the byte-at-a-time state machine that decides whether
//! a text is JSON and, when it is not, says so in Go's words ("invalid character 'x'
//! looking for beginning of value", "unexpected end of JSON input"). etcd's gateway
//! answers malformed bodies with these texts, and clients match on them.
//!
//! It only validates and finds where a value ends; it never builds a value.

/// What one byte did, as Go's `scan*` results (the ones callers tell apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    Continue,
    BeginLiteral,
    BeginObject,
    ObjectKey,
    ObjectValue,
    EndObject,
    BeginArray,
    ArrayValue,
    EndArray,
    SkipSpace,
    /// The top-level value ended before this byte.
    End,
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parse {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    BeginValueOrEmpty,
    BeginValue,
    BeginStringOrEmpty,
    BeginString,
    EndValue,
    EndTop,
    InString,
    InStringEsc,
    InStringEscU(u8),
    Neg,
    One,
    Zero,
    Dot,
    Dot0,
    E,
    ESign,
    E0,
    /// Inside `true`, `false` or `null`: the bytes still expected.
    Literal(&'static [u8], &'static str),
    Error,
}

/// Go's `maxNestingDepth`.
const MAX_DEPTH: usize = 10_000;

pub struct Scanner {
    state: State,
    parse: Vec<Parse>,
    end_top: bool,
    error: Option<String>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            state: State::BeginValue,
            parse: Vec::new(),
            end_top: false,
            error: None,
        }
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `quoteChar`: a byte as Go's scanner names it in an error.
pub fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_string(),
        b'"' => "'\"'".to_string(),
        // strconv.Quote(string(rune(c))) without its double quotes.
        _ => format!("'{}'", super::quote_rune(char::from(c))),
    }
}

impl Scanner {
    pub fn reset(&mut self) {
        *self = Scanner::default();
    }

    /// The error message once `step` or `eof` returned `Scan::Error`.
    pub fn error(&self) -> &str {
        self.error.as_deref().unwrap_or("")
    }

    fn fail(&mut self, c: u8, context: &str) -> Scan {
        self.state = State::Error;
        self.error = Some(format!("invalid character {} {context}", quote_char(c)));
        Scan::Error
    }

    /// Go's `scanner.eof`: the input ended here.
    pub fn eof(&mut self) -> Scan {
        if self.error.is_some() {
            return Scan::Error;
        }
        if self.end_top {
            return Scan::End;
        }
        self.step(b' ');
        if self.end_top {
            return Scan::End;
        }
        if self.error.is_none() {
            self.error = Some("unexpected end of JSON input".to_string());
        }
        Scan::Error
    }

    fn push(&mut self, c: u8, parse: Parse, success: Scan) -> Scan {
        self.parse.push(parse);
        if self.parse.len() <= MAX_DEPTH {
            return success;
        }
        self.fail(c, "exceeded max depth")
    }

    fn pop(&mut self) {
        self.parse.pop();
        if self.parse.is_empty() {
            self.state = State::EndTop;
            self.end_top = true;
        } else {
            self.state = State::EndValue;
        }
    }

    /// Feeds one byte.
    pub fn step(&mut self, c: u8) -> Scan {
        match self.state {
            State::BeginValueOrEmpty => {
                if is_space(c) {
                    return Scan::SkipSpace;
                }
                if c == b']' {
                    return self.end_value(c);
                }
                self.begin_value(c)
            }
            State::BeginValue => self.begin_value(c),
            State::BeginStringOrEmpty => {
                if is_space(c) {
                    return Scan::SkipSpace;
                }
                if c == b'}' {
                    if let Some(last) = self.parse.last_mut() {
                        *last = Parse::ObjectValue;
                    }
                    return self.end_value(c);
                }
                self.begin_string(c)
            }
            State::BeginString => self.begin_string(c),
            State::EndValue => self.end_value(c),
            State::EndTop => {
                if !is_space(c) {
                    self.fail(c, "after top-level value");
                }
                Scan::End
            }
            State::InString => {
                if c == b'"' {
                    self.state = State::EndValue;
                } else if c == b'\\' {
                    self.state = State::InStringEsc;
                } else if c < 0x20 {
                    return self.fail(c, "in string literal");
                }
                Scan::Continue
            }
            State::InStringEsc => match c {
                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {
                    self.state = State::InString;
                    Scan::Continue
                }
                b'u' => {
                    self.state = State::InStringEscU(0);
                    Scan::Continue
                }
                _ => self.fail(c, "in string escape code"),
            },
            State::InStringEscU(seen) => {
                if !c.is_ascii_hexdigit() {
                    return self.fail(c, "in \\u hexadecimal character escape");
                }
                self.state = if seen == 3 {
                    State::InString
                } else {
                    State::InStringEscU(seen + 1)
                };
                Scan::Continue
            }
            State::Neg => match c {
                b'0' => {
                    self.state = State::Zero;
                    Scan::Continue
                }
                b'1'..=b'9' => {
                    self.state = State::One;
                    Scan::Continue
                }
                _ => self.fail(c, "in numeric literal"),
            },
            State::One => {
                if c.is_ascii_digit() {
                    return Scan::Continue;
                }
                self.zero(c)
            }
            State::Zero => self.zero(c),
            State::Dot => {
                if c.is_ascii_digit() {
                    self.state = State::Dot0;
                    return Scan::Continue;
                }
                self.fail(c, "after decimal point in numeric literal")
            }
            State::Dot0 => {
                if c.is_ascii_digit() {
                    return Scan::Continue;
                }
                if c == b'e' || c == b'E' {
                    self.state = State::E;
                    return Scan::Continue;
                }
                self.end_value(c)
            }
            State::E => {
                if c == b'+' || c == b'-' {
                    self.state = State::ESign;
                    return Scan::Continue;
                }
                self.e_sign(c)
            }
            State::ESign => self.e_sign(c),
            State::E0 => {
                if c.is_ascii_digit() {
                    return Scan::Continue;
                }
                self.end_value(c)
            }
            State::Literal(rest, word) => match rest.split_first() {
                Some((&expected, rest)) if c == expected => {
                    self.state = if rest.is_empty() {
                        State::EndValue
                    } else {
                        State::Literal(rest, word)
                    };
                    Scan::Continue
                }
                Some((&expected, _)) => {
                    let context = format!("in literal {word} (expecting {})", quote_char(expected));
                    self.fail(c, &context)
                }
                None => self.end_value(c),
            },
            State::Error => Scan::Error,
        }
    }

    fn begin_value(&mut self, c: u8) -> Scan {
        if is_space(c) {
            return Scan::SkipSpace;
        }
        match c {
            b'{' => {
                self.state = State::BeginStringOrEmpty;
                self.push(c, Parse::ObjectKey, Scan::BeginObject)
            }
            b'[' => {
                self.state = State::BeginValueOrEmpty;
                self.push(c, Parse::ArrayValue, Scan::BeginArray)
            }
            b'"' => self.literal(State::InString),
            b'-' => self.literal(State::Neg),
            b'0' => self.literal(State::Zero),
            b'1'..=b'9' => self.literal(State::One),
            b't' => self.literal(State::Literal(b"rue", "true")),
            b'f' => self.literal(State::Literal(b"alse", "false")),
            b'n' => self.literal(State::Literal(b"ull", "null")),
            _ => self.fail(c, "looking for beginning of value"),
        }
    }

    fn literal(&mut self, state: State) -> Scan {
        self.state = state;
        Scan::BeginLiteral
    }

    fn begin_string(&mut self, c: u8) -> Scan {
        if is_space(c) {
            return Scan::SkipSpace;
        }
        if c == b'"' {
            return self.literal(State::InString);
        }
        self.fail(c, "looking for beginning of object key string")
    }

    fn zero(&mut self, c: u8) -> Scan {
        if c == b'.' {
            self.state = State::Dot;
            return Scan::Continue;
        }
        if c == b'e' || c == b'E' {
            self.state = State::E;
            return Scan::Continue;
        }
        self.end_value(c)
    }

    fn e_sign(&mut self, c: u8) -> Scan {
        if c.is_ascii_digit() {
            self.state = State::E0;
            return Scan::Continue;
        }
        self.fail(c, "in exponent of numeric literal")
    }

    fn end_value(&mut self, c: u8) -> Scan {
        let Some(&parse) = self.parse.last() else {
            self.state = State::EndTop;
            self.end_top = true;
            return self.step(c);
        };
        if is_space(c) {
            self.state = State::EndValue;
            return Scan::SkipSpace;
        }
        match (parse, c) {
            (Parse::ObjectKey, b':') => {
                if let Some(last) = self.parse.last_mut() {
                    *last = Parse::ObjectValue;
                }
                self.state = State::BeginValue;
                Scan::ObjectKey
            }
            (Parse::ObjectKey, _) => self.fail(c, "after object key"),
            (Parse::ObjectValue, b',') => {
                if let Some(last) = self.parse.last_mut() {
                    *last = Parse::ObjectKey;
                }
                self.state = State::BeginString;
                Scan::ObjectValue
            }
            (Parse::ObjectValue, b'}') => {
                self.pop();
                Scan::EndObject
            }
            (Parse::ObjectValue, _) => self.fail(c, "after object key:value pair"),
            (Parse::ArrayValue, b',') => {
                self.state = State::BeginValue;
                Scan::ArrayValue
            }
            (Parse::ArrayValue, b']') => {
                self.pop();
                Scan::EndArray
            }
            (Parse::ArrayValue, _) => self.fail(c, "after array element"),
        }
    }
}

/// Go's `checkValid`, what `json.Unmarshal` runs first: the whole input is one value.
pub fn check_valid(data: &[u8]) -> Result<(), String> {
    let mut scanner = Scanner::default();
    for &c in data {
        if scanner.step(c) == Scan::Error {
            return Err(scanner.error().to_string());
        }
    }
    if scanner.eof() == Scan::Error {
        return Err(scanner.error().to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_valid;

    fn error(text: &str) -> String {
        check_valid(text.as_bytes()).unwrap_err()
    }

    #[test]
    fn valid_documents_pass() {
        for text in [
            "{}",
            " [1, -0.5e+3, \"a\\u00e9\\n\", true, false, null, {\"k\": []}] ",
            "0",
            "\"\"",
        ] {
            assert_eq!(check_valid(text.as_bytes()), Ok(()), "{text}");
        }
    }

    #[test]
    fn errors_are_worded_as_go_words_them() {
        assert_eq!(
            error("x"),
            "invalid character 'x' looking for beginning of value"
        );
        assert_eq!(error(""), "unexpected end of JSON input");
        assert_eq!(error("{"), "unexpected end of JSON input");
        assert_eq!(error("1 2"), "invalid character '2' after top-level value");
        assert_eq!(error("{\"a\" 1}"), "invalid character '1' after object key");
        assert_eq!(
            error("{\"a\":1 \"b\"}"),
            "invalid character '\"' after object key:value pair"
        );
        assert_eq!(error("[1 2]"), "invalid character '2' after array element");
        assert_eq!(
            error("{a:1}"),
            "invalid character 'a' looking for beginning of object key string"
        );
        assert_eq!(
            error("1.x"),
            "invalid character 'x' after decimal point in numeric literal"
        );
        assert_eq!(error("-x"), "invalid character 'x' in numeric literal");
        assert_eq!(
            error("1ex"),
            "invalid character 'x' in exponent of numeric literal"
        );
        assert_eq!(
            error("tru "),
            "invalid character ' ' in literal true (expecting 'e')"
        );
        // Go ends the input with a space, and reports what that space breaks.
        assert_eq!(
            error("nul"),
            "invalid character ' ' in literal null (expecting 'l')"
        );
        assert_eq!(
            error("\"\\x\""),
            "invalid character 'x' in string escape code"
        );
        assert_eq!(
            error("\"\\u12g4\""),
            "invalid character 'g' in \\u hexadecimal character escape"
        );
        assert_eq!(
            error("\"\u{1}\""),
            "invalid character '\\x01' in string literal"
        );
        assert_eq!(
            error("'"),
            r"invalid character '\'' looking for beginning of value"
        );
        assert_eq!(
            error("\n\t}"),
            "invalid character '}' looking for beginning of value"
        );
    }

    #[test]
    fn nesting_is_bounded_as_go_bounds_it() {
        let deep = "[".repeat(10_001);
        assert_eq!(error(&deep), "invalid character '[' exceeded max depth");
    }
}
