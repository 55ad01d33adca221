//! What one HTTP/2 connection can make a member do (docs/security.md, "Limits on what
//! one client can use"): keepalives sent while their answers are never read, streams
//! reset as soon as they are opened (CVE-2023-44487, "rapid reset"), a header block
//! continued forever (the CONTINUATION flood, RUSTSEC-2024-0332). Each flood is
//! finite, so that it stops by itself, and another client is served while it runs.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prost::Message;
use quantykube::proto::etcdserverpb::LeaseKeepAliveRequest;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::harness::*;
use crate::support::h2_frames::{
    frame, grpc_request_block, read_frame, ACK, CANCEL, CONTINUATION, END_HEADERS,
    ENHANCE_YOUR_CALM, GOAWAY, HEADERS, PING, PREFACE, RST_STREAM, SETTINGS,
};

/// How long a flood's client waits for the member to take more before it concludes
/// that the member stopped taking any. Only how much the test sends depends on it,
/// never whether it passes: a slower member just gets less.
const STALL: Duration = Duration::from_secs(2);

fn address(cluster: &Cluster) -> String {
    cluster
        .endpoint(0)
        .trim_start_matches("http://")
        .to_string()
}

/// Another client, on a connection of its own, served while a flood runs.
async fn another_client_is_served(cluster: &Cluster, key: &str) {
    let mut other = cluster.client(0).await;
    other.put(key, "served", None).await.expect("a put");
    let lease = other.lease_grant(60, None).await.expect("a lease");
    let (mut keeper, mut answers) = other
        .lease_keep_alive(lease.id())
        .await
        .expect("a keepalive stream");
    keeper.keep_alive().await.expect("a keepalive");
    let answer = tokio::time::timeout(RPC_TIMEOUT, answers.message())
        .await
        .expect("a keepalive answer in time")
        .expect("a keepalive answer")
        .expect("the stream is open");
    assert!(answer.ttl() > 0);
}

/// A client that sends keepalives and never reads their answers holds a bounded amount
/// of the member: the member answers one keepalive at a time and queues a few answers
/// (`QUEUED_ANSWERS`, 16); once the client's HTTP/2 window for answers is full the
/// member stops taking keepalives, and HTTP/2's flow control stops the client after
/// one receive window (QuantyKube: hyper's 1 MiB per stream; etcd: grpc-go's, at most
/// 16 MiB), or the member resets the stream.
#[tokio::test]
async fn keepalives_whose_answers_are_never_read_are_bounded_by_flow_control() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    let lease = client.lease_grant(600, None).await.expect("a lease").id();
    let address = address(&cluster);

    let tcp = TcpStream::connect(&address).await.expect("connect");
    let (sender, connection) = h2::client::handshake(tcp).await.expect("an h2 handshake");
    let driving = tokio::spawn(connection);
    let mut sender = sender.ready().await.expect("ready to send");
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{address}/etcdserverpb.Lease/LeaseKeepAlive"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request");
    // The answer is never read, so the connection's window for it is never released.
    let (_answer, mut stream) = sender.send_request(request, false).expect("open a stream");

    let message = LeaseKeepAliveRequest { id: lease }.encode_to_vec();
    let mut chunk = BytesMut::new();
    for _ in 0..4096 {
        chunk.extend_from_slice(&[0]);
        chunk.extend_from_slice(&(message.len() as u32).to_be_bytes());
        chunk.extend_from_slice(&message);
    }
    let chunk = chunk.freeze();
    let ceiling = 64 << 20;
    let mut granted = 0usize;
    let mut rest = Bytes::new();
    while granted < ceiling {
        if rest.is_empty() {
            rest = chunk.clone();
        }
        stream.reserve_capacity(rest.len());
        let capacity = tokio::time::timeout(
            STALL,
            futures::future::poll_fn(|cx| stream.poll_capacity(cx)),
        )
        .await;
        let n = match capacity {
            Ok(Some(Ok(n))) => n.min(rest.len()),
            // No more room within STALL: the member stopped taking keepalives.
            Err(_) => break,
            // The member reset the stream (QuantyKube's h2 does, ENHANCE_YOUR_CALM, once
            // the small frames it buffers unread exceed its budget): bounded too.
            Ok(None | Some(Err(_))) => break,
        };
        stream.send_data(rest.split_to(n), false).expect("send");
        granted += n;
    }
    let bound = match cluster.target() {
        Target::Quantykube => 4 << 20,
        Target::Etcd => 20 << 20,
    };
    assert!(
        granted < bound,
        "the member took {granted} bytes of keepalives whose answers were not read"
    );
    another_client_is_served(&cluster, "after-keepalives").await;
    drop(stream);
    drop(sender);
    driving.abort();
    another_client_is_served(&cluster, "after-close").await;
}

/// A raw HTTP/2 connection past its handshake: our SETTINGS sent, the member's acked.
async fn raw_connection(address: &str) -> TcpStream {
    let mut conn = TcpStream::connect(address).await.expect("connect");
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    conn.write_all(&hello).await.expect("send the preface");
    loop {
        let settings = tokio::time::timeout(RPC_TIMEOUT, read_frame(&mut conn))
            .await
            .expect("the member's settings in time")
            .expect("the member's settings");
        if settings.kind == SETTINGS && settings.flags & ACK == 0 {
            break;
        }
    }
    conn.write_all(&frame(SETTINGS, ACK, 0, &[]))
        .await
        .expect("ack the settings");
    conn
}

/// How a flooded connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The member sent GOAWAY with this code.
    GoAway(u32),
    /// The member answered the PING after the flood: it took the whole flood.
    PingAnswered,
    /// The member closed the connection without a GOAWAY.
    Closed,
}

/// Sends `flood` (which ends with a PING) on `conn` while reading what comes back,
/// until the member ends the connection or answers the PING; meanwhile another client
/// is served.
async fn flood(conn: TcpStream, flood: Vec<u8>, cluster: &Cluster, key: &str) -> Ended {
    let (mut reader, mut writer) = conn.into_split();
    let writing = tokio::spawn(async move {
        for piece in flood.chunks(64 * 1024) {
            if writer.write_all(piece).await.is_err() {
                return;
            }
        }
        // Kept open: the member decides how the connection ends.
        let _open = writer;
        std::future::pending::<()>().await;
    });
    let reading = async {
        while let Some(frame) = read_frame(&mut reader).await {
            if frame.kind == PING && frame.flags & ACK != 0 {
                return Ended::PingAnswered;
            }
            if frame.kind == GOAWAY {
                return Ended::GoAway(frame.error_code());
            }
        }
        Ended::Closed
    };
    let (ended, ()) = tokio::join!(
        async {
            tokio::time::timeout(Duration::from_secs(60), reading)
                .await
                .expect("the member ends the flood or answers the PING after it")
        },
        another_client_is_served(cluster, key)
    );
    writing.abort();
    ended
}

/// CVE-2023-44487: streams opened and reset at once, 20000 of them on one connection.
#[tokio::test]
async fn rapid_reset_streams_are_bounded_and_others_are_served() {
    let cluster = Cluster::start(1).await;
    let address = address(&cluster);
    let conn = raw_connection(&address).await;
    let block = grpc_request_block(&address, "/etcdserverpb.KV/Range");
    let mut out = Vec::new();
    for i in 0..20_000u32 {
        let id = 1 + 2 * i;
        out.extend(frame(HEADERS, END_HEADERS, id, &block));
        out.extend(frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()));
    }
    out.extend(frame(PING, 0, 0, &[7; 8]));
    let ended = flood(conn, out, &cluster, "after-rapid-reset").await;
    // QuantyKube's h2 ends the connection once more than 20 streams the client reset
    // wait to be accepted (`max_pending_accept_reset_streams`); etcd 3.4's grpc-go
    // takes every stream and answers the PING.
    if cluster.target() == Target::Quantykube {
        assert_eq!(ended, Ended::GoAway(ENHANCE_YOUR_CALM));
    }
    another_client_is_served(&cluster, "after-rapid-reset-2").await;
}

/// RUSTSEC-2024-0332: one header block continued by 200000 empty CONTINUATION frames.
#[tokio::test]
async fn a_continuation_flood_is_cut_off_and_others_are_served() {
    let cluster = Cluster::start(1).await;
    let address = address(&cluster);
    let conn = raw_connection(&address).await;
    let block = grpc_request_block(&address, "/etcdserverpb.KV/Range");
    let mut out = frame(HEADERS, 0, 1, &block);
    // Empty CONTINUATION frames: no header bytes to count, only frames.
    for _ in 0..200_000 {
        out.extend(frame(CONTINUATION, 0, 1, &[]));
    }
    // A PING inside a header block is a connection error: a server that read the
    // whole flood ends the connection there.
    out.extend(frame(PING, 0, 0, &[7; 8]));
    let ended = flood(conn, out, &cluster, "after-continuations").await;
    // QuantyKube's h2 allows a header block as many CONTINUATION frames as its header
    // list size needs (at least 5) and then ends the connection; etcd 3.4 reads the
    // whole flood and closes the connection at the PING.
    if cluster.target() == Target::Quantykube {
        assert_eq!(ended, Ended::GoAway(ENHANCE_YOUR_CALM));
    }
    another_client_is_served(&cluster, "after-continuations-2").await;
}
