//! stagger's gRPC retries held to gRPC's own (issue 28): a reference server on gRPC's C-core (Python's
//! grpcio, `tests/grpc_reference/server.py`) that fails, delays and streams as each call's metadata
//! says and logs every call as it arrives, and C-core's own client with its retries (A6) on
//! (`tests/grpc_reference/client.py`), run on the same server beside stagger's tonic client in each
//! scenario. Without python3 or grpcio a test is reported `ignored (<what is missing>)` by this
//! suite's own harness (`tests/common/harness.rs`), unless `CI=true`, where it fails (`.ci/run`
//! installs grpcio). Each scenario prints its row of the table
//! of `docs/grpc.md`: `cargo test --features tonic --test grpc_reference -- --nocapture`.
#![cfg(feature = "tonic")]

#[path = "common/harness.rs"]
mod harness;
#[path = "grpc_reference/reference.rs"]
mod reference;

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use http_body_util::BodyExt;
use reference::{CCoreCall, Reference, c_core_call, fresh_id};
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

use reference::Need::Grpcio;

fn main() -> std::process::ExitCode {
    harness::run(trials![reference::missing;
        async scenarios::a_stream_longer_than_the_attempt_timeout_is_not_cut [Grpcio];
        async scenarios::the_caller_s_deadline_ends_the_call [Grpcio];
        async scenarios::a_pushback_is_a_floor_and_the_attempts_are_c_core_s [Grpcio];
        async scenarios::a_request_over_the_server_s_limit_is_sent_once [Grpcio];
        async scenarios::an_opted_out_method_behind_a_path_prefix_is_sent_once [Grpcio];
        async scenarios::a_timed_out_attempt_of_an_idempotent_method_is_retried [Grpcio];
        async scenarios::a_stream_failing_after_messages_is_not_retried [Grpcio];
        async smoke::c_core_retries_a_unary_call_that_fails_twice [Grpcio];
        async smoke::a_tonic_client_sees_the_reference_server_fail_and_stream [Grpcio];
        async smoke::c_core_refuses_a_5_mib_request_with_resource_exhausted [Grpcio];
    ])
}
