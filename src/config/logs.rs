//! etcd's logging flags: `--logger`, `--log-level`, `--log-format` and `--log-outputs`,
//! read and checked as etcd 3.6's `setupLogging` does, with its messages.
//!
//! This module only says what the logs should be; the `logging` module builds the
//! subscriber and opens the files. It never opens a file or logs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::error::ConfigError;
use super::setting::Setting;

/// `--log-level`, etcd's (zap's) levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
    Panic,
    Fatal,
}

impl LogLevel {
    /// The level as etcd spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Panic => "panic",
            LogLevel::Fatal => "fatal",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(super) fn parse_log_level(s: &str) -> Option<LogLevel> {
    // zap accepts each level in lower or upper case, and "" as info.
    Some(match s {
        "debug" | "DEBUG" => LogLevel::Debug,
        "info" | "INFO" | "" => LogLevel::Info,
        "warn" | "WARN" => LogLevel::Warn,
        "error" | "ERROR" => LogLevel::Error,
        "panic" | "PANIC" => LogLevel::Panic,
        "fatal" | "FATAL" => LogLevel::Fatal,
        _ => return None,
    })
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object a line with zap's keys (`level`, `ts`, `caller`, `msg`, fields):
    /// etcd 3.5+'s default.
    Json,
    /// zap's console encoder: tab-separated time, level, caller, message and the fields
    /// as JSON.
    Console,
}

/// One of `--log-outputs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogOutput {
    Stderr,
    Stdout,
    /// Appended to, created if missing.
    File(PathBuf),
}

/// What the logs are: their level, format and destinations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    pub level: LogLevel,
    pub format: LogFormat,
    /// Sorted and without duplicates, as zap merges them; never empty.
    pub outputs: Vec<LogOutput>,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: LogLevel::Info,
            format: LogFormat::Json,
            outputs: vec![LogOutput::Stderr],
        }
    }
}

const DEFAULT_OUTPUT: &str = "default";
const JOURNAL_OUTPUT: &str = "systemd/journal";

/// Reads the logging flags; `warnings` gets what etcd would do that QuantyKube does not.
pub(super) fn resolve(
    settings: &BTreeMap<&'static str, Setting>,
    warnings: &mut Vec<String>,
) -> Result<LogSettings, ConfigError> {
    let level = match settings.get("log-level") {
        None => LogLevel::Info,
        Some(s) => parse_log_level(&s.value)
            .ok_or_else(|| s.invalid("only supports debug, info, warn, error, panic, or fatal"))?,
    };
    match settings.get("logger").map(|s| s.value.as_str()) {
        None | Some("zap") => {}
        Some("capnslog") => {
            return Err(ConfigError::Invalid(
                "--logger=capnslog is removed in v3.5".into(),
            ))
        }
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "unknown logger option {other:?}"
            )))
        }
    }
    // etcd's `flags.UniqueStringsValue`: comma-separated, sorted, without duplicates.
    let mut names: Vec<String> = settings
        .get("log-outputs")
        .map(|s| {
            s.value
                .split(',')
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.dedup();
    if names.is_empty() {
        names.push(DEFAULT_OUTPUT.into());
    }
    if names.len() > 1 && names.iter().any(|n| n == DEFAULT_OUTPUT) {
        return Err(ConfigError::Invalid(format!(
            "multi logoutput for {DEFAULT_OUTPUT:?} is not supported yet"
        )));
    }
    if names.iter().any(|n| n == JOURNAL_OUTPUT) {
        if names.len() > 1 {
            let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
            return Err(ConfigError::Invalid(format!(
                "running with systemd/journal but other '--log-outputs' values ([{}]) are \
                 configured with 'default'; override 'default' value with something else",
                quoted.join(" ")
            )));
        }
        // etcd falls back to stderr itself when journald cannot be reached.
        warnings.push(
            "--log-outputs=systemd/journal: QuantyKube writes its logs to stderr, which \
             journald records for a systemd unit"
                .into(),
        );
    }
    let mut outputs: Vec<LogOutput> = names
        .iter()
        .map(|name| match name.as_str() {
            DEFAULT_OUTPUT | JOURNAL_OUTPUT | "stderr" => LogOutput::Stderr,
            "stdout" => LogOutput::Stdout,
            path => LogOutput::File(PathBuf::from(path)),
        })
        .collect();
    outputs.dedup();
    let format = match settings.get("log-format").map(|s| s.value.as_str()) {
        None | Some("" | "json") => LogFormat::Json,
        Some("console") => LogFormat::Console,
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "unknown log format: {other}, supported values json, console"
            )))
        }
    };
    Ok(LogSettings {
        level,
        format,
        outputs,
    })
}
