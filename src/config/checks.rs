//! The corruption-check flags and etcd 3.6's `--feature-gates`, read as etcd reads them
//! (server/etcdmain/config.go, server/features, k8s component-base `featuregate.Set`):
//! `--experimental-initial-corrupt-check` or the `InitialCorruptCheck` gate,
//! `--corrupt-check-time` (old name `--experimental-corrupt-check-time`), and every gate
//! etcd 3.6 knows (an unknown one is refused, with etcd's error).
//!
//! This module owns these values' parsing and validation only; what the checks do is
//! `crate::corruption`. It never logs: warnings go to the caller's list.

use std::collections::BTreeMap;
use std::time::Duration;

use super::scan::Setting;
use super::values::{parse_go_bool, parse_go_duration, SYNTAX_ERROR};
use super::ConfigError;

/// etcd 3.6's server feature gates (server/features/etcd_features.go), and
/// component-base's two built-in ones.
const KNOWN_GATES: &[&str] = &[
    "AllAlpha",
    "AllBeta",
    "StopGRPCServiceOnDefrag",
    "TxnModeWriteWithSharedBuffer",
    "InitialCorruptCheck",
    "CompactHashCheck",
    "LeaseCheckpoint",
    "LeaseCheckpointPersist",
    "SetMemberLocalAddr",
];

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

/// `featuregate.Set`: `Key=bool` pairs separated by commas, empty items skipped, the
/// last setting of a key winning; an unknown key is refused.
pub(super) fn parse_feature_gates(value: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for item in value.split(',') {
        if item.is_empty() {
            continue;
        }
        let mut parts = item.splitn(2, '=');
        let key = parts.next().unwrap_or_default().trim();
        let Some(raw) = parts.next() else {
            return Err(format!("missing bool value for {key}"));
        };
        let raw = raw.trim();
        let enabled = parse_go_bool(raw).ok_or_else(|| {
            format!("invalid value of {key}={raw}, err: strconv.ParseBool: parsing {raw:?}: invalid syntax")
        })?;
        gates.insert(key.to_string(), enabled);
    }
    if let Some(unknown) = gates.keys().find(|k| !KNOWN_GATES.contains(&k.as_str())) {
        return Err(format!("unrecognized feature gate: {unknown}"));
    }
    Ok(gates)
}

/// Reads the checks' flags; warns of the deprecated names and of gates QuantyKube
/// ignores.
pub(super) fn corruption_checks(
    settings: &BTreeMap<&'static str, Setting>,
    warnings: &mut Vec<String>,
) -> Result<CorruptionChecks, ConfigError> {
    let gates = match settings.get("feature-gates") {
        None => BTreeMap::new(),
        Some(setting) => parse_feature_gates(&setting.value).map_err(|r| setting.invalid(r))?,
    };
    // etcd 3.6 refuses an experimental flag together with the gate that replaces it.
    for (flag, gate) in [
        (INITIAL_CHECK_FLAG, INITIAL_CHECK_GATE),
        (COMPACT_HASH_FLAG, COMPACT_HASH_GATE),
    ] {
        if let (Some(setting), Some(enabled)) = (settings.get(flag), gates.get(gate)) {
            let given =
                parse_go_bool(&setting.value).ok_or_else(|| setting.invalid(SYNTAX_ERROR))?;
            return Err(ConfigError::Invalid(format!(
                "cannot specify both flags: --{flag}={given} and --feature-gates={gate}={enabled} \
                 at the same time, please just use --feature-gates={gate}={enabled}"
            )));
        }
    }
    for (gate, enabled) in &gates {
        match gate.as_str() {
            INITIAL_CHECK_GATE | COMPACT_HASH_GATE => {}
            _ => warnings.push(format!(
                "--feature-gates {gate}={enabled} is accepted for etcd compatibility but \
                 ignored: it only toggles lease checkpoints (always on in QuantyKube) or \
                 etcd's internal tuning"
            )),
        }
    }
    let gated =
        |flag: &'static str, gate: &str, warnings: &mut Vec<String>| match settings.get(flag) {
            Some(setting) => {
                warnings.push(format!(
                    "--{flag} is deprecated in v3.6 and will be decommissioned in v3.7. \
                     Use '--feature-gates={gate}=true' instead."
                ));
                parse_go_bool(&setting.value).ok_or_else(|| setting.invalid(SYNTAX_ERROR))
            }
            None => Ok(gates.get(gate).copied().unwrap_or(false)),
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
    let initial = gated(INITIAL_CHECK_FLAG, INITIAL_CHECK_GATE, warnings)?;
    // etcd runs no periodic check unless the period is positive.
    let period = period_nanos(
        "experimental-corrupt-check-time",
        "corrupt-check-time",
        warnings,
    )?
    .map_or(Duration::ZERO, |(nanos, _)| from_nanos(nanos));
    let compact_hash_on = gated(COMPACT_HASH_FLAG, COMPACT_HASH_GATE, warnings)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_parse_as_component_base_does() {
        let gates = parse_feature_gates("InitialCorruptCheck=true,,LeaseCheckpoint = F").unwrap();
        assert_eq!(gates.get("InitialCorruptCheck"), Some(&true));
        assert_eq!(gates.get("LeaseCheckpoint"), Some(&false));
        assert_eq!(
            parse_feature_gates("Nope=true").unwrap_err(),
            "unrecognized feature gate: Nope"
        );
        assert_eq!(
            parse_feature_gates("InitialCorruptCheck").unwrap_err(),
            "missing bool value for InitialCorruptCheck"
        );
        assert_eq!(
            parse_feature_gates("InitialCorruptCheck=yes").unwrap_err(),
            "invalid value of InitialCorruptCheck=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
    }
}
