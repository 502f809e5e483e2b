//! stagger's gRPC retries held to gRPC's own (issue 28): a reference server on gRPC's C-core (Python's
//! grpcio, `tests/grpc_reference/server.py`) that fails, delays and streams as each call's metadata
//! says and logs every call as it arrives, and C-core's own client with its retries (A6) on
//! (`tests/grpc_reference/client.py`), run on the same server beside stagger's tonic client in each
//! scenario. Without python3 or grpcio a test prints `SKIP <test>: <why>` and passes, unless
//! `CI=true`, where it fails (`.ci/run` installs grpcio). Each scenario prints its row of the table
//! of `docs/grpc.md`: `cargo test --features tonic --test grpc_reference -- --nocapture`.
#![cfg(feature = "tonic")]

#[path = "grpc_reference/harness.rs"]
mod harness;

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use harness::{CCoreCall, Reference, c_core_call, fresh_id};
use http::uri::PathAndQuery;
use http_body_util::BodyExt;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tower::{Service, ServiceExt};

/// Messages as raw bytes: the reference server has no protobuf.
#[derive(Debug, Clone, Copy, Default)]
struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> Self::Encoder {
        *self
    }

    fn decoder(&mut self) -> Self::Decoder {
        *self
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

fn channel(reference: &Reference) -> Channel {
    Endpoint::from_shared(reference.url())
        .unwrap()
        .connect_lazy()
}

/// A request carrying `x-id` and `meta` as metadata.
fn request(id: &str, meta: &[(&'static str, &str)]) -> tonic::Request<Bytes> {
    let mut request = tonic::Request::new(Bytes::new());
    request.metadata_mut().insert("x-id", id.parse().unwrap());
    for (key, value) in meta {
        request.metadata_mut().insert(*key, value.parse().unwrap());
    }
    request
}

#[path = "grpc_reference/scenarios.rs"]
mod scenarios;
#[path = "grpc_reference/smoke.rs"]
mod smoke;
