//! A real cluster in one process: three voters (and later a learner) on loopback TCP,
//! each with its own RocksDB raft log and a trivial in-memory state machine whose
//! snapshots are files, so that elections, forwarding, read barriers, failover and
//! snapshot streaming all run over the real peer API.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use openraft::async_runtime::WatchReceiver;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use quantykube_raft::{
    raft_config, ClusterGuard, Command, CommandOutcome, LogId, LogStore, Member, NodeId,
    PeerChannels, PeerNetworkFactory, PeerService, Raft, RaftClient, RaftClientOptions, Snapshot,
    SnapshotFile, SnapshotMeta, StoredMembership, TypeConfig, LOG_COLUMN_FAMILIES,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;

// ---------------------------------------------------------------------------------
// A trivial state machine: the list of applied commands, snapshotted to a file.

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct SmData {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    commands: Vec<Bytes>,
}

#[derive(Default)]
struct SmState {
    data: SmData,
    current: Option<(SnapshotMeta, PathBuf)>,
    snapshots_built: u64,
    snapshots_installed: u64,
    next_file: u64,
}

#[derive(Clone)]
struct TestSm {
    state: Arc<Mutex<SmState>>,
    dir: PathBuf,
}

impl TestSm {
    fn new(dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            state: Arc::default(),
            dir,
        }
    }

    fn commands(&self) -> Vec<Bytes> {
        self.state.lock().unwrap().data.commands.clone()
    }

    fn snapshots_installed(&self) -> u64 {
        self.state.lock().unwrap().snapshots_installed
    }

    fn snapshots_built(&self) -> u64 {
        self.state.lock().unwrap().snapshots_built
    }

    fn next_path(&self) -> PathBuf {
        let mut st = self.state.lock().unwrap();
        st.next_file += 1;
        self.dir.join(format!("snapshot-{}.bin", st.next_file))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for TestSm {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let path = self.next_path();
        let data = self.state.lock().unwrap().data.clone();
        // Pad the file past one network chunk so that streaming sends several.
        let mut bytes = postcard::to_stdvec(&data).map_err(io::Error::other)?;
        let payload_len = bytes.len() as u64;
        bytes.resize(bytes.len() + 1536 * 1024, 0xab);
        let mut file_bytes = payload_len.to_be_bytes().to_vec();
        file_bytes.extend_from_slice(&bytes);
        std::fs::write(&path, &file_bytes)?;
        let meta = SnapshotMeta {
            last_log_id: data.last_applied,
            last_membership: data.membership.clone(),
        };
        let mut st = self.state.lock().unwrap();
        st.snapshots_built += 1;
        if let Some((_, old)) = st.current.replace((meta.clone(), path.clone())) {
            let _ = std::fs::remove_file(old);
        }
        Ok(Snapshot {
            meta,
            snapshot: SnapshotFile { path },
        })
    }
}

impl RaftStateMachine<TypeConfig> for TestSm {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let st = self.state.lock().unwrap();
        Ok((st.data.last_applied, st.data.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let outcome = {
                let mut st = self.state.lock().unwrap();
                st.data.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => CommandOutcome::default(),
                    EntryPayload::Normal(cmd) => {
                        st.data.commands.push(cmd.0);
                        CommandOutcome(Bytes::from(format!("applied #{}", st.data.commands.len())))
                    }
                    EntryPayload::Membership(m) => {
                        st.data.membership = StoredMembership::new(Some(entry.log_id), m);
                        CommandOutcome::default()
                    }
                }
            };
            if let Some(responder) = responder {
                responder.send(outcome);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotFile,
    ) -> Result<(), io::Error> {
        // Take the file out of the staging directory, as PeerService requires.
        let path = self.next_path();
        std::fs::rename(&snapshot.path, &path)?;
        let bytes = std::fs::read(&path)?;
        let len = u64::from_be_bytes(bytes[..8].try_into().unwrap()) as usize;
        let data: SmData = postcard::from_bytes(&bytes[8..8 + len]).map_err(io::Error::other)?;
        assert_eq!(data.last_applied, meta.last_log_id);
        let mut st = self.state.lock().unwrap();
        st.data = data;
        st.snapshots_installed += 1;
        if let Some((_, old)) = st.current.replace((meta.clone(), path)) {
            let _ = std::fs::remove_file(old);
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let st = self.state.lock().unwrap();
        Ok(st.current.as_ref().map(|(meta, path)| Snapshot {
            meta: meta.clone(),
            snapshot: SnapshotFile { path: path.clone() },
        }))
    }
}

// ---------------------------------------------------------------------------------
// One node: RocksDB log, raft, peer server, client.

struct Node {
    id: NodeId,
    raft: Raft<TestSm>,
    sm: TestSm,
    client: RaftClient<TestSm>,
    stop_server: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

fn member(id: NodeId, url: &str) -> Member {
    Member {
        name: format!("node-{id}"),
        peer_urls: vec![url.to_owned()],
        client_urls: vec![],
    }
}

async fn start_node(id: NodeId, listener: TcpListener, dir: PathBuf) -> Node {
    start_node_serving(id, listener, dir, None).await
}

/// `stream_refusals`: the node acts as a member from before `AppendEntriesStream`,
/// counting each stream it refuses there.
async fn start_node_serving(
    id: NodeId,
    listener: TcpListener,
    dir: PathBuf,
    stream_refusals: Option<StreamRefusals>,
) -> Node {
    let config =
        Arc::new(raft_config(Duration::from_millis(50), Duration::from_millis(300), 10).unwrap());
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let db = Arc::new(rocksdb::DB::open_cf(&opts, dir.join("db"), LOG_COLUMN_FAMILIES).unwrap());
    let log_store = LogStore::new(db).unwrap();
    let sm = TestSm::new(dir.join("sm"));
    let channels = PeerChannels::tcp();
    let guard = Arc::new(ClusterGuard::new(id, 1));
    let raft = Raft::new(
        id,
        config.clone(),
        PeerNetworkFactory::new(guard.clone(), channels.clone()),
        log_store,
        sm.clone(),
    )
    .await
    .unwrap();
    let service = PeerService::new(raft.clone(), guard, dir.join("staging"))
        .unwrap()
        .into_service();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let incoming = TcpListenerStream::new(listener);
    let stopped = async {
        stop_rx.await.ok();
    };
    let mut server = tonic::transport::Server::builder();
    let router = match stream_refusals {
        None => server.add_service(service),
        Some(refused) => server.add_service(WithoutAppendStream {
            inner: service,
            refused,
        }),
    };
    let server = tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(incoming, stopped)
            .await
            .unwrap();
    });
    let client = RaftClient::new(
        raft.clone(),
        channels,
        RaftClientOptions::for_config(&config),
    );
    Node {
        id,
        raft,
        sm,
        client,
        stop_server: Some(stop_tx),
        server: Some(server),
    }
}

/// The `AppendEntriesStream` calls a [`WithoutAppendStream`] member refused, counted per
/// TCP connection they came on (the caller's address; `None` if the server did not say).
#[derive(Clone, Default)]
struct StreamRefusals(Arc<Mutex<BTreeMap<Option<SocketAddr>, usize>>>);

impl StreamRefusals {
    fn note(&self, connection: Option<SocketAddr>) {
        *self.0.lock().unwrap().entry(connection).or_default() += 1;
    }

    fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }

    /// The most refused on one connection, with that connection.
    fn most_on_one_connection(&self) -> (usize, Option<SocketAddr>) {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(connection, n)| (*n, *connection))
            .max()
            .unwrap_or((0, None))
    }
}

/// A member from before `AppendEntriesStream` existed: its peer service answers that
/// method as the generated router answers any method it does not know (UNIMPLEMENTED,
/// no message, no body), and serves every other method as usual.
#[derive(Clone)]
struct WithoutAppendStream<S> {
    inner: S,
    refused: StreamRefusals,
}

const APPEND_STREAM_PATH: &str = "/quantykube.peer.v1.Peer/AppendEntriesStream";

impl<S: NamedService> NamedService for WithoutAppendStream<S> {
    const NAME: &'static str = S::NAME;
}

type HttpResponse = http::Response<tonic::body::Body>;

impl<S> Service<http::Request<tonic::body::Body>> for WithoutAppendStream<S>
where
    S: Service<
        http::Request<tonic::body::Body>,
        Response = HttpResponse,
        Error = Infallible,
        Future = BoxFuture<HttpResponse, Infallible>,
    >,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = BoxFuture<HttpResponse, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if request.uri().path() != APPEND_STREAM_PATH {
            return self.inner.call(request);
        }
        let connection = request
            .extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(|info| info.remote_addr());
        self.refused.note(connection);
        Box::pin(async {
            let mut response = http::Response::new(tonic::body::Body::default());
            let headers = response.headers_mut();
            headers.insert(
                tonic::Status::GRPC_STATUS,
                (tonic::Code::Unimplemented as i32).into(),
            );
            headers.insert(
                http::header::CONTENT_TYPE,
                tonic::metadata::GRPC_CONTENT_TYPE,
            );
            Ok(response)
        })
    }
}

impl Node {
    async fn kill(&mut self) {
        self.raft.shutdown().await.unwrap();
        if let Some(tx) = self.stop_server.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
    }

    fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    fn last_applied_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow_watched()
            .last_applied
            .map(|l| l.index)
            .unwrap_or(0)
    }
}

async fn wait_for_leader(nodes: &[&Node], not: Option<NodeId>) -> NodeId {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let leaders: Vec<_> = nodes.iter().map(|n| n.leader()).collect();
        if let Some(Some(l)) = leaders.first() {
            if Some(*l) != not
                && leaders.iter().all(|x| *x == Some(*l))
                && nodes.iter().any(|n| n.id == *l)
            {
                return *l;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no agreed leader: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn cmd(s: &str) -> Command {
    Command(Bytes::from(s.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_elect_forward_read_fail_over_and_catch_up_by_snapshot() {
    // RUST_LOG=quantykube_raft=debug shows the peer traffic when this fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    tokio::time::timeout(Duration::from_secs(60), scenario())
        .await
        .expect("scenario took too long");
}

async fn scenario() {
    let dir = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3u64 {
        let (listener, url) = listen().await;
        members.insert(id, member(id, &url));
        listeners.push((id, listener));
    }
    let mut nodes = Vec::new();
    for (id, listener) in listeners {
        nodes.push(start_node(id, listener, dir.path().join(format!("n{id}"))).await);
    }
    nodes[0].raft.initialize(members.clone()).await.unwrap();

    // 1. A leader is elected.
    let leader = wait_for_leader(&nodes.iter().collect::<Vec<_>>(), None).await;
    let li = nodes.iter().position(|n| n.id == leader).unwrap();
    let followers: Vec<usize> = (0..3).filter(|i| *i != li).collect();

    // 2. A write through a follower is forwarded; a read barrier on the other follower
    //    then sees it.
    let out = nodes[followers[0]]
        .client
        .write(cmd("first"))
        .await
        .unwrap();
    assert_eq!(out.0, Bytes::from("applied #1"));
    nodes[followers[1]].client.read_barrier().await.unwrap();
    assert_eq!(
        nodes[followers[1]].sm.commands(),
        vec![Bytes::from("first")]
    );
    // The leader's own path works too.
    nodes[li].client.read_barrier().await.unwrap();
    nodes[li].client.write(cmd("second")).await.unwrap();

    // 3. Enough writes that every node snapshots and purges its log.
    for i in 0..30 {
        nodes[followers[i % 2]]
            .client
            .write(cmd(&format!("bulk-{i}")))
            .await
            .unwrap();
    }
    let purged = nodes[li].raft.metrics().borrow_watched().purged;
    assert!(
        purged.is_some(),
        "leader should have purged its log after snapshots"
    );
    assert!(nodes[li].sm.snapshots_built() >= 1);

    // 4. A new learner starts from nothing: the leader's log no longer reaches back, so it
    //    must receive a snapshot over the stream, then the tail by replication.
    let (listener4, url4) = listen().await;
    let member4 = member(4, &url4);
    let n4 = start_node(4, listener4, dir.path().join("n4")).await;
    nodes[li].raft.add_learner(4, member4, true).await.unwrap();
    let want = nodes[li].last_applied_index();
    n4.raft
        .wait(Some(Duration::from_secs(10)))
        .applied_index_at_least(Some(want), "learner caught up")
        .await
        .unwrap();
    assert!(
        n4.sm.snapshots_installed() >= 1,
        "learner should have installed a snapshot"
    );
    assert_eq!(n4.sm.commands(), nodes[li].sm.commands());
    nodes.push(n4);

    // 5. Leadership transfer over the TransferLeader RPC.
    let target = nodes[followers[0]].id;
    nodes[li]
        .raft
        .trigger()
        .transfer_leader(target)
        .await
        .unwrap();
    let voters: Vec<&Node> = nodes[..3].iter().collect();
    let leader = wait_for_leader(&voters, Some(leader)).await;
    assert_eq!(leader, target);
    let li = nodes.iter().position(|n| n.id == leader).unwrap();

    // Every other node forwards once to the new leader, so each holds a pooled channel
    // to it.
    for n in nodes.iter().filter(|n| n.id != leader) {
        n.client
            .write(cmd(&format!("warm-{}", n.id)))
            .await
            .unwrap();
    }
    let written = 2 + 30 + 3;

    // 6. Kill the leader and write through the learner and the surviving follower at
    //    once: their pooled channels (or fresh dials) to the old leader fail to connect,
    //    so the writes were certainly not proposed; they wait for the other two voters to
    //    elect a new leader and land there.
    nodes[li].kill().await;
    let other = nodes[..3]
        .iter()
        .find(|n| n.id != leader)
        .map(|n| n.id)
        .unwrap();
    let oi = nodes.iter().position(|n| n.id == other).unwrap();
    let (a, b) = tokio::join!(
        nodes[3].client.write(cmd("after failover")),
        nodes[oi].client.write(cmd("after failover, too")),
    );
    a.unwrap();
    b.unwrap();
    let survivors: Vec<&Node> = nodes[..3].iter().filter(|n| n.id != leader).collect();
    let new_leader = wait_for_leader(&survivors, Some(leader)).await;
    assert_ne!(new_leader, leader);
    let follower = survivors.iter().find(|n| n.id != new_leader).unwrap();
    let out = follower
        .client
        .write(cmd("after failover 2"))
        .await
        .unwrap();
    assert_eq!(out.0, Bytes::from(format!("applied #{}", written + 3)));

    // 7. Read barriers on the learner and the follower see the last write.
    nodes[3].client.read_barrier().await.unwrap();
    assert_eq!(
        nodes[3].sm.commands().last(),
        Some(&Bytes::from("after failover 2"))
    );
    let follower = nodes
        .iter()
        .find(|n| n.id != new_leader && n.id != leader && n.id != 4)
        .unwrap();
    follower.client.read_barrier().await.unwrap();
    assert_eq!(follower.sm.commands().len(), written + 3);

    for node in nodes.iter_mut() {
        if node.id != leader {
            node.kill().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_leader_reports_no_leader() {
    let dir = tempfile::tempdir().unwrap();
    let (listener, _url) = listen().await;
    let mut node = start_node(1, listener, dir.path().join("n1")).await;
    let options = RaftClientOptions {
        request_timeout: Duration::from_millis(300),
        retry_interval: Duration::from_millis(50),
    };
    let client = RaftClient::new(node.raft.clone(), PeerChannels::tcp(), options);
    assert_eq!(
        client.write(cmd("lost")).await,
        Err(quantykube_raft::WriteError::NoLeader)
    );
    assert_eq!(
        client.read_barrier().await,
        Err(quantykube_raft::ReadError::NoLeader)
    );
    node.kill().await;
    assert!(matches!(
        client.write(cmd("stopped")).await,
        Err(quantykube_raft::WriteError::Stopped(_))
    ));
}

/// A process answering at a member's peer URL refuses raft messages meant for another
/// member id, before raft sees them (soak seed 420: a replacement that took the removed
/// member's id was replicated to as the new member and applied its own removal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_meant_for_another_member_id_is_refused() {
    use quantykube_raft::pb::peer_client::PeerClient;
    use quantykube_raft::{MEMBER_ID_MISMATCH, TARGET_ID_METADATA};

    let dir = tempfile::tempdir().unwrap();
    let (listener, url) = listen().await;
    let mut node = start_node(0x1f, listener, dir.path().join("n1")).await;
    let mut peer = PeerClient::connect(url).await.unwrap();
    let vote = |target: Option<&str>| {
        // Not a vote openraft could decode: only the checks before decoding matter.
        let mut request = tonic::Request::new(quantykube_raft::pb::RequestVoteRequest {
            request: vec![0xff].into(),
        });
        if let Some(target) = target {
            request
                .metadata_mut()
                .insert(TARGET_ID_METADATA, target.parse().unwrap());
        }
        request
    };
    for forged in ["20", "0", "not-hex", "1f1f"] {
        let refused = peer.request_vote(vote(Some(forged))).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{forged}");
        assert!(
            refused.message().starts_with(MEMBER_ID_MISMATCH),
            "{forged}: {}",
            refused.message()
        );
    }
    // Its own id, or no target (a sender from before the check), reaches the decoder.
    for target in [Some("1f"), None] {
        let status = peer.request_vote(vote(target)).await.unwrap_err();
        assert_ne!(status.code(), tonic::Code::FailedPrecondition, "{target:?}");
    }
    node.kill().await;
}

/// During a rolling upgrade the leader may be new and a follower old: the follower's
/// generated router does not know `AppendEntriesStream`. The leader must fall back to
/// unary AppendEntries for that connection (and not ask again on every append), and
/// writes that need the old follower's vote to commit still commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_the_append_stream_is_replicated_to_by_unary_calls() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = BTreeMap::new();
    let refused = StreamRefusals::default();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let (listener, url) = listen().await;
        members.insert(id, member(id, &url));
        let old = (id == 3).then(|| refused.clone());
        nodes.push(start_node_serving(id, listener, dir.path().join(format!("n{id}")), old).await);
    }
    nodes[0].raft.initialize(members).await.unwrap();
    let mut leader = wait_for_leader(&nodes.iter().collect::<Vec<_>>(), None).await;
    if leader == 3 {
        // Node 3 leading would only send streams to members that serve them.
        nodes[2].raft.trigger().transfer_leader(1).await.unwrap();
        leader = wait_for_leader(&nodes.iter().collect::<Vec<_>>(), Some(3)).await;
    }
    let li = nodes.iter().position(|n| n.id == leader).unwrap();
    let other_new = nodes
        .iter()
        .position(|n| n.id != leader && n.id != 3)
        .unwrap();
    nodes[li].client.write(cmd("all three")).await.unwrap();

    // With the other new member gone, every commit needs node 3's unary acks.
    nodes[other_new].kill().await;
    let writes = 40;
    for i in 0..writes {
        let written = tokio::time::timeout(
            Duration::from_secs(10),
            nodes[li].client.write(cmd(&format!("old follower {i}"))),
        )
        .await
        .expect("a write that needs the old follower should commit");
        written.unwrap();
    }
    // The follower learns the last commit index from the next append or heartbeat.
    let caught_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while nodes[2].sm.commands().len() < writes + 1 {
        assert!(
            tokio::time::Instant::now() < caught_up,
            "old follower behind"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(nodes[2].sm.commands(), nodes[li].sm.commands());

    // The fallback is kept per `PeerConnection`: once refused, that connection sends
    // unary calls for the rest of its life. openraft opens one per lane (replication,
    // heartbeats) and target each time a node becomes leader, and the lane's pooled TCP
    // connection carries it; a call that fails (a stream asked for whose answer came
    // too late, on a busy machine) discards that TCP connection and the next ask comes
    // on a new one. So one TCP connection is asked for the stream at most once per
    // leadership, whatever the machine's speed, and each leadership has its own term.
    // Asking on every AppendEntries (the fallback not kept) would ask at least once per
    // write above on the replication lane's connection.
    let asked = refused.total();
    assert!(asked >= 1, "the leader never tried the stream");
    let terms = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != other_new)
        .map(|(_, n)| n.raft.metrics().borrow_watched().current_term)
        .max()
        .unwrap();
    let (most, connection) = refused.most_on_one_connection();
    assert!(
        most as u64 <= terms,
        "the stream was asked for {most} times on one connection ({connection:?}, \
         {asked} in all) in {terms} terms: no fallback kept"
    );
    assert!(
        terms < writes as u64,
        "{terms} terms: too many elections for the bound above to catch a missing fallback"
    );
    for (i, node) in nodes.iter_mut().enumerate() {
        if i != other_new {
            node.kill().await;
        }
    }
}
