//! Page sizes and page tokens of the List methods (the style guide's section 3.2).
//!
//! Resources are listed in order of name; a token is the last name of the page before,
//! with a checksum so that a token the server did not write is refused rather than
//! read. Tokens stay valid while resources come and go: a page starts after the name,
//! whether or not that resource still exists.

use base64::Engine;

use super::AdminError;

/// What a page holds when the request leaves page_size 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// The most a page holds; larger requests are coerced to it.
pub const MAX_PAGE_SIZE: usize = 1000;

const TOKEN_MAGIC: &[u8] = b"qk1";

/// The page size a request asks for, coerced as the guide says.
pub fn page_size(requested: i32) -> Result<usize, AdminError> {
    match usize::try_from(requested) {
        Err(_) => Err(AdminError::invalid("page_size", "must not be negative")),
        Ok(0) => Ok(DEFAULT_PAGE_SIZE),
        Ok(n) => Ok(n.min(MAX_PAGE_SIZE)),
    }
}

/// The token for the page after the one that ended with `last_name`.
pub fn token_after(last_name: &str) -> String {
    let mut raw = TOKEN_MAGIC.to_vec();
    raw.extend_from_slice(&checksum(last_name.as_bytes()).to_be_bytes());
    raw.extend_from_slice(last_name.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// The name a page token says to start after; None for the first page.
pub fn start_after(token: &str) -> Result<Option<String>, AdminError> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || AdminError::invalid("page_token", "is not a token this server gave");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let rest = raw.strip_prefix(TOKEN_MAGIC).ok_or_else(bad)?;
    if rest.len() < 4 {
        return Err(bad());
    }
    let (sum, name) = rest.split_at(4);
    let name = std::str::from_utf8(name).map_err(|_| bad())?;
    if sum != checksum(name.as_bytes()).to_be_bytes() {
        return Err(bad());
    }
    Ok(Some(name.to_string()))
}

fn checksum(bytes: &[u8]) -> u32 {
    crate::store::CASTAGNOLI.checksum(bytes)
}

/// One page of `items` (sorted by name), and the token for the next page: empty when
/// this page reaches the end.
pub fn page<T>(
    items: Vec<T>,
    name: impl Fn(&T) -> &str,
    size: usize,
    after: Option<&str>,
) -> (Vec<T>, String) {
    let mut rest: Vec<T> = items
        .into_iter()
        .filter(|item| after.is_none_or(|after| name(item) > after))
        .collect();
    if rest.len() <= size {
        return (rest, String::new());
    }
    rest.truncate(size);
    let token = rest
        .last()
        .map(|last| token_after(name(last)))
        .unwrap_or_default();
    (rest, token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_default_coerce_and_refuse_negatives() {
        assert_eq!(page_size(0).unwrap(), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(7).unwrap(), 7);
        assert_eq!(page_size(1001).unwrap(), MAX_PAGE_SIZE);
        assert_eq!(page_size(i32::MAX).unwrap(), MAX_PAGE_SIZE);
        assert!(page_size(-1).is_err());
    }

    #[test]
    fn tokens_round_trip_and_forgeries_are_refused() {
        let token = token_after("etcd-1");
        assert_eq!(start_after(&token).unwrap().as_deref(), Some("etcd-1"));
        assert_eq!(start_after("").unwrap(), None);
        for forged in ["x", "!!!", "cWsxAAAAAGV0Y2QtMQ", &token[..token.len() - 1]] {
            assert!(start_after(forged).is_err(), "{forged}");
        }
    }

    #[test]
    fn pages_walk_to_an_empty_token() {
        let names: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
        let (first, token) = page(names.clone(), |n| n, 2, None);
        assert_eq!(first, ["m0", "m1"]);
        let after = start_after(&token).unwrap();
        let (second, token) = page(names.clone(), |n| n, 2, after.as_deref());
        assert_eq!(second, ["m2", "m3"]);
        let after = start_after(&token).unwrap();
        let (last, token) = page(names, |n| n, 2, after.as_deref());
        assert_eq!(last, ["m4"]);
        assert!(token.is_empty());
    }
}
