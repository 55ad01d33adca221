//! The one binary encoding for openraft structs, on disk and on the wire: postcard.
//!
//! This module owns `encode`/`decode` and their error. It must never pick a second
//! format for the same data: the log store and the peer network both rely on the bytes
//! written by one node being readable by every other node running this crate.
//! postcard is positional, so a field added to an openraft struct changes the format;
//! openraft is pinned to one exact version for that reason.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("postcard {what}: {source}")]
pub struct CodecError {
    what: &'static str,
    #[source]
    source: postcard::Error,
}

/// Encodes `value` with postcard. `what` names the value for error messages.
pub fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    postcard::to_stdvec(value).map_err(|source| CodecError { what, source })
}

/// Decodes a postcard value. Trailing bytes are an error: a message is exactly one value.
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) =
        postcard::take_from_bytes(bytes).map_err(|source| CodecError { what, source })?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(CodecError {
            what,
            source: postcard::Error::DeserializeBadEncoding,
        })
    }
}

impl From<CodecError> for std::io::Error {
    fn from(e: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

impl From<CodecError> for tonic::Status {
    fn from(e: CodecError) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_trailing_bytes() {
        let bytes = encode("pair", &(7u64, "seven")).unwrap();
        assert_eq!(
            decode::<(u64, String)>("pair", &bytes).unwrap(),
            (7, "seven".to_owned())
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<(u64, String)>("pair", &longer).is_err());
        assert!(decode::<(u64, String)>("pair", &bytes[..2]).is_err());
    }
}
