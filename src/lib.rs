//! QuantyKube: a drop-in replacement for etcd v3.
//!
//! Every write becomes an openraft log entry applied, in log order, to a RocksDB
//! revision store on every member; reads are served from any member's applied state.
//! See `docs/architecture.md` for the map of modules.

pub mod admin;
pub mod api;
pub mod auth;
pub mod backup;
pub mod bench;
pub mod compactor;
pub mod concurrency;
pub mod config;
pub mod corruption;
pub mod disk;
pub mod http;
pub mod identity;
pub mod lessor;
pub mod logging;
pub mod membership;
pub mod metrics;
pub mod node;
pub mod offload;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod pod;
pub mod probes;
pub mod proto;
pub mod quota;
pub mod state_machine;
pub mod store;
pub mod transport;
pub mod watch;
