//! `--auto-compaction-mode` and `--auto-compaction-retention`, read as etcd reads them:
//! the mode check of embed's `Config.Validate` and `parseCompactionRetention` (etcd
//! 3.6, server/embed/etcd.go), with etcd's messages; and QuantyKube's
//! `--auto-compaction-revision-interval`, the one interval etcd fixes in its code.
//!
//! This module owns what the flags mean. It never runs a compaction (the `compactor`
//! does) and, as all of `config`, never logs, reads the environment or exits: what etcd
//! would do silently but strangely becomes a warning for the caller.

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ConfigError;
use super::setting::Setting;
use super::values::parse_go_duration;

/// How often revision mode looks at the revision, as etcd's `revInterval`.
pub const DEFAULT_REVISION_COMPACTION_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// What the leader compacts, and when (the `compactor` module acts on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// `periodic`: keep `retention` of history (a Go duration, or a whole number of
    /// hours).
    Periodic { retention: Duration },
    /// `revision`: keep the newest `retention` revisions, looking every `interval`
    /// (etcd: always 5 minutes).
    Revision { retention: u64, interval: Duration },
}

const MODE: &str = "auto-compaction-mode";
const RETENTION: &str = "auto-compaction-retention";
const REVISION_INTERVAL: &str = "auto-compaction-revision-interval";

/// The auto-compaction the flags ask for; `None` when the retention is 0 (etcd's default,
/// which disables it).
pub(super) fn resolve(
    settings: &BTreeMap<&'static str, Setting>,
    warnings: &mut Vec<String>,
) -> Result<Option<AutoCompaction>, ConfigError> {
    let revision_mode = match settings.get(MODE).map(|s| s.value.as_str()) {
        None | Some("periodic") => false,
        Some("revision") => true,
        // etcd 3.6; 3.4 accepted an empty mode and then ignored an hour count.
        Some("") => {
            return Err(ConfigError::Invalid(
                "undefined auto-compaction-mode".into(),
            ))
        }
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "unknown auto-compaction-mode {other:?}"
            )))
        }
    };
    let interval = revision_interval(settings.get(REVISION_INTERVAL))?;
    let raw = settings.get(RETENTION).map_or("", |s| s.value.as_str());
    // etcd: an empty retention is "0".
    let raw = if raw.is_empty() { "0" } else { raw };
    let invalid = |why: &str| ConfigError::Invalid(format!("invalid {RETENTION} {raw:?}: {why}"));

    // As etcd: a non-negative whole number (Go's `strconv.Atoi`) counts hours or
    // revisions; anything else must be a Go duration.
    if let Some(count) = go_atoi(raw).filter(|n| *n >= 0) {
        let count = count.unsigned_abs();
        if count == 0 {
            return Ok(None);
        }
        if revision_mode {
            return Ok(Some(AutoCompaction::Revision {
                retention: count,
                interval,
            }));
        }
        // etcd multiplies without a check, so a huge count wraps around in Go.
        let hours = count
            .checked_mul(3600)
            .filter(|secs| *secs <= i64::MAX as u64 / 1_000_000_000)
            .ok_or_else(|| invalid("too many hours"))?;
        return Ok(Some(AutoCompaction::Periodic {
            retention: Duration::from_secs(hours),
        }));
    }
    let nanos = parse_go_duration(raw)
        .map_err(|e| ConfigError::Invalid(format!("error parsing CompactionRetention: {e}")))?;
    if nanos < 0 {
        // etcd starts and then compacts to its newest revision without pause.
        return Err(invalid("must not be negative"));
    }
    let nanos = u64::try_from(nanos).map_err(|_| invalid("out of range"))?;
    if nanos == 0 {
        return Ok(None);
    }
    if revision_mode {
        // etcd converts the duration to an integer: its nanoseconds become revisions.
        warnings.push(format!(
            "--{RETENTION}={raw} in revision mode keeps the newest {nanos} revisions, as etcd \
             reads a duration there; give a number of revisions instead"
        ));
        return Ok(Some(AutoCompaction::Revision {
            retention: nanos,
            interval,
        }));
    }
    if nanos < 10 {
        // etcd checks every retention/10, and divides by that interval: it panics.
        return Err(invalid("a periodic retention must be at least 10ns"));
    }
    Ok(Some(AutoCompaction::Periodic {
        retention: Duration::from_nanos(nanos),
    }))
}

/// `--auto-compaction-revision-interval`: a positive Go duration, 5 minutes by default.
fn revision_interval(setting: Option<&Setting>) -> Result<Duration, ConfigError> {
    let Some(setting) = setting else {
        return Ok(DEFAULT_REVISION_COMPACTION_INTERVAL);
    };
    let nanos = parse_go_duration(&setting.value).map_err(|e| setting.invalid(e))?;
    match u64::try_from(nanos) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos)),
        _ => Err(setting.invalid("must be a positive duration")),
    }
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits, within 64 bits.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_with(
        mode: Option<&str>,
        retention: Option<&str>,
    ) -> Result<Option<AutoCompaction>, String> {
        let mut settings = BTreeMap::new();
        if let Some(mode) = mode {
            settings.insert(MODE, Setting::flag(MODE, mode.into()));
        }
        if let Some(retention) = retention {
            settings.insert(RETENTION, Setting::flag(RETENTION, retention.into()));
        }
        resolve(&settings, &mut Vec::new()).map_err(|e| e.to_string())
    }

    fn periodic(retention: &str) -> Result<Option<AutoCompaction>, String> {
        resolve_with(None, Some(retention))
    }

    fn revision(retention: &str) -> Result<Option<AutoCompaction>, String> {
        resolve_with(Some("revision"), Some(retention))
    }

    fn every(secs: u64) -> Option<AutoCompaction> {
        Some(AutoCompaction::Periodic {
            retention: Duration::from_secs(secs),
        })
    }

    fn keep(revisions: u64) -> Option<AutoCompaction> {
        Some(AutoCompaction::Revision {
            retention: revisions,
            interval: DEFAULT_REVISION_COMPACTION_INTERVAL,
        })
    }

    #[test]
    fn unset_empty_and_zero_disable_it_in_both_modes() {
        assert_eq!(resolve_with(None, None), Ok(None));
        for value in ["", "0", "-0", "+0", "00", "0s", "0h"] {
            assert_eq!(periodic(value), Ok(None), "{value:?}");
            assert_eq!(revision(value), Ok(None), "{value:?}");
        }
    }

    #[test]
    fn periodic_retention_is_hours_or_a_go_duration() {
        assert_eq!(periodic("1"), Ok(every(3600)));
        assert_eq!(periodic("+1"), Ok(every(3600)));
        assert_eq!(periodic("01"), Ok(every(3600)));
        assert_eq!(periodic("72"), Ok(every(72 * 3600)));
        assert_eq!(periodic("5m"), Ok(every(300)));
        assert_eq!(periodic("2s"), Ok(every(2)));
        assert_eq!(periodic("1h30m"), Ok(every(5400)));
        assert_eq!(
            periodic("1.5s"),
            Ok(Some(AutoCompaction::Periodic {
                retention: Duration::from_millis(1500)
            }))
        );
        assert_eq!(resolve_with(Some("periodic"), Some("10m")), Ok(every(600)));
    }

    #[test]
    fn revision_retention_is_a_count_of_revisions() {
        assert_eq!(revision("1000"), Ok(keep(1000)));
        assert_eq!(revision("+5"), Ok(keep(5)));
        // etcd reads a duration too, as its nanoseconds: with a warning here.
        let mut settings = BTreeMap::new();
        settings.insert(MODE, Setting::flag(MODE, "revision".into()));
        settings.insert(RETENTION, Setting::flag(RETENTION, "5m".into()));
        let mut warnings = Vec::new();
        assert_eq!(
            resolve(&settings, &mut warnings).ok().flatten(),
            keep(300_000_000_000)
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn bad_retentions_get_etcds_errors() {
        let parse_error =
            |reason: &str| Err(format!("error parsing CompactionRetention: {reason}"));
        assert_eq!(
            periodic("garbage"),
            parse_error(r#"time: invalid duration "garbage""#)
        );
        assert_eq!(
            periodic("-1"),
            parse_error(r#"time: missing unit in duration "-1""#)
        );
        assert_eq!(
            periodic("1.5"),
            parse_error(r#"time: missing unit in duration "1.5""#)
        );
        assert_eq!(
            periodic("1x"),
            parse_error(r#"time: unknown unit "x" in duration "1x""#)
        );
        assert_eq!(
            periodic("0x10"),
            parse_error(r#"time: unknown unit "x" in duration "0x10""#)
        );
        assert_eq!(
            periodic("1_0"),
            parse_error(r#"time: unknown unit "_" in duration "1_0""#)
        );
        assert_eq!(
            periodic(" 1"),
            parse_error(r#"time: invalid duration " 1""#)
        );
        assert_eq!(
            revision("-5"),
            parse_error(r#"time: missing unit in duration "-5""#)
        );
    }

    #[test]
    fn what_etcd_would_misread_is_refused() {
        // etcd runs with these and compacts without pause, panics, or wraps around.
        assert_eq!(
            periodic("-1h"),
            Err(r#"invalid auto-compaction-retention "-1h": must not be negative"#.into())
        );
        assert!(revision("-1m")
            .unwrap_err()
            .contains("must not be negative"));
        assert!(periodic("9ns").unwrap_err().contains("at least 10ns"));
        assert!(periodic("10ns").is_ok());
        assert!(periodic("3000000").unwrap_err().contains("too many hours"));
        assert!(periodic("2562047").is_ok());
    }

    #[test]
    fn the_mode_is_checked_as_etcd_36_checks_it() {
        assert_eq!(
            resolve_with(Some("bogus"), Some("1")),
            Err(r#"unknown auto-compaction-mode "bogus""#.into())
        );
        assert_eq!(
            resolve_with(Some("Revision"), None),
            Err(r#"unknown auto-compaction-mode "Revision""#.into())
        );
        assert_eq!(
            resolve_with(Some(""), None),
            Err("undefined auto-compaction-mode".into())
        );
        // The mode is checked even while the retention disables compaction.
        assert!(resolve_with(Some("bogus"), Some("0")).is_err());
    }

    fn parsed(args: &[&str], env: &[(&str, &str)]) -> Result<super::super::Config, String> {
        let argv = std::iter::once("quantykube").chain(args.iter().copied());
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match super::super::parse(argv, &|k| env.get(k).cloned()) {
            Ok(super::super::Invocation::Run { config, .. }) => Ok(*config),
            Ok(other) => Err(format!("{other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn the_flags_reach_the_config_from_the_command_line_and_the_environment() {
        let config = parsed(&[], &[]).unwrap();
        assert_eq!(config.auto_compaction, None);
        assert!(!config.force_new_cluster);
        let config = parsed(
            &[
                "--auto-compaction-mode",
                "revision",
                "-auto-compaction-retention=1000",
                "--force-new-cluster",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(config.auto_compaction, keep(1000));
        assert!(config.force_new_cluster);
        let config = parsed(
            &[],
            &[
                ("ETCD_AUTO_COMPACTION_RETENTION", "2s"),
                ("ETCD_FORCE_NEW_CLUSTER", "true"),
            ],
        )
        .unwrap();
        assert_eq!(config.auto_compaction, every(2));
        assert!(config.force_new_cluster);
        // An empty variable is unset, as in etcd.
        let config = parsed(&[], &[("ETCD_AUTO_COMPACTION_MODE", "")]).unwrap();
        assert_eq!(config.auto_compaction, None);
        assert!(
            !parsed(&["--force-new-cluster=false"], &[])
                .unwrap()
                .force_new_cluster
        );
        assert!(parsed(&["--force-new-cluster=maybe"], &[])
            .unwrap_err()
            .contains("parse error"));
        assert_eq!(
            parsed(&["--auto-compaction-retention", "1x"], &[]).unwrap_err(),
            r#"error parsing CompactionRetention: time: unknown unit "x" in duration "1x""#
        );
    }

    #[test]
    fn the_revision_interval_is_a_positive_duration() {
        let with = |interval: &str| {
            let mut settings = BTreeMap::new();
            settings.insert(MODE, Setting::flag(MODE, "revision".into()));
            settings.insert(RETENTION, Setting::flag(RETENTION, "10".into()));
            settings.insert(
                REVISION_INTERVAL,
                Setting::flag(REVISION_INTERVAL, interval.into()),
            );
            resolve(&settings, &mut Vec::new()).map_err(|e| e.to_string())
        };
        assert_eq!(
            with("2s"),
            Ok(Some(AutoCompaction::Revision {
                retention: 10,
                interval: Duration::from_secs(2)
            }))
        );
        for bad in ["0", "-1s", "", "soon", "5"] {
            assert!(with(bad).is_err(), "{bad:?}");
        }
    }
}
