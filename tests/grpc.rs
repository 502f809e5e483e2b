//! gRPC.
