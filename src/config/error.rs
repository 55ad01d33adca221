//! Why the command line, the environment or the config file was refused, and the exit
//! status etcd uses for each. Every other part of `config` reports through this one type.

/// Why the command line or environment was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not an etcd flag, or a stray argument: clap's own error (print it, or `exit()` it).
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// Malformed flag syntax, as Go's flag package reports it.
    #[error("{0}")]
    Syntax(String),
    /// An etcd flag QuantyKube does not implement yet, set to a value that would matter.
    #[error("{}", unimplemented_message(.flag, .subject, *.only))]
    Unimplemented {
        flag: &'static str,
        /// Where it was set: `--flag`, `ETCD_FLAG (--flag)` or `config file key k (--flag)`.
        subject: String,
        /// The one value that is accepted, because QuantyKube behaves that way anyway.
        only: Option<&'static str>,
    },
    /// A config file that cannot be read or decoded, in etcd's words.
    #[error("{0}")]
    ConfigFile(String),
    /// A value that does not parse; `origin` is `flag --x` or `ETCD_X`.
    #[error("invalid value {value:?} for {origin}: {reason}")]
    InvalidValue {
        origin: String,
        value: String,
        reason: String,
    },
    /// A combination etcd refuses, with etcd's message.
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// The exit status etcd uses: 2 for command-line syntax (Go's flag package), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Usage(e) => e.exit_code(),
            ConfigError::Syntax(_) => 2,
            // Go's flag package exits with 2 for a value it cannot take; a variable or a
            // config file key that etcd reads later exits with 1.
            ConfigError::InvalidValue { origin, .. } if origin.starts_with("flag ") => 2,
            _ => 1,
        }
    }
}

fn unimplemented_message(flag: &str, subject: &str, only: Option<&str>) -> String {
    match only {
        Some(v) => format!(
            "{subject} is an etcd flag that QuantyKube does not implement yet \
             (only --{flag}={v}, which is what QuantyKube does, is accepted)"
        ),
        None => format!("{subject} is an etcd flag that QuantyKube does not implement yet"),
    }
}
