//! The sending side against a stand-in peer on loopback TCP: deadlines, and the one
//! rule of the AppendEntries stream that no cluster test can force, that an answer is
//! never read for another request.

use std::pin::Pin;

use futures::Stream;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response};

use super::*;
use crate::pb::peer_server::{Peer, PeerServer};

#[test]
fn heartbeats_keep_the_tight_deadline_and_payloads_get_room() {
    let soft = Duration::from_millis(75);
    assert_eq!(append_entries_deadline(soft, false, 100), soft);
    assert_eq!(append_entries_deadline(soft, true, 0), MIN_APPEND_DEADLINE);
    let big = append_entries_deadline(soft, true, 96 * 1024 * 1024);
    assert_eq!(big, MIN_APPEND_DEADLINE + Duration::from_secs(12));
}

/// A request the echo peer answers only after `SLOW_ANSWER`, well past the deadline
/// the tests give it.
const SLOW: &[u8] = b"slow";
const SLOW_ANSWER: Duration = Duration::from_millis(400);
const DEADLINE: Duration = Duration::from_millis(100);

/// Answers each streamed AppendEntries with the request's own bytes, in order on its
/// stream; serves nothing else.
#[derive(Clone, Default)]
struct EchoPeer {
    streams_opened: Arc<AtomicU64>,
}

type Echoes = Pin<Box<dyn Stream<Item = Result<pb::AppendEntriesStreamResponse, Status>> + Send>>;

fn not_served<T>() -> Result<T, Status> {
    Err(Status::unimplemented("not served by the echo peer"))
}

#[tonic::async_trait]
impl Peer for EchoPeer {
    type AppendEntriesStreamStream = Echoes;
    type ProposeCommandsStream =
        futures::stream::Empty<Result<pb::ProposeCommandsResponse, Status>>;

    async fn append_entries_stream(
        &self,
        request: Request<Streaming<pb::AppendEntriesStreamRequest>>,
    ) -> Result<Response<Echoes>, Status> {
        self.streams_opened.fetch_add(1, Ordering::SeqCst);
        let echoes = request.into_inner().then(|message| async move {
            let request = message?.request;
            if request.as_ref() == SLOW {
                tokio::time::sleep(SLOW_ANSWER).await;
            }
            Ok(pb::AppendEntriesStreamResponse { response: request })
        });
        Ok(Response::new(Box::pin(echoes)))
    }

    async fn append_entries(
        &self,
        _: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        not_served()
    }

    async fn request_vote(
        &self,
        _: Request<pb::RequestVoteRequest>,
    ) -> Result<Response<pb::RequestVoteResponse>, Status> {
        not_served()
    }

    async fn request_pre_vote(
        &self,
        _: Request<pb::RequestPreVoteRequest>,
    ) -> Result<Response<pb::RequestPreVoteResponse>, Status> {
        not_served()
    }

    async fn install_snapshot(
        &self,
        _: Request<Streaming<pb::InstallSnapshotRequest>>,
    ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        not_served()
    }

    async fn transfer_leader(
        &self,
        _: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        not_served()
    }

    async fn propose_commands(
        &self,
        _: Request<Streaming<pb::ProposeCommandsRequest>>,
    ) -> Result<Response<Self::ProposeCommandsStream>, Status> {
        not_served()
    }

    async fn read_index(
        &self,
        _: Request<pb::ReadIndexRequest>,
    ) -> Result<Response<pb::ReadIndexResponse>, Status> {
        not_served()
    }

    async fn cluster_members(
        &self,
        _: Request<pb::ClusterMembersRequest>,
    ) -> Result<Response<pb::ClusterMembersResponse>, Status> {
        not_served()
    }
}

/// Serves `peer` on a loopback port, and returns a replication connection to it.
async fn connect_to(peer: EchoPeer) -> PeerConnection {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PeerServer::new(peer))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let member = Member {
        name: "echo".to_owned(),
        peer_urls: vec![url],
        client_urls: vec![],
    };
    let factory = PeerNetworkFactory::new(Arc::new(ClusterGuard::new(1, 7)), PeerChannels::tcp());
    factory.connection(2, &member, Lane::Replication)
}

async fn send(connection: &mut PeerConnection, request: &'static [u8]) -> Option<Bytes> {
    match connection
        .append_on_stream(Bytes::from_static(request), DEADLINE)
        .await
    {
        Ok(answer) => answer,
        Err(CallError::Timeout(_)) => panic!("{request:?} timed out"),
        Err(_) => panic!("{request:?} failed"),
    }
}

#[tokio::test]
async fn one_stream_carries_one_request_after_another() {
    let peer = EchoPeer::default();
    let mut connection = connect_to(peer.clone()).await;
    for request in [&b"first"[..], b"second", b"third"] {
        let answer = send(&mut connection, request).await;
        assert_eq!(answer.as_deref(), Some(request));
    }
    assert_eq!(peer.streams_opened.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_that_came_too_late_is_never_read_for_the_next_request() {
    let peer = EchoPeer::default();
    let mut connection = connect_to(peer.clone()).await;
    assert_eq!(
        send(&mut connection, b"warm").await.as_deref(),
        Some(&b"warm"[..])
    );

    let late = connection
        .append_on_stream(Bytes::from_static(SLOW), DEADLINE)
        .await;
    assert!(matches!(late, Err(CallError::Timeout(_))));
    // On the old stream the next answer would be "slow"'s, once the peer sends it.
    tokio::time::sleep(SLOW_ANSWER).await;
    assert_eq!(
        send(&mut connection, b"next").await.as_deref(),
        Some(&b"next"[..])
    );
    assert_eq!(peer.streams_opened.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_call_dropped_half_way_leaves_no_stream_behind() {
    let peer = EchoPeer::default();
    let mut connection = connect_to(peer.clone()).await;
    assert_eq!(
        send(&mut connection, b"warm").await.as_deref(),
        Some(&b"warm"[..])
    );

    // openraft drops a replication future when it stops replicating to the peer; here
    // the drop comes while the peer is still working on the request.
    let patient = Duration::from_secs(5);
    let dropped = tokio::time::timeout(
        DEADLINE,
        connection.append_on_stream(Bytes::from_static(SLOW), patient),
    )
    .await;
    assert!(dropped.is_err(), "the slow answer came before the drop");
    tokio::time::sleep(SLOW_ANSWER).await;
    assert_eq!(
        send(&mut connection, b"after").await.as_deref(),
        Some(&b"after"[..])
    );
    assert_eq!(peer.streams_opened.load(Ordering::SeqCst), 2);
}
