//! Where blocking store work runs: on tokio's blocking pool in production, inline on
//! the calling task in deterministic simulation.
//!
//! RocksDB calls block. In production they must not stall the async workers, so they
//! go to the blocking pool; under turmoil a thread would escape the simulator's control
//! of time and ordering, so the same calls run inline. This module owns only that
//! choice; callers never call `spawn_blocking` themselves.

use std::fmt;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Offload {
    /// `tokio::task::spawn_blocking`.
    #[default]
    BlockingPool,
    /// On the calling task (simulation only).
    Inline,
}

/// The blocking pool lost the task (it panicked or the runtime is shutting down).
#[derive(Debug)]
pub struct OffloadError(String);

impl fmt::Display for OffloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blocking task failed: {}", self.0)
    }
}

impl std::error::Error for OffloadError {}

impl Offload {
    pub async fn run<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, OffloadError> {
        match self {
            Offload::BlockingPool => tokio::task::spawn_blocking(work)
                .await
                .map_err(|e| OffloadError(e.to_string())),
            Offload::Inline => Ok(work()),
        }
    }
}
