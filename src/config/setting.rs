//! One explicitly set value, still a string, and where it came from (a flag, an `ETCD_*`
//! variable or a config file key), so that every refusal names what to fix. Every part
//! of `config` that reads a value takes it as a [`Setting`]; this module only names
//! origins and never interprets a value.

use super::error::ConfigError;

/// etcd's `flags.FlagToEnv("ETCD", name)`.
pub(super) fn env_key(name: &str) -> String {
    format!("ETCD_{}", name.to_ascii_uppercase().replace('-', "_"))
}

/// Where a value came from, for messages.
#[derive(Clone, Copy, Debug)]
pub(super) enum Origin {
    Flag(&'static str),
    Env(&'static str),
    /// A `--config-file` key (its path from the top, e.g.
    /// `peer-transport-security.cert-file`) and the flag it sets.
    File {
        key: &'static str,
        flag: &'static str,
    },
}

impl Origin {
    /// As Go's flag package and etcd's env reader name it in "invalid value" errors.
    fn describe(self) -> String {
        match self {
            Origin::Flag(name) => format!("flag --{name}"),
            Origin::Env(name) => env_key(name),
            Origin::File { key, .. } => format!("config file key {key}"),
        }
    }

    /// As the warnings and refusals of non-implemented flags name it.
    pub(super) fn subject(self) -> String {
        match self {
            Origin::Flag(name) => format!("--{name}"),
            Origin::Env(name) => format!("{} (--{name})", env_key(name)),
            Origin::File { key, flag } => format!("config file key {key} (--{flag})"),
        }
    }
}

/// One explicitly set flag: its value, still a string, and where it came from.
#[derive(Clone, Debug)]
pub(super) struct Setting {
    pub(super) value: String,
    pub(super) origin: Origin,
}

impl Setting {
    pub(super) fn flag(name: &'static str, value: String) -> Self {
        Setting {
            value,
            origin: Origin::Flag(name),
        }
    }

    pub(super) fn env(name: &'static str, value: String) -> Self {
        Setting {
            value,
            origin: Origin::Env(name),
        }
    }

    pub(super) fn invalid(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            origin: self.origin.describe(),
            value: self.value.clone(),
            reason: reason.into(),
        }
    }
}
