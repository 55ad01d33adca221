//! What every checker reports: a checked property that does not hold, with the evidence.
//! The checkers (`checker`, `linearizability`) make them; a scenario collects them.

use std::fmt;

/// A checked property that does not hold, and the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which property, e.g. `convergence` or `stale-read`.
    pub property: &'static str,
    pub detail: String,
}

impl Violation {
    pub(crate) fn new(property: &'static str, detail: impl Into<String>) -> Self {
        Violation {
            property,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated: {}", self.property, self.detail)
    }
}

impl std::error::Error for Violation {}
