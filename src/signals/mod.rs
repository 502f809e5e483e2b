//! What a server says, parsed, with no policy: `Retry-After` and the other delay headers, the
//! rate-limit headers, HTTP dates and structured field values; gRPC's pushback and `grpc-timeout`.

pub(crate) mod grpc;
pub(crate) mod http_date;
pub(crate) mod retry_after;
pub(crate) mod server_delay;
pub(crate) mod sfv;
