//! The leader's side of forwarded writes: one `ProposeCommands` stream per forwarding
//! follower, proposing each command it carries and answering with its outcome.
//!
//! This module owns turning each forwarded command into a `client_write` and its result
//! into a [`pb::ForwardedOutcome`], and batching the outcomes that finish together into
//! one response message. It must never forward a command to a third node (the follower
//! retries against the leader it is told about) and never interpret a command.

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::storage::RaftStateMachine;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

use crate::pb;
use crate::types::{Command, Raft, TypeConfig};

/// Response messages queued for the follower before the proposing loop waits for it.
const QUEUED_RESPONSES: usize = 16;

/// The response stream of one `ProposeCommands` call.
pub type OutcomeStream = ReceiverStream<Result<pb::ProposeCommandsResponse, Status>>;

/// Proposes every command arriving on `incoming` and streams their outcomes back. The
/// stream ends once the follower closed its side and every command it sent is answered,
/// once the follower stops reading, or once raft stops (after answering the commands in
/// flight), so that a server shutting down gracefully never waits on an idle stream.
/// Serves one follower's stream. `admitted` is asked before each batch is proposed:
/// once it says no (the cluster removed the sender), every command is refused and
/// the stream takes no more.
pub fn serve<SM>(
    raft: Raft<SM>,
    mut incoming: Streaming<pb::ProposeCommandsRequest>,
    admitted: impl Fn() -> bool + Send + 'static,
) -> OutcomeStream
where
    SM: RaftStateMachine<TypeConfig>,
{
    let (outcomes_tx, outcomes_rx) = mpsc::channel(QUEUED_RESPONSES);
    tokio::spawn(async move {
        let mut in_flight = FuturesUnordered::new();
        let mut follower_sending = true;
        let raft_stopped = raft_stopped(raft.clone());
        tokio::pin!(raft_stopped);
        loop {
            tokio::select! {
                () = &mut raft_stopped, if follower_sending => follower_sending = false,
                message = incoming.message(), if follower_sending => match message {
                    Ok(Some(request)) if !admitted() => {
                        let outcomes = request.commands.into_iter().map(refused).collect();
                        let _ = outcomes_tx.send(Ok(pb::ProposeCommandsResponse { outcomes })).await;
                        follower_sending = false;
                    }
                    Ok(Some(request)) => {
                        for forwarded in request.commands {
                            in_flight.push(propose(raft.clone(), forwarded));
                        }
                    }
                    Ok(None) => follower_sending = false,
                    Err(status) => {
                        tracing::debug!(error = %status, "forwarding follower's stream broke");
                        follower_sending = false;
                    }
                },
                Some(first) = in_flight.next() => {
                    // Everything else already finished goes in the same message.
                    let mut outcomes = vec![first];
                    while let Some(Some(more)) = in_flight.next().now_or_never() {
                        outcomes.push(more);
                    }
                    let response = pb::ProposeCommandsResponse { outcomes };
                    if outcomes_tx.send(Ok(response)).await.is_err() {
                        // The follower is gone; the commands in flight stay proposed.
                        return;
                    }
                }
                else => return,
            }
        }
    });
    ReceiverStream::new(outcomes_rx)
}

/// Completes once `raft` has stopped: its core, ending, drops the senders of its
/// metrics channels. This waits on the server metrics, which change only with the
/// vote, the leader or the membership. The full metrics are sent at every turn of the
/// core's loop, several per write on every member, and each woke every stream that
/// waited here: on a follower, both of the leader's AppendEntries streams, each wake a
/// poll of the peer connection's task (issue 20's fifteenth step, docs/benchmarks.md).
pub(crate) async fn raft_stopped<SM>(raft: Raft<SM>)
where
    SM: RaftStateMachine<TypeConfig>,
{
    let mut server = raft.server_metrics();
    while server.changed().await.is_ok() {}
}

/// The outcome of a command from a sender the cluster removed: not proposed.
fn refused(forwarded: pb::ForwardedCommand) -> pb::ForwardedOutcome {
    pb::ForwardedOutcome {
        id: forwarded.id,
        error: Some(pb::ProposeError {
            code: Code::FailedPrecondition as i32,
            message: crate::guard::MEMBER_REMOVED.to_string(),
        }),
        ..Default::default()
    }
}

/// Proposes one forwarded command and says what became of it.
async fn propose<SM>(raft: Raft<SM>, forwarded: pb::ForwardedCommand) -> pb::ForwardedOutcome
where
    SM: RaftStateMachine<TypeConfig>,
{
    let mut outcome = pb::ForwardedOutcome {
        id: forwarded.id,
        ..Default::default()
    };
    if raft.metrics().borrow_watched().running_state.is_err() {
        // Certainly not proposed: let the follower find the next leader.
        outcome.leader_redirect = Some(pb::LeaderRedirect::new(None, None));
        return outcome;
    }
    let error = |code: Code, message: String| pb::ProposeError {
        code: code as i32,
        message,
    };
    match raft.client_write(Command(forwarded.command)).await {
        Ok(response) => outcome.outcome = Some(response.data.0),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
            outcome.leader_redirect = Some(pb::LeaderRedirect::new(
                to.leader_id,
                to.leader_node.as_ref(),
            ));
        }
        // The entry was appended and then lost its leader: it may still commit. Only
        // the client can decide whether to retry.
        Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(to))) => {
            outcome.error = Some(error(
                Code::Aborted,
                format!("leader changed; the command may or may not commit: {to}"),
            ));
        }
        Err(RaftError::APIError(other)) => {
            outcome.error = Some(error(Code::FailedPrecondition, other.to_string()));
        }
        Err(RaftError::Fatal(fatal)) => {
            outcome.error = Some(error(
                Code::Aborted,
                format!("raft stopped while proposing: {fatal}"),
            ));
        }
    }
    outcome
}
