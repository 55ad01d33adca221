//! A follower's side of forwarded writes: one `ProposeCommands` stream to the leader,
//! shared by every write this node forwards, as many commands per message as are
//! waiting when the stream is free.
//!
//! This module owns the stream's life (opened on first use, replaced when the leader
//! changes or the stream breaks, closed when a write times out on it) and the map from
//! a command sent on it to its waiting writer. It must never resend a command: one that
//! was handed to a stream that then broke has an unknown fate, and it says so.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::channels::{DialError, Lane, PeerChannels, PooledChannel};
use crate::pb;
use crate::types::{Member, NodeId};

/// A message stops taking more commands past this size (one command may exceed it).
const BATCH_BYTES: usize = 1 << 20;
/// Request messages queued for the transport before batching waits for it.
const QUEUED_REQUESTS: usize = 4;

/// What became of a command handed to a stream.
#[derive(Debug)]
pub(super) enum Delivery {
    /// The leader's answer.
    Answered(pb::ForwardedOutcome),
    /// Never sent: the stream ended before taking the command. Safe to retry.
    NotSent,
    /// Sent, and the stream broke before the answer came: its fate is unknown.
    Lost,
}

/// A command waiting for its turn on the stream, and where its writer waits.
struct Queued {
    command: Bytes,
    reply: oneshot::Sender<Delivery>,
}

/// One open stream to one leader.
struct ForwardStream {
    leader: NodeId,
    channel: PooledChannel,
    queue: mpsc::UnboundedSender<Queued>,
}

/// The node's stream to the current leader, if open. Cheap to clone.
#[derive(Clone, Default)]
pub(super) struct Forwarder {
    current: Arc<Mutex<Option<Arc<ForwardStream>>>>,
}

impl Forwarder {
    /// Stops using `stream` (a write timed out on it, or it ended): the next write dials
    /// a fresh connection and opens a new stream.
    pub(super) fn close(&self, stream: &StreamHandle, channels: &PeerChannels) {
        let mut current = self.lock();
        if current.as_ref().is_some_and(|s| Arc::ptr_eq(s, &stream.0)) {
            *current = None;
        }
        drop(current);
        channels.discard(stream.0.leader, Lane::Forward, &stream.0.channel);
    }

    /// The shared stream to `leader`, opened (and the leader dialled) if there is none.
    /// Once the stream's queue closes (it was replaced or closed), it waits at most
    /// `linger` for the answers still due.
    pub(super) async fn stream_to(
        &self,
        channels: &PeerChannels,
        leader: NodeId,
        member: &Member,
        linger: Duration,
    ) -> Result<StreamHandle, DialError> {
        if let Some(open) = usable(&self.lock(), leader) {
            return Ok(StreamHandle(open));
        }
        let channel = channels.get(leader, member, Lane::Forward).await?;
        let mut current = self.lock();
        // Another write may have opened one while this one dialled.
        if let Some(open) = usable(&current, leader) {
            return Ok(StreamHandle(open));
        }
        let (queue, queued) = mpsc::unbounded_channel();
        let stream = Arc::new(ForwardStream {
            leader,
            channel: channel.clone(),
            queue,
        });
        // Replacing a stream to an old leader closes its queue: it finishes the
        // commands it sent and ends.
        *current = Some(stream.clone());
        tokio::spawn(run_stream(leader, channel, queued, linger));
        Ok(StreamHandle(stream))
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<ForwardStream>>> {
        // The slot holds no invariant a panicking holder could break; keep serving.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The stream in `slot` if it goes to `leader` and still takes commands.
fn usable(slot: &Option<Arc<ForwardStream>>, leader: NodeId) -> Option<Arc<ForwardStream>> {
    slot.as_ref()
        .filter(|s| s.leader == leader && !s.queue.is_closed())
        .cloned()
}

/// One open stream, to send on and to close if a command's writer gives up on it.
pub(super) struct StreamHandle(Arc<ForwardStream>);

impl StreamHandle {
    /// Queues `command` on the stream; the receiver hears what becomes of it. `None`
    /// when the stream had already ended (the command was not sent).
    pub(super) fn send(&self, command: Bytes) -> Option<oneshot::Receiver<Delivery>> {
        let (reply, answer) = oneshot::channel();
        self.0.queue.send(Queued { command, reply }).ok()?;
        Some(answer)
    }
}

/// Drives one stream: batches queued commands into messages, hands each answer to its
/// writer, and when the stream ends tells every writer still waiting that its command
/// was lost. Once the queue closes (the stream was replaced or closed) it waits at most
/// `linger` for the answers still due, then ends.
///
/// It always reads answers while a message waits for the transport, so a leader that
/// waits for this node to read never stalls it: commands queue up meanwhile and go out
/// together in the next message.
async fn run_stream(
    leader: NodeId,
    channel: PooledChannel,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    linger: Duration,
) {
    let (requests, outgoing) = mpsc::channel(QUEUED_REQUESTS);
    let mut requests = Some(requests);
    let mut client = channel.client();
    let mut answers = match client.propose_commands(ReceiverStream::new(outgoing)).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            // Nothing was taken from the queue: dropping it tells every writer so.
            tracing::debug!(leader, error = %status, "cannot open the forwarding stream");
            return;
        }
    };
    // Ordered by id, so that writers hear of a broken stream in the order they sent:
    // a hash map's random order made a simulation seed replay differently.
    let mut waiting: BTreeMap<u64, oneshot::Sender<Delivery>> = BTreeMap::new();
    let mut next_id: u64 = 0;
    // The next message, built and waiting for room in the transport.
    let mut batch: Option<pb::ProposeCommandsRequest> = None;
    // Armed once the queue closes; its branch is off until then.
    let closing = tokio::time::sleep(linger);
    tokio::pin!(closing);
    loop {
        let mut queue_closed = false;
        tokio::select! {
            first = queued.recv(), if requests.is_some() && batch.is_none() => match first {
                None => queue_closed = true,
                Some(first) => {
                    let mut commands = Vec::new();
                    let mut bytes = 0;
                    let mut next = Some(first);
                    while let Some(Queued { command, reply }) = next.take() {
                        next_id += 1;
                        bytes += command.len();
                        waiting.insert(next_id, reply);
                        commands.push(pb::ForwardedCommand { id: next_id, command });
                        if bytes < BATCH_BYTES {
                            next = queued.try_recv().ok();
                        }
                    }
                    batch = Some(pb::ProposeCommandsRequest { commands });
                }
            },
            room = reserve(requests.as_ref()), if batch.is_some() => match (room, batch.take()) {
                (Some(permit), Some(message)) => permit.send(message),
                // The transport ended: the message left unsent is answered below.
                (None, message) => {
                    batch = message;
                    break;
                }
                (Some(_), None) => {}
            },
            answer = answers.message() => match answer {
                Ok(Some(response)) => {
                    for outcome in response.outcomes {
                        if let Some(writer) = waiting.remove(&outcome.id) {
                            // The writer may have given up; nothing to do then.
                            let _ = writer.send(Delivery::Answered(outcome));
                        }
                    }
                    if requests.is_none() && waiting.is_empty() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    tracing::debug!(leader, error = %status, "forwarding stream broke");
                    break;
                }
            },
            () = &mut closing, if requests.is_none() => break,
        }
        if queue_closed {
            // Replaced or closed: send nothing more (which half-closes the stream), and
            // collect the answers still due.
            requests = None;
            closing.as_mut().reset(tokio::time::Instant::now() + linger);
            if waiting.is_empty() {
                return;
            }
        }
    }
    // A message built and never handed to the transport was not sent.
    for command in batch.iter().flat_map(|b| &b.commands) {
        if let Some(writer) = waiting.remove(&command.id) {
            let _ = writer.send(Delivery::NotSent);
        }
    }
    for (_, writer) in std::mem::take(&mut waiting) {
        let _ = writer.send(Delivery::Lost);
    }
}

/// Room for one message in the transport, or `None` once it has ended.
async fn reserve<T>(requests: Option<&mpsc::Sender<T>>) -> Option<mpsc::Permit<'_, T>> {
    requests?.reserve().await.ok()
}
