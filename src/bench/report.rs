//! The report of a run: the same facts as a text summary for people or as one JSON
//! object for scripts.
//!
//! The JSON shape is fixed (scripts depend on it; fields may be added, never renamed):
//! `workload`, `endpoints`, `clients`, `conns`, `mode`, `operations` (finished, failed
//! ones included), `succeeded`, `errors_total` and `errors` (count per kind: failed
//! operations, and errors outside any operation such as a watch stream that broke),
//! `duration_seconds`, `throughput` (successful operations per second), `latency_ms`
//! (`mean`, `p50`, `p90`, `p99`, `p99_9`, `max`, of successful operations) and `params`
//! (every flag), plus each workload's extras at the top level. This module owns that
//! shape and the text layout; it must never compute a measurement.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Map, Value};

use super::recorder::LatencySummary;

/// Everything a run reports.
#[derive(Debug, Serialize)]
pub struct Report {
    pub workload: &'static str,
    pub endpoints: Vec<String>,
    pub clients: usize,
    pub conns: usize,
    pub mode: &'static str,
    pub operations: u64,
    pub succeeded: u64,
    pub errors_total: u64,
    pub errors: BTreeMap<String, u64>,
    pub duration_seconds: f64,
    pub throughput: f64,
    pub latency_ms: LatencySummary,
    pub params: Value,
    /// Workload-specific fields, at the top level of the JSON object.
    #[serde(flatten)]
    pub extras: Map<String, Value>,
    /// Workload-specific lines of the text summary, as (label, text).
    #[serde(skip)]
    pub notes: Vec<(String, String)>,
}

impl Report {
    /// The JSON object, on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|error| {
            // Only non-string map keys or a failing Serialize impl can get here.
            format!("{{\"error\":\"cannot encode the report: {error}\"}}")
        })
    }

    /// The text summary.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut line = |label: &str, text: &str| {
            let _ = writeln!(out, "{label:<14}{text}");
        };
        line(
            "Workload",
            &format!(
                "{} ({}), {} client{} on {} connection{}",
                self.workload,
                self.mode.replace('-', " "),
                self.clients,
                plural(self.clients as u64),
                self.conns,
                plural(self.conns as u64)
            ),
        );
        line("Endpoints", &self.endpoints.join(", "));
        line(
            "Operations",
            &format!(
                "{} ({} succeeded, {} failed) in {:.3} s",
                self.operations,
                self.succeeded,
                self.operations.saturating_sub(self.succeeded),
                self.duration_seconds
            ),
        );
        line("Throughput", &format!("{:.1} ops/s", self.throughput));
        line("Latency", &latency_text(&self.latency_ms));
        for (label, text) in &self.notes {
            line(label, text);
        }
        if self.errors.is_empty() {
            line("Errors", "none");
        } else {
            line("Errors", &format!("{} in all", self.errors_total));
            for (kind, count) in &self.errors {
                let _ = writeln!(out, "  {count:>10}  {kind}");
            }
        }
        out
    }
}

/// `mean 1.234 ms, p50 ..., max ...` of a latency summary.
pub fn latency_text(l: &LatencySummary) -> String {
    format!(
        "mean {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3} (ms)",
        l.mean, l.p50, l.p90, l.p99, l.p99_9, l.max
    )
}

/// A latency summary as a JSON value (for extras).
pub fn latency_json(l: &LatencySummary) -> Value {
    serde_json::to_value(l).unwrap_or(Value::Null)
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let mut extras = Map::new();
        extras.insert("conflicts".into(), Value::from(3));
        Report {
            workload: "txn-cas",
            endpoints: vec!["http://127.0.0.1:2379".into()],
            clients: 100,
            conns: 10,
            mode: "closed-loop",
            operations: 10,
            succeeded: 9,
            errors_total: 1,
            errors: BTreeMap::from([("Unavailable: etcdserver: leader changed".into(), 1)]),
            duration_seconds: 1.5,
            throughput: 6.0,
            latency_ms: LatencySummary::default(),
            params: serde_json::json!({"total": 10}),
            extras,
            notes: vec![("Conflicts".into(), "3".into())],
        }
    }

    #[test]
    fn json_has_the_fixed_shape() {
        let json: Value = serde_json::from_str(&report().to_json()).unwrap();
        for field in [
            "workload",
            "endpoints",
            "clients",
            "conns",
            "operations",
            "errors_total",
            "errors",
            "duration_seconds",
            "throughput",
            "latency_ms",
            "params",
            "conflicts",
        ] {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
        for key in ["mean", "p50", "p90", "p99", "p99_9", "max"] {
            assert!(json["latency_ms"].get(key).is_some(), "latency_ms.{key}");
        }
        assert_eq!(json["errors"]["Unavailable: etcdserver: leader changed"], 1);
    }

    #[test]
    fn text_lists_errors_by_kind() {
        let text = report().to_text();
        assert!(
            text.contains("Unavailable: etcdserver: leader changed"),
            "{text}"
        );
        assert!(text.contains("Conflicts"), "{text}");
    }
}
