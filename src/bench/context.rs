//! What every workload is handed: the flags, the connections, the keys and value, and
//! the plan of the run, built by the bench's `run` once the connections are open.
//!
//! This module owns nothing but that bundle; it must never run anything.

use bytes::Bytes;

use super::cli::GlobalArgs;
use super::conn::Connections;
use super::driver::{Interrupt, Plan};
use super::keys::KeySpace;

/// What every workload gets: the flags, the connections, the keys and value, and the
/// plan of the run.
pub(crate) struct Context {
    pub args: GlobalArgs,
    pub conns: Connections,
    pub keys: KeySpace,
    pub value: Bytes,
    pub plan: Plan,
    pub interrupt: Interrupt,
}

impl Context {
    pub fn clients(&self) -> usize {
        self.args.clients
    }
}
