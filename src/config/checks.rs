//! The corruption-check flags, read as etcd 3.6 reads them (server/etcdmain/config.go):
//! the `InitialCorruptCheck` and `CompactHashCheck` gates (or their old flags,
//! `--experimental-initial-corrupt-check` and `--experimental-compact-hash-check-enabled`,
//! which `gates` folds in), `--corrupt-check-time` and `--compact-hash-check-time` (old
//! names `--experimental-corrupt-check-time`, `--experimental-compact-hash-check-time`).
//!
//! This module owns these values' validation only; what the checks do is
//! the `corruption` module's. It never logs: warnings go to the caller's list.

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ConfigError;
use super::gates::{FeatureGates, Gate};
use super::setting::Setting;
use super::values::parse_go_duration;

const INITIAL_CHECK_GATE: &str = "InitialCorruptCheck";
const INITIAL_CHECK_FLAG: &str = "experimental-initial-corrupt-check";
const COMPACT_HASH_GATE: &str = "CompactHashCheck";
const COMPACT_HASH_FLAG: &str = "experimental-compact-hash-check-enabled";

/// What the corruption checks are configured to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct CorruptionChecks {
    pub(super) initial: bool,
    /// Zero: no periodic check (etcd's default).
    pub(super) period: Duration,
    /// The compaction-hash check's period, when it is on.
    pub(super) compact_hash: Option<Duration>,
}

/// etcd's default `--compact-hash-check-time`.
const DEFAULT_COMPACT_HASH_PERIOD: Duration = Duration::from_secs(60);

/// Reads the checks' flags and gates; warns of the deprecated names.
pub(super) fn corruption_checks(
    settings: &BTreeMap<&'static str, Setting>,
    gates: &FeatureGates,
    warnings: &mut Vec<String>,
) -> Result<CorruptionChecks, ConfigError> {
    // The gates already carry the experimental flags' values (config/gates.rs); only
    // etcd's deprecation warnings are left to give.
    let gated = |flag: &'static str, gate: &str, warnings: &mut Vec<String>| {
        if settings.contains_key(flag) {
            warnings.push(format!(
                "--{flag} is deprecated in v3.6 and will be decommissioned in v3.7. \
                 Use '--feature-gates={gate}=true' instead."
            ));
        }
    };
    // A period under its etcd 3.6 name or its deprecated experimental one, in nanoseconds.
    let period_nanos = |old: &'static str, new: &'static str, warnings: &mut Vec<String>| {
        let setting = match settings.get(old) {
            Some(setting) => {
                warnings.push(format!(
                    "--{old} is deprecated in v3.6 and will be decommissioned in v3.7. \
                     Use '--{new}' instead."
                ));
                Some(setting)
            }
            None => settings.get(new),
        };
        setting
            .map(|s| {
                parse_go_duration(&s.value)
                    .map(|nanos| (nanos, s.value.clone()))
                    .map_err(|r| s.invalid(r))
            })
            .transpose()
    };
    let from_nanos = |nanos: i128| Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    gated(INITIAL_CHECK_FLAG, INITIAL_CHECK_GATE, warnings);
    let initial = gates.enabled(Gate::InitialCorruptCheck);
    // etcd runs no periodic check unless the period is positive.
    let period = period_nanos(
        "experimental-corrupt-check-time",
        "corrupt-check-time",
        warnings,
    )?
    .map_or(Duration::ZERO, |(nanos, _)| from_nanos(nanos));
    gated(COMPACT_HASH_FLAG, COMPACT_HASH_GATE, warnings);
    let compact_hash_on = gates.enabled(Gate::CompactHashCheck);
    let hash_period = match period_nanos(
        "experimental-compact-hash-check-time",
        "compact-hash-check-time",
        warnings,
    )? {
        None => DEFAULT_COMPACT_HASH_PERIOD,
        // etcd 3.6's `Validate`.
        Some((nanos, given)) if compact_hash_on && nanos <= 0 => {
            return Err(ConfigError::Invalid(format!(
                "--compact-hash-check-time must be >0 (set to {given})"
            )))
        }
        Some((nanos, _)) => from_nanos(nanos),
    };
    Ok(CorruptionChecks {
        initial,
        period,
        compact_hash: compact_hash_on.then_some(hash_period),
    })
}
