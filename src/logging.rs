//! The member's logs, written as etcd 3.5+ writes them with zap: `--log-format json`
//! (etcd's default) gives one JSON object a line with zap's keys in zap's order
//! (`level`, `ts`, `caller`, `msg`, then the event's fields, spelled with `-` as
//! etcd's are: `local-member-id`), `--log-format console` gives zap's console lines
//! (time, level, caller and message separated by tabs, then the fields as JSON), and
//! `--log-outputs` sends them to stderr, stdout and files (appended to, as zap does).
//!
//! This module owns the subscriber: formatting, outputs and the level filter
//! (`QUANTYKUBE_LOG`, an `EnvFilter` directive, overrides `--log-level`). It never
//! decides what is logged, and it adds nothing to an event: what must stay secret is
//! kept out of events where they are made.

use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogLevel, LogOutput, LogSettings};

/// Why the logs could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// zap's words: `couldn't open sink "x": open x: permission denied`.
    #[error("couldn't open sink {path:?}: open {}: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error("cannot install the log subscriber: {0}")]
    Install(String),
}

/// Installs the process-wide subscriber for `settings`. Call once, before anything logs.
pub fn init(settings: &LogSettings) -> Result<(), LoggingError> {
    let outputs = Outputs::open(&settings.outputs)?;
    // etcd's panic and fatal levels log only errors before dying; tracing stops at error.
    let level = match settings.level {
        LogLevel::Panic | LogLevel::Fatal => "error",
        other => other.as_str(),
    };
    let filter = EnvFilter::try_from_env("QUANTYKUBE_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},openraft=warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(outputs)
        .fmt_fields(JsonFields)
        .event_format(EtcdFormat {
            format: settings.format,
        })
        .finish()
        .try_init()
        .map_err(|e| LoggingError::Install(e.to_string()))
}

// ---------------------------------------------------------------------------------
// Outputs.

enum Sink {
    Stderr,
    Stdout,
    File(Mutex<File>),
}

/// Every `--log-outputs` destination; each formatted line goes to all of them.
#[derive(Clone)]
pub struct Outputs {
    sinks: Arc<Vec<Sink>>,
}

impl Outputs {
    /// Opens the files now, so that a path that cannot be written stops startup.
    pub fn open(outputs: &[LogOutput]) -> Result<Outputs, LoggingError> {
        let sinks = outputs
            .iter()
            .map(|output| match output {
                LogOutput::Stderr => Ok(Sink::Stderr),
                LogOutput::Stdout => Ok(Sink::Stdout),
                LogOutput::File(path) => open_append(path).map(|f| Sink::File(Mutex::new(f))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Outputs {
            sinks: Arc::new(sinks),
        })
    }
}

fn open_append(path: &Path) -> Result<File, LoggingError> {
    File::options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| LoggingError::Open {
            path: path.to_path_buf(),
            reason: match error.kind() {
                io::ErrorKind::NotFound => "no such file or directory".into(),
                io::ErrorKind::PermissionDenied => "permission denied".into(),
                io::ErrorKind::IsADirectory => "is a directory".into(),
                _ => error.to_string(),
            },
        })
}

/// A writer for one event: the formatted line, written whole to every sink.
pub struct OutputsWriter {
    sinks: Arc<Vec<Sink>>,
}

impl Write for OutputsWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A sink that fails (a full disk) must not keep the others from their lines.
        for sink in self.sinks.iter() {
            let _ = match sink {
                Sink::Stderr => io::stderr().lock().write_all(buf),
                Sink::Stdout => io::stdout().lock().write_all(buf),
                Sink::File(file) => match file.lock() {
                    Ok(mut file) => file.write_all(buf),
                    Err(poisoned) => poisoned.into_inner().write_all(buf),
                },
            };
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        for sink in self.sinks.iter() {
            let _ = match sink {
                Sink::Stderr => io::stderr().flush(),
                Sink::Stdout => io::stdout().flush(),
                Sink::File(_) => Ok(()),
            };
        }
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Outputs {
    type Writer = OutputsWriter;

    fn make_writer(&'a self) -> OutputsWriter {
        OutputsWriter {
            sinks: self.sinks.clone(),
        }
    }
}

// ---------------------------------------------------------------------------------
// Fields.

/// An event's or span's fields as JSON values, in the order they were recorded; the
/// `message` field apart.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    values: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name == "message" {
            self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
            return;
        }
        // Events from the `log` crate carry where they came from as fields.
        if name.starts_with("log.") {
            return;
        }
        let key = name.trim_start_matches("r#").replace('_', "-");
        self.values.retain(|(k, _)| *k != key);
        self.values.push((key, value));
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

/// Stores a span's fields as a JSON object, so that its events can carry them.
pub struct JsonFields;

impl<'w> FormatFields<'w> for JsonFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        let mut collected = Fields::default();
        fields.record(&mut collected);
        if let Some(message) = collected.message.take() {
            collected
                .values
                .push(("msg".into(), Value::String(message)));
        }
        let object: serde_json::Map<String, Value> = collected.values.into_iter().collect();
        write!(writer, "{}", Value::Object(object))
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut collected = Fields::default();
        fields.record(&mut collected);
        let mut object = match serde_json::from_str::<Value>(&current.fields) {
            Ok(Value::Object(object)) => object,
            _ => serde_json::Map::new(),
        };
        object.extend(collected.values);
        current.fields = Value::Object(object).to_string();
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Lines.

/// zap's encoders with etcd's configuration (client/pkg/logutil `DefaultZapLoggerConfig`).
struct EtcdFormat {
    format: LogFormat,
}

impl<S> FormatEvent<S, JsonFields> for EtcdFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        // The spans' fields, outermost first, under the event's own.
        let mut all: Vec<(String, Value)> = Vec::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(stored) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(&stored.fields) {
                    for (k, v) in object {
                        all.retain(|(key, _)| *key != k);
                        all.push((k, v));
                    }
                }
            }
        }
        all.retain(|(k, _)| !fields.values.iter().any(|(key, _)| key == k));
        all.extend(fields.values);
        let line = Line {
            level: zap_level(*event.metadata().level()),
            ts: timestamp(),
            caller: caller(event.metadata().file(), event.metadata().line()),
            msg: fields.message.unwrap_or_default(),
            fields: all,
        };
        let text = match self.format {
            LogFormat::Json => line.json(),
            LogFormat::Console => line.console(),
        };
        writeln!(writer, "{text}")
    }
}

/// One log line's parts.
struct Line {
    level: &'static str,
    ts: String,
    caller: Option<String>,
    msg: String,
    fields: Vec<(String, Value)>,
}

fn json_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

impl Line {
    /// zap's JSON encoder: level, ts, caller, msg, then the fields.
    fn json(&self) -> String {
        let mut out = String::with_capacity(128);
        let _ = write!(
            out,
            "{{\"level\":{},\"ts\":{}",
            json_string(self.level),
            json_string(&self.ts)
        );
        if let Some(caller) = &self.caller {
            let _ = write!(out, ",\"caller\":{}", json_string(caller));
        }
        let _ = write!(out, ",\"msg\":{}", json_string(&self.msg));
        for (key, value) in &self.fields {
            let _ = write!(out, ",{}:{}", json_string(key), value);
        }
        out.push('}');
        out
    }

    /// zap's console encoder: tab-separated, the fields as spaced JSON at the end.
    fn console(&self) -> String {
        let mut out = format!("{}\t{}", self.ts, self.level);
        if let Some(caller) = &self.caller {
            out.push('\t');
            out.push_str(caller);
        }
        out.push('\t');
        out.push_str(&self.msg);
        if !self.fields.is_empty() {
            let parts: Vec<String> = self
                .fields
                .iter()
                .map(|(k, v)| format!("{}: {v}", json_string(k)))
                .collect();
            let _ = write!(out, "\t{{{}}}", parts.join(", "));
        }
        out
    }
}

/// zap's `LowercaseLevelEncoder`; zap has no trace level.
fn zap_level(level: Level) -> &'static str {
    match level {
        Level::TRACE | Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warn",
        Level::ERROR => "error",
    }
}

/// zap's `ShortCallerEncoder`: the file's last directory and name, and the line.
fn caller(file: Option<&str>, line: Option<u32>) -> Option<String> {
    let file = file?;
    let mut parts = file.rsplit(['/', '\\']);
    let name = parts.next()?;
    let short = match parts.next() {
        Some(dir) => format!("{dir}/{name}"),
        None => name.to_string(),
    };
    Some(match line {
        Some(line) => format!("{short}:{line}"),
        None => short,
    })
}

/// etcd's time format, `2006-01-02T15:04:05.000000Z0700`, in UTC.
fn timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(fields: Vec<(&str, Value)>) -> Line {
        Line {
            level: "warn",
            ts: "2026-12-02T01:53:44.447550Z".into(),
            caller: Some("etcdserver/server.go:42".into()),
            msg: "say \"hi\"".into(),
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    #[test]
    fn json_lines_are_zaps() {
        let text = line(vec![
            ("local-member-id", Value::from("8e9e05c52164694d")),
            ("took", Value::from(3)),
        ])
        .json();
        assert_eq!(
            text,
            r#"{"level":"warn","ts":"2026-12-02T01:53:44.447550Z","caller":"etcdserver/server.go:42","msg":"say \"hi\"","local-member-id":"8e9e05c52164694d","took":3}"#
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["msg"], "say \"hi\"");
    }

    #[test]
    fn console_lines_are_zaps() {
        assert_eq!(
            line(vec![("a", Value::from("x")), ("b", Value::Bool(true))]).console(),
            "2026-12-02T01:53:44.447550Z\twarn\tetcdserver/server.go:42\tsay \"hi\"\t{\"a\": \"x\", \"b\": true}"
        );
        assert_eq!(
            line(vec![]).console(),
            "2026-12-02T01:53:44.447550Z\twarn\tetcdserver/server.go:42\tsay \"hi\""
        );
    }

    #[test]
    fn callers_are_short() {
        assert_eq!(
            caller(Some("src/config/checks.rs"), Some(7)).as_deref(),
            Some("config/checks.rs:7")
        );
        assert_eq!(
            caller(Some("main.rs"), Some(1)).as_deref(),
            Some("main.rs:1")
        );
        assert_eq!(caller(None, Some(1)), None);
    }

    #[test]
    fn timestamps_have_microseconds_and_a_zone() {
        let ts = timestamp();
        assert_eq!(ts.len(), "2026-12-02T01:53:44.447550Z".len(), "{ts}");
        assert!(ts.ends_with('Z'));
    }
}
