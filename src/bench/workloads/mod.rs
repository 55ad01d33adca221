//! The workloads, one per file (as mini-redis has one command per file). Each file says
//! what one operation of its workload is (an [`Op`](super::driver::Op)), builds one
//! client per `--clients`, does its own setup and teardown (watch streams, leases),
//! hands the clients to the driver, and adds its own extras to the report.
//!
//! A workload must never schedule operations itself (the driver does) nor print (the
//! report does); it turns every failure into a counted error, never a panic.

pub mod lease_keepalive;
pub mod mixed;
pub mod put;
pub mod range;
pub mod txn_cas;
pub mod watch;

use std::time::Duration;

use serde_json::{Map, Value};

use super::driver::Driven;
use super::recorder::Recorder;

/// What a workload hands back for the report.
pub struct WorkloadRun {
    /// The measured operations.
    pub recorder: Recorder,
    /// How long the measured operations ran.
    pub elapsed: Duration,
    /// The fatal error that stopped the run (the server does not implement the RPC).
    pub fatal: Option<String>,
    /// Why the run did not work although no error was fatal.
    pub failure: Option<String>,
    /// The mode, if not the plan's (watch's writers run at their own rate).
    pub mode: Option<&'static str>,
    /// Fields added to the JSON report.
    pub extras: Map<String, Value>,
    /// Lines added to the text report, as (label, text).
    pub notes: Vec<(String, String)>,
}

impl WorkloadRun {
    /// The report of a driven run, without extras yet.
    pub fn from_driven<O>(driven: Driven<O>) -> (WorkloadRun, Vec<O>) {
        let mut run = WorkloadRun {
            recorder: driven.recorder,
            elapsed: driven.elapsed,
            fatal: driven.fatal,
            failure: None,
            mode: None,
            extras: Map::new(),
            notes: Vec::new(),
        };
        if let Some(windows) = driven.timeline {
            run.extra(
                "timeline",
                serde_json::to_value(windows).unwrap_or(Value::Null),
            );
        }
        (run, driven.ops)
    }

    /// A run that stopped before any operation: what setup met.
    pub fn not_run(recorder: Recorder, fatal: Option<String>, failure: Option<String>) -> Self {
        WorkloadRun {
            recorder,
            elapsed: Duration::ZERO,
            fatal,
            failure,
            mode: None,
            extras: Map::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a JSON field.
    pub fn extra(&mut self, key: &str, value: impl Into<Value>) {
        self.extras.insert(key.to_owned(), value.into());
    }

    /// Adds a line to the text report.
    pub fn note(&mut self, label: &str, text: impl Into<String>) {
        self.notes.push((label.to_owned(), text.into()));
    }
}
