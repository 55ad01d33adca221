//! What a value means: Go's `flag`-package values (booleans, numbers, durations), URL
//! lists, `--initial-cluster`, and etcd's checks of them with etcd's own messages.
//!
//! This module owns value parsing and the checks that need only the values themselves.
//! It never decides which flags exist or where a value came from (a [`Setting`] says
//! so), and must never resolve host names, bind, touch the disk, log or exit: URLs are
//! checked as written, and binding addresses must be literal IPs or `localhost`.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use url::Url;

use super::error::ConfigError;
use super::setting::Setting;

/// One `name=url` group of `--initial-cluster`; a name given several times has several URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMember {
    pub name: String,
    /// `http://host:port`, sorted.
    pub peer_urls: Vec<String>,
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster from `--initial-cluster`.
    New,
    /// Join a cluster that already has this member (added with MemberAdd).
    Existing,
}

// ---------------------------------------------------------------------------------
// Values as Go's flag package and etcd read them.

pub(super) const SYNTAX_ERROR: &str = "parse error";
pub(super) const RANGE_ERROR: &str = "value out of range";

/// Go's `strconv.ParseBool`.
pub(super) fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)`, which Go's flag package uses: `0x`, `0o`, `0b`
/// and leading-`0` (octal) prefixes, `_` between digits.
pub(super) fn parse_go_uint(s: &str) -> Result<u64, &'static str> {
    let prefix = s.get(..2).map(str::to_ascii_lowercase);
    // `zero_seen`: a leading-0 octal prefix is itself the digit zero.
    let (base, digits, zero_seen) = match prefix.as_deref() {
        Some("0x") => (16, &s[2..], false),
        Some("0b") => (2, &s[2..], false),
        Some("0o") => (8, &s[2..], false),
        _ if s.len() > 1 && s.starts_with('0') => (8, &s[1..], true),
        _ => (10, s, false),
    };
    let mut value: u64 = 0;
    let mut digit_seen = zero_seen;
    // An underscore may follow a base prefix or a digit, never another underscore.
    let mut underscore_ok = base != 10;
    let mut last_underscore = false;
    for c in digits.chars() {
        if c == '_' {
            if !underscore_ok {
                return Err(SYNTAX_ERROR);
            }
            underscore_ok = false;
            last_underscore = true;
            continue;
        }
        let d = c.to_digit(base).ok_or(SYNTAX_ERROR)?;
        value = value
            .checked_mul(u64::from(base))
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or(RANGE_ERROR)?;
        digit_seen = true;
        underscore_ok = true;
        last_underscore = false;
    }
    if last_underscore || !digit_seen {
        return Err(SYNTAX_ERROR);
    }
    Ok(value)
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
pub(super) fn parse_go_int(s: &str) -> Result<i64, &'static str> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let magnitude = i128::from(parse_go_uint(digits)?);
    i64::try_from(if negative { -magnitude } else { magnitude }).map_err(|_| RANGE_ERROR)
}

/// Go's `time.ParseDuration`, in nanoseconds: `10m`, `1h30m`, `1.5s`, `500ms`, `-2s`, `0`.
pub(super) fn parse_go_duration(s: &str) -> Result<i128, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let limit: u128 = if negative { 1 << 63 } else { (1 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after) = rest.split_at(int_len);
        let (frac_digits, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let per_unit: u128 = match unit {
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        let int: u128 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse().map_err(|_| invalid())?
        };
        // Digits beyond nanosecond precision of an hour cannot change the result.
        let frac_digits = &frac_digits[..frac_digits.len().min(18)];
        let frac: u128 = if frac_digits.is_empty() {
            0
        } else {
            frac_digits.parse().map_err(|_| invalid())?
        };
        let scale = 10u128.pow(u32::try_from(frac_digits.len()).unwrap_or(0));
        let value = int
            .checked_mul(per_unit)
            .and_then(|v| v.checked_add(frac * per_unit / scale))
            .ok_or_else(invalid)?;
        total = total
            .checked_add(value)
            .filter(|t| *t <= limit)
            .ok_or_else(invalid)?;
        rest = after;
    }
    let total = i128::try_from(total).map_err(|_| invalid())?;
    Ok(if negative { -total } else { total })
}

// ---------------------------------------------------------------------------------
// Numbers, log levels and versions of the implemented flags.

pub(super) fn uint_setting(setting: Option<&Setting>, default: u64) -> Result<u64, ConfigError> {
    setting.map_or(Ok(default), |s| {
        parse_go_uint(&s.value).map_err(|r| s.invalid(r))
    })
}

pub(super) fn to_usize(setting: Option<&Setting>, value: u64) -> Result<usize, ConfigError> {
    usize::try_from(value).map_err(|_| match setting {
        Some(s) => s.invalid(RANGE_ERROR),
        None => ConfigError::Invalid(format!("{value} does not fit this platform")),
    })
}

/// `MAJOR.MINOR.PATCH`, optionally followed by a `-pre` or `+build` suffix, since
/// clients parse the reported version.
pub(super) fn is_version(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

// ---------------------------------------------------------------------------------
// URLs, as etcd's `types.NewURLs` checks them.

/// A URL in a form etcd accepts: `http(s)://host:port`, or a unix socket.
struct CheckedUrl {
    /// As etcd prints it.
    text: String,
    /// Without IPv6 brackets; empty for a unix socket.
    host: String,
    /// `unix://` or `unixs://`: a socket path, not a host and port.
    unix: bool,
}

/// Whether a flag's URLs may name unix sockets: client listeners and advertised client
/// URLs do (etcd 3.7 stopped asking the latter for a host and port); peers stay TCP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sockets {
    Allowed,
    Refused,
}

/// etcd's `types.NewURLs` rules for one URL.
fn check_url(raw: &str, sockets: Sockets) -> Result<CheckedUrl, String> {
    let s = raw.trim();
    let scheme_error = || format!("URL scheme must be http, https, unix, or unixs: {s}");
    let Some((scheme, _)) = s.split_once(':') else {
        return Err(scheme_error());
    };
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "unix" | "unixs" if sockets == Sockets::Refused => {
            return Err(format!(
                "{s} is a unix socket; QuantyKube's peers use TCP only (http or https)"
            ))
        }
        // etcd takes any unix URL; the socket's path is its host and path.
        "unix" | "unixs" => {
            return Ok(CheckedUrl {
                text: format!("{scheme}{}", &s[scheme.len()..]),
                host: String::new(),
                unix: true,
            })
        }
        "http" | "https" => {}
        _ => return Err(scheme_error()),
    }
    let Some((_, rest)) = s.split_once("://") else {
        return Err(format!(
            r#"URL address does not have the form "host:port": {s}"#
        ));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if tail.starts_with('/') {
        return Err(format!("URL must not contain a path: {s}"));
    }
    if !tail.is_empty() {
        return Err(format!("URL must not contain a query or fragment: {s}"));
    }
    if authority.contains('@') {
        return Err(format!("URL must not contain user information: {s}"));
    }
    let (host, port) = split_host_port(authority)
        .ok_or_else(|| format!(r#"URL address does not have the form "host:port": {s}"#))?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(format!("invalid port {port:?} in URL: {s}"));
    }
    Ok(CheckedUrl {
        text: format!("{scheme}://{authority}"),
        host: host.to_string(),
        unix: false,
    })
}

/// Go's `net.SplitHostPort`: `host:port` or `[ipv6]:port`.
fn split_host_port(authority: &str) -> Option<(&str, &str)> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return (!port.contains(':')).then_some((host, port));
    }
    let (host, port) = authority.rsplit_once(':')?;
    (!host.contains([':', '[', ']'])).then_some((host, port))
}

/// A comma-separated URL flag, sorted and deduplicated as etcd's `UniqueURLs`.
fn url_list(
    setting: Option<&Setting>,
    flag: &'static str,
    default: &str,
) -> Result<Vec<CheckedUrl>, ConfigError> {
    let sockets = match flag {
        "listen-client-urls"
        | "listen-client-http-urls"
        | "listen-metrics-urls"
        | "advertise-client-urls" => Sockets::Allowed,
        _ => Sockets::Refused,
    };
    let owned;
    let setting = match setting {
        Some(s) => s,
        None => {
            owned = Setting::flag(flag, default.to_string());
            &owned
        }
    };
    let mut urls = setting
        .value
        .split(',')
        .map(|u| check_url(u, sockets))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|r| setting.invalid(r))?;
    urls.sort_by(|a, b| a.text.cmp(&b.text));
    urls.dedup_by(|a, b| a.text == b.text);
    Ok(urls)
}

/// `--cors`, etcd's `UniqueURLsWithExceptions("*", "*")`: `*` alone, or URLs checked as
/// every other URL flag (an origin such as `http://host:port`); unset is `*`.
pub(super) fn cors_origins(setting: Option<&Setting>) -> Result<Vec<String>, ConfigError> {
    match setting {
        None => Ok(vec!["*".to_string()]),
        Some(s) if s.value == "*" => Ok(vec!["*".to_string()]),
        Some(s) => Ok(url_list(Some(s), "cors", "")?
            .into_iter()
            .map(|u| u.text)
            .collect()),
    }
}

/// A listen URL flag with no default (`--listen-metrics-urls`,
/// `--listen-client-http-urls`): unset or empty means no listener.
pub(super) fn optional_listen_urls(
    setting: Option<&Setting>,
    flag: &'static str,
) -> Result<Vec<Url>, ConfigError> {
    match setting {
        Some(s) if !s.value.trim().is_empty() => listen_urls(Some(s), flag, ""),
        _ => Ok(Vec::new()),
    }
}

pub(super) fn listen_urls(
    setting: Option<&Setting>,
    flag: &'static str,
    default: &str,
) -> Result<Vec<Url>, ConfigError> {
    url_list(setting, flag, default)?
        .into_iter()
        .map(|u| {
            // etcd binds only to literal IPs (and localhost), never to resolved names.
            if !u.unix && u.host != "localhost" && u.host.parse::<IpAddr>().is_err() {
                return Err(ConfigError::Invalid(format!(
                    "expected IP in URL for binding ({})",
                    u.text
                )));
            }
            Url::parse(&u.text).map_err(|e| ConfigError::InvalidValue {
                origin: format!("flag --{flag}"),
                value: u.text.clone(),
                reason: e.to_string(),
            })
        })
        .collect()
}

pub(super) fn advertise_urls(
    setting: Option<&Setting>,
    flag: &'static str,
    default: &str,
) -> Result<Vec<String>, ConfigError> {
    let urls = url_list(setting, flag, default)?;
    if let Some(empty) = urls.iter().find(|u| !u.unix && u.host.is_empty()) {
        let all: Vec<&str> = urls.iter().map(|u| u.text.as_str()).collect();
        // etcd 3.7 words the client side's message for its unix URLs.
        let form = if flag == "advertise-client-urls" {
            r#"in the format "host:port", "unix:/path/to/socket" or "unixs:/path/to/socket""#
        } else {
            r#""host:port""#
        };
        return Err(ConfigError::Invalid(format!(
            r#"--{flag} "{}" must be {form} (unexpected empty host ({}))"#,
            all.join(","),
            empty.text
        )));
    }
    Ok(urls.into_iter().map(|u| u.text).collect())
}

// ---------------------------------------------------------------------------------
// `--initial-cluster` and etcd's bootstrap checks.

/// `name=url,name=url`, as etcd's `types.NewURLsMap` reads it.
pub(super) fn parse_initial_cluster(setting: &Setting) -> Result<Vec<ClusterMember>, ConfigError> {
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in setting.value.split(',').filter(|i| !i.is_empty()) {
        let (name, url) = item.split_once('=').unwrap_or((item, ""));
        let url = check_url(url, Sockets::Refused).map_err(|r| setting.invalid(r))?;
        members.entry(name.to_string()).or_default().push(url.text);
    }
    Ok(members
        .into_iter()
        .map(|(name, mut peer_urls)| {
            peer_urls.sort();
            ClusterMember { name, peer_urls }
        })
        .collect())
}

/// etcd's bootstrap checks (`VerifyBootstrap`, `VerifyJoinExisting`), run only when the
/// member has no data yet (see `verify_bootstrap`). etcd resolves host names before
/// comparing advertised URLs with the cluster's; we compare them as written.
pub(super) fn check_initial_cluster(
    name: &str,
    advertised: &[String],
    cluster: &[ClusterMember],
    state: ClusterState,
) -> Result<(), ConfigError> {
    let Some(local) = cluster.iter().find(|m| m.name == name) else {
        return Err(ConfigError::Invalid(format!(
            "couldn't find local name {name:?} in the initial cluster configuration"
        )));
    };
    if state == ClusterState::New && local.peer_urls != advertised {
        return Err(ConfigError::Invalid(advertise_mismatch(
            name,
            advertised,
            &local.peer_urls,
        )));
    }
    let mut seen = HashSet::new();
    if !cluster
        .iter()
        .flat_map(|m| &m.peer_urls)
        .all(|u| seen.insert(u))
    {
        return Err(ConfigError::Invalid(format!(
            "initial cluster {} has duplicate url",
            cluster_string(cluster)
        )));
    }
    Ok(())
}

/// etcd's `advertiseMatchesCluster` message for sorted, unequal URL lists.
fn advertise_mismatch(name: &str, advertised: &[String], in_cluster: &[String]) -> String {
    let cause = if advertised.len() != in_cluster.len() {
        format!(
            "len({}) != len({})",
            go_quote_list(advertised),
            go_quote_list(in_cluster)
        )
    } else {
        advertised
            .iter()
            .zip(in_cluster)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("{a:?} != {b:?}"))
            .unwrap_or_default()
    };
    let ap = advertised.join(",");
    let own = |urls: &[String]| -> String {
        let members = [ClusterMember {
            name: name.into(),
            peer_urls: urls.to_vec(),
        }];
        cluster_string(&members)
    };
    let missing: Vec<String> = in_cluster
        .iter()
        .filter(|u| !advertised.contains(u))
        .map(|u| format!("{name}={u}"))
        .collect();
    if !missing.is_empty() {
        return format!(
            "--initial-cluster has {} but missing from --initial-advertise-peer-urls={ap} ({cause})",
            missing.join(",")
        );
    }
    let extra: Vec<&str> = advertised
        .iter()
        .filter(|u| !in_cluster.contains(u))
        .map(String::as_str)
        .collect();
    if !extra.is_empty() {
        return format!(
            "--initial-advertise-peer-urls has {} but missing from --initial-cluster={}",
            extra.join(","),
            own(advertised)
        );
    }
    format!(
        "failed to resolve {ap} to match --initial-cluster={} ({cause})",
        own(advertised)
    )
}

/// etcd's `URLsMap.String()`: `name=url` pairs, sorted, comma-separated.
fn cluster_string(cluster: &[ClusterMember]) -> String {
    let mut pairs: Vec<String> = cluster
        .iter()
        .flat_map(|m| m.peer_urls.iter().map(move |u| format!("{}={u}", m.name)))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}
