//! Generated protobuf types: etcd's API (wire-identical to etcd) and the raft command
//! envelope. Only generated code lives here.

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
}

pub use self::quantykube::command::v1 as command;
