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
pub mod client;
pub mod compactor;
pub mod config;
pub mod corruption;
pub mod disk;
pub mod entry;
pub mod format;
pub mod http;
pub mod identity;
pub mod lessor;
pub mod logging;
pub mod membership;
pub mod metrics;
pub mod migrate;
pub mod node;
pub mod offload;
#[cfg(feature = "planted-bugs")]
pub mod planted;

/// Whether the planted bug `PlantedBug::$bug` is on, as a value for a condition:
/// always `false`, and compiled away, in a build without `planted-bugs`.
macro_rules! planted_bug {
    ($bug:ident) => {{
        #[cfg(feature = "planted-bugs")]
        let on = crate::planted::is_planted(crate::planted::PlantedBug::$bug);
        #[cfg(not(feature = "planted-bugs"))]
        let on = false;
        on
    }};
}
pub(crate) use planted_bug;
pub mod pod;
pub mod probes;
pub mod proto;
pub mod quota;
pub mod relay;
pub mod rpctypes;
pub mod server;
pub mod state_machine;
pub mod store;
pub mod transport;
