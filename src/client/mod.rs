//! The client library: how QuantyKube's own commands reach an etcd v3 endpoint
//! (QuantyKube's or etcd's) as etcdctl would. `quantykube bench`, `quantykube admin`,
//! `quantykube snapshot save` and `quantykube pod` all use it.
//!
//! It owns, each in one file:
//! - [`endpoints`]: `--endpoints` syntax, and so which endpoints use TLS;
//! - [`dial`]: connection settings (dial and request timeouts), lazy channels and the
//!   connected channel of a single-member command;
//! - [`tls`]: the TLS flags (`--cacert`, `--cert`, `--key`,
//!   `--insecure-skip-tls-verify`), their files read and checked once;
//! - [`auth`]: `--user NAME:PASSWORD` (its clap parser), the token of a connection and
//!   the channel wrapper that sends it and authenticates again when it expired;
//! - [`error`]: [`ClientError`], worded for people.
//!
//! It sits beside the server's edges, not on top of them: it talks to a server only
//! through the generated API clients of [`crate::proto`], and may use only the layer
//! below the server (`proto`, `config`, `transport`, `identity`). It must never import a
//! server-side module (`node`, `api`, `admin`, `http`, `membership`, `store`, `auth`,
//! ...), nor a command that uses it (`bench`, `backup`, `pod`); and it must never print,
//! log or put into an error a password or a token.

pub mod auth;
pub mod dial;
pub mod endpoints;
pub mod error;
pub mod tls;

pub use self::auth::{AuthChannel, Credentials, Session, UserError, UserParser};
pub use self::dial::{dial, endpoint, Settings};
pub use self::error::{code_name, AuthFailed, ClientError};
pub use self::tls::{ClientTls, TlsFiles};
