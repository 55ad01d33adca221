//! HTTP/2 frames written and read by hand, for what no client library sends: a
//! malformed `:authority`, streams reset as soon as opened, header blocks that never
//! end.

#![allow(dead_code)]

use tokio::io::{AsyncRead, AsyncReadExt};

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const CANCEL: u32 = 0x8;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame: its 9-byte header and `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a frame's length");
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// One HPACK "literal header field without indexing, new name" (RFC 7541 6.2.2),
/// without Huffman coding.
pub fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00);
    for s in [name, value] {
        assert!(s.len() < 127, "a one-byte HPACK length");
        block.push(s.len() as u8);
        block.extend(s.as_bytes());
    }
}

/// The header block of a gRPC call of `path` to `authority`.
pub fn grpc_request_block(authority: &str, path: &str) -> Vec<u8> {
    let mut block = Vec::new();
    literal(&mut block, ":method", "POST");
    literal(&mut block, ":scheme", "http");
    literal(&mut block, ":path", path);
    literal(&mut block, ":authority", authority);
    literal(&mut block, "content-type", "application/grpc");
    literal(&mut block, "te", "trailers");
    block
}

/// A frame as read: kind, flags, stream and payload.
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        let bytes = &self.payload[at..at + 4];
        u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }
}

/// The next frame, or `None` once the connection ended.
pub async fn read_frame<R: AsyncRead + Unpin>(conn: &mut R) -> Option<Frame> {
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream,
        payload,
    })
}
