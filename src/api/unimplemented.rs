//! The services that are not built yet.
//!
//! Every etcd service is registered so that clients never see a missing service; each
//! RPC here answers `Unimplemented` at once through the generated default stubs, whose
//! message `compat_layer` rewrites to name the RPC.

use crate::proto::etcdserverpb::auth_server::Auth;

/// Auth is not built yet: every RPC answers Unimplemented.
pub struct AuthService;
#[tonic::async_trait]
impl Auth for AuthService {}
