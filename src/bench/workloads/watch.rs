//! `watch`: `--watchers` watchers, each watching the whole key space, spread round-robin
//! over `--streams` Watch streams (the streams over the connections), while the
//! `--clients` writers put into the key space at `--put-rate` puts per second.
//!
//! The operations (and `latency_ms`) are the writers' puts. The watch side reports the
//! events delivered, events per second (from the first put to the last event), and the
//! delivery latency: from the put's acknowledgement (the writer's clock when its Put
//! answered) to the event's arrival on the stream. An event can arrive before its
//! put's acknowledgement is seen; that negative latency counts as 0 (and is reported as
//! `events_before_ack`). Setup opens every stream and waits until every watcher is
//! created before the first put; after the last put the run waits up to 5 s for the
//! missing events, and counts those still missing as errors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::Streaming;

use super::WorkloadRun;
use crate::bench::cli::WatchArgs;
use crate::bench::context::Context;
use crate::bench::driver::{drive, Op, Plan};
use crate::bench::error::{BenchError, OpError};
use crate::bench::keys::KeyPicker;
use crate::bench::recorder::{Recorder, Tag};
use crate::bench::report::{latency_json, latency_text};
use crate::client::AuthChannel;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::watch_request::RequestUnion;
use crate::proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchRequest, WatchResponse};

/// How long to wait for missing events after the last put (without any progress).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// When each of the writers' puts was acknowledged, by revision.
#[derive(Default)]
struct Acks(RwLock<HashMap<i64, Instant>>);

impl Acks {
    fn insert(&self, revision: i64, at: Instant) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(revision, at);
    }

    fn get(&self, revision: i64) -> Option<Instant> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&revision)
            .copied()
    }
}

/// Counters the stream tasks share with setup and drain.
#[derive(Default)]
struct Delivery {
    created: AtomicUsize,
    canceled: AtomicUsize,
    events: AtomicU64,
    before_ack: AtomicU64,
}

/// A writer: one Put per operation, remembering when it was acknowledged.
struct Writer {
    kv: KvClient<AuthChannel>,
    keys: KeyPicker,
    value: Bytes,
    acks: Arc<Acks>,
}

impl Op for Writer {
    async fn run(&mut self, seq: u64) -> Result<Tag, OpError> {
        let request = PutRequest {
            key: self.keys.next(seq),
            value: self.value.clone(),
            ..Default::default()
        };
        let response = self.kv.put(request).await?.into_inner();
        let acked = Instant::now();
        let revision = response
            .header
            .ok_or(OpError::Protocol("Put response without a header"))?
            .revision;
        self.acks.insert(revision, acked);
        Ok(None)
    }
}

/// What one stream's task measured.
struct StreamResult {
    /// Delivery latency (successes are events) and the stream's errors.
    recorder: Recorder,
    last_event: Option<Instant>,
}

pub async fn run(ctx: &Context, args: &WatchArgs) -> Result<WorkloadRun, BenchError> {
    let watchers = args.watchers;
    let streams = args.streams.min(watchers);
    let (key, range_end) = ctx.keys.range();
    let acks = Arc::new(Acks::default());
    let delivery = Arc::new(Delivery::default());
    let (stop, stopped) = watch::channel(false);
    let template = Recorder::new()?;
    let plan = Plan {
        rate: (args.put_rate > 0.0).then_some(args.put_rate),
        ..ctx.plan
    };

    // Open the streams, with their watchers' create requests queued before the call:
    // etcd (grpc-go) sends the response headers only with the first response.
    let mut setup = template.clone();
    let mut senders = Vec::with_capacity(streams);
    let mut tasks: Vec<JoinHandle<StreamResult>> = Vec::with_capacity(streams);
    let mut setup_error = None;
    for s in 0..streams {
        let on_stream = (s..watchers).step_by(streams).count();
        let (sender, requests) = mpsc::channel(on_stream + 1);
        for _ in 0..on_stream {
            let create = WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                    key: key.clone(),
                    range_end: range_end.clone(),
                    ..Default::default()
                })),
            };
            // The channel has room for every create request.
            let _ = sender.try_send(create);
        }
        match ctx
            .conns
            .watch(s)
            .watch(ReceiverStream::new(requests))
            .await
        {
            Ok(response) => {
                senders.push(sender);
                tasks.push(tokio::spawn(receive(
                    response.into_inner(),
                    acks.clone(),
                    delivery.clone(),
                    stopped.clone(),
                    template.clone(),
                )));
            }
            Err(status) => {
                let error = OpError::Rpc(status);
                setup.error_kind(error.kind(), 1);
                setup_error = Some(error);
                break;
            }
        }
    }
    if let Some(error) = setup_error {
        let _ = stop.send(true);
        let fatal = error.is_fatal().then(|| error.kind());
        let failure = format!("could not open a watch stream: {}", error.kind());
        let mut run = WorkloadRun::not_run(setup, fatal, Some(failure));
        run.mode = Some(plan.mode());
        return Ok(run);
    }

    // Wait until every watcher is created (or a stream fails).
    let deadline = Instant::now() + ctx.args.request_timeout.0;
    loop {
        let created = delivery.created.load(Ordering::Relaxed);
        if created >= watchers {
            break;
        }
        let broken = delivery.canceled.load(Ordering::Relaxed) > 0
            || tasks.iter().any(JoinHandle::is_finished);
        if broken || Instant::now() >= deadline || ctx.interrupt.is_triggered() {
            let _ = stop.send(true);
            for result in join(tasks).await {
                setup.merge_errors(&result.recorder);
            }
            let failure =
                format!("only {created} of {watchers} watchers were created; see the errors");
            let mut run = WorkloadRun::not_run(setup, None, Some(failure));
            run.mode = Some(plan.mode());
            return Ok(run);
        }
        tokio::time::sleep(POLL).await;
    }

    // The writers.
    let ops = (0..ctx.clients())
        .map(|i| Writer {
            kv: ctx.conns.kv(i),
            keys: ctx.keys.picker(i),
            value: ctx.value.clone(),
            acks: acks.clone(),
        })
        .collect();
    let started = Instant::now();
    let driven = drive(plan, ops, "watch", &ctx.interrupt).await?;
    let (mut run, _) = WorkloadRun::from_driven(driven);
    run.mode = Some(plan.mode());

    // Drain: wait for the events still on their way.
    let expected = run.recorder.succeeded() * watchers as u64;
    let mut seen = delivery.events.load(Ordering::Relaxed);
    let mut progress_at = Instant::now();
    while seen < expected && !ctx.interrupt.is_triggered() {
        if progress_at.elapsed() >= DRAIN_TIMEOUT || tasks.iter().all(JoinHandle::is_finished) {
            break;
        }
        tokio::time::sleep(POLL).await;
        let now = delivery.events.load(Ordering::Relaxed);
        if now > seen {
            seen = now;
            progress_at = Instant::now();
        }
    }
    let _ = stop.send(true);
    drop(senders);

    let mut delivered = template;
    let mut last_event = None;
    for result in join(tasks).await {
        delivered.merge(&result.recorder);
        last_event = last_event.max(result.last_event);
    }
    run.recorder.merge_errors(&delivered);
    let events = delivered.succeeded();
    if events < expected {
        run.recorder.error_kind(
            format!("watch: events not delivered within {DRAIN_TIMEOUT:?} after the last put"),
            expected - events,
        );
    }
    if events == 0 && expected > 0 {
        run.failure = Some("no watch event was delivered".into());
    }
    let window = last_event.map_or(Duration::ZERO, |last| {
        last.saturating_duration_since(started)
    });
    let per_second = if window.is_zero() {
        0.0
    } else {
        events as f64 / window.as_secs_f64()
    };
    let latency = delivered.latency();
    let before_ack = delivery.before_ack.load(Ordering::Relaxed);
    run.extra("watchers", watchers);
    run.extra("streams", streams);
    run.extra("events_expected", expected);
    run.extra("events_delivered", events);
    run.extra("events_per_second", per_second);
    run.extra("events_before_ack", before_ack);
    run.extra("delivery_latency_ms", latency_json(&latency));
    run.note("Watchers", format!("{watchers} on {streams} streams"));
    run.note(
        "Events",
        format!(
            "{events} of {expected} delivered in {:.3} s ({per_second:.1} events/s)",
            window.as_secs_f64()
        ),
    );
    run.note("Delivery", latency_text(&latency));
    run.note(
        "",
        format!(
            "(from put acknowledgement to delivery; {before_ack} events arrived before \
             their put's acknowledgement and count as 0)"
        ),
    );
    Ok(run)
}

/// Receives one stream's responses until told to stop or the stream ends.
async fn receive(
    mut responses: Streaming<WatchResponse>,
    acks: Arc<Acks>,
    delivery: Arc<Delivery>,
    mut stop: watch::Receiver<bool>,
    mut recorder: Recorder,
) -> StreamResult {
    let mut last_event = None;
    loop {
        let message = tokio::select! {
            biased;
            _ = stop.changed() => break,
            message = responses.message() => message,
        };
        let response = match message {
            Ok(Some(response)) => response,
            Ok(None) => {
                recorder.error_kind("watch: stream closed by the server".into(), 1);
                break;
            }
            Err(status) => {
                recorder.error_kind(OpError::Rpc(status).kind(), 1);
                break;
            }
        };
        let now = Instant::now();
        if response.created {
            delivery.created.fetch_add(1, Ordering::Relaxed);
        }
        if response.canceled {
            delivery.canceled.fetch_add(1, Ordering::Relaxed);
            recorder.error_kind(
                format!("watch: canceled by the server: {}", response.cancel_reason),
                1,
            );
        }
        if response.events.is_empty() {
            continue;
        }
        for event in &response.events {
            let revision = event.kv.as_ref().map_or(0, |kv| kv.mod_revision);
            match acks.get(revision) {
                Some(acked) => recorder.success(now.saturating_duration_since(acked), None),
                None => {
                    // The put's acknowledgement has not been seen yet: latency < 0.
                    delivery.before_ack.fetch_add(1, Ordering::Relaxed);
                    recorder.success(Duration::ZERO, None);
                }
            }
        }
        delivery
            .events
            .fetch_add(response.events.len() as u64, Ordering::Relaxed);
        last_event = Some(now);
    }
    StreamResult {
        recorder,
        last_event,
    }
}

/// The results of the stream tasks (a task that panicked is logged and left out).
async fn join(tasks: Vec<JoinHandle<StreamResult>>) -> Vec<StreamResult> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        match task.await {
            Ok(result) => results.push(result),
            Err(error) => tracing::error!(%error, "a watch stream task failed"),
        }
    }
    results
}
