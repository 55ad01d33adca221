//! v3lockpb.Lock: Lock and Unlock, translated to the mutex of the concurrency module,
//! which acts for the caller. A Lock runs on a task of its own so that a client that
//! goes away while it waits has its key removed instead of left blocking the lock.

use tonic::{Request, Response, Status};

use crate::api::concurrency::{cancel, mutex, Services};
use crate::auth::Caller;
use crate::proto::v3lockpb::lock_server::Lock;
use crate::proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};

pub struct LockService {
    services: Services,
}

impl LockService {
    pub fn new(services: Services) -> Self {
        LockService { services }
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn lock(&self, request: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let client = self.services.client(Caller::of(&request));
        let LockRequest { name, lease } = request.into_inner();
        let locked = cancel::detached(move |cancel| mutex::lock(client, name, lease, cancel))
            .await
            .map_err(Status::from)?;
        Ok(Response::new(LockResponse {
            header: Some(locked.header),
            key: locked.key,
        }))
    }

    async fn unlock(
        &self,
        request: Request<UnlockRequest>,
    ) -> Result<Response<UnlockResponse>, Status> {
        let client = self.services.client(Caller::of(&request));
        let header = mutex::unlock(&client, request.into_inner().key)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(UnlockResponse {
            header: Some(header),
        }))
    }
}
