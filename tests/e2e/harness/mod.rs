//! Starts real clusters of the target server (QuantyKube or etcd) as processes on
//! loopback, with etcd's own flags, and tears them down on drop.
//!
//! Target selection, by environment:
//! - `QK_TEST_TARGET=quantykube` (default): the binary is `QK_BIN`, or the `quantykube`
//!   binary that cargo built for this package.
//! - `QK_TEST_TARGET=etcd`: the binary is `QK_ETCD_BIN`, or `etcd` on `PATH`.
//!
//! `etcdctl` is `QK_ETCDCTL_BIN` or `etcdctl` on `PATH`. With `QK_E2E_KEEP` set, member
//! data dirs and logs are kept (and their paths printed) instead of deleted.
//!
//! Every cluster gets a loopback address of its own (derived from the test process id)
//! and a block of ports of its own (a per-process counter), checked free before use,
//! so tests running in parallel threads or processes never collide. Members are killed
//! with SIGKILL when the `Cluster` is dropped, also when a test panics, and (through
//! `PR_SET_PDEATHSIG`) when the test process itself dies.

#![allow(dead_code)]

mod clients;
mod cluster;
mod etcdctl;
mod helpers;
mod http;
mod membership;
mod options;
mod ports;
mod processes;
mod target;

use std::time::Duration;

// Every public name at `crate::harness::`, as when the harness was one file. The crash
// tests include this module too and use only part of it.
#[allow(unused_imports)]
pub use self::{
    clients::*, cluster::*, etcdctl::*, helpers::*, http::*, membership::*, options::*, ports::*,
    processes::*, target::*,
};
#[allow(unused_imports)]
pub use crate::support::status::{assert_grpc_error, grpc_status};

/// How long a cluster may take to start (or restart) and answer a linearizable read.
pub const START_TIMEOUT: Duration = Duration::from_secs(40);
/// Timeout of each RPC issued through the clients this harness hands out.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one etcdctl invocation.
pub const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(30);
