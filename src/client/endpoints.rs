//! Endpoint syntax, as etcd's client reads `--endpoints`: `host:port`,
//! `http://host:port` or `https://host:port`, and so which endpoints use TLS.
//!
//! This module owns turning what the user typed into a URL. It must never open a
//! connection: `dial` does.

use super::error::ClientError;

/// The endpoints of a comma-separated `--endpoints` list as given, trimmed, empty
/// entries dropped.
pub fn list(endpoints: &[String]) -> impl Iterator<Item = &str> {
    endpoints.iter().map(|e| e.trim()).filter(|e| !e.is_empty())
}

/// `http://host:port`, `https://host:port` or `host:port` as a URL. A bare `host:port`
/// is `https://` when `tls` (a TLS flag is given) and `http://` otherwise, as etcd's
/// client treats an address without a scheme; an explicit scheme is kept either way.
pub fn normalise(endpoint: &str, tls: bool) -> Result<String, ClientError> {
    let expected = || {
        ClientError::Usage(format!(
            "endpoint {endpoint}: expected host:port, http://host:port or https://host:port"
        ))
    };
    let (scheme, rest) = match endpoint.split_once("://") {
        Some(("http", rest)) => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        Some(("unix" | "unixs", _)) => {
            return Err(ClientError::Usage(format!(
                "endpoint {endpoint}: unix sockets are not supported by quantykube bench"
            )))
        }
        Some(_) => return Err(expected()),
        None if tls => ("https", endpoint),
        None => ("http", endpoint),
    };
    let url = format!("{scheme}://{}", rest.trim_end_matches('/'));
    let uri: http::Uri = url
        .parse()
        .map_err(|e| ClientError::Usage(format!("endpoint {endpoint}: {e}")))?;
    match uri.authority() {
        Some(authority) if authority.port_u16().is_some() && !authority.host().is_empty() => {
            Ok(url)
        }
        _ => Err(expected()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalised() {
        let plain = |e: &str| normalise(e, false).map_err(|e| e.to_string());
        assert_eq!(plain("127.0.0.1:2379").unwrap(), "http://127.0.0.1:2379");
        assert_eq!(
            plain("http://localhost:2379/").unwrap(),
            "http://localhost:2379"
        );
        assert_eq!(
            plain("https://127.0.0.1:2379").unwrap(),
            "https://127.0.0.1:2379"
        );
        assert!(plain("127.0.0.1").is_err());
        assert!(plain("https://127.0.0.1").is_err());
        assert!(plain("ftp://127.0.0.1:2379").is_err());
        assert!(plain("unix://x").unwrap_err().contains("unix sockets"));
        assert!(plain("unixs://x").unwrap_err().contains("unix sockets"));
    }

    #[test]
    fn tls_flags_make_bare_addresses_https_and_keep_schemes() {
        let tls = |e: &str| normalise(e, true).map_err(|e| e.to_string());
        assert_eq!(tls("127.0.0.1:2379").unwrap(), "https://127.0.0.1:2379");
        assert_eq!(tls("localhost:2379/").unwrap(), "https://localhost:2379");
        assert_eq!(
            tls("https://127.0.0.1:12379").unwrap(),
            "https://127.0.0.1:12379"
        );
        // etcd's client drops TLS for an explicit http://.
        assert_eq!(
            tls("http://127.0.0.1:2379").unwrap(),
            "http://127.0.0.1:2379"
        );
    }

    #[test]
    fn the_list_drops_blanks() {
        let given = vec![
            " a:1".to_string(),
            String::new(),
            "b:2 ".into(),
            "  ".into(),
        ];
        assert_eq!(list(&given).collect::<Vec<_>>(), ["a:1", "b:2"]);
    }
}
