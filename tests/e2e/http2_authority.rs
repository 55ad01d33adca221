//! The HTTP/2 `:authority` the client port accepts, on the wire: etcdctl 3.4 sends
//! `http://host:port` there (see etcdctl.rs), which QuantyKube's patched h2 reads as
//! `host:port` (vendor/h2/QUANTYKUBE-PATCH.md), while every other malformed value is
//! still refused. h2's own client cannot send a malformed `:authority`, so this test
//! writes the frames itself.
//!
//! Against etcd (grpc-go, which does not parse `:authority`) every value is answered;
//! against QuantyKube the values that are not an authority, even after a scheme, get
//! the stream reset with PROTOCOL_ERROR (docs/compatibility.md, known differences).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Cluster, Target};
use crate::support::h2_frames::{
    frame, literal, ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PREFACE, PROTOCOL_ERROR,
    RST_STREAM, SETTINGS,
};

/// What the server did with the one request of a connection.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Response headers on the request's stream: the request reached gRPC.
    Answered,
    /// RST_STREAM with this error code.
    Reset(u32),
    /// GOAWAY with this error code before any answer.
    GoAway(u32),
}

/// Sends `Maintenance/Status` (an empty request) on a fresh connection with
/// `:authority: authority`, and reports what became of it.
async fn status_with_authority(addr: &str, authority: &str) -> Outcome {
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    let mut block = Vec::new();
    literal(&mut block, ":method", "POST");
    literal(&mut block, ":scheme", "http");
    literal(&mut block, ":path", "/etcdserverpb.Maintenance/Status");
    literal(&mut block, ":authority", authority);
    literal(&mut block, "content-type", "application/grpc");
    literal(&mut block, "te", "trailers");
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, END_HEADERS, 1, &block));
    // A gRPC message: not compressed, zero bytes long (an empty StatusRequest).
    out.extend(frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 0]));
    conn.write_all(&out).await.expect("send request");

    let read = async {
        loop {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.expect("frame header");
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.expect("frame payload");
            let code = || u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    conn.write_all(&frame(SETTINGS, ACK, 0, &[]))
                        .await
                        .expect("ack settings");
                }
                HEADERS if stream == 1 => return Outcome::Answered,
                RST_STREAM if stream == 1 => return Outcome::Reset(code()),
                GOAWAY => {
                    let error =
                        u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    return Outcome::GoAway(error);
                }
                _ => {} // WINDOW_UPDATE, PING, SETTINGS acks
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!(":authority {authority:?}: no answer within 10 s"))
}

#[tokio::test]
async fn http2_authority_with_a_scheme_is_answered_and_other_malformed_ones_are_not() {
    let cluster = Cluster::start(1).await;
    let endpoint = cluster.endpoint(0);
    let addr = endpoint
        .strip_prefix("http://")
        .expect("an http:// endpoint");

    for authority in [addr.to_owned(), endpoint.clone()] {
        assert_eq!(
            status_with_authority(addr, &authority).await,
            Outcome::Answered,
            ":authority {authority:?}"
        );
    }

    let malformed = [
        format!("{endpoint}/path"),
        format!("http://user@{addr}"),
        format!("{endpoint}?query"),
        format!("http://http://{addr}"),
        "not an authority".to_owned(),
    ];
    let expected = match cluster.target() {
        Target::Etcd => Outcome::Answered,
        Target::Quantykube => Outcome::Reset(PROTOCOL_ERROR),
    };
    for authority in malformed {
        assert_eq!(
            status_with_authority(addr, &authority).await,
            expected,
            ":authority {authority:?}"
        );
    }
}
