//! `quantykube.admin.v1.Member` as a hand-written prost message that keeps the fields
//! it does not know (the style guide's section 3.4: a client built against a newer
//! schema must not lose data by round-tripping through this server). prost's derived
//! messages drop unknown fields on decode, so build.rs maps the proto's Member here
//! (`extern_path`) and every generated request and response carries this type.
//!
//! Known fields are encoded exactly as prost would encode the .proto's Member (a test
//! checks that against the descriptor); unknown fields are kept as their encoded bytes
//! and written back after the known ones. Groups (proto2's deprecated wire types) are
//! skipped, not kept.

// Hand-written: linted as the rest of the crate is, unlike the generated code around it.
#![warn(clippy::all)]

use bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

use super::{MemberStatus, ResourceMetadata};

const METADATA: u32 = 1;
const PEER_URLS: u32 = 2;
const STATUS: u32 = 3;

/// One member of the cluster (see member.proto for the fields' meaning).
#[derive(Clone, PartialEq, Eq, Hash, Default, Debug)]
pub struct Member {
    pub metadata: Option<ResourceMetadata>,
    pub peer_urls: Vec<String>,
    pub status: Option<MemberStatus>,
    /// Fields this schema does not know, encoded as they came.
    pub unknown_fields: Vec<u8>,
}

impl prost::Message for Member {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(metadata) = &self.metadata {
            encoding::message::encode(METADATA, metadata, buf);
        }
        encoding::string::encode_repeated(PEER_URLS, &self.peer_urls, buf);
        if let Some(status) = &self.status {
            encoding::message::encode(STATUS, status, buf);
        }
        buf.put_slice(&self.unknown_fields);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            METADATA => encoding::message::merge(
                wire_type,
                self.metadata.get_or_insert_with(Default::default),
                buf,
                ctx,
            ),
            PEER_URLS => encoding::string::merge_repeated(wire_type, &mut self.peer_urls, buf, ctx),
            STATUS => encoding::message::merge(
                wire_type,
                self.status.get_or_insert_with(Default::default),
                buf,
                ctx,
            ),
            _ => keep_unknown(&mut self.unknown_fields, tag, wire_type, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.metadata
            .as_ref()
            .map_or(0, |m| encoding::message::encoded_len(METADATA, m))
            + encoding::string::encoded_len_repeated(PEER_URLS, &self.peer_urls)
            + self
                .status
                .as_ref()
                .map_or(0, |s| encoding::message::encoded_len(STATUS, s))
            + self.unknown_fields.len()
    }

    fn clear(&mut self) {
        *self = Member::default();
    }
}

/// Appends the field at `buf` (its key already read) to `unknown`, encoded.
fn keep_unknown(
    unknown: &mut Vec<u8>,
    tag: u32,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    match wire_type {
        WireType::Varint => {
            let value = encoding::decode_varint(buf)?;
            encoding::encode_key(tag, wire_type, unknown);
            encoding::encode_varint(value, unknown);
        }
        WireType::SixtyFourBit => {
            let mut value = 0u64;
            encoding::fixed64::merge(wire_type, &mut value, buf, ctx)?;
            encoding::fixed64::encode(tag, &value, unknown);
        }
        WireType::ThirtyTwoBit => {
            let mut value = 0u32;
            encoding::fixed32::merge(wire_type, &mut value, buf, ctx)?;
            encoding::fixed32::encode(tag, &value, unknown);
        }
        WireType::LengthDelimited => {
            let mut value: Vec<u8> = Vec::new();
            encoding::bytes::merge(wire_type, &mut value, buf, ctx)?;
            encoding::bytes::encode(tag, &value, unknown);
        }
        WireType::StartGroup | WireType::EndGroup => {
            encoding::skip_field(wire_type, tag, buf, ctx)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use prost_reflect::{DynamicMessage, Value};

    fn sample() -> Member {
        Member {
            metadata: Some(ResourceMetadata {
                name: "m1".into(),
                uid: "u".into(),
                version: 7,
                ..Default::default()
            }),
            peer_urls: vec!["http://a:2380".into(), "http://b:2380".into()],
            status: Some(MemberStatus {
                id: 42,
                leader: true,
                ..Default::default()
            }),
            unknown_fields: Vec::new(),
        }
    }

    #[test]
    fn known_fields_are_the_protos() {
        let descriptor = crate::proto::descriptors()
            .get_message_by_name("quantykube.admin.v1.Member")
            .expect("Member's descriptor");
        let bytes = sample().encode_to_vec();
        let dynamic = DynamicMessage::decode(descriptor, bytes.as_slice()).expect("decodes");
        assert_eq!(dynamic.unknown_fields().count(), 0);
        let urls = dynamic.get_field_by_name("peer_urls").expect("peer_urls");
        assert_eq!(
            *urls,
            Value::List(vec![
                Value::String("http://a:2380".into()),
                Value::String("http://b:2380".into())
            ])
        );
        assert_eq!(
            dynamic.encode_to_vec(),
            bytes,
            "byte for byte as prost encodes it"
        );
        assert_eq!(Member::decode(bytes.as_slice()).expect("decodes"), sample());
    }

    #[test]
    fn unknown_fields_round_trip() {
        let mut newer = sample().encode_to_vec();
        // Fields 20 (varint), 21 (string), 22 (fixed64), 23 (fixed32) of a newer schema.
        encoding::uint64::encode(20, &300, &mut newer);
        encoding::string::encode(21, &"new".to_string(), &mut newer);
        encoding::fixed64::encode(22, &9, &mut newer);
        encoding::fixed32::encode(23, &5, &mut newer);
        let member = Member::decode(newer.as_slice()).expect("decodes");
        assert_eq!(member.peer_urls, sample().peer_urls);
        assert!(!member.unknown_fields.is_empty());
        assert_eq!(member.encode_to_vec(), newer, "written back as they came");
        let truncated = &newer[..newer.len() - 2];
        assert!(Member::decode(truncated).is_err());
    }
}
