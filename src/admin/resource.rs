//! The Member resource as the API shows it, built from a current record, what the
//! cluster describes and the member's status.

use crate::proto::admin_v1::{Member, MemberStatus, ResourceMetadata};

use super::records::CurrentMember;

/// `member` as a resource, with `status`.
pub fn member(member: &CurrentMember, mut status: MemberStatus) -> Member {
    let record = &member.record;
    Member {
        metadata: Some(ResourceMetadata {
            atespace: String::new(),
            name: record.name.clone(),
            uid: record.uid.clone(),
            version: record.version,
            create_time: Some(timestamp(record.create_time_unix_nanos)),
            update_time: Some(timestamp(record.update_time_unix_nanos)),
        }),
        peer_urls: record.peer_urls.clone(),
        status: Some({
            status.client_urls = record.client_urls.clone();
            status
        }),
        unknown_fields: record.unknown_fields.to_vec(),
    }
}

pub(super) fn timestamp(unix_nanos: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix_nanos.div_euclid(1_000_000_000),
        nanos: i32::try_from(unix_nanos.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}
