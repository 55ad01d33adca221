//! Why a simulation step failed: the harness's one error type.
//!
//! This module owns [`SimError`]. A violation of a checked property is not an error
//! here; it is a [`crate::violation::Violation`].

/// Something in the harness (not the system under test) went wrong, or a simulated
/// member could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("no node named {0:?} in this cluster")]
    UnknownNode(String),
    #[error("invalid cluster: {0}")]
    Invalid(String),
    #[error("member configuration: {0}")]
    Config(String),
    #[error("member stopped: {0}")]
    Node(#[from] quantykube::server::ServerError),
    #[error("member {0} stopped serving without being asked to")]
    Stopped(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("etcd client: {0}")]
    Client(#[from] etcd_client::Error),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("simulation: {0}")]
    Simulation(String),
}
