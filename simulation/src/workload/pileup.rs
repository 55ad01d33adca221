//! [`Pileup`]: clients that keep writing to a leader the network has cut off, as an
//! application pinned to one endpoint does, so that the old leader's log grows past
//! its successor's with entries no quorum will ever take.
//!
//! What is piled on is a Txn whose compare never holds (the version of a key nobody
//! writes equal to `i64::MAX`), with a Put in its success branch: it goes through the
//! log like any write, and changes no key and no revision whether it is applied or not.
//! So the requests are not in the [`History`](crate::history::History): no checker
//! could tell them happening from never happening, and their unknown outcomes would
//! only widen the linearizability search. It must never judge what it sees and never
//! inject faults; it learns whom to write to from the injector's [`PartialIsolation`].

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

use crate::client::{self, ClientOptions};
use crate::cluster::Directory;
use crate::error::SimError;
use crate::history;
use crate::leaders::PartialIsolation;

/// The key the piled-on Txns compare; nobody writes it.
const PILEUP_KEY: &str = "pileup";

/// HTTP/2's usual cap on one connection's concurrent streams: more requests on one
/// connection would queue in the client rather than reach the member.
const STREAMS_PER_CONNECTION: usize = 100;

/// Clients piling writes on a cut-off leader; see the module docs.
#[derive(Clone, Debug)]
pub struct Pileup {
    /// The client's name (its turmoil host name, by convention).
    pub name: String,
    pub directory: Directory,
    /// Who was cut off, once the injector has cut someone off.
    pub isolation: PartialIsolation,
    /// How many requests are sent at once, as soon as the isolation is in.
    pub requests: usize,
    /// Gives up if no isolation comes within this long.
    pub wait_for: Duration,
    pub options: ClientOptions,
}

impl Pileup {
    /// `requests` Txns at once on whichever leader `isolation` names, within 60 s.
    pub fn new(
        name: impl Into<String>,
        directory: Directory,
        isolation: PartialIsolation,
        requests: usize,
    ) -> Self {
        Pileup {
            name: name.into(),
            directory,
            isolation,
            requests,
            wait_for: Duration::from_secs(60),
            options: ClientOptions::default(),
        }
    }

    /// Waits for the isolation, then sends every request at once and waits for their
    /// answers or deadlines. Must run inside a turmoil host.
    pub async fn run(self) -> Result<(), SimError> {
        let start = history::now();
        let leader = loop {
            if let Some((leader, _spared)) = self.isolation.get() {
                break leader;
            }
            if history::now().saturating_sub(start) >= self.wait_for {
                tracing::info!(client = %self.name, "no isolation to pile writes on");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let Some(url) = self.directory.entry(&leader).map(|e| e.client_url) else {
            return Err(SimError::Invalid(format!(
                "{leader} is not in the directory"
            )));
        };
        let connections = self.requests.div_ceil(STREAMS_PER_CONNECTION);
        let mut clients = Vec::with_capacity(connections);
        for _ in 0..connections {
            clients.push(client::connect_with(&url, &self.options).await?);
        }
        let sent = (0..self.requests).map(|i| {
            let mut client: Client = clients[i % connections].clone();
            async move {
                let never = Txn::new()
                    .when([Compare::version(PILEUP_KEY, CompareOp::Equal, i64::MAX)])
                    .and_then([TxnOp::put(PILEUP_KEY, "never", None)]);
                client.txn(never).await.is_ok()
            }
        });
        let answered = futures::future::join_all(sent)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count();
        tracing::info!(
            client = %self.name,
            %leader,
            sent = self.requests,
            answered,
            "piled writes on a cut-off leader"
        );
        Ok(())
    }
}
