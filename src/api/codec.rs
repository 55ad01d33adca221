//! The protobuf codec of every gRPC service and client generated from our `.proto`
//! files (build.rs names it): prost's, except that a message's buffer is sized once.
//!
//! tonic starts each message in an 8 KiB buffer, and prost's `encode` writes into
//! whatever room there is, so a 270 KiB Range response of 1 000 keys grew its buffer by
//! doubling, copying itself six times (issue 20: 4% of the members' CPU during ranges
//! of 1 000 keys). Here the encoder reserves the message's encoded length first, which
//! it must compute anyway. Decoding is prost's own. This module must not change a byte
//! on the wire: every e2e test's real clients (etcdctl, etcd-client, the Python
//! clients) talk through it. (tonic keeps `EncodeBuf`'s constructor to itself, so no
//! unit test can call the encoder alone.)

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder};

/// [`ProstCodec`] with an encoder that sizes each message's buffer once.
#[derive(Debug, Clone, Default)]
pub struct PresizedCodec<T, U> {
    decoding: ProstCodec<T, U>,
}

impl<T, U> Codec for PresizedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = PresizedEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        PresizedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        self.decoding.decoder()
    }
}

/// Reserves a message's encoded length, then writes it.
#[derive(Debug, Clone, Default)]
pub struct PresizedEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for PresizedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        // `encode_raw` rather than `encode`, which would compute the length again only
        // to check the room reserved above.
        item.encode_raw(buf);
        Ok(())
    }
}
