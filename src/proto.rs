//! Generated protobuf types: etcd's API (wire-identical to etcd), QuantyKube's admin API
//! and the raft command envelope. Only generated code lives here, and the one message
//! written by hand in its place (the admin API's `Member`, in proto/admin/v1/).

#![allow(clippy::all, missing_docs)]

pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

pub mod authpb {
    tonic::include_proto!("authpb");
}

pub mod leasepb {
    tonic::include_proto!("leasepb");
}

pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
}

pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
}

/// Nested as its protobuf package, so that generated cross-package paths resolve.
pub mod quantykube {
    pub mod command {
        pub mod v1 {
            tonic::include_proto!("quantykube.command.v1");
        }
    }
    /// The lease calls a member relays to the leader over the peer port.
    pub mod peer {
        pub mod v1 {
            tonic::include_proto!("quantykube.peer.v1");
        }
    }
}

/// QuantyKube's admin API (src/admin), the one API of our own.
pub mod admin {
    pub mod v1 {
        tonic::include_proto!("quantykube.admin.v1");
        /// Hand-written, to keep unknown fields (see its module).
        mod member_message;
        pub use self::member_message::Member;
    }
}

pub use self::admin::v1 as admin_v1;
pub use self::quantykube::command::v1 as command;
pub use self::quantykube::peer::v1 as peer;

/// The descriptors of every message and service above, as protoc wrote them at build
/// time (the JSON gateway reads and writes messages through them).
pub fn descriptors() -> &'static prost_reflect::DescriptorPool {
    static POOL: std::sync::LazyLock<prost_reflect::DescriptorPool> =
        std::sync::LazyLock::new(|| {
            let bytes = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
            // A set protoc wrote for this very build always decodes; an empty pool would
            // leave the gateway without routes, which its tests would show.
            prost_reflect::DescriptorPool::decode(bytes.as_slice()).unwrap_or_default()
        });
    &POOL
}
