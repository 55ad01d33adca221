//! etcd's `--feature-gates` (server/features/etcd_features.go and pkg/featuregate): the
//! gates etcd 3.6 knows (and the two 3.7 adds), their defaults and maturity,
//! component-base's `AllAlpha` and `AllBeta`, the `Key=bool,...` syntax with etcd's
//! errors, the six `--experimental-*` booleans that 3.6 turned into gates (and its
//! refusal when a gate and its old flag are both given), and what each gate means for
//! QuantyKube.
//!
//! This module owns reading the gates. What a gate switches on lives where the feature
//! does (the `corruption` module for the checks, `transport` for the peer local address).
//! It never logs: warnings go to the caller's list.

use std::collections::BTreeMap;

use super::error::ConfigError;
use super::setting::Setting;
use super::values::{parse_go_bool, SYNTAX_ERROR};

/// A gate's maturity, as component-base's `prerelease`; `AllAlpha` and `AllBeta` set
/// every gate of theirs that is not set explicitly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Maturity {
    Alpha,
    Beta,
}

/// A server feature gate QuantyKube knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    StopGrpcServiceOnDefrag,
    TxnModeWriteWithSharedBuffer,
    InitialCorruptCheck,
    CompactHashCheck,
    LeaseCheckpoint,
    LeaseCheckpointPersist,
    SetMemberLocalAddr,
    /// etcd 3.7.
    FastLeaseKeepAlive,
    /// etcd 3.7.
    PriorityRequest,
}

/// What QuantyKube does with a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Meaning {
    /// Acted on: the gate switches the feature on or off.
    Acted,
    /// QuantyKube always behaves as with this value; the other value is accepted,
    /// ignored and warned about, and the text says why.
    Always(bool, &'static str),
    /// Only tunes etcd's internals: either value is accepted with a warning.
    Tuning(&'static str),
}

struct GateSpec {
    gate: Gate,
    name: &'static str,
    default: bool,
    maturity: Maturity,
    /// The 3.5 flag this gate replaces in 3.6 (`ExperimentalFlagToFeatureMap`).
    experimental_flag: Option<&'static str>,
    meaning: Meaning,
}

const fn spec(
    gate: Gate,
    name: &'static str,
    default: bool,
    maturity: Maturity,
    experimental_flag: Option<&'static str>,
    meaning: Meaning,
) -> GateSpec {
    GateSpec {
        gate,
        name,
        default,
        maturity,
        experimental_flag,
        meaning,
    }
}

const LEASES: &str = "QuantyKube always checkpoints lease TTLs through the log";

static GATES: &[GateSpec] = &[
    spec(
        Gate::StopGrpcServiceOnDefrag,
        "StopGRPCServiceOnDefrag",
        false,
        Maturity::Alpha,
        Some("experimental-stop-grpc-service-on-defrag"),
        Meaning::Always(
            false,
            "Defragment never stops a QuantyKube member from serving (RocksDB reclaims \
             space in the background)",
        ),
    ),
    spec(
        Gate::TxnModeWriteWithSharedBuffer,
        "TxnModeWriteWithSharedBuffer",
        true,
        Maturity::Beta,
        Some("experimental-txn-mode-write-with-shared-buffer"),
        Meaning::Tuning("it only tunes how etcd's bbolt backend buffers reads in writes"),
    ),
    spec(
        Gate::InitialCorruptCheck,
        "InitialCorruptCheck",
        false,
        Maturity::Alpha,
        Some("experimental-initial-corrupt-check"),
        Meaning::Acted,
    ),
    spec(
        Gate::CompactHashCheck,
        "CompactHashCheck",
        false,
        Maturity::Alpha,
        Some("experimental-compact-hash-check-enabled"),
        Meaning::Acted,
    ),
    spec(
        Gate::LeaseCheckpoint,
        "LeaseCheckpoint",
        false,
        Maturity::Alpha,
        Some("experimental-enable-lease-checkpoint"),
        Meaning::Always(true, LEASES),
    ),
    spec(
        Gate::LeaseCheckpointPersist,
        "LeaseCheckpointPersist",
        false,
        Maturity::Alpha,
        Some("experimental-enable-lease-checkpoint-persist"),
        Meaning::Always(true, LEASES),
    ),
    spec(
        Gate::SetMemberLocalAddr,
        "SetMemberLocalAddr",
        false,
        Maturity::Alpha,
        None,
        Meaning::Acted,
    ),
    spec(
        Gate::FastLeaseKeepAlive,
        "FastLeaseKeepAlive",
        true,
        Maturity::Beta,
        None,
        Meaning::Tuning(
            "QuantyKube's leader answers a keepalive without waiting for its applied index",
        ),
    ),
    spec(
        Gate::PriorityRequest,
        "PriorityRequest",
        false,
        Maturity::Alpha,
        None,
        Meaning::Tuning("it only orders etcd's internal request queue under overload"),
    ),
];

const ALL_ALPHA: &str = "AllAlpha";
const ALL_BETA: &str = "AllBeta";

/// The gates' values once `--feature-gates` and the old experimental flags are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    enabled: BTreeMap<Gate, bool>,
    /// `AllAlpha` and `AllBeta` as set (component-base keeps them as gates too).
    all_alpha: bool,
    all_beta: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            enabled: GATES.iter().map(|s| (s.gate, s.default)).collect(),
            all_alpha: false,
            all_beta: false,
        }
    }
}

/// One gate as etcd's `etcd_server_feature_enabled` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateState {
    pub name: &'static str,
    /// component-base's prerelease: `ALPHA` or `BETA`.
    pub stage: &'static str,
    pub enabled: bool,
}

impl Maturity {
    fn stage(self) -> &'static str {
        match self {
            Maturity::Alpha => "ALPHA",
            Maturity::Beta => "BETA",
        }
    }
}

impl FeatureGates {
    /// Whether the gate is on (etcd's default unless it was set).
    pub fn enabled(&self, gate: Gate) -> bool {
        self.enabled.get(&gate).copied().unwrap_or(false)
    }

    /// Every gate etcd's feature gate knows, `AllAlpha` and `AllBeta` included, with
    /// its stage and value (what `addFeatureGateMetrics` exports).
    pub fn each(&self) -> Vec<GateState> {
        let all = [
            (ALL_ALPHA, Maturity::Alpha, self.all_alpha),
            (ALL_BETA, Maturity::Beta, self.all_beta),
        ];
        all.into_iter()
            .chain(
                GATES
                    .iter()
                    .map(|s| (s.name, s.maturity, self.enabled(s.gate))),
            )
            .map(|(name, maturity, enabled)| GateState {
                name,
                stage: maturity.stage(),
                enabled,
            })
            .collect()
    }

    /// Every gate as `Name=bool`, sorted, as etcd's `featureGate.String()` shows them.
    pub fn describe(&self) -> String {
        let mut pairs: Vec<String> = GATES
            .iter()
            .map(|s| format!("{}={}", s.name, self.enabled(s.gate)))
            .collect();
        pairs.sort();
        pairs.join(",")
    }
}

/// The gates set so far, as component-base keeps them: the names set explicitly (or by
/// `AllAlpha`/`AllBeta`) and their values.
struct SetGates {
    set: BTreeMap<&'static str, bool>,
}

impl SetGates {
    fn enabled(&self, spec: &GateSpec) -> bool {
        self.set.get(spec.name).copied().unwrap_or(spec.default)
    }

    /// component-base's `String()`: every set gate as `k=v`, sorted, `,`-joined.
    fn rendered(&self) -> String {
        let pairs: Vec<String> = self.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join(",")
    }
}

/// `featuregate.Set`: `Key=bool` pairs separated by commas, empty items skipped, spaces
/// around keys and values trimmed, the last setting of a key winning; an unknown key is
/// refused once every pair has parsed.
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
    if let Some(unknown) = gates.keys().find(|k| gate_name(k).is_none()) {
        return Err(format!("unrecognized feature gate: {unknown}"));
    }
    Ok(gates)
}

/// The static spelling of a known gate name (or `AllAlpha`/`AllBeta`).
fn gate_name(name: &str) -> Option<&'static str> {
    [ALL_ALPHA, ALL_BETA]
        .into_iter()
        .chain(GATES.iter().map(|s| s.name))
        .find(|n| *n == name)
}

/// Where the gates' settings came from: what etcd checks for a gate named together with
/// its old flag is the gate flag's rendered state on the command line, but the file's
/// text as written in a config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GateSource {
    CommandLine,
    ConfigFile,
}

/// Reads `--feature-gates` and the experimental booleans (from `lookup`, which finds a
/// flag's setting whatever its treatment), with etcd 3.6's checks; warns of the gates
/// QuantyKube ignores.
pub(super) fn resolve(
    lookup: &dyn Fn(&str) -> Option<Setting>,
    source: GateSource,
    warnings: &mut Vec<String>,
) -> Result<FeatureGates, ConfigError> {
    let given = lookup("feature-gates");
    let explicit = match &given {
        None => BTreeMap::new(),
        Some(setting) => parse_feature_gates(&setting.value).map_err(|r| setting.invalid(r))?,
    };
    let mut state = SetGates {
        set: BTreeMap::new(),
    };
    for (name, enabled) in &explicit {
        if let Some(name) = gate_name(name) {
            state.set.insert(name, *enabled);
        }
    }
    for (all, maturity) in [(ALL_ALPHA, Maturity::Alpha), (ALL_BETA, Maturity::Beta)] {
        if let Some(&enabled) = explicit.get(all) {
            for spec in GATES.iter().filter(|s| s.maturity == maturity) {
                state.set.entry(spec.name).or_insert(enabled);
            }
        }
    }
    let gate_text = match (source, &given) {
        (GateSource::ConfigFile, Some(setting)) => setting.value.clone(),
        (GateSource::ConfigFile, None) => String::new(),
        (GateSource::CommandLine, _) => state.rendered(),
    };

    // `SetFeatureGatesFromExperimentalFlags`: etcd looks for the gate's name anywhere in
    // that text, so that `LeaseCheckpointPersist` also counts as `LeaseCheckpoint`.
    let mut from_flags = Vec::new();
    for spec in GATES {
        let Some(flag) = spec.experimental_flag else {
            continue;
        };
        let Some(setting) = lookup(flag) else {
            continue;
        };
        let value = parse_go_bool(&setting.value).ok_or_else(|| setting.invalid(SYNTAX_ERROR))?;
        if gate_text.contains(spec.name) {
            let gate = state.enabled(spec);
            return Err(ConfigError::Invalid(format!(
                "cannot specify both flags: --{flag}={value} and --feature-gates={name}={gate} \
                 at the same time, please just use --feature-gates={name}={gate}",
                name = spec.name
            )));
        }
        from_flags.push((spec.name, value));
    }
    let flag_set: Vec<&str> = from_flags.iter().map(|(name, _)| *name).collect();
    for (name, value) in from_flags {
        state.set.insert(name, value);
    }

    for spec in GATES {
        let Some(&value) = state.set.get(spec.name) else {
            continue;
        };
        // An experimental flag's own warning (flags::check_other) already says it.
        if flag_set.contains(&spec.name) {
            continue;
        }
        let why = match spec.meaning {
            Meaning::Acted => continue,
            Meaning::Always(ours, _) if ours == value => continue,
            Meaning::Always(_, why) | Meaning::Tuning(why) => why,
        };
        warnings.push(format!(
            "feature gate {}={value} is accepted for etcd compatibility but ignored: {why}",
            spec.name
        ));
    }
    let gates = FeatureGates {
        enabled: GATES.iter().map(|s| (s.gate, state.enabled(s))).collect(),
        all_alpha: explicit.get(ALL_ALPHA).copied().unwrap_or(false),
        all_beta: explicit.get(ALL_BETA).copied().unwrap_or(false),
    };
    let checkpoint = gates.enabled(Gate::LeaseCheckpoint);
    let persist = gates.enabled(Gate::LeaseCheckpointPersist);
    if persist && !checkpoint {
        return Err(ConfigError::Invalid(
            "enabling feature gate LeaseCheckpointPersist requires enabling feature gate \
             LeaseCheckpoint"
                .into(),
        ));
    }
    if checkpoint && !persist {
        warnings.push(
            "Detected that checkpointing is enabled without persistence. Consider enabling \
             feature gate LeaseCheckpointPersist"
                .into(),
        );
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_of(pairs: &[(&'static str, &str)]) -> impl Fn(&str) -> Option<Setting> {
        let pairs: Vec<(&'static str, String)> =
            pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(k, v)| Setting::flag(k, v.clone()))
        }
    }

    fn gates(pairs: &[(&'static str, &str)]) -> Result<(FeatureGates, Vec<String>), String> {
        let mut warnings = Vec::new();
        resolve(&lookup_of(pairs), GateSource::CommandLine, &mut warnings)
            .map(|g| (g, warnings))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_gate_shows_with_its_stage_as_etcds_metric_does() {
        let (g, _) = gates(&[("feature-gates", "AllBeta=true,InitialCorruptCheck=true")]).unwrap();
        let each = g.each();
        assert_eq!(each.len(), GATES.len() + 2);
        let find = |name: &str| *each.iter().find(|s| s.name == name).unwrap();
        assert_eq!(
            find("AllAlpha"),
            GateState {
                name: "AllAlpha",
                stage: "ALPHA",
                enabled: false
            }
        );
        assert_eq!(
            find("AllBeta"),
            GateState {
                name: "AllBeta",
                stage: "BETA",
                enabled: true
            }
        );
        assert!(find("InitialCorruptCheck").enabled);
        assert_eq!(find("InitialCorruptCheck").stage, "ALPHA");
        assert!(find("TxnModeWriteWithSharedBuffer").enabled);
        assert!(!find("CompactHashCheck").enabled);
    }

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
        // A bad value is reported before an unknown name, as Set parses every pair first.
        assert!(parse_feature_gates("Nope=true,InitialCorruptCheck=x")
            .unwrap_err()
            .starts_with("invalid value of InitialCorruptCheck=x"));
    }

    #[test]
    fn defaults_are_etcds() {
        let (gates, warnings) = gates(&[]).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            gates.describe(),
            "CompactHashCheck=false,FastLeaseKeepAlive=true,InitialCorruptCheck=false,\
             LeaseCheckpoint=false,LeaseCheckpointPersist=false,PriorityRequest=false,\
             SetMemberLocalAddr=false,StopGRPCServiceOnDefrag=false,\
             TxnModeWriteWithSharedBuffer=true"
        );
    }

    #[test]
    fn all_alpha_sets_the_alpha_gates_not_given() {
        let (g, _) = gates(&[(
            "feature-gates",
            "AllAlpha=true,InitialCorruptCheck=false,LeaseCheckpoint=true",
        )])
        .unwrap();
        assert!(!g.enabled(Gate::InitialCorruptCheck));
        assert!(g.enabled(Gate::CompactHashCheck));
        assert!(g.enabled(Gate::LeaseCheckpointPersist));
        assert!(g.enabled(Gate::SetMemberLocalAddr));
        // Beta gates keep their defaults.
        assert!(g.enabled(Gate::TxnModeWriteWithSharedBuffer));
        let (g, _) = gates(&[("feature-gates", "AllBeta=false")]).unwrap();
        assert!(!g.enabled(Gate::TxnModeWriteWithSharedBuffer));
        assert!(!g.enabled(Gate::FastLeaseKeepAlive));
    }

    #[test]
    fn experimental_flags_feed_their_gates_and_clash_with_them() {
        let (g, _) = gates(&[("experimental-initial-corrupt-check", "true")]).unwrap();
        assert!(g.enabled(Gate::InitialCorruptCheck));
        assert_eq!(
            gates(&[
                ("experimental-compact-hash-check-enabled", "true"),
                ("feature-gates", "CompactHashCheck=false"),
            ])
            .unwrap_err(),
            "cannot specify both flags: --experimental-compact-hash-check-enabled=true and \
             --feature-gates=CompactHashCheck=false at the same time, please just use \
             --feature-gates=CompactHashCheck=false"
        );
        // etcd matches the gate's name as a substring of the gates' text.
        assert_eq!(
            gates(&[
                ("experimental-enable-lease-checkpoint", "true"),
                ("feature-gates", "LeaseCheckpointPersist=true"),
            ])
            .unwrap_err(),
            "cannot specify both flags: --experimental-enable-lease-checkpoint=true and \
             --feature-gates=LeaseCheckpoint=false at the same time, please just use \
             --feature-gates=LeaseCheckpoint=false"
        );
        // On the command line, AllAlpha names every alpha gate it set.
        assert!(gates(&[
            ("experimental-initial-corrupt-check", "true"),
            ("feature-gates", "AllAlpha=true"),
        ])
        .unwrap_err()
        .contains("--feature-gates=InitialCorruptCheck=true"));
    }

    #[test]
    fn a_config_file_is_checked_against_its_text() {
        let lookup = lookup_of(&[
            ("experimental-initial-corrupt-check", "true"),
            ("feature-gates", "AllAlpha=true"),
        ]);
        let g = resolve(&lookup, GateSource::ConfigFile, &mut Vec::new()).unwrap();
        assert!(g.enabled(Gate::InitialCorruptCheck));
    }

    #[test]
    fn lease_checkpoint_gates_are_checked_together() {
        assert_eq!(
            gates(&[("feature-gates", "LeaseCheckpointPersist=true")]).unwrap_err(),
            "enabling feature gate LeaseCheckpointPersist requires enabling feature gate \
             LeaseCheckpoint"
        );
        let (_, warnings) = gates(&[("feature-gates", "LeaseCheckpoint=true")]).unwrap();
        assert_eq!(
            warnings,
            [
                "Detected that checkpointing is enabled without persistence. Consider enabling \
              feature gate LeaseCheckpointPersist"
            ]
        );
        let (_, warnings) = gates(&[(
            "feature-gates",
            "LeaseCheckpoint=true,LeaseCheckpointPersist=true",
        )])
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn ignored_gates_are_warned_about() {
        let (_, warnings) = gates(&[(
            "feature-gates",
            "StopGRPCServiceOnDefrag=true,TxnModeWriteWithSharedBuffer=false,\
             StopGRPCServiceOnDefrag=false",
        )])
        .unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("feature gate TxnModeWriteWithSharedBuffer=false"));
    }
}
