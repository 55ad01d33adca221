//! etcd's auth flags: `--auth-token`, `--auth-token-ttl` and `--bcrypt-cost`, checked
//! as etcd checks them at startup (a malformed token option or key file stops the
//! member before it serves).
//!
//! This module reads settings into [`AuthConfig`]; it never opens a key file (the JWT
//! provider does, at startup) and never logs a key.

use std::collections::BTreeMap;
use std::time::Duration;

use super::scan::Setting;
use super::values::uint_setting;
use super::ConfigError;
use crate::auth::{password, token_options, AuthConfig, DEFAULT_TOKEN_TTL};

pub(super) fn resolve_auth(
    settings: &BTreeMap<&'static str, Setting>,
    client_cert_auth: bool,
) -> Result<AuthConfig, ConfigError> {
    let token = match settings.get("auth-token") {
        None => token_options::TokenOptions::Simple,
        // The setting's value may name key files, never hold keys: safe to show.
        Some(setting) => token_options::parse(&setting.value)
            .map_err(|error| setting.invalid(error.to_string()))?,
    };
    let token_ttl = match settings.get("auth-token-ttl") {
        None => DEFAULT_TOKEN_TTL,
        setting => Duration::from_secs(uint_setting(setting, DEFAULT_TOKEN_TTL.as_secs())?),
    };
    let bcrypt_cost = match settings.get("bcrypt-cost") {
        None => password::DEFAULT_COST,
        Some(setting) => {
            let cost = uint_setting(Some(setting), u64::from(password::DEFAULT_COST))?;
            u32::try_from(cost)
                .map_err(|_| setting.invalid("out of range"))
                .and_then(|cost| password::check_cost(cost).map_err(ConfigError::Invalid))?
        }
    };
    Ok(AuthConfig {
        token,
        token_ttl,
        bcrypt_cost,
        client_cert_auth,
    })
}
