//! End-to-end tests against real server processes: QuantyKube by default, or etcd
//! with `QK_TEST_TARGET=etcd` (see `harness.rs`). One test binary for all modules.

mod auth_support;
mod certs;
mod harness;
mod prometheus_text;
mod raw;

mod auth;
mod auth_cluster;
mod auth_enforce;
mod auth_secrets;
mod auth_tokens;
mod auto_compaction;
mod bench_tool;
mod cluster_boundaries;
mod cluster_info;
mod corruption;
mod differential;
mod dns;
mod election;
mod etcdctl;
mod force_new_cluster;
mod http2_authority;
mod kubeadm;
mod kv_compact;
mod kv_delete;
mod kv_put;
mod kv_range;
mod kv_txn;
mod lease;
mod lock;
mod maintenance_alarm;
mod maintenance_defrag_status;
mod maintenance_hash;
mod membership;
mod metrics;
mod quantykube_surface;
mod request_limits;
mod revisions;
mod snapshot;
mod snapshot_install;
mod snapshot_save;
mod three_node;
mod tls;
mod watch;
