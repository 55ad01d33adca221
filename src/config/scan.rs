//! Where values come from: the command line, read with Go's `flag`-package syntax
//! (`-name x`, `-name=x`, `--name x`, `--name=x`), and the `ETCD_*` environment
//! variables merged in under it. Every value becomes a [`Setting`] that names its
//! origin, so that an error says which flag or variable to fix.
//!
//! This module owns argument syntax and precedence. It never interprets a value beyond
//! a boolean flag's syntax (the [`values`](super::values) parsers do), and must never
//! read the process environment itself (the caller's lookup function is all it sees),
//! log or exit: help and version are reported in [`Scan`], warnings go to the caller's
//! list.

use std::collections::{BTreeMap, HashSet};

use super::error::ConfigError;
use super::flags::{lookup, EtcdFlag, Kind, Treatment, FLAGS};
use super::setting::{env_key, Setting};
use super::values::{parse_go_bool, SYNTAX_ERROR};

/// The command line, as Go's flag package reads it.
#[derive(Default)]
pub(super) struct Scan {
    /// For clap: implemented flags as `--name=value`, and whatever is not an etcd flag.
    pub(super) forwarded: Vec<String>,
    pub(super) help: bool,
    pub(super) version: bool,
    /// Non-implemented etcd flags from the command line, in order.
    pub(super) others: Vec<(&'static EtcdFlag, String)>,
}

/// Reads arguments as Go's flag package does (`flag.FlagSet.Parse`): one or two dashes,
/// `=value` or the next argument as the value (even if it starts with a dash), boolean
/// flags never take the next argument, `--` or the first non-flag ends the flags.
pub(super) fn scan(args: &[String]) -> Result<Scan, ConfigError> {
    let mut scan = Scan::default();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if arg == "--" {
            scan.forwarded.push(arg.clone());
            scan.forwarded.extend(args[i..].iter().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix('-').filter(|b| !b.is_empty()) else {
            // Not a flag: Go stops here; clap reports the stray words.
            scan.forwarded.push("--".into());
            scan.forwarded.extend(args[i - 1..].iter().cloned());
            break;
        };
        let body = body.strip_prefix('-').unwrap_or(body);
        if body.is_empty() || body.starts_with(['-', '=']) {
            return Err(ConfigError::Syntax(format!("bad flag syntax: {arg}")));
        }
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (body, None),
        };
        if name == "h" || name == "help" {
            scan.help = true;
            return Ok(scan);
        }
        let Some(flag) = lookup(name) else {
            // Not an etcd flag: clap names it and suggests a near match. Stop, as Go
            // does, since the next argument may be this flag's value.
            let dashes = if name.chars().count() == 1 { "-" } else { "--" };
            scan.forwarded.push(format!("{dashes}{body}"));
            break;
        };
        let value = match (flag.kind, inline) {
            (Kind::Bool, inline) => {
                let value = inline.unwrap_or_else(|| "true".into());
                if parse_go_bool(&value).is_none() {
                    return Err(Setting::flag(flag.name, value).invalid(SYNTAX_ERROR));
                }
                value
            }
            (_, Some(value)) => value,
            (_, None) => {
                let value = args
                    .get(i)
                    .ok_or_else(|| ConfigError::Syntax(format!("flag needs an argument: {arg}")))?;
                i += 1;
                value.clone()
            }
        };
        match flag.treatment {
            Treatment::Implemented if flag.name == "version" => {
                scan.version = parse_go_bool(&value) == Some(true);
            }
            // Go's flag package calls the gates' `Set` once per occurrence, and each adds
            // to the gates already set.
            Treatment::Implemented if flag.name == "feature-gates" => {
                let prefix = "--feature-gates=";
                match scan.forwarded.iter_mut().find(|f| f.starts_with(prefix)) {
                    Some(earlier) => {
                        earlier.push(',');
                        earlier.push_str(&value);
                    }
                    None => scan.forwarded.push(format!("{prefix}{value}")),
                }
            }
            // `=` keeps clap from reading a value that starts with '-' as a flag.
            Treatment::Implemented => scan.forwarded.push(format!("--{}={value}", flag.name)),
            _ => {
                // The last setting wins, as in Go; warn about it once.
                scan.others.retain(|(f, _)| f.name != flag.name);
                scan.others.push((flag, value));
            }
        }
    }
    Ok(scan)
}

/// The explicitly set etcd flags, from the command line and the environment.
pub(super) struct Settings {
    /// Implemented flags, by name.
    pub(super) implemented: BTreeMap<&'static str, Setting>,
    /// Unimplemented and tuning flags, command line first (in order), then environment.
    pub(super) others: Vec<(&'static EtcdFlag, Setting)>,
}

/// Merges the `ETCD_*` variables that `env` returns into the command line's flags
/// (`implemented`, by name, as clap read them, and the scanned `others`); an empty
/// variable counts as unset, as in etcd. A command-line flag wins over its variable,
/// with a warning.
pub(super) fn merge(
    implemented: impl IntoIterator<Item = (&'static str, Option<String>)>,
    others: Vec<(&'static EtcdFlag, String)>,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Settings {
    let mut settings: BTreeMap<&'static str, Setting> = BTreeMap::new();
    for (name, value) in implemented {
        if let Some(value) = value {
            settings.insert(name, Setting::flag(name, value));
        }
    }
    let on_command_line: HashSet<&str> = settings
        .keys()
        .copied()
        .chain(others.iter().map(|(f, _)| f.name))
        .collect();
    let mut others: Vec<(&'static EtcdFlag, Setting)> = others
        .into_iter()
        .map(|(flag, value)| (flag, Setting::flag(flag.name, value)))
        .collect();
    for flag in FLAGS {
        let key = env_key(flag.name);
        let Some(value) = env(&key).filter(|v| !v.is_empty()) else {
            continue;
        };
        if flag.name == "version" {
            // etcd ignores ETCD_VERSION too: images and scripts set it to name a release,
            // and read as --version it would stop the server.
            warnings.push(format!(
                "cannot set special environment variable {key}={value}: ignored"
            ));
        } else if on_command_line.contains(flag.name) {
            warnings.push(format!(
                "environment variable {key} is shadowed by the command-line flag --{} \
                 (etcd refuses to start when both are set)",
                flag.name
            ));
        } else if flag.treatment == Treatment::Implemented {
            settings.insert(flag.name, Setting::env(flag.name, value));
        } else {
            others.push((flag, Setting::env(flag.name, value)));
        }
    }
    Settings {
        implemented: settings,
        others,
    }
}
