//! Go's `json.Decoder` over a body that arrives in pieces: one JSON value after another,
//! each handed out as its raw text, with Go's errors ("unexpected EOF" for a value the
//! body ends inside of). etcd's gateway reads a Watch or LeaseKeepAlive body this way,
//! so that one HTTP request carries many stream messages; a unary body is its first
//! value, and whatever follows it is ignored, as in etcd.

use super::scanner::{Scan, Scanner};

/// What the next value is, as far as the bytes so far tell.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A whole value (leading whitespace removed).
    Value(Vec<u8>),
    /// The value so far is incomplete: push more bytes (or say the body ended).
    NeedMore,
    /// The body ended with nothing but whitespace since the last value (Go's `io.EOF`).
    End,
    /// Not JSON: Go's message. The decoder stays failed, as Go's does.
    Error(String),
}

#[derive(Default)]
pub struct ValueStream {
    buf: Vec<u8>,
    /// Where the value being read starts in `buf`.
    start: usize,
    /// How far into `buf` the scanner has read.
    scanned: usize,
    scanner: Scanner,
    failed: Option<String>,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

impl ValueStream {
    /// Appends bytes of the body.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held for the value being read (to bound a body that never ends a value).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    fn take(&mut self, end: usize) -> Next {
        let value = &self.buf[self.start..end];
        let skip = value.iter().take_while(|&&c| is_space(c)).count();
        let value = value[skip..].to_vec();
        self.start = end;
        self.scanned = end;
        self.scanner.reset();
        Next::Value(value)
    }

    /// The next value. `body_ended` says no more bytes will come.
    pub fn next(&mut self, body_ended: bool) -> Next {
        if let Some(error) = &self.failed {
            return Next::Error(error.clone());
        }
        while self.scanned < self.buf.len() {
            let at = self.scanned;
            self.scanned += 1;
            match self.scanner.step(self.buf[at]) {
                // The end shows one byte late: that byte is the next value's.
                Scan::End => return self.take(at),
                Scan::EndObject | Scan::EndArray if self.scanner_done() => {
                    return self.take(at + 1)
                }
                Scan::Error => {
                    let error = self.scanner.error().to_string();
                    self.failed = Some(error.clone());
                    return Next::Error(error);
                }
                _ => {}
            }
        }
        if !body_ended {
            return Next::NeedMore;
        }
        if self.scanner.step(b' ') == Scan::End {
            return self.take(self.buf.len());
        }
        if self.buf[self.start..].iter().any(|&c| !is_space(c)) {
            let error = "unexpected EOF".to_string();
            self.failed = Some(error.clone());
            return Next::Error(error);
        }
        Next::End
    }

    /// Whether the object or array that just closed was the top-level value. Go feeds
    /// an invented space rather than wait for a byte that may never come: at the top
    /// level it ends the value at once; inside one, a space changes nothing.
    fn scanner_done(&mut self) -> bool {
        self.scanner.step(b' ') == Scan::End
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pieces: &[&str]) -> Vec<Next> {
        let mut stream = ValueStream::default();
        let mut out = Vec::new();
        for piece in pieces {
            stream.push(piece.as_bytes());
            loop {
                match stream.next(false) {
                    Next::NeedMore => break,
                    next => {
                        let stop = matches!(next, Next::Error(_));
                        out.push(next);
                        if stop {
                            return out;
                        }
                    }
                }
            }
        }
        loop {
            let next = stream.next(true);
            let stop = !matches!(next, Next::Value(_));
            out.push(next);
            if stop {
                return out;
            }
        }
    }

    fn value(text: &str) -> Next {
        Next::Value(text.as_bytes().to_vec())
    }

    #[test]
    fn values_follow_each_other_across_pieces() {
        assert_eq!(
            values(&["{\"ID\":1}{\"I", "D\":2}  \n", " 3 [4]"]),
            vec![
                value("{\"ID\":1}"),
                value("{\"ID\":2}"),
                value("3"),
                value("[4]"),
                Next::End
            ]
        );
    }

    #[test]
    fn an_empty_body_ends_and_a_cut_value_is_unexpected_eof() {
        assert_eq!(values(&[]), vec![Next::End]);
        assert_eq!(values(&["  \n"]), vec![Next::End]);
        assert_eq!(
            values(&["{\"key\":"]),
            vec![Next::Error("unexpected EOF".into())]
        );
        assert_eq!(
            values(&["{\"a\":1} x"]),
            vec![
                value("{\"a\":1}"),
                Next::Error("invalid character 'x' looking for beginning of value".into())
            ]
        );
    }
}
