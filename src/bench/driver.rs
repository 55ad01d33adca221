//! Runs a workload's clients: how many operations, when each starts, and when to stop.
//!
//! Closed loop (no `--rate`): each client starts its next operation as soon as the
//! previous one is answered; latency runs from the send to the answer.
//!
//! Open loop (`--rate R`): operation `i` (numbered across all clients) is scheduled at
//! `start + i / R`. A pacer thread releases one permit per scheduled instant as it
//! passes (it sleeps with the OS's sub-millisecond timer, not tokio's 1 ms wheel, so
//! the bench adds no timer lag); whichever client is free takes the next permit and
//! number, sends, and measures latency from the scheduled instant, not from when it
//! actually sent. If the server (or too few clients) falls behind, the time an
//! operation waited for a free client is part of its latency: no coordinated omission.
//!
//! The run ends after `--total` operations, or once `--duration` has passed (no new
//! operation starts after it; the ones in flight finish and count), or when a client
//! meets a fatal error (the server does not implement the RPC), or on Ctrl-C.
//!
//! This module owns the scheduling and the stop conditions, and draws the progress
//! bar. It must never know what an operation does: workloads implement [`Op`].

use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::error::{BenchError, OpError};
use super::recorder::{Recorder, Tag};
use super::timeline::{Timeline, Window};

/// How often the progress bar is redrawn.
const PROGRESS_TICK: Duration = Duration::from_millis(100);
/// The pacer looks at the stop flags at least this often.
const PACER_MAX_SLEEP: Duration = Duration::from_millis(10);
/// The most permits the pacer releases in one step.
const MAX_PERMITS_AT_ONCE: u64 = 1 << 32;

/// One client of a workload: runs one operation at a time.
pub trait Op: Send + 'static {
    /// Runs operation number `seq` (numbered across all clients, from 0), returning an
    /// optional tag to count it under (e.g. `"conflict"`).
    fn run(&mut self, seq: u64) -> impl Future<Output = Result<Tag, OpError>> + Send;
}

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this many operations.
    Total(u64),
    /// No operation starts after this much time.
    Duration(Duration),
}

/// How a run is driven.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub stop: Stop,
    /// Open loop at this many operations per second, all clients together.
    pub rate: Option<f64>,
    /// Draw a progress bar on stderr (only if stderr is a terminal).
    pub progress: bool,
    /// Measure each window of this length apart (`--timeline`).
    pub timeline: Option<Duration>,
}

impl Plan {
    /// `"open-loop"` or `"closed-loop"`, as reported.
    pub fn mode(&self) -> &'static str {
        if self.rate.is_some() {
            "open-loop"
        } else {
            "closed-loop"
        }
    }
}

/// Set on Ctrl-C: the run stops starting operations and reports what it has.
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn trigger(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a run did.
pub struct Driven<O> {
    /// The merged measurements of all clients.
    pub recorder: Recorder,
    /// From the start of the run until the last operation finished.
    pub elapsed: Duration,
    /// The first fatal error met, which stopped the run.
    pub fatal: Option<String>,
    /// The clients, back from their tasks, for workloads that count more in them.
    pub ops: Vec<O>,
    /// The run window by window, if the plan asked for it.
    pub timeline: Option<Vec<Window>>,
}

/// State the clients share.
struct Shared {
    plan: Plan,
    start: Instant,
    next: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
    fatal: OnceLock<String>,
    interrupt: Interrupt,
    /// Open loop only.
    pacer: Option<Pacer>,
    timeline: Option<Timeline>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.interrupt.is_triggered()
    }

    /// The next operation number and the instant its latency counts from, or `None`
    /// when the run is over. In open loop, waits for the pacer's permit.
    async fn next(&self) -> Option<(u64, Instant)> {
        if self.stopping() {
            return None;
        }
        if let Some(pacer) = &self.pacer {
            // The pacer adds a permit per client when the run ends, so this returns.
            pacer.permits.acquire().await.ok()?.forget();
            if self.stopping() {
                return None;
            }
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let deadline = match self.plan.stop {
            Stop::Total(total) if seq >= total => return None,
            Stop::Total(_) => None,
            Stop::Duration(duration) => Some(self.start + duration),
        };
        let begin = match &self.pacer {
            None => Instant::now(),
            Some(pacer) => self.start + pacer.offset(seq),
        };
        if deadline.is_some_and(|d| begin >= d) {
            return None;
        }
        Some((seq, begin))
    }
}

/// Open loop: releases a permit at each scheduled instant.
struct Pacer {
    rate: f64,
    permits: Semaphore,
}

impl Pacer {
    /// When operation `seq` is scheduled, after the start.
    fn offset(&self, seq: u64) -> Duration {
        Duration::from_secs_f64(seq as f64 / self.rate)
    }

    /// Operations scheduled before the run ends: `--total`, or those scheduled before
    /// `--duration` has passed.
    fn limit(&self, stop: Stop) -> u64 {
        match stop {
            Stop::Total(total) => total,
            Stop::Duration(duration) => (duration.as_secs_f64() * self.rate).ceil() as u64,
        }
    }
}

/// The pacer thread: releases permits as their instants pass, then one per client so
/// that every waiting client sees the end.
fn pace(shared: Arc<Shared>, clients: usize) {
    let Some(pacer) = &shared.pacer else {
        return;
    };
    let start = shared.start.into_std();
    let limit = pacer.limit(shared.plan.stop);
    let mut released: u64 = 0;
    while released < limit && !shared.stopping() {
        let elapsed = start.elapsed();
        let due = ((elapsed.as_secs_f64() * pacer.rate).floor() as u64)
            .saturating_add(1)
            .min(limit);
        if due > released {
            // Bounded, as the semaphore's capacity is (2^61 permits).
            let add = (due - released).min(MAX_PERMITS_AT_ONCE);
            pacer.permits.add_permits(add as usize);
            released += add;
        }
        let next = pacer.offset(released);
        let wait = next.saturating_sub(start.elapsed()).min(PACER_MAX_SLEEP);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
    pacer.permits.add_permits(clients);
}

/// Runs `ops` (one task each) as `plan` says, and merges what they measured.
pub async fn drive<O: Op>(
    plan: Plan,
    ops: Vec<O>,
    label: &str,
    interrupt: &Interrupt,
) -> Result<Driven<O>, BenchError> {
    let mut merged = Recorder::new()?;
    let shared = Arc::new(Shared {
        plan,
        start: Instant::now(),
        next: AtomicU64::new(0),
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        fatal: OnceLock::new(),
        interrupt: interrupt.clone(),
        pacer: plan.rate.map(|rate| Pacer {
            rate,
            permits: Semaphore::new(0),
        }),
        timeline: plan.timeline.map(Timeline::new).transpose()?,
    });
    if shared.pacer.is_some() {
        let shared = shared.clone();
        let clients = ops.len();
        std::thread::Builder::new()
            .name("bench-pacer".into())
            .spawn(move || pace(shared, clients))?;
    }
    let mut tasks = JoinSet::new();
    for op in ops {
        let recorder = merged.clone();
        tasks.spawn(client(shared.clone(), op, recorder));
    }
    let progress = Progress::start(&shared, label);
    let mut ops = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((op, recorder)) => {
                merged.merge(&recorder);
                ops.push(op);
            }
            Err(error) => {
                tracing::error!(%error, "a bench client task failed");
                merged.error_kind(format!("bench client task failed: {error}"), 1);
            }
        }
    }
    let elapsed = shared.start.elapsed();
    // Ends the pacer thread, if it still runs (after an interrupt or a fatal error).
    shared.stop.store(true, Ordering::Relaxed);
    progress.finish();
    Ok(Driven {
        recorder: merged,
        elapsed,
        fatal: shared.fatal.get().cloned(),
        ops,
        timeline: shared.timeline.as_ref().map(|t| t.windows(elapsed)),
    })
}

/// One client's loop.
async fn client<O: Op>(shared: Arc<Shared>, mut op: O, mut recorder: Recorder) -> (O, Recorder) {
    let open_loop = shared.pacer.is_some();
    while let Some((seq, begin)) = shared.next().await {
        if open_loop {
            recorder.send_lag(begin.elapsed());
        }
        let outcome = op.run(seq).await;
        if let Some(timeline) = &shared.timeline {
            let latency = outcome.as_ref().ok().map(|_| begin.elapsed());
            timeline.record(shared.start.elapsed(), latency);
        }
        match outcome {
            Ok(tag) => recorder.success(begin.elapsed(), tag),
            Err(error) => {
                recorder.error(&error);
                if error.is_fatal() {
                    let _ = shared.fatal.set(error.kind());
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    (op, recorder)
}

/// The progress bar: redrawn from the shared counter by a ticker task, so that the
/// clients only bump an atomic.
struct Progress {
    bar: ProgressBar,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(shared: &Arc<Shared>, label: &str) -> Progress {
        if !shared.plan.progress || !std::io::stderr().is_terminal() {
            return Progress {
                bar: ProgressBar::hidden(),
                ticker: None,
            };
        }
        let (length, template) = match shared.plan.stop {
            Stop::Total(total) => (
                total,
                "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} ({msg}, eta {eta})",
            ),
            Stop::Duration(duration) => (
                u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                "{prefix} [{elapsed_precise}] {wide_bar} {msg}",
            ),
        };
        let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_prefix(label.to_owned());
        let ticker = {
            let bar = bar.clone();
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(PROGRESS_TICK);
                loop {
                    tick.tick().await;
                    let done = shared.done.load(Ordering::Relaxed);
                    let elapsed = shared.start.elapsed();
                    let per_second = done as f64 / elapsed.as_secs_f64().max(1e-3);
                    match shared.plan.stop {
                        Stop::Total(_) => {
                            bar.set_message(format!("{per_second:.0} ops/s"));
                            bar.set_position(done);
                        }
                        Stop::Duration(_) => {
                            bar.set_message(format!("{done} operations, {per_second:.0} ops/s"));
                            bar.set_position(
                                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                            );
                        }
                    }
                }
            })
        };
        Progress {
            bar,
            ticker: Some(ticker),
        }
    }

    fn finish(self) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
        }
        self.bar.finish_and_clear();
    }
}
