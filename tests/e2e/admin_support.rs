//! Helpers of the admin API tests: a client of one member, ObjectRefs, and the check
//! of a refusal's code and the field its message names.

#![allow(dead_code)]

use quantykube::proto::admin_v1::admin_client::AdminClient;
use quantykube::proto::admin_v1::ObjectRef;
use tonic::transport::Channel;
use tonic::Code;

use crate::harness::{Cluster, Target};

/// True (after saying why) when the target is etcd, which has no admin API.
pub fn etcd_has_none(what: &str) -> bool {
    if Target::from_env() == Target::Etcd {
        eprintln!("skipped against etcd 3.4: {what} is QuantyKube's own admin API");
        return true;
    }
    false
}

/// The admin API of member `i`.
pub async fn admin(cluster: &Cluster, i: usize) -> AdminClient<Channel> {
    AdminClient::new(crate::raw::channel(&cluster.endpoint(i)).await)
}

/// A reference to the global-scoped resource `name`.
pub fn named(name: &str) -> Option<ObjectRef> {
    Some(ObjectRef {
        atespace: String::new(),
        name: name.into(),
    })
}

/// Asserts a refusal with `code` whose message contains `text` (the field it names).
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(result: Result<T, tonic::Status>, code: Code, text: &str) {
    match result {
        Err(status) => {
            assert_eq!(status.code(), code, "{status:?}");
            assert!(
                status.message().contains(text),
                "{status:?} should say {text:?}"
            );
        }
        Ok(answer) => panic!("expected {code:?}, got {answer:?}"),
    }
}
