//! `quantykube bench`: a load generator for any etcd v3 API endpoint (QuantyKube's or
//! etcd's), in the spirit of etcd's own `benchmark` tool.
//!
//! `quantykube bench <workload> [flags]` runs one workload (`put`, `range`, `txn-cas`,
//! `mixed`, `watch`, `lease-keepalive`) with `--clients` concurrent clients over
//! `--conns` gRPC connections, for `--total` operations or a `--duration`, closed loop
//! or open loop at a `--rate`, and reports throughput, latency percentiles and errors by
//! kind, as text or as one JSON object (`--output json`). See `docs/bench-tool.md`.
//!
//! The parts, each owning one thing:
//! - [`cli`]: the flags and their checks;
//! - [`conn`]: connections and leader discovery;
//! - [`driver`]: closed and open loop scheduling, stop conditions, progress bar;
//! - [`recorder`]: latency histograms and error counts;
//! - [`report`]: the text and JSON report;
//! - [`keys`]: the key space and the shared value;
//! - [`workloads`]: one file per workload, each saying what one operation is.
//!
//! This module wires them together: it parses, starts a multi-thread tokio runtime,
//! runs the workload, prints the report on stdout and chooses the exit code (0: the run
//! worked, even if some requests failed; 1: the workload could not run, e.g. the server
//! does not implement its RPC, or no operation succeeded; 2: bad flags). It talks to
//! the server only through the generated etcd API clients, and must never panic on
//! anything a server or a user sends: every failure is counted or reported.
//!
//! Endpoints, dialing, TLS and `--user` are the client library's ([`crate::client`]),
//! shared with `quantykube admin` and `snapshot save`.

mod cli;
mod conn;
mod context;
mod driver;
mod error;
mod keys;
mod recorder;
mod report;
mod timeline;
mod workloads;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use serde_json::{Map, Value};
use tracing_subscriber::EnvFilter;

use self::cli::{BenchCli, Output, WorkloadArgs, DEFAULT_TOTAL, DEFAULT_WATCH_TOTAL};
use self::conn::Connections;
use self::context::Context;
use self::driver::{Interrupt, Plan, Stop};
use self::error::BenchError;
use self::keys::KeySpace;
use self::report::Report;
use self::workloads::WorkloadRun;

/// Runs `quantykube bench` with `args` (the words after `bench`) and returns the
/// process exit code.
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let argv = std::iter::once(OsString::from("quantykube bench")).chain(args);
    let cli = match BenchCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return exit_code(error.exit_code());
        }
    };
    if let Err(message) = cli.validate() {
        return usage_error(message);
    }
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("{}", BenchError::Runtime(error));
            return ExitCode::FAILURE;
        }
    };
    let output = cli.global.output;
    let result = runtime.block_on(run(cli));
    // Streams the server keeps open must not hold the process.
    runtime.shutdown_background();
    match result {
        Ok((report, failure)) => {
            let text = match output {
                Output::Json => report.to_json(),
                Output::Text => report.to_text(),
            };
            print(&text);
            match failure {
                Some(message) => {
                    tracing::error!("{message}");
                    ExitCode::FAILURE
                }
                None => ExitCode::SUCCESS,
            }
        }
        Err(error) => match error.usage() {
            Some(message) => usage_error(message.to_owned()),
            None => {
                tracing::error!("{error}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Runs the workload; returns the report and, if the run did not work, why.
async fn run(cli: BenchCli) -> Result<(Report, Option<String>), BenchError> {
    let interrupt = Interrupt::default();
    watch_ctrl_c(interrupt.clone());
    let args = cli.global.clone();
    let default_total = match cli.workload {
        WorkloadArgs::Watch(_) => DEFAULT_WATCH_TOTAL,
        _ => DEFAULT_TOTAL,
    };
    let stop = match (args.total, args.duration) {
        (_, Some(duration)) => Stop::Duration(duration.0),
        (Some(total), None) => Stop::Total(total),
        (None, None) => Stop::Total(default_total),
    };
    let plan = Plan {
        stop,
        rate: args.rate,
        progress: true,
        timeline: args.timeline.map(|interval| interval.0),
    };
    let ctx = Context {
        conns: Connections::open(&args).await?,
        keys: KeySpace::new(args.key_space_size, args.key_size, args.sequential_keys),
        value: keys::value(args.val_size),
        plan,
        interrupt,
        args,
    };
    let workload = cli.workload.name();
    let outcome = match &cli.workload {
        WorkloadArgs::Put(a) => workloads::put::run(&ctx, a).await?,
        WorkloadArgs::Range(a) => workloads::range::run(&ctx, a).await?,
        WorkloadArgs::TxnCas(a) => workloads::txn_cas::run(&ctx, a).await?,
        WorkloadArgs::Mixed(a) => workloads::mixed::run(&ctx, a).await?,
        WorkloadArgs::Watch(a) => workloads::watch::run(&ctx, a).await?,
        WorkloadArgs::LeaseKeepalive(a) => workloads::lease_keepalive::run(&ctx, a).await?,
    };
    let report = build_report(&cli, &ctx, workload, &outcome);
    let failure = if let Some(fatal) = &outcome.fatal {
        Some(format!(
            "{workload}: the server does not implement what this workload needs ({fatal})"
        ))
    } else if let Some(failure) = &outcome.failure {
        Some(format!("{workload}: {failure}"))
    } else if report.succeeded == 0 {
        Some(format!(
            "{workload}: no operation succeeded ({} errors); see the errors in the report",
            report.errors_total
        ))
    } else {
        None
    };
    Ok((report, failure))
}

fn build_report(
    cli: &BenchCli,
    ctx: &Context,
    workload: &'static str,
    run: &WorkloadRun,
) -> Report {
    let recorder = &run.recorder;
    let succeeded = recorder.succeeded();
    let failed = recorder.failed();
    let errors_total = recorder.errors_total();
    let seconds = run.elapsed.as_secs_f64();
    let mut extras = run.extras.clone();
    let mut notes = run.notes.clone();
    if let Some(lag) = recorder.send_lag_summary() {
        extras.insert("send_lag_ms".into(), report::latency_json(&lag));
        notes.insert(
            0,
            (
                "Send lag".into(),
                format!(
                    "{} (after the scheduled instant; included in the latency)",
                    report::latency_text(&lag)
                ),
            ),
        );
    }
    if ctx.plan.timeline.is_some() {
        extras.insert(
            "latency_distribution".into(),
            serde_json::to_value(recorder.latency_distribution()).unwrap_or(Value::Null),
        );
    }
    if let Some(leader) = ctx.conns.leader() {
        extras.insert("leader_endpoint".into(), Value::from(leader));
        notes.insert(0, ("Leader".into(), leader.to_owned()));
    }
    if ctx.interrupt.is_triggered() {
        extras.insert("interrupted".into(), Value::from(true));
        notes.insert(
            0,
            ("Interrupted".into(), "by Ctrl-C, before the end".into()),
        );
    }
    Report {
        workload,
        endpoints: ctx.conns.endpoints().to_vec(),
        clients: ctx.args.clients,
        conns: ctx.args.conns,
        mode: run.mode.unwrap_or_else(|| ctx.plan.mode()),
        operations: succeeded + failed,
        succeeded,
        errors_total,
        errors: recorder.errors().clone(),
        duration_seconds: seconds,
        throughput: if seconds > 0.0 {
            succeeded as f64 / seconds
        } else {
            0.0
        },
        latency_ms: recorder.latency(),
        params: params(cli),
        extras,
        notes,
    }
}

/// Every flag, global and the workload's, as one JSON object.
fn params(cli: &BenchCli) -> Value {
    let mut params = Map::new();
    for value in [
        serde_json::to_value(&cli.global),
        serde_json::to_value(&cli.workload),
    ]
    .into_iter()
    .flatten()
    {
        match value {
            // The workload enum serialises as {"<name>": {flags}}.
            Value::Object(object) => {
                for (key, value) in object {
                    match value {
                        Value::Object(inner) if key == cli.workload.name() => params.extend(inner),
                        other => {
                            params.insert(key, other);
                        }
                    }
                }
            }
            other => tracing::debug!(%other, "unexpected flags encoding"),
        }
    }
    Value::Object(params)
}

/// On Ctrl-C the run stops starting operations and reports; a second Ctrl-C quits.
fn watch_ctrl_c(interrupt: Interrupt) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::warn!(
                "interrupted: finishing the operations in flight (Ctrl-C again to quit)"
            );
            interrupt.trigger();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
}

/// Diagnostics go to stderr through tracing (`QUANTYKUBE_LOG` filters, default `warn`).
fn init_tracing() {
    let filter =
        EnvFilter::try_from_env("QUANTYKUBE_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
}

fn usage_error(message: String) -> ExitCode {
    let error = BenchCli::command().error(ErrorKind::ValueValidation, message);
    let _ = error.print();
    exit_code(error.exit_code())
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
}
