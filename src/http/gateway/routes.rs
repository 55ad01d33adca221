//! The gateway's paths: etcd 3.7's `google.api.http` bindings (api/etcdserverpb/rpc.proto,
//! v3lockpb, v3electionpb), each the gRPC method it calls and how messages flow. Every
//! path is served under `/v3/`, `/v3beta/` (etcd 3.4 rewrites it to `/v3/`) and
//! `/v3alpha/` (etcd 3.3's prefix, which python3-etcd3gw 2.0 and tooz 3.1 still send).

/// How messages flow in an RPC, as the gateway relays them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One JSON object in, one out.
    Unary,
    /// One object in; a chunked stream of `{"result": ...}` objects out.
    ServerStream,
    /// A body of objects one after another in, a chunked stream out.
    BidiStream,
}

#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// The path after the version prefix, e.g. `kv/range`.
    pub path: &'static str,
    /// The gRPC method, e.g. `/etcdserverpb.KV/Range`.
    pub method: &'static str,
    pub shape: Shape,
}

const fn unary(path: &'static str, method: &'static str) -> Route {
    Route {
        path,
        method,
        shape: Shape::Unary,
    }
}

/// The version prefixes the gateway answers under.
pub const PREFIXES: [&str; 3] = ["v3", "v3beta", "v3alpha"];

pub const ROUTES: &[Route] = &[
    unary("kv/range", "/etcdserverpb.KV/Range"),
    unary("kv/put", "/etcdserverpb.KV/Put"),
    unary("kv/deleterange", "/etcdserverpb.KV/DeleteRange"),
    unary("kv/txn", "/etcdserverpb.KV/Txn"),
    unary("kv/compaction", "/etcdserverpb.KV/Compact"),
    Route {
        path: "watch",
        method: "/etcdserverpb.Watch/Watch",
        shape: Shape::BidiStream,
    },
    unary("lease/grant", "/etcdserverpb.Lease/LeaseGrant"),
    unary("lease/revoke", "/etcdserverpb.Lease/LeaseRevoke"),
    unary("kv/lease/revoke", "/etcdserverpb.Lease/LeaseRevoke"),
    Route {
        path: "lease/keepalive",
        method: "/etcdserverpb.Lease/LeaseKeepAlive",
        shape: Shape::BidiStream,
    },
    unary("lease/timetolive", "/etcdserverpb.Lease/LeaseTimeToLive"),
    unary("kv/lease/timetolive", "/etcdserverpb.Lease/LeaseTimeToLive"),
    unary("lease/leases", "/etcdserverpb.Lease/LeaseLeases"),
    unary("kv/lease/leases", "/etcdserverpb.Lease/LeaseLeases"),
    unary("cluster/member/add", "/etcdserverpb.Cluster/MemberAdd"),
    unary(
        "cluster/member/remove",
        "/etcdserverpb.Cluster/MemberRemove",
    ),
    unary(
        "cluster/member/update",
        "/etcdserverpb.Cluster/MemberUpdate",
    ),
    unary("cluster/member/list", "/etcdserverpb.Cluster/MemberList"),
    unary(
        "cluster/member/promote",
        "/etcdserverpb.Cluster/MemberPromote",
    ),
    unary("maintenance/alarm", "/etcdserverpb.Maintenance/Alarm"),
    unary("maintenance/status", "/etcdserverpb.Maintenance/Status"),
    unary(
        "maintenance/defragment",
        "/etcdserverpb.Maintenance/Defragment",
    ),
    // etcd 3.4 bound HashKV to this path too (and HashKV won); 3.5 gave it its own.
    unary("maintenance/hash", "/etcdserverpb.Maintenance/Hash"),
    unary("maintenance/hashkv", "/etcdserverpb.Maintenance/HashKV"),
    Route {
        path: "maintenance/snapshot",
        method: "/etcdserverpb.Maintenance/Snapshot",
        shape: Shape::ServerStream,
    },
    unary(
        "maintenance/transfer-leadership",
        "/etcdserverpb.Maintenance/MoveLeader",
    ),
    unary(
        "maintenance/downgrade",
        "/etcdserverpb.Maintenance/Downgrade",
    ),
    unary("auth/enable", "/etcdserverpb.Auth/AuthEnable"),
    unary("auth/disable", "/etcdserverpb.Auth/AuthDisable"),
    unary("auth/status", "/etcdserverpb.Auth/AuthStatus"),
    unary("auth/authenticate", "/etcdserverpb.Auth/Authenticate"),
    unary("auth/user/add", "/etcdserverpb.Auth/UserAdd"),
    unary("auth/user/get", "/etcdserverpb.Auth/UserGet"),
    unary("auth/user/list", "/etcdserverpb.Auth/UserList"),
    unary("auth/user/delete", "/etcdserverpb.Auth/UserDelete"),
    unary(
        "auth/user/changepw",
        "/etcdserverpb.Auth/UserChangePassword",
    ),
    unary("auth/user/grant", "/etcdserverpb.Auth/UserGrantRole"),
    unary("auth/user/revoke", "/etcdserverpb.Auth/UserRevokeRole"),
    unary("auth/role/add", "/etcdserverpb.Auth/RoleAdd"),
    unary("auth/role/get", "/etcdserverpb.Auth/RoleGet"),
    unary("auth/role/list", "/etcdserverpb.Auth/RoleList"),
    unary("auth/role/delete", "/etcdserverpb.Auth/RoleDelete"),
    unary("auth/role/grant", "/etcdserverpb.Auth/RoleGrantPermission"),
    unary(
        "auth/role/revoke",
        "/etcdserverpb.Auth/RoleRevokePermission",
    ),
    unary("lock/lock", "/v3lockpb.Lock/Lock"),
    unary("lock/unlock", "/v3lockpb.Lock/Unlock"),
    unary("election/campaign", "/v3electionpb.Election/Campaign"),
    unary("election/proclaim", "/v3electionpb.Election/Proclaim"),
    unary("election/leader", "/v3electionpb.Election/Leader"),
    Route {
        path: "election/observe",
        method: "/v3electionpb.Election/Observe",
        shape: Shape::ServerStream,
    },
    unary("election/resign", "/v3electionpb.Election/Resign"),
];
