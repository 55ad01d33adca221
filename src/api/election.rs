//! v3electionpb.Election: Campaign, Proclaim, Leader, Observe and Resign, translated to
//! the elections of the concurrency module, which acts for the caller. Campaign runs on
//! a task of its own so that a client that goes away while it waits resigns; Observe
//! streams from a task that ends when its client does.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::status;
use crate::api::concurrency::election::{self as elections, Leadership};
use crate::api::concurrency::{cancel, observe, Services};
use crate::auth::Caller;
use crate::proto::v3electionpb::election_server::Election;
use crate::proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};

/// Proclamations an Observe stream queues for its client; a slower client holds up
/// only its own observer (whose watch then catches up from history).
const QUEUED_PROCLAMATIONS: usize = 16;

type Proclamations = Pin<Box<dyn Stream<Item = Result<LeaderResponse, Status>> + Send>>;

pub struct ElectionService {
    services: Services,
}

impl ElectionService {
    pub fn new(services: Services) -> Self {
        ElectionService { services }
    }
}

/// The leadership a request gives back; etcd refuses a request without one.
fn leadership(leader: Option<LeaderKey>) -> Result<Leadership, Status> {
    let leader = leader.ok_or_else(status::missing_leader_key)?;
    Ok(Leadership {
        name: leader.name,
        key: leader.key,
        rev: leader.rev,
        lease: leader.lease,
    })
}

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        request: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let client = self.services.client(Caller::of(&request));
        let CampaignRequest { name, lease, value } = request.into_inner();
        let (header, leader) =
            cancel::detached(move |cancel| elections::campaign(client, name, lease, value, cancel))
                .await
                .map_err(Status::from)?;
        Ok(Response::new(CampaignResponse {
            header: Some(header),
            leader: Some(LeaderKey {
                name: leader.name,
                key: leader.key,
                rev: leader.rev,
                lease: leader.lease,
            }),
        }))
    }

    async fn proclaim(
        &self,
        request: Request<ProclaimRequest>,
    ) -> Result<Response<ProclaimResponse>, Status> {
        let client = self.services.client(Caller::of(&request));
        let ProclaimRequest { leader, value } = request.into_inner();
        let header = elections::proclaim(&client, leadership(leader)?, value)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(ProclaimResponse {
            header: Some(header),
        }))
    }

    async fn leader(
        &self,
        request: Request<LeaderRequest>,
    ) -> Result<Response<LeaderResponse>, Status> {
        let client = self.services.client(Caller::of(&request));
        let (header, kv) = elections::leader(&client, &request.into_inner().name)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(LeaderResponse {
            header: Some(header),
            kv: Some(kv),
        }))
    }

    async fn observe(
        &self,
        request: Request<LeaderRequest>,
    ) -> Result<Response<Proclamations>, Status> {
        let client = self.services.client(Caller::of(&request));
        let (out, proclamations) = mpsc::channel(QUEUED_PROCLAMATIONS);
        tokio::spawn(observe::observe(client, request.into_inner().name, out));
        let responses = ReceiverStream::new(proclamations).map(|(header, kv)| {
            Ok(LeaderResponse {
                header: Some(header),
                kv: Some(kv),
            })
        });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn resign(
        &self,
        request: Request<ResignRequest>,
    ) -> Result<Response<ResignResponse>, Status> {
        let client = self.services.client(Caller::of(&request));
        let header = elections::resign(&client, leadership(request.into_inner().leader)?)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(ResignResponse {
            header: Some(header),
        }))
    }
}
