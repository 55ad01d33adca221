//! etcd's auth flags: `--auth-token`, `--auth-token-ttl` and `--bcrypt-cost`, checked
//! as etcd checks them at startup (a malformed token option or key file stops the
//! member before it serves).
//!
//! This module reads settings into [`AuthConfig`]; it never opens a key file (the JWT
//! provider does, at startup) and never logs a key.

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ConfigError;
use super::setting::Setting;
use super::token_options::{self, TokenOptions};
use super::values::uint_setting;

/// etcd's `--auth-token-ttl` default (seconds).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(300);

/// Go's `bcrypt.DefaultCost`, etcd's `--bcrypt-cost` default.
pub const DEFAULT_BCRYPT_COST: u32 = 10;
/// Go's `bcrypt.MinCost` and `MaxCost`.
pub const MIN_BCRYPT_COST: u32 = 4;
pub const MAX_BCRYPT_COST: u32 = 31;

/// etcd's auth flags, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    pub token: TokenOptions,
    pub token_ttl: Duration,
    pub bcrypt_cost: u32,
    pub client_cert_auth: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            token: TokenOptions::Simple,
            token_ttl: DEFAULT_TOKEN_TTL,
            bcrypt_cost: DEFAULT_BCRYPT_COST,
            client_cert_auth: false,
        }
    }
}

/// `--bcrypt-cost` as etcd takes it: out of range is refused at startup.
pub fn check_bcrypt_cost(cost: u32) -> Result<u32, String> {
    if (MIN_BCRYPT_COST..=MAX_BCRYPT_COST).contains(&cost) {
        Ok(cost)
    } else {
        Err(format!(
            "--bcrypt-cost {cost}: must be between {MIN_BCRYPT_COST} and {MAX_BCRYPT_COST}"
        ))
    }
}

pub(super) fn resolve_auth(
    settings: &BTreeMap<&'static str, Setting>,
    client_cert_auth: bool,
) -> Result<AuthConfig, ConfigError> {
    let token = match settings.get("auth-token") {
        None => TokenOptions::Simple,
        // The setting's value may name key files, never hold keys: safe to show.
        Some(setting) => token_options::parse(&setting.value)
            .map_err(|error| setting.invalid(error.to_string()))?,
    };
    let token_ttl = match settings.get("auth-token-ttl") {
        None => DEFAULT_TOKEN_TTL,
        setting => Duration::from_secs(uint_setting(setting, DEFAULT_TOKEN_TTL.as_secs())?),
    };
    let bcrypt_cost = match settings.get("bcrypt-cost") {
        None => DEFAULT_BCRYPT_COST,
        Some(setting) => {
            let cost = uint_setting(Some(setting), u64::from(DEFAULT_BCRYPT_COST))?;
            u32::try_from(cost)
                .map_err(|_| setting.invalid("out of range"))
                .and_then(|cost| check_bcrypt_cost(cost).map_err(ConfigError::Invalid))?
        }
    };
    Ok(AuthConfig {
        token,
        token_ttl,
        bcrypt_cost,
        client_cert_auth,
    })
}

#[cfg(test)]
mod tests {
    use super::check_bcrypt_cost as check_cost;

    #[test]
    fn costs_outside_bcrypt_range_are_refused() {
        assert!(check_cost(3).is_err());
        assert!(check_cost(32).is_err());
        assert_eq!(check_cost(10), Ok(10));
    }
}
